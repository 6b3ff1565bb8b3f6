//! Blocking waits: the only home of the server's blocking-client and timer calls.
//!
//! `LOCK.ACQUIRE ... WAIT` on a busy lock blocks the client with `BlockClient` and puts
//! it in its key's first-come-first-served queue (`queue.rs`). When the lock becomes free
//! (a release, `DEL`/`UNLINK`, expiry, eviction, `RENAME`/`MOVE` away, a flush) the oldest
//! waiter is promised the lock and unblocked; its reply callback, which runs on the main
//! thread before the server reads more commands from anyone, makes the grant: a new
//! fence, its own token, replicated like any grant. Until then the key counts as busy for
//! newcomers. A timer at the lock's deadline hands an expired lock over on time, rather
//! than when the server's background expiry cycle happens to find it.
//!
//! Clients that time out, disconnect, are killed or `CLIENT UNBLOCK`ed leave the queue;
//! a promise to a client that went away before its grant passes to the next waiter, so
//! no lock is ever granted to a client that cannot use it.

use std::cell::RefCell;
use std::os::raw::{c_int, c_void};
use std::ptr;

use redis_module::{Context, NotifyEvent, RedisError, RedisResult, RedisString, RedisValue, raw};

use crate::cluster;
use crate::commands;
use crate::ffi::{self, Key, KeyKind};
use crate::guard;
use crate::queue::{KeyId, Queues, Waiter};
use crate::stats;

thread_local! {
    /// Every waiter of the server. The server calls the module only from its main
    /// thread, so a thread-local is the whole synchronisation needed.
    static QUEUES: RefCell<Queues> = RefCell::new(Queues::default());
    /// The pending timer of each key with waiters: `(timer id, fires at ms)`.
    static TIMERS: RefCell<std::collections::HashMap<KeyId, (u64, i64)>> =
        RefCell::new(std::collections::HashMap::new());
}

fn with_queues<T>(f: impl FnOnce(&mut Queues) -> T) -> T {
    QUEUES.with(|queues| f(&mut queues.borrow_mut()))
}

fn key_id(db: i32, key: &[u8]) -> KeyId {
    (db, key.to_vec())
}

/// Whether a newcomer on `key` must stand back for waiters that came first.
pub fn queued(db: i32, key: &[u8]) -> bool {
    with_queues(|q| q.busy(&key_id(db, key)))
}

/// Clients blocked on `key`.
pub fn count(db: i32, key: &[u8]) -> usize {
    with_queues(|q| q.waiting(&key_id(db, key)))
}

/// Clients blocked on any key.
pub fn total() -> usize {
    with_queues(|q| q.total())
}

/// Blocks the calling client until the lock on `key` is granted to it (with `token`,
/// for `ttl_ms`) or `timeout_ms` passes (`0`: no limit). `expire_at` is the current
/// lock's deadline, if it has one, for the hand-over timer.
pub fn wait(
    ctx: &Context,
    db: i32,
    key: &RedisString,
    token: Vec<u8>,
    ttl_ms: i64,
    timeout_ms: i64,
    expire_at: Option<i64>,
) -> RedisResult {
    // SAFETY: ctx is the live context of a command that may block (the caller checked
    // DENY_BLOCKING); the callbacks match the server's signatures and stay valid for
    // the life of the module.
    let bc = unsafe {
        raw::RedisModule_BlockClient.expect("RedisModule_BlockClient")(
            ctx.get_raw(),
            Some(on_reply),
            Some(on_timeout),
            Some(on_free),
            timeout_ms,
        )
    };
    if bc.is_null() {
        return Err(redis_module::RedisError::Str(
            "ERR the client could not be blocked",
        ));
    }
    // SAFETY: bc was just returned by BlockClient and is live until UnblockClient.
    unsafe {
        raw::RedisModule_SetDisconnectCallback.expect("RedisModule_SetDisconnectCallback")(
            bc,
            Some(on_disconnect),
        )
    };
    let id = key_id(db, key.as_slice());
    with_queues(|q| {
        q.push(Waiter {
            handle: bc as usize,
            key: id.clone(),
            token,
            ttl_ms,
        })
    });
    stats::WAITS.bump();
    if let Some(at) = expire_at {
        arm_timer(ctx, &id, at);
    }
    Ok(RedisValue::NoReply)
}

/// The lock on `key` is free: promise it to the oldest waiter, if any, and unblock it
/// so its reply callback makes the grant.
pub fn lock_freed(db: i32, key: &[u8]) {
    let id = key_id(db, key);
    let Some((waiter, handle)) = with_queues(|q| q.promise_next(&id)) else {
        return;
    };
    let privdata = Box::into_raw(Box::new(waiter)).cast::<c_void>();
    // SAFETY: handle is the address of a blocked client that is still blocked (it is in
    // the queue, and leaves it before any path unblocks it); privdata is freed by
    // on_free, which the server always calls after an unblock with private data.
    unsafe {
        raw::RedisModule_UnblockClient.expect("RedisModule_UnblockClient")(
            handle as *mut raw::RedisModuleBlockedClient,
            privdata,
        )
    };
}

