//! Several keys at once (`LOCK.ACQUIREALL`): the decision over every key, and the grant of
//! them all in one step, whether to the caller or to a waiter at the head of every queue
//! (`waiting/handoff.rs`). Each key is then an ordinary lock, granted (or renewed) as
//! `LOCK.ACQUIRE` grants one, and each grant replicates as its own effects: the server
//! wraps the effects of one command, timer or job in `MULTI`/`EXEC`, so a replica and the
//! AOF see them as one unit.
//!
//! Also what a newcomer's acquire and the handoff share with it, for one key: how a key
//! is opened for a newcomer, waiters served first (`open_for_newcomer`), and what a key
//! holds as the rules see it (`holding`).

use redis_module::{Context, RedisString};

use crate::datatype::LockKey;
use crate::ffi::{Key, KeyKind};
use crate::keyspace::renewal::{self, Renewal};
use crate::keyspace::store;
use lock_core::error::Error;
use lock_core::grant::GrantRequest;
use lock_core::key::KeyRef;
use lock_core::lock::{NewToken, Session};
use lock_core::rules::{self, Decision, Holding, Kind};
use lock_core::value::LockValue;

/// What is asked of every key.
pub struct AllRequest<'a> {
    /// The token that will hold every key: one the caller gave, or one made once for all.
    pub token: NewToken<'a>,
    /// The caller's own token, if it gave one (a key it holds already is renewed).
    pub own: Option<&'a [u8]>,
    /// Exclusive, or a reader (`SHARED`).
    pub kind: Kind,
    /// The TTL of each key once granted.
    pub ttl_ms: i64,
    /// The `CLIENT ID` of the connection that asks (0: a script).
    pub client: u64,
    /// The binding `SESSION` asks for, for every key.
    pub session: Option<Session>,
}

/// What a look at every key found.
pub enum Verdict {
    /// Every key is free for the request (or held by its token already): the decision
    /// for each, in order.
    Fits(Vec<Decision>),
    /// A key is busy (held, or with waiters queued for a newcomer). The deadline of each
    /// key, in order, for the waiters' timers.
    Busy(Vec<Option<i64>>),
}

/// What key `key` holds now as the rules see it, once its shared holders whose time has
/// come are gone; a key of another type in the lock's place holds it like a lock.
pub fn holding(ctx: &Context, opened: &mut Key) -> Option<Holding> {
    match opened.kind() {
        KeyKind::Empty => None,
        KeyKind::Module => {
            let _ = store::expire_holders(ctx, opened);
            match opened.lock() {
                Ok(Some(LockValue::Shared(holders))) => holders.holding(),
                Ok(None) => None,
                _ => Some(Holding::EXCLUSIVE),
            }
        }
        KeyKind::Other => Some(Holding::EXCLUSIVE),
    }
}

/// Opens `name` for writing with its shared holders whose time has come gone (the
/// handoff's look at a key, and a newcomer's once its waiters are served).
pub fn open_settled<'c>(ctx: &'c Context, name: &'c RedisString) -> Result<Key<'c>, Error> {
    let mut opened = Key::open_write(ctx, name);
    let _ = store::expire_holders(ctx, &mut opened)?;
    Ok(opened)
}

/// Decides for every key of `keys` (named by `names`, in order), each opened by `open`
/// with whether waiters queued for it make it busy: a newcomer's look
/// (`waiting::open_for_newcomer`, which serves the waiters of a free key first), or the
/// handoff's (`open_settled`: its waiter heads every queue). A key of another type is an
/// error, and so is a refusal on any key (a kind or a limit that disagrees); either way
/// nothing changed. Returns the keys opened for writing, for `grant`: each key is opened
/// once.
pub fn decide<'c>(
    keys: &[KeyRef],
    names: &[&'c RedisString],
    request: &AllRequest,
    mut open: impl FnMut(KeyRef, &'c RedisString) -> Result<(Key<'c>, bool), Error>,
) -> Result<(Verdict, Vec<Key<'c>>), Error> {
    let mut decisions = Vec::with_capacity(keys.len());
    let mut opened = Vec::with_capacity(keys.len());
    for (&key, &name) in keys.iter().zip(names) {
        let (one, queued) = open(key, name)?;
        let held = one.lock()?;
        let mine = request
            .own
            .and_then(|token| held.and_then(|value| value.kind_of(token)));
        let holding = held.and_then(LockValue::holding);
        match rules::decide(holding, mine, request.kind, queued) {
            Decision::Refused(refusal) => return Err(Error::Refused(refusal)),
            decision => decisions.push(decision),
        }
        opened.push(one);
    }
    let verdict = if decisions
        .iter()
        .all(|d| matches!(d, Decision::Grant | Decision::Renew))
    {
        Verdict::Fits(decisions)
    } else {
        Verdict::Busy(opened.iter().map(Key::expire_at).collect())
    };
    Ok((verdict, opened))
}

/// Grants (or renews) every key of `keys` (opened by `decide`, in order) to `request`,
/// as `decisions` say: returns the token as held and one fence per key, in order. The
/// decisions come from `decide` in the same command or callback, so every key still
/// fits. The caller tells the handoff of each key (`waiting::renewed`).
pub fn grant(
    ctx: &Context,
    keys: &[KeyRef],
    opened: &mut [Key],
    decisions: &[Decision],
    request: &AllRequest,
) -> Result<(Box<[u8]>, Vec<u64>), Error> {
    let mut fences = Vec::with_capacity(keys.len());
    let mut held_as: Option<Box<[u8]>> = None;
    for ((&key, opened), decision) in keys.iter().zip(opened.iter_mut()).zip(decisions) {
        let (token, fence) = match decision {
            Decision::Renew => {
                let renewal = Renewal {
                    token: request.own.ok_or(Error::RenewWithoutToken)?,
                    kind: request.kind,
                    session: request.session,
                    value: None,
                    ttl_ms: request.ttl_ms,
                    client: request.client,
                };
                renewal::renew(ctx, opened, key, &renewal)?
            }
            _ => {
                let grant = GrantRequest {
                    key,
                    token: request.token.clone(),
                    kind: request.kind,
                    ttl_ms: request.ttl_ms,
                    client: request.client,
                    session: request.session,
                    value: None,
                };
                // The token as held is the same on every key: kept from the first.
                let (fence, token) = store::grant(ctx, opened, grant, |token, _| {
                    held_as.is_none().then(|| Box::<[u8]>::from(token))
                })?;
                (token.unwrap_or_default(), fence)
            }
        };
        fences.push(fence);
        if held_as.is_none() {
            held_as = Some(token);
        }
    }
    Ok((held_as.unwrap_or_default(), fences))
}
