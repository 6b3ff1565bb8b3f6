//! Replies held until replicas have the grant (`REPLICAS n`, the `lock.replicas`
//! setting): which replies are held, for which grant, until when, and what a shortfall
//! undoes. Only the records: what reads the replicas and ends a held reply is
//! `keyspace/replicated.rs`, above; it runs before the server sleeps, in the same turn
//! of the event loop as the grant.
//!
//! A held reply is ended exactly once: answered (enough replicas, or a shortfall), or
//! its client went away (`gone`: the grant waits in `undos` to be undone by the layer
//! above, where writes are allowed).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::Context;

use super::queues::{self, Answer};
use crate::ffi::{self, blocked};
use lock_core::error::Error;
use lock_core::queue::Waiter;
use lock_core::replicas::{Asked, Setting, Wait};

/// What a shortfall undoes: the grant of `token` on `keys` of database `db`, released
/// by its token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undo {
    /// The database of the keys.
    pub db: i32,
    /// The keys granted.
    pub keys: Vec<Vec<u8>>,
    /// The token that holds them.
    pub token: Vec<u8>,
}

/// A reply held until replicas acknowledge the grant.
#[derive(Debug)]
pub struct Held {
    /// What the client is told once enough replicas have the grant.
    pub answer: Answer,
    /// The database the grant is in.
    pub db: i32,
    /// What a shortfall undoes (`None`: an extend, which keeps the lock).
    pub undo: Option<Undo>,
    /// How many replicas, for how long.
    pub wait: Wait,
    /// When the wait runs out (ms, the server's clock).
    pub deadline_ms: i64,
    /// The replication offset that holds the grant, once read (before the server
    /// sleeps, when the grant has been replicated).
    pub target: Option<i64>,
    /// How many replicas had acknowledged it when last looked at.
    pub acked: u32,
}

thread_local! {
    /// The held replies, by the handle of their blocked client.
    static HELD: RefCell<HashMap<usize, Held>> = RefCell::new(HashMap::new());
    /// Grants whose client went away while held: to be undone.
    static UNDOS: RefCell<Vec<Undo>> = const { RefCell::new(Vec::new()) };
    /// `lock.replicas`, the server it needs, and what `auto` knows of the replicas:
    /// one cell, read once by a grant.
    static RULE: Cell<Rule> = const { Cell::new(Rule::INITIAL) };
}

/// What decides a grant's replica wait.
#[derive(Debug, Clone, Copy)]
struct Rule {
    /// `lock.replicas`.
    setting: Setting,
    /// The oldest server of this one's family that can hold a reply for replicas, when
    /// this one cannot (set at load).
    needs: Option<&'static str>,
    /// When `auto` last read the replicas (ms, the server's clock) and how many were
    /// attached.
    looked: Option<(i64, usize)>,
    /// When `auto` last found an attached replica (ms), if ever.
    last_online: Option<i64>,
    /// When `auto` first found none after that (ms), if it has.
    none_since: Option<i64>,
}

impl Rule {
    const INITIAL: Rule = Rule {
        setting: Setting::Auto,
        needs: None,
        looked: None,
        last_online: None,
        none_since: None,
    };
}

/// Whether a grant whose command names no `REPLICAS` is answered at once with no further
/// look: while the setting cannot wait (`0`, or a server that cannot), and for the rest
/// of the second after `auto` looked and found a master without replicas that never had
/// one (a timer ends it). Every change of the rule ends it sooner. What a grant on a
/// master without replicas pays for the rule: one load. (A timer of an earlier second
/// that ends a later one early costs a look, nothing else.) A plain static: the server
/// runs commands on its main thread only.
static UNWAITED: AtomicBool = AtomicBool::new(false);

/// The server's cached clock in ms (the time of the current command).
fn now_ms() -> i64 {
    ffi::now_us() / 1000
}

/// Changes the rule's cell with `f`; the next grant looks in full.
fn update(f: impl FnOnce(&mut Rule)) {
    RULE.with(|cell| {
        let mut rule = cell.get();
        f(&mut rule);
        cell.set(rule);
    });
    UNWAITED.store(false, Ordering::Relaxed);
}

/// Records, at load, the server a replica wait needs if this one cannot do it.
pub fn init(needs: Option<&'static str>) {
    update(|rule| rule.needs = needs);
}

/// The oldest server of this one's family that can hold a reply for replicas, when this
/// one cannot.
pub fn needs() -> Option<&'static str> {
    RULE.with(Cell::get).needs
}

/// `lock.replicas` now.
pub fn setting() -> Setting {
    RULE.with(Cell::get).setting
}

/// Sets `lock.replicas`: refused (with the error's text) for a count on a server that
/// cannot wait (`auto` is accepted there, and waits for nothing).
pub fn set_setting(setting: Setting) -> Result<(), Error> {
    if let (Setting::Count(_), Some(oldest)) = (setting, needs()) {
        return Err(Error::ReplicasUnsupported(oldest));
    }
    update(|rule| rule.setting = setting);
    Ok(())
}

