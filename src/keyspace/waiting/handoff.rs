//! Handoff: a freed lock goes to the oldest waiter in the same event that freed it (and
//! room among shared holders to the shared waiters at the head of the queue); shared
//! holders leave at their own expiry.
//!
//! Whatever frees a lock (a release, a `DEL`, an expiry, an eviction, a flush, a
//! `RENAME`/`MOVE` away) produces one fact, "the lock on K may be free", and one function,
//! `handoff`, turns it into the new holder written to the keyspace (fence, expiry,
//! replication, notification) and then hands the blocking layer the waiter's reply as
//! data. When the server sends that reply no longer matters: the lock already is the
//! waiter's, and no other command can have taken it in between.
//!
//! Where the fact arises decides where `handoff` runs:
//!
//! - inside a command (`LOCK.RELEASE`, a newcomer's `LOCK.ACQUIRE` that finds the lock
//!   free with waiters queued): right there;
//! - inside a type callback or a server event (deletion, expiry, eviction, flush,
//!   `SWAPDB`), where the server forbids writes: as a post-notification job, which the
//!   server runs when the command, expiry or eviction is over and before anything else
//!   (Redis 7.2+, Valkey); on Redis 7.0, which has no such jobs, from a timer that fires
//!   as soon as the event loop is free, while newcomers keep finding the queue ahead of
//!   them (a newcomer's acquire runs the handoff itself first);
//! - at a shared holder's expiry: a timer per key, at its next holder's expiry, takes
//!   the holders whose time has come out (replicated as effects) and grants waiters;
//! - at a lock's deadline: a timer, so that an expiring lock is handed over on time
//!   rather than when the server's background expiry finds it. The same timer looks
//!   again every `RECHECK_MS` while waiters remain: an admin's `PEXPIRE`, or a key of
//!   another type put in the lock's place, reach the module through no callback.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};

use redis_module::{Context, RedisString};

use super::held;
use super::queues::{self, Answer};
use crate::datatype::LockKey;
use crate::ffi::{self, Key};
use crate::keyspace::all_keys::{self, AllRequest, Verdict};
use crate::keyspace::routing;
use crate::keyspace::slot_import;
use crate::keyspace::store;
use crate::keyspace::watching;
use lock_core::error::Error;
use lock_core::grant::GrantRequest;
use lock_core::handoff::{self, Handoff};
use lock_core::key::KeyRef;
use lock_core::lock::NewToken;
use lock_core::queue::{KeyId, Waiter};
use lock_core::room;
use lock_core::rules::{Decision, Kind};
use lock_core::value::LockValue;

/// How often a held key with waiters is looked at, besides at its deadline.
const RECHECK_MS: i64 = 100;

/// How soon a key is looked at again while the server holds writes back (`CLIENT
/// PAUSE`, a failover): then a key past its deadline counts as gone but stays in the
/// keyspace, and a grant would write over it.
const PAUSED_RETRY_MS: i64 = 10;

thread_local! {
    /// The pending timer of each key with waiters or shared holders: `(timer id, fires
    /// at ms)`.
    static TIMERS: RefCell<HashMap<KeyId, (u64, i64)>> = RefCell::new(HashMap::new());
    /// Keys with shared holders that this server keeps without serving them (loading, a
    /// replica): looked at when it starts serving.
    static PENDING: RefCell<HashSet<KeyId>> = RefCell::new(HashSet::new());
}

/// The lock on `name` in database `db` may be free, or have room for more shared
/// holders: grant it to the waiters at the head of its queue that fit (one exclusive
/// waiter, or shared ones up to the next exclusive one, as far as the limit allows; a
/// waiter whose key now lives on another cluster node is redirected, and the next one
/// tried). Runs where the server allows writes: a write command of `db`'s client, a
/// timer, a post-notification job.
pub fn handoff(ctx: &Context, key: KeyRef) {
    // Checked first, without building the key's id: most releases have no waiters.
    if !queues::queued(key) || ffi::is_replica(ctx) {
        return;
    }
    settle(ctx, &key.to_id());
}

