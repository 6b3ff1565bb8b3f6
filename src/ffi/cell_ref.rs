//! A pointer to the lock a cell keeps beside its value (`cell.rs`), as that value's lock
//! holds it. Generic and without imports from the crate: the lock state (`lock.rs`) names
//! it without depending on the layer that makes cells.

use std::fmt;
use std::ptr::NonNull;

/// The `T` a cell keeps, as its value points at it: a pointer into the cell, which it
/// does not own (the server frees the cell).
pub struct CellRef<T>(NonNull<T>);

impl<T> CellRef<T> {
    /// A pointer to the `T` at `at`.
    ///
    /// # Safety
    /// `at` must point into a live cell, at the `T` beside the value this `CellRef` is
    /// put in, and the `CellRef` must be reached only through a shared borrow of that
    /// value (see `cell.rs`), so that the `T` outlives every read and is never changed
    /// during one.
    pub unsafe fn new(at: NonNull<T>) -> Self {
        CellRef(at)
    }

    /// The `T`.
    pub fn get(&self) -> &T {
        // SAFETY: made by `new`, whose contract keeps the cell alive and unchanged while
        // the value that holds this pointer is borrowed, which `&self` is.
        unsafe { self.0.as_ref() }
    }
}

impl<T: fmt::Debug> fmt::Debug for CellRef<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.get().fmt(f)
    }
}
