//! Who gets a freed lock: the handoff decision, once, for the module and for the model
//! that checks it (`handoff_model.rs`). Pure: given a key's queue, what the key holds now
//! and whether each other key fits a waiter for several keys, it says which waiters are
//! granted next. The module's `keyspace/waiting/handoff.rs` carries the decision out
//! (writes the grants, answers the waiters, arms the timers) and asks again until the
//! decision is to wait.
//!
//! The policy, first come, first served on every key:
//!
//! - the oldest waiters of the key that fit beside what it holds, each waiting for this
//!   key alone: one exclusive waiter, or the shared ones up to the next exclusive one, as
//!   far as the limit allows (`rules::admit`), never past a waiter for several keys;
//! - else, when the oldest waiter waits for several keys (`LOCK.ACQUIREALL`): all of them
//!   at once, if it is the oldest waiter of each and each fits it (`Queues::ready_all`);
//! - else nobody, and the key stays free for its oldest waiter meanwhile.

use crate::queue::{AllReady, KeyId, Queues, Waiter};
use crate::rules::{self, Decision, Holding, Kind};

/// What the handoff of a key does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handoff {
    /// Grant the `n` oldest waiters of the key, in their order, each this key alone.
    Heads(usize),
    /// Grant waiter `id` every key it waits for, at once.
    All(u64),
    /// Grant nobody now. `on`: another key that holds the oldest waiter (one for several
    /// keys) back, if it is not this key.
    Wait {
        /// The other key that holds the oldest waiter back, if any.
        on: Option<KeyId>,
    },
}

/// What the handoff of `key` does next, as the key's holders stand (`held`). `fits`
/// says whether another key, as its holders stand, fits a waiter for several keys (only
/// asked when the oldest waiter is one, about its keys in the order it gave, up to the
/// first that does not fit).
pub fn next(
    queues: &Queues,
    key: &KeyId,
    held: Option<Holding>,
    fits: impl FnMut(&KeyId, &Waiter) -> bool,
) -> Handoff {
    let heads = queues.admissible(key, held);
    if heads > 0 {
        return Handoff::Heads(heads);
    }
    match queues.ready_all(key, fits) {
        AllReady::Ready(id) => Handoff::All(id),
        AllReady::Blocked { on } => Handoff::Wait { on },
        AllReady::NotMulti => Handoff::Wait { on: None },
    }
}

/// Whether a key holding `held` fits a waiter asking for `kind` (`mine`: the kind in
/// which the waiter's token holds the key already, if it does): it would be granted, or
/// renewed, there now.
pub fn fits(held: Option<Holding>, mine: Option<Kind>, kind: Kind) -> bool {
    matches!(
        rules::decide(held, mine, kind, false),
        Decision::Grant | Decision::Renew
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> KeyId {
        KeyId::new(0, name.as_bytes())
    }

    fn waiter(handle: usize, keys: &[&str], kind: Kind) -> Waiter {
        Waiter::for_keys(handle, keys.iter().map(|k| key(k)).collect(), kind)
    }

    #[test]
    fn a_free_key_goes_to_its_oldest_writer_or_its_readers_up_to_a_writer() {
        let mut q = Queues::default();
        q.push(waiter(1, &["a"], Kind::READER));
        q.push(waiter(2, &["a"], Kind::READER));
        q.push(waiter(3, &["a"], Kind::Exclusive));
        q.push(waiter(4, &["a"], Kind::READER));
        assert_eq!(next(&q, &key("a"), None, |_, _| true), Handoff::Heads(2));
        assert_eq!(
            next(&q, &key("a"), Some(Holding::EXCLUSIVE), |_, _| true),
            Handoff::Wait { on: None }
        );
    }

    #[test]
    fn a_waiter_for_several_keys_gets_them_all_at_once_or_waits_on_the_one_that_holds_it() {
        let mut q = Queues::default();
        let id = q.push(waiter(1, &["a", "b"], Kind::Exclusive));
        assert_eq!(next(&q, &key("a"), None, |_, _| true), Handoff::All(id));
        assert_eq!(
            next(&q, &key("a"), None, |k, _| *k != key("b")),
            Handoff::Wait { on: Some(key("b")) }
        );
        assert_eq!(
            next(&q, &key("a"), Some(Holding::EXCLUSIVE), |k, _| *k
                != key("a")),
            Handoff::Wait { on: None }
        );
    }

    #[test]
    fn a_key_fits_a_waiter_when_free_when_its_own_or_when_shared_with_room() {
        assert!(fits(None, None, Kind::Exclusive));
        assert!(fits(
            Some(Holding::EXCLUSIVE),
            Some(Kind::Exclusive),
            Kind::Exclusive
        ));
        assert!(!fits(Some(Holding::EXCLUSIVE), None, Kind::Exclusive));
        assert!(!fits(Some(Holding::EXCLUSIVE), None, Kind::READER));
    }
}
