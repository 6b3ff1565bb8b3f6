//! redis-lock's core: what a lock is, who may be granted it, who waits, the fencing
//! clock, tokens, the session registry, the counters and every error the commands reply
//! with (`error::Error`). No server in it: this crate does not depend on `redis-module`
//! (its `Cargo.toml` shows it, and `purity.rs` runs `cargo tree` to keep it so), so the
//! compiler, not a comment, keeps it pure. The module crate asks the server, decides with
//! these rules, and writes what they decide.
//!
//! No `unsafe` either: the one pointer the core keeps into server memory (`cell_ref.rs`,
//! a lock kept beside its value in one block) is made by the module's `ffi/`.

#![forbid(unsafe_code)]

pub mod bindings;
pub mod cell_ref;
pub mod client_locks;
pub mod cluster;
pub mod connections;
pub mod decimal;
pub mod error;
pub mod fence;
pub mod footprint;
pub mod grant;
pub mod handoff;
#[cfg(test)]
mod handoff_model;
pub mod histogram;
pub mod holders;
pub mod inner;
pub mod key;
pub mod limits;
pub mod lock;
#[cfg(test)]
mod properties;
#[cfg(test)]
mod purity;
pub mod queue;
pub mod replica_acks;
pub mod replicas;
pub mod room;
pub mod rules;
pub mod stats;
pub mod token;
pub mod value;
pub mod watchers;
