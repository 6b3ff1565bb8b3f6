//! `LOCK.WATCH`: clients blocked until a key's holder differs from the one they saw.
//!
//! A watcher gives the fence it last saw (`0`: nobody). If the key's state differs it is
//! answered at once; else it blocks (`blocked.rs`, as waiters do) and is answered when the
//! state changes, with the state then: `[fence, value]`, `[0, nil]`, or nil when its
//! timeout passes. Watchers take nothing: they are not in the lock's queue.
//!
//! Whatever may change a key reports it here (`touched`), and every touched key that has
//! watchers is looked at once the change is complete (`settle`):
//!
//! - the module's own writes (a grant, a release, a shared holder leaving, the effect
//!   commands a replica or the AOF runs): `store.rs`, the commands and the sessions report
//!   the key, and the command, timer or job that wrote it settles before it returns;
//! - the server's writes (`DEL`, expiry, eviction, an overwrite, `RENAME`/`MOVE` away,
//!   `RESTORE`, `COPY`): the type's callbacks report the key through `changes.rs`; the
//!   generic keyspace events (where the module follows them) report `RENAME`/`MOVE` onto a
//!   key and a changed expiry; where it cannot follow them, a lock key that leaves has
//!   every watched key looked at;
//! - flushes, `SWAPDB`, the end of loading, a promotion, a finished slot export: every
//!   watched key is looked at;
//! - a lock's deadline: a timer per watched key looks at it when its time has passed.
//!
//! Settling outside the module's own commands runs as a post-notification job (the same
//! event, where the server has them), else from a timer right after it (Redis 7.0, a
//! replica). A watcher is answered with the state when it is looked at: the latest, not
//! every state in between.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use redis_module::{Context, ContextFlags, RedisString, RedisValue};

use crate::datatype::LockKey;
use crate::datatype::events;
use crate::ffi::Reply;
use crate::ffi::{self, Key, blocked};
use crate::keyspace::routing;
use crate::keyspace::waiting::queues;
use lock_core::error::Error;
use lock_core::key::KeyRef;
use lock_core::queue::KeyId;
use lock_core::stats;
use lock_core::value::LockValue;
use lock_core::watchers::{Watcher, Watchers};

/// A key's state as `LOCK.WATCH` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum View {
    /// Held: the fence of its exclusive holder (of its newest shared holder) and the value
    /// it published.
    Held {
        /// The holder's fence: the term.
        fence: u64,
        /// Its published value (`VALUE`), if any.
        value: Option<Box<[u8]>>,
    },
    /// Nobody holds the key.
    Free,
}

impl View {
    /// The fence a watcher compares with: `0` for nobody.
    pub fn fence(&self) -> u64 {
        match self {
            View::Held { fence, .. } => *fence,
            View::Free => 0,
        }
    }

    /// The reply: `[fence, value]` (value nil when none), `[0, nil]` when free.
    fn reply(&self) -> RedisValue {
        let (fence, value) = match self {
            View::Held { fence, value } => (*fence, value.as_deref()),
            View::Free => (0, None),
        };
        RedisValue::Array(vec![
            RedisValue::Integer(fence as i64),
            value.map_or(RedisValue::Null, |v| RedisValue::StringBuffer(v.to_vec())),
        ])
    }
}

/// What a blocked watcher is told.
#[derive(Debug, Clone)]
enum Answer {
    /// The key's new state.
    State(View),
    /// Its timeout passed: nil.
    Nil,
    /// An error reply (the key is of another type now, or served by another node; the
    /// server became a replica), starting with its code.
    Error(Error),
}

