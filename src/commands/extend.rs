//! `LOCK.EXTEND`: a holder's new deadline.

use redis_module::{Context, RedisValue};

use crate::commands::args;
use crate::datatype::LockKey;
use crate::ffi;
use crate::ffi::Reply;
use crate::ffi::command::Args;
use crate::keyspace::renewal;
use crate::keyspace::store::{self, EVENT_EXTEND};
use crate::keyspace::waiting;
use crate::keyspace::waiting::queues::Answer;
use lock_core::error::Error;
use lock_core::key::KeyRef;
use lock_core::stats;
use lock_core::value::LockValue;

/// LOCK.EXTEND <key> <token> <ttl-ms> [REPLICAS <n> [REPLTIMEOUT <ms>]]
///
/// If `token` holds the lock (or a shared place in it), sets its remaining time to
/// `ttl-ms` from now: `1` extended, `0` not held by this token. With replicas to wait
/// for, the `1` is held until they have the extend; a shortfall keeps the lock and
/// answers `NOTREPLICATED`.
pub fn extend(ctx: &Context, args: &Args) -> Reply {
    super::settled(ctx, run_extend(ctx, args))
}

fn run_extend(ctx: &Context, args: &Args) -> Reply {
    if args.len() > 2 {
        ffi::redact(ctx, 2);
    }
    if args.len() < 4 {
        return Err(Error::WrongArity);
    }
    let token = args::token(args.get(2))?;
    let ttl_ms = args::ttl(args.get(3))?;
    let asked = args::extend(&args.bytes()[4..])?;
    super::check_replicas(ctx, asked)?;

    let db = ffi::selected_db(ctx);
    let key = KeyRef::new(db, args.get(1));
    let name = args.string(1).ok_or(Error::WrongArity)?;
    let mut opened = super::open_served(ctx, db, &name, args.get(1))?;
    let expired = store::expire_holders(ctx, &mut opened)?;
    let extended = match opened.lock()? {
        Some(LockValue::Exclusive(lock)) if lock.holds(token) => {
            renewal::set_ttl(ctx, &opened, ttl_ms)?;
            waiting::deadline_moved(ctx, key, opened.expire_at());
            true
        }
        Some(LockValue::Shared(_)) => {
            let expire_at = ffi::now_ms().saturating_add(ttl_ms);
            store::update_holder(ctx, &mut opened, token, expire_at, None)?.is_some()
        }
        _ => false,
    };
    if extended {
        ffi::notify(ctx, EVENT_EXTEND, opened.name());
        stats::EXTENDS.bump();
    }
    if extended || expired > 0 {
        waiting::watch_holders(ctx, key, &opened);
    }
    if expired > 0 {
        drop(opened);
        waiting::handoff(ctx, key);
    }
    match super::replica_wait(ctx, asked, ttl_ms).filter(|_| extended) {
        Some(wait) => waiting::hold_reply(ctx, Answer::Extended, db, None, wait),
        None => Ok(RedisValue::Integer(i64::from(extended))),
    }
}
