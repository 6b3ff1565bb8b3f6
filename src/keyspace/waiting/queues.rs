//! The queues of `waiting/`: who waits for which key (the core's `Queues`, first come
//! first served per key), and how a waiter is answered, exactly once. The bottom of the
//! keyspace: it imports no other file of it, so anything may ask whether a key is
//! waited for.
//!
//! A waiter leaves the queue in exactly one of these ways:
//!
//! - granted: the handoff (`handoff.rs`) has already written the lock for it, in the
//!   event that freed the lock, and hands this layer the reply as data (`answer`);
//! - it is refused: its key moved to another cluster node, or its master became a
//!   replica (an error reply, handed as data like a grant);
//! - it times out, goes away or is unblocked by an admin: `blocking.rs`, which blocked
//!   it, takes it out (`leave`) and tells the handoff.
//!
//! Every answer goes through `UnblockClient` with the reply as private data; the server
//! sends it from the reply callback (`reply`) when it next gets to it, which no longer
//! matters: the lock was written when it was freed.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use redis_module::{Context, RedisValue};

use crate::ffi::{self, blocked};
use lock_core::error::Error;
use lock_core::handoff::Handoff;
use lock_core::key::KeyRef;
use lock_core::lock::Session;
use lock_core::queue::{Contended, KeyId, Queues, Waiter};
use lock_core::rules::{Holding, Kind};
use lock_core::stats;

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
    /// Its extend took effect, and replicas have it (`LOCK.EXTEND ... REPLICAS n`): `1`.
    Extended,
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

pub(super) fn with_queues<T>(f: impl FnOnce(&mut Queues) -> T) -> T {
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
pub fn queued(key: KeyRef) -> bool {
    with_queues(|q| !q.is_empty() && q.busy(&key.to_id()))
}

/// Whether clients wait for the key `id`.
pub fn busy(id: &KeyId) -> bool {
    with_queues(|q| !q.is_empty() && q.busy(id))
}

/// Clients blocked on `key`.
pub fn count(key: KeyRef) -> usize {
    with_queues(|q| {
        if q.is_empty() {
            0
        } else {
            q.waiting(&key.to_id())
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
        lock_core::handoff::next(q, id, held, |key, _| {
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
    /// The replicas its grant waits for before it is answered (`REPLICAS n`).
    pub replicas: lock_core::replicas::Asked,
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
    blocked::unblock(blocked::Handle::from_id(waiter.handle), Some(answer));
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
pub fn waited(waiter: &Waiter) {
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
pub fn stop_wake_timer(ctx: &Context, waiter: &Waiter) {
    if let Some(timer) = waiter.wake_timer {
        let _ = ffi::stop_timer_with::<u64>(ctx, timer);
    }
}

/// Takes waiter `id` out of every queue without the lock (timed out, gone, unblocked):
/// the waiter, and the keys it headed where others still wait (the next may fit where it
/// did not: the caller tells the handoff).
pub fn leave(id: u64) -> Option<(Waiter, Vec<KeyId>)> {
    let (waiter, heads) = with_queues(|q| {
        let heads = q.heads_of(id);
        (q.remove(id), heads)
    });
    let heads = heads.into_iter().filter(busy).collect();
    Some((waiter?, heads))
}

/// The waiter blocked as `handle`, if it still waits.
pub fn waiter_of(handle: usize) -> Option<u64> {
    with_queues(|q| q.id_of(handle))
}

/// Formats what a waiter is told: the reply the server sends from the blocked client's
/// reply callback (`blocking.rs`).
pub fn reply(ctx: &Context, answer: Option<&Answer>) {
    match answer {
        Some(Answer::Granted { token, fence }) => ffi::reply_granted(ctx, token, *fence),
        Some(Answer::GrantedAll { token, fences }) => {
            ffi::reply_granted_all(ctx, token, fences);
        }
        Some(Answer::Error(message)) => {
            ctx.reply(Err(ffi::error_reply(message.clone())));
        }
        Some(Answer::Extended) => {
            ctx.reply(Ok(RedisValue::Integer(1)));
        }
        Some(Answer::Nil) | None => {
            ctx.reply(Ok(RedisValue::Null));
        }
    }
}

/// Puts a waiter in the queues of its keys: its id.
pub fn push(waiter: Waiter) -> u64 {
    with_queues(|q| q.push(waiter))
}

/// Records the timer that ends waiter `id`'s wait.
pub fn set_wake_timer(id: u64, timer: u64) {
    with_queues(|q| q.set_wake_timer(id, timer));
}
