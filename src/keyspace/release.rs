//! Letting go of a lock by its token: `LOCK.RELEASE`, and a grant undone because too few
//! replicas acknowledged it (`replicated.rs`). The oldest waiters get the lock at once.

use redis_module::{Context, RedisString};

use crate::datatype::LockKey;
use crate::datatype::events;
use crate::ffi;
use crate::ffi::Key;
use crate::keyspace::store::{self, EVENT_RELEASE};
use crate::keyspace::waiting;
use crate::keyspace::watching;
use lock_core::error::Error;
use lock_core::key::KeyRef;
use lock_core::stats;
use lock_core::value::LockValue;

/// Opens `name` (raw `raw`, in database `db`) for a release or an extend with the lock's
/// waiters served first, when it was freed where the server runs the handoff only later:
/// a `DEL` earlier in the same `MULTI`/`EXEC` (post-notification jobs run when the
/// transaction is over) or, on Redis 7.0, a command just before. The command then sees
/// the key as every later one will, as `LOCK.ACQUIRE` does. A held key costs no lookup.
pub fn open_served<'c>(
    ctx: &'c Context,
    db: i32,
    name: &'c RedisString,
    raw: &[u8],
) -> Result<Key<'c>, Error> {
    let opened = Key::open_write(ctx, name);
    if opened.lock()?.is_some() || !waiting::queued(KeyRef::new(db, raw)) {
        return Ok(opened);
    }
    drop(opened);
    waiting::handoff(ctx, KeyRef::new(db, raw));
    Ok(Key::open_write(ctx, name))
}

/// Deletes the lock `name` (raw `raw`) of the selected database `db` if, and only if,
/// `token` holds it (for shared holders: takes that holder out, and the key with the last
/// one): whether it did. The next waiters, if any, are granted the lock at once.
pub fn release(
    ctx: &Context,
    db: i32,
    name: &RedisString,
    raw: &[u8],
    token: &[u8],
) -> Result<bool, Error> {
    let key = KeyRef::new(db, raw);
    let mut opened = open_served(ctx, db, name, raw)?;
    let expired = store::expire_holders(ctx, &mut opened)?;
    let (released, shared) = match opened.lock()? {
        Some(LockValue::Exclusive(lock)) if lock.holds(token) => {
            events::releasing(|| opened.delete());
            ffi::replicate_del(ctx, opened.name());
            watching::touched(key);
            (true, false)
        }
        Some(LockValue::Shared(_)) => {
            (store::drop_holder(ctx, &mut opened, token)?.is_some(), true)
        }
        _ => (false, false),
    };
    if released {
        ffi::notify(ctx, EVENT_RELEASE, opened.name());
        stats::RELEASES.bump();
    }
    if shared || expired > 0 {
        waiting::watch_holders(ctx, key, &opened);
    }
    if released || expired > 0 {
        drop(opened);
        waiting::handoff(ctx, key);
    }
    Ok(released)
}
