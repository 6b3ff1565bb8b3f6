//! The session registry's tests.
use super::*;

fn key(db: i32, name: &str) -> KeyId {
    KeyId::new(db, name.as_bytes())
}

const B: Binding = Binding {
    client: 0,
    grace_ms: 9,
};

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

#[test]
fn a_close_finds_all_of_its_locks_by_grace_and_only_its_own() {
    let mut b = Bindings::default();
    b.bind(0, b"a", 7, 50);
    b.bind(3, b"b", 7, 0);
    b.bind(0, b"c", 8, 5);
    b.bind(0, b"a", 7, 100);
    b.bind(0, b"d", 7, 50);
    assert_eq!(
        b.disconnected(7),
        vec![
            (50, vec![key(0, "a"), key(0, "d")]),
            (0, vec![key(3, "b")]),
            (100, vec![key(0, "a")]),
        ],
        "by grace, in the order of the binds"
    );
    assert!(b.disconnected(7).is_empty());
    assert!(b.disconnected(99).is_empty());
    assert_eq!(b.counts(), (1, 0, 0));
}

/// Starts a grace as `session.rs` does, with the next id and a timer numbered alike.
fn start(b: &mut Bindings, binding: Binding, start: Start, keys: &[&str]) -> u64 {
    let id = b.new_grace_id();
    let keys = keys.iter().map(|name| key(0, name)).collect();
    b.grace_started(id, id + 100, binding, start, keys);
    id
}

#[test]
fn a_close_grace_goes_in_slices_and_leaves_the_locks_taken_over() {
    let mut b = Bindings::default();
    let closed = Binding {
        client: 7,
        grace_ms: 9,
    };
    let close = start(&mut b, closed, Start::Close, &["a", "b", "c", "d"]);
    let own = start(&mut b, closed, Start::Own, &["b"]);
    assert_eq!(b.running(close), Some(closed));
    assert_eq!(b.counts(), (0, 5, 0));
    assert_eq!(b.take_due(close, 2), (vec![key(0, "a"), key(0, "c")], true));
    assert_eq!(b.take_due(close, 2), (vec![key(0, "d")], false));
    assert_eq!(b.running(close), None, "over once every key is taken");
    assert_eq!(b.take_due(close, 2), (vec![], false));
    assert_eq!(b.take_due(own, 9), (vec![key(0, "b")], false));
    assert_eq!(b.counts(), (0, 0, 0));
}

#[test]
fn the_locks_in_grace_are_listed_once_each_until_their_grace_ends() {
    let mut b = Bindings::default();
    let closed = Binding {
        client: 7,
        grace_ms: 9,
    };
    assert!(b.in_grace().is_empty());
    let close = start(&mut b, closed, Start::Close, &["a", "b", "c"]);
    // "b" taken over by a grace of its own: still one lock in grace.
    let own = start(&mut b, closed, Start::Own, &["b"]);
    let listed = |b: &Bindings| sorted(b.in_grace());
    let of = |names: &[&str]| -> Vec<Bound> { names.iter().map(|n| (key(0, n), 7)).collect() };
    assert_eq!(listed(&b), of(&["a", "b", "c"]));
    b.take_due(close, 1);
    assert_eq!(listed(&b), of(&["b", "c"]), "released: no longer listed");
    b.take_due(close, 9);
    assert_eq!(listed(&b), of(&["b"]), "the key taken over stays");
    b.take_due(own, 9);
    assert!(b.in_grace().is_empty());
    // Pending locks (a replica, a load) wait for no grace yet.
    b.pend(key(0, "p"), closed);
    assert!(b.in_grace().is_empty());
}

#[test]
fn own_graces_are_per_key_and_connection_and_end_once() {
    let mut b = Bindings::default();
    b.pend(key(0, "a"), B);
    let first = start(&mut b, B, Start::Own, &["a"]);
    assert_eq!(b.counts(), (0, 1, 0), "the pending start is replaced");
    let second = start(&mut b, B, Start::Own, &["a"]);
    assert_eq!(
        b.take_due(first, 9),
        (vec![], false),
        "the replaced grace ends nothing"
    );
    // Another connection's grace on the same key stands beside it.
    let other = Binding { client: 5, ..B };
    let third = start(&mut b, other, Start::Own, &["a"]);
    b.grace_ended(&key(0, "a"), 0);
    assert_eq!(b.take_due(second, 9), (vec![], false));
    assert_eq!(b.take_due(third, 9), (vec![key(0, "a")], false));
    assert_eq!(b.counts(), (0, 0, 0));
}

