//! The waiting clients of every key, first come first served: pure Rust, no FFI.
//!
//! A waiter stays in its key's queue, blocked, until it is granted the lock, times out
//! or goes away. The grant to the oldest waiter is written at once when the lock is
//! freed (the module's `keyspace/waiting/`), and the waiter leaves the queue in the same step: a client
//! is either queued or answered, never both.

use std::collections::{HashMap, VecDeque};

use crate::lock::Session;
use crate::room;
use crate::rules::{self, Holding, Kind};

pub use crate::key::KeyId;

/// One client blocked in `LOCK.ACQUIRE ... WAIT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    /// The server's handle for the blocked client (an address, for lookups).
    pub handle: usize,
    /// The key it waits for (the first, for `LOCK.ACQUIREALL`).
    pub key: KeyId,
    /// The other keys it waits for, all at once (`LOCK.ACQUIREALL`), in the order given;
    /// empty for `LOCK.ACQUIRE`.
    pub more: Vec<KeyId>,
    /// Whether it asked with `LOCK.ACQUIREALL`, whose reply lists a fence per key (one
    /// key included).
    pub all_keys: bool,
    /// The token it will hold: its own or one the server made when it started waiting.
    pub token: Vec<u8>,
    /// The module timer that wakes the server at the wait's deadline, if it has one.
    pub wake_timer: Option<u64>,
    /// The TTL of the lock once granted.
    pub ttl_ms: i64,
    /// The connection the lock will be bound to, with its grace (`SESSION`), if any.
    pub session: Option<Session>,
    /// The `CLIENT ID` of its connection, which the lock will name (`LOCK.HOLDERS`).
    pub client: u64,
    /// How it asks to hold the key: exclusive, or shared (with the limit it gave).
    pub kind: Kind,
    /// The value it will publish once granted (`VALUE v`), if any.
    pub value: Option<Box<[u8]>>,
    /// The replicas its grant waits for before it is answered (`REPLICAS n`, the
    /// `lock.replicas` setting), as asked: decided when it is granted.
    pub replicas: crate::replicas::Asked,
    /// When it arrived, on the module's monotonic clock (us): how long it waited.
    pub arrived_us: u64,
}

impl Waiter {
    /// Every key it waits for, in the order given.
    pub fn keys(&self) -> impl Iterator<Item = &KeyId> {
        std::iter::once(&self.key).chain(&self.more)
    }

    /// Whether it waits for several keys at once (`LOCK.ACQUIREALL`).
    pub fn is_multi(&self) -> bool {
        !self.more.is_empty()
    }

    /// A waiter for `keys` (the first, then the others; several: `LOCK.ACQUIREALL`) in
    /// `kind`, with nothing else that the queues and the handoff decision look at (the
    /// tests' and the model's waiter).
    #[cfg(test)]
    pub(crate) fn for_keys(handle: usize, keys: Vec<KeyId>, kind: Kind) -> Waiter {
        let mut keys = keys.into_iter();
        let key = keys.next().expect("a key");
        let more: Vec<KeyId> = keys.collect();
        Waiter {
            handle,
            key,
            all_keys: !more.is_empty(),
            more,
            token: Vec::new(),
            wake_timer: None,
            ttl_ms: 1,
            session: None,
            client: 0,
            kind,
            value: None,
            replicas: Default::default(),
            arrived_us: handle as u64,
        }
    }
}

/// Whether the oldest waiter of a key, one that waits for several keys, is granted them
/// all now ([`Queues::ready_all`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllReady {
    /// Waiter `id` is the oldest waiter of every key it asks for, and each fits: grant
    /// them all, at once.
    Ready(u64),
    /// The oldest waiter of the key (if any) asks for that key alone.
    NotMulti,
    /// It waits still, and the key stays free for it meanwhile (no newcomer passes it).
    /// `on`: the first other key that holds it back, by its holders or by older waiters
    /// (`None`: the key itself does).
    Blocked {
        /// The other key that holds it back, if not this one.
        on: Option<KeyId>,
    },
}

/// A key that waiters wait for, as `LOCK.CONTENDED` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contended {
    /// The key.
    pub key: KeyId,
    /// How many wait for it.
    pub waiters: usize,
    /// When the oldest of them arrived (the module's monotonic clock, us).
    pub oldest_us: u64,
}

/// All waiters of the server.
#[derive(Debug, Default)]
pub struct Queues {
    next_id: u64,
    waiters: HashMap<u64, Waiter>,
    by_handle: HashMap<usize, u64>,
    queues: HashMap<KeyId, VecDeque<u64>>,
}

