//! Writes to lock keys and what follows them: the store (grants, releases, replication of
//! their effects), who waits for a key and when they get it (`waiting/`),
//! session-bound locks' graces and releases, slots being imported, the watchers of
//! `LOCK.WATCH`.

pub mod all_keys;
pub mod changes;
pub mod registry;
pub mod release;
pub mod renewal;
pub mod replicated;
pub mod routing;
pub mod session;
pub mod slot_import;
pub mod store;
pub mod waiting;
pub mod watching;
