//! `LOCK.ACQUIREALL`: several keys at once, all or none, first come first served on
//! every key.
//!
//! Every argument is validated before a key is opened. Each key is decided by the same
//! rules as `LOCK.ACQUIRE` (`keyspace/all_keys.rs`); if every one fits, all are granted
//! in this command, each replicating as its own grant (one `MULTI`/`EXEC` unit on the
//! replica and in the AOF); else nil, or with `WAIT` one request queued on every key
//! (`keyspace/waiting/`), holding nothing while it waits.

use redis_module::{Context, RedisString, RedisValue};

use crate::commands::args;
use crate::ffi;
use crate::ffi::Reply;
use crate::ffi::call::{self, KeyFlags};
use crate::ffi::command::Args;
use crate::keyspace::all_keys::{self, AllRequest, Verdict};
use crate::keyspace::waiting::held::Undo;
use crate::keyspace::waiting::queues::Answer;
use crate::keyspace::waiting::{self, Request};
use lock_core::error::Error;
use lock_core::key::KeyRef;
use lock_core::limits::MAX_KEYS;
use lock_core::lock::{self, NewToken};
use lock_core::stats;

/// LOCK.ACQUIREALL <numkeys> <key> [key ...] <ttl-ms> [TOKEN <token>] [WAIT <timeout-ms>]
/// [SESSION <grace-ms>] [SHARED]
///
/// Replies `[token, [fence, ...]]` (one fence per key, in the order given) when every
/// key is granted (or renewed, for a key its token holds already), else nil, or waits.
pub fn acquire_all(ctx: &Context, args: &Args) -> Reply {
    if call::keys_requested(ctx) {
        declare_keys(ctx, args);
        return Ok(RedisValue::NoReply);
    }
    super::settled(ctx, run_acquire_all(ctx, args))
}

/// Tells the server where the keys are (`getkeys-api`): cluster routing (`CROSSSLOT`,
/// `MOVED`) asks this way, as it reads no key spec of a module command. A malformed
/// `numkeys` declares none; the command itself then refuses it.
fn declare_keys(ctx: &Context, args: &Args) {
    let argv = args.bytes();
    let Some(count) = argv
        .get(1)
        .and_then(|n| args::integer(n))
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| (1..=MAX_KEYS).contains(n) && n + 2 < argv.len())
    else {
        return;
    };
    for pos in 2..2 + count {
        call::key_at(ctx, pos, KeyFlags::UPDATE);
    }
}

fn run_acquire_all(ctx: &Context, args: &Args) -> Reply {
    let argv = args.bytes();
    super::acquire::redact_tokens(ctx, argv, 2);
    if argv.len() < 4 {
        return Err(Error::WrongArity);
    }
    let (names, options) = args::acquire_all(&argv[1..])?;
    super::check_replicas(ctx, options.replicas)?;
    let client = super::acquire::connection_of(ctx);
    let session = super::acquire::session_of(client, options.grace_ms)?;

    let db = ffi::selected_db(ctx);
    let keys: Vec<KeyRef> = names.iter().map(|name| KeyRef::new(db, name)).collect();
    let strings: Vec<_> = (2..2 + keys.len()).filter_map(|i| args.string(i)).collect();
    let strings: Vec<&RedisString> = strings.iter().map(|name| &**name).collect();
    let request = AllRequest {
        token: NewToken::for_grant(options.token),
        own: options.token,
        kind: options.kind,
        ttl_ms: options.ttl_ms,
        client,
        session,
    };
    let open = |key: KeyRef<'_>, name| waiting::open_for_newcomer(ctx, key, name);
    let (verdict, mut opened) = all_keys::decide(&keys, &strings, &request, open)?;
    match verdict {
        Verdict::Fits(decisions) => {
            let granted = all_keys::grant(ctx, &keys, &mut opened, &decisions, &request);
            waiting::all_renewed(ctx, &keys, &opened, &decisions, request.kind);
            let (token, fences) = granted?;
            match super::replica_wait(ctx, options.replicas, options.ttl_ms) {
                Some(wait) => {
                    let undo = Undo {
                        db,
                        keys: names.iter().map(|name| name.to_vec()).collect(),
                        token: token.to_vec(),
                    };
                    let answer = Answer::GrantedAll { token, fences };
                    waiting::hold_reply(ctx, answer, db, Some(undo), wait)
                }
                None => {
                    ffi::reply_granted_all(ctx, &token, &fences);
                    Ok(RedisValue::NoReply)
                }
            }
        }
        Verdict::Busy(deadlines) => {
            drop(opened);
            stats::CONTENDED.bump();
            match options.wait_ms {
                Some(timeout_ms) if super::can_block(ctx) => {
                    let request = Request {
                        token: lock::token_buffer(options.token),
                        ttl_ms: options.ttl_ms,
                        session,
                        client,
                        kind: options.kind,
                        value: None,
                        replicas: options.replicas,
                    };
                    waiting::wait_all(ctx, &keys, &deadlines, request, timeout_ms)
                }
                _ => Ok(RedisValue::Null),
            }
        }
    }
}
