//! Who may hold a key, who waits and who is next: the rules for an exclusive holder, for
//! shared holders (the readers of a read/write lock) and for shared holders under a limit
//! (a counting semaphore). Pure Rust, no server types: the commands and the handoff carry
//! the decisions out, and every rule is tested here without a server.
//!
//! - A key is free, held by one exclusive holder, or held by shared holders of one kind:
//!   all without a limit, or all with the same limit `n` (at most `n` of them at once).
//! - First come, first served across both kinds: a newcomer never passes a waiter, so
//!   readers arriving after a waiting writer wait behind it (no writer starvation).
//! - When a key frees up, the waiters at the head of its queue are granted together as
//!   long as each one is compatible with what is held by then: one exclusive waiter alone,
//!   or every shared waiter up to the next exclusive one, as far as the limit allows.
//! - A token holds a key in one kind only: asking for the other (an upgrade or a
//!   downgrade) is refused, and so is a limit other than the one the holders agree on.

/// How a holder holds a key, or how a waiter asks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The only holder (`LOCK.ACQUIRE` without `SHARED`).
    Exclusive,
    /// One of any number of holders (`SHARED`), or of at most `limit` (`LIMIT n`).
    Shared {
        /// The most shared holders the key may have at once; `None`: no limit.
        limit: Option<u32>,
    },
}

impl Kind {
    /// A shared holder without a limit: a reader.
    pub const READER: Kind = Kind::Shared { limit: None };

    /// Whether both are exclusive, or both shared (whatever their limits).
    pub fn same_mode(self, other: Kind) -> bool {
        matches!(
            (self, other),
            (Kind::Exclusive, Kind::Exclusive) | (Kind::Shared { .. }, Kind::Shared { .. })
        )
    }
}

/// What a key holds now, as the rules see it: the kind of its holders and how many there
/// are (at least one; a free key has no `Holding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holding {
    /// The kind every holder of the key has.
    pub kind: Kind,
    /// How many holders it has.
    pub holders: usize,
}

impl Holding {
    /// One exclusive holder.
    pub const EXCLUSIVE: Holding = Holding {
        kind: Kind::Exclusive,
        holders: 1,
    };

    /// What the key holds once a holder of kind `kind` joins what it holds now.
    fn with(held: Option<Holding>, kind: Kind) -> Holding {
        match held {
            Some(held) if held.kind == kind => Holding {
                kind,
                holders: held.holders + 1,
            },
            _ => Holding { kind, holders: 1 },
        }
    }
}

/// Why an acquire is refused outright (an error, nothing changed), not merely busy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The key's shared holders agree on another limit (or on none).
    Limit,
    /// The caller's token holds the key in the other kind: an upgrade or a downgrade.
    Kind,
}

/// What an acquire does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Grant the caller a place with a new fence.
    Grant,
    /// The caller's token holds the key already, in the kind it asks for: reset its TTL,
    /// keep its fence.
    Renew,
    /// No place now: answer nil, or wait in the queue.
    Busy,
    /// Refused with an error; nothing changes.
    Refused(Refusal),
}

/// Decides an acquire of kind `want`. `held` is what the key holds (`None`: free),
/// `mine` the kind in which the caller's token holds it (`None`: it does not, or the
/// caller gave no token), `queued` whether clients wait for the key.
pub fn decide(held: Option<Holding>, mine: Option<Kind>, want: Kind, queued: bool) -> Decision {
    if let (Some(Kind::Shared { limit: theirs }), Kind::Shared { limit }) =
        (held.map(|h| h.kind), want)
        && theirs != limit
    {
        return Decision::Refused(Refusal::Limit);
    }
    match mine {
        Some(kind) if kind.same_mode(want) => Decision::Renew,
        Some(_) => Decision::Refused(Refusal::Kind),
        None if queued || !admits(held, want) => Decision::Busy,
        None => Decision::Grant,
    }
}

/// Whether a newcomer of kind `want` fits beside what the key holds (`None`: free).
pub fn admits(held: Option<Holding>, want: Kind) -> bool {
    let Some(held) = held else {
        return true;
    };
    match (held.kind, want) {
        (Kind::Shared { limit }, Kind::Shared { .. }) if held.kind == want => {
            limit.is_none_or(|limit| held.holders < limit as usize)
        }
        _ => false,
    }
}

/// How many waiters, from the head of a key's queue (`queue`, oldest first), are granted
/// now, given what the key holds: each in turn while it fits beside what is held by
/// then, stopping at the first that does not (the ones behind it keep waiting: first
/// come, first served) and after an exclusive one.
pub fn admit(held: Option<Holding>, queue: impl IntoIterator<Item = Kind>) -> usize {
    let mut held = held;
    let mut granted = 0;
    for kind in queue {
        if !admits(held, kind) {
            break;
        }
        held = Some(Holding::with(held, kind));
        granted += 1;
        if kind == Kind::Exclusive {
            break;
        }
    }
    granted
}

#[cfg(test)]
mod tests {
    use super::*;

    const WRITER: Kind = Kind::Exclusive;
    const READER: Kind = Kind::READER;

    fn semaphore(limit: u32) -> Kind {
        Kind::Shared { limit: Some(limit) }
    }

