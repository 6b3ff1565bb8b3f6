//! Who waits for a key, and when they get it: the one module that answers both.
//!
//! - **Who waits**: `LOCK.ACQUIRE ... WAIT` on a lock it cannot have now blocks its
//!   client and queues it, first come first served, per key (`wait`; the queues are
//!   `queues.rs`, the blocked clients `blocking.rs`); `LOCK.ACQUIREALL ... WAIT` queues one request on
//!   every key it names (`wait_all`), holding none of them meanwhile, and is granted all
//!   at once when it is the oldest waiter of each and each fits. A waiter leaves its queue exactly once: granted,
//!   timed out, refused (its key moved to another cluster node, its master became a
//!   replica), gone (disconnected, killed), or unblocked by an admin.
//! - **When they get it**: whatever may free a lock reports it here by name, and the
//!   oldest waiters that fit are granted in that same event (`handoff.rs`):
//!   - a release, a renewal or a newcomer's acquire, inside its command: `handoff`;
//!   - a `DEL`, an expiry, an eviction, a `RENAME`/`MOVE` away, an overwrite (the type's
//!     unlink callback, through `keyspace/changes.rs`): `lock_gone`, granted in a
//!     post-notification job (or a timer on Redis 7.0);
//!   - a lock's deadline, a shared holder's own expiry: a timer per key
//!     (`deadline_moved`, `watch_holders`, `shared_arrived`);
//!   - the oldest waiter leaving without the lock, others behind it: `head_left`;
//!   - a waiter for several keys granted: its other keys, where readers behind it may
//!     fit;
//!   - flushes, `SWAPDB`, the end of loading, a promotion, a demotion (the server's
//!     events): `many_keys_changed`, `serving`, `demoted`.
//!
//! A grant is written (`store::grant`) before its waiter is answered, so when the server
//! sends the reply no longer matters.
//!
//! The files, each importing only those before it: `queues.rs` (the queues, and answering
//! a waiter), `handoff.rs` (asks the core who is granted, `lock_core::handoff::next`, and
//! carries it out: the grants, the answers, the timers), `blocking.rs` (blocking a client,
//! and every way a wait ends without a grant). Below them in `keyspace/`: `store.rs`,
//! `renewal.rs`, `all_keys.rs`; above, `session.rs` and `changes.rs`. Nothing in
//! `keyspace/` imports a file that imports it back (`src/layers.rs` checks it).

mod blocking;
pub mod handoff;
pub mod held;
pub mod queues;

use redis_module::Context;

use crate::ffi::Reply;
use lock_core::key::KeyRef;

pub use blocking::hold_reply;
pub use handoff::{
    all_renewed, deadline_moved, demoted, handoff, lock_gone, many_keys_changed, open_for_newcomer,
    renewed, serving, shared_arrived, watch_holders,
};
pub use queues::{Request, contended, count, init, queued, total};

/// Blocks the calling client in the queue of the lock on `key`, which expires at
/// `expire_at`, until it is granted as `request` asks or `timeout_ms` passes (`0`: no
/// limit); the handoff looks at the key again by the lock's deadline.
pub fn wait(
    ctx: &Context,
    key: KeyRef,
    request: Request,
    timeout_ms: i64,
    expire_at: Option<i64>,
) -> Reply {
    let blocked = blocking::wait(ctx, key, None, request, timeout_ms)?;
    handoff::waiting_for(ctx, key, expire_at);
    Ok(blocked)
}

/// Blocks the calling client in the queue of every key of `keys` at once
/// (`LOCK.ACQUIREALL`), until it is granted them all as `request` asks, or `timeout_ms`
/// passes (`0`: no limit). `deadlines` holds each key's deadline, in order: the handoff
/// looks at each key again by then.
pub fn wait_all(
    ctx: &Context,
    keys: &[KeyRef],
    deadlines: &[Option<i64>],
    request: Request,
    timeout_ms: i64,
) -> Reply {
    let Some((&first, more)) = keys.split_first() else {
        return Ok(redis_module::RedisValue::Null);
    };
    let more = more.iter().map(|key| key.to_id()).collect();
    let blocked = blocking::wait(ctx, first, Some(more), request, timeout_ms)?;
    for (&key, &expire_at) in keys.iter().zip(deadlines) {
        handoff::waiting_for(ctx, key, expire_at);
    }
    Ok(blocked)
}
