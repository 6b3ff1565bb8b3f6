//! Which connection holds each lock, in a few bits: the `CLIENT ID`s of the connections
//! that hold locks granted on this server, each given a small slot number while it holds
//! any, so that a compact lock names its holder's connection in the spare bits of its 24
//! bytes instead of 8 more (which would put every lock in the next allocator size class).
//!
//! A slot counts the locks that name it (a lock's clone counts again, its drop releases
//! it); the slot is free again when none does. When every slot is taken (more than
//! `SLOTS - 1` connections hold locks at once), `take` says so and the lock keeps the full
//! id in an allocation of its own. Locks are dropped where the server frees values, which
//! may be a background thread (`FLUSHALL ASYNC`), hence the mutex; it is held for a few
//! dozen instructions and never while calling out.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// Slot numbers 1 to `SLOTS - 1` name a connection; 0 names none.
pub const SLOTS: u16 = 2008;

/// The slots: each one's connection and how many locks name it.
struct Table {
    ids: Vec<u64>,
    counts: Vec<u32>,
    by_id: HashMap<u64, u16>,
    free: Vec<u16>,
}

impl Table {
    fn new() -> Self {
        Table {
            ids: vec![0; usize::from(SLOTS)],
            counts: vec![0; usize::from(SLOTS)],
            by_id: HashMap::new(),
            // Handed out lowest first.
            free: (1..SLOTS).rev().collect(),
        }
    }
}

static TABLE: Mutex<Option<Table>> = Mutex::new(None);

fn table() -> MutexGuard<'static, Option<Table>> {
    // A panic while the lock was held left nothing half-written that matters more than
    // naming a connection: carry on with what is there.
    TABLE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn with<T>(f: impl FnOnce(&mut Table) -> T) -> T {
    f(table().get_or_insert_with(Table::new))
}

impl Table {
    fn take(&mut self, client: u64) -> Option<u16> {
        if client == 0 {
            return None;
        }
        let slot = match self.by_id.get(&client) {
            Some(&slot) => slot,
            None => {
                let slot = self.free.pop()?;
                self.by_id.insert(client, slot);
                self.ids[usize::from(slot)] = client;
                slot
            }
        };
        self.counts[usize::from(slot)] += 1;
        Some(slot)
    }

    fn retain(&mut self, slot: u16) {
        if let Some(count) = self.counts.get_mut(usize::from(slot)).filter(|c| **c > 0) {
            *count += 1;
        }
    }

    fn release(&mut self, slot: u16) {
        let at = usize::from(slot);
        let Some(count) = self.counts.get_mut(at).filter(|c| **c > 0) else {
            return;
        };
        *count -= 1;
        if *count == 0 {
            self.by_id.remove(&self.ids[at]);
            self.ids[at] = 0;
            self.free.push(slot);
        }
    }

    fn client_of(&self, slot: u16) -> u64 {
        let at = usize::from(slot);
        if self.counts.get(at).is_some_and(|c| *c > 0) {
            self.ids[at]
        } else {
            0
        }
    }
}

/// A new lock names `client`: its slot, counted once more (a new one if it had none).
/// `None` for client 0 (nobody to name) or when every slot is taken.
pub fn take(client: u64) -> Option<u16> {
    if client == 0 {
        return None;
    }
    with(|t| t.take(client))
}

/// One more lock names `slot` (a copy of one that does).
pub fn retain(slot: u16) {
    with(|t| t.retain(slot))
}

/// A lock that named `slot` is gone: the slot is free once no lock names it.
pub fn release(slot: u16) {
    with(|t| t.release(slot))
}

/// The `CLIENT ID` that `slot` names (0 for none).
pub fn client_of(slot: u16) -> u64 {
    with(|t| t.client_of(slot))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_names_its_connection_while_any_lock_counts_it() {
        let mut t = Table::new();
        let a = t.take(41).unwrap();
        assert_eq!(t.take(41), Some(a), "the same connection, the same slot");
        t.retain(a);
        assert_eq!(t.client_of(a), 41);
        let b = t.take(42).unwrap();
        assert_ne!(a, b);
        for _ in 0..3 {
            assert_eq!(t.client_of(a), 41);
            t.release(a);
        }
        assert_eq!(t.client_of(a), 0, "free once no lock names it");
        assert_eq!(t.take(43), Some(a), "and used again");
        t.release(b);
        t.release(b);
        assert_eq!(t.client_of(b), 0, "a release too many changes nothing");
        assert_eq!(t.take(0), None, "client 0 names nobody");
        assert_eq!(t.client_of(0), 0);
    }

    #[test]
    fn when_every_slot_is_taken_take_says_so() {
        let mut t = Table::new();
        let taken: Vec<u16> = (1..u64::from(SLOTS)).map(|c| t.take(c).unwrap()).collect();
        assert_eq!(t.take(1_000_000), None);
        assert_eq!(
            t.take(5),
            Some(taken[4]),
            "a connection that has one still gets it"
        );
        t.release(taken[0]);
        assert_eq!(t.take(1_000_000), Some(taken[0]));
        assert!(taken.iter().all(|&s| (1..SLOTS).contains(&s)));
    }

    #[test]
    fn the_process_table_hands_out_and_frees_slots() {
        let slot = take(9_000_001).unwrap();
        assert_eq!(client_of(slot), 9_000_001);
        retain(slot);
        release(slot);
        assert_eq!(client_of(slot), 9_000_001);
        release(slot);
        assert_eq!(take(0), None);
    }
}