#[test]
fn forgetting_a_lock_ends_its_grace_and_marks_its_entry_stale() {
    let mut b = Bindings::default();
    b.bind(0, b"a", 7, 100);
    b.forget(&key(0, "a"), 7);
    assert_eq!(b.bound[&7].stale, 1);
    let grace = start(&mut b, B, Start::Own, &["c"]);
    b.forget(&key(0, "c"), 0);
    assert_eq!(b.take_due(grace, 9), (vec![], false));
    b.pend(key(1, "d"), B);
    b.forget(&key(1, "d"), 0);
    assert_eq!(b.counts(), (1, 0, 0));
}

#[test]
fn a_lock_that_left_takes_only_its_own_traces() {
    let mut b = Bindings::default();
    // Replaced by a lock of the same connection (RESTORE ... REPLACE): kept.
    b.bind(0, b"a", 7, 1);
    b.left(&key(0, "a"), 7, true);
    assert_eq!(b.bound[&7].stale, 0);
    // Replaced by another connection's lock: the old entry is stale.
    b.bind(0, b"a", 8, 1);
    b.left(&key(0, "a"), 7, false);
    assert_eq!(b.bound[&7].stale, 1);
    assert_eq!(b.disconnected(8), vec![(1, vec![key(0, "a")])]);
    // Gone for good: its grace ends too.
    let grace = start(&mut b, B, Start::Own, &["g"]);
    b.left(&key(0, "g"), 0, false);
    assert_eq!(b.take_due(grace, 9), (vec![], false));
}

#[test]
fn a_half_stale_list_is_compacted_to_what_is_still_bound() {
    let mut b = Bindings::default();
    for i in 0..64 {
        b.bind(0, format!("k{i}").as_bytes(), 7, 1);
    }
    for i in 0..31 {
        b.forget(&key(0, &format!("k{i}")), 7);
    }
    assert_eq!(b.to_compact(7), None, "under the threshold");
    b.forget(&key(0, "k31"), 7);
    let keys = b.to_compact(7).expect("half stale");
    assert_eq!(keys.len(), 64);
    let still: Vec<KeyId> = (32..64).map(|i| key(0, &format!("k{i}"))).collect();
    b.compact(7, &still);
    assert_eq!(b.counts(), (32, 0, 0));
    assert_eq!(b.to_compact(7), None);
    b.compact(7, &[]);
    assert_eq!(b.counts(), (0, 0, 0));
}

#[test]
fn a_demoted_server_keeps_every_lock_pending() {
    let mut b = Bindings::default();
    b.bind(0, b"a", 7, 100);
    start(&mut b, B, Start::Own, &["b"]);
    let closed = Binding {
        client: 9,
        grace_ms: 4,
    };
    start(&mut b, closed, Start::Close, &["c"]);
    assert_eq!(sorted(b.demote()), vec![101, 102], "the timers to stop");
    assert_eq!(
        sorted(b.take_pending()),
        vec![
            (
                key(0, "a"),
                Binding {
                    client: 7,
                    grace_ms: 100
                }
            ),
            (key(0, "b"), B),
            (key(0, "c"), closed),
        ]
    );
    assert_eq!(b.counts(), (0, 0, 0));
}

#[test]
fn a_flush_forgets_its_database_only() {
    let mut b = Bindings::default();
    b.bind(0, b"a", 7, 1);
    b.bind(1, b"a", 7, 1);
    let id = b.new_grace_id();
    b.grace_started(id, 5, B, Start::Own, vec![key(1, "g")]);
    let id = b.new_grace_id();
    b.grace_started(id, 6, B, Start::Close, vec![key(1, "h"), key(0, "i")]);
    b.pend(key(1, "p"), B);
    assert_eq!(b.flushed(Some(1)), vec![5], "a grace left with no key");
    assert_eq!(b.counts(), (1, 1, 0));
    assert_eq!(b.flushed(None), vec![6]);
    assert_eq!(b.counts(), (0, 0, 0));
}