/// Keyspace events from the server: a lock key that disappears frees the lock.
pub fn on_keyspace_event(ctx: &Context, _class: NotifyEvent, event: &str, key: &[u8]) {
    guard::callback((), || {
        let was_lock = stats::take_unlinked_lock(key);
        if event == "expired" && was_lock {
            stats::EXPIRED.bump();
        }
        if matches!(
            event,
            "del" | "expired" | "evicted" | "rename_from" | "move_from"
        ) && !with_queues(|q| q.is_empty())
        {
            lock_freed(ffi::selected_db(ctx), key);
        }
    })
}

/// `FLUSHDB`/`FLUSHALL` and `SWAPDB` change many keys without a keyspace event per key:
/// look again at every key that has waiters.
pub fn recheck_all(ctx: &Context) {
    let keys = with_queues(|q| q.queued_keys());
    for id in keys {
        arm_timer(ctx, &id, ffi::now_ms());
    }
}

/// Looks at `key` again: a free lock goes to the next waiter; a held one gets a timer at
/// its deadline while waiters remain.
fn recheck(ctx: &Context, id: &KeyId) {
    let (db, name) = id;
    if !ffi::select_db(ctx, *db) {
        return;
    }
    let name = ctx.create_string(name.as_slice());
    // Opening the key expires it if its time has passed; the `expired` event then
    // promises the lock, and the check below finds nothing left to do.
    let key = Key::open_read(ctx, &name);
    match key.kind() {
        KeyKind::Empty => {
            drop(key);
            lock_freed(*db, name.as_slice());
        }
        KeyKind::Lock | KeyKind::Other => rearm(ctx, id, key.expire_at()),
    }
}

/// While waiters remain for a held `key`, a timer at its deadline hands it over on time.
fn rearm(ctx: &Context, id: &KeyId, expire_at: Option<i64>) {
    if let Some(at) = expire_at.filter(|_| with_queues(|q| q.busy(id))) {
        arm_timer(ctx, id, at);
    }
}

/// Makes sure a timer fires for `key` no later than `at_ms`.
fn arm_timer(ctx: &Context, id: &KeyId, at_ms: i64) {
    let existing = TIMERS.with(|t| t.borrow().get(id).copied());
    if let Some((timer, fires_at)) = existing {
        if fires_at <= at_ms {
            return;
        }
        stop_timer(ctx, timer);
    }
    let delay = at_ms.saturating_sub(ffi::now_ms()).max(0);
    let data = Box::into_raw(Box::new(id.clone())).cast::<c_void>();
    // SAFETY: ctx is live; on_timer takes back ownership of data when it fires, and
    // stop_timer does when the timer is cancelled.
    let timer = unsafe {
        raw::RedisModule_CreateTimer.expect("RedisModule_CreateTimer")(
            ctx.get_raw(),
            delay,
            Some(on_timer),
            data,
        )
    };
    TIMERS.with(|t| t.borrow_mut().insert(id.clone(), (timer, at_ms)));
}

/// The last waiter of `key` left: its timer has nothing left to do.
fn cancel_idle_timer(ctx: &Context, id: &KeyId) {
    if with_queues(|q| q.busy(id)) {
        return;
    }
    if let Some((timer, _)) = TIMERS.with(|t| t.borrow_mut().remove(id)) {
        stop_timer(ctx, timer);
    }
}

fn stop_timer(ctx: &Context, timer: u64) {
    let mut data: *mut c_void = ptr::null_mut();
    // SAFETY: ctx is live; a timer that already fired is reported as an error and
    // leaves data null.
    let stopped = unsafe {
        raw::RedisModule_StopTimer.expect("RedisModule_StopTimer")(ctx.get_raw(), timer, &mut data)
    };
    if stopped == raw::REDISMODULE_OK as c_int && !data.is_null() {
        // SAFETY: data is the Box<KeyId> given to CreateTimer, not yet taken back.
        drop(unsafe { Box::from_raw(data.cast::<KeyId>()) });
    }
}

extern "C" fn on_timer(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    // SAFETY: data is the Box<KeyId> given to CreateTimer; a timer fires once.
    let id = unsafe { Box::from_raw(data.cast::<KeyId>()) };
    guard::callback((), || {
        TIMERS.with(|t| t.borrow_mut().remove(&*id));
        recheck(&Context::new(ctx), &id);
    })
}

