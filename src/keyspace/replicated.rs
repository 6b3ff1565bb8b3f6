//! Grants a replica has (`REPLICAS n`, the `lock.replicas` setting): a reply held in
//! `waiting/held.rs` is answered with its grant once enough online replicas acknowledged
//! the replication offset that holds it, or at its timeout told `NOTREPLICATED acked <a>
//! required <n>`, its grant undone as a release by its token (the next waiters are
//! served; an extend keeps the lock).
//!
//! Looked at before the server sleeps, in the turn of the event loop that made the
//! grant (replicated by then): the offset to reach is read, the replicas are asked to
//! acknowledge (the server's own `REPLCONF GETACK`, sent right after), and their offsets
//! counted again as their acknowledgements arrive: a command filter spots each
//! `REPLCONF ACK` and a timer looks right after the server applied it, before it sends
//! that turn's replies. The event loop and the acknowledgements are followed only while
//! replies are held. A held reply never outlives its timeout: a timer
//! per earliest deadline. Under `CLIENT PAUSE` (or a failover under way) no write may be
//! made: a shortfall is answered at its timeout and undone as soon as writes resume. A
//! demotion, a flush or a database swap ends the held replies at once.

use std::cell::{Cell, RefCell};

use redis_module::Context;

use crate::ffi;
use crate::keyspace::release;
use crate::keyspace::waiting::held::{self, Undo};
use crate::keyspace::watching;
use lock_core::replica_acks::ReplicaAcks;
use lock_core::replicas;

/// How soon a shortfall is undone again while writes are paused.
const PAUSED_RETRY_MS: i64 = 10;

thread_local! {
    /// The timer armed for the earliest deadline of a held reply: `(id, at ms)`.
    static DEADLINE: Cell<Option<(u64, i64)>> = const { Cell::new(None) };
    /// Whether a timer is armed to stop following the event loop, or to retry undoing.
    static QUIET: Cell<bool> = const { Cell::new(false) };
    static RETRY: Cell<bool> = const { Cell::new(false) };
    /// Whether a timer is armed to count the acknowledgements.
    static COUNT_SOON: Cell<bool> = const { Cell::new(false) };
    /// The acknowledgements heard since the last count: `(connection, offset)`, the
    /// connection unknown where the server cannot say.
    static HEARD: RefCell<Vec<(Option<u64>, i64)>> = const { RefCell::new(Vec::new()) };
    /// The offset each replica connection acknowledged.
    static ACKS: RefCell<ReplicaAcks> = RefCell::new(ReplicaAcks::default());
}

/// Makes `before_sleep` what the event loop calls, and `ack_arrived` what each replica
/// acknowledgement calls, while replies are held (at load).
pub fn init() {
    ffi::replication::on_before_sleep(before_sleep);
    ffi::replication::on_ack(ack_arrived);
}

/// A replica's acknowledgement is about to be applied: noted, and the held replies are
/// counted right after (a timer of no delay runs before the server sends this turn's
/// replies).
fn ack_arrived(client: Option<u64>, offset: i64) {
    if !held::any() {
        return;
    }
    HEARD.with(|h| h.borrow_mut().push((client, offset)));
    if !COUNT_SOON.with(|c| c.replace(true)) {
        ffi::start_timer_with(&ffi::detached(), 0, on_count, ());
    }
}

/// Counts the held replies against the acknowledgements just heard: from their offsets
/// alone when each came on a known replica connection and every held reply has its
/// target (the common case: no `INFO` to build), else from `INFO replication`.
fn on_count(ctx: &Context, _: ()) {
    COUNT_SOON.with(|c| c.set(false));
    let heard = HEARD.with(|h| std::mem::take(&mut *h.borrow_mut()));
    if ffi::is_replica(ctx) {
        return; // before the server sleeps, every held reply ends
    }
    let mut all_known = true;
    for (client, offset) in heard {
        let Some(client) = client else {
            all_known = false;
            continue;
        };
        if ACKS.with(|a| a.borrow().unknown(client)) {
            let replica = ffi::replication::is_replica_client(ctx, client);
            ACKS.with(|a| a.borrow_mut().checked(client, replica));
        }
        ACKS.with(|a| a.borrow_mut().acknowledged(client, offset));
    }
    let targeted = held::with_held(|all| all.values().all(|held| held.target.is_some()));
    if all_known && targeted {
        count_heard();
        return;
    }
    let replication = ffi::replication(ctx);
    if replication.master {
        count_and_ask(ctx, &replication);
    }
}

