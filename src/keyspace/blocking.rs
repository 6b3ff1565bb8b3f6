//! Blocking waits: the only home of the server's blocked-client calls.
//!
//! `LOCK.ACQUIRE ... WAIT` on a busy lock blocks the client (`BlockClient`) and puts it
//! in its key's first-come-first-served queue (`queue.rs`). A waiter leaves the queue in
//! exactly one of these ways, and is answered exactly once:
//!
//! - granted: the handoff (`handoff.rs`) has already written the lock for it, in the
//!   event that freed the lock, and hands this layer the reply as data (`answer`);
//! - its `WAIT` timeout passes: a module timer of its own answers nil;
//! - it is refused: its key moved to another cluster node, or its master became a
//!   replica (an error reply, handed as data like a grant);
//! - it goes away (disconnect, `CLIENT KILL`, the server's own unblocking on a role
//!   change): the disconnect callback drops it;
//! - `CLIENT UNBLOCK` by an admin, on servers where that is safe (`server.rs`): the
//!   timeout callback answers nil.
//!
//! Every answer goes through `UnblockClient` with the reply as private data; the server
//! sends it from the reply callback when it next gets to it, which no longer matters: the
//! lock was written when it was freed. The server's own timeout is never used (the
//! blocking call gets no timeout), so no server can race its timeout path against an
//! answer already given (Redis 7.2 crashes on that race).

use std::cell::{Cell, RefCell};
use std::os::raw::{c_int, c_void};
use std::ptr;

use redis_module::{Context, RedisError, RedisResult, RedisValue, raw};

use crate::error;
use crate::events;
use crate::ffi;
use crate::guard;
use crate::lock::Session;
use crate::queue::{KeyId, Queues, Waiter};
use crate::rules::{Holding, Kind};
use crate::stats;

/// What a waiter is told when it leaves its queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// It holds the lock: `[token, fence]`.
    Granted {
        /// Its token.
        token: Box<[u8]>,
        /// The fence of its grant.
        fence: u64,
    },
    /// Its wait ended without the lock: nil.
    Nil,
    /// An error reply (a cluster redirection, a refusal), starting with its code.
    Error(String),
}

thread_local! {
    /// Every waiter of the server. The server calls the module only from its main
    /// thread, so a thread-local is all the synchronisation needed.
    static QUEUES: RefCell<Queues> = RefCell::new(Queues::default());
    /// Whether admins may end a wait with `CLIENT UNBLOCK` (see `server.rs`).
    static ADMIN_UNBLOCK: Cell<bool> = const { Cell::new(false) };
}

fn with_queues<T>(f: impl FnOnce(&mut Queues) -> T) -> T {
    QUEUES.with(|queues| f(&mut queues.borrow_mut()))
}

/// The queue key of `key` in database `db`.
pub fn key_id(db: i32, key: &[u8]) -> KeyId {
    (db, key.to_vec())
}

/// Sets whether `CLIENT UNBLOCK` may end a wait on this server (once, at load).
pub fn init(admin_unblock: bool) {
    ADMIN_UNBLOCK.with(|a| a.set(admin_unblock));
}

/// Whether clients wait for `key`: a newcomer must stand back for them. (The common
/// case, nobody waiting anywhere, costs no allocation.)
pub fn queued(db: i32, key: &[u8]) -> bool {
    with_queues(|q| !q.is_empty() && q.busy(&key_id(db, key)))
}

