//! `LOCK.DO key token command [arg ...]`: a write fenced by the lock. The command runs,
//! atomically, if and only if `token` holds `key` (exclusive or one of its shared
//! holders); else `-NOTHELD` and nothing runs. It runs as the caller's ACL user, as in a
//! script, and replicates as itself (`ffi/call.rs`); the lock is not touched.

use std::sync::LazyLock;

use redis_module::{Context, RedisValue};

use crate::commands::args;
use crate::datatype::LockKey;
use crate::ffi::Reply;
use crate::ffi::call::{self, KeyFlags, NotRun};
use crate::ffi::command::Args;
use crate::ffi::main_thread::MainThread;
use crate::ffi::{self, Key};
use lock_core::error::Error;
use lock_core::inner::{self, Refusal, Verdicts};
use lock_core::value::LockValue;

/// Where the inner command starts in `LOCK.DO key token command ...`.
const INNER: usize = 3;

/// Each command name's verdict, from the server's `COMMAND INFO`: asked once per name
/// (a plain static of the main thread: a thread-local costs a call in a loaded library).
static VERDICTS: LazyLock<MainThread<Verdicts>> =
    LazyLock::new(|| MainThread::new(Verdicts::default()));

/// LOCK.DO <key> <token> <command> [arg ...]
///
/// The inner command's own reply; `NOTHELD` (nothing run) when `token` does not hold
/// `key`; an `ERR` naming the command when `LOCK.DO` may not run it. Answering a keys
/// request (`getkeys-api`), it declares `key` and the inner command's keys.
pub fn lock_do(ctx: &Context, args: &Args) -> Reply {
    if args.len() > 2 {
        ffi::redact(ctx, 2);
    }
    if call::keys_requested(ctx) {
        declare_keys(ctx, args);
        return Ok(RedisValue::NoReply);
    }
    if args.len() <= INNER {
        return Err(Error::WrongArity);
    }
    let token = args::token(args.get(2))?;
    let command = args.get(INNER);
    allowed(ctx, args)?;
    let name = args.string(1).ok_or(Error::WrongArity)?;
    let opened = Key::open_read(ctx, &name);
    let held = match opened.lock()? {
        Some(LockValue::Exclusive(lock)) => lock.holds(token),
        // A shared holder counts until its time is strictly past, as a key's does.
        Some(LockValue::Shared(holders)) => holders
            .get(token)
            .is_some_and(|holder| holder.expire_at >= ffi::now_ms()),
        None => false,
    };
    drop(opened);
    if !held {
        return Err(Error::NotHeld(args.get(1).to_vec()));
    }
    match call::run_and_reply(ctx, args, INNER) {
        Ok(()) => Ok(RedisValue::NoReply),
        Err(NotRun::Unknown) => Err(Error::UnknownInner(command.to_vec())),
        Err(NotRun::Arity) => Err(Error::InnerArity(command.to_vec())),
        Err(NotRun::NotInScript) => Err(not_in_lock_do(command, Refusal::NotInScript)),
        Err(NotRun::Denied) => Err(Error::InnerDenied(command.to_vec())),
        Err(NotRun::OutOfMemory) => Err(Error::InnerOutOfMemory),
        Err(NotRun::Other(errno)) => Err(Error::InnerNotRun {
            name: command.to_vec(),
            errno,
        }),
        Err(NotRun::Lost(Some(text))) => Err(Error::Server(text)),
        Err(NotRun::Lost(None)) => Err(Error::InnerReplyLost(command.to_vec())),
    }
}

/// The lock's key, and the inner command's keys as the server finds them for it.
fn declare_keys(ctx: &Context, args: &Args) {
    if args.len() > 1 {
        call::key_at(ctx, 1, KeyFlags::READ);
    }
    for (pos, flags) in call::command_keys(ctx, args, INNER) {
        call::key_at(ctx, pos, flags);
    }
}

/// Refuses what a script may not run, and the module's own commands, before anything is
/// looked at; an unknown command is left to the server, which names it.
fn allowed(ctx: &Context, args: &Args) -> Result<(), Error> {
    let command = args.get(INNER);
    let verdict = match VERDICTS.with(|v| v.get(command)) {
        Some(verdict) => verdict,
        None => {
            let name = command.to_ascii_lowercase();
            let Some((verdict, container)) = look_up(ctx, &name) else {
                return Ok(());
            };
            // A container's subcommands have flags of their own.
            if container && args.len() > INNER + 1 {
                let mut full = name.clone();
                full.push(b'|');
                full.extend(args.get(INNER + 1).to_ascii_lowercase());
                if let Some((sub, _)) = look_up(ctx, &full) {
                    return sub.map_err(|r| not_in_lock_do(command, r));
                }
            }
            verdict
        }
    };
    verdict.map_err(|refusal| not_in_lock_do(command, refusal))
}

/// `LOCK.DO` may not run `command`, for the reason `refusal` gives.
fn not_in_lock_do(command: &[u8], refusal: Refusal) -> Error {
    Error::NotInLockDo {
        name: command.to_vec(),
        reason: refusal.reason(),
    }
}

/// `COMMAND INFO name`: its verdict (kept for next time, unless it is a container) and
/// whether it has subcommands; `None` for a command the server does not know.
fn look_up(ctx: &Context, name: &[u8]) -> Option<(Result<(), Refusal>, bool)> {
    let reply = ctx.call("COMMAND", &[&b"INFO"[..], name]).ok()?;
    let RedisValue::Array(entries) = reply else {
        return None;
    };
    let RedisValue::Array(entry) = entries.into_iter().next()? else {
        return None;
    };
    let flags: Vec<String> = match entry.get(2) {
        Some(RedisValue::Array(flags)) => flags
            .iter()
            .filter_map(|flag| match flag {
                RedisValue::SimpleString(s) => Some(s.to_ascii_lowercase()),
                RedisValue::BulkString(s) => Some(s.to_ascii_lowercase()),
                RedisValue::StringBuffer(b) => Some(String::from_utf8_lossy(b).to_lowercase()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    let container = matches!(entry.get(9), Some(RedisValue::Array(subs)) if !subs.is_empty());
    let verdict = inner::verdict(name, &flags);
    if !container {
        VERDICTS.with(|v| v.insert(name, verdict));
    }
    Some((verdict, container))
}