/// Opens `at` (named `name`) for a newcomer's acquire, with its shared holders whose time
/// has come gone: the key, and whether clients wait for it. A key that is free or
/// shared while clients wait for it (its handoff is due from a timer on a server without
/// post-notification jobs, or its removal reached no callback) is handed to them first,
/// before the newcomer is considered.
pub fn open_for_newcomer<'c>(
    ctx: &'c Context,
    key: KeyRef,
    name: &'c RedisString,
) -> Result<(Key<'c>, bool), Error> {
    let mut opened = Key::open_write(ctx, name);
    let mut queued = queues::queued(key);
    if queued && !matches!(opened.lock()?, Some(LockValue::Exclusive(_))) {
        drop(opened);
        handoff(ctx, key);
        queued = queues::queued(key);
        opened = Key::open_write(ctx, name);
    }
    let _ = store::expire_holders(ctx, &mut opened)?;
    Ok((opened, queued))
}

/// Brings key `id` up to date on a master: its shared holders whose time has come leave,
/// the waiters that fit are granted, and a timer is armed for what comes next (the next
/// holder's expiry, the key's deadline while waiters remain).
fn settle(ctx: &Context, id: &KeyId) {
    if ffi::is_replica(ctx) || slot_import::is_importing(&id.name) {
        // Replicas follow their master, and a slot being imported follows its source;
        // the holders are looked at once this node serves the key.
        PENDING.with(|p| p.borrow_mut().insert(id.clone()));
        return;
    }
    if ffi::writes_paused() {
        arm_timer(ctx, id, ffi::now_ms().saturating_add(PAUSED_RETRY_MS));
        return;
    }
    if ffi::selected_db(ctx) != id.db && !ffi::select_db(ctx, id.db) {
        return;
    }
    let key_name = ctx.create_string(id.name.as_slice());
    loop {
        // Opened for writing: a key whose time has passed is deleted here, on any server.
        let mut opened = Key::open_write(ctx, &key_name);
        let held = all_keys::holding(ctx, &mut opened);
        let (expire_at, next_holder_at) = (opened.expire_at(), next_holder_expiry(&opened));
        // Deciding may open keys (this one among them, for a waiter for several keys).
        drop(opened);
        // Who is granted next is the core's decision; carrying it out is this loop's.
        match queues::next_handoff(id, held, |other, waiter| fits(ctx, other, waiter)) {
            Handoff::Heads(count) => {
                let mut opened = Key::open_write(ctx, &key_name);
                for _ in 0..count {
                    let Some(waiter) = queues::take_head(id) else {
                        break;
                    };
                    let (waiter, answer) = grant_to(ctx, &mut opened, waiter);
                    held::answer(ctx, waiter, answer);
                }
            }
            Handoff::All(waiter) => grant_all(ctx, id, waiter),
            Handoff::Wait { on } => {
                if let Some(other) = on {
                    // The key that holds the waiter back is watched (it has waiters, so
                    // its timer rechecks it); a free key kept for the waiter needs none.
                    rearm(ctx, &other, None);
                    if held.is_none() {
                        return;
                    }
                }
                rearm(ctx, id, expire_at);
                if let Some(due_at) = next_holder_at {
                    arm_timer(ctx, id, due_at);
                }
                return;
            }
        }
    }
}

/// Whether key `id` fits `waiter` now, as its holders stand (free for it, held by its own
/// token in the kind it asks, or shared with room for it).
fn fits(ctx: &Context, id: &KeyId, waiter: &Waiter) -> bool {
    let name = ctx.create_string(id.name.as_slice());
    let mut opened = Key::open_write(ctx, &name);
    let held = all_keys::holding(ctx, &mut opened);
    let mine = match opened.lock() {
        Ok(Some(value)) => value.kind_of(&waiter.token),
        _ => None,
    };
    handoff::fits(held, mine, waiter.kind)
}

/// Grants waiter `waiter` (the oldest of every key it asks for, each of which fits it)
/// all its keys at once, then serves its other keys in the same step: readers behind it
/// that fit beside it there are granted with it, as the shared waiters behind a shared
/// head are (docs/guarantees.md). Not later: a later command of the same transaction (a
/// `DEL` of one of those keys) must find them holding already.
fn grant_all(ctx: &Context, id: &KeyId, waiter: u64) {
    let Some(waiter) = queues::take(waiter) else {
        return;
    };
    let answer = all_granted(ctx, &waiter);
    let others: Vec<KeyId> = waiter
        .keys()
        .filter(|other| *other != id)
        .cloned()
        .collect();
    held::answer(ctx, waiter, answer);
    for other in others {
        if queues::busy(&other) {
            settle(ctx, &other);
        }
    }
}

