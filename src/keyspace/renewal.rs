//! The idempotent re-acquire: a token that holds a key already, asking for it again in
//! the same kind (`LOCK.ACQUIRE`, a key of `LOCK.ACQUIREALL`, a waiter granted a key its
//! token holds), keeps its fence; its TTL is reset, its binding and published value
//! replaced as asked, and the whole new state replicates. `LOCK.EXTEND` sets a TTL the
//! same way (`set_ttl`).

use redis_module::Context;

use crate::datatype::LockKey;
use crate::ffi::{self, Key};
use crate::keyspace::registry;
use crate::keyspace::store::{self, EVENT_ACQUIRE};
use lock_core::error::Error;
use lock_core::key::KeyRef;
use lock_core::lock::Session;
use lock_core::rules::Kind;
use lock_core::value::LockValue;

/// What a renewing acquire asks for.
pub struct Renewal<'a> {
    /// The token that holds the key.
    pub token: &'a [u8],
    /// The kind it asks in (the kind it holds the key in).
    pub kind: Kind,
    /// The binding it asks for (`None`: not session-bound from now on).
    pub session: Option<Session>,
    /// A new value to publish, if any (kept otherwise).
    pub value: Option<&'a [u8]>,
    /// The new TTL.
    pub ttl_ms: i64,
    /// The connection that asks (0: a script).
    pub client: u64,
}

/// Renews `renewal.token`'s hold of `key` (open as `opened`), which the rules found it holds in the
/// kind it asks for: returns the token as the lock keeps it and its fence (unchanged),
/// after the `lock.acquire` event. The caller tells the handoff (`waiting::renewed`): the
/// key's deadline or its holders' expiries moved.
pub fn renew(
    ctx: &Context,
    opened: &mut Key,
    key: KeyRef,
    renewal: &Renewal,
) -> Result<(Box<[u8]>, u64), Error> {
    let token = renewal.token;
    if matches!(renewal.kind, Kind::Shared { .. }) {
        renew_holder(ctx, opened, key, token, renewal.session, renewal.ttl_ms)?;
    } else {
        renew_exclusive(
            ctx,
            opened,
            key,
            (renewal.session, renewal.value),
            renewal.ttl_ms,
        )?;
    }
    held_by(opened, token, renewal.client)?;
    let lock = opened
        .lock()?
        .and_then(|value| value.lock_of(token))
        .ok_or(Error::VanishedWhileRenewing)?;
    ffi::notify(ctx, EVENT_ACQUIRE, opened.name());
    Ok(((*lock.token()).into(), lock.fence()))
}

/// Records that the connection `client` holds `token`'s lock on the key `opened` now (a re-acquire
/// from another connection: `LOCK.HOLDERS` names the one to look at). Inside a script
/// (`client` 0) the connection that had it stays named.
fn held_by(opened: &mut Key, token: &[u8], client: u64) -> Result<(), Error> {
    let named = opened.lock()?.and_then(|value| value.lock_of(token));
    if client == 0 || named.is_none_or(|lock| lock.client() == client) {
        return Ok(());
    }
    if let Some(lock) = opened
        .lock_mut()?
        .and_then(|value| value.lock_of_mut(token))
    {
        lock.set_client(client);
    }
    Ok(())
}

/// The renewal of an exclusive lock: its TTL is reset; if it was or asks
/// to be session-bound, it is bound anew; a new `VALUE` replaces the published one
/// (without `VALUE` it is kept).
fn renew_exclusive(
    ctx: &Context,
    opened: &mut Key,
    key: KeyRef,
    (session, value): (Option<Session>, Option<&[u8]>),
    ttl_ms: i64,
) -> Result<(), Error> {
    let (was_bound, new_value) = match opened.lock()? {
        Some(LockValue::Exclusive(lock)) => (
            lock.session(),
            value.filter(|value| lock.value() != Some(*value)),
        ),
        _ => (None, None),
    };
    if was_bound.is_none() && session.is_none() && new_value.is_none() {
        set_ttl(ctx, opened, ttl_ms)
    } else {
        rebind(ctx, opened, key, (was_bound, session), new_value, ttl_ms)
    }
}

/// The renewal of a shared holder: its own TTL is reset and its binding
/// replaced (or removed) as for an exclusive lock; the key's expiry follows its
/// longest-lived holder.
fn renew_holder(
    ctx: &Context,
    opened: &mut Key,
    key: KeyRef,
    token: &[u8],
    session: Option<Session>,
    ttl_ms: i64,
) -> Result<(), Error> {
    let expire_at = ffi::now_ms().saturating_add(ttl_ms);
    let was = store::update_holder(ctx, opened, token, expire_at, Some(session))?;
    if let Some(Some(old)) = was {
        // Other holders of the key bound to the same connection keep their grace.
        let others = opened
            .lock()?
            .is_some_and(|value| value.bound_to(old.client));
        registry::unbind(key, &old, !others);
    }
    if let Some(new) = &session {
        store::bind(key, new.client, new.grace_ms);
    }
    Ok(())
}

/// The renewal of a session-bound lock, or one that asks to be, or that
/// publishes a new value: the lock leaves its old binding (ending its grace, if one ran:
/// a reclaim), takes the new one (or none), publishes `new_value` if given, and its TTL
/// is reset. The whole state replicates, binding and value included.
fn rebind(
    ctx: &Context,
    opened: &mut Key,
    key: KeyRef,
    (was_bound, session): (Option<Session>, Option<Session>),
    new_value: Option<&[u8]>,
    ttl_ms: i64,
) -> Result<(), Error> {
    // The lock changes first: if the key cannot be written, the registry still tells
    // where the binding is.
    if let Some(LockValue::Exclusive(lock)) = opened.lock_mut()? {
        lock.set_session(session);
        if new_value.is_some() {
            lock.set_value(new_value);
        }
    }
    if let Some(old) = &was_bound {
        registry::unbind(key, old, true);
    }
    if let Some(new) = &session {
        store::bind(key, new.client, new.grace_ms);
    }
    let expire_at = ffi::now_ms().saturating_add(ttl_ms);
    opened.set_expire_at(Some(expire_at))?;
    let Some(LockValue::Exclusive(lock)) = opened.lock()? else {
        return Err(Error::VanishedWhileRenewing);
    };
    store::replicate(ctx, opened, lock, &lock.token(), expire_at);
    Ok(())
}

/// Sets the lock's remaining time to `ttl_ms` from now and replicates the absolute
/// expiry. (The caller moves the waiters' hand-over to the new deadline:
/// `waiting::renewed`.)
pub fn set_ttl(ctx: &Context, opened: &Key, ttl_ms: i64) -> Result<(), Error> {
    let expire_at = ffi::now_ms().saturating_add(ttl_ms);
    opened.set_expire_at(Some(expire_at))?;
    ffi::replicate_pexpireat(ctx, opened.name(), expire_at);
    Ok(())
}