#[test]
fn a_swap_moves_locks_between_databases() {
    let mut b = Bindings::default();
    b.bind(0, b"a", 7, 1);
    let id = b.new_grace_id();
    b.grace_started(id, 5, B, Start::Own, vec![key(1, "g")]);
    b.pend(key(2, "p"), B);
    b.swapped(0, 1);
    assert_eq!(b.disconnected(7), vec![(1, vec![key(1, "a")])]);
    assert_eq!(
        b.take_due(id, 9),
        (vec![key(0, "g")], false),
        "the grace finds the new db"
    );
    assert_eq!(b.take_pending()[0].0, key(2, "p"));
}

/// Every part of the registry agrees with the others.
fn consistent(b: &Bindings) -> Result<(), String> {
    for ((key, client), id) in &b.own {
        let Some(grace) = b.graces.get(id) else {
            return Err(format!(
                "{key:?} of {client} names grace {id}, which is over"
            ));
        };
        if grace.start != Start::Own || grace.binding.client != *client {
            return Err(format!("grace {id} is not {key:?}'s own"));
        }
        if !grace.keys.contains(key) {
            return Err(format!("grace {id} has no {key:?}"));
        }
    }
    if b.graces.values().any(|grace| grace.keys.is_empty()) {
        return Err("a grace with no key".into());
    }
    if b.bound.values().any(|e| e.is_empty() && e.stale == 0) {
        return Err("an empty connection entry".into());
    }
    Ok(())
}

proptest::proptest! {
    #[test]
    fn any_sequence_of_events_leaves_the_registry_consistent(
        ops in proptest::collection::vec((0u8..10, 0i32..2, 0u8..3, 1u64..4), 0..80),
    ) {
        let mut b = Bindings::default();
        let mut timer = 0;
        for (op, db, name, client) in ops {
            let k = KeyId::new(db, &[name]);
            let binding = Binding { client, grace_ms: 1 };
            match op {
                0 => b.bind(k.db, &k.name, client, 1),
                1 => {
                    for (grace_ms, keys) in b.disconnected(client) {
                        let id = b.new_grace_id();
                        timer += 1;
                        let binding = Binding { client, grace_ms };
                        b.grace_started(id, timer, binding, Start::Close, keys);
                    }
                    proptest::prop_assert!(!b.bound.contains_key(&client));
                }
                2 => {
                    let id = b.new_grace_id();
                    timer += 1;
                    b.grace_started(id, timer, binding, Start::Own, vec![k]);
                }
                3 => {
                    let id = b.next_grace.saturating_sub(u64::from(name));
                    let of = b.running(id).map(|binding| binding.client);
                    let (due, more) = b.take_due(id, usize::from(name) + 1);
                    proptest::prop_assert_eq!(more, b.running(id).is_some());
                    for key in due {
                        let place = (key, of.unwrap_or_default());
                        proptest::prop_assert!(b.own.get(&place) != Some(&id), "taken once");
                    }
                }
                4 => b.grace_ended(&k, client),
                5 => b.pend(k, binding),
                6 => b.forget(&k, client),
                7 => b.left(&k, client, name == 0),
                8 => {
                    b.flushed(Some(db));
                    let (bound, graces, pending) = (
                        b.bound.values().flat_map(|e| e.iter()).any(|(at, _, _)| at == db),
                        b.graces.values().flat_map(|g| &g.keys).any(|k| k.db == db),
                        b.pending.keys().any(|(k, _)| k.db == db),
                    );
                    proptest::prop_assert!(!bound && !graces && !pending);
                }
                _ => b.swapped(0, 1),
            }
            if let Err(why) = consistent(&b) {
                proptest::prop_assert!(false, "after op {}: {}", op, why);
            }
        }
        // A demoted server keeps every lock it watched, pending, and watches none.
        let (bound, graces, pending) = b.counts();
        b.demote();
        let (bound_after, graces_after, pending_after) = b.counts();
        proptest::prop_assert_eq!((bound_after, graces_after), (0, 0));
        proptest::prop_assert!(pending_after <= bound + graces + pending);
        proptest::prop_assert!(pending_after >= pending);
    }
}
