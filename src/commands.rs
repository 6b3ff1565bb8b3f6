//! One function per command: parse, check, apply, reply, replicate.
//!
//! Every argument is validated before the key is opened, so bad input changes nothing.
//! Effects replicate as absolute state (`LOCK._SET` with the token and fence the master
//! chose, `PEXPIREAT` with an absolute time, `DEL`), never as the command itself: a
//! replica or an AOF replay must not invent its own token, fence or clock reading.

use std::ffi::CStr;

use redis_module::{Context, ContextFlags, RedisError, RedisResult, RedisString, RedisValue};

use crate::args;
use crate::error;
use crate::fence;
use crate::ffi::{self, Key};
use crate::lock::{self, AcquireDecision, LockState};
use crate::stats;
use crate::waiters;

/// Keyspace events, in the module class (`notify-keyspace-events` with `d`).
pub const EVENT_ACQUIRE: &CStr = c"lock.acquire";
/// Fired when the holder releases the lock.
pub const EVENT_RELEASE: &CStr = c"lock.release";
/// Fired when the holder extends the lock.
pub const EVENT_EXTEND: &CStr = c"lock.extend";

fn bytes(args: &[RedisString]) -> Vec<&[u8]> {
    args.iter().map(RedisString::as_slice).collect()
}

/// Hides every `TOKEN` value of an acquire from `SLOWLOG` and `MONITOR`, before any
/// validation: even a rejected command must not leak the token it carried, wherever a
/// malformed command put it. Hiding an argument that only follows the word by chance
/// costs nothing.
fn redact_acquire_tokens(ctx: &Context, argv: &[&[u8]]) {
    for (i, arg) in argv.iter().enumerate().skip(2) {
        if arg.eq_ignore_ascii_case(b"TOKEN") && i + 1 < argv.len() {
            ffi::redact(ctx, i + 1);
        }
    }
}

/// LOCK.ACQUIRE <key> <ttl-ms> [TOKEN <token>] [WAIT <timeout-ms>]
///
/// Grants a free lock (reply `[token, fence]`), renews it for the token that holds it
/// (same fence, TTL reset), and otherwise answers nil at once or, with `WAIT`, blocks
/// the client in the key's first-come-first-served queue.
pub fn acquire(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let argv = bytes(&args);
    redact_acquire_tokens(ctx, &argv);
    if argv.len() < 3 {
        return Err(RedisError::WrongArity);
    }
    let (options, _) = args::acquire(&argv[2..])?;

    let key = Key::open_write(ctx, &args[1]);
    let held = key.lock()?;
    let db = ffi::selected_db(ctx);
    let queued = waiters::queued(db, argv[1]);
    match lock::decide(held, options.token, queued) {
        AcquireDecision::Grant => {
            let token = options.token.map_or_else(lock::new_token, <[u8]>::to_vec);
            grant(ctx, &key, token.into_boxed_slice(), options.ttl_ms)
        }
        AcquireDecision::Renew => {
            let lock = held.ok_or(RedisError::Str("ERR lock vanished while renewing"))?;
            set_ttl(ctx, &key, options.ttl_ms)?;
            ffi::notify(ctx, EVENT_ACQUIRE, key.name());
            ffi::reply_granted(ctx, &lock.token, lock.fence);
            Ok(RedisValue::NoReply)
        }
        AcquireDecision::Busy => {
            stats::CONTENDED.bump();
            let free = held.is_none();
            let expire_at = key.expire_at();
            drop(key);
            if free {
                // Free, yet waiters are queued (its grant is due from a timer, or came
                // from a change the server sent no event for): theirs first, now.
                waiters::grant_next(ctx, db, argv[1]);
            }
            let can_block = !ctx.get_flags().contains(ContextFlags::DENY_BLOCKING);
            match options.wait_ms {
                Some(timeout_ms) if can_block => {
                    // The deadline of the lock waited for: the new holder's if it was
                    // just granted above.
                    let expire_at = if free {
                        Key::open_read(ctx, &args[1]).expire_at()
                    } else {
                        expire_at
                    };
                    let token = options.token.map_or_else(lock::new_token, <[u8]>::to_vec);
                    let ttl_ms = options.ttl_ms;
                    waiters::wait(ctx, db, &args[1], token, ttl_ms, timeout_ms, expire_at)
                }
                _ => Ok(RedisValue::Null),
            }
        }
    }
}

/// Grants the free lock `key` to `token` for `ttl_ms`: a new fence, the key's expiry,
/// replication of the absolute state, the `lock.acquire` event, the `[token, fence]`
/// reply. Used by a direct acquire and by the grant to a waiter.
pub fn grant(ctx: &Context, key: &Key, token: Box<[u8]>, ttl_ms: i64) -> RedisResult {
    let now = ffi::now_ms();
    let fence = fence::clock()
        .next(now)
        .ok_or_else(error::fence_exhausted)?;
    let expire_at = now.saturating_add(ttl_ms);
    key.set_lock(
        LockState {
            token,
            fence,
            acquired_ms: now,
        },
        Some(expire_at),
    )?;
    let lock = key
        .lock()?
        .ok_or(RedisError::Str("ERR lock vanished while granting"))?;
    ffi::replicate_lock_set(ctx, key.name(), &lock.token, fence, now, expire_at);
    ffi::notify(ctx, EVENT_ACQUIRE, key.name());
    stats::GRANTS.bump();
    ffi::reply_granted(ctx, &lock.token, fence);
    Ok(RedisValue::NoReply)
}

