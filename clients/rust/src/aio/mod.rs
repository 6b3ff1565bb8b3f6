//! Lock guards, leader election and Redlock on async (tokio) connections.
//!
//! The same model as the blocking types at the crate root, on the `redis` crate's
//! [`MultiplexedConnection`](redis::aio::MultiplexedConnection): one shared connection per server for acquires, releases
//! and the watchdogs' extends, and a connection of its own for each waiting acquire (a
//! blocked command would hold up every other command on a shared connection).
//!
//! ```no_run
//! use std::time::Duration;
//! use redis_lock_client::{aio::Locker, LockOptions};
//!
//! # async fn run() -> redis::RedisResult<()> {
//! let locker = Locker::open("redis://127.0.0.1:7379/")?;
//! let options = LockOptions::new(Duration::from_secs(10)).watchdog();
//! if let Some(lock) = locker.acquire("orders:42", &options).await? {
//!     tokio::select! {
//!         lost = lock.lost() => eprintln!("stopping: {lost}"),
//!         _ = tokio::time::sleep(Duration::from_secs(30)) => { /* the work */ }
//!     }
//!     lock.release().await?;
//! }
//! # Ok(())
//! # }
//! ```

use std::future::Future;
use std::time::Duration;

use redis::{RedisError, RedisResult};

fn timed_out(what: &str) -> RedisError {
    std::io::Error::new(std::io::ErrorKind::TimedOut, format!("{what} timed out")).into()
}

/// Runs `future` within `limit` (`None`: no limit), a timeout as a `TimedOut` IO error.
async fn within<T>(
    limit: Option<Duration>,
    future: impl Future<Output = RedisResult<T>>,
) -> RedisResult<T> {
    match limit {
        None => future.await,
        Some(limit) => tokio::time::timeout(limit, future)
            .await
            .unwrap_or_else(|_| Err(timed_out("redis command"))),
    }
}

mod conn;
mod election;
mod lock;
mod locker;
mod multi;
mod redis70;
mod redlock;
mod replicated;
mod shared;

pub use election::{Election, Leadership, Observer};
pub use lock::Lock;
pub use locker::Locker;
pub use multi::MultiLock;
pub use redlock::{Redlock, RedlockGuard};
