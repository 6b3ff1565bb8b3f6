//! A leaf for what the type's callbacks learn where the module may act on nothing: that
//! a lock key left the keyspace. Whoever can act on it (the handoff) registers itself
//! here at load; a type callback only reports the fact and calls nothing above it.

use std::cell::Cell;

/// Who is told that a lock key left the keyspace: database and key name.
pub type Listener = fn(i32, &[u8]);

thread_local! {
    /// Set while a release deletes its own key: the release grants the next waiter
    /// itself, right after, and its deletion is never an expiry.
    static RELEASING: Cell<bool> = const { Cell::new(false) };
    /// Told when a lock key leaves the keyspace (set once, at load).
    static ON_LOCK_GONE: Cell<Option<Listener>> = const { Cell::new(None) };
}

/// Runs `delete`, a release's removal of its own lock key.
pub fn releasing<T>(delete: impl FnOnce() -> T) -> T {
    RELEASING.with(|r| r.set(true));
    let result = delete();
    RELEASING.with(|r| r.set(false));
    result
}

/// Whether the lock key being removed now is a release's own deletion.
pub fn is_releasing() -> bool {
    RELEASING.with(Cell::get)
}

/// Registers who is told that a lock key left the keyspace.
pub fn on_lock_gone(listener: Listener) {
    ON_LOCK_GONE.with(|l| l.set(Some(listener)));
}

/// Lock key `key` of database `db` is leaving the keyspace (deleted, expired, evicted,
/// renamed or moved away, overwritten), not by a release.
pub fn lock_gone(db: i32, key: &[u8]) {
    if let Some(listener) = ON_LOCK_GONE.with(Cell::get) {
        listener(db, key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static HEARD: std::cell::RefCell<Vec<(i32, Vec<u8>)>> = const { std::cell::RefCell::new(Vec::new()) };
    }

    fn listen(db: i32, key: &[u8]) {
        HEARD.with(|h| h.borrow_mut().push((db, key.to_vec())));
    }

    #[test]
    fn the_registered_listener_hears_of_gone_locks() {
        lock_gone(0, b"before");
        on_lock_gone(listen);
        lock_gone(3, b"k");
        assert_eq!(HEARD.with(|h| h.borrow().clone()), vec![(3, b"k".to_vec())]);
    }

    #[test]
    fn releasing_is_set_only_during_the_release() {
        assert!(!is_releasing());
        assert!(releasing(is_releasing));
        assert!(!is_releasing());
    }
}
