//! The running server's session registry (`lock_core::bindings`, in the core crate).

use std::sync::LazyLock;

use crate::ffi;
use crate::ffi::main_thread::MainThread;
use lock_core::bindings::Bindings;
use lock_core::key::KeyRef;
use lock_core::lock::Session;
use lock_core::stats;

/// The registry of this server, reached from the main thread only: commands, timers,
/// server events (never a type's `free` callback). A static, not a thread-local, because
/// every session-bound acquire reaches it and a thread-local costs a call in a loaded
/// library; no `Mutex`, whose two locked instructions per entry cost more time than the
/// rest of a bind.
static REGISTRY: LazyLock<MainThread<Bindings>> =
    LazyLock::new(|| MainThread::new(Bindings::default()));

/// Runs `f` on this server's registry (never from inside another `with`: that panics).
/// A panic inside `f` is caught at the module's boundary; the registry may then lag
/// behind the keyspace, which every user of it allows for.
pub fn with<T>(f: impl FnOnce(&mut Bindings) -> T) -> T {
    REGISTRY.with(f)
}

/// The lock on `key`, bound as `session`, is about to lose that binding (its holder's
/// token acquires it again, bound anew or not at all). If that ends a grace, it is a
/// reclaim, counted in `session_reclaims`. With `forget` false, other holders of the key
/// stay bound to the same connection and keep their entry and grace.
pub fn unbind(key: KeyRef, session: &Session, forget: bool) {
    let id = key.to_id();
    if forget {
        with(|b| b.forget(&id, session.client));
    }
    if !ffi::client_connected(session.client) {
        stats::SESSION_RECLAIMS.bump();
    }
}
