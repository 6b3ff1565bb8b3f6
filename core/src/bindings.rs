//! Who holds session-bound locks where: pure Rust, no server calls. (The running
//! server's registry is kept by `keyspace/registry.rs`.)
//!
//! A session-bound lock (`SESSION grace-ms`) is in exactly one of three states, and this
//! registry knows which, so that nothing has to scan the keyspace:
//!
//! - **bound**: its connection is open; listed under that connection's id, so that the
//!   connection's close finds all its locks at once;
//! - **in grace**: its connection is gone and a grace runs that releases it when it ends.
//!   A connection's close starts one grace per grace length among its locks, not one per
//!   lock: a close costs a copy of each key's name, and the locks are released in slices
//!   of the event loop (`session.rs`). A grace started for one lock on its own (it
//!   arrived, or the server began to serve it) replaces any that ran for it before;
//! - **pending**: its connection is gone but its grace has not started, because this
//!   server does not serve the key yet (loading, or a replica, which follows its master).
//!
//! The registry may lag behind the keyspace (a lock that was renamed, reclaimed, or
//! replaced by another token, is only forgotten when the server tells, and a grace keeps
//! the keys of locks that left): whoever acts on an entry checks the key first. Every
//! entry carries the connection and the grace it was made with.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::OnceLock;

use crate::client_locks::ClientLocks;
use crate::queue::KeyId;
use crate::room;

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

/// A lock's place in the registry: its key and the connection it is bound to (0: none).
pub type Bound = (KeyId, u64);

/// Hashes ids handed out in sequence (the server's connection ids, the registry's own
/// grace ids), which no client chooses, so a multiply spreads them and no flood of chosen keys can collide
/// them (what SipHash, the default, guards against at ten times the cost).
#[derive(Debug, Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = (self.0 ^ id).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn finish(&self) -> u64 {
        // hashbrown takes its bucket from the low bits and its tag from the top seven:
        // fold the well-mixed high half down.
        self.0 ^ (self.0 >> 32)
    }
}

/// A map keyed by such an id.
type ById<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// Where a grace comes from, which decides which of its keys it still ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// A connection's close: every lock of its list bound with this grace, except those a
    /// grace started later on its own has taken over.
    Close,
    /// One lock at a time (it arrived, the server began to serve it, or it has the rest
    /// of a longer grace): each key is the grace's until another such start replaces it.
    Own,
}

/// A grace that runs: the connection and length it was started with, how it was
/// started, the keys whose locks it releases, not yet taken, and the timer that ends it.
#[derive(Debug)]
struct Grace {
    binding: Binding,
    start: Start,
    /// In reverse order of the binds: the next to release is last.
    keys: Vec<KeyId>,
    timer: u64,
}

/// The registry of one server.
#[derive(Debug, Default)]
pub struct Bindings {
    /// Locks bound to an open connection, by connection id.
    bound: ById<ClientLocks>,
    /// The running graces, by id (what the timer carries).
    graces: ById<Grace>,
    /// For a lock whose grace was started on its own (`Start::Own`), by key and
    /// connection: that grace's id. The keys of such a grace are its own only while this
    /// names it; a close's grace leaves the keys named here alone.
    own: HashMap<Bound, u64>,
    /// The id of the next grace.
    next_grace: u64,
    /// Locks whose grace starts when the server starts serving them: their grace.
    pending: HashMap<Bound, i64>,
}

/// The keys of graces that start together, by what they share (a grace length, or a
/// whole binding).
pub type Starts<G = i64> = Vec<(G, Vec<KeyId>)>;

/// Adds `key` to the keys that share `grace` in `starts` (few groups: a connection
/// seldom varies its grace).
pub fn add_start<G: PartialEq>(starts: &mut Starts<G>, grace: G, key: KeyId) {
    match starts.iter_mut().find(|(g, _)| *g == grace) {
        Some((_, keys)) => keys.push(key),
        None => starts.push((grace, vec![key])),
    }
}

