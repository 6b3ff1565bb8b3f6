//! The commands: the public `LOCK.*` commands (`LOCK.HOLDERS` in `holders.rs`; what
//! `COMMAND DOCS` says of each in `docs.rs`), the internal effect commands that
//! replicate and persist them, `LOCK.WATCH`, their arguments, and the `INFO lock`
//! section.

pub mod args;
pub mod docs;
pub mod fenced;
pub mod holders;
pub mod info;
pub mod internal;
pub mod public;
pub mod watch;

use redis_module::{Context, RedisResult};

use crate::keyspace::watching;

/// The reply of a command that may have changed keys, once the watchers of what it
/// changed are answered: in the same command.
fn settled(ctx: &Context, reply: RedisResult) -> RedisResult {
    watching::settle(ctx);
    reply
}
