//! What a lock really costs the server's memory, for `MEMORY USAGE`. Pure Rust.
//!
//! For a key of a module type the server counts what the type's `mem_usage` callback
//! answers, and of its own allocations for the key less than it counts for a string key:
//! on Redis 7 and Valkey 8 neither the object nor the module-value cell that points at
//! the type and the value (16 bytes each). The callback adds that to what the allocator
//! really set aside for the lock's blocks (`ffi::alloc::block_size`: jemalloc's size
//! class, or glibc's usable size on a libc build, as Valkey's wheels are, plus the
//! 8-byte chunk header glibc keeps in front of each block). That makes `MEMORY USAGE` of a lock
//! off by what a string key's is off by, no more: a lock's figure minus a string key's is
//! what memory really grows by (`tests/server/keyspace.rs` checks it on every server CI runs).

use std::sync::atomic::{AtomicUsize, Ordering};

/// The server's allocations for a module value that it leaves out of `MEMORY USAGE`
/// (set at load for the server the module runs on).
static SERVER_CELLS: AtomicUsize = AtomicUsize::new(32);

/// Sets what the server leaves out of `MEMORY USAGE` for a module value (`server/identity.rs`).
pub fn set_server_cells(bytes: usize) {
    SERVER_CELLS.store(bytes, Ordering::Relaxed);
}

/// What the server leaves out of `MEMORY USAGE` for a module value.
pub fn server_cells() -> usize {
    SERVER_CELLS.load(Ordering::Relaxed)
}

/// What the allocator keeps beside each block, outside what it reports as the block's
/// size: glibc's chunk header (8 bytes), nothing for jemalloc.
static BLOCK_OVERHEAD: AtomicUsize = AtomicUsize::new(0);

/// Sets what the allocator keeps beside each block, from the server's `mem_allocator`
/// (`INFO memory`): `libc` keeps a chunk header, `jemalloc-*` none.
pub fn set_allocator(name: &str) {
    let overhead = if name.starts_with("libc") { 8 } else { 0 };
    BLOCK_OVERHEAD.store(overhead, Ordering::Relaxed);
}

/// What a block whose size the allocator reports as `size` really takes.
pub fn block(size: usize) -> usize {
    size + BLOCK_OVERHEAD.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibc_blocks_carry_a_header_and_jemalloc_blocks_none() {
        set_allocator("libc");
        assert_eq!(block(40), 48);
        set_allocator("jemalloc-5.3.0");
        assert_eq!(block(32), 32);
    }
}
