//! `LOCK.DEBUG PANIC`: proof that a panic inside a command becomes an error reply.

use redis_module::{Context, RedisValue};

use crate::ffi;
use crate::ffi::Reply;
use crate::ffi::command::Args;
use lock_core::error::Error;

/// LOCK.DEBUG PANIC
///
/// Panics inside a command, to prove that the guard turns it into an error reply and
/// the server keeps running. Refused unless the server allows debugging commands.
pub fn debug(ctx: &Context, args: &Args) -> Reply {
    if args.len() != 2 {
        return Err(Error::WrongArity);
    }
    let setting = ctx
        .call("CONFIG", &["GET", "enable-debug-command"])
        .map_err(|err| Error::Server(err.to_string()))?;
    let setting = match &setting {
        RedisValue::Array(pair) => pair.get(1).and_then(|v| String::try_from(v.clone()).ok()),
        _ => None,
    };
    // As for `DEBUG` itself: `yes` for everyone, `local` for clients on this machine.
    let allowed = match setting.as_deref() {
        Some("yes") => true,
        Some("local") => ffi::client_is_local(ctx),
        _ => false,
    };
    if !allowed {
        return Err(Error::DebugDisabled);
    }
    if args.get(1).eq_ignore_ascii_case(b"PANIC") {
        panic!("LOCK.DEBUG PANIC: a deliberate panic to test the guard");
    }
    Err(Error::UnknownDebugSubcommand(args.get(1).to_vec()))
}