    fn held(kind: Kind, holders: usize) -> Option<Holding> {
        Some(Holding { kind, holders })
    }

    #[test]
    fn a_free_key_is_granted_in_either_kind_unless_clients_wait() {
        for want in [WRITER, READER, semaphore(1), semaphore(3)] {
            assert_eq!(decide(None, None, want, false), Decision::Grant);
            assert_eq!(decide(None, None, want, true), Decision::Busy);
        }
    }

    #[test]
    fn readers_share_and_a_writer_excludes_everyone() {
        assert_eq!(
            decide(held(READER, 5), None, READER, false),
            Decision::Grant
        );
        assert_eq!(decide(held(READER, 5), None, WRITER, false), Decision::Busy);
        assert_eq!(
            decide(Some(Holding::EXCLUSIVE), None, READER, false),
            Decision::Busy
        );
        assert_eq!(
            decide(Some(Holding::EXCLUSIVE), None, WRITER, false),
            Decision::Busy
        );
    }

    #[test]
    fn a_semaphore_never_has_more_than_its_limit() {
        assert_eq!(
            decide(held(semaphore(3), 2), None, semaphore(3), false),
            Decision::Grant
        );
        assert_eq!(
            decide(held(semaphore(3), 3), None, semaphore(3), false),
            Decision::Busy
        );
        assert!(!admits(held(semaphore(1), 1), semaphore(1)));
        assert!(admits(None, semaphore(1)));
    }

    #[test]
    fn a_newcomer_never_passes_a_waiter() {
        // Readers hold, a writer waits: a new reader queues behind it.
        assert_eq!(decide(held(READER, 2), None, READER, true), Decision::Busy);
        assert_eq!(
            decide(held(semaphore(5), 1), None, semaphore(5), true),
            Decision::Busy
        );
    }

    #[test]
    fn the_holders_limit_is_the_only_one_accepted() {
        let refused = Decision::Refused(Refusal::Limit);
        assert_eq!(decide(held(READER, 1), None, semaphore(2), false), refused);
        assert_eq!(decide(held(semaphore(2), 1), None, READER, false), refused);
        assert_eq!(
            decide(held(semaphore(2), 1), None, semaphore(3), true),
            refused
        );
        // Even for the token that holds it, and even when it could not be granted.
        assert_eq!(
            decide(
                held(semaphore(2), 2),
                Some(semaphore(2)),
                semaphore(3),
                false
            ),
            refused
        );
        // An exclusive holder has no limit to disagree with: busy, not refused.
        assert_eq!(
            decide(Some(Holding::EXCLUSIVE), None, semaphore(2), false),
            Decision::Busy
        );
    }

    #[test]
    fn a_holder_renews_in_its_own_kind_and_is_refused_the_other() {
        assert_eq!(
            decide(Some(Holding::EXCLUSIVE), Some(WRITER), WRITER, true),
            Decision::Renew
        );
        assert_eq!(
            decide(held(READER, 3), Some(READER), READER, true),
            Decision::Renew
        );
        assert_eq!(
            decide(
                held(semaphore(3), 3),
                Some(semaphore(3)),
                semaphore(3),
                false
            ),
            Decision::Renew,
            "a full semaphore still renews its own holder"
        );
        let upgrade = decide(held(READER, 1), Some(READER), WRITER, false);
        let downgrade = decide(Some(Holding::EXCLUSIVE), Some(WRITER), READER, false);
        assert_eq!(upgrade, Decision::Refused(Refusal::Kind));
        assert_eq!(downgrade, Decision::Refused(Refusal::Kind));
    }

    #[test]
    fn a_release_grants_the_readers_at_the_head_together_up_to_the_next_writer() {
        let queue = [READER, READER, READER, WRITER, READER];
        assert_eq!(admit(None, queue), 3);
        // Readers still hold: the ones at the head join them.
        assert_eq!(admit(held(READER, 4), queue), 3);
        // A writer at the head goes alone, and only onto a free key.
        assert_eq!(admit(None, [WRITER, READER, READER]), 1);
        assert_eq!(admit(held(READER, 1), [WRITER, READER]), 0);
        assert_eq!(admit(Some(Holding::EXCLUSIVE), [READER, READER]), 0);
        assert_eq!(admit(None, []), 0);
    }

    #[test]
    fn a_release_grants_a_semaphore_as_far_as_its_limit_allows() {
        let queue = [semaphore(3); 5];
        assert_eq!(admit(None, queue), 3);
        assert_eq!(admit(held(semaphore(3), 2), queue), 1);
        assert_eq!(admit(held(semaphore(3), 3), queue), 0);
    }

    #[test]
    fn a_waiter_with_another_limit_waits_until_the_holders_are_gone() {
        // It queued while the key was held exclusively; readers got in first.
        assert_eq!(admit(held(READER, 2), [semaphore(2), READER]), 0);
        assert_eq!(admit(None, [semaphore(2), READER]), 1);
        assert_eq!(admit(None, [semaphore(2), semaphore(2), semaphore(2)]), 2);
    }

    #[test]
    fn modes_compare_without_their_limits() {
        assert!(READER.same_mode(semaphore(4)));
        assert!(WRITER.same_mode(WRITER));
        assert!(!WRITER.same_mode(READER));
    }
}
