//! What follows a change to a lock key that the module did not write itself: the type's
//! callbacks (`datatype/`: a key loaded, restored, copied, deleted, expired, evicted,
//! renamed or moved away, overwritten) report here, and here is every step that follows,
//! in order. `lib.rs` makes the lock type with `Changes`, so this is the one listener, and
//! the compiler checks it hears everything.

use crate::datatype::KeyEvents;
use crate::keyspace::{session, waiting, watching};
use lock_core::key::KeyRef;
use lock_core::lock::Session;

/// The keyspace, as the lock type's callbacks report to it.
pub struct Changes;

impl KeyEvents for Changes {
    fn changed(key: KeyRef) {
        watching::lock_changed(key);
    }

    fn gone(key: KeyRef) {
        waiting::lock_gone(key);
    }

    fn session_arrived(key: KeyRef, session: Session) {
        session::arrived(key, session);
    }

    fn session_gone(key: KeyRef, session: Session) {
        session::gone(key, session);
    }

    fn shared_arrived(key: KeyRef) {
        waiting::shared_arrived(key);
    }
}
