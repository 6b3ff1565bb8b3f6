//! A model of the handoff over waiters for one key and for several keys at once
//! (`LOCK.ACQUIREALL`), on generated histories (proptest). The decision of who is granted
//! is the module's own (`handoff::next`, which `keyspace/waiting/handoff.rs` calls): the
//! model only keeps a keyspace of holders, carries the decisions out, and lets holders
//! leave and waiters give up at random. After every step, with every key settled:
//!
//! - no deadlock: if anyone waits, the oldest waiter of all is held back by a holder
//!   (never by a free key, never by another waiter);
//! - first come, first served on every key: when a waiter is granted, no older waiter
//!   still waits for any of its keys;
//! - never two writers on a key, never a writer beside readers.
//!
//! `make fuzz` runs it with many more cases (`PROPTEST_CASES`).

use std::collections::BTreeMap;

use proptest::prelude::*;

use crate::handoff::{self, Handoff};
use crate::queue::{KeyId, Queues, Waiter};
use crate::rules::{self, Decision, Holding, Kind};

const KEYS: u8 = 4;

fn key(k: u8) -> KeyId {
    KeyId::new(0, &[b'k', k])
}

/// The keyspace of the model: each key's holders, by holder number.
#[derive(Default)]
struct World {
    queues: Queues,
    holders: BTreeMap<KeyId, Vec<(u64, Kind)>>,
    /// Waiter id -> holder number, to know who was granted.
    next_holder: u64,
}

impl World {
    fn holding(&self, key: &KeyId) -> Option<Holding> {
        let holders = self.holders.get(key).filter(|h| !h.is_empty())?;
        Some(Holding {
            kind: holders[0].1,
            holders: holders.len(),
        })
    }

    fn fits(&self, key: &KeyId, kind: Kind) -> bool {
        handoff::fits(self.holding(key), None, kind)
    }

    /// Grants `waiter` every key it asks for, checking first come, first served.
    fn grant(&mut self, id: u64, waiter: &Waiter) -> Result<(), TestCaseError> {
        for key in waiter.keys() {
            if let Some((head, _)) = self.queues.head(key) {
                prop_assert!(head > id, "waiter {} passed older waiter {}", id, head);
            }
            prop_assert!(
                self.fits(key, waiter.kind),
                "granted a key that did not fit"
            );
            self.next_holder += 1;
            let holder = self.next_holder;
            self.holders
                .entry(key.clone())
                .or_default()
                .push((holder, waiter.kind));
        }
        Ok(())
    }

    /// Carries out the handoff decisions for one key until it is to wait, as the
    /// module's `settle` does: returns whether anything was granted.
    fn settle(&mut self, key: &KeyId) -> Result<bool, TestCaseError> {
        let mut granted = false;
        loop {
            let decision = handoff::next(&self.queues, key, self.holding(key), |k, w| {
                self.fits(k, w.kind)
            });
            match decision {
                Handoff::Heads(n) => {
                    for _ in 0..n {
                        let (id, _) = self.queues.head(key).expect("admitted");
                        let waiter = self.queues.remove(id).expect("queued");
                        self.grant(id, &waiter)?;
                    }
                }
                Handoff::All(id) => {
                    let waiter = self.queues.remove(id).expect("queued");
                    self.grant(id, &waiter)?;
                }
                Handoff::Wait { .. } => return Ok(granted),
            }
            granted = true;
        }
    }

    /// Settles every key until nothing changes (the module settles each key an event
    /// touched, and the other keys of a waiter granted several).
    fn settle_all(&mut self) -> Result<(), TestCaseError> {
        loop {
            let mut changed = false;
            for k in 0..KEYS {
                changed |= self.settle(&key(k))?;
            }
            if !changed {
                return Ok(());
            }
        }
    }

    /// A newcomer for `keys`: granted at once if every key is free for it and nobody
    /// waits for any, else queued.
    fn arrive(&mut self, handle: usize, keys: Vec<KeyId>, kind: Kind) -> Result<(), TestCaseError> {
        let now = keys.iter().all(|k| {
            matches!(
                rules::decide(self.holding(k), None, kind, self.queues.busy(k)),
                Decision::Grant
            )
        });
        let waiter = Waiter::for_keys(handle, keys, kind);
        if now {
            return self.grant(u64::MAX, &waiter);
        }
        self.queues.push(waiter);
        Ok(())
    }

    fn check(&self) -> Result<(), TestCaseError> {
        for holders in self.holders.values() {
            let writers = holders.iter().filter(|h| h.1 == Kind::Exclusive).count();
            prop_assert!(writers == 0 || holders.len() == 1, "a writer beside others");
        }
        // The oldest waiter of all heads every queue it is in, so only a holder can
        // keep it waiting.
        let oldest = (0..KEYS)
            .filter_map(|k| self.queues.head(&key(k)))
            .min_by_key(|(id, _)| *id);
        if let Some((_, waiter)) = oldest {
            let held_back = waiter.keys().any(|k| !self.fits(k, waiter.kind));
            prop_assert!(
                held_back,
                "the oldest waiter waits for free keys: a deadlock"
            );
        }
        Ok(())
    }
}

/// One step: a newcomer for one key or several, a holder leaving, a waiter giving up.
#[derive(Debug, Clone)]
enum Step {
    Arrive { keys: Vec<u8>, shared: bool },
    Release(usize),
    GiveUp(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (prop::sample::subsequence((0..KEYS).collect::<Vec<_>>(), 1..=3), any::<bool>(), any::<bool>())
            .prop_map(|(mut keys, shared, reversed)| {
                if reversed {
                    keys.reverse(); // crossing orders
                }
                Step::Arrive { keys, shared }
            }),
        3 => any::<usize>().prop_map(Step::Release),
        1 => any::<usize>().prop_map(Step::GiveUp),
    ]
}

proptest! {
    #[test]
    fn several_keys_at_once_never_deadlock_and_stay_first_come_first_served(
        steps in prop::collection::vec(step(), 1..80),
    ) {
        let mut world = World::default();
        let mut handle = 0;
        for step in steps {
            match step {
                Step::Arrive { keys, shared } => {
                    handle += 1;
                    let kind = if shared { Kind::READER } else { Kind::Exclusive };
                    world.arrive(handle, keys.into_iter().map(key).collect(), kind)?;
                }
                Step::Release(pick) => {
                    let held: Vec<(KeyId, u64)> = world
                        .holders
                        .iter()
                        .flat_map(|(k, hs)| hs.iter().map(move |h| (k.clone(), h.0)))
                        .collect();
                    if !held.is_empty() {
                        let (k, holder) = &held[pick % held.len()];
                        world.holders.get_mut(k).expect("held").retain(|h| h.0 != *holder);
                    }
                }
                Step::GiveUp(pick) => {
                    let mut ids: Vec<u64> = (0..KEYS)
                        .flat_map(|k| world.queues.ids(&key(k)))
                        .collect();
                    ids.sort_unstable();
                    ids.dedup();
                    if !ids.is_empty() {
                        world.queues.remove(ids[pick % ids.len()]);
                    }
                }
            }
            world.settle_all()?;
            world.check()?;
        }
        // Every holder leaves: everyone still waiting is granted in the end.
        while world.holders.values().any(|h| !h.is_empty()) || world.queues.total() > 0 {
            prop_assert!(world.holders.values().any(|h| !h.is_empty()), "waiters left with every key free");
            for holders in world.holders.values_mut() {
                holders.clear();
            }
            world.settle_all()?;
            world.check()?;
        }
    }
}