/// Writes the grant of every key of `waiter`, and returns what it is told.
fn all_granted(ctx: &Context, waiter: &Waiter) -> Answer {
    if let Some(redirect) = routing::route(ctx, &waiter.key.name).redirect() {
        return Answer::Error(redirect);
    }
    let keys: Vec<KeyRef> = waiter.keys().map(KeyId::as_ref).collect();
    let strings: Vec<RedisString> = keys.iter().map(|key| ctx.create_string(key.name)).collect();
    let names: Vec<&RedisString> = strings.iter().collect();
    let request = AllRequest {
        token: NewToken::Given(&waiter.token),
        own: Some(&waiter.token),
        kind: waiter.kind,
        ttl_ms: waiter.ttl_ms,
        client: waiter.client,
        session: waiter.session,
    };
    let open = |_: KeyRef<'_>, name| Ok((all_keys::open_settled(ctx, name)?, false));
    let granted =
        all_keys::decide(&keys, &names, &request, open).and_then(|(verdict, mut opened)| {
            match verdict {
                Verdict::Fits(decisions) => {
                    let granted = all_keys::grant(ctx, &keys, &mut opened, &decisions, &request);
                    all_renewed(ctx, &keys, &opened, &decisions, request.kind);
                    granted
                }
                Verdict::Busy(_) => Err(Error::ChangedWhileGranting),
            }
        });
    match granted {
        Ok((token, fences)) => Answer::GrantedAll { token, fences },
        Err(err) => Answer::Error(err),
    }
}

/// When the next shared holder of `key` is to be taken out, if it holds shared holders:
/// the millisecond after its expiry (holders leave once their time is strictly past, as
/// keys do).
fn next_holder_expiry(opened: &Key) -> Option<i64> {
    match opened.lock() {
        Ok(Some(LockValue::Shared(holders))) => {
            holders.next_expiry().map(|expires_at| expires_at + 1)
        }
        _ => None,
    }
}

/// The shared holders of `key` (`name` in database `db`) changed: a timer takes each out
/// at its own time, within a few milliseconds, on a master.
pub fn watch_holders(ctx: &Context, key: KeyRef, opened: &Key) {
    if let Some(due_at) = next_holder_expiry(opened) {
        arm_timer(ctx, &key.to_id(), due_at);
    }
}

/// Shared holders arrived at `key` (loaded, restored, copied, moved, replicated): their
/// expiries are watched now, or once this server serves its keys.
pub fn shared_arrived(key: KeyRef) {
    let name = key.name;
    let ctx = ffi::detached();
    let id = key.to_id();
    if ffi::is_loading() || ffi::is_replica(&ctx) || slot_import::is_importing(name) {
        PENDING.with(|p| p.borrow_mut().insert(id));
    } else {
        arm_timer(&ctx, &id, ffi::now_ms());
    }
}

/// The server starts serving its keys (loading ended on a master, or it was promoted):
/// the shared holders it has been keeping are looked at now.
pub fn serving(ctx: &Context) {
    if ffi::is_replica(ctx) || ffi::is_loading() {
        return;
    }
    let pending = PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()));
    let now_ms = ffi::now_ms();
    for id in pending {
        arm_timer(ctx, &id, now_ms);
    }
}

/// Writes the grant of `key` to `waiter`, and returns what it is told.
fn grant_to(ctx: &Context, opened: &mut Key, mut waiter: Waiter) -> (Waiter, Answer) {
    if let Some(redirect) = routing::route(ctx, &waiter.key.name).redirect() {
        return (waiter, Answer::Error(redirect));
    }
    let token = std::mem::take(&mut waiter.token);
    let request = GrantRequest {
        key: waiter.key.as_ref(),
        token: NewToken::Given(&token),
        kind: waiter.kind,
        ttl_ms: waiter.ttl_ms,
        client: waiter.client,
        session: waiter.session,
        value: waiter.value.as_deref(),
    };
    let all_keys = waiter.all_keys;
    let answer = match store::grant(ctx, opened, request, |token, fence| {
        // LOCK.ACQUIREALL of one key: a fence per key, still.
        if all_keys {
            Answer::GrantedAll {
                token: token.into(),
                fences: vec![fence],
            }
        } else {
            Answer::Granted {
                token: token.into(),
                fence,
            }
        }
    }) {
        Ok((_, granted)) => granted,
        Err(err) => Answer::Error(err),
    };
    (waiter, answer)
}

/// `key` (opened as `opened`) was renewed in `kind` (`renewal::renew`): an exclusive
/// lock's new deadline, or its shared holders' new expiries, are watched from now on.
pub fn renewed(ctx: &Context, key: KeyRef, opened: &Key, kind: Kind) {
    match kind {
        Kind::Exclusive => deadline_moved(ctx, key, opened.expire_at()),
        Kind::Shared { .. } => watch_holders(ctx, key, opened),
    }
}

