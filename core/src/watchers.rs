//! The clients blocked in `LOCK.WATCH`, by key: pure Rust, no FFI.
//!
//! A watcher waits for its key's state to differ from the fence it gave (the holder's
//! fence, `0` for nobody). When the key may have changed, the watchers whose fence
//! differs from the key's state now are taken out together, oldest first, and answered;
//! the others stay. A watcher is never in a lock's queue: it takes nothing.

use std::collections::{BTreeSet, HashMap};

use crate::queue::KeyId;
use crate::room;

/// One client blocked in `LOCK.WATCH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watcher {
    /// The server's handle for the blocked client.
    pub handle: usize,
    /// The key it watches.
    pub key: KeyId,
    /// The state it has seen: the holder's fence, `0` for nobody.
    pub fence: u64,
    /// The module timer that ends its wait, if it gave a timeout.
    pub timer: Option<u64>,
}

/// Every watcher of the server.
#[derive(Debug, Default)]
pub struct Watchers {
    next_id: u64,
    watchers: HashMap<u64, Watcher>,
    by_handle: HashMap<usize, u64>,
    by_key: HashMap<KeyId, BTreeSet<u64>>,
}

impl Watchers {
    /// Adds a watcher; returns its id.
    pub fn add(&mut self, watcher: Watcher) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.by_handle.insert(watcher.handle, id);
        self.by_key
            .entry(watcher.key.clone())
            .or_default()
            .insert(id);
        self.watchers.insert(id, watcher);
        id
    }

    /// Notes the timer that ends watcher `id`'s wait.
    pub fn set_timer(&mut self, id: u64, timer: u64) {
        if let Some(watcher) = self.watchers.get_mut(&id) {
            watcher.timer = Some(timer);
        }
    }

    /// The id of the watcher blocked under `handle`.
    pub fn id_of(&self, handle: usize) -> Option<u64> {
        self.by_handle.get(&handle).copied()
    }

    /// Takes watcher `id` out (timed out, gone); `None` if it was answered already.
    pub fn remove(&mut self, id: u64) -> Option<Watcher> {
        let watcher = self.watchers.remove(&id)?;
        self.by_handle.remove(&watcher.handle);
        if let Some(ids) = self.by_key.get_mut(&watcher.key) {
            ids.remove(&id);
            if ids.is_empty() {
                self.by_key.remove(&watcher.key);
            }
        }
        self.shrink();
        Some(watcher)
    }

    /// Takes out, oldest first, the watchers of `key` that have not seen `fence` (the
    /// key's state now): they are to be answered.
    pub fn take_changed(&mut self, key: &KeyId, fence: u64) -> Vec<Watcher> {
        let Some(ids) = self.by_key.get(key) else {
            return Vec::new();
        };
        let changed: Vec<u64> = ids
            .iter()
            .copied()
            .filter(|id| self.watchers.get(id).is_some_and(|w| w.fence != fence))
            .collect();
        changed
            .into_iter()
            .filter_map(|id| self.remove(id))
            .collect()
    }

    /// Takes out every watcher of `key`, oldest first.
    pub fn take_key(&mut self, key: &KeyId) -> Vec<Watcher> {
        let ids: Vec<u64> = self
            .by_key
            .get(key)
            .map(|ids| ids.iter().copied().collect())
            .unwrap_or_default();
        ids.into_iter().filter_map(|id| self.remove(id)).collect()
    }

    /// Takes out every watcher of the server.
    pub fn take_all(&mut self) -> Vec<Watcher> {
        let mut ids: Vec<u64> = self.watchers.keys().copied().collect();
        ids.sort_unstable();
        ids.into_iter().filter_map(|id| self.remove(id)).collect()
    }

    /// Whether anyone watches `key`.
    pub fn watched(&self, key: &KeyId) -> bool {
        self.by_key.contains_key(key)
    }

    /// The keys that have watchers.
    pub fn keys(&self) -> Vec<KeyId> {
        self.by_key.keys().cloned().collect()
    }

    /// Watchers of `key`.
    pub fn count(&self, key: &KeyId) -> usize {
        self.by_key.get(key).map_or(0, BTreeSet::len)
    }

    /// Watchers of every key.
    pub fn total(&self) -> usize {
        self.watchers.len()
    }

    /// Whether nobody watches anything.
    pub fn is_empty(&self) -> bool {
        self.watchers.is_empty()
    }

    /// Gives memory back once most watchers have gone (1,000 followers of a leader come
    /// and go together).
    fn shrink(&mut self) {
        if room::should_shrink(self.watchers.len(), self.watchers.capacity()) {
            self.watchers.shrink_to_fit();
            self.by_handle.shrink_to_fit();
            self.by_key.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> KeyId {
        KeyId::new(0, name.as_bytes())
    }

    fn watcher(handle: usize, name: &str, fence: u64) -> Watcher {
        Watcher {
            handle,
            key: key(name),
            fence,
            timer: None,
        }
    }

    #[test]
    fn only_watchers_that_saw_another_state_are_taken() {
        let mut w = Watchers::default();
        w.add(watcher(1, "k", 5));
        w.add(watcher(2, "k", 0));
        w.add(watcher(3, "k", 5));
        w.add(watcher(4, "other", 0));
        assert!(w.take_changed(&key("k"), 5).iter().all(|x| x.handle == 2));
        assert_eq!(w.count(&key("k")), 2);
        let taken: Vec<usize> = w
            .take_changed(&key("k"), 6)
            .iter()
            .map(|x| x.handle)
            .collect();
        assert_eq!(taken, vec![1, 3], "oldest first");
        assert!(!w.watched(&key("k")));
        assert_eq!(w.total(), 1);
    }

    #[test]
    fn a_removed_watcher_is_gone_everywhere() {
        let mut w = Watchers::default();
        let id = w.add(watcher(9, "k", 1));
        w.set_timer(id, 77);
        assert_eq!(w.id_of(9), Some(id));
        assert_eq!(w.remove(id).and_then(|x| x.timer), Some(77));
        assert_eq!(w.remove(id), None, "answered once");
        assert_eq!(w.id_of(9), None);
        assert!(w.is_empty() && w.keys().is_empty());
    }

    #[test]
    fn take_all_and_take_key_empty_what_they_take() {
        let mut w = Watchers::default();
        w.add(watcher(1, "a", 1));
        w.add(watcher(2, "b", 1));
        w.add(watcher(3, "a", 2));
        assert_eq!(w.take_key(&key("a")).len(), 2);
        assert_eq!(w.keys(), vec![key("b")]);
        assert_eq!(w.take_all().len(), 1);
        assert!(w.is_empty());
    }
}
