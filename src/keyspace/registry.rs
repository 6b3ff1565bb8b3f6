//! The running server's session registry (`state::bindings`, in the core crate).

use std::sync::LazyLock;

use crate::ffi::main_thread::MainThread;
use crate::state::bindings::Bindings;

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
