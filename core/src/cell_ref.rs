//! The lock a cell keeps beside its value (the module's `ffi/cell.rs`), as that value's
//! lock reaches it: the value and the lock share one block that the server frees whole,
//! so the value's reference to the lock lives exactly as long as the lock does.

use std::fmt;

/// The `T` a cell keeps, as its value reaches it. Only a shared borrow of the value
/// reaches it, for no longer than that borrow (`get`).
pub struct CellRef<T: 'static>(&'static T);

impl<T> CellRef<T> {
    /// The `T` at `at`. The module's `ffi/cell.rs` makes one for the lock beside a value
    /// in the same block, which it says `'static` for: the block outlives the value that
    /// holds this, and the lock never moves or changes while it lives (its `SAFETY`
    /// comment).
    pub fn new(at: &'static T) -> Self {
        CellRef(at)
    }

    /// The `T`.
    pub fn get(&self) -> &T {
        self.0
    }
}

impl<T: fmt::Debug> fmt::Debug for CellRef<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.get().fmt(f)
    }
}
