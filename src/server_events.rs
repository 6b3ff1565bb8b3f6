//! The server events the module follows, read here and passed on to who acts on them:
//! flushes and database swaps (many keys change with no callback per key), role changes
//! (a replica grants and releases nothing itself), the end of loading (the server starts
//! serving its keys) and closed connections (session-bound locks).

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};

use redis_module::{Context, raw};

use crate::ffi;
use crate::guard;
use crate::handoff;
use crate::session;
use crate::slot_import;
use crate::stats;

/// Subscribes to every event below; false if the server refused one. The client-change
/// event is subscribed only while a session-bound lock waits on a connection
/// (`ffi::watch_connections`, which `session` drives).
pub fn init(ctx: &Context) -> bool {
    ffi::on_client_change(Some(on_server_event));
    [
        raw::REDISMODULE_EVENT_FLUSHDB,
        raw::REDISMODULE_EVENT_SWAPDB,
        raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
        raw::REDISMODULE_EVENT_LOADING,
    ]
    .into_iter()
    .all(|id| {
        // SAFETY: ctx is the load context; the callback lives as long as the module.
        let status = unsafe {
            raw::RedisModule_SubscribeToServerEvent.expect("SubscribeToServerEvent")(
                ctx.get_raw(),
                raw::RedisModuleEvent { id, dataver: 1 },
                Some(on_server_event),
            )
        };
        status == raw::REDISMODULE_OK as c_int
    })
}

/// Subscribes to the generic keyspace events, of which the sessions follow `rename_to`
/// and `move_to` (see `Server::key_moves_can_be_followed` for where this is safe).
pub fn follow_key_moves(ctx: &Context) -> bool {
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

/// Follows Valkey 9's atomic slot migrations (see `slot_import`); false if the server
/// refused the subscription.
pub fn follow_slot_migrations(ctx: &Context) -> bool {
    ffi::follow_slot_migrations(ctx, on_slot_migration)
}

fn on_slot_migration(ctx: &Context, event: &ffi::SlotMigrationEvent) {
    match event.what {
        ffi::SlotMigration::ImportStarted => slot_import::started(&event.job, event.ranges.clone()),
        ffi::SlotMigration::ImportCompleted => {
            // The slots are this node's now: the graces of their session-bound locks
            // start, and their shared holders' expiries are watched.
            slot_import::ended(&event.job);
            session::serving(ctx);
            handoff::serving(ctx);
        }
        // The server deletes what the import brought; nothing of it was acted on.
        ffi::SlotMigration::ImportAborted => slot_import::ended(&event.job),
        // The server trims the slots here, which frees their locks one by one (and so
        // redirects their waiters); every queue is looked at once more all the same, in
        // case a server trims without the type's unlink callback.
        ffi::SlotMigration::ExportCompleted => handoff::many_keys_changed(),
        ffi::SlotMigration::ExportStarted | ffi::SlotMigration::ExportAborted => {}
    }
}

extern "C" fn on_generic_event(
    ctx: *mut raw::RedisModuleCtx,
    _class: c_int,
    event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    // SAFETY: the server passes a NUL-terminated event name and the key's name, both live
    // for this callback and only read here.
    let (event, key) = unsafe {
        (
            CStr::from_ptr(event).to_bytes(),
            redis_module::RedisString::string_as_slice(key),
        )
    };
    session::key_moved(&Context::new(ctx), event, key);
    raw::REDISMODULE_OK as c_int
}

extern "C" fn on_server_event(
    ctx: *mut raw::RedisModuleCtx,
    event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    guard::callback((), || {
        let ctx = Context::new(ctx);
        match event.id {
            raw::REDISMODULE_EVENT_CLIENT_CHANGE
                if subevent == raw::REDISMODULE_SUBEVENT_CLIENT_CHANGE_DISCONNECTED =>
            {
                // SAFETY: the data of a client-change event is a client info (version 1,
                // whose leading fields every version shares), live for this callback.
                let client = unsafe { (*data.cast::<raw::RedisModuleClientInfo>()).id };
                session::disconnected(&ctx, client);
            }
            raw::REDISMODULE_EVENT_FLUSHDB if subevent == raw::REDISMODULE_SUBEVENT_FLUSHDB_END => {
                // SAFETY: the data of a flush event is a flush info, live for this callback.
                let db = unsafe { (*data.cast::<raw::RedisModuleFlushInfo>()).dbnum };
                session::flushed(&ctx, (db >= 0).then_some(db));
                handoff::many_keys_changed();
            }
            raw::REDISMODULE_EVENT_SWAPDB => {
                // SAFETY: the data of a swapdb event is a swapdb info, live for this callback.
                let info = unsafe { *data.cast::<raw::RedisModuleSwapDbInfo>() };
                session::swapped(info.dbnum_first, info.dbnum_second);
                handoff::many_keys_changed();
            }
            raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED => {
                if subevent == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_REPLICA {
                    session::demoted(&ctx);
                    handoff::demoted(&ctx);
                } else {
                    session::serving(&ctx);
                    handoff::serving(&ctx);
                }
            }
            raw::REDISMODULE_EVENT_LOADING
                if subevent == raw::REDISMODULE_SUBEVENT_LOADING_ENDED =>
            {
                session::serving(&ctx);
                handoff::serving(&ctx);
            }
            _ => {}
        }
    })
}

/// The `expired` keyspace event: counts held locks that expired (the unlink callback,
/// just before, noted that the key was a lock).
pub fn on_keyspace_event(
    _ctx: &redis_module::Context,
    _class: redis_module::NotifyEvent,
    event: &str,
    key: &[u8],
) {
    guard::callback((), || {
        if event == "expired" && stats::take_unlinked_lock(key) {
            stats::EXPIRED.bump();
        }
    })
}
