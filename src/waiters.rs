//! Blocking waits: the only home of the server's blocking-client and timer calls.
//!
//! `LOCK.ACQUIRE ... WAIT` on a busy lock blocks the client with `BlockClient` and puts
//! it in its key's first-come-first-served queue (`queue.rs`). When the lock is freed,
//! the oldest waiter is granted it at once, inside the same command: the module unblocks
//! that client with `CLIENT UNBLOCK`, which runs the blocked client's timeout callback
//! synchronously, in that client's context; the callback sees that the client is being
//! granted, makes the grant (a new fence, its own token, replicated like any grant) and
//! replies `[token, fence]`. So the lock goes from the old holder to the waiter with no
//! moment in between, and a waiter is either queued or answered, never half-way.
//!
//! A release frees the lock inside a command, where the grant can be made on the spot.
//! Deletion, expiry, eviction, `RENAME`/`MOVE` away reach the module through the type's
//! unlink callback (which runs for lock keys only), flushes and `SWAPDB` through server
//! events; the server forbids writes there, so those grants are made from a timer that
//! fires as soon as the command or cycle is over (newcomers find the queue busy in
//! between). A timer at the lock's deadline hands an expiring lock over on time, rather
//! than when the background expiry cycle finds it.
//!
//! Waiters that time out, disconnect, are killed or `CLIENT UNBLOCK`ed by someone else
//! leave the queue from their timeout or disconnect callback.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::os::raw::{c_int, c_void};
use std::ptr;

use redis_module::{Context, NotifyEvent, RedisError, RedisResult, RedisString, RedisValue, raw};

use crate::cluster;
use crate::commands;
use crate::error;
use crate::ffi::{self, Key, KeyKind};
use crate::guard;
use crate::queue::{KeyId, Queues, Waiter};
use crate::stats;

/// How often a key with waiters is looked at while it is held, besides at its deadline:
/// an admin's `PEXPIRE`/`EXPIRE` that moves the deadline earlier, or a key of another
/// type in the lock's place, reach the module through no callback.
const RECHECK_MS: i64 = 100;

/// How soon a key is looked at again while the server holds writes back (`CLIENT
/// PAUSE`, a failover): then a key past its deadline counts as gone but stays in the
/// keyspace, and a grant would write over it.
const PAUSED_RETRY_MS: i64 = 10;

/// How the attempt to grant a key's oldest waiter ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// The waiter was not reached (not blocked any more): try the next one.
    NotReached,
    /// The waiter holds the lock now.
    Granted,
    /// The key lives on another cluster node now: the waiter was redirected there.
    Redirected,
    /// The key is taken (written by someone else meanwhile): waiters keep waiting.
    Taken,
}

thread_local! {
    /// Every waiter of the server. The server calls the module only from its main
    /// thread, so a thread-local is all the synchronisation needed.
    static QUEUES: RefCell<Queues> = RefCell::new(Queues::default());
    /// The pending timer of each key with waiters: `(timer id, fires at ms)`.
    static TIMERS: RefCell<HashMap<KeyId, (u64, i64)>> = RefCell::new(HashMap::new());
    /// The waiter being granted by the `CLIENT UNBLOCK` under way, and how it ended.
    static GRANTING: Cell<Option<(u64, Outcome)>> = const { Cell::new(None) };
    /// Set while a release deletes its key: its grant is made on the spot.
    static RELEASING: Cell<bool> = const { Cell::new(false) };
    /// A context that outlives every callback, for timers created outside one.
    static DETACHED: Cell<*mut raw::RedisModuleCtx> = const { Cell::new(ptr::null_mut()) };
}

fn with_queues<T>(f: impl FnOnce(&mut Queues) -> T) -> T {
    QUEUES.with(|queues| f(&mut queues.borrow_mut()))
}

fn key_id(db: i32, key: &[u8]) -> KeyId {
    (db, key.to_vec())
}

/// Whether a newcomer on `key` must stand back for waiters that came first. (The
/// common case, nobody waiting anywhere, costs no allocation.)
pub fn queued(db: i32, key: &[u8]) -> bool {
    with_queues(|q| !q.is_empty() && q.busy(&key_id(db, key)))
}

