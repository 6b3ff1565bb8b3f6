//! Writing locks to the keyspace: the one place a lock is given to a token, whether to a
//! caller of `LOCK.ACQUIRE` or to a waiter at the head of the queue; the changes to one
//! shared holder (renewed, released, expired), each replicated as an effect; and binding
//! a session-bound lock to its connection.

use std::ffi::CStr;

use redis_module::Context;

use crate::datatype::LockKey;
use crate::datatype::events;
use crate::ffi::{self, Key, LockSet};
use crate::keyspace::registry;
use crate::keyspace::watching;
use lock_core::error::Error;
use lock_core::fence;
use lock_core::grant::GrantRequest;
use lock_core::holders::{Holder, Holders};
use lock_core::key::KeyRef;
use lock_core::lock::{BoundLock, LockState, Session};
use lock_core::rules::Kind;
use lock_core::stats;
use lock_core::value::LockValue;

/// Keyspace events, in the module class (`notify-keyspace-events` with `d`): a grant.
pub const EVENT_ACQUIRE: &CStr = c"lock.acquire";
/// Fired when the holder releases the lock.
pub const EVENT_RELEASE: &CStr = c"lock.release";
/// Fired when the holder extends the lock.
pub const EVENT_EXTEND: &CStr = c"lock.extend";
/// Fired when a shared holder expires at its own time (an exclusive lock's expiry is the
/// key's, which the server announces as `expired`).
pub const EVENT_EXPIRED: &CStr = c"lock.expired";

/// Carries out `request` on `key` (opened for it): a new fence, the holder's expiry (and
/// the key's: its longest-lived holder's), the binding to its session if it asks for
/// one, replication of the absolute state (`LOCK._SET` for an
/// exclusive lock, `LOCK._HOLD` for a shared holder), the `lock.acquire` event and the
/// `grants` counter. The caller has checked with the rules that the grant fits: the key
/// is free, or holds shared holders of this kind. `reply` is handed the token as stored
/// and the fence; its result is returned with the fence.
pub fn grant<R>(
    ctx: &Context,
    opened: &mut Key,
    request: GrantRequest,
    reply: impl FnOnce(&[u8], u64) -> R,
) -> Result<(u64, R), Error> {
    let GrantRequest {
        key: KeyRef { db, name },
        token,
        kind,
        ttl_ms,
        client,
        session,
        value,
    } = request;
    let now_ms = ffi::now_ms();
    let Some(fence) = fence::clock().next(now_ms) else {
        return Err(Error::FenceExhausted);
    };
    let expire_at = now_ms.saturating_add(ttl_ms);
    // What replicates: the grant's state, whatever form the lock takes.
    let granted = |token| LockSet {
        token,
        fence,
        acquired_ms: now_ms,
        expire_at,
        grace_ms: session.map(|s| s.grace_ms),
        value,
    };
    let replied = match kind {
        Kind::Exclusive => {
            // The token as the lock keeps it reads back as these bytes: replicated and
            // sent from here, with no second look at the key.
            let text = token.text();
            // A session-bound lock that a cell can keep is written straight into one (a
            // cell keeps no published value, and names its binding's connection).
            match BoundLock::of(&token, fence, now_ms, session)
                .filter(|bound| value.is_none() && bound.session.client == client)
            {
                Some(bound) => opened.set_bound_lock(bound, Some(expire_at))?,
                None => {
                    let lock = LockState::granted(token, (fence, now_ms), session, value, client);
                    opened.set_lock(LockValue::Exclusive(lock), Some(expire_at))?;
                }
            }
            ffi::replicate_lock_set(ctx, opened.name(), &granted(&text));
            reply(&text, fence)
        }
        Kind::Shared { limit } => {
            let lock = LockState::granted(token, (fence, now_ms), session, None, client);
            // The reply comes after every write: a failed write must not follow a sent
            // grant. (A copy of the token, on the shared path only.)
            let token: Box<[u8]> = (*lock.token()).into();
            let holder = Holder { lock, expire_at };
            let taken = || Error::AlreadyHeldByToken;
            let last_at = match opened.lock_mut()? {
                Some(LockValue::Shared(holders)) if holders.limit() == limit => {
                    holders.insert(holder).map_err(|_| taken())?;
                    stats::holder_joined();
                    holders.last_expiry().unwrap_or(expire_at)
                }
                None => {
                    let mut holders = Holders::new(limit);
                    holders.insert(holder).map_err(|_| taken())?;
                    opened.set_lock(LockValue::Shared(Box::new(holders)), Some(expire_at))?;
                    expire_at
                }
                Some(_) => return Err(Error::HeldInAnotherMode),
            };
            opened.set_expire_at(Some(last_at))?;
            ffi::replicate_hold(ctx, opened.name(), &granted(&token), limit);
            reply(&token, fence)
        }
    };
    if let Some(session) = session {
        bind(KeyRef::new(db, name), session.client, session.grace_ms);
    }
    ffi::notify(ctx, EVENT_ACQUIRE, opened.name());
    watching::touched(KeyRef::new(db, name));
    stats::GRANTS.bump();
    Ok((fence, replied))
}