/// Checks a command's `REPLICAS` before anything is touched: refused where the server
/// cannot wait, or cannot hold this reply (`can_hold`: not inside MULTI/EXEC or a script).
pub fn check(asked: Asked, can_hold: bool) -> Result<(), Error> {
    if !asked.explicit() {
        return Ok(());
    }
    if let Some(oldest) = needs() {
        return Err(Error::ReplicasUnsupported(oldest));
    }
    if !can_hold {
        return Err(Error::ReplicasCannotWait);
    }
    Ok(())
}

/// How long `auto` counts a master that lost its replicas as still having one,
/// from the first grant that found none: a master deposed by a partition drops its
/// replica links when the partition heals, and Sentinel demotes it only after it
/// claimed the master role for 8 s; its grants in between must not be answered
/// unwaited (the packages keep the same rule). Counted from the first grant that finds
/// none, not from the last that found one: on a deposed master no grant may come for
/// the whole partition (its clients are cut off too), and the hold must still cover
/// the demotion after the heal.
const AUTO_HOLD_MS: i64 = 15_000;

/// How long what `auto` found is taken as still so without looking again: the replicas
/// (`ffi::replication::attached`) are read at most once a second for grants, whether it
/// found replicas or none (a grant on a master without replicas then costs what it cost before `auto`
/// existed). A replica that comes online or goes away (the server's replica-change
/// event) is looked at by the next grant; one that attached and is still in its first
/// sync, at the latest a second later.
const AUTO_RECHECK_MS: i64 = 1_000;

/// The replicas `auto` counts now, `rule` being what it knew: those attached, online or
/// still in their first sync (a replica Sentinel may promote before its
/// sync ends must not miss a grant: the grant waits for the sync, or falls short), or 1
/// for `AUTO_HOLD_MS` after the first grant that found none where one was found before
/// (a promotion starts afresh).
fn auto_attached(ctx: &Context, mut rule: Rule) -> usize {
    let now = now_ms();
    let fresh = rule
        .looked
        .filter(|(at, _)| now.saturating_sub(*at) < AUTO_RECHECK_MS);
    let attached = fresh.map_or_else(
        || {
            let attached = ffi::replication::attached(ctx);
            rule.looked = Some((now, attached));
            attached
        },
        |(_, attached)| attached,
    );
    let counted = if attached > 0 {
        rule.last_online = Some(now);
        rule.none_since = None;
        attached
    } else if rule.last_online.is_none() {
        0
    } else {
        let since = *rule.none_since.get_or_insert(now);
        if now.saturating_sub(since) < AUTO_HOLD_MS {
            1
        } else {
            forget(&mut rule);
            0
        }
    };
    RULE.with(|cell| cell.set(rule));
    if let (0, Setting::Auto, Some((at, _)), None) =
        (counted, rule.setting, rule.looked, rule.last_online)
    {
        // Until the look is a second old, the setting's grants need not look again.
        if !UNWAITED.swap(true, Ordering::Relaxed) {
            let left = at.saturating_add(AUTO_RECHECK_MS).saturating_sub(now);
            ffi::timers::start_timer_with(ctx, left, look_again, ());
        }
    }
    counted
}

/// The second of `auto`'s last look is over: the next grant looks again.
fn look_again(_ctx: &Context, (): ()) {
    UNWAITED.store(false, Ordering::Relaxed);
}

/// A replica came online or went away: the next grant looks at the replicas again.
pub fn replicas_changed() {
    update(|rule| rule.looked = None);
}

/// A promotion (or a hold that ran out): what `auto` saw as a replica is forgotten.
pub fn promoted() {
    update(forget);
}

/// Forgets what `auto` saw of the replicas.
fn forget(rule: &mut Rule) {
    rule.last_online = None;
    rule.none_since = None;
    rule.looked = None;
}

/// The replica wait of a grant of `ttl_ms` whose command asked `asked`, on this server
/// now: `None` to answer at once. Reads the replicas only under `auto`, and under `auto`
/// whether this server is a replica (which waits for nothing) only when it has replicas
/// of its own to wait for. The caller checks that the reply can be held.
/// (Inlined into the commands: a grant answered at once pays for a load and a branch;
/// the rest is `looked_up`.)
#[inline(always)]
pub fn wait_for(ctx: &Context, asked: Asked, ttl_ms: i64) -> Option<Wait> {
    if asked.replicas.is_none() && UNWAITED.load(Ordering::Relaxed) {
        return None;
    }
    looked_up(ctx, asked, ttl_ms)
}

/// `wait_for` where the flag does not answer: the rule looked at in full.
#[inline(never)]
fn looked_up(ctx: &Context, asked: Asked, ttl_ms: i64) -> Option<Wait> {
    let rule = RULE.with(Cell::get);
    let setting = asked.rule(rule.setting);
    if rule.needs.is_some() || !setting.waits() {
        if rule.needs.is_some() || !rule.setting.waits() {
            // The setting never waits here: neither do its grants, until it changes.
            UNWAITED.store(true, Ordering::Relaxed);
        }
        return None;
    }
    let attached = if setting == Setting::Auto {
        let attached = auto_attached(ctx, rule);
        if attached == 0 || ffi::is_replica(ctx) {
            return None;
        }
        attached
    } else {
        0
    };
    asked.wait(rule.setting, attached, ttl_ms)
}

