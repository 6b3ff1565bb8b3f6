//! The holders of a shared key (readers of a read/write lock, or a semaphore's holders),
//! each with its own token, fence, grant time, binding and expiry: pure Rust, no FFI.
//!
//! A key may have 100,000 holders, so nothing here is linear in them on the command
//! path: a holder is found by its token through a hash of it, and the next one to expire
//! through an index ordered by expiry. Memory is the holders themselves (a `LockState`
//! and an expiry each: 32 bytes, and the token's allocation unless it is kept inside)
//! plus the two indexes, with no server object per holder.

use std::collections::hash_map::{Entry, RandomState};
use std::collections::{BTreeSet, HashMap};
use std::hash::BuildHasher;

use crate::lock::LockState;
use crate::room;
use crate::rules::{Holding, Kind};

/// One shared holder: its lock (token, fence, grant time, binding) and its own expiry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The holder's token, fence, grant time and binding.
    pub lock: LockState,
    /// Absolute unix time in ms at which it expires.
    pub expire_at: i64,
}

/// The shared holders of one key.
#[derive(Debug, Clone)]
pub struct Holders {
    /// The limit every holder agreed on (`LIMIT n`); `None`: readers, no limit.
    limit: Option<u32>,
    /// The holders, in slots; a freed slot is reused (`free`).
    slots: Vec<Option<Holder>>,
    free: Vec<u32>,
    /// A holder's slot by the hash of its token. Two tokens of one hash (a chance of
    /// 2^-64 a pair, keyed by a random seed) are kept apart: the second goes to
    /// `collided`, which is searched when the map's slot holds another token.
    by_token: HashMap<u64, u32>,
    collided: Vec<u32>,
    hasher: RandomState,
    /// Tests make every token hash alike, to exercise the collision path.
    #[cfg(test)]
    all_collide: bool,
    /// Every holder as (expiry, slot), the soonest first.
    by_expiry: BTreeSet<(i64, u32)>,
}

impl Holders {
    /// No holder yet, with the key's limit.
    pub fn new(limit: Option<u32>) -> Self {
        Holders {
            limit,
            slots: Vec::new(),
            free: Vec::new(),
            by_token: HashMap::new(),
            collided: Vec::new(),
            hasher: RandomState::new(),
            #[cfg(test)]
            all_collide: false,
            by_expiry: BTreeSet::new(),
        }
    }

    /// The limit the holders agreed on.
    pub fn limit(&self) -> Option<u32> {
        self.limit
    }

    /// How many holders there are.
    pub fn len(&self) -> usize {
        self.by_expiry.len()
    }

    /// Whether none is left.
    pub fn is_empty(&self) -> bool {
        self.by_expiry.is_empty()
    }

    /// What the key holds, for the rules (`None` once no holder is left).
    pub fn holding(&self) -> Option<Holding> {
        (!self.is_empty()).then_some(Holding {
            kind: Kind::Shared { limit: self.limit },
            holders: self.len(),
        })
    }

    fn hash(&self, token: &[u8]) -> u64 {
        #[cfg(test)]
        if self.all_collide {
            return 0;
        }
        self.hasher.hash_one(token)
    }

    fn holder(&self, slot: u32) -> Option<&Holder> {
        self.slots.get(slot as usize)?.as_ref()
    }

    /// The slot of `token`'s holder, if it holds the key.
    fn slot_of(&self, token: &[u8]) -> Option<u32> {
        let holds = |slot: &u32| self.holder(*slot).is_some_and(|h| h.lock.holds(token));
        match self.by_token.get(&self.hash(token)) {
            Some(slot) if holds(slot) => Some(*slot),
            Some(_) => self.collided.iter().copied().find(|slot| holds(slot)),
            None => None,
        }
    }

    /// The holder with this token.
    pub fn get(&self, token: &[u8]) -> Option<&Holder> {
        self.holder(self.slot_of(token)?)
    }

    /// The lock of the holder with this token, to change in place (its binding); its
    /// expiry changes through `set_expire_at`.
    pub fn lock_mut(&mut self, token: &[u8]) -> Option<&mut LockState> {
        let slot = self.slot_of(token)?;
        Some(&mut self.slots[slot as usize].as_mut()?.lock)
    }

