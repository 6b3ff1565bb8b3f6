//! What follows a change to a lock key that the module did not write itself: the type's
//! callbacks (`datatype/`: a key loaded, restored, copied, deleted, expired, evicted,
//! renamed or moved away, overwritten) report here, and here is every step that follows,
//! in order. `lib.rs` makes the lock type with `Changes`, so this is the one listener, and
//! the compiler checks it hears everything.

use crate::datatype::KeyEvents;
use crate::keyspace::{handoff, session, watching};
use crate::state::lock::Session;

/// The keyspace, as the lock type's callbacks report to it.
pub struct Changes;

impl KeyEvents for Changes {
    fn changed(db: i32, key: &[u8]) {
        watching::lock_changed(db, key);
    }

    fn gone(db: i32, key: &[u8]) {
        handoff::lock_gone(db, key);
    }

    fn session_arrived(db: i32, key: &[u8], session: Session) {
        session::arrived(db, key, session);
    }

    fn session_gone(db: i32, key: &[u8], session: Session) {
        session::gone(db, key, session);
    }

    fn shared_arrived(db: i32, key: &[u8]) {
        handoff::shared_arrived(db, key);
    }
}
