//! The module's allocator: the server's own (so `INFO memory` and `maxmemory` count what
//! the module holds), with a running count of the bytes the module asked for and has not
//! given back. `INFO lock` shows it as `lock_allocated_bytes`: which part of the server's
//! memory is the module's own (its queues, maps and values) and which the server's (its
//! objects, and for each blocked client the clients it lends it).

use std::alloc::{GlobalAlloc, Layout};
use std::os::raw::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

use redis_module::alloc::RedisAlloc;
use redis_module::raw;

/// Bytes the module holds: the sizes it asked for, not the allocator's rounding.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// The server's allocator, counted. (The module's global allocator, which the unit tests,
/// running without a server, do not install.)
#[cfg_attr(test, allow(dead_code))]
pub struct CountingAlloc;

// SAFETY: every call is forwarded unchanged to the server's allocator; the count is a
// side effect that never touches the memory.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout is passed on as the caller promises it.
        let ptr = unsafe { RedisAlloc.alloc(layout) };
        if !ptr.is_null() {
            HELD.fetch_add(layout.size(), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HELD.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` was allocated above with this layout, as the caller promises.
        unsafe { RedisAlloc.dealloc(ptr, layout) }
    }
}

/// Bytes the module holds now.
pub fn held_bytes() -> usize {
    HELD.load(Ordering::Relaxed)
}

/// What the server's allocator set aside for the block that starts at `ptr`: its size
/// class under jemalloc, what `malloc_usable_size` answers on a libc build. `None` if the
/// server does not offer `RedisModule_MallocSize`.
///
/// # Safety
/// `ptr` is the start of a live block this allocator made (a non-empty `Box`'s pointer).
pub unsafe fn block_size(ptr: *const u8) -> Option<usize> {
    // SAFETY: reading a function pointer of the API table filled at load time.
    let size_of = unsafe { raw::RedisModule_MallocSize }?;
    // SAFETY: `ptr` starts a live block of the server's allocator (the caller's promise),
    // which is what the call measures; it reads the allocator's metadata only.
    Some(unsafe { size_of(ptr.cast_mut().cast::<c_void>()) })
}
