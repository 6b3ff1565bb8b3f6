//! `LOCK.ACQUIRE`: parse, decide with the rules, grant, renew or wait, reply.
//!
//! Every argument is validated before the key is opened, so bad input changes nothing.
//! Effects replicate as absolute state (`LOCK._SET` with the token and fence the master
//! chose, `PEXPIREAT` with an absolute time), never as the command itself: a replica or
//! an AOF replay must not invent its own token, fence or clock reading.

use std::sync::atomic::{AtomicU64, Ordering};

use redis_module::{Context, ContextFlags, RedisValue};

use crate::commands::args;
use crate::commands::extend::set_ttl;
use crate::datatype::LockKey;
use crate::ffi::Reply;
use crate::ffi::command::Args;
use crate::ffi::{self, Key};
use crate::keyspace::session;
use crate::keyspace::store::{self, EVENT_ACQUIRE};
use crate::keyspace::waiting;
use crate::keyspace::waiting::Request;
use crate::state::error::Error;
use crate::state::grant::GrantRequest;
use crate::state::key::KeyRef;
use crate::state::lock::{self, Session};
use crate::state::rules::{self, Decision, Kind};
use crate::state::stats;
use crate::state::value::LockValue;

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

/// The `CLIENT ID` of the caller's connection (the one that ran `EXEC`, inside a
/// transaction); 0 inside a script or function, where the module API does not name the
/// client that ran it.
fn connection_of(ctx: &Context) -> u64 {
    // A script runs on a client of the server's own (on Valkey 9.1 one that exists only
    // while it runs), never the caller's connection.
    let client = ffi::client_id(ctx);
    if client != 0 && client != LAST_CONNECTION.load(Ordering::Relaxed) {
        if ctx.get_flags().contains(ContextFlags::LUA) {
            return 0;
        }
        LAST_CONNECTION.store(client, Ordering::Relaxed);
    }
    client
}

/// The binding that `SESSION grace-ms` asks for: to the caller's connection `client`.
/// Refused inside a script or function (`client` 0).
fn session_of(client: u64, grace_ms: Option<i64>) -> Result<Option<Session>, Error> {
    let Some(grace_ms) = grace_ms else {
        return Ok(None);
    };
    if client == 0 {
        return Err(Error::SessionWithoutConnection);
    }
    Ok(Some(Session { grace_ms, client }))
}

/// LOCK.ACQUIRE <key> <ttl-ms> [TOKEN <token>] [WAIT <timeout-ms>] [SESSION <grace-ms>]
/// [SHARED] [LIMIT <n>]
///
/// Decides with the rules (`rules.rs`): grants a place that fits (reply `[token,
/// fence]`), renews it for the token that holds it (same fence, TTL reset, bound anew),
/// refuses a kind or limit that disagrees with the holders, and otherwise answers nil at
/// once or, with `WAIT`, blocks the client in the key's first-come-first-served queue
/// (`blocking.rs`), where the handoff (`handoff.rs`) grants it when its turn comes.
pub fn acquire(ctx: &Context, args: &Args) -> Reply {
    super::settled(ctx, run_acquire(ctx, args))
}

fn run_acquire(ctx: &Context, args: &Args) -> Reply {
    let argv = args.bytes();
    redact_acquire_tokens(ctx, argv);
    if argv.len() < 3 {
        return Err(Error::WrongArity);
    }
    let (options, _) = args::acquire(&argv[2..])?;
    let client = connection_of(ctx);
    let session = session_of(client, options.grace_ms)?;

    let db = ffi::selected_db(ctx);
    let at = KeyRef::new(db, argv[1]);
    let mut queued = waiting::queued(at);
    let name = args.string(1).ok_or(Error::WrongArity)?;
    let mut key = Key::open_write(ctx, &name);
    let expired = store::expire_holders(ctx, &mut key)?;
    if queued && (expired > 0 || !matches!(key.lock()?, Some(LockValue::Exclusive(_)))) {
        // Free or shared, yet clients wait for it (its handoff is due from a timer on a
        // server without post-notification jobs, or its removal reached no callback):
        // theirs first, now, before this newcomer is considered.
        drop(key);
        waiting::handoff(ctx, at);
        queued = waiting::queued(at);
        key = Key::open_write(ctx, &name);
    }
    let held = key.lock()?;
    let mine = options
        .token
        .and_then(|token| held.and_then(|value| value.kind_of(token)));
    let holding = held.and_then(LockValue::holding);
    match rules::decide(holding, mine, options.kind, queued) {
        Decision::Refused(refusal) => Err(Error::Refused(refusal)),
        Decision::Grant => {
            let token = lock::NewToken::for_grant(options.token);
            let request = GrantRequest {
                key: at,
                token,
                kind: options.kind,
                ttl_ms: options.ttl_ms,
                client,
                session,
                value: options.value,
            };
            store::grant(ctx, &mut key, request, |token, fence| {
                ffi::reply_granted(ctx, token, fence)
            })?;
            waiting::watch_holders(ctx, at, &key);
            Ok(RedisValue::NoReply)
        }
        Decision::Renew => {
            let token = options.token.ok_or(Error::RenewWithoutToken)?;
            if matches!(options.kind, Kind::Shared { .. }) {
                renew_holder(ctx, &mut key, (db, argv[1]), token, session, options.ttl_ms)?;
            } else {
                renew(
                    ctx,
                    &mut key,
                    (db, argv[1]),
                    (session, options.value),
                    options.ttl_ms,
                )?;
            }
            held_by(&mut key, token, client)?;
            let lock = key
                .lock()?
                .and_then(|value| value.lock_of(token))
                .ok_or(Error::VanishedWhileRenewing)?;
            ffi::notify(ctx, EVENT_ACQUIRE, key.name());
            ffi::reply_granted(ctx, &lock.token(), lock.fence());
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
                    let request = Request {
                        token: lock::token_buffer(options.token),
                        ttl_ms: options.ttl_ms,
                        session,
                        client,
                        kind: options.kind,
                        value: options.value.map(Box::from),
                    };
                    waiting::wait(ctx, at, request, timeout_ms, expire_at)
                }
                _ => Ok(RedisValue::Null),
            }
        }
    }
}

