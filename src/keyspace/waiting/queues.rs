//! The queues of `waiting/`: who waits for which key, and how each wait ends (the
//! server's blocked-client calls themselves are in `ffi/blocked.rs`).
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
//! - `CLIENT UNBLOCK` by an admin, on servers where that is safe (`server/identity.rs`): the
//!   timeout callback answers nil.
//!
//! Every answer goes through `UnblockClient` with the reply as private data; the server
//! sends it from the reply callback when it next gets to it, which no longer matters: the
//! lock was written when it was freed. The server's own timeout is never used (the
//! blocking call gets no timeout), so no server can race its timeout path against an
//! answer already given (Redis 7.2 crashes on that race).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use redis_module::{Context, RedisValue};

use super::handoff;
use crate::ffi::Reply;
use crate::ffi::{self, blocked};
use crate::state::error::Error;
use crate::state::handoff::Handoff;
use crate::state::key::KeyRef;
use crate::state::lock::Session;
use crate::state::queue::{Contended, KeyId, Queues, Waiter};
use crate::state::rules::{Holding, Kind};
use crate::state::stats;

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
    /// It holds every key it asked for (`LOCK.ACQUIREALL`): `[token, [fence, ...]]`.
    GrantedAll {
        /// Its token.
        token: Box<[u8]>,
        /// The fence of each key, in the order it gave them.
        fences: Vec<u64>,
    },
    /// Its wait ended without the lock: nil.
    Nil,
    /// An error reply (a cluster redirection, a refusal), starting with its code.
    Error(Error),
}

thread_local! {
    /// Every waiter of the server. The server calls the module only from its main
    /// thread, so a thread-local is all the synchronisation needed.
    static QUEUES: RefCell<Queues> = RefCell::new(Queues::default());
    /// Whether admins may end a wait with `CLIENT UNBLOCK` (see `server/identity.rs`).
    static ADMIN_UNBLOCK: Cell<bool> = const { Cell::new(false) };
}

fn with_queues<T>(f: impl FnOnce(&mut Queues) -> T) -> T {
    QUEUES.with(|queues| f(&mut queues.borrow_mut()))
}

/// Sets whether `CLIENT UNBLOCK` may end a wait on this server (once, at load).
pub fn init(admin_unblock: bool) {
    ADMIN_UNBLOCK.with(|a| a.set(admin_unblock));
}

/// Whether `CLIENT UNBLOCK` may end a wait on this server.
pub fn admin_unblock() -> bool {
    ADMIN_UNBLOCK.with(Cell::get)
}

/// Whether clients wait for `key`: a newcomer must stand back for them. (The common
/// case, nobody waiting anywhere, costs no allocation.)
pub fn queued(at: KeyRef) -> bool {
    with_queues(|q| !q.is_empty() && q.busy(&at.to_id()))
}

/// Whether clients wait for the key `id`.
pub fn busy(id: &KeyId) -> bool {
    with_queues(|q| !q.is_empty() && q.busy(id))
}

