//! Redlock: one lock across N independent Redis masters.
//!
//! The algorithm as published by the Redis authors, on the module's commands:
//!
//! 1. Make one random token and note the start time.
//! 2. `LOCK.ACQUIRE key ttl TOKEN token` on every master, each with a timeout that is
//!    small next to the TTL, so a dead or slow master cannot eat the lock's time. (This
//!    client asks all masters at once instead of one after another; that only shortens
//!    the elapsed time.)
//! 3. The lock is held if a quorum (N/2 + 1) granted it and time is left:
//!    validity = TTL - elapsed - drift, with drift = TTL x drift factor + 2 ms for clock
//!    rate differences between the servers.
//! 4. Otherwise release it on all masters (also those that did not answer: they may have
//!    granted it late), wait a random delay so competing clients fall out of step, retry.
//!    Where a master's reply was lost, the release also goes out on the same connection
//!    right behind the acquire, so a master that runs the acquire late runs the release
//!    next, even if it is too slow to take a new connection in time.
//!
//! The holder may act on the resource only until [`RedlockGuard::valid_until`]. Each
//! master's fence is exposed ([`RedlockGuard::fences`]), but fences of independent
//! masters are not comparable with each other: Redlock gives no single fencing token.
//! When a resource must refuse late writers, lock on one master (with replicas) and use
//! [`Lock::fence`](crate::Lock::fence).
//!
//! ```no_run
//! use std::time::Duration;
//! use redis_lock_client::{Redlock, RedlockOptions};
//!
//! # fn main() -> redis::RedisResult<()> {
//! let masters = ["redis://10.0.0.1:6379/", "redis://10.0.0.2:6379/", "redis://10.0.0.3:6379/"];
//! let redlock = Redlock::open(&masters)?;
//! match redlock.lock("report:daily", &RedlockOptions::new(Duration::from_secs(10))) {
//!     Ok(guard) => {
//!         // ... work, but only while guard.is_valid() ...
//!         guard.release();
//!     }
//!     Err(failed) => println!("not acquired: {failed}"),
//! }
//! # Ok(())
//! # }
//! ```

mod attempts;
mod options;
#[cfg(test)]
mod tests;

pub use crate::blocking::{Redlock, RedlockGuard};
pub(crate) use attempts::{
    Attempts, Held, clients, confirmed, debug_redlock, instances, redlock_guard_accessors,
};
pub use options::{RedlockError, RedlockOptions, jittered, quorum, validity};
