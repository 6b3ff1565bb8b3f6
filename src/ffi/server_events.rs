//! The server events the module follows, as the server sends them: subscribed here,
//! their raw data read here, and handed on as plain Rust values to the handler the
//! module's `server_events` registers (which acts on them, with no `unsafe`).

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::OnceLock;

use redis_module::{Context, raw};

/// What the server tells the module of itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerEvent {
    /// Connection `client` closed.
    ClientClosed(u64),
    /// A flush ended: of one database, or of all (`None`).
    Flushed(Option<i32>),
    /// Two databases swapped their contents.
    Swapped(i32, i32),
    /// The server follows a master now.
    NowReplica,
    /// The server is a master now (promoted).
    NowMaster,
    /// Loading (an RDB file, the AOF, a full sync) started: what it replaces or brings
    /// goes on as it was, whatever the server frees meanwhile.
    LoadingStarted,
    /// Loading (an RDB file, the AOF, a full sync) ended: the server serves its keys.
    LoadingEnded,
    /// A replica of this server came online or went away.
    ReplicaChanged,
}

/// Who hears of server events (set once, at load).
static HANDLER: OnceLock<fn(&Context, ServerEvent)> = OnceLock::new();

/// A handler of generic keyspace events: the event's name and the key.
pub type KeyEventHandler = fn(&Context, &[u8], &[u8]);

/// Who hears of generic keyspace events (set once, at load).
static KEY_HANDLER: OnceLock<KeyEventHandler> = OnceLock::new();

/// Subscribes `handler` to flushes, database swaps, role changes, the end of loading
/// and replicas coming and going, and makes it the client-change handler that `watch_connections` turns on
/// and off; false if the server refused a subscription.
pub fn follow(ctx: &Context, handler: fn(&Context, ServerEvent)) -> bool {
    let _ = HANDLER.set(handler);
    super::on_client_change(Some(on_server_event));
    [
        raw::REDISMODULE_EVENT_FLUSHDB,
        raw::REDISMODULE_EVENT_SWAPDB,
        raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
        raw::REDISMODULE_EVENT_LOADING,
        raw::REDISMODULE_EVENT_REPLICA_CHANGE,
    ]
    .into_iter()
    .all(|id| subscribe(ctx, id, on_server_event))
}

/// Subscribes to server event `id` with `callback`.
fn subscribe(
    ctx: &Context,
    id: u64,
    callback: unsafe extern "C" fn(
        *mut raw::RedisModuleCtx,
        raw::RedisModuleEvent,
        u64,
        *mut c_void,
    ),
) -> bool {
    // SAFETY: ctx is the load context; the callback lives as long as the module.
    let status = unsafe {
        raw::RedisModule_SubscribeToServerEvent.expect("SubscribeToServerEvent")(
            ctx.get_raw(),
            raw::RedisModuleEvent { id, dataver: 1 },
            Some(callback),
        )
    };
    status == raw::REDISMODULE_OK as c_int
}

extern "C" fn on_server_event(
    ctx: *mut raw::RedisModuleCtx,
    event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    crate::ffi::guard::callback((), || {
        let what = match event.id {
            raw::REDISMODULE_EVENT_CLIENT_CHANGE
                if subevent == raw::REDISMODULE_SUBEVENT_CLIENT_CHANGE_DISCONNECTED =>
            {
                // SAFETY: the data of a client-change event is a client info (version 1,
                // whose leading fields every version shares), live for this callback.
                ServerEvent::ClientClosed(unsafe {
                    (*data.cast::<raw::RedisModuleClientInfo>()).id
                })
            }
            raw::REDISMODULE_EVENT_FLUSHDB if subevent == raw::REDISMODULE_SUBEVENT_FLUSHDB_END => {
                // SAFETY: the data of a flush event is a flush info, live for this callback.
                let db = unsafe { (*data.cast::<raw::RedisModuleFlushInfo>()).dbnum };
                ServerEvent::Flushed((db >= 0).then_some(db))
            }
            raw::REDISMODULE_EVENT_SWAPDB => {
                // SAFETY: the data of a swapdb event is a swapdb info, live for this callback.
                let info = unsafe { *data.cast::<raw::RedisModuleSwapDbInfo>() };
                ServerEvent::Swapped(info.dbnum_first, info.dbnum_second)
            }
            raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED
                if subevent == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_REPLICA =>
            {
                ServerEvent::NowReplica
            }
            raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED => ServerEvent::NowMaster,
            raw::REDISMODULE_EVENT_LOADING
                if subevent == raw::REDISMODULE_SUBEVENT_LOADING_ENDED =>
            {
                ServerEvent::LoadingEnded
            }
            raw::REDISMODULE_EVENT_LOADING
                if subevent == raw::REDISMODULE_SUBEVENT_LOADING_RDB_START
                    || subevent == raw::REDISMODULE_SUBEVENT_LOADING_AOF_START
                    || subevent == raw::REDISMODULE_SUBEVENT_LOADING_REPL_START =>
            {
                ServerEvent::LoadingStarted
            }
            raw::REDISMODULE_EVENT_REPLICA_CHANGE => ServerEvent::ReplicaChanged,
            _ => return,
        };
        if let Some(handler) = HANDLER.get() {
            handler(&Context::new(ctx), what);
        }
    })
}

