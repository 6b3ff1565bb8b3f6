//! The commands, one file each, as mini-redis keeps `src/cmd/`: parse every argument,
//! decide with the rules, carry out through the keyspace layer, reply.
//!
//! - the public commands: `acquire.rs`, `acquire_all.rs` (`LOCK.ACQUIREALL`), `release.rs`, `extend.rs`, `info.rs`
//!   (`LOCK.INFO`), `holders.rs`, `contended.rs` (`LOCK.CONTENDED`), `watch.rs`, `fenced.rs` (`LOCK.DO`), `debug.rs`;
//! - the internal effect commands that replicate and persist them: `internal.rs`;
//! - what they share: their arguments (`args.rs`), what `COMMAND DOCS` says of each
//!   (`docs.rs`); and the `INFO lock` section (`info_section.rs`).

pub mod acquire;
pub mod acquire_all;
pub mod args;
pub mod contended;
pub mod debug;
pub mod docs;
pub mod extend;
pub mod fenced;
pub mod holders;
pub mod info;
pub mod info_section;
pub mod internal;
pub mod release;
pub mod watch;

use redis_module::{Context, RedisString};

use crate::datatype::LockKey;
use crate::ffi::Key;
use crate::ffi::Reply;
use crate::keyspace::waiting;
use crate::keyspace::watching;
use lock_core::error::Error;
use lock_core::key::KeyRef;
use lock_core::lock::LockState;

/// The reply of a command that may have changed keys, once the watchers of what it
/// changed are answered: in the same command.
fn settled(ctx: &Context, reply: Reply) -> Reply {
    watching::settle(ctx);
    reply
}

/// Whether the server may block the caller here (`WAIT`): not inside `MULTI`/`EXEC` or a
/// script, and not on a replica, which follows its master and grants nothing itself.
fn can_block(ctx: &Context) -> bool {
    !ctx.get_flags()
        .contains(redis_module::ContextFlags::DENY_BLOCKING)
        && !crate::ffi::is_replica(ctx)
}

/// Opens `name` (raw `raw`, in database `db`) for a release or an extend with the lock's
/// waiters served first, when it was freed where the server runs the handoff only later:
/// a `DEL` earlier in the same `MULTI`/`EXEC` (post-notification jobs run when the
/// transaction is over) or, on Redis 7.0, a command just before. The command then sees
/// the key as every later one will, as `LOCK.ACQUIRE` does. A held key costs no lookup.
fn open_served<'c>(
    ctx: &'c Context,
    db: i32,
    name: &'c RedisString,
    raw: &[u8],
) -> Result<Key<'c>, Error> {
    let opened = Key::open_write(ctx, name);
    if opened.lock()?.is_some() || !waiting::queued(KeyRef::new(db, raw)) {
        return Ok(opened);
    }
    drop(opened);
    waiting::handoff(ctx, KeyRef::new(db, raw));
    Ok(Key::open_write(ctx, name))
}

/// The `session` and `connected` fields of `lock` (`LOCK.INFO`, `LOCK.HOLDERS`): its
/// grace, and 1 while its bound connection is open, 0 when it is not; both -1 when it is
/// not session-bound.
fn binding_fields(lock: &LockState) -> (i64, i64) {
    match lock.session() {
        None => (-1, -1),
        Some(session) => (
            session.grace_ms,
            i64::from(crate::ffi::client_connected(session.client)),
        ),
    }
}
