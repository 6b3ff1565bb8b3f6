//! The counters behind `INFO lock` (section `lock_stats`).
//!
//! A leaf: anyone may add to a counter, and nothing here calls out (`commands/info_section.rs` shows them,
//! `server/events.rs` counts expiries). Every count is made on the server's main thread
//! (commands, timers, server events), so a counter is bumped with a plain load and store,
//! not a locked add (tens of cycles on every acquire); atomics all the same, so that
//! reading them needs no `unsafe`.

use std::cell::{Cell, RefCell};
use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

use crate::histogram::Histogram;

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

    /// Back to zero (`CONFIG RESETSTAT`).
    fn reset(&self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

/// A gauge of `lock_stats`: how many of something there are now. Moved from any thread
/// (the server may free a lock value on its lazy-free thread), so with locked adds; never
/// reset.
pub struct Gauge(AtomicI64);

impl Gauge {
    const fn new() -> Self {
        Self(AtomicI64::new(0))
    }

    /// Adds `n` (negative: takes away).
    #[inline]
    pub fn add(&self, n: i64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// The current value (never below 0 as shown, whatever order the adds landed in).
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed).max(0) as u64
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
/// Replies held until replicas had the grant or the extend (`REPLICAS n`, the
/// `lock.replicas` setting).
pub static REPLICA_WAITS: Counter = Counter::new();
/// Held replies that fell short (`NOTREPLICATED`): the grant undone, the extend kept.
pub static REPLICA_SHORTFALLS: Counter = Counter::new();
/// Requests that the replicas acknowledge now, one per turn of the event loop that held
/// a new reply: each is a `WAITAOF` the module runs (counted in `INFO commandstats`).
pub static REPLICA_ACK_REQUESTS: Counter = Counter::new();

/// Lock keys in the keyspace (of every database; values being loaded in the background
/// included).
pub static KEYS: Gauge = Gauge::new();
/// Holders of those keys: one per exclusive lock, one per shared holder.
pub static HOLDERS: Gauge = Gauge::new();

/// From a waiter's arrival to its grant or its timeout, in microseconds.
pub static WAIT_USEC: LazyLock<Histogram> = LazyLock::new(Histogram::new);
/// From a grant to its release, expiry or revocation, in microseconds.
pub static HOLD_USEC: LazyLock<Histogram> = LazyLock::new(Histogram::new);

/// Whether hold times are recorded: on a master that serves its keys. A replica's locks
/// end as its master's did, and a load replaces values that go on as they were.
static HOLDS_RECORDED: AtomicBool = AtomicBool::new(false);

/// Sets whether the server serves its keys as a master now (at load, on a role change,
/// around loading).
pub fn set_serving(serving: bool) {
    HOLDS_RECORDED.store(serving, Ordering::Relaxed);
}

/// A holder granted at `acquired_ms` (unix ms) left at `now_us` (unix us): its hold time
/// counts, where holds are recorded.
#[inline]
pub fn held(acquired_ms: i64, now_us: i64) {
    if HOLDS_RECORDED.load(Ordering::Relaxed) {
        let held = now_us
            .saturating_sub(acquired_ms.saturating_mul(1000))
            .max(0);
        HOLD_USEC.record(held as u64);
    }
}

/// A shared holder joined a key in the keyspace, in place.
pub fn holder_joined() {
    HOLDERS.add(1);
}

/// A shared holder granted at `acquired_ms` left a key in the keyspace at `now_us`, in
/// place (released, expired, dropped as its master did).
pub fn holder_left(acquired_ms: i64, now_us: i64) {
    HOLDERS.add(-1);
    held(acquired_ms, now_us);
}

/// `CONFIG RESETSTAT`: every counter and both distributions back to zero; the gauges
/// stay, as they count what is there now.
pub fn reset() {
    for counter in [
        &GRANTS,
        &CONTENDED,
        &RELEASES,
        &EXTENDS,
        &EXPIRED,
        &WAITS,
        &WAIT_TIMEOUTS,
        &SESSION_RELEASES,
        &SESSION_RECLAIMS,
        &WATCH_REPLIES,
        &REPLICA_WAITS,
        &REPLICA_SHORTFALLS,
        &REPLICA_ACK_REQUESTS,
    ] {
        counter.reset();
    }
    WAIT_USEC.reset();
    HOLD_USEC.reset();
}

/// Allocates the distributions now (at load), so that `allocated_bytes` counts them from
/// the start.
pub fn allocate() {
    LazyLock::force(&WAIT_USEC);
    LazyLock::force(&HOLD_USEC);
}

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
