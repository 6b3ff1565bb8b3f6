//! The waiting clients of every key, first come first served: pure Rust, no FFI.
//!
//! A waiter is *queued* until the lock is free; then the oldest one is *promised* the
//! lock: it leaves the queue, and until its grant is made (in its reply callback, the
//! next moment the server can write for it) the key counts as busy, so no newcomer can
//! take the lock in between. A promise that cannot be kept (the client went away first)
//! is withdrawn and passed to the next waiter.

use std::collections::{HashMap, VecDeque};

/// A key in a database: waiters of different databases never meet.
pub type KeyId = (i32, Vec<u8>);

/// One client blocked in `LOCK.ACQUIRE ... WAIT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    /// The server's handle for the blocked client (an address, for lookups).
    pub handle: usize,
    /// The key it waits for.
    pub key: KeyId,
    /// The token it will hold: its own or one the server made when it started waiting.
    pub token: Vec<u8>,
    /// The TTL of the lock once granted.
    pub ttl_ms: i64,
}

/// All waiters of the server.
#[derive(Debug, Default)]
pub struct Queues {
    next_id: u64,
    waiters: HashMap<u64, Waiter>,
    by_handle: HashMap<usize, u64>,
    queues: HashMap<KeyId, VecDeque<u64>>,
    promised: HashMap<KeyId, u64>,
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

    /// Whether a newcomer must stand back: waiters are queued for the key or one has
    /// been promised it.
    pub fn busy(&self, key: &KeyId) -> bool {
        self.promised.contains_key(key) || self.queues.contains_key(key)
    }

    /// Clients blocked on the key, the promised one included.
    pub fn waiting(&self, key: &KeyId) -> usize {
        self.queues.get(key).map_or(0, VecDeque::len) + usize::from(self.promised.contains_key(key))
    }

    /// Clients blocked on any key.
    pub fn total(&self) -> usize {
        self.waiters.len()
    }