/// Each key once, with the shortest of its graces.
fn shortest(keys: impl Iterator<Item = (KeyId, i64)>) -> HashMap<KeyId, i64> {
    let mut shortest: HashMap<KeyId, i64> = HashMap::new();
    for (key, grace_ms) in keys {
        shortest
            .entry(key)
            .and_modify(|g| *g = (*g).min(grace_ms))
            .or_insert(grace_ms);
    }
    shortest
}

/// How many stale entries a connection's list may hold before it is compacted.
const COMPACT_AFTER: usize = 32;

impl Bindings {
    /// The lock on key `name` of database `db` is bound to the open connection `client`.
    pub fn bind(&mut self, db: i32, name: &[u8], client: u64, grace_ms: i64) {
        // A connection binds many locks: one lookup, and the entry API's work only for
        // its first.
        if let Some(locks) = self.bound.get_mut(&client) {
            return locks.push(db, name, grace_ms);
        }
        let mut locks = ClientLocks::default();
        locks.push(db, name, grace_ms);
        self.bound.insert(client, locks);
    }

    /// Whether some lock is bound to an open connection (whose close must be heard).
    pub fn watches_connections(&self) -> bool {
        !self.bound.is_empty()
    }

    /// Connection `client` closed: its locks leave the registry, by grace length, in the
    /// order they were bound, for the caller to start a grace for each length (a
    /// `Start::Close`). A key may come more than once (bound again, or with two graces):
    /// when a grace ends, the holders whose grace is longer get the rest of theirs, and a
    /// grace of a lock that has left or been bound elsewhere ends on nothing. Nothing for
    /// a connection that held none.
    pub fn disconnected(&mut self, client: u64) -> Starts {
        let Some(entry) = self.bound.remove(&client) else {
            return Vec::new();
        };
        self.give_room_back();
        let mut starts = Starts::new();
        for (db, grace_ms, name) in entry.iter() {
            add_start(&mut starts, grace_ms, KeyId::new(db, name));
        }
        starts
    }

    /// An id for a grace about to start, for its timer to carry.
    pub fn new_grace_id(&mut self) -> u64 {
        self.next_grace += 1;
        self.next_grace
    }

    /// Grace `id`, `binding.grace_ms` long, of the locks on `keys` bound to
    /// `binding.client`, runs until `timer` fires. A `Start::Own` grace takes each key
    /// over from any grace that ran for it, and from its pending start.
    pub fn grace_started(
        &mut self,
        id: u64,
        timer: u64,
        binding: Binding,
        start: Start,
        mut keys: Vec<KeyId>,
    ) {
        if start == Start::Own {
            for key in &keys {
                let place = (key.clone(), binding.client);
                self.pending.remove(&place);
                self.own.insert(place, id);
            }
        }
        keys.reverse();
        let grace = Grace {
            binding,
            start,
            keys,
            timer,
        };
        self.graces.insert(id, grace);
    }

    /// What grace `id` was started with; `None` once it has ended.
    pub fn running(&self, id: u64) -> Option<Binding> {
        self.graces.get(&id).map(|grace| grace.binding)
    }

    /// Every lock a running grace will release, with its connection, each once: what
    /// `INFO lock` counts in `sessions_in_grace` once the caller has checked each is
    /// still bound to that connection (a lock released, deleted or reclaimed meanwhile
    /// stays listed until its grace ends). Linear in the keys of running graces.
    pub fn in_grace(&self) -> Vec<Bound> {
        let mut found: HashSet<Bound> = HashSet::new();
        for grace in self.graces.values() {
            for key in &grace.keys {
                found.insert((key.clone(), grace.binding.client));
            }
        }
        found.into_iter().collect()
    }

    /// Grace `id` was given a new timer.
    pub fn rearmed(&mut self, id: u64, timer: u64) {
        if let Some(grace) = self.graces.get_mut(&id) {
            grace.timer = timer;
        }
    }

