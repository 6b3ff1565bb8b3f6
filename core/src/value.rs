//! What a lock key holds: one exclusive holder, or shared holders. Pure Rust, no FFI.
//!
//! The exclusive value is the one every plain lock has, and it stays as small as a
//! `LockState` (24 bytes, one allocation with a server-made token): shared holders live
//! behind one pointer in the same space, the variant's tag in the lock's spare values.

use crate::holders::Holders;
use crate::lock::{LockState, Session};
use crate::rules::{Holding, Kind};
use crate::stats;

/// The value of a lock key.
#[derive(Debug, Clone)]
pub enum LockValue {
    /// One holder, alone (`LOCK.ACQUIRE` without `SHARED`).
    Exclusive(LockState),
    /// Shared holders (`SHARED`, `LIMIT n`), each with its own token, fence and expiry;
    /// never empty while in the keyspace.
    Shared(Box<Holders>),
}

impl LockValue {
    /// What the key holds, for the rules.
    pub fn holding(&self) -> Option<Holding> {
        match self {
            LockValue::Exclusive(_) => Some(Holding::EXCLUSIVE),
            LockValue::Shared(holders) => holders.holding(),
        }
    }

    /// The kind in which `token` holds the key, if it does.
    pub fn kind_of(&self, token: &[u8]) -> Option<Kind> {
        match self {
            LockValue::Exclusive(lock) => (lock.holds(token)).then_some(Kind::Exclusive),
            LockValue::Shared(holders) => holders.get(token).map(|_| Kind::Shared {
                limit: holders.limit(),
            }),
        }
    }

    /// The lock `token` holds here: its fence, grant time and binding.
    pub fn lock_of(&self, token: &[u8]) -> Option<&LockState> {
        match self {
            LockValue::Exclusive(lock) => (lock.holds(token)).then_some(lock),
            LockValue::Shared(holders) => holders.get(token).map(|h| &h.lock),
        }
    }

    /// The lock `token` holds here, to change what is not replicated (its client).
    pub fn lock_of_mut(&mut self, token: &[u8]) -> Option<&mut LockState> {
        match self {
            LockValue::Exclusive(lock) => (lock.holds(token)).then_some(lock),
            LockValue::Shared(holders) => holders.lock_mut(token),
        }
    }

