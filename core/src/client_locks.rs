//! The locks bound to one open connection, as the session registry keeps them: pure
//! Rust, no FFI.
//!
//! Every session-bound acquire appends here, so an entry is made to cost as little as it
//! can: the key's name, after one byte of length, in chunks of bytes (a lock named
//! `job:12345` takes 10 bytes). The database and grace, which a connection seldom varies,
//! are kept once per run of entries that share them, so the list still tells, in the
//! order of the binds, which grace a key was bound with last.
//!
//! A `Vec` that grows to thousands of entries moves to a new, larger allocation at every
//! doubling, each one fresh memory the kernel must fault in: on a virtual machine that
//! cost more than the rest of a session-bound acquire (`bench` scenario 9). Chunks of one
//! small size are what the allocator reuses from its own free lists, so a list that
//! grows, empties and grows again touches no new page.

use crate::queue::KeyId;

/// Bytes per chunk: jemalloc's 768-byte class, and glibc's small bins (under 1,008
/// bytes), where a larger request first consolidates glibc's fast bins (which cost a
/// session-bound acquire on Valkey, glibc, 180 instructions more with 2 KB chunks). A
/// longer name gets a chunk of its own size.
const CHUNK_BYTES: usize = 768;

/// The length byte that says a name is this long or longer: its length follows in 8
/// bytes, little-endian.
const LONG: u8 = u8::MAX;

/// Appends `name`, with its length before it, to `chunks`.
fn append(chunks: &mut Vec<Vec<u8>>, name: &[u8]) {
    let short = name.len() < usize::from(LONG);
    let need = name.len() + if short { 1 } else { 9 };
    if chunks
        .last()
        .is_none_or(|chunk| chunk.capacity() - chunk.len() < need)
    {
        chunks.push(Vec::with_capacity(need.max(CHUNK_BYTES)));
    }
    let Some(chunk) = chunks.last_mut() else {
        return;
    };
    if short {
        chunk.push(name.len() as u8);
    } else {
        chunk.push(LONG);
        chunk.extend_from_slice(&(name.len() as u64).to_le_bytes());
    }
    chunk.extend_from_slice(name);
}

/// The names one chunk holds, in order.
struct Names<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Names<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let (&len, rest) = self.rest.split_first()?;
        let (len, rest) = if len == LONG {
            let (len, rest) = rest.split_first_chunk::<8>()?;
            (usize::try_from(u64::from_le_bytes(*len)).ok()?, rest)
        } else {
            (usize::from(len), rest)
        };
        let (name, rest) = rest.split_at_checked(len)?;
        self.rest = rest;
        Some(name)
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
    /// The names, each after its length, in chunks.
    chunks: Vec<Vec<u8>>,
    /// How many names the chunks hold.
    len: usize,
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
                start: self.len,
                db,
                grace_ms,
            });
        }
        append(&mut self.chunks, name);
        self.len += 1;
    }

    /// How many entries it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Each entry, in the order of the binds: database, grace, key name.
    pub fn iter(&self) -> impl Iterator<Item = (i32, i64, &[u8])> {
        let mut run = 0;
        let names = self.chunks.iter().flat_map(|chunk| Names { rest: chunk });
        names.enumerate().map(move |(i, name)| {
            while self.runs.get(run + 1).is_some_and(|next| next.start <= i) {
                run += 1;
            }
            let Run { db, grace_ms, .. } = self.runs[run];
            (db, grace_ms, name)
        })
    }

    /// Each entry's key and grace, in the order of the binds.
    pub fn keys(&self) -> impl Iterator<Item = (KeyId, i64)> + '_ {
        self.iter()
            .map(|(db, grace_ms, name)| (KeyId::new(db, name), grace_ms))
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
        for (KeyId { db, name }, grace_ms) in entries {
            locks.push(db, &name, grace_ms);
        }
        locks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_every_length_come_back_as_pushed() {
        let mut locks = ClientLocks::default();
        let long = vec![b'x'; CHUNK_BYTES * 2];
        let names: Vec<Vec<u8>> = vec![
            b"".to_vec(),
            b"a".to_vec(),
            vec![b'y'; 254],
            vec![b'z'; 255],
            vec![0xff; 256],
            long,
            b"job:12345".to_vec(),
        ];
        for round in 0..100 {
            for name in &names {
                locks.push(round % 3, name, 7);
            }
        }
        assert_eq!(locks.len(), names.len() * 100);
        assert!(
            locks.iter().map(|(_, _, name)| name).eq(names
                .iter()
                .map(Vec::as_slice)
                .cycle()
                .take(locks.len()))
        );
        assert!(
            locks.chunks.iter().all(|c| c.capacity() >= CHUNK_BYTES),
            "no chunk smaller than the allocator's class"
        );
    }

    #[test]
    fn a_short_name_takes_one_byte_more_than_itself() {
        let mut locks = ClientLocks::default();
        for i in 0..76 {
            locks.push(0, format!("job:{i:05}").as_bytes(), 5);
        }
        assert_eq!(locks.chunks.len(), 1, "76 names of 9 bytes in 768");
        locks.push(0, b"job:99999", 5);
        assert_eq!(locks.chunks.len(), 2);
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