thread_local! {
    /// Every watcher of the server (main thread only, as for the waiters).
    static WATCHERS: RefCell<Watchers> = RefCell::new(Watchers::default());
    /// Watched keys that may have changed, to be looked at by the next `settle`.
    static TOUCHED: RefCell<HashSet<KeyId>> = RefCell::new(HashSet::new());
    /// Whether a job or timer that settles is due already.
    static SCHEDULED: Cell<bool> = const { Cell::new(false) };
    /// The deadline timer of each watched key that expires: `(timer id, fires at ms)`.
    static DEADLINES: RefCell<HashMap<KeyId, (u64, i64)>> = RefCell::new(HashMap::new());
    /// Whether the generic keyspace events reach the module (`RENAME`/`MOVE` onto a key).
    static KEY_EVENTS: Cell<bool> = const { Cell::new(false) };
}

/// How many watchers there are, and whether keys wait for a `settle`: plain statics, read
/// by every grant and every write command, where a thread-local costs a call in a loaded
/// library. (The server calls the module from its main thread only.)
static WATCHING: AtomicUsize = AtomicUsize::new(0);
static UNSETTLED: AtomicBool = AtomicBool::new(false);

fn with<T>(f: impl FnOnce(&mut Watchers) -> T) -> T {
    WATCHERS.with(|w| {
        let mut watchers = w.borrow_mut();
        let result = f(&mut watchers);
        WATCHING.store(watchers.total(), Ordering::Relaxed);
        result
    })
}

/// Reads the state of `key` (opened for reading: a key whose time has passed reads as
/// free). `WRONGTYPE` for a key of another type.
pub fn view(opened: &Key) -> Result<View, Error> {
    Ok(match opened.lock()? {
        None => View::Free,
        Some(LockValue::Exclusive(lock)) => View::Held {
            fence: lock.fence(),
            value: lock.value().map(Box::from),
        },
        Some(shared @ LockValue::Shared(_)) => View::Held {
            fence: shared.newest_fence(),
            value: None,
        },
    })
}

/// LOCK.WATCH's work once its arguments are checked: answers with the state of `name`
/// (`raw`, in database `db`) at once if it differs from `fence`, or inside
/// `MULTI`/`EXEC` or a script; else blocks until it does or `timeout_ms` passes (`0`: no
/// limit).
pub fn watch(
    ctx: &Context,
    (db, name, raw): (i32, &RedisString, &[u8]),
    fence: u64,
    timeout_ms: i64,
) -> Reply {
    let opened = Key::open_read(ctx, name);
    let now = view(&opened)?;
    if now.fence() != fence {
        stats::WATCH_REPLIES.bump();
        return Ok(now.reply());
    }
    // Inside MULTI/EXEC or a script nothing may block: nil, as a timeout would answer
    // (as `BLPOP` answers in a transaction), so a reply with a fence always means a
    // change.
    if ctx.get_flags().contains(ContextFlags::DENY_BLOCKING) {
        return Ok(RedisValue::Null);
    }
    let expire_at = opened.expire_at();
    drop(opened);
    let Some(handle) = blocked::block::<LockWatches>(ctx, queues::admin_unblock()) else {
        return Err(Error::ClientNotBlocked);
    };
    let id = KeyId::new(db, raw);
    let watcher = with(|w| {
        w.add(Watcher {
            handle: handle.id(),
            key: id.clone(),
            fence,
            timer: None,
        })
    });
    if timeout_ms > 0 {
        let timer = ffi::start_timer_with(ctx, timeout_ms, on_timeout, watcher);
        with(|w| w.set_timer(watcher, timer));
    }
    arm_deadline(ctx, &id, expire_at);
    Ok(RedisValue::NoReply)
}

/// Watchers of `key` in database `db`.
pub fn count(key: KeyRef) -> usize {
    with(|w| {
        if w.is_empty() {
            0
        } else {
            w.count(&key.to_id())
        }
    })
}

/// Watchers of every key.
pub fn total() -> usize {
    with(|w| w.total())
}