/// Answers the held replies that enough replica connections acknowledged.
fn count_heard() {
    ACKS.with(|acks| {
        let acks = acks.borrow();
        answer_reached(|held| {
            held.target
                .map(|target| held.acked.max(acks.reaching(target)))
        });
    });
}

/// Asks the replicas to acknowledge now, for replies newly held.
fn request_acks(ctx: &Context) {
    ffi::request_acks(ctx);
    lock_core::stats::REPLICA_ACK_REQUESTS.bump();
}

/// Counts the replicas that reached each held reply's target (read now for a reply
/// newly held: `fresh`), and answers those that have enough.
fn count(replication: &ffi::replication::Replication, fresh: &mut bool) {
    answer_reached(|held| {
        let target = *held.target.get_or_insert_with(|| {
            *fresh = true;
            replication.offset
        });
        Some(replicas::acked(&replication.acked, target))
    });
}

/// Counts from `INFO replication` (read by the caller), and asks the replicas for
/// fresh acknowledgements when a reply was newly held.
fn count_and_ask(ctx: &Context, replication: &ffi::replication::Replication) {
    let mut fresh = false;
    count(replication, &mut fresh);
    if fresh {
        request_acks(ctx);
    }
}

/// Sets each held reply's count to `acked_of(held)` (none: left as it is) and answers
/// those that have enough.
fn answer_reached(mut acked_of: impl FnMut(&mut held::Held) -> Option<u32>) {
    let reached = held::with_held(|all| {
        let mut reached = Vec::new();
        for (&handle, held) in all.iter_mut() {
            if let Some(acked) = acked_of(held) {
                held.acked = acked;
                if held.acked >= held.wait.replicas {
                    reached.push(handle);
                }
            }
        }
        reached
    });
    for handle in reached {
        held::granted(handle);
    }
}

/// Before the server sleeps: grants to undo are undone; each held reply learns its
/// target offset (once) and how many replicas reached it, and is answered if enough
/// did; replicas are asked for fresh acknowledgements when a reply was newly held.
fn before_sleep(ctx: &Context) {
    undo_pending(ctx);
    if !held::any() {
        if !held::busy() {
            quiet_soon(ctx);
        }
        return;
    }
    let replication = ffi::replication(ctx);
    if !replication.master {
        end_all(None);
        return;
    }
    count_and_ask(ctx, &replication);
    arm_deadline(ctx);
}

/// The earliest deadline came: every held reply past its deadline is counted once more,
/// and answered with its grant or `NOTREPLICATED`.
fn on_deadline(ctx: &Context, _: ()) {
    DEADLINE.with(|d| d.set(None));
    let now = ffi::now_ms();
    let replication = ffi::replication(ctx);
    let due = held::with_held(|all| {
        let mut due = Vec::new();
        for (&handle, held) in all.iter_mut() {
            if held.deadline_ms <= now {
                let target = held.target.unwrap_or(replication.offset);
                held.acked = replicas::acked(&replication.acked, target);
                due.push((handle, held.acked >= held.wait.replicas));
            }
        }
        due
    });
    for (handle, reached) in due {
        if reached && replication.master {
            held::granted(handle);
        } else {
            held::short(handle, true);
        }
    }
    undo_pending(ctx);
    arm_deadline(ctx);
}