/// Whether clients wait for the key `id`.
pub fn busy(id: &KeyId) -> bool {
    with_queues(|q| !q.is_empty() && q.busy(id))
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

/// Keys that have waiters.
pub fn keys() -> Vec<KeyId> {
    with_queues(|q| if q.is_empty() { Vec::new() } else { q.keys() })
}

/// How many waiters at the head of `id`'s queue are granted now beside `held`.
pub fn admissible(id: &KeyId, held: Option<Holding>) -> usize {
    with_queues(|q| q.admissible(id, held))
}

/// Takes the oldest waiter of `id` out of its queue, to be granted the lock (or refused).
/// The caller must `answer` it.
pub fn take_head(id: &KeyId) -> Option<Waiter> {
    with_queues(|q| q.pop_head(id))
}

/// What a waiter asks for: the token it will hold, for how long, bound to which
/// connection, in which kind.
pub struct Request {
    /// Its own token, or one the server made.
    pub token: Vec<u8>,
    /// The TTL of the lock once granted.
    pub ttl_ms: i64,
    /// The binding `SESSION` asks for.
    pub session: Option<Session>,
    /// Exclusive or shared.
    pub kind: Kind,
}

/// Blocks the calling client until it is answered: granted the lock on `key` as
/// `request` asks, or `timeout_ms` passes (`0`: no limit).
pub fn wait(ctx: &Context, db: i32, key: &[u8], request: Request, timeout_ms: i64) -> RedisResult {
    let on_admin_unblock: Option<BlockedCallback> = if ADMIN_UNBLOCK.with(Cell::get) {
        Some(on_admin_unblock as BlockedCallback)
    } else {
        None
    };
    // SAFETY: ctx is the live context of a command that may block (the caller checked
    // DENY_BLOCKING); the callbacks match the server's signatures and live as long as the
    // module. No server timeout (0): the module times waits out itself.
    let bc = unsafe {
        raw::RedisModule_BlockClient.expect("RedisModule_BlockClient")(
            ctx.get_raw(),
            Some(on_reply),
            on_admin_unblock,
            Some(free_answer),
            0,
        )
    };
    if bc.is_null() {
        return Err(error::client_not_blocked());
    }
    // SAFETY: bc was just returned by BlockClient and is live until UnblockClient.
    unsafe {
        raw::RedisModule_SetDisconnectCallback.expect("RedisModule_SetDisconnectCallback")(
            bc,
            Some(on_disconnect),
        )
    };
    let id = with_queues(|q| {
        q.push(Waiter {
            handle: bc as usize,
            key: key_id(db, key),
            token: request.token,
            wake_timer: None,
            ttl_ms: request.ttl_ms,
            session: request.session,
            kind: request.kind,
        })
    });
    if timeout_ms > 0 {
        // The waiter's id, not a pointer: nothing to free if the timer is stopped.
        let timer = ffi::create_timer(ctx, timeout_ms, on_wait_timeout, id as usize);
        with_queues(|q| q.set_wake_timer(id, timer));
    }
    stats::WAITS.bump();
    Ok(RedisValue::NoReply)
}

/// Answers a waiter that has left its queue: the server sends `answer` from the reply
/// callback. Exactly once per waiter.
pub fn answer(ctx: &Context, waiter: Waiter, answer: Answer) {
    stop_wake_timer(ctx, &waiter);
    unblock(
        waiter.handle as *mut raw::RedisModuleBlockedClient,
        Some(answer),
    );
}

/// Answers every waiter of the server with what `answer_of` says (the server became a
/// replica: nobody will be granted anything here).
pub fn answer_all(ctx: &Context, answer_of: impl Fn(&Waiter) -> Answer) {
    for waiter in with_queues(Queues::drain) {
        let reply = answer_of(&waiter);
        answer(ctx, waiter, reply);
    }
}

/// The waiter left its queue: the timer that would end its wait has nothing left to do.
fn stop_wake_timer(ctx: &Context, waiter: &Waiter) {
    if let Some(timer) = waiter.wake_timer {
        // The data is the waiter's id, not an allocation: nothing to free.
        let _ = ffi::stop_timer(ctx, timer);
    }
}

/// `UnblockClient`: every blocked client is unblocked once by the module, or its handle
/// leaks. With an answer, the reply callback sends it; without one (the client is gone,
/// or was answered by the timeout callback), the server only frees the handle.
fn unblock(bc: *mut raw::RedisModuleBlockedClient, answer: Option<Answer>) {
    let data = answer.map_or(ptr::null_mut(), |a| {
        Box::into_raw(Box::new(a)).cast::<c_void>()
    });
    // SAFETY: bc is a blocked client of this module that has just left its queue, so it
    // is unblocked exactly once, here; the server owns data from now on and gives it back
    // to free_answer.
    unsafe { raw::RedisModule_UnblockClient.expect("RedisModule_UnblockClient")(bc, data) };
}

type BlockedCallback = unsafe extern "C" fn(
    *mut raw::RedisModuleCtx,
    *mut *mut raw::RedisModuleString,
    c_int,
) -> c_int;

/// Sends the answer the module handed to `UnblockClient`.
extern "C" fn on_reply(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    guard::callback((), || {
        // SAFETY: ctx is the reply context of a client this module blocked; the private
        // data is an Answer it handed to UnblockClient, or null.
        let answer = unsafe {
            raw::RedisModule_GetBlockedClientPrivateData
                .expect("RedisModule_GetBlockedClientPrivateData")(ctx)
            .cast::<Answer>()
            .as_ref()
        };
        match answer {
            Some(Answer::Granted { token, fence }) => ffi::reply_granted(&context, token, *fence),
            Some(Answer::Error(message)) => {
                context.reply(Err(RedisError::String(message.clone())));
            }
            Some(Answer::Nil) | None => {
                context.reply(Ok(RedisValue::Null));
            }
        }
    });
    raw::REDISMODULE_OK as c_int
}

/// Frees an answer once the server is done with it (sent, or its client gone).
extern "C" fn free_answer(_ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if !data.is_null() {
        // SAFETY: data is the Box<Answer> that unblock handed to the server; the server
        // gives it back exactly once.
        guard::callback((), || drop(unsafe { Box::from_raw(data.cast::<Answer>()) }));
    }
}

/// Waiter `id` leaves its queue without the lock. If it was the head and others still
/// wait, the next may fit beside the holders where it did not (shared waiters behind a
/// writer that gave up): whoever listens is told.
fn leave(id: u64) -> Option<Waiter> {
    let (waiter, was_head) = with_queues(|q| {
        let was_head = q.is_head(id);
        (q.remove(id), was_head)
    });
    let waiter = waiter?;
    if was_head && busy(&waiter.key) {
        events::head_left(waiter.key.0, &waiter.key.1);
    }
    Some(waiter)
}

/// The waiter's `WAIT` timeout passed.
extern "C" fn on_wait_timeout(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    guard::callback((), || {
        let id = data as usize as u64;
        // Already granted or gone if it is not in its queue any more.
        if let Some(mut waiter) = leave(id) {
            waiter.wake_timer = None; // it has just fired
            stats::WAIT_TIMEOUTS.bump();
            answer(&Context::new(ctx), waiter, Answer::Nil);
        }
    })
}

/// `CLIENT UNBLOCK` by an admin (registered only where the server makes it safe): the
/// wait ends with nil, or with the server's `UNBLOCKED` error for `CLIENT UNBLOCK ERROR`
/// (which reaches `on_disconnect` instead).
extern "C" fn on_admin_unblock(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    guard::callback((), || {
        // SAFETY: ctx is the timeout context of a client this module blocked.
        let bc = unsafe {
            raw::RedisModule_GetBlockedClientHandle.expect("RedisModule_GetBlockedClientHandle")(
                ctx,
            )
        };
        let waiter = with_queues(|q| q.id_of(bc as usize)).and_then(leave);
        if let Some(waiter) = waiter {
            stop_wake_timer(&context, &waiter);
            stats::WAIT_TIMEOUTS.bump();
            // The reply goes out here; the handle is freed without a second one.
            unblock(bc, None);
        }
    });
    context.reply(Ok(RedisValue::Null));
    raw::REDISMODULE_OK as c_int
}

/// The client disconnected, was killed, or the server unblocked it with an error (a
/// role change, `CLIENT UNBLOCK ERROR`): it leaves its queue.
extern "C" fn on_disconnect(ctx: *mut raw::RedisModuleCtx, bc: *mut raw::RedisModuleBlockedClient) {
    guard::callback((), || {
        let waiter = with_queues(|q| q.id_of(bc as usize)).and_then(leave);
        if let Some(waiter) = waiter {
            stop_wake_timer(&Context::new(ctx), &waiter);
            unblock(bc, None);
        }
    })
}
