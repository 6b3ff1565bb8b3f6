//! The lock's state and its rules: pure Rust, no FFI.
//!
//! The key's expiry is the server's own; it is not stored here. What a key holds is the
//! token that proves ownership, the fence granted with it, when it was granted and, for a
//! session-bound lock, the connection it is bound to.

/// The value of a lock key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockState {
    /// The secret that proves ownership; never shown to anyone but the holder. A boxed
    /// slice, not a `Vec`: no spare capacity, and 16 bytes less per lock.
    pub token: Box<[u8]>,
    /// The fencing token of this grant.
    pub fence: u64,
    /// Unix time in ms when the lock was granted.
    pub acquired_ms: i64,
    /// The connection the lock is bound to (`SESSION grace-ms`), if any. Boxed: a plain
    /// lock pays one pointer for it, not the whole binding.
    pub session: Option<Box<Session>>,
}

/// A lock's binding to its holder's connection: when that connection closes, the lock is
/// released `grace_ms` later unless its holder reclaims it first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Session {
    /// How long the lock outlives its connection, in ms (Chubby's lock-delay).
    pub grace_ms: i64,
    /// The server's id of the bound connection; 0 when the lock came from elsewhere (a
    /// restart, a master, another server) and so has no connection here.
    pub client: u64,
}

impl LockState {
    /// The grace of a session-bound lock, `None` for a plain one.
    pub fn grace_ms(&self) -> Option<i64> {
        self.session.as_ref().map(|s| s.grace_ms)
    }
}

/// What an acquire does, given what the key holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcquireDecision {
    /// The lock is free and nobody is queued ahead: grant it with a new fence.
    Grant,
    /// The caller's token already holds the lock: reset its TTL, keep its fence.
    Renew,
    /// Held by another token, or free while waiters that came first are queued.
    Busy,
}

/// Decides an acquire. `held` is the current lock on the key, if any; `token` the
/// caller's own token, if it gave one; `queued` whether waiters are ahead of the caller
/// (a newcomer never jumps the queue, even onto a key that has just expired).
pub fn decide(held: Option<&LockState>, token: Option<&[u8]>, queued: bool) -> AcquireDecision {
    match held {
        Some(lock) if token == Some(&*lock.token) => AcquireDecision::Renew,
        Some(_) => AcquireDecision::Busy,
        None if queued => AcquireDecision::Busy,
        None => AcquireDecision::Grant,
    }
}

/// Whether `token` holds `held`: the only test that release and extend apply.
pub fn is_held_by(held: Option<&LockState>, token: &[u8]) -> bool {
    held.is_some_and(|lock| *lock.token == *token)
}

/// A server-made token: 128 bits from a cryptographically secure generator (the
/// thread-local ChaCha12 generator, seeded and reseeded from the operating system),
/// written as 32 lowercase hexadecimal characters.
pub fn new_token() -> Vec<u8> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut bytes = [0u8; 16];
    rand::fill(&mut bytes);
    bytes
        .iter()
        .flat_map(|byte| [HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0xf)]])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(token: &[u8]) -> LockState {
        LockState {
            token: token.into(),
            fence: 7,
            acquired_ms: 1,
            session: None,
        }
    }

    #[test]
    fn a_free_lock_is_granted_unless_waiters_are_queued() {
        assert_eq!(decide(None, None, false), AcquireDecision::Grant);
        assert_eq!(decide(None, Some(b"t"), false), AcquireDecision::Grant);
        assert_eq!(decide(None, Some(b"t"), true), AcquireDecision::Busy);
    }

    #[test]
    fn the_holder_renews_and_others_are_busy() {
        let lock = held(b"mine");
        assert_eq!(
            decide(Some(&lock), Some(b"mine"), false),
            AcquireDecision::Renew
        );
        assert_eq!(
            decide(Some(&lock), Some(b"mine"), true),
            AcquireDecision::Renew
        );
        assert_eq!(
            decide(Some(&lock), Some(b"other"), false),
            AcquireDecision::Busy
        );
        assert_eq!(decide(Some(&lock), None, false), AcquireDecision::Busy);
    }

    #[test]
    fn only_the_exact_token_holds() {
        let lock = held(b"mine");
        assert!(is_held_by(Some(&lock), b"mine"));
        assert!(!is_held_by(Some(&lock), b"min"));
        assert!(!is_held_by(Some(&lock), b"mine\0"));
        assert!(!is_held_by(None, b"mine"));
    }

    #[test]
    fn server_tokens_are_32_lowercase_hex_and_differ() {
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