/// Arms the deadline timer for the earliest held reply, unless one is armed by then.
fn arm_deadline(ctx: &Context) {
    let Some(earliest) = held::with_held(|all| all.values().map(|h| h.deadline_ms).min()) else {
        return;
    };
    if DEADLINE
        .with(Cell::get)
        .is_some_and(|(_, at)| at <= earliest)
    {
        return;
    }
    if let Some((timer, _)) = DEADLINE.with(Cell::take) {
        let _ = ffi::stop_timer_with::<()>(ctx, timer);
    }
    let delay = earliest.saturating_sub(ffi::now_ms()).max(0);
    let timer = ffi::start_timer_with(ctx, delay, on_deadline, ());
    DEADLINE.with(|d| d.set(Some((timer, earliest))));
}

/// Undoes the grants whose replies fell short or whose clients went away, as releases
/// by their tokens; later if writes are paused; never on a replica (its master decides).
fn undo_pending(ctx: &Context) {
    let undos = held::take_undos();
    if undos.is_empty() {
        return;
    }
    if ffi::is_replica(ctx) {
        return;
    }
    if ffi::writes_paused() {
        held::defer_undos(undos);
        if !RETRY.with(|r| r.replace(true)) {
            ffi::start_timer_with(ctx, PAUSED_RETRY_MS, on_retry, ());
        }
        return;
    }
    let selected = ffi::selected_db(ctx);
    for undo in undos {
        undo_grant(ctx, &undo);
    }
    if ffi::selected_db(ctx) != selected {
        let _ = ffi::select_db(ctx, selected);
    }
    watching::settle(ctx);
}

/// Releases each key of `undo` held by its token.
fn undo_grant(ctx: &Context, undo: &Undo) {
    if ffi::selected_db(ctx) != undo.db && !ffi::select_db(ctx, undo.db) {
        return;
    }
    for key in &undo.keys {
        let name = ctx.create_string(key.as_slice());
        if let Err(err) = release::release(ctx, undo.db, &name, key, &undo.token) {
            ffi::log_warning(&format!(
                "lock: could not undo an unreplicated grant: {err}"
            ));
        }
    }
}

fn on_retry(ctx: &Context, _: ()) {
    RETRY.with(|r| r.set(false));
    undo_pending(ctx);
}

/// Stops following the event loop soon, from a timer (never from inside the loop's own
/// callback), if nothing is held then.
fn quiet_soon(ctx: &Context) {
    if !QUIET.with(|q| q.replace(true)) {
        ffi::start_timer_with(ctx, 0, on_quiet, ());
    }
}

fn on_quiet(ctx: &Context, _: ()) {
    QUIET.with(|q| q.set(false));
    if !held::busy() {
        let _ = ffi::watch_before_sleep(ctx, false);
        let _ = ffi::replication::watch_acks(ctx, false);
    }
}

/// Ends every held reply with `NOTREPLICATED`, in database `db` only if given, with
/// nothing undone: the server is a replica now, or the keys were flushed.
fn end_all(db: Option<i32>) {
    let handles = held::with_held(|all| {
        all.iter()
            .filter(|(_, held)| db.is_none_or(|db| held.db == db))
            .map(|(&handle, _)| handle)
            .collect::<Vec<_>>()
    });
    for handle in handles {
        held::short(handle, false);
    }
}

/// The server became a replica: held replies end now, nothing undone (the new master's
/// data decides), and nothing waits to be undone.
pub fn demoted() {
    end_all(None);
    held::forget_undos();
    ACKS.with(|a| a.borrow_mut().clear());
}

/// The server became a master: the offsets it heard as one before may come from
/// another history.
pub fn promoted() {
    ACKS.with(|a| a.borrow_mut().clear());
}

/// Database `db` (all: `None`) was flushed: its held grants are gone.
pub fn flushed(db: Option<i32>) {
    end_all(db);
}

/// Databases `a` and `b` swapped: their held grants end, undone where they are now.
pub fn swapped(a: i32, b: i32) {
    let handles = held::with_held(|all| {
        let mut handles = Vec::new();
        for (&handle, held) in all.iter_mut() {
            if held.db == a || held.db == b {
                let now_in = if held.db == a { b } else { a };
                held.db = now_in;
                if let Some(undo) = held.undo.as_mut() {
                    undo.db = now_in;
                }
                handles.push(handle);
            }
        }
        handles
    });
    for handle in handles {
        held::short(handle, true);
    }
}
