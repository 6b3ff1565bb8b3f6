//! `LOCK.WATCH key fence timeout-ms`: follow a key's holder without polling (the waiting
//! itself is `keyspace/watching.rs`).

use redis_module::Context;

use crate::commands::args;
use crate::ffi;
use crate::ffi::Reply;
use crate::ffi::command::Args;
use crate::keyspace::watching;
use lock_core::error::Error;

/// LOCK.WATCH <key> <fence> <timeout-ms>
///
/// Answers `[fence, value]` of the key's holder (its newest shared holder's fence, no
/// value), or `[0, nil]` when nobody holds it, at once if that differs from `fence`,
/// else when it does; nil when `timeout-ms` passes first (`0`: no limit). Inside
/// `MULTI`/`EXEC` or a script it never blocks: nil when nothing changed. Takes nothing,
/// waits in no queue.
pub fn watch(ctx: &Context, args: &Args) -> Reply {
    if args.len() != 4 {
        return Err(Error::WrongArity);
    }
    let fence = args::fence(args.get(2))?;
    let timeout_ms = args::timeout(args.get(3))?;
    let name = args.string(1).ok_or(Error::WrongArity)?;
    let db = ffi::selected_db(ctx);
    watching::watch(ctx, (db, &name, args.get(1)), fence, timeout_ms)
}
