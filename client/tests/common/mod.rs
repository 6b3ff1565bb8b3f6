//! The client tests' real-server harness: the workspace's one harness, the
//! `redis-lock-testkit` crate (a `redis-server` on a free loopback port with the lock
//! module loaded and a directory of its own, killed on drop, panics included; plus
//! `poll_until`, `exists`, `pttl`), re-exported so tests keep `common::*`.

pub use redis_lock_testkit::*;
