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

use redis_module::Context;

use crate::ffi::Reply;
use crate::keyspace::waiting;
use crate::keyspace::watching;
use lock_core::error::Error;
use lock_core::lock::LockState;

/// The reply of a command that may have changed keys, once the watchers of what it
/// changed are answered: in the same command.
fn settled(ctx: &Context, reply: Reply) -> Reply {
    watching::settle(ctx);
    reply
}

/// Whether the server may block the caller here (`WAIT`): not inside `MULTI`/`EXEC` or a
/// script, and not on a replica, which follows its master and grants nothing itself.
/// One read of the context's flags.
fn can_block(ctx: &Context) -> bool {
    use redis_module::ContextFlags;
    !ctx.get_flags()
        .intersects(ContextFlags::DENY_BLOCKING | ContextFlags::SLAVE)
}

use crate::keyspace::release::open_served;

/// The replica wait of a grant (of `ttl_ms`, asked `asked`) made by the calling command:
/// `None` to answer at once, as inside MULTI/EXEC or a script, where the server forbids
/// holding a reply (there the setting does not apply; an explicit `REPLICAS` was
/// refused before anything was touched). Whether the caller can be blocked is read only
/// when there is a wait to hold it for: a grant on a master without replicas reads no
/// flags.
#[inline(always)]
fn replica_wait(
    ctx: &Context,
    asked: lock_core::replicas::Asked,
    ttl_ms: i64,
) -> Option<lock_core::replicas::Wait> {
    waiting::held::wait_for(ctx, asked, ttl_ms).filter(|_| can_block(ctx))
}

/// Refuses an explicit `REPLICAS n` the server cannot honour here, before any key is
/// touched.
fn check_replicas(ctx: &Context, asked: lock_core::replicas::Asked) -> Result<(), Error> {
    if !asked.explicit() {
        return Ok(());
    }
    waiting::held::check(asked, can_block(ctx))
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
