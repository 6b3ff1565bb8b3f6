//! How a guard tells its holder that the lock is gone.

use std::fmt;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Why a held lock was lost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LostReason {
    /// `LOCK.EXTEND` answered 0: the lock expired, was deleted, or another token holds it.
    NotHeld,
    /// The watchdog could not reach the server until the lock's TTL ran out, so the lock
    /// must be presumed expired. Carries the last error.
    Unreachable(String),
}

/// The error of a guard whose lock is lost: stop acting on the protected resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockLost {
    /// The lock's key.
    pub key: Vec<u8>,
    /// What happened.
    pub reason: LostReason,
}

impl fmt::Display for LockLost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = String::from_utf8_lossy(&self.key);
        match &self.reason {
            LostReason::NotHeld => write!(f, "lock {key} lost: no longer held by this token"),
            LostReason::Unreachable(err) => {
                write!(
                    f,
                    "lock {key} lost: server unreachable until the TTL ran out ({err})"
                )
            }
        }
    }
}

impl std::error::Error for LockLost {}

/// Shared between a sync guard and its watchdog thread: set once, waited on.
#[derive(Default)]
pub(crate) struct LostFlag {
    reason: Mutex<Option<LostReason>>,
    changed: Condvar,
}

impl LostFlag {
    pub(crate) fn set(&self, reason: LostReason) {
        let mut slot = self.reason.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(reason);
        }
        self.changed.notify_all();
    }

    pub(crate) fn get(&self) -> Option<LostReason> {
        self.reason
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn wait(&self, timeout: Duration) -> Option<LostReason> {
        let deadline = Instant::now() + timeout;
        let mut slot = self.reason.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if slot.is_some() {
                return slot.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            slot = self
                .changed
                .wait_timeout(slot, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}