/// Key `key` of database `db` may have changed: its watchers are looked at once the
/// change is complete (by the next `settle`, at the latest from a job or timer asked for
/// here). Costs a check of an empty map while nobody watches.
pub fn touched(key: KeyRef) {
    // Checked first, without building the key's id: most servers watch nothing.
    if WATCHING.load(Ordering::Relaxed) == 0 {
        return;
    }
    let id = key.to_id();
    if !with(|w| w.watched(&id)) {
        return;
    }
    TOUCHED.with(|t| t.borrow_mut().insert(id));
    UNSETTLED.store(true, Ordering::Relaxed);
    schedule();
}

/// Every watched key may have changed (a flush, `SWAPDB`, loading, a promotion).
pub fn everything_changed() {
    // Checked first, as in `touched`: it runs at every lock key's removal where the
    // generic keyspace events cannot be followed.
    if WATCHING.load(Ordering::Relaxed) == 0 {
        return;
    }
    let keys = with(|w| w.keys());
    if keys.is_empty() {
        return;
    }
    TOUCHED.with(|t| t.borrow_mut().extend(keys));
    UNSETTLED.store(true, Ordering::Relaxed);
    schedule();
}

/// Looks at the keys touched so far and answers their watchers whose state changed. A
/// command calls it before it returns; inside `MULTI`/`EXEC` or a script the keys wait for
/// the job or timer `touched` asked for, when the transaction or script is over.
pub fn settle(ctx: &Context) {
    if !UNSETTLED.load(Ordering::Relaxed)
        || ctx
            .get_flags()
            .intersects(ContextFlags::MULTI | ContextFlags::LUA)
    {
        return;
    }
    UNSETTLED.store(false, Ordering::Relaxed);
    let keys = TOUCHED.with(|t| std::mem::take(&mut *t.borrow_mut()));
    for id in keys {
        look_at(ctx, &id);
    }
}

/// Asks for a settle right after the current command or cycle: a post-notification job
/// where the server has them, else a timer.
fn schedule() {
    if SCHEDULED.with(|s| s.replace(true)) {
        return;
    }
    let detached = ffi::detached();
    if ffi::post_job_with(&detached, on_scheduled, ()).is_err() {
        ffi::start_timer_with(&detached, 0, on_scheduled, ());
    }
}

fn on_scheduled(ctx: &Context, (): ()) {
    SCHEDULED.with(|s| s.set(false));
    settle(ctx);
}

/// Answers the watchers of `id` that have not seen its state now, and keeps a deadline
/// timer for the rest.
fn look_at(ctx: &Context, id: &KeyId) {
    if !with(|w| w.watched(id)) {
        return;
    }
    let was = ffi::selected_db(ctx);
    if was != id.db && !ffi::select_db(ctx, id.db) {
        return;
    }
    let name = ctx.create_string(id.name.as_slice());
    let opened = Key::open_read(ctx, &name);
    let (state, expire_at) = (view(&opened), opened.expire_at());
    drop(opened);
    let (taken, answer) = match state {
        Ok(state) => {
            let taken = with(|w| w.take_changed(id, state.fence()));
            // A key that left for another cluster node: its watchers follow it there.
            let redirect = (state == View::Free && !taken.is_empty())
                .then(|| routing::route(ctx, &id.name).redirect())
                .flatten();
            let answer = redirect.map_or(Answer::State(state), Answer::Error);
            (taken, answer)
        }
        Err(err) => (with(|w| w.take_key(id)), Answer::Error(err)),
    };
    for watcher in taken {
        answer_one(ctx, watcher, answer.clone());
    }
    if with(|w| w.watched(id)) {
        arm_deadline(ctx, id, expire_at);
    }
    if was != id.db {
        ffi::select_db(ctx, was);
    }
}

/// Answers a watcher that has left the watchers: exactly once.
fn answer_one(ctx: &Context, watcher: Watcher, answer: Answer) {
    if let Some(timer) = watcher.timer {
        let _ = ffi::stop_timer_with::<u64>(ctx, timer);
    }
    if matches!(answer, Answer::State(_)) {
        stats::WATCH_REPLIES.bump();
    }
    blocked::unblock(blocked::Handle::from_id(watcher.handle), Some(answer));
}