    /// Every holder's lock. (No allocation: every key's removal asks, through
    /// `sessions`.)
    pub fn locks(&self) -> impl Iterator<Item = &LockState> + '_ {
        let (one, shared) = match self {
            LockValue::Exclusive(lock) => (Some(lock), None),
            LockValue::Shared(holders) => (None, Some(holders.iter().map(|h| &h.lock))),
        };
        one.into_iter().chain(shared.into_iter().flatten())
    }

    /// The binding of every session-bound holder, each (connection, grace) pair once.
    pub fn sessions(&self) -> Vec<Session> {
        let mut sessions: Vec<Session> = Vec::new();
        for session in self.locks().filter_map(LockState::session) {
            if !sessions.contains(&session) {
                sessions.push(session);
            }
        }
        sessions
    }

    /// Whether some holder is bound to connection `client`.
    pub fn bound_to(&self, client: u64) -> bool {
        self.locks()
            .any(|lock| lock.session().is_some_and(|s| s.client == client))
    }

    /// How many holders it has: one exclusive, or its shared holders.
    #[inline]
    pub fn holder_count(&self) -> usize {
        match self {
            LockValue::Exclusive(_) => 1,
            LockValue::Shared(holders) => holders.len(),
        }
    }

    /// This value entered the keyspace (handed to the server): the `keys` and `holders`
    /// gauges count it.
    #[inline]
    pub fn counted_in(&self) {
        stats::KEYS.add(1);
        stats::HOLDERS.add(self.holder_count() as i64);
    }

    /// This value left the keyspace at `now_us` (unix us; the server freed it): its
    /// holders' holds end, and the gauges no longer count it.
    #[inline]
    pub fn counted_out(&self, now_us: i64) {
        stats::KEYS.add(-1);
        match self {
            LockValue::Exclusive(lock) => {
                stats::HOLDERS.add(-1);
                stats::held(lock.acquired_ms(), now_us);
            }
            LockValue::Shared(holders) => {
                stats::HOLDERS.add(-(holders.len() as i64));
                for holder in holders.iter() {
                    stats::held(holder.lock.acquired_ms(), now_us);
                }
            }
        }
    }

    /// The fence of the newest grant (`LOCK.INFO`'s `fence`).
    pub fn newest_fence(&self) -> u64 {
        match self {
            LockValue::Exclusive(lock) => lock.fence(),
            LockValue::Shared(holders) => holders.newest_fence().unwrap_or(0),
        }
    }

    /// When the oldest holder was granted (`LOCK.INFO`'s `acquired`).
    pub fn oldest_grant(&self) -> i64 {
        match self {
            LockValue::Exclusive(lock) => lock.acquired_ms(),
            LockValue::Shared(holders) => holders.oldest_grant().unwrap_or(0),
        }
    }

    /// The bytes the value keeps on the heap.
    pub fn heap_bytes(&self) -> usize {
        match self {
            LockValue::Exclusive(lock) => lock.heap_bytes(),
            LockValue::Shared(holders) => std::mem::size_of::<Holders>() + holders.heap_bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::holders::Holder;

    fn bound(client: u64, grace_ms: i64) -> Option<Session> {
        Some(Session { grace_ms, client })
    }

    fn shared(limit: Option<u32>, holders: &[(&str, u64, Option<Session>)]) -> LockValue {
        let mut h = Holders::new(limit);
        for (token, fence, session) in holders {
            h.insert(Holder {
                lock: LockState::new(token.as_bytes(), *fence, *fence as i64, *session),
                expire_at: 100,
            })
            .unwrap();
        }
        LockValue::Shared(Box::new(h))
    }

    #[test]
    fn a_plain_lock_is_one_allocation_of_twenty_four_bytes() {
        // The shared variant's tag lives in the lock's own spare values: a plain lock
        // with a server-made token, granted on the wall clock, is this one allocation.
        assert_eq!(std::mem::size_of::<LockValue>(), 24);
        let now = 1_763_000_000_000_i64;
        let fence = (now as u64) << crate::fence::LOGICAL_BITS;
        let server_made = LockState::new(&crate::lock::new_token(), fence, now, None);
        assert_eq!(server_made.heap_bytes(), 0);
    }

    #[test]
    fn tokens_hold_in_the_kind_of_the_value() {
        let exclusive = LockValue::Exclusive(LockState::new(b"x", 3, 1, None));
        assert_eq!(exclusive.kind_of(b"x"), Some(Kind::Exclusive));
        assert_eq!(exclusive.kind_of(b"y"), None);
        assert_eq!(exclusive.holding(), Some(Holding::EXCLUSIVE));
        let readers = shared(Some(4), &[("a", 5, None), ("b", 7, None)]);
        assert_eq!(readers.kind_of(b"b"), Some(Kind::Shared { limit: Some(4) }));
        assert_eq!(readers.kind_of(b"x"), None);
        assert_eq!(readers.lock_of(b"a").map(LockState::fence), Some(5));
        assert_eq!((readers.newest_fence(), readers.oldest_grant()), (7, 5));
    }

    #[test]
    fn sessions_are_listed_once_per_connection_and_grace() {
        let value = shared(
            None,
            &[
                ("a", 1, bound(9, 50)),
                ("b", 2, bound(9, 50)),
                ("c", 3, bound(9, 70)),
                ("d", 4, None),
            ],
        );
        let mut sessions = value.sessions();
        sessions.sort_by_key(|s| s.grace_ms);
        assert_eq!(sessions, vec![bound(9, 50).unwrap(), bound(9, 70).unwrap()]);
        assert!(value.bound_to(9) && !value.bound_to(8));
    }
}
