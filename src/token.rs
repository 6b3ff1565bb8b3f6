//! A token as a lock keeps it. Pure Rust, no FFI.
//!
//! Every server-made token is 32 lowercase hexadecimal digits: kept as the 16 bytes they
//! spell, inside the lock's own value, a string of 32 bytes (and the allocation it
//! needs) is saved on every such lock. A caller's token of the same form is kept the same
//! way, since the spelling is one-to-one; any other token is kept as given.

use std::ops::Deref;

const HEX: &[u8; 16] = b"0123456789abcdef";

fn digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

/// The 16 bytes that 32 lowercase hexadecimal digits spell; `None` for any other token.
pub fn packed(text: &[u8]) -> Option<[u8; 16]> {
    if text.len() != 32 {
        return None;
    }
    let mut bytes = [0u8; 16];
    for (byte, pair) in bytes.iter_mut().zip(text.chunks_exact(2)) {
        *byte = (digit(pair[0])? << 4) | digit(pair[1])?;
    }
    Some(bytes)
}

/// 16 bytes spelled as 32 lowercase hexadecimal digits.
pub fn spelled(bytes: &[u8; 16]) -> [u8; 32] {
    let mut text = [0u8; 32];
    for (pair, byte) in text.chunks_exact_mut(2).zip(bytes) {
        pair[0] = HEX[usize::from(byte >> 4)];
        pair[1] = HEX[usize::from(byte & 0xf)];
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
