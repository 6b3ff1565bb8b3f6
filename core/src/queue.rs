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
    /// The key it waits for.
    pub key: KeyId,
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
        self.queues
            .entry(waiter.key.clone())
            .or_default()
            .push_back(id);
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
    /// exclusive one, as far as the limit allows.
    pub fn admissible(&self, key: &KeyId, held: Option<Holding>) -> usize {
        let Some(queue) = self.queues.get(key) else {
            return 0;
        };
        rules::admit(held, queue.iter().map(|id| self.waiters[id].kind))
    }

    /// Whether waiter `id` is the oldest of its key.
    pub fn is_head(&self, id: u64) -> bool {
        self.waiters
            .get(&id)
            .and_then(|w| self.queues.get(&w.key))
            .is_some_and(|queue| queue.front() == Some(&id))
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
        if let Some(queue) = self.queues.get_mut(&waiter.key) {
            queue.retain(|&queued| queued != id);
            if queue.is_empty() {
                self.queues.remove(&waiter.key);
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
            token: format!("t{handle}").into_bytes(),
            wake_timer: None,
            ttl_ms: 1000,
            session: None,
            client: 0,
            kind: Kind::Exclusive,
            value: None,
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
        assert!(q.is_head(first));
        assert_eq!(q.admissible(&key("k"), None), 2);
        assert_eq!(q.admissible(&key("k"), Some(Holding::EXCLUSIVE)), 0);
        assert_eq!(q.admissible(&key("other"), None), 0);
        q.remove(first);
        q.pop_head(&key("k"));
        assert_eq!(q.admissible(&key("k"), None), 1, "the writer alone");
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