/// Sets the lock's remaining time to `ttl_ms` from now, replicates the absolute expiry
/// and moves the waiters' hand-over to the new deadline.
fn set_ttl(ctx: &Context, key: &Key, ttl_ms: i64) -> Result<(), RedisError> {
    let expire_at = ffi::now_ms().saturating_add(ttl_ms);
    key.set_expire_at(Some(expire_at))?;
    ffi::replicate_pexpireat(ctx, key.name(), expire_at);
    waiters::deadline_moved(
        ctx,
        ffi::selected_db(ctx),
        key.name().as_slice(),
        Some(expire_at),
    );
    Ok(())
}

/// LOCK.RELEASE <key> <token>
///
/// Deletes the lock if, and only if, `token` holds it: `1` released, `0` not held by
/// this token. The next waiter, if any, is granted the lock at once.
pub fn release(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if args.len() > 2 {
        ffi::redact(ctx, 2);
    }
    if args.len() != 3 {
        return Err(RedisError::WrongArity);
    }
    let token = args::token(args[2].as_slice())?;

    let key = Key::open_write(ctx, &args[1]);
    if !lock::is_held_by(key.lock()?, token) {
        return Ok(RedisValue::Integer(0));
    }
    waiters::releasing(|| key.delete());
    ffi::replicate_del(ctx, key.name());
    ffi::notify(ctx, EVENT_RELEASE, key.name());
    stats::RELEASES.bump();
    drop(key);
    waiters::grant_next(ctx, ffi::selected_db(ctx), args[1].as_slice());
    Ok(RedisValue::Integer(1))
}

/// LOCK.EXTEND <key> <token> <ttl-ms>
///
/// If `token` holds the lock, sets its remaining time to `ttl-ms` from now: `1`
/// extended, `0` not held by this token.
pub fn extend(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if args.len() > 2 {
        ffi::redact(ctx, 2);
    }
    if args.len() != 4 {
        return Err(RedisError::WrongArity);
    }
    let token = args::token(args[2].as_slice())?;
    let ttl_ms = args::ttl(args[3].as_slice())?;

    let key = Key::open_write(ctx, &args[1]);
    if !lock::is_held_by(key.lock()?, token) {
        return Ok(RedisValue::Integer(0));
    }
    set_ttl(ctx, &key, ttl_ms)?;
    ffi::notify(ctx, EVENT_EXTEND, key.name());
    stats::EXTENDS.bump();
    Ok(RedisValue::Integer(1))
}

/// LOCK.INFO <key>
///
/// Nil when the key does not exist; otherwise the fields `ttl`, `fence`, `acquired` and
/// `waiters` (a map in RESP3, a flat field/value array in RESP2). Never the token.
pub fn info(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if args.len() != 2 {
        return Err(RedisError::WrongArity);
    }
    let key = Key::open_read(ctx, &args[1]);
    let Some(lock) = key.lock()? else {
        return Ok(RedisValue::Null);
    };
    let ttl = key
        .expire_at()
        .map_or(-1, |at| at.saturating_sub(ffi::now_ms()).max(0));
    let waiting = waiters::count(ffi::selected_db(ctx), args[1].as_slice());
    ffi::reply_map(
        ctx,
        &[
            ("ttl", ttl),
            ("fence", lock.fence as i64),
            ("acquired", lock.acquired_ms),
            ("waiters", waiting as i64),
        ],
    );
    Ok(RedisValue::NoReply)
}

/// LOCK._SET <key> <token> <fence> <acquired-ms> <expire-at-ms | -1>
///
/// Internal: the replicated effect of a grant. Sets the lock to exactly this state and
/// raises the fencing clock to the fence, so a promoted replica never grants a smaller
/// one. Accepted only from the master link and while loading the AOF.
pub fn set_internal(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if args.len() > 2 {
        ffi::redact(ctx, 2);
    }
    let flags = ctx.get_flags();
    if !flags.intersects(ContextFlags::REPLICATED | ContextFlags::LOADING) {
        return Err(error::internal_command());
    }
    if args.len() != 6 {
        return Err(RedisError::WrongArity);
    }
    let token: Box<[u8]> = args::token(args[2].as_slice())?.into();
    let number = |i: usize, what: &str| -> Result<i64, RedisError> {
        args[i]
            .parse_integer()
            .map_err(|_| error::invalid_internal(what))
    };
    let fence = u64::try_from(number(3, "fence")?)
        .ok()
        .filter(|f| (1..=fence::MAX_FENCE).contains(f))
        .ok_or_else(|| error::invalid_internal("fence"))?;
    let acquired_ms = number(4, "acquired-ms")?;
    let expire_at = match number(5, "expire-at-ms")? {
        -1 => None,
        at if at >= 0 => Some(at),
        _ => return Err(error::invalid_internal("expire-at-ms")),
    };

    let key = Key::open_write(ctx, &args[1]);
    key.set_lock(
        LockState {
            token,
            fence,
            acquired_ms,
        },
        expire_at,
    )?;
    fence::clock().observe(fence);
    // A replica's own AOF and its sub-replicas need the same absolute state.
    ctx.replicate_verbatim();
    Ok(RedisValue::SimpleStringStatic("OK"))
}

/// LOCK.DEBUG PANIC
///
/// Panics inside a command, to prove that the guard turns it into an error reply and
/// the server keeps running. Refused unless the server allows debugging commands.
pub fn debug(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if args.len() != 2 {
        return Err(RedisError::WrongArity);
    }
    let setting = ctx.call("CONFIG", &["GET", "enable-debug-command"])?;
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
        return Err(error::debug_disabled());
    }
    if args[1].as_slice().eq_ignore_ascii_case(b"PANIC") {
        panic!("LOCK.DEBUG PANIC: a deliberate panic to test the guard");
    }
    Err(error::unknown_debug_subcommand(args[1].as_slice()))
}