/// Clients blocked on `key`.
pub fn count(db: i32, key: &[u8]) -> usize {
    with_queues(|q| {
        if q.is_empty() {
            0
        } else {
            q.waiting(&key_id(db, key))
        }
    })
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
    // DENY_BLOCKING); the callbacks match the server's signatures and live as long as
    // the module.
    let bc = unsafe {
        raw::RedisModule_BlockClient.expect("RedisModule_BlockClient")(
            ctx.get_raw(),
            Some(on_reply),
            Some(on_timeout),
            None,
            timeout_ms,
        )
    };
    if bc.is_null() {
        return Err(RedisError::Str("ERR the client could not be blocked"));
    }
    // SAFETY: bc was just returned by BlockClient and is live until UnblockClient.
    unsafe {
        raw::RedisModule_SetDisconnectCallback.expect("RedisModule_SetDisconnectCallback")(
            bc,
            Some(on_disconnect),
        )
    };
    // SAFETY: ctx is the live context of the calling client.
    let client_id =
        unsafe { raw::RedisModule_GetClientId.expect("RedisModule_GetClientId")(ctx.get_raw()) };
    let id = key_id(db, key.as_slice());
    let wake_timer = (timeout_ms > 0).then(|| wake_at_deadline(ctx, timeout_ms));
    with_queues(|q| {
        q.push(Waiter {
            handle: bc as usize,
            client_id,
            key: id.clone(),
            token,
            wake_timer,
            ttl_ms,
        })
    });
    stats::WAITS.bump();
    if let Some(at) = expire_at {
        arm_timer(ctx, &id, at);
    }
    Ok(RedisValue::NoReply)
}

/// The server answers a blocked client whose timeout has passed the next time its event
/// loop wakes, which with nothing else to do is its next cron tick (up to 100 ms at the
/// default `hz 10`). A timer just past the deadline wakes it on time; it has nothing
/// else to do.
fn wake_at_deadline(ctx: &Context, timeout_ms: i64) -> u64 {
    // SAFETY: ctx is live; the callback ignores its data, which is null.
    unsafe {
        raw::RedisModule_CreateTimer.expect("RedisModule_CreateTimer")(
            ctx.get_raw(),
            timeout_ms.saturating_add(1),
            Some(on_wake),
            ptr::null_mut(),
        )
    }
}