    /// The grace `id` ended: the next `most` keys, in the order of the binds, whose locks
    /// it releases (each leaves the grace), and whether keys are left for later. Once
    /// none are, the grace is over.
    pub fn take_due(&mut self, id: u64, most: usize) -> (Vec<KeyId>, bool) {
        let Some(grace) = self.graces.get_mut(&id) else {
            return (Vec::new(), false);
        };
        let client = grace.binding.client;
        let mut due = Vec::new();
        while due.len() < most {
            let Some(key) = grace.keys.pop() else {
                break;
            };
            let place = (key, client);
            let its_own = match grace.start {
                Start::Own if self.own.get(&place) == Some(&id) => {
                    self.own.remove(&place);
                    true
                }
                Start::Own => false,
                Start::Close => self.own.is_empty() || !self.own.contains_key(&place),
            };
            if its_own {
                due.push(place.0);
            }
        }
        let more = !grace.keys.is_empty();
        if !more {
            self.graces.remove(&id);
            self.give_room_back();
        }
        (due, more)
    }

    /// Shrinks the maps a crowd of locks, connections or graces grew (`room.rs`).
    fn give_room_back(&mut self) {
        fn shrink<K: Eq + std::hash::Hash, V, S: std::hash::BuildHasher>(
            map: &mut HashMap<K, V, S>,
        ) {
            if room::should_shrink(map.len(), map.capacity()) {
                map.shrink_to_fit();
            }
        }
        shrink(&mut self.bound);
        shrink(&mut self.graces);
        shrink(&mut self.own);
        shrink(&mut self.pending);
    }

    /// The grace the lock on `key` bound to `client` had on its own is over (it was
    /// reclaimed, the lock left): that grace ends on nothing. (A close's grace that
    /// lists the key looks at it, and finds it no longer bound to that connection.)
    pub fn grace_ended(&mut self, key: &KeyId, client: u64) {
        self.own.remove(&(key.clone(), client));
    }

    /// The lock on `key` waits for the server to serve it before its grace starts (with
    /// the shortest grace of its holders bound to that connection).
    pub fn pend(&mut self, key: KeyId, binding: Binding) {
        self.pending
            .entry((key, binding.client))
            .and_modify(|grace| *grace = (*grace).min(binding.grace_ms))
            .or_insert(binding.grace_ms);
    }

    /// Every pending lock, by connection and grace: the server serves them now (loaded,
    /// promoted).
    pub fn take_pending(&mut self) -> Vec<(KeyId, Binding)> {
        let pending = std::mem::take(&mut self.pending);
        pending
            .into_iter()
            .map(|((key, client), grace_ms)| (key, Binding { client, grace_ms }))
            .collect()
    }

    /// The server follows a master now: every lock it was watching becomes pending (with
    /// the connection and grace it had), and the timers of running graces are returned
    /// for the caller to stop.
    pub fn demote(&mut self) -> Vec<u64> {
        let bound: Vec<(u64, ClientLocks)> = self.bound.drain().collect();
        for (client, entry) in bound {
            for (key, grace_ms) in entry.keys() {
                self.pend(key, Binding { client, grace_ms });
            }
        }
        let mut timers = Vec::new();
        let ids: Vec<u64> = self.graces.keys().copied().collect();
        for id in ids {
            let Some(binding) = self.running(id) else {
                continue;
            };
            timers.extend(self.graces.get(&id).map(|grace| grace.timer));
            for key in self.take_due(id, usize::MAX).0 {
                self.pend(key, binding);
            }
        }
        self.graces.clear();
        self.own.clear();
        self.give_room_back();
        timers
    }

    /// The lock on `key`, bound to `client` (0: none), lost that binding (its token
    /// acquired it again): its grace and pending start go; its entry in the connection's
    /// list counts as stale.
    pub fn forget(&mut self, key: &KeyId, client: u64) {
        if let Some(entry) = self.bound.get_mut(&client) {
            entry.stale += 1;
        }
        self.pending.remove(&(key.clone(), client));
        self.grace_ended(key, client);
    }