/// Subscribes `handler` to the generic keyspace events (`rename_to`, `move_to`, ...);
/// false if the server refused.
pub fn follow_generic_key_events(ctx: &Context, handler: KeyEventHandler) -> bool {
    let _ = KEY_HANDLER.set(handler);
    // SAFETY: ctx is the load context; the callback lives as long as the module.
    let status = unsafe {
        raw::RedisModule_SubscribeToKeyspaceEvents.expect("SubscribeToKeyspaceEvents")(
            ctx.get_raw(),
            raw::REDISMODULE_NOTIFY_GENERIC,
            Some(on_generic_event),
        )
    };
    status == raw::REDISMODULE_OK as c_int
}

extern "C" fn on_generic_event(
    ctx: *mut raw::RedisModuleCtx,
    _class: c_int,
    event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    crate::ffi::guard::callback((), || {
        // SAFETY: the server passes a NUL-terminated event name and the key's name, both
        // live for this callback and only read here.
        let (event, key) = unsafe {
            (
                CStr::from_ptr(event).to_bytes(),
                redis_module::RedisString::string_as_slice(key),
            )
        };
        if let Some(handler) = KEY_HANDLER.get() {
            handler(&Context::new(ctx), event, key);
        }
    });
    raw::REDISMODULE_OK as c_int
}

/// What an atomic slot migration event (Valkey 9's `CLUSTER MIGRATESLOTS`) says
/// happened, on the importing or the exporting side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotMigration {
    /// This node started importing the slots.
    ImportStarted,
    /// This node gave up an import (cancelled, failed): the server deletes what it got.
    ImportAborted,
    /// This node owns the imported slots now.
    ImportCompleted,
    /// This node started exporting the slots.
    ExportStarted,
    /// An export was given up: this node keeps the slots.
    ExportAborted,
    /// The target owns the exported slots now; the server trims them here.
    ExportCompleted,
}

/// One atomic slot migration event: what happened, the job's name and its slot ranges
/// (inclusive).
#[derive(Debug, Clone)]
pub struct SlotMigrationEvent {
    /// What happened.
    pub what: SlotMigration,
    /// The job's name, unique per migration.
    pub job: Vec<u8>,
    /// The slot ranges the job moves.
    pub ranges: Vec<(u16, u16)>,
}

/// Who hears of atomic slot migrations (set once, at load).
static SLOT_MIGRATION_HANDLER: OnceLock<fn(&Context, &SlotMigrationEvent)> = OnceLock::new();

/// `VALKEYMODULE_EVENT_ATOMIC_SLOT_MIGRATION`, which the binding's header predates.
const EVENT_ATOMIC_SLOT_MIGRATION: u64 = 19;

/// `ValkeyModuleSlotRange` (valkeymodule.h).
#[repr(C)]
struct SlotRange {
    start: c_int,
    end: c_int,
}

/// `ValkeyModuleAtomicSlotMigrationInfoV1` (valkeymodule.h).
#[repr(C)]
struct SlotMigrationInfo {
    version: u64,
    job_name: [std::os::raw::c_char; 41],
    slot_ranges: *const SlotRange,
    num_slot_ranges: u32,
}

/// Subscribes `handler` to the server's atomic slot migration events; false if the
/// server refused (a server without them).
pub fn follow_slot_migrations(ctx: &Context, handler: fn(&Context, &SlotMigrationEvent)) -> bool {
    let _ = SLOT_MIGRATION_HANDLER.set(handler);
    subscribe(ctx, EVENT_ATOMIC_SLOT_MIGRATION, on_slot_migration)
}

extern "C" fn on_slot_migration(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    crate::ffi::guard::callback((), || {
        let what = match subevent {
            0 => SlotMigration::ImportStarted,
            1 => SlotMigration::ExportStarted,
            2 => SlotMigration::ImportAborted,
            3 => SlotMigration::ExportAborted,
            4 => SlotMigration::ImportCompleted,
            5 => SlotMigration::ExportCompleted,
            _ => return,
        };
        if data.is_null() {
            return;
        }
        // SAFETY: the data of this event is a migration info (version 1), live for this
        // callback; its name is NUL-terminated within the array, and its ranges are
        // `num_slot_ranges` entries the server owns. Everything is copied here.
        let (job, ranges) = unsafe {
            let info = &*data.cast::<SlotMigrationInfo>();
            let job = CStr::from_ptr(info.job_name.as_ptr()).to_bytes().to_vec();
            let ranges = if info.slot_ranges.is_null() {
                &[][..]
            } else {
                std::slice::from_raw_parts(info.slot_ranges, info.num_slot_ranges as usize)
            };
            let ranges = ranges
                .iter()
                .filter_map(|r| Some((u16::try_from(r.start).ok()?, u16::try_from(r.end).ok()?)))
                .collect();
            (job, ranges)
        };
        if let Some(handler) = SLOT_MIGRATION_HANDLER.get() {
            handler(
                &Context::new(ctx),
                &SlotMigrationEvent { what, job, ranges },
            );
        }
    })
}
