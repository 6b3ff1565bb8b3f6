//! A token as a lock keeps it. Pure Rust, no FFI.
//!
//! Every server-made token is 32 lowercase hexadecimal digits: kept as the 16 bytes they
//! spell, inside the lock's own value, a string of 32 bytes (and the allocation it
//! needs) is saved on every such lock. A caller's token of the same form is kept the same
//! way, since the spelling is one-to-one; any other token is kept as given.

use std::ops::Deref;

/// One byte of each lane of a `u64`, and the high bit of each.
const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;
/// The low byte of each 16-bit lane.
const LOW_BYTES: u64 = 0x00ff_00ff_00ff_00ff;

/// The 4 bytes that 8 lowercase hexadecimal digits spell (read little-endian from `x`),
/// all eight checked and converted at once; `None` if any is not such a digit. Every
/// release and extend of a lock with a packed token, and every acquire with such a
/// `TOKEN`, reads one: a digit at a time it cost about 300 instructions a token.
fn unhex8(x: u64) -> Option<u32> {
    // No byte at 0x80 or above, so that no sum below carries into the next byte.
    if x & HIGH != 0 {
        return None;
    }
    // A byte's high bit after adding: set from 0x30 ('0'), from 0x3a (past '9'), from 0x61
    // ('a'), from 0x67 (past 'f').
    let digit = x.wrapping_add(ONES * 0x50) & !x.wrapping_add(ONES * 0x46);
    let letter = x.wrapping_add(ONES * 0x1f) & !x.wrapping_add(ONES * 0x19);
    if (digit | letter) & HIGH != HIGH {
        return None;
    }
    // '0'-'9' are 0x30-0x39 and 'a'-'f' 0x61-0x66: the low nibble, plus 9 for a letter.
    let values = (x & (ONES * 0x0f)) + ((x >> 6) & ONES) * 9;
    // Each pair of digits into one byte (the first digit is the high nibble), then the
    // four bytes side by side.
    let pairs = ((values & LOW_BYTES) << 4) | ((values >> 8) & LOW_BYTES);
    let pairs = (pairs | (pairs >> 8)) & 0x0000_ffff_0000_ffff;
    Some((pairs | (pairs >> 16)) as u32)
}

/// The 8 lowercase hexadecimal digits that the 4 bytes of `x` (little-endian) spell, as
/// the little-endian bytes of a `u64`.
fn hex8(x: u32) -> u64 {
    // Each byte into a 16-bit lane, then its high nibble in the lane's low byte and its
    // low nibble in the high byte: the order the digits are written in.
    let lanes = u64::from(x);
    let lanes = (lanes | (lanes << 16)) & 0x0000_ffff_0000_ffff;
    let lanes = (lanes | (lanes << 8)) & LOW_BYTES;
    let nibbles = ((lanes >> 4) & (ONES * 0x0f) & LOW_BYTES) | ((lanes & (ONES * 0x0f)) << 8);
    // '0' + n, and 39 more for n of 10 or more ('a' is '0' + 49).
    let letters = ((nibbles + ONES * 0x76) & HIGH) >> 7;
    nibbles + ONES * 0x30 + letters * 39
}

/// The 16 bytes that 32 lowercase hexadecimal digits spell; `None` for any other token.
pub fn packed(text: &[u8]) -> Option<[u8; 16]> {
    let text: &[u8; 32] = text.try_into().ok()?;
    let eight = |at: usize| {
        let mut word = [0u8; 8];
        word.copy_from_slice(&text[at..at + 8]);
        unhex8(u64::from_le_bytes(word))
    };
    let words = [eight(0)?, eight(8)?, eight(16)?, eight(24)?];
    let mut bytes = [0u8; 16];
    for (four, word) in bytes.chunks_exact_mut(4).zip(words) {
        four.copy_from_slice(&word.to_le_bytes());
    }
    Some(bytes)
}

/// 16 bytes spelled as 32 lowercase hexadecimal digits.
pub fn spelled(bytes: &[u8; 16]) -> [u8; 32] {
    let four =
        |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let words = [hex8(four(0)), hex8(four(4)), hex8(four(8)), hex8(four(12))];
    let mut text = [0u8; 32];
    for (eight, word) in text.chunks_exact_mut(8).zip(words) {
        eight.copy_from_slice(&word.to_le_bytes());
    }
    text
}

/// A lock's token, to read: spelled out from its packed form, or the bytes kept.
#[derive(Debug, Clone, Copy)]
pub enum TokenText<'a> {
    Spelled([u8; 32]),
    Kept(&'a [u8]),
}

impl Deref for TokenText<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            TokenText::Spelled(text) => text,
            TokenText::Kept(bytes) => bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowercase_hex_of_32_digits_packs_and_spells_back_the_same() {
        let text = b"0123456789abcdef00ff10e0a5b4c3d2";
        let bytes = packed(text).expect("packs");
        assert_eq!(bytes[0], 0x01);
        assert_eq!(bytes[15], 0xd2);
        assert_eq!(&spelled(&bytes), text);
    }

    /// A digit at a time, as the module first did: what the lane-wise code must match.
    fn packed_slowly(text: &[u8]) -> Option<[u8; 16]> {
        let digit = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        if text.len() != 32 {
            return None;
        }
        let mut bytes = [0u8; 16];
        for (byte, pair) in bytes.iter_mut().zip(text.chunks_exact(2)) {
            *byte = (digit(pair[0])? << 4) | digit(pair[1])?;
        }
        Some(bytes)
    }

    #[test]
    fn every_byte_in_every_place_packs_as_a_digit_at_a_time_would() {
        let base = *b"0123456789abcdef00ff10e0a5b4c3d2";
        for place in 0..32 {
            for byte in 0..=255u8 {
                let mut text = base;
                text[place] = byte;
                assert_eq!(
                    packed(&text),
                    packed_slowly(&text),
                    "{byte:#04x} at {place}"
                );
            }
        }
    }

    #[test]
    fn every_byte_value_spells_and_packs_back() {
        for first in 0..=255u8 {
            let mut bytes = [0u8; 16];
            for (i, b) in bytes.iter_mut().enumerate() {
                *b = first.wrapping_add((i * 37) as u8);
            }
            let text = spelled(&bytes);
            let expected: Vec<u8> = bytes
                .iter()
                .flat_map(|b| format!("{b:02x}").into_bytes())
                .collect();
            assert_eq!(&text[..], &expected[..]);
            assert_eq!(packed(&text), Some(bytes));
        }
    }

    #[test]
    fn every_other_token_is_not_packed() {
        for text in [
            &b"0123456789ABCDEF0123456789abcdef"[..],
            b"0123456789abcdef0123456789abcde",
            b"0123456789abcdef0123456789abcdef0",
            b"0123456789abcdef0123456789abcdeg",
            b"",
            b"mine",
        ] {
            assert_eq!(packed(text), None, "{text:?}");
        }
    }
}
