//! One function per command: parse, check, apply, reply, replicate.
//!
//! Every argument is validated before the key is opened, so bad input changes nothing.
//! Effects replicate as absolute state (`LOCK._SET` with the token and fence the master
//! chose, `PEXPIREAT` with an absolute time, `DEL`), never as the command itself: a
//! replica or an AOF replay must not invent its own token, fence or clock reading.

use std::sync::atomic::{AtomicU64, Ordering};

use redis_module::{Context, ContextFlags, RedisError, RedisResult, RedisValue};

use crate::args;
use crate::blocking;
use crate::datatype::LockKey;
use crate::error;
use crate::events;
use crate::fence;
use crate::ffi::command::Args;
use crate::ffi::{self, Key};
use crate::handoff;
use crate::lock::{self, LockState, Session};
use crate::rules::{self, Decision, Holding, Kind};
use crate::session;
use crate::stats;
use crate::store::{self, EVENT_ACQUIRE, EVENT_EXTEND, EVENT_RELEASE};

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

/// The last client found to be a connection, not a script's own client: its next
/// commands skip the check, which is a tenth of the cost of binding. (The server never
/// reuses an id, and a script's client is never the connection that ran it. A plain
/// static: the server runs commands on its main thread only.)
static LAST_CONNECTION: AtomicU64 = AtomicU64::new(0);

/// The binding that `SESSION grace-ms` asks for: to the caller's connection (the one
/// that ran `EXEC`, inside a transaction). Refused inside a script or function, where the
/// module API does not name the client that ran it.
fn session_of(ctx: &Context, grace_ms: Option<i64>) -> Result<Option<Session>, RedisError> {
    let Some(grace_ms) = grace_ms else {
        return Ok(None);
    };
    // A script runs on a client of the server's own (on Valkey 9.1 one that exists only
    // while it runs), never the caller's connection.
    let client = ffi::client_id(ctx);
    if client == 0 {
        return Err(error::session_without_connection());
    }
    if client != LAST_CONNECTION.load(Ordering::Relaxed) {
        if ctx.get_flags().contains(ContextFlags::LUA) {
            return Err(error::session_without_connection());
        }
        LAST_CONNECTION.store(client, Ordering::Relaxed);
    }
    Ok(Some(Session { grace_ms, client }))
}

/// LOCK.ACQUIRE <key> <ttl-ms> [TOKEN <token>] [WAIT <timeout-ms>] [SESSION <grace-ms>]
///
/// Grants a free lock (reply `[token, fence]`), renews it for the token that holds it
/// (same fence, TTL reset, bound anew), and otherwise answers nil at once or, with
/// `WAIT`, blocks the client in the key's first-come-first-served queue (`blocking.rs`),
/// where the handoff (`handoff.rs`) grants it the lock when its turn comes.
pub fn acquire(ctx: &Context, args: &Args) -> RedisResult {
    let argv = args.bytes();
    redact_acquire_tokens(ctx, argv);
    if argv.len() < 3 {
        return Err(RedisError::WrongArity);
    }
    let (options, _) = args::acquire(&argv[2..])?;
    let session = session_of(ctx, options.grace_ms)?;

    let db = ffi::selected_db(ctx);
    let mut queued = blocking::queued(db, argv[1]);
    let name = args.string(1).ok_or(RedisError::WrongArity)?;
    let mut key = Key::open_write(ctx, &name);
    if queued && key.lock()?.is_none() {
        // Free, yet clients wait for it (its handoff is due from a timer on a server
        // without post-notification jobs, or its removal reached no callback): theirs
        // first, now, before this newcomer is considered.
        drop(key);
        handoff::handoff(ctx, db, argv[1]);
        queued = blocking::queued(db, argv[1]);
        key = Key::open_write(ctx, &name);
    }
    let held = key.lock()?;
    let mine = held
        .filter(|lock| options.token == Some(lock.token()))
        .map(|_| Kind::Exclusive);
    let holding = held.map(|_| Holding::EXCLUSIVE);
    match rules::decide(holding, mine, Kind::Exclusive, queued) {
        Decision::Refused(refusal) => Err(error::refused(refusal)),
        Decision::Grant => {
            let token = lock::token_buffer(options.token, session.is_some());
            let (fence, _) =
                store::grant(ctx, &key, (db, argv[1]), token, options.ttl_ms, session)?;
            let lock = key
                .lock()?
                .ok_or(RedisError::Str("ERR lock vanished while granting"))?;
            ffi::reply_granted(ctx, lock.token(), fence);
            Ok(RedisValue::NoReply)
        }
        Decision::Renew => {
            let was_bound = held.and_then(LockState::session);
            if was_bound.is_none() && session.is_none() {
                set_ttl(ctx, &key, options.ttl_ms)?;
            } else {
                rebind(
                    ctx,
                    &mut key,
                    (db, argv[1]),
                    was_bound,
                    session,
                    options.ttl_ms,
                )?;
            }
            let lock = key
                .lock()?
                .ok_or(RedisError::Str("ERR lock vanished while renewing"))?;
            ffi::notify(ctx, EVENT_ACQUIRE, key.name());
            ffi::reply_granted(ctx, lock.token(), lock.fence());
            Ok(RedisValue::NoReply)
        }
        Decision::Busy => {
            stats::CONTENDED.bump();
            // Inside MULTI/EXEC or a script the server forbids blocking; a replica
            // follows its master and grants nothing itself: as if WAIT were absent.
            let can_block =
                !ctx.get_flags().contains(ContextFlags::DENY_BLOCKING) && !ffi::is_replica(ctx);
            match options.wait_ms {
                Some(timeout_ms) if can_block => {
                    let expire_at = key.expire_at();
                    drop(key);
                    let token = lock::token_buffer(options.token, session.is_some());
                    blocking::wait(ctx, db, argv[1], token, options.ttl_ms, timeout_ms, session)?;
                    handoff::waiting_for(ctx, db, argv[1], expire_at);
                    Ok(RedisValue::NoReply)
                }
                _ => Ok(RedisValue::Null),
            }
        }
    }
}

