//! Lock guards, leader election and Redlock on blocking connections: the mirror of
//! [`aio`](crate::aio), file for file and name for name (`conn.rs`, `election.rs`,
//! `lock.rs`, `locker.rs`, `multi.rs`, `redlock.rs`, `shared.rs`), re-exported at the
//! crate root. What both faces share, with no I/O, is at the crate root: the commands and
//! their replies (`commands.rs`), the watchdog's schedule (`guard.rs`), lost locks
//! (`lost.rs`), options, tokens, election's and `MultiLock`'s common parts, and Redlock's
//! arithmetic (`redlock/`). A test (`tests/client/mirrors.rs`) fails when a public method
//! is on one face and not the other.

mod conn;
mod election;
mod lock;
mod locker;
mod multi;
mod redis70;
mod redlock;
mod replicated;
mod shared;

pub(crate) use conn::{Link, connect};
pub use election::{Leadership, Observer};
pub use lock::Lock;
pub use locker::Locker;
pub use multi::MultiLock;
pub use redlock::{Redlock, RedlockGuard};