/// Records that the connection `client` holds `token`'s lock on `key` now (a re-acquire
/// from another connection: `LOCK.HOLDERS` names the one to look at). Inside a script
/// (`client` 0) the connection that had it stays named.
fn held_by(key: &mut Key, token: &[u8], client: u64) -> Result<(), Error> {
    let named = key.lock()?.and_then(|value| value.lock_of(token));
    if client == 0 || named.is_none_or(|lock| lock.client() == client) {
        return Ok(());
    }
    if let Some(lock) = key.lock_mut()?.and_then(|value| value.lock_of_mut(token)) {
        lock.set_client(client);
    }
    Ok(())
}

/// The idempotent re-acquire of an exclusive lock: its TTL is reset; if it was or asks
/// to be session-bound, it is bound anew; a new `VALUE` replaces the published one
/// (without `VALUE` it is kept).
fn renew(
    ctx: &Context,
    key: &mut Key,
    at: (i32, &[u8]),
    (session, value): (Option<Session>, Option<&[u8]>),
    ttl_ms: i64,
) -> Result<(), Error> {
    let (was_bound, new_value) = match key.lock()? {
        Some(LockValue::Exclusive(lock)) => (
            lock.session(),
            value.filter(|value| lock.value() != Some(*value)),
        ),
        _ => (None, None),
    };
    if was_bound.is_none() && session.is_none() && new_value.is_none() {
        set_ttl(ctx, key, ttl_ms)
    } else {
        rebind(ctx, key, at, (was_bound, session), new_value, ttl_ms)
    }
}

/// The idempotent re-acquire of a shared holder: its own TTL is reset and its binding
/// replaced (or removed) as for an exclusive lock; the key's expiry follows its
/// longest-lived holder.
fn renew_holder(
    ctx: &Context,
    key: &mut Key,
    (db, name): (i32, &[u8]),
    token: &[u8],
    session: Option<Session>,
    ttl_ms: i64,
) -> Result<(), Error> {
    let expire_at = ffi::now_ms().saturating_add(ttl_ms);
    let was = store::update_holder(ctx, key, token, expire_at, Some(session))?;
    if let Some(Some(old)) = was {
        // Other holders of the key bound to the same connection keep their grace.
        let others = key.lock()?.is_some_and(|value| value.bound_to(old.client));
        session::unbind(KeyRef::new(db, name), &old, !others);
    }
    if let Some(new) = &session {
        store::bind(KeyRef::new(db, name), new.client, new.grace_ms);
    }
    waiting::watch_holders(ctx, KeyRef::new(db, name), key);
    Ok(())
}

/// The idempotent re-acquire of a session-bound lock, or one that asks to be, or that
/// publishes a new value: the lock leaves its old binding (ending its grace, if one ran:
/// a reclaim), takes the new one (or none), publishes `new_value` if given, and its TTL
/// is reset. The whole state replicates, binding and value included.
fn rebind(
    ctx: &Context,
    key: &mut Key,
    (db, name): (i32, &[u8]),
    (was_bound, session): (Option<Session>, Option<Session>),
    new_value: Option<&[u8]>,
    ttl_ms: i64,
) -> Result<(), Error> {
    // The lock changes first: if the key cannot be written, the registry still tells
    // where the binding is.
    if let Some(LockValue::Exclusive(lock)) = key.lock_mut()? {
        lock.set_session(session);
        if new_value.is_some() {
            lock.set_value(new_value);
        }
    }
    if let Some(old) = &was_bound {
        session::unbind(KeyRef::new(db, name), old, true);
    }
    if let Some(new) = &session {
        store::bind(KeyRef::new(db, name), new.client, new.grace_ms);
    }
    let expire_at = ffi::now_ms().saturating_add(ttl_ms);
    key.set_expire_at(Some(expire_at))?;
    let Some(LockValue::Exclusive(lock)) = key.lock()? else {
        return Err(Error::VanishedWhileRenewing);
    };
    store::replicate(ctx, key, lock, &lock.token(), expire_at);
    waiting::deadline_moved(ctx, KeyRef::new(db, name), Some(expire_at));
    Ok(())
}
