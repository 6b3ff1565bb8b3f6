//! Which connection holds each lock, in a few bits: the `CLIENT ID`s of the connections
//! that hold locks granted on this server, each given a small slot number while it holds
//! any, so that a compact lock names its holder's connection in the spare bits of its 24
//! bytes instead of 8 more (which would put every lock in the next allocator size class).
//!
//! A slot counts the locks that name it (a lock's clone counts again, its drop releases
//! it); the slot is free again when none does. When every slot is taken (more than
//! `SLOTS - 1` connections hold locks at once), `take` says so and the lock keeps the full
//! id in an allocation of its own. The table is fixed arrays in static memory (about
//! 36 KB, touched as it fills): it never allocates, so a grant or release costs no heap
//! work, and a server whose locks are gone holds nothing of the module's. Locks are
//! dropped where the server frees values, which may be a background thread (`FLUSHALL
//! ASYNC`), hence the mutex; it is held for a few dozen instructions and never while
//! calling out.

use std::sync::{Mutex, MutexGuard};

/// Slot numbers 1 to `SLOTS - 1` name a connection; 0 names none.
pub const SLOTS: u16 = 2008;

/// Buckets of the index from a connection to its slot: a power of two, about twice the
/// slots, so probes stay short.
const BUCKETS: usize = 4096;

/// The slots: each one's connection and how many locks name it, and an index from a
/// connection to its slot (open addressing, linear probing).
struct Table {
    /// By slot (slot 0 unused).
    ids: [u64; SLOTS as usize],
    counts: [u32; SLOTS as usize],
    /// Slots freed, to be used again before a never-used one.
    free: [u16; SLOTS as usize],
    free_len: usize,
    /// The next never-used slot.
    next: u16,
    /// A bucket holds a slot (0: empty); a connection is found from its hash onwards.
    index: [u16; BUCKETS],
}

impl Table {
    const EMPTY: Table = Table {
        ids: [0; SLOTS as usize],
        counts: [0; SLOTS as usize],
        free: [0; SLOTS as usize],
        free_len: 0,
        next: 1,
        index: [0; BUCKETS],
    };

    /// Where the search for `client` starts (ids are sequential: Fibonacci hashing
    /// spreads them).
    fn home(client: u64) -> usize {
        (client.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) as usize & (BUCKETS - 1)
    }

    /// The bucket that holds `client`'s slot, or the empty one where it would go.
    fn bucket(&self, client: u64) -> (usize, Option<u16>) {
        let mut at = Table::home(client);
        loop {
            match self.index[at] {
                0 => return (at, None),
                slot if self.ids[usize::from(slot)] == client => return (at, Some(slot)),
                _ => at = (at + 1) & (BUCKETS - 1),
            }
        }
    }

    fn take(&mut self, client: u64) -> Option<u16> {
        if client == 0 {
            return None;
        }
        let slot = match self.bucket(client) {
            (_, Some(slot)) => slot,
            (at, None) => {
                let slot = if self.free_len > 0 {
                    self.free_len -= 1;
                    self.free[self.free_len]
                } else if self.next < SLOTS {
                    self.next += 1;
                    self.next - 1
                } else {
                    return None;
                };
                self.ids[usize::from(slot)] = client;
                self.index[at] = slot;
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
            self.unindex(self.ids[at]);
            self.ids[at] = 0;
            self.free[self.free_len] = slot;
            self.free_len += 1;
        }
    }

    /// Takes `client` out of the index, moving back the entries after it that probed
    /// past its bucket, so every search still finds what it looks for.
    fn unindex(&mut self, client: u64) {
        let (mut hole, Some(_)) = self.bucket(client) else {
            return;
        };
        self.index[hole] = 0;
        let mut at = hole;
        loop {
            at = (at + 1) & (BUCKETS - 1);
            let slot = self.index[at];
            if slot == 0 {
                return;
            }
            let home = Table::home(self.ids[usize::from(slot)]);
            // Whether `home` lies cyclically in (hole, at]: then the entry stays.
            let stays = if hole <= at {
                hole < home && home <= at
            } else {
                hole < home || home <= at
            };
            if !stays {
                self.index[hole] = slot;
                self.index[at] = 0;
                hole = at;
            }
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

static TABLE: Mutex<Table> = Mutex::new(Table::EMPTY);

fn table() -> MutexGuard<'static, Table> {
    // A panic while the lock was held left nothing half-written that matters more than
    // naming a connection: carry on with what is there.
    TABLE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A new lock names `client`: its slot, counted once more (a new one if it had none).
/// `None` for client 0 (nobody to name) or when every slot is taken.
pub fn take(client: u64) -> Option<u16> {
    if client == 0 {
        return None;
    }
    table().take(client)
}

/// One more lock names `slot` (a copy of one that does).
pub fn retain(slot: u16) {
    table().retain(slot)
}

/// A lock that named `slot` is gone: the slot is free once no lock names it.
pub fn release(slot: u16) {
    table().release(slot)
}

/// The `CLIENT ID` that `slot` names (0 for none).
pub fn client_of(slot: u16) -> u64 {
    table().client_of(slot)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh() -> Box<Table> {
        Box::new(Table::EMPTY)
    }

    #[test]
    fn a_slot_names_its_connection_while_any_lock_counts_it() {
        let mut t = fresh();
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
        let mut t = fresh();
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
    fn the_index_finds_every_connection_through_any_order_of_comings_and_goings() {
        // Thousands of clients come and go in a scrambled order, filling long probe runs;
        // every one still present is found, every one gone is not.
        let mut t = fresh();
        let mut present = std::collections::BTreeMap::new();
        let mut state: u64 = 12345;
        for step in 0..50_000u64 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let client = 1 + (state >> 33) % 3_000;
            match present.get(&client) {
                Some(&slot) if step % 3 != 0 => {
                    t.release(slot);
                    present.remove(&client);
                }
                Some(_) => {}
                None => {
                    if let Some(slot) = t.take(client) {
                        present.insert(client, slot);
                    }
                }
            }
            if step % 5_000 == 0 {
                for (&client, &slot) in &present {
                    assert_eq!(t.bucket(client).1, Some(slot), "client {client}");
                    assert_eq!(t.client_of(slot), client);
                }
            }
        }
        for (&client, &slot) in &present {
            assert_eq!(t.bucket(client).1, Some(slot), "client {client}");
        }
        assert_eq!(t.bucket(3_001).1, None);
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
