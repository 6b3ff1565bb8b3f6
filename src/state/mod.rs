//! Pure state and rules: what a lock is, who may be granted it, who waits, the fencing
//! clock, tokens, the session registry, the counters and the error texts. No server
//! calls: everything here is tested without a server (`properties.rs` by property tests).

pub mod bindings;
pub mod client_locks;
pub mod cluster;
pub mod connections;
pub mod decimal;
pub mod error;
pub mod events;
pub mod fence;
pub mod footprint;
pub mod holders;
pub mod inner;
pub mod limits;
pub mod lock;
pub mod queue;
pub mod room;
pub mod rules;
pub mod stats;
pub mod token;
pub mod value;
pub mod watchers;
