//! A leaf for what the type's callbacks learn where the module may act on nothing: that
//! a lock key left the keyspace or arrived in it, that a session-bound lock or shared holders arrived in
//! it or left it; and for what the blocking layer learns when a waiter leaves a queue.
//! Whoever can act on it (the handoff, the sessions) registers itself here at load; a
//! type callback only reports the fact and calls nothing above it.

use std::cell::Cell;

use crate::state::lock::Session;

/// Who is told that a lock key left the keyspace: database and key name.
pub type Listener = fn(i32, &[u8]);

/// Who is told of session-bound locks: database, key name and binding.
pub type SessionListener = fn(i32, &[u8], Session);

/// Who hears of session-bound locks: one for those that arrive (loaded, restored), one
/// for those that leave the keyspace.
#[derive(Clone, Copy)]
pub struct SessionListeners {
    /// A session-bound lock arrived under this name.
    pub arrived: SessionListener,
    /// A session-bound lock left the keyspace under this name.
    pub gone: SessionListener,
}

thread_local! {
    /// Set while a release deletes its own key: the release grants the next waiter
    /// itself, right after, and its deletion is never an expiry.
    static RELEASING: Cell<bool> = const { Cell::new(false) };
    /// Told when a lock key leaves the keyspace (set once, at load).
    static ON_LOCK_GONE: Cell<Option<Listener>> = const { Cell::new(None) };
    /// Told of session-bound locks (set once, at load).
    static ON_SESSION: Cell<Option<SessionListeners>> = const { Cell::new(None) };
    /// Told that shared holders arrived at a key (set once, at load).
    static ON_SHARED: Cell<Option<Listener>> = const { Cell::new(None) };
    /// Told that a lock key left the keyspace or arrived in it, by any means (set once).
    static ON_LOCK_CHANGED: Cell<Option<Listener>> = const { Cell::new(None) };
    /// Told that the head of a key's queue left it, others still waiting (set once).
    static ON_HEAD_LEFT: Cell<Option<Listener>> = const { Cell::new(None) };
    /// Set when a session-bound lock or shared holders leave a key other than by a
    /// release: a `RENAME` or `MOVE` may bring them to another key, where the sessions and
    /// the holders' expiry must find them (the notification of the destination names no
    /// value).
    static IN_FLIGHT: Cell<bool> = const { Cell::new(false) };
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

/// Registers who is told that a lock key left the keyspace or arrived in it.
pub fn on_lock_changed(listener: Listener) {
    ON_LOCK_CHANGED.with(|l| l.set(Some(listener)));
}

/// Lock key `key` of database `db` is leaving the keyspace (a release's deletion
/// included) or arrived in it (loaded, restored, copied): what watches it must look again.
pub fn lock_changed(db: i32, key: &[u8]) {
    if let Some(listener) = ON_LOCK_CHANGED.with(Cell::get) {
        listener(db, key);
    }
}

/// Registers who hears of session-bound locks.
pub fn on_session(listeners: SessionListeners) {
    ON_SESSION.with(|l| l.set(Some(listeners)));
}

/// A session-bound lock arrived at `key` of database `db` (loaded from an RDB file or a
/// `RESTORE` payload, copied).
pub fn session_arrived(db: i32, key: &[u8], session: Session) {
    if let Some(listeners) = ON_SESSION.with(Cell::get) {
        (listeners.arrived)(db, key, session);
    }
}

/// A session-bound lock is leaving `key` of database `db`, by whatever means.
pub fn session_gone(db: i32, key: &[u8], session: Session) {
    if let Some(listeners) = ON_SESSION.with(Cell::get) {
        (listeners.gone)(db, key, session);
    }
}

/// Registers who is told that shared holders arrived at a key.
pub fn on_shared(listener: Listener) {
    ON_SHARED.with(|l| l.set(Some(listener)));
}

/// Shared holders arrived at `key` of database `db` (loaded, restored, copied, moved):
/// their expiries must be watched.
pub fn shared_arrived(db: i32, key: &[u8]) {
    if let Some(listener) = ON_SHARED.with(Cell::get) {
        listener(db, key);
    }
}

/// Registers who is told that the head of a queue left it.
pub fn on_head_left(listener: Listener) {
    ON_HEAD_LEFT.with(|l| l.set(Some(listener)));
}

/// The oldest waiter of `key` in database `db` left without the lock (timed out, gone),
/// and others still wait: the next may fit beside the holders where it did not.
pub fn head_left(db: i32, key: &[u8]) {
    if let Some(listener) = ON_HEAD_LEFT.with(Cell::get) {
        listener(db, key);
    }
}

/// A session-bound lock or shared holders may be on their way to another key (see
/// `IN_FLIGHT`).
pub fn session_in_flight() {
    IN_FLIGHT.with(|f| f.set(true));
}

/// Whether a session-bound lock may have moved since the last call; clears the mark.
pub fn take_session_in_flight() -> bool {
    IN_FLIGHT.with(|f| f.replace(false))
}

/// Whether a session-bound lock may have moved, without clearing the mark.
pub fn is_session_in_flight() -> bool {
    IN_FLIGHT.with(Cell::get)
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
