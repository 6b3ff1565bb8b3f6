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

/// A key in a database, borrowed: what a write names, where the caller has the name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRef<'a> {
    /// The database (`SELECT`).
    pub db: i32,
    /// The key's name.
    pub name: &'a [u8],
}

impl<'a> KeyRef<'a> {
    /// The key `name` of database `db`.
    pub fn new(db: i32, name: &'a [u8]) -> Self {
        KeyRef { db, name }
    }

    /// The key, owned (for a queue, a registry, a timer).
    pub fn to_id(self) -> KeyId {
        KeyId::new(self.db, self.name)
    }
}

impl KeyId {
    /// The key, borrowed.
    pub fn as_ref(&self) -> KeyRef<'_> {
        KeyRef::new(self.db, &self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_owned_and_borrowed_is_the_same_key() {
        let id = KeyId::new(3, b"orders:1");
        assert_eq!(id.as_ref(), KeyRef::new(3, b"orders:1"));
        assert_eq!(id.as_ref().to_id(), id);
        assert_ne!(KeyId::new(0, b"orders:1"), id);
    }
}