    /// A session-bound lock bound to `client` left `key`; `still_bound` says whether what
    /// the key holds now is bound to that connection too (a `RESTORE` or `COPY` with
    /// `REPLACE` registers the new value before the old one goes). What was the old
    /// lock's goes, unless it is.
    pub fn left(&mut self, key: &KeyId, client: u64, still_bound: bool) {
        if !still_bound {
            self.forget(key, client);
        }
    }

    /// The entries of `client`'s list when half of it is stale, for the caller to check
    /// against the keyspace and `compact`; `None` while it is not.
    pub fn to_compact(&self, client: u64) -> Option<Vec<KeyId>> {
        let entry = self.bound.get(&client)?;
        (entry.stale >= COMPACT_AFTER && entry.stale * 2 >= entry.len())
            .then(|| entry.keys().map(|(key, _)| key).collect())
    }

    /// Keeps in `client`'s list only the keys still bound to it (`still_bound`), each once.
    pub fn compact(&mut self, client: u64, still_bound: &[KeyId]) {
        let Some(entry) = self.bound.get_mut(&client) else {
            return;
        };
        let keep: std::collections::HashSet<&KeyId> = still_bound.iter().collect();
        let kept = shortest(entry.keys().filter(|(key, _)| keep.contains(key)));
        *entry = kept.into_iter().collect();
        if entry.is_empty() {
            self.bound.remove(&client);
        }
    }

    /// Database `db` (every database for `None`) was emptied: its locks go. Returns the
    /// timers of the graces that have no key left.
    pub fn flushed(&mut self, db: Option<i32>) -> Vec<u64> {
        let emptied = |at: i32| db.is_none_or(|db| at == db);
        let gone = |key: &KeyId| emptied(key.db);
        for entry in self.bound.values_mut() {
            entry.retain(|db, _| !emptied(db));
        }
        self.bound.retain(|_, entry| !entry.is_empty());
        self.pending.retain(|(key, _), _| !gone(key));
        self.own.retain(|(key, _), _| !gone(key));
        let mut timers = Vec::new();
        self.graces.retain(|_, grace| {
            grace.keys.retain(|key| !gone(key));
            if grace.keys.is_empty() {
                timers.push(grace.timer);
            }
            !grace.keys.is_empty()
        });
        self.give_room_back();
        timers
    }

    /// Databases `a` and `b` swapped their contents (`SWAPDB`).
    pub fn swapped(&mut self, a: i32, b: i32) {
        let swap_db = |db: &mut i32| {
            if *db == a {
                *db = b;
            } else if *db == b {
                *db = a;
            }
        };
        let swap = |key: &mut KeyId| swap_db(&mut key.db);
        for entry in self.bound.values_mut() {
            entry.renumber_dbs(swap_db);
        }
        for grace in self.graces.values_mut() {
            grace.keys.iter_mut().for_each(swap);
        }
        self.own = std::mem::take(&mut self.own)
            .into_iter()
            .map(|((mut k, c), id)| {
                swap(&mut k);
                ((k, c), id)
            })
            .collect();
        self.pending = std::mem::take(&mut self.pending)
            .into_iter()
            .map(|((mut k, c), g)| {
                swap(&mut k);
                ((k, c), g)
            })
            .collect();
    }

    /// How many entries the connections' lists hold, graces hold (taken over or not) and
    /// locks are pending (for the tests' invariants).
    #[cfg(test)]
    pub fn counts(&self) -> (usize, usize, usize) {
        (
            self.bound.values().map(ClientLocks::len).sum(),
            self.graces.values().map(|grace| grace.keys.len()).sum(),
            self.pending.len(),
        )
    }
}

#[cfg(test)]
mod tests;
