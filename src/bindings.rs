//! Who holds session-bound locks where: pure Rust, no FFI.
//!
//! A session-bound lock (`SESSION grace-ms`) is in exactly one of three states, and this
//! registry knows which, so that nothing has to scan the keyspace:
//!
//! - **bound**: its connection is open; listed under that connection's id, so that the
//!   connection's close finds all its locks at once;
//! - **in grace**: its connection is gone and a timer releases it when the grace ends;
//! - **pending**: its connection is gone but its grace has not started, because this
//!   server does not serve the key yet (loading, or a replica, which follows its master).
//!
//! The registry may lag behind the keyspace (a lock that was renamed, or replaced by
//! another token, is only forgotten when the server tells): whoever acts on an entry
//! checks the key first. Every entry carries the connection and the grace it was made with.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::OnceLock;

use crate::lock::Session;
use crate::queue::KeyId;

thread_local! {
    /// The registry of this server (the main thread's).
    static REGISTRY: RefCell<Bindings> = RefCell::new(Bindings::default());
}

/// Runs `f` on this server's registry (never from inside another `with`).
pub fn with<T>(f: impl FnOnce(&mut Bindings) -> T) -> T {
    REGISTRY.with(|r| f(&mut r.borrow_mut()))
}

/// A random id of this server process, nonzero. A lock's binding is written into its
/// `DUMP` payload with this id, so that a `RESTORE` on the same running server keeps the
/// binding, while a restart or another server (a different id) sees no connection.
pub fn instance() -> u64 {
    static INSTANCE: OnceLock<u64> = OnceLock::new();
    *INSTANCE.get_or_init(|| {
        loop {
            let id = rand::random::<u64>();
            if id != 0 {
                break id;
            }
        }
    })
}

/// Where a session-bound lock's grace will come from: its connection and its grace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Binding {
    /// The bound connection's id (0: none on this server).
    pub client: u64,
    /// The grace, in ms.
    pub grace_ms: i64,
}

/// The registry of one server.
#[derive(Debug, Default)]
pub struct Bindings {
    /// Locks bound to an open connection, by connection id.
    bound: HashMap<u64, HashMap<KeyId, i64>>,
    /// Locks whose grace runs: the grace's id, the timer that ends it, and what it was
    /// started with.
    graces: HashMap<KeyId, (u64, u64, Binding)>,
    /// The key of each running grace, by the grace's id (what its timer carries: the
    /// key may change database meanwhile, by `SWAPDB`).
    grace_keys: HashMap<u64, KeyId>,
    /// The id of the next grace.
    next_grace: u64,
    /// Locks whose grace starts when the server starts serving them.
    pending: HashMap<KeyId, Binding>,
}

impl Bindings {
    /// The lock on `key` is bound to the open connection `client`.
    pub fn bind(&mut self, key: KeyId, client: u64, grace_ms: i64) {
        self.bound.entry(client).or_default().insert(key, grace_ms);
    }

    /// Connection `client` closed: its locks, each with its grace, now leave the registry
    /// (the caller starts their graces). Nothing for a connection that held none.
    pub fn disconnected(&mut self, client: u64) -> Vec<(KeyId, i64)> {
        self.bound
            .remove(&client)
            .map(|locks| locks.into_iter().collect())
            .unwrap_or_default()
    }

    /// An id for a grace about to start, for its timer to carry.
    pub fn new_grace_id(&mut self) -> u64 {
        self.next_grace += 1;
        self.next_grace
    }

    /// The grace `id` of the lock on `key` runs until `timer` fires. Returns the timer of
    /// a grace that ran before for the key, which the caller stops.
    pub fn grace_started(
        &mut self,
        key: KeyId,
        id: u64,
        timer: u64,
        binding: Binding,
    ) -> Option<u64> {
        self.pending.remove(&key);
        self.grace_keys.insert(id, key.clone());
        let old = self.graces.insert(key, (id, timer, binding))?;
        self.grace_keys.remove(&old.0);
        Some(old.1)
    }

