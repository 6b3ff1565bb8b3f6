//! The counters behind `INFO lock` (section `lock_stats`).
//!
//! Atomics, because the server reads them from its main thread while it may also fork;
//! relaxed ordering is enough for counters that are only ever added to and read.

use std::sync::atomic::{AtomicU64, Ordering};

/// One counter of `lock_stats`.
pub struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Self {
        Self(AtomicU64::new(0))
    }

    /// Adds one.
    pub fn bump(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// The current count.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Every lock granted, directly or to a waiter (an idempotent re-acquire is not a grant).
pub static GRANTS: Counter = Counter::new();
/// Acquires that found the lock held by another token (or promised to a waiter).
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
