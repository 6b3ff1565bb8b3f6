//! What the type's callbacks learn where the module may act on nothing (a lock key left
//! the keyspace or arrived in it), and who is told: the `KeyEvents` the type is made
//! with. `lib.rs` makes the registered type with the keyspace's (`keyspace/changes.rs`),
//! so the compiler, not a registration at load, decides who hears, and grep finds it.
//!
//! Also the two marks a write sets around a deletion the type's callback will see: a
//! release's own deletion (never an expiry, and the release grants the next waiter
//! itself), and a lock that may be on its way to another key (`RENAME`, `MOVE`).

use std::cell::Cell;

use lock_core::key::KeyRef;
use lock_core::lock::Session;

/// Who is told what the type's callbacks learn of lock keys, by database and key name.
pub trait KeyEvents {
    /// Lock key `key` of database `db` is leaving the keyspace (a release's deletion
    /// included) or arrived in it (loaded, restored, copied): what watches it must look
    /// again.
    fn changed(key: KeyRef);
    /// Lock key `key` is leaving the keyspace (deleted, expired, evicted, renamed or moved
    /// away, overwritten), not by a release: its waiters may be granted.
    fn gone(key: KeyRef);
    /// A session-bound lock arrived at `key` (loaded from an RDB file or a `RESTORE`
    /// payload, copied).
    fn session_arrived(key: KeyRef, session: Session);
    /// A session-bound lock is leaving `key`, by whatever means.
    fn session_gone(key: KeyRef, session: Session);
    /// Shared holders arrived at `key` (loaded, restored, copied): their expiries must be
    /// watched.
    fn shared_arrived(key: KeyRef);
}

thread_local! {
    /// Set while a release deletes its own key.
    static RELEASING: Cell<bool> = const { Cell::new(false) };
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

/// A session-bound lock or shared holders may be on their way to another key.
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

    #[test]
    fn releasing_is_set_only_during_the_release() {
        assert!(!is_releasing());
        assert!(releasing(is_releasing));
        assert!(!is_releasing());
    }

    #[test]
    fn the_in_flight_mark_is_taken_once() {
        session_in_flight();
        assert!(is_session_in_flight());
        assert!(take_session_in_flight());
        assert!(!take_session_in_flight());
    }
}
