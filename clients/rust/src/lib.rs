//! A Rust client for the redis-lock module (`LOCK.ACQUIRE`, `LOCK.RELEASE`,
//! `LOCK.EXTEND`, `LOCK.INFO`, `LOCK.WATCH`).
//!
//! What it gives on top of the raw commands:
//!
//! - [`Lock`], a guard: acquired with [`LockOptions`] (TTL, optional blocking wait, your
//!   own token), released when dropped, or explicitly with [`Lock::release`], which says
//!   whether the lock was still held.
//! - A watchdog ([`LockOptions::watchdog`]) that keeps extending the lock while the guard
//!   lives and reports a lost lock ([`Lock::check`], [`Lock::wait_lost`]) instead of
//!   letting the holder carry on unaware.
//! - The fencing token ([`Lock::fence`]), to be checked by the resource you protect.
//! - [`Election`], leader election on one lock: campaign, proclaim, resign, the leader
//!   now, and an iterator of every new leader ([`Election::observe`], on `LOCK.WATCH`).
//! - [`Redlock`], the Redlock algorithm across independent masters, built on
//!   `LOCK.ACQUIRE ... TOKEN` and `LOCK.RELEASE`.
//! - Async (tokio) versions of all of it in [`aio`] (feature `tokio`, on by default): the
//!   blocking types (`src/blocking/`, re-exported here) and [`aio`] are mirrors, file for
//!   file and method for method, over logic they share that does no I/O.
//! - [`commands`]: the four commands as typed [`redis::Cmd`] builders, for any connection
//!   of the `redis` crate (sync, async, cluster, pooled).
//!
//! # A guard
//!
//! ```no_run
//! use std::time::Duration;
//! use redis_lock_client::{LockOptions, Locker};
//!
//! # fn main() -> redis::RedisResult<()> {
//! let locker = Locker::open("redis://127.0.0.1:7379/")?;
//! let options = LockOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(2));
//! match locker.acquire("orders:42", &options)? {
//!     Some(lock) => {
//!         // ... work on order 42, passing lock.fence() to every write ...
//!         let still_held = lock.release()?;
//!         assert!(still_held, "the lock expired while we worked");
//!     }
//!     None => println!("order 42 is busy"),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Fencing: checking the token at the resource
//!
//! A lock can be lost while its holder still acts (a long GC pause, a network partition,
//! an expired TTL). The fence is how the protected resource refuses such a late write:
//! fences of one key only ever grow, so the resource remembers the highest fence it has
//! seen and rejects anything lower.
//!
//! ```
//! use std::collections::HashMap;
//!
//! /// A store that accepts a write only with a fence at least as new as the last one.
//! #[derive(Default)]
//! struct FencedStore {
//!     highest_fence: u64,
//!     rows: HashMap<String, String>,
//! }
//!
//! impl FencedStore {
//!     fn write(&mut self, fence: u64, key: &str, value: &str) -> Result<(), String> {
//!         if fence < self.highest_fence {
//!             return Err(format!("stale fence {fence}, already saw {}", self.highest_fence));
//!         }
//!         self.highest_fence = fence;
//!         self.rows.insert(key.to_string(), value.to_string());
//!         Ok(())
//!     }
//! }
//!
//! let mut store = FencedStore::default();
//! // Client A got fence 7, paused, and its lock expired; client B then got fence 8.
//! store.write(8, "order:42", "paid by B").unwrap();
//! // A wakes up and writes with its old fence: refused.
//! assert!(store.write(7, "order:42", "paid by A").is_err());
//! ```
//!
//! In a SQL database the same check is one statement:
//! `UPDATE orders SET state = $1, fence = $2 WHERE id = $3 AND fence <= $2`.

#![warn(missing_docs)]

#[cfg(feature = "tokio")]
pub mod aio;
mod blocking;
pub mod commands;
mod election;
mod guard;
mod lost;
#[cfg(test)]
mod mirrors;
mod multi;
mod options;
mod redis70;
pub mod redlock;
mod replicas;
mod token;

pub use blocking::{Leadership, Lock, Locker, MultiLock, Observer};
pub use commands::{Grant, GrantAll, LockInfo, Mode};
pub use election::{Election, Leader};
pub use lost::{LockLost, LostReason};
pub use options::LockOptions;
pub use redis70::{HOLD, RELEARN};
pub use redlock::{Redlock, RedlockError, RedlockGuard, RedlockOptions};
pub use replicas::{Replicas, is_not_replicated, is_too_few_replicas};
pub use token::new_token;