/// The keys of a grant of several at once (`all_keys::grant`, as `decisions` said) that
/// were renewed, or hold shared holders: watched as `renewed` says.
pub fn all_renewed(
    ctx: &Context,
    keys: &[KeyRef],
    opened: &[Key],
    decisions: &[Decision],
    kind: Kind,
) {
    for ((&key, opened), decision) in keys.iter().zip(opened).zip(decisions) {
        if *decision == Decision::Renew || kind != Kind::Exclusive {
            renewed(ctx, key, opened, kind);
        }
    }
}

/// The lock on `key` was given a new deadline (`LOCK.EXTEND`, a renewing acquire): if
/// clients wait for it, the handoff must not come later than that.
pub fn deadline_moved(ctx: &Context, key: KeyRef, expire_at: Option<i64>) {
    if queues::queued(key) {
        rearm(ctx, &key.to_id(), expire_at);
    }
}

/// A waiter has just queued for the lock on `key`, which expires at `expire_at`.
pub fn waiting_for(ctx: &Context, key: KeyRef, expire_at: Option<i64>) {
    rearm(ctx, &key.to_id(), expire_at);
}

/// A lock key left the keyspace other than by a release (the type's unlink callback,
/// through `changes.rs`): if clients wait for it, hand it over as soon as writes are
/// allowed.
pub fn lock_gone(key: KeyRef) {
    let id = key.to_id();
    PENDING.with(|p| {
        let mut pending = p.borrow_mut();
        if !pending.is_empty() {
            pending.remove(&id);
        }
    });
    if queues::busy(&id) {
        run_soon(id);
    }
}

/// The oldest waiter of `key` left without it: the next ones may fit now.
pub fn head_left(key: KeyRef) {
    run_soon(key.to_id());
}

/// Runs the handoff of `id` right after the current command or cycle: as a
/// post-notification job where the server has them (atomically with the operation that
/// freed the lock), else from a timer.
fn run_soon(id: KeyId) {
    let detached = ffi::detached();
    if let Err(id) = ffi::post_job_with(&detached, on_job, id) {
        arm_timer(&detached, &id, ffi::now_ms());
    }
}

fn on_job(ctx: &Context, id: KeyId) {
    settle(ctx, &id);
    watching::settle(ctx);
}

/// While waiters remain for a held key, a timer at its deadline hands it over on time,
/// and looks again every `RECHECK_MS` meanwhile.
fn rearm(ctx: &Context, id: &KeyId, expire_at: Option<i64>) {
    if queues::busy(id) {
        let soon_at = ffi::now_ms().saturating_add(RECHECK_MS);
        arm_timer(
            ctx,
            id,
            expire_at.map_or(soon_at, |expire_at| expire_at.min(soon_at)),
        );
    }
}

/// Makes sure a timer fires for `key` no later than `at_ms`.
fn arm_timer(ctx: &Context, id: &KeyId, at_ms: i64) {
    let existing = TIMERS.with(|t| t.borrow().get(id).copied());
    if let Some((timer, fires_at)) = existing {
        if fires_at <= at_ms {
            return;
        }
        ffi::stop_timer_with::<KeyId>(ctx, timer);
    }
    let delay = at_ms.saturating_sub(ffi::now_ms());
    let timer = ffi::start_timer_with(ctx, delay, on_timer, id.clone());
    TIMERS.with(|t| {
        let mut timers = t.borrow_mut();
        timers.insert(id.clone(), (timer, at_ms));
    });
}

fn on_timer(ctx: &Context, id: KeyId) {
    TIMERS.with(|t| {
        let mut timers = t.borrow_mut();
        timers.remove(&id);
        if room::should_shrink(timers.len(), timers.capacity()) {
            timers.shrink_to_fit();
        }
    });
    settle(ctx, &id);
    watching::settle(ctx);
}

/// A flush or a database swap changed many keys without a callback per key: every key
/// with waiters is looked at as soon as writes are allowed.
pub fn many_keys_changed() {
    for id in queues::keys() {
        run_soon(id);
    }
}

/// The server became a replica: it grants nothing more. Redis has unblocked the waiters
/// already (they left through the disconnect callback); Valkey leaves a module's waiters
/// to the module, which answers them with an error.
pub fn demoted(ctx: &Context) {
    queues::answer_all(ctx, |_| Answer::Error(Error::UnblockedByRoleChange));
}
