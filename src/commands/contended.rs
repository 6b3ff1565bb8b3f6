//! `LOCK.CONTENDED [COUNT n]`: the locks clients wait for now, longest-waiting first, so
//! an operator sees which locks an incident is about without a scan of every key. Never
//! a token.

use redis_module::{Context, RedisValue};

use crate::datatype::LockKey;
use crate::ffi::Reply;
use crate::ffi::command::Args;
use crate::ffi::{self, Field, Key};
use crate::keyspace::waiting;
use lock_core::error::Error;
use lock_core::limits::{DEFAULT_CONTENDED, MAX_CONTENDED};
use lock_core::value::LockValue;

/// LOCK.CONTENDED [COUNT n]
///
/// The keys of the current database that clients wait for now, the longest-waiting
/// first (at most `n`, 10 by default, 1 to 1000): one map per key (a flat field/value
/// array in RESP2) of `key`, `waiters`, `waited` (ms the oldest waiter has waited),
/// `holders` (0 when the lock is free, kept for a waiter for several keys) and `held`
/// (ms since the oldest current grant; -1 without a holder). An empty array when nothing
/// waits. Linear in the keys that have waiters, not in all locks.
pub fn contended(ctx: &Context, args: &Args) -> Reply {
    let count = count(args)?;
    let mut listed = waiting::contended(ffi::selected_db(ctx));
    listed.sort_unstable_by(|a, b| (a.oldest_us, &a.key.name).cmp(&(b.oldest_us, &b.key.name)));
    listed.truncate(count);
    let (now_us, now_ms) = (ffi::monotonic_us(), ffi::now_ms());
    ffi::reply_array(ctx, listed.len());
    for entry in listed {
        let name = ctx.create_string(entry.key.name.as_slice());
        let opened = Key::open_read(ctx, &name);
        // The holders now: a shared holder past its time is not counted (it leaves
        // within milliseconds), as LOCK.HOLDERS lists them.
        let grants: Vec<i64> = match opened.lock() {
            Ok(Some(LockValue::Exclusive(lock))) => vec![lock.acquired_ms()],
            Ok(Some(LockValue::Shared(holders))) => holders
                .iter()
                .filter(|holder| holder.expire_at >= now_ms)
                .map(|holder| holder.lock.acquired_ms())
                .collect(),
            _ => Vec::new(),
        };
        let held = grants
            .iter()
            .min()
            .map_or(-1, |oldest| now_ms.saturating_sub(*oldest).max(0));
        let waited = now_us.saturating_sub(entry.oldest_us) / 1000;
        ffi::reply_map(
            ctx,
            &[
                ("key", Field::Bulk(Some(&entry.key.name))),
                ("waiters", Field::Integer(entry.waiters as i64)),
                ("waited", Field::Integer(waited as i64)),
                ("holders", Field::Integer(grants.len() as i64)),
                ("held", Field::Integer(held)),
            ],
        );
    }
    Ok(RedisValue::NoReply)
}

/// The `COUNT n` of the arguments, or the default; every argument checked first.
fn count(args: &Args) -> Result<usize, Error> {
    let mut count = None;
    let mut index = 1;
    while index < args.len() {
        let option = args.get(index);
        if !option.eq_ignore_ascii_case(b"COUNT") {
            return Err(Error::UnknownListOption(option.to_vec()));
        }
        if count.is_some() {
            return Err(Error::RepeatedOption(option.to_vec()));
        }
        let Some(&value) = args.bytes().get(index + 1) else {
            return Err(Error::MissingValue(option.to_vec()));
        };
        let n = super::args::integer(value)
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| (1..=MAX_CONTENDED).contains(n))
            .ok_or(Error::InvalidCount)?;
        count = Some(n);
        index += 2;
    }
    Ok(count.unwrap_or(DEFAULT_CONTENDED))
}