    /// Whether any waiter is queued or promised anywhere.
    pub fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }

    /// Keys that have queued waiters.
    pub fn queued_keys(&self) -> Vec<KeyId> {
        self.queues.keys().cloned().collect()
    }

    /// The lock on `key` is free: promise it to the oldest queued waiter, unless a promise
    /// is already out. Returns the promised waiter's id and handle.
    pub fn promise_next(&mut self, key: &KeyId) -> Option<(u64, usize)> {
        if self.promised.contains_key(key) {
            return None;
        }
        let queue = self.queues.get_mut(key)?;
        let id = queue.pop_front()?;
        if queue.is_empty() {
            self.queues.remove(key);
        }
        self.promised.insert(key.clone(), id);
        Some((id, self.waiters[&id].handle))
    }

    /// The id of the waiter with this handle, if it is still blocked.
    pub fn id_of(&self, handle: usize) -> Option<u64> {
        self.by_handle.get(&handle).copied()
    }

    /// Whether `id` holds a promise not yet fulfilled.
    pub fn is_promised(&self, id: u64) -> bool {
        self.waiters
            .get(&id)
            .is_some_and(|w| self.promised.get(&w.key) == Some(&id))
    }

    /// Removes a queued (not promised) waiter: its timeout passed or it disconnected.
    /// Returns it, or `None` if it is not queued.
    pub fn remove_queued(&mut self, id: u64) -> Option<Waiter> {
        let key = &self.waiters.get(&id)?.key;
        let queue = self.queues.get_mut(key)?;
        let at = queue.iter().position(|&queued| queued == id)?;
        queue.remove(at);
        if queue.is_empty() {
            let key = key.clone();
            self.queues.remove(&key);
        }
        self.forget(id)
    }

    /// Takes the promised waiter `id` out to grant it the lock. `None` if `id` holds no
    /// promise.
    pub fn fulfil(&mut self, id: u64) -> Option<Waiter> {
        if !self.is_promised(id) {
            return None;
        }
        let waiter = self.forget(id)?;
        self.promised.remove(&waiter.key);
        Some(waiter)
    }

    /// Withdraws the promise to `id` (the client went away before its grant), returning
    /// the key so its next waiter can be promised the lock.
    pub fn withdraw(&mut self, id: u64) -> Option<KeyId> {
        self.fulfil(id).map(|waiter| waiter.key)
    }

    fn forget(&mut self, id: u64) -> Option<Waiter> {
        let waiter = self.waiters.remove(&id)?;
        self.by_handle.remove(&waiter.handle);
        Some(waiter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> KeyId {
        (0, name.as_bytes().to_vec())
    }

    fn waiter(handle: usize, name: &str) -> Waiter {
        Waiter {
            handle,
            key: key(name),
            token: format!("t{handle}").into_bytes(),
            ttl_ms: 1000,
        }
    }

    #[test]
    fn waiters_are_promised_in_arrival_order() {
        let mut q = Queues::default();
        let a = q.push(waiter(10, "k"));
        let b = q.push(waiter(20, "k"));
        let c = q.push(waiter(30, "k"));
        assert_eq!(q.waiting(&key("k")), 3);
        assert_eq!(q.promise_next(&key("k")), Some((a, 10)));
        assert_eq!(q.fulfil(a).unwrap().token, b"t10");
        assert_eq!(q.promise_next(&key("k")), Some((b, 20)));
        q.fulfil(b);
        assert_eq!(q.promise_next(&key("k")), Some((c, 30)));
        q.fulfil(c);
        assert!(!q.busy(&key("k")));
        assert!(q.is_empty());
    }

    #[test]
    fn one_promise_at_a_time_and_the_key_stays_busy_meanwhile() {
        let mut q = Queues::default();
        let a = q.push(waiter(1, "k"));
        q.push(waiter(2, "k"));
        assert!(q.promise_next(&key("k")).is_some());
        assert_eq!(q.promise_next(&key("k")), None);
        assert!(q.busy(&key("k")));
        assert_eq!(q.waiting(&key("k")), 2);
        q.fulfil(a);
        assert!(q.busy(&key("k")), "the second waiter is still queued");
    }

    #[test]
    fn a_promise_to_a_lone_waiter_keeps_the_key_busy_until_fulfilled() {
        let mut q = Queues::default();
        let a = q.push(waiter(1, "k"));
        q.promise_next(&key("k"));
        assert!(q.busy(&key("k")));
        assert!(q.is_promised(a));
        q.fulfil(a);
        assert!(!q.busy(&key("k")));
    }

    #[test]
    fn a_withdrawn_promise_passes_to_the_next_waiter() {
        let mut q = Queues::default();
        let a = q.push(waiter(1, "k"));
        let b = q.push(waiter(2, "k"));
        q.promise_next(&key("k"));
        assert_eq!(q.withdraw(a), Some(key("k")));
        assert_eq!(q.id_of(1), None);
        assert_eq!(q.promise_next(&key("k")), Some((b, 2)));
    }

    #[test]
    fn timed_out_waiters_leave_their_queue_only() {
        let mut q = Queues::default();
        let a = q.push(waiter(1, "k"));
        let b = q.push(waiter(2, "k"));
        let other = q.push(waiter(3, "other"));
        assert_eq!(q.remove_queued(a).unwrap().handle, 1);
        assert_eq!(q.remove_queued(a), None);
        assert_eq!(q.waiting(&key("k")), 1);
        assert_eq!(q.waiting(&key("other")), 1);
        assert_eq!(q.promise_next(&key("k")), Some((b, 2)));
        assert_eq!(q.remove_queued(b), None, "a promised waiter is not queued");
        assert_eq!(q.remove_queued(other).unwrap().key, key("other"));
        assert!(!q.busy(&key("other")));
        assert_eq!(q.total(), 1);
    }

    #[test]
    fn handles_find_their_waiters() {
        let mut q = Queues::default();
        let a = q.push(waiter(77, "k"));
        assert_eq!(q.id_of(77), Some(a));
        q.remove_queued(a);
        assert_eq!(q.id_of(77), None);
    }

    #[test]
    fn databases_keep_separate_queues() {
        let mut q = Queues::default();
        q.push(Waiter {
            key: (1, b"k".to_vec()),
            ..waiter(1, "k")
        });
        assert!(!q.busy(&key("k")));
        assert!(q.busy(&(1, b"k".to_vec())));
        assert_eq!(q.queued_keys(), vec![(1, b"k".to_vec())]);
    }
}
