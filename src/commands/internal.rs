//! The internal commands that carry effects to replicas and into the AOF: the absolute
//! state a command wrote on the master, never the command itself. Each is accepted only
//! from the master link and while loading the AOF, checks every argument as carefully as
//! a client's command, raises the fencing clock to the fence it carries (so a promoted
//! replica never grants a smaller one) and passes itself on verbatim to the server's own
//! AOF and sub-replicas.

use redis_module::{Context, ContextFlags, RedisValue};

use crate::commands::args;
use crate::datatype::LockKey;
use crate::datatype::events;
use crate::ffi::Reply;
use crate::ffi::command::Args;
use crate::ffi::{self, Key};
use crate::keyspace::session;
use crate::keyspace::waiting;
use crate::keyspace::watching;
use lock_core::error::Error;
use lock_core::fence;
use lock_core::holders::{Holder, Holders};
use lock_core::key::KeyRef;
use lock_core::limits::MAX_LIMIT;
use lock_core::lock::{self, LockState, Session};
use lock_core::stats;
use lock_core::value::LockValue;

/// Refuses a client; hides the token (argument 2) from `SLOWLOG` and `MONITOR`.
fn only_from_master(ctx: &Context, args: &Args, name: &'static str) -> Result<(), Error> {
    if args.len() > 2 {
        ffi::redact(ctx, 2);
    }
    if !ctx
        .get_flags()
        .intersects(ContextFlags::REPLICATED | ContextFlags::LOADING)
    {
        return Err(Error::InternalCommand(name));
    }
    Ok(())
}

/// A holder's state as both `LOCK._SET` and `LOCK._HOLD` carry it, from argument 2 on:
/// `token fence acquired-ms expire-at-ms` (the expiry -1 for none).
fn lock_state(
    args: &Args,
    name: &'static str,
    grace: Option<&[u8]>,
) -> Result<(LockState, Option<i64>), Error> {
    let token = args::token(args.get(2))?.to_vec();
    let number = |i: usize, what: &'static str| -> Result<i64, Error> {
        args::integer(args.get(i)).ok_or(Error::InvalidInternal {
            command: name,
            what,
        })
    };
    let fence = u64::try_from(number(3, "fence")?)
        .ok()
        .filter(|f| (1..=fence::MAX_FENCE).contains(f))
        .ok_or(Error::InvalidInternal {
            command: name,
            what: "fence",
        })?;
    let acquired_ms = number(4, "acquired-ms")?;
    if !lock::in_contract(&token, fence, acquired_ms) {
        return Err(Error::InvalidInternal {
            command: name,
            what: "acquired-ms",
        });
    }
    let expire_at = match number(5, "expire-at-ms")? {
        -1 => None,
        ms if ms >= 0 => Some(ms),
        _ => {
            return Err(Error::InvalidInternal {
                command: name,
                what: "expire-at-ms",
            });
        }
    };
    let session = match grace {
        None | Some(b"-1") => None,
        Some(grace) => Some(Session {
            grace_ms: args::grace(grace).map_err(|_| Error::InvalidInternal {
                command: name,
                what: "grace-ms",
            })?,
            client: 0,
        }),
    };
    Ok((
        LockState::new(&token, fence, acquired_ms, session),
        expire_at,
    ))
}

/// LOCK._SET <key> <token> <fence> <acquired-ms> <expire-at-ms | -1> [grace-ms | -1
/// [value]]
///
/// The replicated effect of an exclusive grant: sets the lock to exactly this state.
/// With `grace-ms` the lock is session-bound, to no connection here: its grace starts
/// when this server serves it. With `value` it publishes that value.
pub fn set(ctx: &Context, args: &Args) -> Reply {
    super::settled(ctx, run_set(ctx, args))
}

fn run_set(ctx: &Context, args: &Args) -> Reply {
    only_from_master(ctx, args, "LOCK._SET")?;
    if !(6..=8).contains(&args.len()) {
        return Err(Error::WrongArity);
    }
    let (mut lock, expire_at) = lock_state(args, "LOCK._SET", args.bytes().get(6).copied())?;
    if let Some(value) = args.bytes().get(7) {
        let value = args::value(value).map_err(|_| Error::InvalidInternal {
            command: "LOCK._SET",
            what: "value",
        })?;
        lock.set_value(Some(value));
    }
    let name = args.string(1).ok_or(Error::WrongArity)?;
    let opened = Key::open_write(ctx, &name);
    let (fence, session) = (lock.fence(), lock.session());
    opened.set_lock(LockValue::Exclusive(lock), expire_at)?;
    let db = ffi::selected_db(ctx);
    if let Some(session) = session {
        session::arrived(KeyRef::new(db, opened.name().as_slice()), session);
    }
    watching::touched(KeyRef::new(db, opened.name().as_slice()));
    fence::clock().observe(fence);
    ctx.replicate_verbatim();
    Ok(RedisValue::SimpleStringStatic("OK"))
}

