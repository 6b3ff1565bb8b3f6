//! The values the server holds for lock keys, and the cell: a session-bound lock and its
//! value in one block.
//!
//! A value is a `LockValue` at the start of a block of the module's allocator: a
//! `Box<LockValue>` (24 bytes), or a cell. A plain lock fits its value whole; the common
//! session-bound lock (a packed token, a fence that names its grant time, a binding,
//! `BoundLock`) does not, and kept beside its value in a block of its own it cost every
//! `SESSION` acquire a second allocation and a second block to touch. A cell is one block: the value, whose lock points at the
//! `BoundLock` that follows it.
//!
//! Only `place` makes a cell's lock, and only a shared borrow of the value reaches it: a
//! change goes through `Key::lock_value_mut`, which first moves the lock out of its cell
//! into a value of its own; a copy (`Clone`) is boxed. So a cell's lock never leaves it
//! and never outlives it, and the cell is freed, once, by `free`.

use std::alloc::{self, Layout};
use std::os::raw::c_void;
use std::ptr::NonNull;

use lock_core::cell_ref::CellRef;
use lock_core::lock::{BoundLock, LockState};
use lock_core::value::LockValue;

/// The block of a cell: a value whose lock is `lock`, beside it.
#[repr(C)]
struct Cell {
    value: LockValue,
    lock: BoundLock,
}

/// A value made for the server and not yet handed over: freed if dropped.
pub struct ServerValue(NonNull<c_void>);

impl ServerValue {
    /// `value` in a box of its own, never in a cell.
    pub fn boxed(value: LockValue) -> Self {
        ServerValue(NonNull::from(Box::leak(Box::new(value))).cast())
    }

    /// The pointer, still owned here (for a call that takes it only when it succeeds).
    pub fn as_ptr(&self) -> *mut c_void {
        self.0.as_ptr()
    }

    /// The pointer, for the server, which frees it through the type's `free` callback:
    /// the value enters the keyspace, and the gauges of `INFO lock` count it.
    pub fn into_raw(self) -> *mut c_void {
        // SAFETY: made by `place` or `into_server` and still owned here: a live value at
        // the start of its block, only read.
        unsafe { &*self.0.as_ptr().cast::<LockValue>() }.counted_in();
        self.replacing()
    }

    /// The pointer, for the server, in place of a value of the same key with the same
    /// holders, which the caller frees with `free` (uncounted, as this one is).
    pub fn replacing(self) -> *mut c_void {
        let value = self.0.as_ptr();
        std::mem::forget(self);
        value
    }
}

impl Drop for ServerValue {
    fn drop(&mut self) {
        // SAFETY: made by `place` or `into_server`, never handed over (`into_raw` forgets
        // it), so this is its only owner.
        unsafe { free(self.0.as_ptr()) }
    }
}

/// A new cell holding `lock`, for the server.
pub fn place(lock: BoundLock) -> ServerValue {
    let layout = Layout::new::<Cell>();
    // SAFETY: a Cell has a nonzero size.
    let Some(cell) = NonNull::new(unsafe { alloc::alloc(layout) }.cast::<Cell>()) else {
        alloc::handle_alloc_error(layout)
    };
    // SAFETY: `cell` is a fresh block of a Cell's layout; both fields are written in
    // place, the lock first, whose address the value keeps and which never moves. The
    // reference to it is `'static` only in name: it lives in the value beside it, in the
    // same block, which only `free` frees, dropping the value first; the lock is never
    // written again, and only a shared borrow of the value reaches it (see above).
    unsafe {
        let place = &raw mut (*cell.as_ptr()).lock;
        place.write(lock);
        let lock = LockState::in_cell(CellRef::new(&*place));
        (&raw mut (*cell.as_ptr()).value).write(LockValue::Exclusive(lock));
    }
    ServerValue(cell.cast())
}

/// `value` for the server: in a cell if it is the lock a cell keeps, else boxed.
#[inline]
pub fn into_server(value: LockValue) -> ServerValue {
    if let LockValue::Exclusive(lock) = &value
        && let Some(bound) = lock.cell_form()
    {
        return place(bound);
    }
    ServerValue::boxed(value)
}

/// Whether `value` is a cell's.
pub fn in_cell(value: &LockValue) -> bool {
    matches!(value, LockValue::Exclusive(lock) if lock.is_in_cell())
}

/// Frees a value the server held, which leaves the keyspace at `now_us` (unix us): its
/// holds end, and the gauges no longer count it.
///
/// # Safety
/// As for `free`.
pub unsafe fn free_counted(value: *mut c_void, now_us: i64) {
    // SAFETY: (the function's contract) a live value at the start of its block.
    unsafe { &*value.cast::<LockValue>() }.counted_out(now_us);
    // SAFETY: as promised by the caller.
    unsafe { free(value) }
}

/// Frees a value the server held.
///
/// # Safety
/// `value` was made by `place` or `into_server`, and is given back once, with no borrow
/// of it left.
pub unsafe fn free(value: *mut c_void) {
    let value = value.cast::<LockValue>();
    // SAFETY: (the function's contract) a live value at the start of its block.
    if in_cell(unsafe { &*value }) {
        // SAFETY: a cell's block, of a Cell's layout; its value owns nothing (its lock is
        // in the block), so nothing is dropped.
        unsafe { alloc::dealloc(value.cast(), Layout::new::<Cell>()) }
    } else {
        // SAFETY: not a cell, so a Box<LockValue>.
        drop(unsafe { Box::from_raw(value) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::lock::{NewToken, Session};
    use lock_core::token;

    fn bound() -> BoundLock {
        let now: i64 = 1_763_000_000_000;
        let session = Some(Session {
            grace_ms: 250,
            client: 42,
        });
        BoundLock::of(
            &NewToken::Made([9; 16]),
            (now as u64) << 10 | 3,
            now,
            session,
        )
        .expect("a cell's lock")
    }

    #[test]
    fn a_cell_reads_as_its_lock_and_a_copy_of_it_owns_its_own() {
        let cell = place(bound());
        // SAFETY: `cell` was just made by `place`, and is dropped last.
        let value = unsafe { &*cell.0.as_ptr().cast::<LockValue>() };
        assert!(in_cell(value));
        let LockValue::Exclusive(lock) = value else {
            panic!("not exclusive");
        };
        let b = bound();
        assert_eq!(
            (lock.fence(), lock.acquired_ms(), lock.session()),
            (b.fence, (b.fence >> 10) as i64, Some(b.session))
        );
        assert!(lock.holds(&token::spelled(&[9; 16])));
        assert_eq!(lock.heap_bytes(), 0);
        let copy = value.clone();
        assert!(!in_cell(&copy));
        let LockValue::Exclusive(copied) = &copy else {
            panic!("not exclusive");
        };
        assert_eq!(copied, lock);
        assert_eq!(copied.cell_form(), Some(b));
        // A copy of a cell's lock goes back into a cell.
        let again = into_server(copy);
        // SAFETY: made here, alive until dropped.
        assert!(in_cell(unsafe { &*again.0.as_ptr().cast::<LockValue>() }));
    }

    #[test]
    fn other_locks_are_boxed() {
        let plain = LockValue::Exclusive(LockState::new(b"mine", 7, 1, None));
        let boxed = into_server(plain);
        // SAFETY: made here, alive until dropped.
        assert!(!in_cell(unsafe { &*boxed.0.as_ptr().cast::<LockValue>() }));
    }
}