    /// Adds `holder`, whose token must not hold the key already (the caller renews
    /// instead); gives it back if it does. Returns the holder as stored.
    pub fn insert(&mut self, holder: Holder) -> Result<&Holder, Holder> {
        if self.slot_of(&holder.lock.token()).is_some() {
            return Err(holder);
        }
        let hash = self.hash(&holder.lock.token());
        let expire_at = holder.expire_at;
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some(holder);
                slot
            }
            None => {
                self.slots.push(Some(holder));
                (self.slots.len() - 1) as u32
            }
        };
        match self.by_token.entry(hash) {
            Entry::Occupied(_) => self.collided.push(slot),
            Entry::Vacant(entry) => {
                entry.insert(slot);
            }
        }
        self.by_expiry.insert((expire_at, slot));
        Ok(self.slots[slot as usize]
            .as_ref()
            .expect("the slot was just filled"))
    }

    /// Takes the holder with this token out.
    pub fn remove(&mut self, token: &[u8]) -> Option<Holder> {
        let slot = self.slot_of(token)?;
        Some(self.take(slot))
    }

    /// Takes the holder in `slot` (occupied) out of the slots and both indexes.
    fn take(&mut self, slot: u32) -> Holder {
        let holder = self.slots[slot as usize]
            .take()
            .expect("an indexed slot is occupied");
        let hash = self.hash(&holder.lock.token());
        if self.by_token.get(&hash) == Some(&slot) {
            self.by_token.remove(&hash);
            // A holder that collided on this hash takes its place in the map.
            if let Some(i) = self.collided.iter().position(|&other| {
                self.holder(other)
                    .is_some_and(|h| self.hash(&h.lock.token()) == hash)
            }) {
                let other = self.collided.swap_remove(i);
                self.by_token.insert(hash, other);
            }
        } else {
            self.collided.retain(|&other| other != slot);
        }
        self.by_expiry.remove(&(holder.expire_at, slot));
        if slot as usize == self.slots.len() - 1 {
            self.slots.pop();
        } else {
            self.free.push(slot);
        }
        self.shrink();
        holder
    }

    /// Gives memory back once most holders have gone.
    fn shrink(&mut self) {
        if self.is_empty() {
            self.slots = Vec::new();
            self.free = Vec::new();
            self.by_token = HashMap::new();
            self.collided = Vec::new();
        } else if room::should_shrink(self.by_token.len(), self.by_token.capacity()) {
            self.by_token.shrink_to_fit();
        }
    }

    /// Moves the expiry of `token`'s holder to `expire_at`; false if it holds nothing.
    pub fn set_expire_at(&mut self, token: &[u8], expire_at: i64) -> bool {
        let Some(slot) = self.slot_of(token) else {
            return false;
        };
        let Some(holder) = self.slots[slot as usize].as_mut() else {
            return false;
        };
        self.by_expiry.remove(&(holder.expire_at, slot));
        holder.expire_at = expire_at;
        self.by_expiry.insert((expire_at, slot));
        true
    }

    /// Takes out every holder whose expiry is `now` or earlier, the soonest first.
    pub fn expire(&mut self, now: i64) -> Vec<Holder> {
        let mut gone = Vec::new();
        while let Some(&(at, slot)) = self.by_expiry.first() {
            if at > now {
                break;
            }
            gone.push(self.take(slot));
        }
        gone
    }

    /// When the next holder expires.
    pub fn next_expiry(&self) -> Option<i64> {
        self.by_expiry.first().map(|&(at, _)| at)
    }

    /// When the last holder expires: the key's own expiry.
    pub fn last_expiry(&self) -> Option<i64> {
        self.by_expiry.last().map(|&(at, _)| at)
    }

    /// Every holder, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Holder> {
        self.slots.iter().flatten()
    }

    /// The fence of the newest grant among the holders (`LOCK.INFO`'s `fence`).
    pub fn newest_fence(&self) -> Option<u64> {
        self.iter().map(|h| h.lock.fence()).max()
    }

    /// When the oldest holder was granted (`LOCK.INFO`'s `acquired`).
    pub fn oldest_grant(&self) -> Option<i64> {
        self.iter().map(|h| h.lock.acquired_ms()).min()
    }

    /// The bytes the holders keep on the heap: slots, tokens and indexes (an estimate of
    /// the indexes' nodes, as `MEMORY USAGE` wants one).
    pub fn heap_bytes(&self) -> usize {
        let slot = std::mem::size_of::<Option<Holder>>();
        let tokens: usize = self.iter().map(|h| h.lock.heap_bytes()).sum();
        // A hash map entry is its key and value plus a control byte; a B-tree entry is
        // about one and a half times its size once nodes are counted.
        let by_token = self.by_token.capacity() * (8 + 4 + 1);
        let by_expiry = self.by_expiry.len() * 16 * 3 / 2;
        self.slots.capacity() * slot
            + self.free.capacity() * 4
            + self.collided.capacity() * 4
            + tokens
            + by_token
            + by_expiry
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(token: &str, fence: u64, expire_at: i64) -> Holder {
        Holder {
            lock: LockState::new(token.as_bytes(), fence, fence as i64, None),
            expire_at,
        }
    }

    fn tokens(holders: &[Holder]) -> Vec<Vec<u8>> {
        holders.iter().map(|h| h.lock.token().to_vec()).collect()
    }

    #[test]
    fn holders_are_found_by_token_and_each_token_holds_once() {
        let mut h = Holders::new(Some(3));
        assert_eq!(h.holding(), None);
        h.insert(holder("a", 1, 100)).unwrap();
        h.insert(holder("b", 2, 50)).unwrap();
        assert!(h.insert(holder("a", 3, 10)).is_err());
        assert_eq!(h.len(), 2);
        assert_eq!(
            h.holding(),
            Some(Holding {
                kind: Kind::Shared { limit: Some(3) },
                holders: 2
            })
        );
        assert_eq!(h.get(b"a").map(|x| x.lock.fence()), Some(1));
        assert_eq!(h.get(b"c"), None);
        assert_eq!(h.remove(b"a").map(|x| x.expire_at), Some(100));
        assert_eq!(h.remove(b"a"), None);
        assert_eq!(h.len(), 1);
    }

    #[test]
    fn each_holder_expires_at_its_own_time_and_the_key_at_the_last() {
        let mut h = Holders::new(None);
        for (token, fence, at) in [("a", 1, 300), ("b", 2, 100), ("c", 3, 200)] {
            h.insert(holder(token, fence, at)).unwrap();
        }
        assert_eq!((h.next_expiry(), h.last_expiry()), (Some(100), Some(300)));
        assert!(h.expire(99).is_empty());
        assert_eq!(tokens(&h.expire(200)), vec![&b"b"[..], b"c"]);
        assert!(h.set_expire_at(b"a", 50));
        assert!(!h.set_expire_at(b"b", 50));
        assert_eq!((h.next_expiry(), h.last_expiry()), (Some(50), Some(50)));
        assert_eq!(tokens(&h.expire(50)), vec![&b"a"[..]]);
        assert!(h.is_empty());
        assert_eq!((h.next_expiry(), h.heap_bytes()), (None, 0));
    }

    #[test]
    fn info_reads_the_newest_fence_and_the_oldest_grant() {
        let mut h = Holders::new(None);
        h.insert(holder("a", 4, 10)).unwrap();
        h.insert(holder("b", 9, 10)).unwrap();
        h.insert(holder("c", 6, 10)).unwrap();
        assert_eq!((h.newest_fence(), h.oldest_grant()), (Some(9), Some(4)));
        h.remove(b"b");
        assert_eq!(h.newest_fence(), Some(6));
    }

    #[test]
    fn a_binding_changes_in_place() {
        let mut h = Holders::new(None);
        h.insert(holder("a", 1, 10)).unwrap();
        let session = crate::lock::Session {
            grace_ms: 5,
            client: 7,
        };
        h.lock_mut(b"a").unwrap().set_session(Some(session));
        assert_eq!(h.get(b"a").unwrap().lock.session(), Some(session));
        assert!(h.lock_mut(b"b").is_none());
    }

    #[test]
    fn tokens_of_one_hash_are_kept_apart() {
        let mut h = Holders::new(None);
        h.all_collide = true;
        for (token, fence) in [("a", 1), ("b", 2), ("c", 3)] {
            h.insert(holder(token, fence, 10)).unwrap();
        }
        assert!(h.insert(holder("c", 4, 10)).is_err());
        assert_eq!(h.collided.len(), 2);
        assert_eq!(h.get(b"b").map(|x| x.lock.fence()), Some(2));
        // The map's own holder leaves: one that collided with it takes its place.
        assert_eq!(h.remove(b"a").map(|x| x.lock.fence()), Some(1));
        assert_eq!(h.collided.len(), 1);
        assert_eq!(h.get(b"a"), None);
        assert_eq!(h.get(b"b").map(|x| x.lock.fence()), Some(2));
        assert_eq!(h.remove(b"c").map(|x| x.lock.fence()), Some(3));
        assert!(h.collided.is_empty());
        assert_eq!(h.get(b"b").map(|x| x.lock.fence()), Some(2));
    }

    #[test]
    fn a_hundred_thousand_holders_come_and_go_without_linear_work() {
        let mut h = Holders::new(None);
        let n: u32 = 100_000;
        for i in 0..n {
            let at = i64::from((i * 7919) % n);
            h.insert(holder(&format!("token-{i:027}"), u64::from(i) + 1, at))
                .unwrap();
        }
        assert_eq!(h.len(), n as usize);
        let per_holder = h.heap_bytes() / n as usize;
        assert!(
            per_holder < 40 + 32 + 64,
            "{per_holder} bytes a holder beyond its token and fence"
        );
        for i in (0..n).step_by(2) {
            assert!(h.remove(format!("token-{i:027}").as_bytes()).is_some());
        }
        let expired = h.expire(i64::from(n));
        assert_eq!(expired.len(), n as usize / 2);
        assert!(expired.windows(2).all(|w| w[0].expire_at <= w[1].expire_at));
        assert!(h.is_empty());
    }
}
