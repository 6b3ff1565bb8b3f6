//! Writes to lock keys and what follows them: the store (grants, releases, replication of
//! their effects), the handoff of a freed lock to its waiters and the waits themselves,
//! session-bound locks' graces and releases, slots being imported, the watchers of
//! `LOCK.WATCH`.

pub mod blocking;
pub mod changes;
pub mod handoff;
pub mod registry;
pub mod routing;
pub mod session;
pub mod slot_import;
pub mod store;
pub mod watching;