    /// The timer of grace `id` fired: the lock's key (where it is now) and what the grace
    /// was started with; `None` for a grace that ended otherwise.
    pub fn grace_fired(&mut self, id: u64) -> Option<(KeyId, Binding)> {
        let key = self.grace_keys.remove(&id)?;
        let (_, _, binding) = self.graces.remove(&key)?;
        Some((key, binding))
    }

    /// The grace of the lock on `key` is over (it was reclaimed, the lock left). Returns
    /// its timer, which the caller stops, and what the grace was started with.
    pub fn grace_ended(&mut self, key: &KeyId) -> Option<(u64, Binding)> {
        let (id, timer, binding) = self.graces.remove(key)?;
        self.grace_keys.remove(&id);
        Some((timer, binding))
    }

    /// The lock on `key` waits for the server to serve it before its grace starts.
    pub fn pend(&mut self, key: KeyId, binding: Binding) {
        self.pending.insert(key, binding);
    }

    /// Every pending lock: the server serves them now (loaded, promoted).
    pub fn take_pending(&mut self) -> Vec<(KeyId, Binding)> {
        self.pending.drain().collect()
    }

    /// The server follows a master now: every lock it was watching becomes pending (with
    /// the connection and grace it had), and the timers of running graces are returned
    /// for the caller to stop.
    pub fn demote(&mut self) -> Vec<u64> {
        for (client, locks) in self.bound.drain() {
            for (key, grace_ms) in locks {
                self.pending.insert(key, Binding { client, grace_ms });
            }
        }
        let mut timers = Vec::new();
        for (key, (_, timer, binding)) in self.graces.drain() {
            timers.push(timer);
            self.pending.insert(key, binding);
        }
        self.grace_keys.clear();
        timers
    }

    /// The lock on `key`, bound to `client` (0: none), left the keyspace or lost its
    /// binding: every trace of it goes. Returns the timer of its grace, if one ran.
    pub fn forget(&mut self, key: &KeyId, client: u64) -> Option<u64> {
        if let Some(locks) = self.bound.get_mut(&client) {
            locks.remove(key);
            if locks.is_empty() {
                self.bound.remove(&client);
            }
        }
        self.pending.remove(key);
        self.grace_ended(key).map(|(timer, _)| timer)
    }

    /// A session-bound lock bound to `client` left `key`, which now holds `successor` (the
    /// binding of the session-bound lock there now, if any: a `RESTORE` or `COPY` with
    /// `REPLACE` registers the new value before the old one goes). What was the old
    /// lock's goes; the successor's stays. Returns the timer of a grace that ended.
    pub fn left(&mut self, key: &KeyId, client: u64, successor: Option<Session>) -> Option<u64> {
        if successor.map(|s| s.client) != Some(client)
            && let Some(locks) = self.bound.get_mut(&client)
        {
            locks.remove(key);
            if locks.is_empty() {
                self.bound.remove(&client);
            }
        }
        if successor.is_some() {
            return None;
        }
        self.pending.remove(key);
        self.grace_ended(key).map(|(timer, _)| timer)
    }

    /// Database `db` (every database for `None`) was emptied: its locks go. Returns the
    /// timers of their graces.
    pub fn flushed(&mut self, db: Option<i32>) -> Vec<u64> {
        let gone = |key: &KeyId| db.is_none_or(|db| key.0 == db);
        for locks in self.bound.values_mut() {
            locks.retain(|key, _| !gone(key));
        }
        self.bound.retain(|_, locks| !locks.is_empty());
        self.pending.retain(|key, _| !gone(key));
        let timers = self
            .graces
            .iter()
            .filter(|(key, _)| gone(key))
            .map(|(_, (_, timer, _))| *timer)
            .collect();
        self.graces.retain(|key, _| !gone(key));
        self.grace_keys.retain(|_, key| !gone(key));
        timers
    }

