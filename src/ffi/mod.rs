//! The thin unsafe layer: server calls the binding has no safe wrapper for, and the only
//! home of `unsafe` in the module. One idea per file: keys (`keys.rs`), replication and
//! events (`replicate.rs`), replies (`reply.rs`), timers and jobs (`timers.rs`), blocked
//! clients (`blocked.rs`), the data type's callbacks (`value_type.rs`) and its values'
//! memory (`cell.rs`, `alloc.rs`), command entries and declarations (`command.rs`,
//! `command_info.rs`), server events (`server_events.rs`), the panic boundary (`guard.rs`).
//! This file has the server's small queries: clients, databases, the clock, the role.

use std::os::raw::{c_int, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::{Context, raw};

pub mod alloc;
pub mod blocked;
pub mod call;
pub mod cell;
pub mod command;
pub mod command_info;
pub mod config;
pub mod guard;
pub mod info;
pub mod keys;
pub mod main_thread;
pub mod replicate;
pub mod replication;
pub mod reply;
pub mod server_events;
pub mod timers;
pub mod value_type;

pub use keys::{Key, KeyKind, register_value_type};
pub use replicate::*;
pub use replication::{replication, request_acks, watch_before_sleep};
pub use reply::*;
pub use timers::*;

/// Writes `message` to the server's log.
pub fn log_warning(message: &str) {
    raw::redis_log(std::ptr::null_mut(), message);
}

/// Unix time in ms as the server sees it: the clock its expiry machinery uses.
pub fn now_ms() -> i64 {
    // SAFETY: RedisModule_Milliseconds takes no arguments and only reads the clock; the
    // API table is filled by RedisModule_Init before any command can run.
    unsafe { raw::RedisModule_Milliseconds.expect("RedisModule_Milliseconds")() }
}

/// The wall clock in unix microseconds, where a hold ends: the server's own time of the
/// current command or cycle where it keeps one for modules (Redis 7.2 and later, Valkey),
/// one read of a field; else `now_ms`, to the millisecond. Callable from any thread (the
/// server may free values on its lazy-free thread).
pub fn now_us() -> i64 {
    // SAFETY: reading a function pointer of the API table filled at load time; the
    // function takes no arguments and only reads the server's cached time.
    match unsafe { raw::RedisModule_CachedMicroseconds } {
        // SAFETY: as above: the server's function, which only reads a field.
        Some(cached) => unsafe { cached() },
        None => now_ms().saturating_mul(1000),
    }
}

/// A monotonic clock in microseconds since the module loaded (a wait's length).
pub fn monotonic_us() -> u64 {
    static START: std::sync::LazyLock<std::time::Instant> =
        std::sync::LazyLock::new(std::time::Instant::now);
    START.elapsed().as_micros() as u64
}

/// Whether the server holds writes back now (`CLIENT PAUSE`, a failover under way).
/// Then a key past its deadline counts as expired but is not deleted, so nothing may be
/// written in its place.
pub fn writes_paused() -> bool {
    // SAFETY: takes no arguments and only reads the server's pause state; the API table
    // is filled by RedisModule_Init before any callback can run.
    unsafe { raw::RedisModule_AvoidReplicaTraffic.expect("RedisModule_AvoidReplicaTraffic")() != 0 }
}

/// The id of the client of `ctx` (the one that sent the command, or ran `EXEC`); 0 when
/// the context has none.
pub fn client_id(ctx: &Context) -> u64 {
    // SAFETY: ctx is the live context of the current command or callback.
    unsafe { raw::RedisModule_GetClientId.expect("RedisModule_GetClientId")(ctx.get_raw()) }
}

/// Whether a client with this id is connected now (0 never is). Ids are never reused
/// while the server runs.
pub fn client_connected(id: u64) -> bool {
    if id == 0 {
        return false;
    }
    // SAFETY: a NULL info asks only whether the client exists; nothing is written.
    let found = unsafe {
        raw::RedisModule_GetClientInfoById.expect("RedisModule_GetClientInfoById")(
            std::ptr::null_mut(),
            id,
        )
    };
    found == raw::REDISMODULE_OK as c_int
}

/// Whether the server is loading its data now (an RDB file, the AOF, a full sync).
pub fn is_loading() -> bool {
    // SAFETY: a NULL context asks for the server-wide flags only.
    let flags =
        unsafe { raw::RedisModule_GetContextFlags.expect("GetContextFlags")(std::ptr::null_mut()) };
    flags & raw::REDISMODULE_CTX_FLAGS_LOADING as c_int != 0
}

/// Whether the client of `ctx` is connected through a unix socket or from the loopback
/// address, as the server decides for `enable-debug-command local`.
pub fn client_is_local(ctx: &Context) -> bool {
    // SAFETY: ctx is the live context of the current command.
    let id =
        unsafe { raw::RedisModule_GetClientId.expect("RedisModule_GetClientId")(ctx.get_raw()) };
    // SAFETY: the client info is plain data; all zeroes with its version set is what the
    // server expects to fill.
    let mut info: raw::RedisModuleClientInfo = unsafe { std::mem::zeroed() };
    info.version = raw::REDISMODULE_CLIENTINFO_VERSION.into();
    // SAFETY: info is a valid, writable client info of the version it names.
    let found = unsafe {
        raw::RedisModule_GetClientInfoById.expect("RedisModule_GetClientInfoById")(
            (&raw mut info).cast::<c_void>(),
            id,
        )
    };
    if found != raw::REDISMODULE_OK as c_int {
        return false;
    }
    if info.flags & u64::from(raw::REDISMODULE_CLIENTINFO_FLAG_UNIXSOCKET) != 0 {
        return true;
    }
    let addr: Vec<u8> = info
        .addr
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    addr == b"127.0.0.1" || addr == b"::1"
}

/// The database the client of `ctx` has selected.
pub fn selected_db(ctx: &Context) -> i32 {
    // SAFETY: ctx is the live context of the current command or callback.
    unsafe { raw::RedisModule_GetSelectedDb.expect("RedisModule_GetSelectedDb")(ctx.get_raw()) }
}

/// Selects database `db` for the keys `ctx` opens next (timer callbacks). False if the
/// database does not exist.
pub fn select_db(ctx: &Context, db: i32) -> bool {
    // SAFETY: ctx is a live context with a client (a timer's temporary client).
    let status =
        unsafe { raw::RedisModule_SelectDb.expect("RedisModule_SelectDb")(ctx.get_raw(), db) };
    status == raw::REDISMODULE_OK as c_int
}

/// Hides argument `index` of the current command from `SLOWLOG` and `MONITOR`.
pub fn redact(ctx: &Context, index: usize) {
    // The function exists from 7.0 on; on an older server there is nothing to call.
    if let (Some(redact), Ok(pos)) = (
        // SAFETY: reading a function pointer from the API table filled at load time.
        unsafe { raw::RedisModule_RedactClientCommandArgument },
        c_int::try_from(index),
    ) {
        // SAFETY: ctx is the live context of the current command and pos < argc.
        unsafe { redact(ctx.get_raw(), pos) };
    }
}

/// The callback for the client-change event (set once, at load).
static CLIENT_CHANGE: OnceLock<raw::RedisModuleEventCallback> = OnceLock::new();
/// Whether that callback is subscribed now. (A plain static, not a thread-local: the
/// server calls the module on its main thread only, and this is read on every
/// session-bound acquire, where a thread-local costs a call in a loaded library.)
static WATCHING: AtomicBool = AtomicBool::new(false);

/// Sets the callback that `watch_connections` subscribes to the client-change event.
pub fn on_client_change(callback: raw::RedisModuleEventCallback) {
    if CLIENT_CHANGE.set(callback).is_err() {
        detached().log_warning("lock: the client-change callback was set twice");
    }
}

/// Subscribes the client-change callback (`on`) or unsubscribes it. The server builds a
/// client's whole description, address text included, for every subscriber on every
/// connect and close: a third more work for a short connection, so the module listens
/// only while it has something to hear. Never to be turned off from inside that event's
/// own callback (the server would free the listener it is running). A refusal is
/// logged: session-bound locks then last until their TTL.
pub fn watch_connections(on: bool) {
    if WATCHING.load(Ordering::Relaxed) == on {
        return;
    }
    let Some(&callback) = CLIENT_CHANGE.get() else {
        return;
    };
    // SAFETY: the detached context belongs to this module; the callback is a plain
    // function that lives as long as the module; None unsubscribes.
    let status = unsafe {
        raw::RedisModule_SubscribeToServerEvent.expect("SubscribeToServerEvent")(
            detached().get_raw(),
            raw::RedisModuleEvent {
                id: raw::REDISMODULE_EVENT_CLIENT_CHANGE,
                dataver: 1,
            },
            if on { callback } else { None },
        )
    };
    if status == raw::REDISMODULE_OK as c_int {
        WATCHING.store(on, Ordering::Relaxed);
    } else {
        detached().log_warning(
            "lock: the server refused the client-change event; a session-bound lock \
             lasts until its TTL",
        );
    }
}

/// Valkey 9's `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION` (its `valkeymodule.h`),
/// which the binding's header predates.
pub const OPTION_HANDLE_ATOMIC_SLOT_MIGRATION: c_int = 1 << 5;

/// Declares the module's options: what it handles itself (`ModuleOptions` bits, and
/// the server-specific ones above where the server defines them).
pub fn set_module_options(ctx: &Context, options: c_int) {
    // SAFETY: ctx is the load context; the call only records the bits.
    unsafe { raw::RedisModule_SetModuleOptions.expect("SetModuleOptions")(ctx.get_raw(), options) };
}

/// Whether the server is a replica now: it follows its master, and grants nothing itself.
pub fn is_replica(ctx: &Context) -> bool {
    ctx.get_flags().contains(redis_module::ContextFlags::SLAVE)
}

/// The fields `redis_version` and `valkey_version` of `INFO server` (the second only on
/// Valkey).
pub fn server_versions(ctx: &Context) -> (Option<String>, Option<String>) {
    let Some(info) = info::InfoSection::read(ctx, c"server") else {
        return (None, None);
    };
    (info.field("redis_version"), info.field("valkey_version"))
}

/// The field `total_commands_processed` of `INFO stats`: it only grows, except when
/// `CONFIG RESETSTAT` zeroes it.
pub fn commands_processed(ctx: &Context) -> Option<u64> {
    info::InfoSection::read(ctx, c"stats")?
        .field("total_commands_processed")?
        .parse()
        .ok()
}

/// The field `mem_allocator` of `INFO memory` (`jemalloc-5.3.0`, `libc`), empty if absent.
pub fn server_allocator(ctx: &Context) -> String {
    info::InfoSection::read(ctx, c"memory")
        .and_then(|info| info.field("mem_allocator"))
        .unwrap_or_default()
}