/// What `LOCK._SET` or `LOCK._HOLD` carries for `lock`, held by `token` (as read from
/// it), expiring at `expire_at`.
fn lock_set<'t>(lock: &'t LockState, token: &'t [u8], expire_at: i64) -> LockSet<'t> {
    LockSet {
        token,
        fence: lock.fence(),
        acquired_ms: lock.acquired_ms(),
        expire_at,
        grace_ms: lock.grace_ms(),
        value: lock.value(),
    }
}

/// The shared holders of `key`, if it holds shared holders.
fn holders_mut<'k>(opened: &'k mut Key) -> Result<Option<&'k mut Holders>, Error> {
    Ok(match opened.lock_mut()? {
        Some(LockValue::Shared(holders)) => Some(holders),
        _ => None,
    })
}

/// Sets the expiry of `token`'s shared holder of `key` to `expire_at` and, with
/// `session`, rebinds it (`Some(None)`: unbinds it); the key's expiry follows its
/// longest-lived holder, and the holder's whole state replicates. Returns the binding it
/// had; `None` if `token` holds no shared place here.
pub fn update_holder(
    ctx: &Context,
    opened: &mut Key,
    token: &[u8],
    expire_at: i64,
    session: Option<Option<Session>>,
) -> Result<Option<Option<Session>>, Error> {
    let name = opened.name();
    let Some(holders) = holders_mut(opened)? else {
        return Ok(None);
    };
    let Some(lock) = holders.lock_mut(token) else {
        return Ok(None);
    };
    let was = lock.session();
    if let Some(session) = session {
        lock.set_session(session);
    }
    holders.set_expire_at(token, expire_at);
    let limit = holders.limit();
    let last_at = holders.last_expiry();
    let holder = holders
        .get(token)
        .ok_or(Error::HolderVanishedWhileRenewing)?;
    let token = holder.lock.token();
    ffi::replicate_hold(ctx, name, &lock_set(&holder.lock, &token, expire_at), limit);
    opened.set_expire_at(last_at)?;
    Ok(Some(was))
}

/// Takes `token`'s shared holder out of `key`: the key goes with its last holder
/// (`DEL` replicated), else its expiry follows the longest-lived holder left (`LOCK._DROP`
/// replicated). Returns the holder taken out.
pub fn drop_holder(ctx: &Context, opened: &mut Key, token: &[u8]) -> Result<Option<Holder>, Error> {
    let Some(holders) = holders_mut(opened)? else {
        return Ok(None);
    };
    let Some(holder) = holders.remove(token) else {
        return Ok(None);
    };
    stats::holder_left(holder.lock.acquired_ms(), ffi::now_us());
    match holders.last_expiry() {
        None => {
            events::releasing(|| opened.delete());
            ffi::replicate_del(ctx, opened.name());
        }
        Some(last_at) => {
            ffi::replicate_drop(ctx, opened.name(), token);
            opened.set_expire_at(Some(last_at))?;
        }
    }
    watching::touched(KeyRef::new(ffi::selected_db(ctx), opened.name().as_slice()));
    Ok(Some(holder))
}

/// Takes out every shared holder of `key` whose expiry has passed (on the master, which
/// replicates each removal): each is counted in `expired` and notified as
/// `lock.expired`. Returns how many went.
pub fn expire_holders(ctx: &Context, opened: &mut Key) -> Result<usize, Error> {
    // An exclusive lock (most keys) needs no clock reading: the server expires it.
    let (due, now_ms) = match opened.lock()? {
        Some(LockValue::Shared(holders)) => {
            let now_ms = ffi::now_ms();
            (
                holders.next_expiry().is_some_and(|expiry| expiry < now_ms),
                now_ms,
            )
        }
        _ => (false, 0),
    };
    // A replica (even a writable one) follows its master, which expires its holders.
    if !due || ffi::is_replica(ctx) {
        return Ok(0);
    }
    let Some(holders) = holders_mut(opened)? else {
        return Ok(0);
    };
    // As the server expires a key: once its time is strictly past, so that a holder
    // never leaves before its whole TTL has run, whatever the millisecond clock rounds.
    let gone = holders.expire(now_ms - 1);
    let last_at = holders.last_expiry();
    let now_us = ffi::now_us();
    for holder in &gone {
        stats::holder_left(holder.lock.acquired_ms(), now_us);
        ffi::replicate_drop(ctx, opened.name(), &holder.lock.token());
        ffi::notify(ctx, EVENT_EXPIRED, opened.name());
        stats::EXPIRED.bump();
    }
    match last_at {
        None => {
            events::releasing(|| opened.delete());
            ffi::replicate_del(ctx, opened.name());
        }
        Some(last_at) => opened.set_expire_at(Some(last_at))?,
    }
    watching::touched(KeyRef::new(ffi::selected_db(ctx), opened.name().as_slice()));
    Ok(gone.len())
}

/// The lock on key `name` of database `db` is bound to the open connection `client`: the
/// module hears of closed connections from now on, if it did not already.
pub fn bind(key: KeyRef, client: u64, grace_ms: i64) {
    let KeyRef { db, name } = key;
    registry::with(|b| b.bind(db, name, client, grace_ms));
    ffi::watch_connections(true);
}

/// Replicates `lock` (held by `token`, as read from it), expiring at `expire_at`, as the
/// absolute state `LOCK._SET` sets.
pub fn replicate(ctx: &Context, opened: &Key, lock: &LockState, token: &[u8], expire_at: i64) {
    ffi::replicate_lock_set(ctx, opened.name(), &lock_set(lock, token, expire_at));
}