/// The idempotent re-acquire of a session-bound lock, or one that asks to be: the lock
/// leaves its old binding (ending its grace, if one ran: a reclaim), takes the new one
/// (or none), and its TTL is reset. The whole state replicates, binding included.
fn rebind(
    ctx: &Context,
    key: &mut Key,
    (db, name): (i32, &[u8]),
    was_bound: Option<Session>,
    session: Option<Session>,
    ttl_ms: i64,
) -> Result<(), RedisError> {
    if let Some(old) = &was_bound {
        session::unbind(ctx, db, name, old);
    }
    if let Some(lock) = key.lock_mut()? {
        lock.set_session(session);
    }
    if let Some(new) = &session {
        store::bind(db, name, new.client, new.grace_ms);
    }
    let expire_at = ffi::now_ms().saturating_add(ttl_ms);
    key.set_expire_at(Some(expire_at))?;
    let lock = key
        .lock()?
        .ok_or(RedisError::Str("ERR lock vanished while renewing"))?;
    store::replicate(ctx, key, lock, expire_at);
    handoff::deadline_moved(ctx, db, name, Some(expire_at));
    Ok(())
}

/// Sets the lock's remaining time to `ttl_ms` from now, replicates the absolute expiry
/// and moves the waiters' hand-over to the new deadline.
fn set_ttl(ctx: &Context, key: &Key, ttl_ms: i64) -> Result<(), RedisError> {
    let expire_at = ffi::now_ms().saturating_add(ttl_ms);
    key.set_expire_at(Some(expire_at))?;
    ffi::replicate_pexpireat(ctx, key.name(), expire_at);
    handoff::deadline_moved(
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
pub fn release(ctx: &Context, args: &Args) -> RedisResult {
    if args.len() > 2 {
        ffi::redact(ctx, 2);
    }
    if args.len() != 3 {
        return Err(RedisError::WrongArity);
    }
    let token = args::token(args.get(2))?;

    let name = args.string(1).ok_or(RedisError::WrongArity)?;
    let key = Key::open_write(ctx, &name);
    if !lock::is_held_by(key.lock()?, token) {
        return Ok(RedisValue::Integer(0));
    }
    events::releasing(|| key.delete());
    ffi::replicate_del(ctx, key.name());
    ffi::notify(ctx, EVENT_RELEASE, key.name());
    stats::RELEASES.bump();
    drop(key);
    handoff::handoff(ctx, ffi::selected_db(ctx), args.get(1));
    Ok(RedisValue::Integer(1))
}

/// LOCK.EXTEND <key> <token> <ttl-ms>
///
/// If `token` holds the lock, sets its remaining time to `ttl-ms` from now: `1`
/// extended, `0` not held by this token.
pub fn extend(ctx: &Context, args: &Args) -> RedisResult {
    if args.len() > 2 {
        ffi::redact(ctx, 2);
    }
    if args.len() != 4 {
        return Err(RedisError::WrongArity);
    }
    let token = args::token(args.get(2))?;
    let ttl_ms = args::ttl(args.get(3))?;

    let name = args.string(1).ok_or(RedisError::WrongArity)?;
    let key = Key::open_write(ctx, &name);
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
/// Nil when the key does not exist; otherwise the fields `ttl`, `fence`, `acquired`,
/// `waiters`, `session` (the grace, -1 when not bound) and `connected` (1 while the bound
/// connection is open, 0 while the grace runs, -1 when not bound): a map in RESP3, a flat
/// field/value array in RESP2. Never the token.
pub fn info(ctx: &Context, args: &Args) -> RedisResult {
    if args.len() != 2 {
        return Err(RedisError::WrongArity);
    }
    let name = args.string(1).ok_or(RedisError::WrongArity)?;
    let key = Key::open_read(ctx, &name);
    let Some(lock) = key.lock()? else {
        return Ok(RedisValue::Null);
    };
    let ttl = key
        .expire_at()
        .map_or(-1, |at| at.saturating_sub(ffi::now_ms()).max(0));
    let waiting = blocking::count(ffi::selected_db(ctx), args.get(1));
    let (grace, connected) = match lock.session() {
        None => (-1, -1),
        Some(session) => (
            session.grace_ms,
            i64::from(ffi::client_connected(session.client)),
        ),
    };
    ffi::reply_map(
        ctx,
        &[
            ("ttl", ttl),
            ("fence", lock.fence() as i64),
            ("acquired", lock.acquired_ms()),
            ("waiters", waiting as i64),
            ("session", grace),
            ("connected", connected),
        ],
    );
    Ok(RedisValue::NoReply)
}

/// LOCK._SET <key> <token> <fence> <acquired-ms> <expire-at-ms | -1> [grace-ms]
///
/// Internal: the replicated effect of a grant. Sets the lock to exactly this state and
/// raises the fencing clock to the fence, so a promoted replica never grants a smaller
/// one. With `grace-ms` the lock is session-bound, to no connection here: its grace
/// starts when this server serves it. Accepted only from the master link and while
/// loading the AOF.
pub fn set_internal(ctx: &Context, args: &Args) -> RedisResult {
    if args.len() > 2 {
        ffi::redact(ctx, 2);
    }
    let flags = ctx.get_flags();
    if !flags.intersects(ContextFlags::REPLICATED | ContextFlags::LOADING) {
        return Err(error::internal_command());
    }
    if !(6..=7).contains(&args.len()) {
        return Err(RedisError::WrongArity);
    }
    let token = args::token(args.get(2))?.to_vec();
    let number = |i: usize, what: &str| -> Result<i64, RedisError> {
        args::integer(args.get(i)).ok_or_else(|| error::invalid_internal(what))
    };
    let fence = u64::try_from(number(3, "fence")?)
        .ok()
        .filter(|f| (1..=fence::MAX_FENCE).contains(f))
        .ok_or_else(|| error::invalid_internal("fence"))?;
    let acquired_ms = number(4, "acquired-ms")?;
    if !lock::in_contract(&token, fence, acquired_ms) {
        return Err(error::invalid_internal("acquired-ms"));
    }
    let expire_at = match number(5, "expire-at-ms")? {
        -1 => None,
        at if at >= 0 => Some(at),
        _ => return Err(error::invalid_internal("expire-at-ms")),
    };
    let session = match args.bytes().get(6) {
        None => None,
        Some(grace) => Some(Session {
            grace_ms: args::grace(grace).map_err(|_| error::invalid_internal("grace-ms"))?,
            client: 0,
        }),
    };

    let name = args.string(1).ok_or(RedisError::WrongArity)?;
    let key = Key::open_write(ctx, &name);
    key.set_lock(
        LockState::new(token, fence, acquired_ms, session),
        expire_at,
    )?;
    if let Some(session) = session {
        session::arrived(ffi::selected_db(ctx), key.name().as_slice(), session);
    }
    fence::clock().observe(fence);
    // A replica's own AOF and its sub-replicas need the same absolute state.
    ctx.replicate_verbatim();
    Ok(RedisValue::SimpleStringStatic("OK"))
}

/// LOCK.DEBUG PANIC
///
/// Panics inside a command, to prove that the guard turns it into an error reply and
/// the server keeps running. Refused unless the server allows debugging commands.
pub fn debug(ctx: &Context, args: &Args) -> RedisResult {
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
    if args.get(1).eq_ignore_ascii_case(b"PANIC") {
        panic!("LOCK.DEBUG PANIC: a deliberate panic to test the guard");
    }
    Err(error::unknown_debug_subcommand(args.get(1)))
}
