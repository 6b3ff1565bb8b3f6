//! The state of a lock: pure Rust, no FFI. (Who may be granted it is `rules.rs`.)
//!
//! The key's expiry is the server's own; it is not stored here. What a key holds is the
//! token that proves ownership, the fence granted with it, when it was granted and, for a
//! session-bound lock, the connection it is bound to.

use crate::fence::MAX_FENCE;
use crate::limits::MAX_TOKEN_LEN;
use crate::token::{self, TokenText};

/// The value of a lock key: 32 bytes, with a server-made token (or any token of 32
/// lowercase hexadecimal digits) packed inside it: one allocation for the whole lock, in
/// the allocator's 32-byte class. Any other token, and the token of a session-bound
/// lock, is kept in an allocation of its own, the binding after the token, which the top
/// bit of the fence word announces (fences stay below 2^53).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockState {
    /// The token (the secret that proves ownership; never shown to anyone but the
    /// holder), its binding, and the grant's fence and time.
    store: Store,
}

/// How a lock keeps its token; one form for each token and binding, so that equal locks
/// compare equal. Every form carries the grant's fence and time as well: inside the
/// enum, the time's seven bytes share a word with the enum's tag, and the whole lock is
/// 32 bytes, where a separate tag would make it 40 (48 allocated).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Store {
    /// 32 lowercase hexadecimal digits, as the 16 bytes they spell.
    Packed {
        acquired: Millis,
        fence_word: u64,
        bytes: [u8; 16],
    },
    /// The same, session-bound: the 16 bytes, then the binding.
    PackedBound {
        acquired: Millis,
        fence_word: u64,
        both: Box<[u8; 16 + SESSION_BYTES]>,
    },
    /// Any other token, followed by the binding when bound. A boxed slice, not a `Vec`:
    /// no spare capacity.
    Kept {
        acquired: Millis,
        fence_word: u64,
        data: Box<[u8]>,
    },
}

/// What a lock keeps its token in, before the grant's fence and time join it.
enum Keep {
    Packed([u8; 16]),
    PackedBound(Box<[u8; 16 + SESSION_BYTES]>),
    Kept(Box<[u8]>),
}

/// A grant time in seven bytes, little-endian: times stay within 0 to `MAX_TIME_MS`
/// (2^53 - 1), which needs 53 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Millis([u8; 7]);

impl Millis {
    fn new(ms: i64) -> Self {
        let bytes = ms.clamp(0, MAX_TIME_MS).to_le_bytes();
        let mut kept = [0u8; 7];
        kept.copy_from_slice(&bytes[..7]);
        Millis(kept)
    }

    fn get(self) -> i64 {
        let mut bytes = [0u8; 8];
        bytes[..7].copy_from_slice(&self.0);
        i64::from_le_bytes(bytes)
    }
}

/// The binding's bytes: the grace, then the connection id.
fn binding_bytes(session: Session) -> [u8; SESSION_BYTES] {
    let mut bytes = [0u8; SESSION_BYTES];
    bytes[..8].copy_from_slice(&session.grace_ms.to_le_bytes());
    bytes[8..].copy_from_slice(&session.client.to_le_bytes());
    bytes
}

/// Where a packed token `bytes`, bound as `session`, is kept.
fn packed_keep(bytes: [u8; 16], session: Option<Session>) -> Keep {
    match session {
        None => Keep::Packed(bytes),
        Some(session) => {
            let mut both = [0u8; 16 + SESSION_BYTES];
            both[..16].copy_from_slice(&bytes);
            both[16..].copy_from_slice(&binding_bytes(session));
            Keep::PackedBound(Box::new(both))
        }
    }
}

