//! An append-only list kept in fixed chunks: pure Rust, no FFI.
//!
//! A `Vec` that grows to thousands of entries moves to a new, larger allocation at every
//! doubling, and each one is fresh memory the kernel must fault in: on a virtual machine
//! that cost more than the rest of a session-bound acquire (`bench` scenario 9). Chunks
//! of one small size are what the allocator reuses from its own free lists, so a list
//! that grows, empties and grows again touches no new page.

/// Entries per chunk: a chunk of 32-byte entries (768 bytes) stays in the small sizes
/// of both allocators the servers use: jemalloc's 768-byte class, and glibc's small bins
/// (under 1,008 bytes), where a larger request first consolidates glibc's fast bins, which
/// cost a session-bound acquire on Valkey (glibc) 180 instructions more with 64 entries.
const CHUNK: usize = 24;

/// A list of `T` in chunks of `CHUNK`.
#[derive(Debug)]
pub struct Chunked<T> {
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Chunked {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Chunked<T> {
    /// Appends `item`.
    pub fn push(&mut self, item: T) {
        match self.chunks.last_mut() {
            Some(chunk) if chunk.len() < CHUNK => chunk.push(item),
            _ => {
                let mut chunk = Vec::with_capacity(CHUNK);
                chunk.push(item);
                self.chunks.push(chunk);
            }
        }
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

    /// The entries, in the order they were pushed.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_and_count_across_chunks() {
        let mut list = Chunked::default();
        assert!(list.is_empty());
        for i in 0..CHUNK * 3 + 5 {
            list.push(i);
        }
        assert_eq!(list.len(), CHUNK * 3 + 5);
        assert!(!list.is_empty());
        assert!(list.iter().copied().eq(0..CHUNK * 3 + 5));
    }

    #[test]
    fn every_chunk_but_the_last_is_full() {
        let mut list = Chunked::default();
        for i in 0..CHUNK * 2 + 1 {
            list.push(i);
        }
        assert_eq!(list.chunks.len(), 3);
        assert!(
            list.chunks[..2]
                .iter()
                .all(|c| c.len() == CHUNK && c.capacity() == CHUNK)
        );
    }
}
