//! The counters behind `INFO lock` (section `lock_stats`).
//!
//! A leaf: anyone may add to a counter, and nothing here calls out (`commands/info_section.rs` shows them,
//! `server/events.rs` counts expiries). Every count is made on the server's main thread
//! (commands, timers, server events), so a counter is bumped with a plain load and store,
//! not a locked add (tens of cycles on every acquire); atomics all the same, so that
//! reading them needs no `unsafe`.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};

/// One counter of `lock_stats`.
pub struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Self {
        Self(AtomicU64::new(0))
    }

    /// Adds one (on the main thread: see the module's doc).
    pub fn bump(&self) {
        self.0
            .store(self.0.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// The current count.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Every lock granted, directly or to a waiter (an idempotent re-acquire is not a grant).
pub static GRANTS: Counter = Counter::new();
/// Acquires that found the lock held by another token, or free with waiters queued.
pub static CONTENDED: Counter = Counter::new();
/// Successful releases.
pub static RELEASES: Counter = Counter::new();
/// Successful extends.
pub static EXTENDS: Counter = Counter::new();
/// Held locks that expired.
pub static EXPIRED: Counter = Counter::new();
/// Acquires that started waiting.
pub static WAITS: Counter = Counter::new();
/// Waits that ended with the timeout.
pub static WAIT_TIMEOUTS: Counter = Counter::new();
/// Session-bound locks released because their connection closed and the grace ran out.
pub static SESSION_RELEASES: Counter = Counter::new();
/// Graces ended by a reclaim: the holder's token acquired its lock again.
pub static SESSION_RECLAIMS: Counter = Counter::new();
/// `LOCK.WATCH` replies that carried the key's state (at once or after a change; not
/// timeouts).
pub static WATCH_REPLIES: Counter = Counter::new();

thread_local! {
    /// The lock key the server unlinked last. The `expired` event comes right after the
    /// key is gone, so this is how the module learns that what expired was a lock,
    /// without listening to every key's events. Any `expired` event takes the note, and
    /// a timer forgets it as soon as the current command or cycle is over, so a lock
    /// removed otherwise (`DEL`, overwrite) is never taken for a later expiry of a key
    /// of the same name.
    static UNLINKED_LOCK: RefCell<Option<Vec<u8>>> = const { RefCell::new(None) };
    /// Whether the timer that forgets the note is already set.
    static FORGET_SCHEDULED: Cell<bool> = const { Cell::new(false) };
}

/// The server is removing lock key `key` from its keyspace (type's unlink callback).
/// Returns true when the caller must schedule `forget_unlinked_lock` for right after the
/// current command or cycle (once, however many locks it unlinks).
pub fn note_unlinked_lock(key: &[u8]) -> bool {
    UNLINKED_LOCK.with(|last| *last.borrow_mut() = Some(key.to_vec()));
    !FORGET_SCHEDULED.with(|scheduled| scheduled.replace(true))
}

/// Whether the key of the `expired` event being handled is the lock the server just
/// unlinked; forgets the note either way.
pub fn take_unlinked_lock(key: &[u8]) -> bool {
    UNLINKED_LOCK.with(|last| last.borrow_mut().take().is_some_and(|name| name == key))
}

/// Forgets the note: the command or cycle that unlinked the lock is over.
pub fn forget_unlinked_lock() {
    UNLINKED_LOCK.with(|last| last.borrow_mut().take());
    FORGET_SCHEDULED.with(|scheduled| scheduled.set(false));
}