extern "C" fn on_wake(_ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {}

/// A waiter left its queue (granted, timed out, gone): its wake-up timer, if it has not
/// fired, is not needed any more.
fn left(ctx: &Context, waiter: &Waiter) {
    if let Some(timer) = waiter.wake_timer {
        let mut data: *mut c_void = ptr::null_mut();
        // SAFETY: ctx is live; a timer that already fired is reported as an error; the
        // data is null either way, nothing to free.
        unsafe {
            raw::RedisModule_StopTimer.expect("RedisModule_StopTimer")(
                ctx.get_raw(),
                timer,
                &mut data,
            )
        };
    }
}

/// The lock on `key` was given a new deadline (`LOCK.EXTEND`, a renewing acquire): if
/// clients wait for it, the hand-over timer must not fire later than that.
pub fn deadline_moved(ctx: &Context, db: i32, key: &[u8], expire_at: Option<i64>) {
    if with_queues(|q| q.is_empty()) {
        return;
    }
    rearm(ctx, &key_id(db, key), expire_at);
}

/// The lock on `key` is free: grant it to the oldest waiter that can take it. Runs
/// where the server allows writes (a command, a timer).
pub fn grant_next(ctx: &Context, db: i32, key: &[u8]) {
    let id = key_id(db, key);
    while let Some((waiter, client_id)) =
        with_queues(|q| q.head(&id).map(|(w, h)| (w, h.client_id)))
    {
        GRANTING.with(|g| g.set(Some((waiter, Outcome::NotReached))));
        // Runs on_timeout for the waiter, synchronously, in its own context.
        let unblocked = unblock_for_grant(ctx, client_id);
        let outcome = GRANTING
            .with(|g| g.take())
            .map_or(Outcome::NotReached, |(_, o)| o);
        match outcome {
            Outcome::Granted | Outcome::Taken => return,
            Outcome::Redirected => {}
            Outcome::NotReached => {
                // Not blocked any more (never expected): drop it so the queue moves on.
                ctx.log_warning(&format!(
                    "lock: waiter client {client_id} could not be unblocked (CLIENT UNBLOCK: {unblocked})"
                ));
                if let Some(gone) = with_queues(|q| q.remove(waiter)) {
                    left(ctx, &gone);
                }
            }
        }
    }
}

/// `CLIENT UNBLOCK client-id`, which runs the client's timeout callback right away.
/// Returns the command's integer reply (1: unblocked).
///
/// Called with `!AR`: `!` keeps replication on for what the callback does (the grant's
/// `LOCK._SET`; without it the server drops effects nested in a module's call), while
/// `A` and `R` keep `CLIENT UNBLOCK` itself out of the AOF and off the replicas, where a
/// client id means nothing.
fn unblock_for_grant(ctx: &Context, client_id: u64) -> i64 {
    let id = std::ffi::CString::new(client_id.to_string()).expect("digits");
    // SAFETY: ctx is live and allows writes (a command or a timer); the format names
    // flags `!AR` and two C strings, and both strings outlive the call; the reply is
    // freed before returning.
    unsafe {
        let reply = raw::RedisModule_Call.expect("RedisModule_Call")(
            ctx.get_raw(),
            c"CLIENT".as_ptr(),
            c"!ARcc".as_ptr(),
            c"UNBLOCK".as_ptr(),
            id.as_ptr(),
        );
        if reply.is_null() {
            return 0;
        }
        let unblocked = raw::RedisModule_CallReplyInteger.expect("CallReplyInteger")(reply);
        raw::RedisModule_FreeCallReply.expect("FreeCallReply")(reply);
        unblocked
    }
}

/// A lock key left the keyspace (the type's unlink callback): if clients wait for it,
/// grant it from a timer as soon as the command or cycle that removed it is over (the
/// server forbids writes where it reports removals). A release grants on the spot, so
/// its own deletion schedules nothing.
pub fn lock_removed(db: i32, key: &[u8]) {
    if RELEASING.with(Cell::get) || with_queues(|q| q.is_empty()) {
        return;
    }
    let id = key_id(db, key);
    if with_queues(|q| q.busy(&id)) {
        arm_timer(&detached(), &id, ffi::now_ms());
    }
}

/// Runs `delete`, a release's removal of its lock key: the release grants the next
/// waiter itself, right after, so nothing is scheduled for it.
pub fn releasing<T>(delete: impl FnOnce() -> T) -> T {
    RELEASING.with(|r| r.set(true));
    let result = delete();
    RELEASING.with(|r| r.set(false));
    result
}

/// Whether the lock key being unlinked now is a release's (never an expiry).
pub fn is_releasing() -> bool {
    RELEASING.with(Cell::get)
}

/// The `expired` keyspace event: counts held locks that expired (the unlink callback,
/// just before, noted that the key was a lock).
pub fn on_keyspace_event(_ctx: &Context, _class: NotifyEvent, event: &str, key: &[u8]) {
    guard::callback((), || {
        if event == "expired" && stats::take_unlinked_lock(key) {
            stats::EXPIRED.bump();
        }
    })
}

/// Runs `task` from a timer as soon as the current command or cycle is over.
pub fn after_this_command(task: fn()) {
    // SAFETY: the detached context lives as long as the module; the data is a plain
    // function pointer, which on_task reads back.
    unsafe {
        raw::RedisModule_CreateTimer.expect("RedisModule_CreateTimer")(
            detached().get_raw(),
            0,
            Some(on_task),
            task as *mut c_void,
        )
    };
}

extern "C" fn on_task(_ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    // SAFETY: data is the `fn()` that after_this_command passed.
    let task: fn() = unsafe { std::mem::transmute::<*mut c_void, fn()>(data) };
    guard::callback((), task);
}

/// A context for creating timers where the server gives none (the unlink callback).
fn detached() -> Context {
    Context::new(DETACHED.with(Cell::get))
}

/// Keeps a detached context for the life of the module (called once, at load).
pub fn init(ctx: &Context) -> bool {
    // SAFETY: ctx is the load context; the detached context lives until the server
    // exits and is only used on the main thread.
    let detached = unsafe {
        raw::RedisModule_GetDetachedThreadSafeContext.expect("GetDetachedThreadSafeContext")(
            ctx.get_raw(),
        )
    };
    DETACHED.with(|d| d.set(detached));
    !detached.is_null() && subscribe(ctx)
}

/// `FLUSHDB`/`FLUSHALL` and `SWAPDB` change many keys without an event per key: look
/// again at every key that has waiters.
fn recheck_all(ctx: &Context) {
    let now = ffi::now_ms();
    for id in with_queues(|q| q.keys()) {
        arm_timer(ctx, &id, now);
    }
}

/// Looks at `key` again: a free lock goes to the next waiter; a held one gets a timer at
/// its deadline while waiters remain.
fn recheck(ctx: &Context, id: &KeyId) {
    let (db, name) = id;
    if ffi::writes_paused() {
        arm_timer(ctx, id, ffi::now_ms().saturating_add(PAUSED_RETRY_MS));
        return;
    }
    if !ffi::select_db(ctx, *db) {
        return;
    }
    let name = ctx.create_string(name.as_slice());
    // Opening the key expires it if its time has passed; the grant follows below.
    let key = Key::open_read(ctx, &name);
    match key.kind() {
        KeyKind::Empty => {
            drop(key);
            grant_next(ctx, *db, name.as_slice());
        }
        // Held, by a lock or by a key of another type in its place (`SET`, `SWAPDB`),
        // whose removal reaches no unlink callback of this module.
        KeyKind::Lock | KeyKind::Other => rearm(ctx, id, key.expire_at()),
    }
}

/// While waiters remain for a held `key`, a timer at its deadline hands it over on time,
/// and looks again every `RECHECK_MS` meanwhile.
fn rearm(ctx: &Context, id: &KeyId, expire_at: Option<i64>) {
    if with_queues(|q| q.busy(id)) {
        let soon = ffi::now_ms().saturating_add(RECHECK_MS);
        arm_timer(ctx, id, expire_at.map_or(soon, |at| at.min(soon)));
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
    TIMERS.with(|t| {
        let mut timers = t.borrow_mut();
        if timers.capacity() > 64 && timers.len() * 4 < timers.capacity() {
            timers.shrink_to_fit();
        }
    });
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
        let ctx = Context::new(ctx);
        recheck(&ctx, &id);
        cancel_idle_timer(&ctx, &id);
    })
}

