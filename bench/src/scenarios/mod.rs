//! One file per scenario of the issue (numbered as there).

pub mod bulk;
pub mod callgrind;
pub mod contention;
pub mod durability;
pub mod election;
pub mod expiry;
pub mod fenced;
pub mod floor;
pub mod instructions;
pub mod memory;
pub mod replicas;
pub mod session_close;
pub mod sessions;
pub mod shared;
pub mod throughput;
pub mod transfers;
pub mod waiters;
