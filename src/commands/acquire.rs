//! `LOCK.ACQUIRE`: parse, decide with the rules, grant, renew or wait, reply.
//!
//! Every argument is validated before the key is opened, so bad input changes nothing.
//! Effects replicate as absolute state (`LOCK._SET` with the token and fence the master
//! chose, `PEXPIREAT` with an absolute time), never as the command itself: a replica or
//! an AOF replay must not invent its own token, fence or clock reading.

use std::sync::atomic::{AtomicU64, Ordering};

use redis_module::{Context, ContextFlags, RedisValue};

use crate::commands::args;
use crate::datatype::LockKey;
use crate::ffi;
use crate::ffi::Reply;
use crate::ffi::command::Args;
use crate::keyspace::renewal::{self, Renewal};
use crate::keyspace::store;
use crate::keyspace::waiting;
use crate::keyspace::waiting::Request;
use crate::keyspace::waiting::held::Undo;
use crate::keyspace::waiting::queues::Answer;
use lock_core::error::Error;
use lock_core::grant::GrantRequest;
use lock_core::key::KeyRef;
use lock_core::lock::{self, Session};
use lock_core::rules::{self, Decision};
use lock_core::stats;
use lock_core::value::LockValue;

/// Hides every `TOKEN` value of an acquire from `SLOWLOG` and `MONITOR`, before any
/// validation: even a rejected command must not leak the token it carried, wherever a
/// malformed command put it. Hiding an argument that only follows the word by chance
/// costs nothing.
pub(super) fn redact_tokens(ctx: &Context, argv: &[&[u8]], from: usize) {
    for (i, arg) in argv.iter().enumerate().skip(from) {
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
pub(super) fn connection_of(ctx: &Context) -> u64 {
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
pub(super) fn session_of(client: u64, grace_ms: Option<i64>) -> Result<Option<Session>, Error> {
    let Some(grace_ms) = grace_ms else {
        return Ok(None);
    };
    if client == 0 {
        return Err(Error::SessionWithoutConnection);
    }
    Ok(Some(Session { grace_ms, client }))
}

/// Holds the reply of a grant (`answer`) of `key` in database `db` until `wait`
/// replicas have it; a shortfall releases it by its token.
fn hold_grant(
    ctx: &Context,
    db: i32,
    key: &[u8],
    answer: Answer,
    wait: lock_core::replicas::Wait,
) -> Reply {
    let token = match &answer {
        Answer::Granted { token, .. } | Answer::GrantedAll { token, .. } => token.to_vec(),
        _ => Vec::new(),
    };
    let undo = Undo {
        db,
        keys: vec![key.to_vec()],
        token,
    };
    waiting::hold_reply(ctx, answer, db, Some(undo), wait)
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
    redact_tokens(ctx, argv, 2);
    if argv.len() < 3 {
        return Err(Error::WrongArity);
    }
    let (options, _) = args::acquire(&argv[2..])?;
    super::check_replicas(ctx, options.replicas)?;
    let client = connection_of(ctx);
    let session = session_of(client, options.grace_ms)?;

    let db = ffi::selected_db(ctx);
    let key = KeyRef::new(db, argv[1]);
    let Some(name) = args.string(1) else {
        return Err(Error::WrongArity);
    };
    let (mut opened, queued) = waiting::open_for_newcomer(ctx, key, &name)?;
    let held = opened.lock()?;
    let mine = options
        .token
        .and_then(|token| held.and_then(|value| value.kind_of(token)));
    let holding = held.and_then(LockValue::holding);
    match rules::decide(holding, mine, options.kind, queued) {
        Decision::Refused(refusal) => Err(Error::Refused(refusal)),
        Decision::Grant => {
            let token = lock::NewToken::for_grant(options.token);
            let request = GrantRequest {
                key,
                token,
                kind: options.kind,
                ttl_ms: options.ttl_ms,
                client,
                session,
                value: options.value,
            };
            let wait = super::replica_wait(ctx, options.replicas, options.ttl_ms);
            // The token is copied only for a reply held for the replicas.
            let (fence, token) = store::grant(ctx, &mut opened, request, |token, fence| {
                if wait.is_none() {
                    ffi::reply_granted(ctx, token, fence);
                    return None;
                }
                Some(Box::<[u8]>::from(token))
            })?;
            waiting::watch_holders(ctx, key, &opened);
            match (wait, token) {
                (Some(wait), Some(token)) => {
                    hold_grant(ctx, db, argv[1], Answer::Granted { token, fence }, wait)
                }
                _ => Ok(RedisValue::NoReply),
            }
        }
        Decision::Renew => {
            let token = options.token.ok_or(Error::RenewWithoutToken)?;
            let renewal = Renewal {
                token,
                kind: options.kind,
                session,
                value: options.value,
                ttl_ms: options.ttl_ms,
                client,
            };
            let (token, fence) = renewal::renew(ctx, &mut opened, key, &renewal)?;
            waiting::renewed(ctx, key, &opened, options.kind);
            match super::replica_wait(ctx, options.replicas, options.ttl_ms) {
                Some(wait) => {
                    let token = Box::<[u8]>::from(&token[..]);
                    hold_grant(ctx, db, argv[1], Answer::Granted { token, fence }, wait)
                }
                None => {
                    ffi::reply_granted(ctx, &token, fence);
                    Ok(RedisValue::NoReply)
                }
            }
        }
        Decision::Busy => {
            stats::CONTENDED.bump();
            // Inside MULTI/EXEC or a script the server forbids blocking; a replica
            // follows its master and grants nothing itself: as if WAIT were absent.
            match options.wait_ms {
                Some(timeout_ms) if super::can_block(ctx) => {
                    let expire_at = opened.expire_at();
                    drop(opened);
                    let request = Request {
                        token: lock::token_buffer(options.token),
                        ttl_ms: options.ttl_ms,
                        session,
                        client,
                        kind: options.kind,
                        value: options.value.map(Box::from),
                        replicas: options.replicas,
                    };
                    waiting::wait(ctx, key, request, timeout_ms, expire_at)
                }
                _ => Ok(RedisValue::Null),
            }
        }
    }
}
