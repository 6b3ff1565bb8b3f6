//! The blocked clients of `waiting/`: `LOCK.ACQUIRE ... WAIT` (and `LOCK.ACQUIREALL`) on
//! a lock it cannot have now blocks its client and queues it (`queues.rs`), and here is
//! every way a wait ends other than a grant, which the handoff answers:
//!
//! - its `WAIT` timeout passes: a module timer of its own answers nil;
//! - it goes away (disconnect, `CLIENT KILL`, the server's own unblocking on a role
//!   change): the disconnect callback drops it;
//! - `CLIENT UNBLOCK` by an admin, on servers where that is safe (`server/identity.rs`):
//!   the timeout callback answers nil.
//!
//! A waiter that leaves the head of a queue others still wait in may let the next ones
//! fit: the handoff is told (`handoff::head_left`).
//!
//! The server's own timeout is never used (the blocking call gets no timeout), so no
//! server can race its timeout path against an answer already given (Redis 7.2 crashes
//! on that race).

use redis_module::{Context, RedisValue};

use super::handoff;
use super::held::{self, Undo};
use super::queues::{self, Answer, Request};
use crate::ffi::Reply;
use crate::ffi::{self, blocked};
use lock_core::error::Error;
use lock_core::key::KeyRef;
use lock_core::queue::{KeyId, Waiter};
use lock_core::replicas::Wait;
use lock_core::stats;

/// Blocks the calling client until it is answered: granted the lock on `key` (and, for
/// `LOCK.ACQUIREALL`, on every key of `more` at once) as `request` asks, or `timeout_ms`
/// passes (`0`: no limit).
pub fn wait(
    ctx: &Context,
    key: KeyRef,
    more: Option<Vec<KeyId>>,
    request: Request,
    timeout_ms: i64,
) -> Reply {
    let Some(handle) = blocked::block::<LockWaits>(ctx, queues::admin_unblock()) else {
        return Err(Error::ClientNotBlocked);
    };
    let id = queues::push(Waiter {
        handle: handle.id(),
        key: key.to_id(),
        all_keys: more.is_some(),
        more: more.unwrap_or_default(),
        token: request.token,
        wake_timer: None,
        ttl_ms: request.ttl_ms,
        session: request.session,
        client: request.client,
        kind: request.kind,
        value: request.value,
        replicas: request.replicas,
        arrived_us: ffi::monotonic_us(),
    });
    if timeout_ms > 0 {
        let timer = ffi::start_timer_with(ctx, timeout_ms, on_wait_timeout, id);
        queues::set_wake_timer(id, timer);
    }
    stats::WAITS.bump();
    Ok(RedisValue::NoReply)
}

/// Blocks the calling client, just granted (`answer`), until `wait` replicas have the
/// grant, or its timeout: then `replicated.rs` answers it, or undoes `undo`.
pub fn hold_reply(ctx: &Context, answer: Answer, db: i32, undo: Option<Undo>, wait: Wait) -> Reply {
    let Some(handle) = blocked::block::<LockWaits>(ctx, queues::admin_unblock()) else {
        return Err(Error::ClientNotBlocked);
    };
    held::hold(ctx, handle.id(), answer, db, undo, wait);
    Ok(RedisValue::NoReply)
}

/// Waiter `id` leaves its queues without the lock; the keys it headed, where others
/// still wait, are looked at again.
fn leave(id: u64) -> Option<Waiter> {
    let (waiter, heads) = queues::leave(id)?;
    for id in heads {
        handoff::head_left(id.as_ref());
    }
    Some(waiter)
}

/// Waiter `id`'s `WAIT` timeout passed.
fn on_wait_timeout(ctx: &Context, id: u64) {
    // Already granted or gone if it is not in its queue any more.
    if let Some(mut waiter) = leave(id) {
        waiter.wake_timer = None; // it has just fired
        stats::WAIT_TIMEOUTS.bump();
        queues::answer(ctx, waiter, Answer::Nil);
    }
}

/// What the server's calls about a blocked lock waiter do.
struct LockWaits;

impl blocked::Waits for LockWaits {
    type Answer = Answer;

    fn reply(ctx: &Context, answer: Option<&Answer>) {
        queues::reply(ctx, answer);
    }

    /// The client disconnected, was killed, or the server unblocked it with an error (a
    /// role change, `CLIENT UNBLOCK ERROR`): it leaves its queue, or, granted and held
    /// for its replicas, its grant is undone.
    fn disconnected(ctx: &Context, handle: blocked::Handle<Answer>) {
        if let Some(waiter) = queues::waiter_of(handle.id()).and_then(leave) {
            queues::stop_wake_timer(ctx, &waiter);
            blocked::unblock(handle, None);
        } else {
            held::gone(handle.id());
        }
    }

    /// `CLIENT UNBLOCK` by an admin (registered only where the server makes it safe):
    /// the wait ends with nil (the server's `UNBLOCKED` error for `CLIENT UNBLOCK ERROR`
    /// reaches `disconnected` instead).
    fn admin_unblocked(ctx: &Context, handle: blocked::Handle<Answer>) {
        if let Some(waiter) = queues::waiter_of(handle.id()).and_then(leave) {
            queues::stop_wake_timer(ctx, &waiter);
            stats::WAIT_TIMEOUTS.bump();
            queues::waited(&waiter);
            // The nil goes out from the callback; the handle is freed without a reply.
            blocked::unblock(handle, None);
        } else {
            // Granted and held for its replicas: the grant is undone, as the nil says.
            held::gone(handle.id());
        }
    }
}
