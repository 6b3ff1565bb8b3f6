//! What a lock really costs the server's allocator, for `MEMORY USAGE`. Pure Rust.
//!
//! For a key of a module type the server counts what the type's `mem_usage` callback
//! answers, and of its own allocations for the key less than it counts for a string key:
//! on Redis 7 and Valkey 8 neither the object nor the module-value cell that points at
//! the type and the value (16 bytes each). And the allocator (jemalloc, on every
//! supported server) rounds each allocation up to its size class. Counting both makes
//! `MEMORY USAGE` of a lock off by what a string key's is off by, no more: a lock's figure
//! minus a string key's is what memory really grows by (`tests/keyspace.rs` checks it on
//! every server CI runs).

use std::sync::atomic::{AtomicUsize, Ordering};

/// The server's allocations for a module value that it leaves out of `MEMORY USAGE`
/// (set at load for the server the module runs on).
static SERVER_CELLS: AtomicUsize = AtomicUsize::new(32);

/// Sets what the server leaves out of `MEMORY USAGE` for a module value (`server.rs`).
pub fn set_server_cells(bytes: usize) {
    SERVER_CELLS.store(bytes, Ordering::Relaxed);
}

/// What the server leaves out of `MEMORY USAGE` for a module value.
pub fn server_cells() -> usize {
    SERVER_CELLS.load(Ordering::Relaxed)
}

/// The size jemalloc hands out for a request of `n` bytes: 8, then multiples of 16 up to
/// 128, then four classes per doubling (160, 192, 224, 256, 320, ...).
pub fn allocated(n: usize) -> usize {
    match n {
        0 => 0,
        1..=8 => 8,
        9..=128 => n.div_ceil(16) * 16,
        _ => {
            let spacing = 1 << ((n - 1).ilog2() - 2);
            n.div_ceil(spacing) * spacing
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_up_to_jemallocs_size_classes() {
        let classes = [
            (1, 8),
            (8, 8),
            (9, 16),
            (17, 32),
            (32, 32),
            (33, 48),
            (48, 48),
            (49, 64),
            (120, 128),
            (129, 160),
            (161, 192),
            (256, 256),
            (257, 320),
            (513, 640),
            (4096, 4096),
            (4097, 5120),
        ];
        for (request, class) in classes {
            assert_eq!(allocated(request), class, "a request of {request} bytes");
        }
        assert_eq!(allocated(0), 0);
    }
}