    /// Databases `a` and `b` swapped their contents (`SWAPDB`).
    pub fn swapped(&mut self, a: i32, b: i32) {
        let swap = |key: KeyId| -> KeyId {
            match key.0 {
                db if db == a => (b, key.1),
                db if db == b => (a, key.1),
                _ => key,
            }
        };
        for locks in self.bound.values_mut() {
            *locks = std::mem::take(locks)
                .into_iter()
                .map(|(k, g)| (swap(k), g))
                .collect();
        }
        self.graces = std::mem::take(&mut self.graces)
            .into_iter()
            .map(|(k, t)| (swap(k), t))
            .collect();
        self.grace_keys = std::mem::take(&mut self.grace_keys)
            .into_iter()
            .map(|(id, k)| (id, swap(k)))
            .collect();
        self.pending = std::mem::take(&mut self.pending)
            .into_iter()
            .map(|(k, b)| (swap(k), b))
            .collect();
    }

    /// How many locks are bound to open connections, in grace and pending.
    pub fn counts(&self) -> (usize, usize, usize) {
        (
            self.bound.values().map(HashMap::len).sum(),
            self.graces.len(),
            self.pending.len(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(db: i32, name: &str) -> KeyId {
        (db, name.as_bytes().to_vec())
    }

    const B: Binding = Binding {
        client: 0,
        grace_ms: 9,
    };

    #[test]
    fn a_close_finds_all_of_its_locks_and_only_its_own() {
        let mut b = Bindings::default();
        b.bind(key(0, "a"), 7, 100);
        b.bind(key(3, "b"), 7, 0);
        b.bind(key(0, "c"), 8, 5);
        let mut gone = b.disconnected(7);
        gone.sort();
        assert_eq!(gone, vec![(key(0, "a"), 100), (key(3, "b"), 0)]);
        assert!(b.disconnected(7).is_empty());
        assert!(b.disconnected(99).is_empty());
        assert_eq!(b.counts(), (1, 0, 0));
    }

    #[test]
    fn a_grace_replaces_the_one_before_and_ends_once() {
        let mut b = Bindings::default();
        b.pend(
            key(0, "a"),
            Binding {
                client: 0,
                grace_ms: 9,
            },
        );
        assert_eq!(b.grace_started(key(0, "a"), 10, 1, B), None);
        assert_eq!(b.counts(), (0, 1, 0));
        assert_eq!(b.grace_started(key(0, "a"), 11, 2, B), Some(1));
        assert_eq!(b.grace_fired(10), None, "the replaced grace ends nothing");
        assert_eq!(b.grace_ended(&key(0, "a")), Some((2, B)));
        assert_eq!(b.grace_ended(&key(0, "a")), None);
        assert_eq!(b.grace_fired(11), None);
        b.grace_started(key(0, "b"), 12, 3, B);
        assert_eq!(b.grace_fired(12), Some((key(0, "b"), B)));
        assert_eq!(b.counts(), (0, 0, 0));
    }

    #[test]
    fn forgetting_a_lock_removes_every_trace() {
        let mut b = Bindings::default();
        b.bind(key(0, "a"), 7, 100);
        b.bind(key(0, "b"), 7, 100);
        b.forget(&key(0, "a"), 7);
        assert_eq!(b.disconnected(7), vec![(key(0, "b"), 100)]);
        b.grace_started(key(0, "c"), 1, 4, B);
        assert_eq!(b.forget(&key(0, "c"), 0), Some(4));
        b.pend(
            key(1, "d"),
            Binding {
                client: 0,
                grace_ms: 1,
            },
        );
        b.forget(&key(1, "d"), 0);
        assert_eq!(b.counts(), (0, 0, 0));
    }

    #[test]
    fn a_lock_that_left_takes_only_its_own_traces() {
        let mut b = Bindings::default();
        let same = Session {
            grace_ms: 1,
            client: 7,
        };
        // Replaced by a lock of the same connection (RESTORE ... REPLACE): kept.
        b.bind(key(0, "a"), 7, 1);
        assert_eq!(b.left(&key(0, "a"), 7, Some(same)), None);
        assert_eq!(b.counts(), (1, 0, 0));
        // Replaced by another connection's lock: only the old binding goes.
        b.bind(key(0, "a"), 8, 1);
        b.left(&key(0, "a"), 7, Some(Session { client: 8, ..same }));
        assert_eq!(b.disconnected(8), vec![(key(0, "a"), 1)]);
        assert!(b.disconnected(7).is_empty());
        // Gone for good: its grace ends too.
        b.grace_started(key(0, "g"), 1, 4, B);
        assert_eq!(b.left(&key(0, "g"), 0, None), Some(4));
        assert_eq!(b.counts(), (0, 0, 0));
    }

    #[test]
    fn a_demoted_server_keeps_every_lock_pending() {
        let mut b = Bindings::default();
        b.bind(key(0, "a"), 7, 100);
        b.grace_started(key(0, "b"), 1, 3, B);
        let timers = b.demote();
        assert_eq!(timers, vec![3]);
        let mut pending = b.take_pending();
        pending.sort();
        assert_eq!(
            pending,
            vec![
                (
                    key(0, "a"),
                    Binding {
                        client: 7,
                        grace_ms: 100
                    }
                ),
                (key(0, "b"), B),
            ]
        );
    }

    #[test]
    fn a_flush_forgets_its_database_only() {
        let mut b = Bindings::default();
        b.bind(key(0, "a"), 7, 1);
        b.bind(key(1, "a"), 7, 1);
        b.grace_started(key(1, "g"), 1, 5, B);
        b.pend(
            key(1, "p"),
            Binding {
                client: 0,
                grace_ms: 1,
            },
        );
        assert_eq!(b.flushed(Some(1)), vec![5]);
        assert_eq!(b.counts(), (1, 0, 0));
        assert!(b.flushed(None).is_empty());
        assert_eq!(b.counts(), (0, 0, 0));
    }

    #[test]
    fn a_swap_moves_locks_between_databases() {
        let mut b = Bindings::default();
        b.bind(key(0, "a"), 7, 1);
        b.grace_started(key(1, "g"), 1, 5, B);
        b.pend(
            key(2, "p"),
            Binding {
                client: 0,
                grace_ms: 1,
            },
        );
        b.swapped(0, 1);
        assert_eq!(b.disconnected(7), vec![(key(1, "a"), 1)]);
        assert_eq!(
            b.grace_fired(1),
            Some((key(0, "g"), B)),
            "the timer finds the new db"
        );
        assert_eq!(b.take_pending()[0].0, key(2, "p"));
    }

    /// Every part of the registry agrees with the others.
    fn consistent(b: &Bindings) -> Result<(), String> {
        if b.graces.len() != b.grace_keys.len() {
            return Err(format!(
                "{} graces, {} ids",
                b.graces.len(),
                b.grace_keys.len()
            ));
        }
        for (key, (id, _, _)) in &b.graces {
            if b.grace_keys.get(id) != Some(key) {
                return Err(format!("grace {id} of {key:?} not found by its id"));
            }
        }
        if b.bound.values().any(HashMap::is_empty) {
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
                let k = (db, vec![name]);
                let binding = Binding { client, grace_ms: 1 };
                match op {
                    0 => b.bind(k, client, 1),
                    1 => {
                        b.disconnected(client);
                        proptest::prop_assert!(!b.bound.contains_key(&client));
                    }
                    2 => {
                        let id = b.new_grace_id();
                        timer += 1;
                        b.grace_started(k, id, timer, binding);
                    }
                    3 => {
                        let id = b.next_grace.saturating_sub(u64::from(name));
                        if let Some((key, _)) = b.grace_fired(id) {
                            proptest::prop_assert!(!b.graces.contains_key(&key));
                        }
                    }
                    4 => {
                        b.grace_ended(&k);
                    }
                    5 => b.pend(k, binding),
                    6 => {
                        b.forget(&k, client);
                    }
                    7 => {
                        let successor = (name == 0).then_some(Session { grace_ms: 1, client });
                        b.left(&k, client, successor);
                    }
                    8 => {
                        b.flushed(Some(db));
                        let (bound, graces, pending) = (
                            b.bound.values().flat_map(HashMap::keys).any(|k| k.0 == db),
                            b.graces.keys().any(|k| k.0 == db),
                            b.pending.keys().any(|k| k.0 == db),
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
}