/// Clients blocked on `key`.
pub fn count(at: KeyRef) -> usize {
    with_queues(|q| {
        if q.is_empty() {
            0
        } else {
            q.waiting(&at.to_id())
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

/// Takes the oldest waiter of `id` out of its queue, to be granted the lock (or refused).
/// The caller must `answer` it.
pub fn take_head(id: &KeyId) -> Option<Waiter> {
    with_queues(|q| q.pop_head(id))
}

/// Takes waiter `id` out of every queue, to be granted all its keys (or refused). The
/// caller must `answer` it.
pub fn take(id: u64) -> Option<Waiter> {
    with_queues(|q| q.remove(id))
}

/// What the handoff of `id` does next, as its holders stand (`held`): the core's decision
/// (`handoff::next`). `fits` opens keys, which may reach the type's callbacks and so this
/// module: it runs while no queue is borrowed, on a copy of the oldest waiter when it
/// waits for several keys, about each of its keys up to the first that does not fit.
pub fn next_handoff(
    id: &KeyId,
    held: Option<Holding>,
    mut fits: impl FnMut(&KeyId, &Waiter) -> bool,
) -> Handoff {
    let head = with_queues(|q| {
        q.head(id)
            .filter(|(_, waiter)| waiter.is_multi())
            .map(|(_, waiter)| waiter.clone())
    });
    let mut verdicts = HashMap::new();
    if let Some(waiter) = head {
        for key in waiter.keys() {
            let fit = fits(key, &waiter);
            verdicts.insert(key.clone(), fit);
            if !fit {
                break;
            }
        }
    }
    with_queues(|q| {
        crate::state::handoff::next(q, id, held, |key, _| {
            verdicts.get(key).copied().unwrap_or(false)
        })
    })
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
    /// The `CLIENT ID` of the waiting connection.
    pub client: u64,
    /// Exclusive or shared.
    pub kind: Kind,
    /// The value to publish once granted (`VALUE v`), if any.
    pub value: Option<Box<[u8]>>,
}

/// Blocks the calling client until it is answered: granted the lock on `at` (and, for
/// `LOCK.ACQUIREALL`, on every key of `more` at once) as `request` asks, or `timeout_ms` passes (`0`: no
/// limit).
pub fn wait(
    ctx: &Context,
    at: KeyRef,
    more: Option<Vec<KeyId>>,
    request: Request,
    timeout_ms: i64,
) -> Reply {
    let Some(handle) = blocked::block::<LockWaits>(ctx, admin_unblock()) else {
        return Err(Error::ClientNotBlocked);
    };
    let id = with_queues(|q| {
        q.push(Waiter {
            handle: handle.id(),
            key: at.to_id(),
            all_keys: more.is_some(),
            more: more.unwrap_or_default(),
            token: request.token,
            wake_timer: None,
            ttl_ms: request.ttl_ms,
            session: request.session,
            client: request.client,
            kind: request.kind,
            value: request.value,
            arrived_us: ffi::monotonic_us(),
        })
    });
    if timeout_ms > 0 {
        let timer = ffi::start_timer_with(ctx, timeout_ms, on_wait_timeout, id);
        with_queues(|q| q.set_wake_timer(id, timer));
    }
    stats::WAITS.bump();
    Ok(RedisValue::NoReply)
}

/// Answers a waiter that has left its queue: the server sends `answer` from the reply
/// callback. Exactly once per waiter.
pub fn answer(ctx: &Context, waiter: Waiter, answer: Answer) {
    if matches!(
        answer,
        Answer::Granted { .. } | Answer::GrantedAll { .. } | Answer::Nil
    ) {
        waited(&waiter);
    }
    stop_wake_timer(ctx, &waiter);
    blocked::unblock::<LockWaits>(blocked::Handle::from_id(waiter.handle), Some(answer));
}

/// Answers every waiter of the server with what `answer_of` says (the server became a
/// replica: nobody will be granted anything here).
pub fn answer_all(ctx: &Context, answer_of: impl Fn(&Waiter) -> Answer) {
    for waiter in with_queues(Queues::drain) {
        let reply = answer_of(&waiter);
        answer(ctx, waiter, reply);
    }
}

/// The wait of `waiter` ended with a grant or its timeout: its length counts in
/// `lock_wait_usec`.
fn waited(waiter: &Waiter) {
    stats::WAIT_USEC.record(ffi::monotonic_us().saturating_sub(waiter.arrived_us));
}

/// The keys of database `db` that have waiters, with how many and when the oldest
/// arrived (`LOCK.CONTENDED`).
pub fn contended(db: i32) -> Vec<Contended> {
    with_queues(|q| {
        if q.is_empty() {
            Vec::new()
        } else {
            q.contended(db)
        }
    })
}

/// The waiter left its queue: the timer that would end its wait has nothing left to do.
fn stop_wake_timer(ctx: &Context, waiter: &Waiter) {
    if let Some(timer) = waiter.wake_timer {
        let _ = ffi::stop_timer_with::<u64>(ctx, timer);
    }
}

/// Waiter `id` leaves its queues without the lock. On each key where it was the head
/// and others still wait, the next may fit where it did not (shared waiters behind a
/// writer that gave up; anyone behind a waiter for several keys, on a key it kept free):
/// whoever listens is told.
fn leave(id: u64) -> Option<Waiter> {
    let (waiter, heads) = with_queues(|q| {
        let heads = q.heads_of(id);
        (q.remove(id), heads)
    });
    let waiter = waiter?;
    for key in heads {
        if busy(&key) {
            handoff::head_left(key.as_ref());
        }
    }
    Some(waiter)
}

/// Waiter `id`'s `WAIT` timeout passed.
fn on_wait_timeout(ctx: &Context, id: u64) {
    // Already granted or gone if it is not in its queue any more.
    if let Some(mut waiter) = leave(id) {
        waiter.wake_timer = None; // it has just fired
        stats::WAIT_TIMEOUTS.bump();
        answer(ctx, waiter, Answer::Nil);
    }
}

/// What the server's calls about a blocked lock waiter do.
struct LockWaits;

impl blocked::Waits for LockWaits {
    type Answer = Answer;

    fn reply(ctx: &Context, answer: Option<&Answer>) {
        match answer {
            Some(Answer::Granted { token, fence }) => ffi::reply_granted(ctx, token, *fence),
            Some(Answer::GrantedAll { token, fences }) => {
                ffi::reply_granted_all(ctx, token, fences);
            }
            Some(Answer::Error(message)) => {
                ctx.reply(Err(ffi::error_reply(message.clone())));
            }
            Some(Answer::Nil) | None => {
                ctx.reply(Ok(RedisValue::Null));
            }
        }
    }

    /// The client disconnected, was killed, or the server unblocked it with an error (a
    /// role change, `CLIENT UNBLOCK ERROR`): it leaves its queue.
    fn disconnected(ctx: &Context, handle: blocked::Handle) {
        let waiter = with_queues(|q| q.id_of(handle.id())).and_then(leave);
        if let Some(waiter) = waiter {
            stop_wake_timer(ctx, &waiter);
            blocked::unblock::<LockWaits>(handle, None);
        }
    }

    /// `CLIENT UNBLOCK` by an admin (registered only where the server makes it safe):
    /// the wait ends with nil (the server's `UNBLOCKED` error for `CLIENT UNBLOCK ERROR`
    /// reaches `disconnected` instead).
    fn admin_unblocked(ctx: &Context, handle: blocked::Handle) {
        let waiter = with_queues(|q| q.id_of(handle.id())).and_then(leave);
        if let Some(waiter) = waiter {
            stop_wake_timer(ctx, &waiter);
            stats::WAIT_TIMEOUTS.bump();
            waited(&waiter);
            // The nil goes out from the callback; the handle is freed without a reply.
            blocked::unblock::<LockWaits>(handle, None);
        }
    }
}