/// LOCK._HOLD <key> <token> <fence> <acquired-ms> <expire-at-ms> <limit | -1> <grace-ms | -1>
///
/// The replicated effect of a shared grant or of a change to one holder (renewed,
/// extended, rebound): the holder with this token is set to exactly this state, added if
/// it was not there. A key that held anything else (an exclusive lock, holders of another
/// limit, a key of another type) is replaced, as the master's was.
pub fn hold(ctx: &Context, args: &Args) -> Reply {
    super::settled(ctx, run_hold(ctx, args))
}

fn run_hold(ctx: &Context, args: &Args) -> Reply {
    only_from_master(ctx, args, "LOCK._HOLD")?;
    if args.len() != 8 {
        return Err(Error::WrongArity);
    }
    let (lock, expire_at) = lock_state(args, "LOCK._HOLD", Some(args.get(7)))?;
    let expire_at = expire_at.ok_or(Error::InvalidInternal {
        command: "LOCK._HOLD",
        what: "expire-at-ms",
    })?;
    let limit = match args::integer(args.get(6)) {
        Some(-1) => None,
        Some(n) => Some(
            u32::try_from(n)
                .ok()
                .filter(|n| (1..=MAX_LIMIT).contains(n))
                .ok_or(Error::InvalidInternal {
                    command: "LOCK._HOLD",
                    what: "limit",
                })?,
        ),
        None => {
            return Err(Error::InvalidInternal {
                command: "LOCK._HOLD",
                what: "limit",
            });
        }
    };
    let (fence, session) = (lock.fence(), lock.session());
    let db = ffi::selected_db(ctx);
    let name = args.string(1).ok_or(Error::WrongArity)?;
    let mut opened = Key::open_write(ctx, &name);
    let holder = Holder { lock, expire_at };
    let joins = matches!(opened.lock(), Ok(Some(LockValue::Shared(h))) if h.limit() == limit);
    let last_at = match opened.lock_mut() {
        Ok(Some(LockValue::Shared(holders))) if joins => {
            // The same holder again (renewed, rebound) or a new one beside the others.
            if holders.remove(&holder.lock.token()).is_none() {
                stats::holder_joined();
            }
            holders.insert(holder).map_err(|_| Error::HoldNotSet)?;
            holders.last_expiry()
        }
        _ => {
            let mut holders = Holders::new(limit);
            holders.insert(holder).map_err(|_| Error::HoldNotSet)?;
            // Whatever was there is replaced, as the master's was.
            opened.set_lock(LockValue::Shared(Box::new(holders)), Some(expire_at))?;
            Some(expire_at)
        }
    };
    opened.set_expire_at(last_at)?;
    if let Some(session) = session {
        session::arrived(KeyRef::new(db, opened.name().as_slice()), session);
    }
    waiting::shared_arrived(KeyRef::new(db, opened.name().as_slice()));
    watching::touched(KeyRef::new(db, opened.name().as_slice()));
    fence::clock().observe(fence);
    ctx.replicate_verbatim();
    Ok(RedisValue::SimpleStringStatic("OK"))
}

/// LOCK._DROP <key> <token>
///
/// The replicated effect of one shared holder's release or expiry: the holder goes, and
/// the key with its last holder; the key's expiry follows the longest-lived one left.
pub fn drop_holder(ctx: &Context, args: &Args) -> Reply {
    super::settled(ctx, run_drop_holder(ctx, args))
}

fn run_drop_holder(ctx: &Context, args: &Args) -> Reply {
    only_from_master(ctx, args, "LOCK._DROP")?;
    if args.len() != 3 {
        return Err(Error::WrongArity);
    }
    let token = args::token(args.get(2))?;
    let name = args.string(1).ok_or(Error::WrongArity)?;
    let mut opened = Key::open_write(ctx, &name);
    let Ok(Some(LockValue::Shared(holders))) = opened.lock_mut() else {
        ctx.replicate_verbatim();
        return Ok(RedisValue::Integer(0));
    };
    let dropped = holders.remove(token);
    if let Some(holder) = &dropped {
        stats::holder_left(holder.lock.acquired_ms(), ffi::now_us());
    }
    let dropped = dropped.is_some();
    match holders.last_expiry() {
        None => {
            events::releasing(|| opened.delete());
        }
        Some(last_at) => opened.set_expire_at(Some(last_at))?,
    }
    watching::touched(KeyRef::new(ffi::selected_db(ctx), opened.name().as_slice()));
    ctx.replicate_verbatim();
    Ok(RedisValue::Integer(i64::from(dropped)))
}