/// Holds the reply of blocked client `handle` (`answer`) until `wait` is met; the
/// replicas are looked at before the server next sleeps.
pub fn hold(ctx: &Context, handle: usize, answer: Answer, db: i32, undo: Option<Undo>, wait: Wait) {
    if !ffi::watch_before_sleep(ctx, true) || !ffi::replication::watch_acks(ctx, true) {
        ffi::log_warning(
            "lock: could not follow the event loop or the replicas' acknowledgements: a held reply may end at its timeout",
        );
    }
    let held = Held {
        answer,
        db,
        undo,
        wait,
        deadline_ms: ffi::now_ms().saturating_add(wait.timeout_ms),
        target: None,
        acked: 0,
    };
    HELD.with(|h| h.borrow_mut().insert(handle, held));
    lock_core::stats::REPLICA_WAITS.bump();
}

/// Answers a waiter the handoff granted (or refused): at once, or once its replicas have
/// the grant (its reply held here).
pub fn answer(ctx: &Context, waiter: Waiter, answer: Answer) {
    let token = match &answer {
        Answer::Granted { token, .. } | Answer::GrantedAll { token, .. } => token,
        _ => return queues::answer(ctx, waiter, answer),
    };
    let Some(wait) = wait_for(ctx, waiter.replicas, waiter.ttl_ms) else {
        return queues::answer(ctx, waiter, answer);
    };
    let token = token.to_vec();
    queues::waited(&waiter);
    queues::stop_wake_timer(ctx, &waiter);
    let db = waiter.key.db;
    let keys = waiter.keys().map(|key| key.name.clone()).collect();
    let undo = Undo { db, keys, token };
    hold(ctx, waiter.handle, answer, db, Some(undo), wait);
}

/// Whether replies are held.
pub fn any() -> bool {
    HELD.with(|h| !h.borrow().is_empty())
}

/// Whether anything is held or waits to be undone.
pub fn busy() -> bool {
    any() || UNDOS.with(|u| !u.borrow().is_empty())
}

/// Runs `f` over the held replies.
pub fn with_held<T>(f: impl FnOnce(&mut HashMap<usize, Held>) -> T) -> T {
    HELD.with(|h| f(&mut h.borrow_mut()))
}

/// Ends the held reply of `handle` with `reply` (none: the client is gone): the
/// client's record, if it was held.
pub fn end(handle: usize, reply: Option<Answer>) -> Option<Held> {
    let held = HELD.with(|h| h.borrow_mut().remove(&handle))?;
    blocked::unblock(blocked::Handle::<Answer>::from_id(handle), reply);
    Some(held)
}

/// Ends the held reply of `handle` with its grant: enough replicas have it.
pub fn granted(handle: usize) {
    if let Some(held) = HELD.with(|h| h.borrow_mut().remove(&handle)) {
        blocked::unblock(
            blocked::Handle::<Answer>::from_id(handle),
            Some(held.answer),
        );
    }
}

/// Ends the held reply of `handle` with `NOTREPLICATED`, its grant to be undone (an
/// extend keeps the lock) when `undo`.
pub fn short(handle: usize, undo: bool) {
    let Some(held) = HELD.with(|h| h.borrow().get(&handle).map(|h| (h.acked, h.wait.replicas)))
    else {
        return;
    };
    let (acked, required) = held;
    lock_core::stats::REPLICA_SHORTFALLS.bump();
    let reply = Answer::Error(Error::NotReplicated { acked, required });
    let ended = end(handle, Some(reply));
    if let (
        true,
        Some(Held {
            undo: Some(grant), ..
        }),
    ) = (undo, ended)
    {
        UNDOS.with(|u| u.borrow_mut().push(grant));
    }
}

/// The client of held reply `handle` went away (or an admin unblocked it): its grant is
/// to be undone; whether it was held.
pub fn gone(handle: usize) -> bool {
    let Some(held) = end(handle, None) else {
        return false;
    };
    if let Some(undo) = held.undo {
        UNDOS.with(|u| u.borrow_mut().push(undo));
    }
    true
}

/// Grants to be undone, taken.
pub fn take_undos() -> Vec<Undo> {
    UNDOS.with(|u| std::mem::take(&mut *u.borrow_mut()))
}

/// Puts back grants that could not be undone yet (writes are paused).
pub fn defer_undos(undos: Vec<Undo>) {
    UNDOS.with(|u| u.borrow_mut().extend(undos));
}

/// Forgets every grant waiting to be undone (the server is a replica now, and writes
/// nothing of its own).
pub fn forget_undos() {
    UNDOS.with(|u| u.borrow_mut().clear());
}
