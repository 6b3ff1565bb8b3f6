//! A value that only the server's main thread reaches, kept without a lock.
//!
//! A `Mutex` costs two locked instructions on every entry (tens of cycles each), which a
//! session-bound acquire paid for nothing: the server runs a module's commands, timers,
//! server events and keyspace notifications on its main thread, one at a time. A value
//! kept here is reached from those only; never from a type's `free` callback, which lazy
//! freeing (`UNLINK`, `FLUSHALL ASYNC`) may run on a background thread.

use std::cell::{Cell, UnsafeCell};

/// A `T` for the main thread, entered through `with`, never twice at once.
pub struct MainThread<T> {
    entered: Cell<bool>,
    value: UnsafeCell<T>,
}

// SAFETY: only the server's main thread calls `with` (the module's contract above: the
// value is reached from commands, timers, server events and notifications alone), so no
// two threads ever touch `entered` or `value`.
unsafe impl<T: Send> Sync for MainThread<T> {}

/// Leaves the value when dropped, also when the closure panics (the module's boundary
/// catches the panic; the value may then lag behind the keyspace, which its users allow).
struct Leave<'a>(&'a Cell<bool>);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

impl<T> MainThread<T> {
    /// `value`, for the main thread.
    pub fn new(value: T) -> Self {
        MainThread {
            entered: Cell::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Runs `f` on the value. Entering it again from inside `f` panics.
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        assert!(
            !self.entered.replace(true),
            "a main-thread value was entered twice"
        );
        let _leave = Leave(&self.entered);
        // SAFETY: one thread only (see the `Sync` impl), and `entered` shows that no
        // other `&mut` to the value is alive on it.
        f(unsafe { &mut *self.value.get() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entering_twice_panics_and_the_value_is_left_usable() {
        let cell = MainThread::new(1);
        assert_eq!(cell.with(|v| std::mem::replace(v, 2)), 1);
        let twice = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cell.with(|_| cell.with(|_| ()));
        }));
        assert!(twice.is_err());
        assert_eq!(cell.with(|v| *v), 2);
    }
}