/// Runs in the unblocked waiter's context: make the promised grant and reply.
extern "C" fn on_reply(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    let result = guard::callback(Err(crate::error::internal_panic()), || {
        // SAFETY: ctx is the reply context of a client unblocked with private data.
        let privdata = unsafe {
            raw::RedisModule_GetBlockedClientPrivateData
                .expect("RedisModule_GetBlockedClientPrivateData")(ctx)
        };
        // SAFETY: the private data is the Box<u64> that lock_freed gave; on_free
        // frees it, so it is only read here.
        let waiter_id = unsafe { *privdata.cast::<u64>() };
        let Some(waiter) = with_queues(|q| q.fulfil(waiter_id)) else {
            return Ok(RedisValue::Null);
        };
        if let Some(redirect) = cluster::route(&context, &waiter.key.1).redirect() {
            // The key left this node: send this waiter, then the next, where it went.
            lock_freed(waiter.key.0, &waiter.key.1);
            return Err(RedisError::String(redirect));
        }
        let name = context.create_string(waiter.key.1.as_slice());
        let key = Key::open_write(&context, &name);
        let reply = match key.kind() {
            KeyKind::Empty => commands::grant(&context, &key, waiter.token, waiter.ttl_ms),
            // Written by an admin between the promise and now: the waiter does not get it.
            KeyKind::Lock => Ok(RedisValue::Null),
            KeyKind::Other => Err(crate::error::wrong_type()),
        };
        let expire_at = key.expire_at();
        drop(key);
        rearm(&context, &waiter.key, expire_at);
        reply
    });
    context.reply(result) as c_int
}

/// The timeout passed (or `CLIENT UNBLOCK`): leave the queue, answer nil.
extern "C" fn on_timeout(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    guard::callback((), || {
        // SAFETY: ctx is the timeout context of a blocked client.
        let bc = unsafe {
            raw::RedisModule_GetBlockedClientHandle.expect("RedisModule_GetBlockedClientHandle")(
                ctx,
            )
        };
        let removed = with_queues(|q| q.id_of(bc as usize).and_then(|id| q.remove_queued(id)));
        if let Some(waiter) = removed {
            stats::WAIT_TIMEOUTS.bump();
            cancel_idle_timer(&context, &waiter.key);
            // SAFETY: the waiter was queued, so nothing unblocked it yet; every blocked
            // client must be unblocked once, or its handle leaks.
            unsafe {
                raw::RedisModule_UnblockClient.expect("RedisModule_UnblockClient")(
                    bc,
                    ptr::null_mut(),
                )
            };
        }
    });
    context.reply(Ok(RedisValue::Null)) as c_int
}

/// The client disconnected or was killed while blocked.
extern "C" fn on_disconnect(ctx: *mut raw::RedisModuleCtx, bc: *mut raw::RedisModuleBlockedClient) {
    guard::callback((), || {
        let removed = with_queues(|q| q.id_of(bc as usize).and_then(|id| q.remove_queued(id)));
        if let Some(waiter) = removed {
            cancel_idle_timer(&Context::new(ctx), &waiter.key);
            // SAFETY: the waiter was queued, so nothing unblocked it yet. A promised
            // waiter was unblocked already; on_free passes its promise on.
            unsafe {
                raw::RedisModule_UnblockClient.expect("RedisModule_UnblockClient")(
                    bc,
                    ptr::null_mut(),
                )
            };
        }
    })
}

/// Frees the private data of an unblocked waiter. If its grant was never made (the
/// client went away first), the promise passes to the next waiter.
extern "C" fn on_free(ctx: *mut raw::RedisModuleCtx, privdata: *mut c_void) {
    if privdata.is_null() {
        return;
    }
    // SAFETY: the private data is the Box<u64> that lock_freed gave; freed once, here.
    let waiter_id = unsafe { Box::from_raw(privdata.cast::<u64>()) };
    guard::callback((), || {
        if let Some(id) = with_queues(|q| q.withdraw(*waiter_id)) {
            // This context may have no client to open keys with: look from a timer.
            arm_timer(&Context::new(ctx), &id, ffi::now_ms());
        }
    })
}

/// Server events: flushes and database swaps.
pub extern "C" fn on_server_event(
    ctx: *mut raw::RedisModuleCtx,
    event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    guard::callback((), || {
        let flushed = event.id == raw::REDISMODULE_EVENT_FLUSHDB
            && subevent == raw::REDISMODULE_SUBEVENT_FLUSHDB_END;
        if flushed || event.id == raw::REDISMODULE_EVENT_SWAPDB {
            recheck_all(&Context::new(ctx));
        }
    })
}

/// Subscribes to the server events that free many locks at once.
pub fn subscribe(ctx: &Context) -> bool {
    [
        raw::REDISMODULE_EVENT_FLUSHDB,
        raw::REDISMODULE_EVENT_SWAPDB,
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
