//! A lock key, named: its database and its name. Keys of different databases never meet
//! (waiters, watchers, session-bound locks are all kept by `KeyId`).

/// A key in a database, owned (kept in queues, registries, timers).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId {
    /// The database (`SELECT`).
    pub db: i32,
    /// The key's name.
    pub name: Vec<u8>,
}

impl KeyId {
    /// The key `name` of database `db`.
    pub fn new(db: i32, name: &[u8]) -> Self {
        KeyId {
            db,
            name: name.to_vec(),
        }
    }
}