impl Queues {
    /// Adds a waiter at the tail of its key's queue; returns its id.
    pub fn push(&mut self, waiter: Waiter) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.by_handle.insert(waiter.handle, id);
        for key in waiter.keys() {
            self.queues.entry(key.clone()).or_default().push_back(id);
        }
        self.waiters.insert(id, waiter);
        id
    }

    /// Whether clients wait for `key`: a newcomer must stand back for them.
    pub fn busy(&self, key: &KeyId) -> bool {
        self.queues.contains_key(key)
    }

    /// Clients blocked on `key`.
    pub fn waiting(&self, key: &KeyId) -> usize {
        self.queues.get(key).map_or(0, VecDeque::len)
    }

    /// Clients blocked on any key.
    pub fn total(&self) -> usize {
        self.waiters.len()
    }

    /// Whether no client waits anywhere.
    pub fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }

    /// Keys that have waiters.
    pub fn keys(&self) -> Vec<KeyId> {
        self.queues.keys().cloned().collect()
    }

    /// The oldest waiter of `key`: its id and the waiter.
    pub fn head(&self, key: &KeyId) -> Option<(u64, &Waiter)> {
        let id = *self.queues.get(key)?.front()?;
        Some((id, &self.waiters[&id]))
    }

    /// How many waiters at the head of `key`'s queue are granted now beside `held`
    /// (`rules::admit`): one exclusive waiter, or the shared ones up to the next
    /// exclusive one, as far as the limit allows; never past a waiter for several keys
    /// (`ready_all` decides for it).
    pub fn admissible(&self, key: &KeyId, held: Option<Holding>) -> usize {
        let Some(queue) = self.queues.get(key) else {
            return 0;
        };
        let singles = queue.iter().map(|id| &self.waiters[id]);
        rules::admit(
            held,
            singles.map_while(|w| (!w.is_multi()).then_some(w.kind)),
        )
    }

    /// Whether the oldest waiter of `key`, if it waits for several keys, is granted them
    /// all now: it must be the oldest waiter of each (first come, first served on every
    /// key), and each must fit it (`fits`: free for it, by the rules, as its holders stand
    /// now). Keys are looked at in the order it gave, `key` among them, and no further
    /// than the first that holds it back.
    pub fn ready_all(
        &self,
        key: &KeyId,
        mut fits: impl FnMut(&KeyId, &Waiter) -> bool,
    ) -> AllReady {
        let Some((id, waiter)) = self.head(key) else {
            return AllReady::NotMulti;
        };
        if !waiter.is_multi() {
            return AllReady::NotMulti;
        }
        for other in waiter.keys() {
            let oldest = self.head(other).is_some_and(|(head, _)| head == id);
            if !oldest || !fits(other, waiter) {
                return AllReady::Blocked {
                    on: (other != key).then(|| other.clone()),
                };
            }
        }
        AllReady::Ready(id)
    }

    /// The keys of database `db` that have waiters, each with how many and when its
    /// oldest arrived (`LOCK.CONTENDED`): the cost grows with the keys that have waiters,
    /// not with all locks.
    pub fn contended(&self, db: i32) -> Vec<Contended> {
        self.queues
            .iter()
            .filter(|(key, _)| key.db == db)
            .filter_map(|(key, queue)| {
                let oldest = queue.iter().map(|id| self.waiters[id].arrived_us).min()?;
                Some(Contended {
                    key: key.clone(),
                    waiters: queue.len(),
                    oldest_us: oldest,
                })
            })
            .collect()
    }

    /// The waiters of `key`, oldest first.
    pub fn ids(&self, key: &KeyId) -> Vec<u64> {
        self.queues
            .get(key)
            .map_or_else(Vec::new, |queue| queue.iter().copied().collect())
    }

    /// The keys of which waiter `id` is the oldest waiter.
    pub fn heads_of(&self, id: u64) -> Vec<KeyId> {
        let Some(waiter) = self.waiters.get(&id) else {
            return Vec::new();
        };
        waiter
            .keys()
            .filter(|key| self.queues.get(*key).and_then(|q| q.front()) == Some(&id))
            .cloned()
            .collect()
    }

    /// Takes the oldest waiter of `key` out of its queue (to be granted the lock).
    pub fn pop_head(&mut self, key: &KeyId) -> Option<Waiter> {
        let (id, _) = self.head(key)?;
        self.remove(id)
    }

    /// Records the timer that ends waiter `id`'s wait.
    pub fn set_wake_timer(&mut self, id: u64, timer: u64) {
        if let Some(waiter) = self.waiters.get_mut(&id) {
            waiter.wake_timer = Some(timer);
        }
    }

    /// Takes every waiter out of every queue, oldest first within each key.
    pub fn drain(&mut self) -> Vec<Waiter> {
        let mut ids: Vec<u64> = self.waiters.keys().copied().collect();
        ids.sort_unstable();
        ids.into_iter().filter_map(|id| self.remove(id)).collect()
    }

    /// The id of the waiter with this handle, if it is still blocked.
    pub fn id_of(&self, handle: usize) -> Option<u64> {
        self.by_handle.get(&handle).copied()
    }

    /// Takes waiter `id` out of its queue (granted, timed out or gone).
    pub fn remove(&mut self, id: u64) -> Option<Waiter> {
        let waiter = self.waiters.remove(&id)?;
        self.by_handle.remove(&waiter.handle);
        for key in waiter.keys() {
            if let Some(queue) = self.queues.get_mut(key) {
                queue.retain(|&queued| queued != id);
                if queue.is_empty() {
                    self.queues.remove(key);
                }
            }
        }
        self.shrink();
        Some(waiter)
    }

    /// Gives memory back once a crowd of waiters has gone (maps keep their largest size),
    /// all of it when the last one leaves: a waiter holds some 140 bytes of the maps, so
    /// the 64 slots a map kept after a crowd held 10 KB for nobody.
    fn shrink(&mut self) {
        if room::should_shrink(self.waiters.len(), self.waiters.capacity()) {
            self.waiters.shrink_to_fit();
            self.by_handle.shrink_to_fit();
        }
        if room::should_shrink(self.queues.len(), self.queues.capacity()) {
            self.queues.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> KeyId {
        KeyId::new(0, name.as_bytes())
    }

    fn waiter(handle: usize, name: &str) -> Waiter {
        Waiter {
            handle,
            key: key(name),
            more: Vec::new(),
            all_keys: false,
            token: format!("t{handle}").into_bytes(),
            wake_timer: None,
            ttl_ms: 1000,
            session: None,
            client: 0,
            kind: Kind::Exclusive,
            value: None,
            replicas: Default::default(),
            arrived_us: handle as u64,
        }
    }

    fn head_handle(q: &Queues, name: &str) -> Option<usize> {
        q.head(&key(name)).map(|(_, w)| w.handle)
    }

    #[test]
    fn waiters_are_served_in_arrival_order() {
        let mut q = Queues::default();
        for handle in [10, 20, 30] {
            q.push(waiter(handle, "k"));
        }
        assert_eq!(q.waiting(&key("k")), 3);
        for expected in [10, 20, 30] {
            let (id, w) = q.head(&key("k")).unwrap();
            assert_eq!(w.handle, expected);
            assert_eq!(
                q.remove(id).unwrap().token,
                format!("t{expected}").into_bytes()
            );
        }
        assert!(!q.busy(&key("k")));
        assert!(q.is_empty());
    }

    #[test]
    fn a_waiter_leaving_from_the_middle_keeps_the_order_of_the_rest() {
        let mut q = Queues::default();
        q.push(waiter(1, "k"));
        let b = q.push(waiter(2, "k"));
        q.push(waiter(3, "k"));
        assert_eq!(q.remove(b).unwrap().handle, 2);
        assert_eq!(q.remove(b), None);
        assert_eq!(head_handle(&q, "k"), Some(1));
        let (a, _) = q.head(&key("k")).unwrap();
        q.remove(a);
        assert_eq!(head_handle(&q, "k"), Some(3));
        assert_eq!(q.total(), 1);
    }

    #[test]
    fn keys_keep_separate_queues() {
        let mut q = Queues::default();
        let a = q.push(waiter(1, "k"));
        q.push(waiter(2, "other"));
        q.remove(a);
        assert!(!q.busy(&key("k")));
        assert!(q.busy(&key("other")));
        assert_eq!(q.keys(), vec![key("other")]);
    }

    #[test]
    fn handles_find_their_waiters_until_they_leave() {
        let mut q = Queues::default();
        let a = q.push(waiter(77, "k"));
        assert_eq!(q.id_of(77), Some(a));
        assert_eq!(q.head(&key("k")).unwrap().1.handle, 77);
        q.remove(a);
        assert_eq!(q.id_of(77), None);
        assert_eq!(q.head(&key("k")), None);
    }

    #[test]
    fn the_head_is_popped_and_the_next_waiter_moves_up() {
        let mut q = Queues::default();
        q.push(waiter(1, "k"));
        let b = q.push(waiter(2, "k"));
        q.set_wake_timer(b, 99);
        assert_eq!(q.pop_head(&key("k")).unwrap().handle, 1);
        let next = q.pop_head(&key("k")).unwrap();
        assert_eq!((next.handle, next.wake_timer), (2, Some(99)));
        assert_eq!(q.pop_head(&key("k")), None);
        assert!(q.is_empty());
    }

    #[test]
    fn drain_empties_every_queue_in_arrival_order() {
        let mut q = Queues::default();
        q.push(waiter(1, "a"));
        q.push(waiter(2, "b"));
        q.push(waiter(3, "a"));
        let handles: Vec<usize> = q.drain().into_iter().map(|w| w.handle).collect();
        assert_eq!(handles, vec![1, 2, 3]);
        assert!(q.is_empty() && q.keys().is_empty());
    }

    #[test]
    fn databases_keep_separate_queues() {
        let mut q = Queues::default();
        q.push(Waiter {
            key: KeyId::new(1, b"k"),
            ..waiter(1, "k")
        });
        assert!(!q.busy(&key("k")));
        assert!(q.busy(&KeyId::new(1, b"k")));
    }

    #[test]
    fn a_batch_of_shared_waiters_at_the_head_is_admissible_together() {
        let mut q = Queues::default();
        let reader = |handle| Waiter {
            kind: Kind::READER,
            ..waiter(handle, "k")
        };
        let first = q.push(reader(1));
        q.push(reader(2));
        q.push(waiter(3, "k"));
        q.push(reader(4));
        assert_eq!(q.heads_of(first), vec![key("k")]);
        assert_eq!(q.admissible(&key("k"), None), 2);
        assert_eq!(q.admissible(&key("k"), Some(Holding::EXCLUSIVE)), 0);
        assert_eq!(q.admissible(&key("other"), None), 0);
        q.remove(first);
        q.pop_head(&key("k"));
        assert_eq!(q.admissible(&key("k"), None), 1, "the writer alone");
    }

    fn multi(handle: usize, names: &[&str]) -> Waiter {
        Waiter {
            more: names[1..].iter().map(|name| key(name)).collect(),
            all_keys: true,
            ..waiter(handle, names[0])
        }
    }

    #[test]
    fn a_waiter_for_several_keys_queues_on_each_and_leaves_all_at_once() {
        let mut q = Queues::default();
        let all = q.push(multi(1, &["a", "b", "c"]));
        q.push(waiter(2, "b"));
        for name in ["a", "b", "c"] {
            assert_eq!(head_handle(&q, name), Some(1), "{name}");
        }
        assert_eq!(q.waiting(&key("b")), 2);
        assert_eq!(q.total(), 2);
        assert_eq!(q.heads_of(all), vec![key("a"), key("b"), key("c")]);
        assert_eq!(q.remove(all).unwrap().handle, 1);
        assert!(!q.busy(&key("a")) && !q.busy(&key("c")));
        assert_eq!(head_handle(&q, "b"), Some(2));
    }

    #[test]
    fn no_single_waiter_is_admitted_past_a_waiter_for_several_keys() {
        let mut q = Queues::default();
        q.push(Waiter {
            kind: Kind::READER,
            ..waiter(1, "k")
        });
        q.push(Waiter {
            kind: Kind::READER,
            ..multi(2, &["k", "j"])
        });
        q.push(Waiter {
            kind: Kind::READER,
            ..waiter(3, "k")
        });
        assert_eq!(q.admissible(&key("k"), None), 1, "the first reader only");
        q.pop_head(&key("k"));
        assert_eq!(q.admissible(&key("k"), None), 0);
    }

    #[test]
    fn all_keys_are_granted_only_to_the_oldest_waiter_of_each_when_each_fits() {
        let mut q = Queues::default();
        let older = q.push(waiter(1, "b"));
        let all = q.push(multi(2, &["a", "b"]));
        let free = |_: &KeyId, _: &Waiter| true;
        assert_eq!(q.ready_all(&key("b"), free), AllReady::NotMulti);
        assert_eq!(
            q.ready_all(&key("a"), free),
            AllReady::Blocked { on: Some(key("b")) },
            "an older waiter of b comes first"
        );
        q.remove(older);
        assert_eq!(q.ready_all(&key("a"), free), AllReady::Ready(all));
        assert_eq!(q.ready_all(&key("b"), free), AllReady::Ready(all));
        let held_b = |k: &KeyId, _: &Waiter| k != &key("b");
        assert_eq!(
            q.ready_all(&key("a"), held_b),
            AllReady::Blocked { on: Some(key("b")) }
        );
        assert_eq!(
            q.ready_all(&key("b"), held_b),
            AllReady::Blocked { on: None }
        );
        assert_eq!(q.ready_all(&key("zz"), free), AllReady::NotMulti);
    }

    #[test]
    fn memory_is_given_back_after_a_crowd_leaves() {
        let mut q = Queues::default();
        let ids: Vec<u64> = (0..5000)
            .map(|i| q.push(waiter(i, &format!("k{i}"))))
            .collect();
        let peak = q.waiters.capacity();
        for id in ids {
            q.remove(id);
        }
        assert!(q.is_empty());
        assert!(peak >= 5000);
        assert_eq!(q.waiters.capacity(), 0, "nothing kept for nobody");
        assert_eq!(q.by_handle.capacity(), 0);
        assert_eq!(q.queues.capacity(), 0);
    }
}
