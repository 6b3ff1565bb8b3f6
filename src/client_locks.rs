//! The locks bound to one open connection, as the session registry keeps them: pure
//! Rust, no FFI.
//!
//! Every session-bound acquire appends here, so an entry is made to cost as little as it
//! can: the key's name alone (32 bytes, names up to 30 bytes kept inline), in fixed
//! chunks (`Chunked`). The database and grace, which a connection seldom varies, are kept
//! once per run of entries that share them, so the list still tells, in the order of the
//! binds, which grace a key was bound with last.

use crate::chunked::Chunked;
use crate::queue::KeyId;

/// Names up to this long are kept inside the entry (most lock names are).
const INLINE_NAME: usize = 30;

/// A key's name as the list keeps it: inline when short, so that a bind allocates
/// nothing; on the heap when longer.
#[derive(Debug)]
enum Name {
    Inline { len: u8, bytes: [u8; INLINE_NAME] },
    Heap(Box<[u8]>),
}

impl Name {
    fn new(name: &[u8]) -> Self {
        if name.len() <= INLINE_NAME {
            let mut bytes = [0; INLINE_NAME];
            bytes[..name.len()].copy_from_slice(name);
            Name::Inline {
                len: name.len() as u8,
                bytes,
            }
        } else {
            Name::Heap(name.into())
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Name::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Name::Heap(name) => name,
        }
    }
}

/// Consecutive entries bound in one database with one grace, from entry `start` on.
#[derive(Debug)]
struct Run {
    start: usize,
    db: i32,
    grace_ms: i64,
}

/// One connection's bound locks, in the order they were bound. It may hold locks that
/// have left or been bound elsewhere since: `stale` counts the departures the registry
/// was told of.
#[derive(Debug, Default)]
pub struct ClientLocks {
    names: Chunked<Name>,
    runs: Vec<Run>,
    /// Entries known to be stale.
    pub stale: usize,
}

impl ClientLocks {
    /// Appends the lock on `name` in database `db`, bound with `grace_ms`.
    pub fn push(&mut self, db: i32, name: &[u8], grace_ms: i64) {
        let same_run = self
            .runs
            .last()
            .is_some_and(|run| run.db == db && run.grace_ms == grace_ms);
        if !same_run {
            self.runs.push(Run {
                start: self.names.len(),
                db,
                grace_ms,
            });
        }
        self.names.push(Name::new(name));
    }

    /// How many entries it holds.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Each entry, in the order of the binds: database, grace, key name.
    pub fn iter(&self) -> impl Iterator<Item = (i32, i64, &[u8])> {
        let mut run = 0;
        self.names.iter().enumerate().map(move |(i, name)| {
            while self.runs.get(run + 1).is_some_and(|next| next.start <= i) {
                run += 1;
            }
            let Run { db, grace_ms, .. } = self.runs[run];
            (db, grace_ms, name.as_slice())
        })
    }

    /// Each entry's key and grace, in the order of the binds.
    pub fn keys(&self) -> impl Iterator<Item = (KeyId, i64)> + '_ {
        self.iter()
            .map(|(db, grace_ms, name)| ((db, name.to_vec()), grace_ms))
    }

    /// Keeps only the entries for which `keep(db, name)` holds, in their order.
    pub fn retain(&mut self, mut keep: impl FnMut(i32, &[u8]) -> bool) {
        let old = std::mem::take(self);
        for (db, grace_ms, name) in old.iter() {
            if keep(db, name) {
                self.push(db, name, grace_ms);
            }
        }
        self.stale = old.stale.min(self.len());
    }

    /// Renumbers the database of every entry with `renumber`.
    pub fn renumber_dbs(&mut self, mut renumber: impl FnMut(&mut i32)) {
        self.runs.iter_mut().for_each(|run| renumber(&mut run.db));
    }
}

impl FromIterator<(KeyId, i64)> for ClientLocks {
    fn from_iter<I: IntoIterator<Item = (KeyId, i64)>>(entries: I) -> Self {
        let mut locks = ClientLocks::default();
        for ((db, name), grace_ms) in entries {
            locks.push(db, &name, grace_ms);
        }
        locks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_a_name_and_a_short_name_is_inline() {
        assert_eq!(std::mem::size_of::<Name>(), 32);
        let long = [b'x'; INLINE_NAME + 1];
        assert!(matches!(Name::new(&long), Name::Heap(_)));
        assert_eq!(Name::new(&long).as_slice(), &long);
        let short = [b'y'; INLINE_NAME];
        assert!(matches!(Name::new(&short), Name::Inline { .. }));
        assert_eq!(Name::new(&short).as_slice(), &short);
        assert_eq!(Name::new(b"").as_slice(), b"");
    }

    #[test]
    fn entries_keep_their_database_and_grace_in_bind_order() {
        let mut locks = ClientLocks::default();
        let binds: Vec<(i32, i64, &[u8])> = vec![
            (0, 5, b"a"),
            (0, 5, b"b"),
            (1, 5, b"c"),
            (1, 9, b"d"),
            (0, 5, b"a"),
        ];
        for &(db, grace_ms, name) in &binds {
            locks.push(db, name, grace_ms);
        }
        assert_eq!(locks.runs.len(), 4, "a run per change of database or grace");
        assert_eq!(locks.len(), 5);
        assert!(locks.iter().eq(binds.iter().copied()));

        locks.renumber_dbs(|db| *db = 1 - *db);
        locks.stale = 4;
        locks.retain(|db, name| db == 1 || name == b"d");
        let kept: Vec<(i32, i64, &[u8])> =
            vec![(1, 5, b"a"), (1, 5, b"b"), (0, 9, b"d"), (1, 5, b"a")];
        assert!(locks.iter().eq(kept.iter().copied()));
        assert_eq!(locks.stale, 4, "no more stale entries than entries");
        locks.retain(|_, _| false);
        assert!(locks.is_empty() && locks.runs.is_empty() && locks.stale == 0);
    }
}