/// Grants the lock on the waiter's key to it, in its own context.
fn grant_to(ctx: &Context, waiter: Waiter) -> (RedisResult, Outcome) {
    if let Some(redirect) = cluster::route(ctx, &waiter.key.1).redirect() {
        return (Err(RedisError::String(redirect)), Outcome::Redirected);
    }
    let name = ctx.create_string(waiter.key.1.as_slice());
    let key = Key::open_write(ctx, &name);
    let result = match key.kind() {
        KeyKind::Empty => {
            match commands::grant(ctx, &key, waiter.token.into_boxed_slice(), waiter.ttl_ms) {
                Ok(reply) => (Ok(reply), Outcome::Granted),
                Err(err) => (Err(err), Outcome::Taken),
            }
        }
        KeyKind::Lock => (Ok(RedisValue::Null), Outcome::Taken),
        KeyKind::Other => (Err(error::wrong_type()), Outcome::Taken),
    };
    let expire_at = key.expire_at();
    drop(key);
    rearm(ctx, &waiter.key, expire_at);
    result
}

/// Every blocked client is unblocked once by the module, or its handle leaks.
fn release_handle(bc: *mut raw::RedisModuleBlockedClient) {
    // SAFETY: bc is a blocked client of this module that left its queue just now; it is
    // unblocked exactly once, here, with no private data.
    unsafe {
        raw::RedisModule_UnblockClient.expect("RedisModule_UnblockClient")(bc, ptr::null_mut())
    };
}

/// The waiter's timeout callback: runs when its timeout passes, when someone sends
/// `CLIENT UNBLOCK`, and when `grant_next` unblocks it for its grant.
extern "C" fn on_timeout(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    let reply = guard::callback(Err(error::internal_panic()), || {
        // SAFETY: ctx is the timeout context of a client this module blocked.
        let bc = unsafe {
            raw::RedisModule_GetBlockedClientHandle.expect("RedisModule_GetBlockedClientHandle")(
                ctx,
            )
        };
        let Some((id, waiter)) = with_queues(|q| {
            q.id_of(bc as usize)
                .and_then(|id| q.remove(id).map(|w| (id, w)))
        }) else {
            return Ok(RedisValue::Null);
        };
        release_handle(bc);
        left(&context, &waiter);
        let granting = GRANTING.with(|g| g.get()).is_some_and(|(g, _)| g == id);
        if granting {
            let (reply, outcome) = grant_to(&context, waiter);
            GRANTING.with(|g| g.set(Some((id, outcome))));
            reply
        } else {
            stats::WAIT_TIMEOUTS.bump();
            cancel_idle_timer(&context, &waiter.key);
            Ok(RedisValue::Null)
        }
    });
    context.reply(reply) as c_int
}

/// Never expected: the module unblocks its clients only from their timeout or
/// disconnect callbacks, after which the server does not call this. If it ever runs,
/// the client still gets an answer.
extern "C" fn on_reply(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    Context::new(ctx).reply(Ok(RedisValue::Null)) as c_int
}

/// The client disconnected, was killed, or the server unblocked it (`REPLICAOF`).
extern "C" fn on_disconnect(ctx: *mut raw::RedisModuleCtx, bc: *mut raw::RedisModuleBlockedClient) {
    guard::callback((), || {
        let removed = with_queues(|q| q.id_of(bc as usize).and_then(|id| q.remove(id)));
        if let Some(waiter) = removed {
            release_handle(bc);
            let ctx = Context::new(ctx);
            left(&ctx, &waiter);
            cancel_idle_timer(&ctx, &waiter.key);
        }
    })
}

/// Server events: flushes and database swaps.
extern "C" fn on_server_event(
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
fn subscribe(ctx: &Context) -> bool {
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