/// Marks a session-bound lock in `LockState::fence_word`.
const SESSION_BIT: u64 = 1 << 63;
/// Bytes of a binding after the token: the grace, then the connection id.
const SESSION_BYTES: usize = 16;

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
    /// A lock held by `token`, granted with `fence` at `acquired_ms`, bound as `session`.
    /// A token made by [`token_buffer`] for a session-bound lock has room for the
    /// binding already: one allocation for the token either way.
    pub fn new(mut token: Vec<u8>, fence: u64, acquired_ms: i64, session: Option<Session>) -> Self {
        let store = match (token::packed(&token), session) {
            (Some(bytes), _) => packed_keep(bytes, session),
            (None, None) => Keep::Kept(token.into_boxed_slice()),
            (None, Some(session)) => {
                token.reserve_exact(SESSION_BYTES);
                token.extend_from_slice(&binding_bytes(session));
                Keep::Kept(token.into_boxed_slice())
            }
        };
        LockState::with_keep(store, fence, acquired_ms, session.is_some())
    }

    fn with_keep(keep: Keep, fence: u64, acquired_ms: i64, bound: bool) -> Self {
        let session_bit = if bound { SESSION_BIT } else { 0 };
        let fence_word = (fence & !SESSION_BIT) | session_bit;
        let acquired = Millis::new(acquired_ms);
        let store = match keep {
            Keep::Packed(bytes) => Store::Packed {
                acquired,
                fence_word,
                bytes,
            },
            Keep::PackedBound(both) => Store::PackedBound {
                acquired,
                fence_word,
                both,
            },
            Keep::Kept(data) => Store::Kept {
                acquired,
                fence_word,
                data,
            },
        };
        LockState { store }
    }

    /// The grant's fence word and time, which every form of the store carries.
    fn stamp(&self) -> (u64, Millis) {
        match &self.store {
            Store::Packed {
                acquired,
                fence_word,
                ..
            }
            | Store::PackedBound {
                acquired,
                fence_word,
                ..
            }
            | Store::Kept {
                acquired,
                fence_word,
                ..
            } => (*fence_word, *acquired),
        }
    }

    /// The token that holds the lock.
    pub fn token(&self) -> TokenText<'_> {
        match &self.store {
            Store::Packed { bytes, .. } => TokenText::Spelled(token::spelled(bytes)),
            Store::PackedBound { both, .. } => TokenText::Spelled(token::spelled(&first_16(both))),
            Store::Kept { data, .. } => {
                let end = data.len() - if self.is_bound() { SESSION_BYTES } else { 0 };
                TokenText::Kept(&data[..end])
            }
        }
    }

    /// Whether `token` is the one that holds the lock.
    pub fn holds(&self, token: &[u8]) -> bool {
        match &self.store {
            Store::Packed { bytes, .. } => {
                token::packed(token).is_some_and(|given| given == *bytes)
            }
            Store::PackedBound { both, .. } => {
                token::packed(token).is_some_and(|given| given == first_16(both))
            }
            Store::Kept { .. } => *self.token() == *token,
        }
    }

    /// The fence of this grant.
    pub fn fence(&self) -> u64 {
        self.stamp().0 & !SESSION_BIT
    }

    /// Unix time in ms when the lock was granted.
    pub fn acquired_ms(&self) -> i64 {
        self.stamp().1.get()
    }

    fn is_bound(&self) -> bool {
        self.stamp().0 & SESSION_BIT != 0
    }

    /// The connection the lock is bound to (`SESSION grace-ms`), if any.
    pub fn session(&self) -> Option<Session> {
        let data: &[u8] = match &self.store {
            Store::Kept { data, .. } if self.is_bound() => data,
            Store::PackedBound { both, .. } => &both[..],
            _ => return None,
        };
        let binding = &data[data.len() - SESSION_BYTES..];
        let (grace, client) = binding.split_at(8);
        Some(Session {
            grace_ms: i64::from_le_bytes(grace.try_into().ok()?),
            client: u64::from_le_bytes(client.try_into().ok()?),
        })
    }

    /// The grace of a session-bound lock, `None` for a plain one.
    pub fn grace_ms(&self) -> Option<i64> {
        self.session().map(|s| s.grace_ms)
    }

    /// Binds the lock as `session`, or unbinds it (`None`).
    pub fn set_session(&mut self, session: Option<Session>) {
        if session.is_none() && !self.is_bound() {
            // A plain lock stays as it is: no allocation on the common path.
            return;
        }
        let mut text = Vec::with_capacity(self.token().len() + SESSION_BYTES);
        text.extend_from_slice(&self.token());
        *self = LockState::new(text, self.fence(), self.acquired_ms(), session);
    }

    /// The bytes the lock keeps on the heap: its token and binding, unless the token is
    /// packed inside the value.
    pub fn heap_bytes(&self) -> usize {
        match &self.store {
            Store::Packed { .. } => 0,
            Store::PackedBound { both, .. } => both.len(),
            Store::Kept { data, .. } => data.len(),
        }
    }

    /// The start of the allocation the lock keeps on the heap (see `heap_bytes`), if it
    /// keeps one: what the allocator really set aside for it is asked of the allocator.
    pub fn heap_start(&self) -> Option<*const u8> {
        match &self.store {
            Store::Packed { .. } => None,
            Store::PackedBound { both, .. } => Some(both.as_ptr()),
            // A token is never empty, so the slice is a real allocation.
            Store::Kept { data, .. } => (!data.is_empty()).then_some(data.as_ptr()),
        }
    }
}

/// The packed token of a bound lock's store.
fn first_16(both: &[u8; 16 + SESSION_BYTES]) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&both[..16]);
    bytes
}

/// The token a new grant holds: one the server makes (128 random bits, kept packed and
/// spelled as 32 lowercase hexadecimal digits only when read), or the caller's own, in a
/// buffer that may have room for a binding already.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NewToken {
    Made([u8; 16]),
    Given(Vec<u8>),
}

