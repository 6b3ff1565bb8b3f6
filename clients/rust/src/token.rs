//! Lock tokens made on the client.

use rand::TryRng;
use rand::rngs::SysRng;

/// A new random token: 128 bits from the operating system's secure generator, as 32
/// lowercase hexadecimal characters (the same form the server uses for its own).
///
/// The guards always send a token of their own (this one unless you gave one): if the
/// reply to an acquire is lost, the client still knows the token and can release the
/// lock, or retry the acquire, which the module treats as idempotent.
///
/// Straight from the system (`getrandom`), not from a generator seeded once in this
/// process: a child forked after a lock was taken would otherwise make the same tokens
/// as its parent, and two processes would each hold the other's lock. Only when the
/// system refuses does it fall back to the thread's generator.
pub fn new_token() -> Vec<u8> {
    let mut bytes = [0u8; 16];
    if SysRng.try_fill_bytes(&mut bytes).is_err() {
        rand::fill(&mut bytes);
    }
    bytes
        .iter()
        .flat_map(|b| {
            let hex = b"0123456789abcdef";
            [hex[usize::from(b >> 4)], hex[usize::from(b & 0xf)]]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_32_lowercase_hex_characters_and_differ() {
        let a = new_token();
        let b = new_token();
        assert_eq!(a.len(), 32);
        assert!(
            a.iter()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
        );
        assert_ne!(a, b);
    }
}
