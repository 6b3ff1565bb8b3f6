//! Property tests of the core, on generated inputs (proptest): the lock rules, the lock
//! value's encoding, the waiter queues and shared holders. They run with the unit tests
//! (`cargo test -p lock-core`, part of `make test`), 256 cases each; `make fuzz`
//! runs them with many more (`PROPTEST_CASES`).

use proptest::prelude::*;

use crate::fence::MAX_FENCE;
use crate::holders::{Holder, Holders};
use crate::limits::{MAX_TOKEN_LEN, MAX_TTL_MS};
use crate::lock::{self, LockState, MAX_TIME_MS, Session};
use crate::queue::{KeyId, Queues, Waiter};
use crate::rules::{self, Decision, Holding, Kind, Refusal};

/// An exclusive holder or waiter, a reader, or a semaphore of limit 1 to 3.
fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Exclusive),
        Just(Kind::READER),
        (1u32..4).prop_map(|limit| Kind::Shared { limit: Some(limit) }),
    ]
}

proptest! {
    #[test]
    fn decide_follows_the_rules(
        held in prop::option::of((kind(), 1usize..6)),
        mine in prop::option::of(kind()),
        want in kind(),
        queued in any::<bool>(),
    ) {
        let held = held.map(|(kind, holders)| Holding { kind, holders });
        let decision = rules::decide(held, mine, want, queued);
        let limit_disagrees = matches!(want, Kind::Shared { .. })
            && held.is_some_and(|h| h.kind.same_mode(want) && h.kind != want);
        let expected = if limit_disagrees {
            Decision::Refused(Refusal::Limit)
        } else {
            match mine {
                Some(kind) if kind.same_mode(want) => Decision::Renew,
                Some(_) => Decision::Refused(Refusal::Kind),
                None if queued => Decision::Busy,
                None => match held {
                    None => Decision::Grant,
                    Some(h) => match (h.kind, want) {
                        (Kind::Shared { limit }, Kind::Shared { .. })
                            if limit.is_none_or(|l| h.holders < l as usize) => Decision::Grant,
                        _ => Decision::Busy,
                    },
                },
            }
        };
        prop_assert_eq!(decision, expected);
    }

    #[test]
    fn a_release_grants_what_fits_in_arrival_order_and_no_more(
        held in prop::option::of((kind(), 1usize..6)),
        queue in prop::collection::vec(kind(), 0..8),
    ) {
        let mut holding = held.map(|(kind, holders)| Holding { kind, holders });
        let granted = rules::admit(holding, queue.iter().copied());
        for &kind in &queue[..granted] {
            prop_assert!(rules::admits(holding, kind));
            holding = Some(match holding {
                Some(h) if h.kind == kind => Holding { kind, holders: h.holders + 1 },
                _ => Holding { kind, holders: 1 },
            });
        }
        if let Some(Holding { kind: Kind::Shared { limit: Some(limit) }, holders }) = holding {
            prop_assert!(holders <= limit as usize || granted == 0);
        }
        // The first waiter left behind does not fit, unless an exclusive one went last.
        if let Some(&next) = queue.get(granted) {
            let exclusive_went = granted > 0 && queue[granted - 1] == Kind::Exclusive;
            prop_assert!(exclusive_went || !rules::admits(holding, next));
        }
    }

    #[test]
    fn a_lock_value_keeps_every_field_whatever_its_binding(
        token in prop_oneof![
            prop::collection::vec(any::<u8>(), 1..=MAX_TOKEN_LEN),
            // Server-made tokens and tokens like them are packed inside the value.
            prop::collection::vec(prop::sample::select(b"0123456789abcdef".to_vec()), 32),
        ],
        fence in 1..=MAX_FENCE,
        acquired in 0..=MAX_TIME_MS,
        // Most grants are made in the millisecond their fence names.
        on_wall_clock in any::<bool>(),
        sessions in prop::collection::vec(
            prop::option::of((0..=MAX_TTL_MS, any::<u64>())), 1..5),
    ) {
        let acquired = if on_wall_clock {
            (fence >> crate::fence::LOGICAL_BITS) as i64
        } else {
            acquired
        };
        let mut lock = LockState::new(&token, fence, acquired, None);
        prop_assert!(lock::in_contract(&lock.token(), lock.fence(), lock.acquired_ms()));
        for session in sessions {
            let session = session.map(|(grace_ms, client)| Session { grace_ms, client });
            lock.set_session(session);
            prop_assert_eq!(&*lock.token(), token.as_slice());
            prop_assert_eq!(lock.fence(), fence);
            prop_assert_eq!(lock.acquired_ms(), acquired);
            prop_assert_eq!(lock.session(), session);
            // A packed token keeps its 16 bytes inside the value when the lock is plain
            // and its grant time is its fence's wall-clock part; else every lock keeps
            // one allocation: a 16-byte header, the token (packed or as given), the
            // binding.
            let packed = crate::token::packed(&token).is_some();
            let compact = packed
                && session.is_none()
                && u64::try_from(acquired) == Ok(fence >> crate::fence::LOGICAL_BITS);
            let kept = if packed { 16 } else { token.len() };
            let heap = if compact {
                0
            } else {
                16 + kept + if session.is_some() { 16 } else { 0 }
            };
            prop_assert_eq!(lock.heap_bytes(), heap);
            prop_assert!(lock.holds(&token));
            prop_assert!(!lock.holds(&token[1..]));
        }
    }

    #[test]
    fn waiters_are_served_first_come_first_served(
        ops in prop::collection::vec((0u8..3, 0u8..3), 0..60),
    ) {
        // Per key, the order the model expects: pushes append, pops take the front,
        // removals (a timeout, a disconnect) take one out wherever it is.
        let mut queues = Queues::default();
        let mut model: Vec<Vec<(u64, usize)>> = vec![Vec::new(); 3];
        let mut next_handle = 1usize;
        for (op, k) in ops {
            let key = KeyId::new(0, &[b'k', k]);
            let slot = usize::from(k);
            match op {
                0 => {
                    let id = queues.push(Waiter {
                        handle: next_handle,
                        key: key.clone(),
                        more: Vec::new(),
                        all_keys: false,
                        token: b"t".to_vec(),
                        wake_timer: None,
                        ttl_ms: 1,
                        session: None,
                        client: 0,
                        kind: crate::rules::Kind::Exclusive,
                        value: None,
                        replicas: Default::default(),
                        arrived_us: next_handle as u64,
                    });
                    model[slot].push((id, next_handle));
                    next_handle += 1;
                }
                1 => {
                    let served = queues.pop_head(&key).map(|w| w.handle);
                    let expected = (!model[slot].is_empty()).then(|| model[slot].remove(0).1);
                    prop_assert_eq!(served, expected);
                }
                _ => {
                    if let Some(&(id, handle)) = model[slot].get(model[slot].len() / 2) {
                        prop_assert_eq!(queues.remove(id).map(|w| w.handle), Some(handle));
                        model[slot].retain(|&(m, _)| m != id);
                    }
                }
            }
            prop_assert_eq!(queues.waiting(&key), model[slot].len());
            prop_assert_eq!(
                queues.head(&key).map(|(id, _)| id),
                model[slot].first().map(|&(id, _)| id)
            );
        }
        prop_assert_eq!(queues.total(), model.iter().map(Vec::len).sum::<usize>());
    }

    #[test]
    fn shared_holders_match_a_model(
        ops in prop::collection::vec((0u8..4, 0u8..6, 0i64..50), 1..60),
    ) {
        // Each op: insert, remove, move the expiry of, or expire up to a time, tokens t0..t5.
        let mut holders = Holders::new(Some(4));
        let mut model: std::collections::BTreeMap<Vec<u8>, (u64, i64)> = Default::default();
        let mut fence = 0;
        for (op, token, at) in ops {
            let token = format!("t{token}").into_bytes();
            match op {
                0 => {
                    fence += 1;
                    let holder = Holder {
                        lock: LockState::new(&token, fence, 0, None),
                        expire_at: at,
                    };
                    let inserted = holders.insert(holder).is_ok();
                    prop_assert_eq!(inserted, !model.contains_key(&token));
                    model.entry(token).or_insert((fence, at));
                }
                1 => {
                    let removed = holders.remove(&token).map(|h| h.lock.fence());
                    prop_assert_eq!(removed, model.remove(&token).map(|(f, _)| f));
                }
                2 => {
                    let moved = holders.set_expire_at(&token, at);
                    prop_assert_eq!(moved, model.contains_key(&token));
                    if let Some(entry) = model.get_mut(&token) {
                        entry.1 = at;
                    }
                }
                _ => {
                    let mut gone: Vec<Vec<u8>> =
                        holders.expire(at).into_iter().map(|h| h.lock.token().to_vec()).collect();
                    gone.sort();
                    let expected: Vec<Vec<u8>> =
                        model.iter().filter(|(_, v)| v.1 <= at).map(|(k, _)| k.clone()).collect();
                    model.retain(|_, v| v.1 > at);
                    prop_assert_eq!(gone, expected);
                }
            }
            prop_assert_eq!(holders.len(), model.len());
            prop_assert_eq!(holders.next_expiry(), model.values().map(|v| v.1).min());
            prop_assert_eq!(holders.last_expiry(), model.values().map(|v| v.1).max());
            prop_assert_eq!(holders.newest_fence(), model.values().map(|v| v.0).max());
            for (token, (fence, at)) in &model {
                let held = holders.get(token).map(|h| (h.lock.fence(), h.expire_at));
                prop_assert_eq!(held, Some((*fence, *at)));
            }
        }
    }
}