/// Watcher `id`'s timeout passed: nil.
fn on_timeout(ctx: &Context, id: u64) {
    if let Some(mut watcher) = with(|w| w.remove(id)) {
        watcher.timer = None; // it has just fired
        answer_one(ctx, watcher, Answer::Nil);
    }
}

/// A watched key that expires at `expire_at` is looked at once its time has passed (as
/// the server expires keys: when it is strictly past). A replica follows its master's
/// stream instead, where the key's removal arrives.
fn arm_deadline(ctx: &Context, id: &KeyId, expire_at: Option<i64>) {
    let Some(due_at) = expire_at.map(|expire_at| expire_at.saturating_add(1)) else {
        return;
    };
    if ffi::is_replica(ctx) {
        return;
    }
    let existing = DEADLINES.with(|d| d.borrow().get(id).copied());
    if let Some((timer, fires_at)) = existing {
        if fires_at <= due_at {
            return;
        }
        ffi::stop_timer_with::<KeyId>(ctx, timer);
    }
    let timer = ffi::start_timer_with(
        ctx,
        due_at.saturating_sub(ffi::now_ms()),
        on_deadline,
        id.clone(),
    );
    DEADLINES.with(|d| d.borrow_mut().insert(id.clone(), (timer, due_at)));
}

fn on_deadline(ctx: &Context, id: KeyId) {
    DEADLINES.with(|d| {
        let mut deadlines = d.borrow_mut();
        deadlines.remove(&id);
        if lock_core::room::should_shrink(deadlines.len(), deadlines.capacity()) {
            deadlines.shrink_to_fit();
        }
    });
    look_at(ctx, &id);
    settle(ctx);
}

/// The server became a replica: every watcher is told so, as waiters are (Redis has
/// unblocked them already; Valkey leaves them to the module).
pub fn demoted(ctx: &Context) {
    for watcher in with(Watchers::take_all) {
        answer_one(ctx, watcher, Answer::Error(Error::UnblockedByRoleChange));
    }
}

/// A lock key left the keyspace or arrived in it (the type's callbacks, through
/// `changes.rs`). Where the module cannot follow `RENAME`/`MOVE` onto a key, a lock key
/// that leaves may be arriving at any watched key: every one is looked at.
pub fn lock_changed(key: KeyRef) {
    if KEY_EVENTS.with(Cell::get) || events::is_releasing() {
        touched(key);
    } else {
        everything_changed();
    }
}

/// Sets whether the generic keyspace events reach the module (at load).
pub fn init(key_events: bool) {
    KEY_EVENTS.with(|k| k.set(key_events));
}

/// What the server's calls about a blocked watcher do.
struct LockWatches;

impl blocked::Waits for LockWatches {
    type Answer = Answer;

    fn reply(ctx: &Context, answer: Option<&Answer>) {
        match answer {
            Some(Answer::State(state)) => ctx.reply(Ok(state.reply())),
            Some(Answer::Error(message)) => ctx.reply(Err(ffi::error_reply(message.clone()))),
            Some(Answer::Nil) | None => ctx.reply(Ok(RedisValue::Null)),
        };
    }

    /// The client disconnected, was killed, or the server unblocked it with an error.
    fn disconnected(ctx: &Context, handle: blocked::Handle<Answer>) {
        let watcher = with(|w| w.id_of(handle.id()).and_then(|id| w.remove(id)));
        if let Some(watcher) = watcher {
            if let Some(timer) = watcher.timer {
                let _ = ffi::stop_timer_with::<u64>(ctx, timer);
            }
            blocked::unblock(handle, None);
        }
    }

    /// `CLIENT UNBLOCK` (where the server makes it safe): nil, as a timeout.
    fn admin_unblocked(ctx: &Context, handle: blocked::Handle<Answer>) {
        Self::disconnected(ctx, handle);
    }
}