impl NewToken {
    /// The token for a grant: the caller's own (with room for a binding when `bound`), or
    /// a new server-made one.
    pub fn for_grant(own: Option<&[u8]>, bound: bool) -> NewToken {
        match own {
            Some(_) => NewToken::Given(token_buffer(own, bound)),
            None => {
                let mut bytes = [0u8; 16];
                rand::fill(&mut bytes);
                NewToken::Made(bytes)
            }
        }
    }
}

impl LockState {
    /// A lock granted now to `token`: see [`LockState::new`].
    pub fn granted(
        token: NewToken,
        fence: u64,
        acquired_ms: i64,
        session: Option<Session>,
    ) -> Self {
        match token {
            NewToken::Made(bytes) => LockState::with_keep(
                packed_keep(bytes, session),
                fence,
                acquired_ms,
                session.is_some(),
            ),
            NewToken::Given(text) => LockState::new(text, fence, acquired_ms, session),
        }
    }
}

/// The latest grant time a lock may carry: 2^53 - 1 ms, as fences (about 285,000 years).
pub const MAX_TIME_MS: i64 = (1 << 53) - 1;

/// Whether a token, fence and grant time that come from outside (a `RESTORE` payload, an
/// RDB file, `LOCK._SET`) are within the contract: a token of 1 to 256 bytes, a fence from
/// 1 to 2^53 - 1, a grant time from 0 to `MAX_TIME_MS`. Anything else is refused, not
/// loaded.
pub fn in_contract(token: &[u8], fence: u64, acquired_ms: i64) -> bool {
    (1..=MAX_TOKEN_LEN).contains(&token.len())
        && (1..=MAX_FENCE).contains(&fence)
        && (0..=MAX_TIME_MS).contains(&acquired_ms)
}

/// Whether `token` holds `held`: the only test that release and extend apply.
pub fn is_held_by(held: Option<&LockState>, token: &[u8]) -> bool {
    held.is_some_and(|lock| lock.holds(token))
}

/// A server-made token: 128 bits from a cryptographically secure generator (the
/// thread-local ChaCha12 generator, seeded and reseeded from the operating system),
/// written as 32 lowercase hexadecimal characters.
pub fn new_token() -> Vec<u8> {
    token_buffer(None, false)
}

/// The token a grant will hold (the caller's own, or a new server-made one) in a buffer
/// with room for a session binding when `bound`, so that the lock is one allocation.
pub fn token_buffer(own: Option<&[u8]>, bound: bool) -> Vec<u8> {
    let room = if bound { SESSION_BYTES } else { 0 };
    match own {
        Some(token) => {
            let mut buffer = Vec::with_capacity(token.len() + room);
            buffer.extend_from_slice(token);
            buffer
        }
        None => {
            let mut bytes = [0u8; 16];
            rand::fill(&mut bytes);
            let mut buffer = Vec::with_capacity(32 + room);
            buffer.extend_from_slice(&token::spelled(&bytes));
            buffer
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_values_within_the_contract_are_accepted_from_outside() {
        assert!(in_contract(b"t", 1, 0));
        assert!(in_contract(&[0; 256], MAX_FENCE, MAX_TIME_MS));
        assert!(!in_contract(b"", 1, 0));
        assert!(!in_contract(&[0; 257], 1, 0));
        assert!(!in_contract(b"t", 0, 0));
        assert!(!in_contract(b"t", MAX_FENCE + 1, 0));
        assert!(!in_contract(b"t", 1, -1));
        assert!(!in_contract(b"t", 1, MAX_TIME_MS + 1));
    }

    fn held(token: &[u8]) -> LockState {
        LockState::new(token.to_vec(), 7, 1, None)
    }

    #[test]
    fn a_binding_is_kept_after_the_token_and_costs_plain_locks_nothing() {
        assert_eq!(std::mem::size_of::<LockState>(), 32);
        let session = Session {
            grace_ms: 5_000,
            client: u64::MAX,
        };
        let mut lock = LockState::new(token_buffer(Some(b"mine"), true), 9, 3, Some(session));
        assert_eq!(lock.heap_bytes(), 4 + 16);
        assert_eq!(
            (&*lock.token(), lock.fence(), lock.acquired_ms()),
            (&b"mine"[..], 9, 3)
        );
        assert_eq!(lock.session(), Some(session));
        assert_eq!(lock.heap_bytes(), 4 + 16);
        lock.set_session(None);
        assert_eq!(
            (&*lock.token(), lock.fence(), lock.session()),
            (&b"mine"[..], 9, None)
        );
        assert_eq!(lock.heap_bytes(), 4);
        lock.set_session(None);
        assert_eq!(lock, held(b"mine").with_fence_and_time(9, 3));
    }

    impl LockState {
        fn with_fence_and_time(self, fence: u64, acquired_ms: i64) -> Self {
            LockState::new(self.token().to_vec(), fence, acquired_ms, self.session())
        }
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
