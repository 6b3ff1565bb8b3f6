//! Session-bound locks on the server: a lock taken with `SESSION grace-ms` is released
//! `grace-ms` after its connection closes, unless its holder reclaims it first.
//!
//! The registry (`bindings.rs`) knows every such lock; this file carries it out:
//!
//! - a connection's close (the server's client-change event) starts the grace of the
//!   locks bound to it: one module timer per grace length among them, not one per lock.
//!   The module listens to that event only while some lock is bound to an open
//!   connection: the server pays for every listener on every connect and close;
//! - when a grace ends, its locks are released like `LOCK.RELEASE` releases them
//!   (deleted, `DEL` replicated, `lock.release` notified, the next waiter granted at
//!   once), each if it is still the same binding: same connection, still gone. A lock
//!   released, deleted, replaced or reclaimed meanwhile is left alone. At most `SLICE`
//!   locks go per turn of the event loop, so a connection that held a hundred thousand
//!   does not stall the server's other clients while they go;
//! - a reclaim (the holder's token acquires again) ends the grace of that lock;
//! - a server that does not serve its keys yet (loading, a replica) watches nothing: its
//!   session-bound locks wait, pending, until it does (end of loading, promotion), and
//!   their graces start then.

use std::cell::RefCell;

use redis_module::Context;

use crate::datatype::LockKey;
use crate::datatype::events;
use crate::ffi::guard;
use crate::ffi::{self, Key};
use crate::keyspace::registry;
use crate::keyspace::slot_import;
use crate::keyspace::store::{self, EVENT_RELEASE};
use crate::keyspace::waiting;
use crate::keyspace::watching;
use lock_core::bindings::{self, Binding, Start};
use lock_core::key::KeyRef;
use lock_core::lock::Session;
use lock_core::queue::KeyId;
use lock_core::stats;
use lock_core::value::LockValue;

/// How soon a grace that ended while the server held writes back is looked at again.
const PAUSED_RETRY_MS: i64 = 10;

/// How many locks a grace releases per turn of the event loop: one or two milliseconds'
/// work. The rest follow at the next turn, after the server has served its clients.
const SLICE: usize = 512;

/// Stops listening for closed connections once no lock is bound to an open one. Later,
/// from a timer: never from inside the client-change callback, and a lock bound before
/// then keeps the listener.
fn unwatch_when_idle() {
    if registry::with(|b| b.watches_connections()) {
        return;
    }
    ffi::after_this_command(|_| {
        if !registry::with(|b| b.watches_connections()) {
            ffi::watch_connections(false);
        }
    });
}

/// The server's client-change event: connection `client` closed. Starts the grace of
/// every lock bound to it, one per grace length; costs one lookup for a connection that
/// held none.
pub fn disconnected(ctx: &Context, client: u64) {
    for (grace_ms, keys) in registry::with(|b| b.disconnected(client)) {
        let binding = Binding { client, grace_ms };
        start_grace(ctx, binding, Start::Close, keys, grace_ms);
    }
    unwatch_when_idle();
}

/// The server starts serving its keys (loading ended on a master, or it was promoted):
/// the grace of every pending lock starts now, unless its connection is still open.
pub fn serving(ctx: &Context) {
    if ffi::is_replica(ctx) || ffi::is_loading() {
        return;
    }
    let mut starts = bindings::Starts::<Binding>::new();
    for (id, binding) in registry::with(bindings::Bindings::take_pending) {
        if slot_import::is_importing(&id.name) {
            // Another import still brings this slot: its grace waits for that one.
            registry::with(|b| b.pend(id, binding));
        } else if ffi::client_connected(binding.client) {
            store::bind(id.as_ref(), binding.client, binding.grace_ms);
        } else {
            bindings::add_start(&mut starts, binding, id);
        }
    }
    for (binding, keys) in starts {
        start_grace(ctx, binding, Start::Own, keys, binding.grace_ms);
    }
}

/// The server follows a master now: it watches no connection and ends no grace.
pub fn demoted(ctx: &Context) {
    for timer in registry::with(bindings::Bindings::demote) {
        stop_grace_timer(ctx, timer);
    }
    unwatch_when_idle();
}

/// Database `db` (all for `None`) was emptied.
pub fn flushed(ctx: &Context, db: Option<i32>) {
    for timer in registry::with(|b| b.flushed(db)) {
        stop_grace_timer(ctx, timer);
    }
    unwatch_when_idle();
}

/// Databases `a` and `b` swapped their contents.
pub fn swapped(a: i32, b: i32) {
    registry::with(|r| r.swapped(a, b));
}

/// A session-bound lock is now at `key`: granted elsewhere and copied here (replication,
/// the AOF, a slot import), loaded, restored, renamed, moved or copied. It is watched from
/// now on: bound if its connection is open, else in grace, or pending if this server does
/// not serve it (yet).
pub fn arrived(key: KeyRef, session: Session) {
    let binding = Binding {
        client: session.client,
        grace_ms: session.grace_ms,
    };
    let ctx = ffi::detached();
    if ffi::is_loading() || ffi::is_replica(&ctx) || slot_import::is_importing(key.name) {
        registry::with(|b| b.pend(key.to_id(), binding));
    } else if ffi::client_connected(session.client) {
        store::bind(key, session.client, session.grace_ms);
    } else {
        start_grace(
            &ctx,
            binding,
            Start::Own,
            vec![key.to_id()],
            session.grace_ms,
        );
    }
}

thread_local! {
    /// Session-bound locks that left their key, with their connection, to be forgotten
    /// once the command that removed them is over.
    static LEFT: RefCell<Vec<(KeyId, u64)>> = const { RefCell::new(Vec::new()) };
}

/// A session-bound lock left `key`, by whatever means. The key may already hold its
/// successor (`RESTORE` or `COPY` with `REPLACE` load the new value before the old one
/// goes), so the registry is told once the command is over, with what the key holds then.
pub fn gone(key: KeyRef, session: Session) {
    let first = LEFT.with(|left| {
        let mut left = left.borrow_mut();
        left.push((key.to_id(), session.client));
        left.len() == 1
    });
    if first {
        ffi::after_this_command(reconcile_left);
    }
}

/// Tells the registry what the keys that session-bound locks left hold now.
fn reconcile_left(ctx: &Context) {
    let mut clients = Vec::new();
    for (id, client) in LEFT.with(|left| std::mem::take(&mut *left.borrow_mut())) {
        let still_bound = bound_at(ctx, &id, client);
        registry::with(|b| b.left(&id, client, still_bound));
        if !clients.contains(&client) {
            clients.push(client);
        }
    }
    // A connection that binds and releases many locks leaves stale entries in its
    // list: once half of it is, keep only the keys still bound to it.
    for client in clients {
        let Some(keys) = registry::with(|b| b.to_compact(client)) else {
            continue;
        };
        let still_bound: Vec<KeyId> = keys
            .into_iter()
            .filter(|id| bound_at(ctx, id, client))
            .collect();
        registry::with(|b| b.compact(client, &still_bound));
    }
    unwatch_when_idle();
}

/// How many session-bound locks wait out their grace now: each lock a running grace
/// lists, with its connection, that is still bound to that connection, which is still
/// closed (`INFO lock`'s `sessions_in_grace`; a lock whose shared holders are bound to
/// the same connection counts once). Linear in the keys of running graces; 0 on a
/// replica, which runs none.
pub fn in_grace(ctx: &Context) -> usize {
    let listed = registry::with(|b| b.in_grace());
    let db = ffi::selected_db(ctx);
    let count = listed
        .iter()
        .filter(|(id, client)| !ffi::client_connected(*client) && bound_at(ctx, id, *client))
        .count();
    if ffi::selected_db(ctx) != db {
        ffi::select_db(ctx, db);
    }
    count
}

/// Whether some holder of `key` is bound to connection `client`.
fn bound_at(ctx: &Context, id: &KeyId, client: u64) -> bool {
    if ffi::selected_db(ctx) != id.db && !ffi::select_db(ctx, id.db) {
        return false;
    }
    let name = ctx.create_string(id.name.as_slice());
    Key::open_read(ctx, &name)
        .lock()
        .ok()
        .flatten()
        .is_some_and(|value| value.bound_to(client))
}

/// `RENAME` and `MOVE` bring a lock to a new key with no type callback that names the
/// destination: their notification of it is where a session-bound lock (or shared
/// holders, whose expiries are watched) that left another key is found again (`COPY`
/// has its type callback). Any other event costs a flag check.
pub fn key_moved(ctx: &Context, event: &[u8], name: &[u8]) {
    guard::callback((), || {
        if !events::is_session_in_flight() || !matches!(event, b"rename_to" | b"move_to") {
            return;
        }
        events::take_session_in_flight();
        let key_name = ctx.create_string(name);
        let opened = Key::open_read(ctx, &key_name);
        let key = KeyRef::new(ffi::selected_db(ctx), name);
        if let Ok(Some(value)) = opened.lock() {
            for session in value.sessions() {
                arrived(key, session);
            }
            if matches!(value, LockValue::Shared(_)) {
                waiting::shared_arrived(key);
            }
        }
    })
}

/// Starts a grace of the locks on `keys` bound as `binding`: their release `delay_ms`
/// from now. The timer carries the grace's id, not the keys, which `SWAPDB` may move
/// meanwhile.
fn start_grace(ctx: &Context, binding: Binding, start: Start, keys: Vec<KeyId>, delay_ms: i64) {
    let id = registry::with(bindings::Bindings::new_grace_id);
    let timer = ffi::start_timer_with(ctx, delay_ms, on_grace_end, id);
    registry::with(|b| b.grace_started(id, timer, binding, start, keys));
}

/// Grace `id` runs on: its timer fires again in `delay_ms`.
fn rearm(ctx: &Context, id: u64, delay_ms: i64) {
    let timer = ffi::start_timer_with(ctx, delay_ms, on_grace_end, id);
    registry::with(|b| b.rearmed(id, timer));
}

fn stop_grace_timer(ctx: &Context, timer: u64) {
    ffi::stop_timer_with::<u64>(ctx, timer);
}

fn on_grace_end(ctx: &Context, grace: u64) {
    let Some(binding) = registry::with(|b| b.running(grace)) else {
        return;
    };
    if ffi::is_replica(ctx) {
        let (due, _) = registry::with(|b| b.take_due(grace, usize::MAX));
        registry::with(|b| due.into_iter().for_each(|id| b.pend(id, binding)));
    } else if ffi::writes_paused() {
        rearm(ctx, grace, PAUSED_RETRY_MS);
    } else {
        // A timer made now with no delay fires at the event loop's next turn, not in
        // this one: the server serves its clients in between.
        let (due, more) = registry::with(|b| b.take_due(grace, SLICE));
        for id in &due {
            release(ctx, id, binding);
        }
        if more {
            rearm(ctx, grace, 0);
        }
    }
}

/// The grace `binding.grace_ms` of the lock on `key` ran out, since its connection
/// closed (or the server started serving it): release every holder still bound to that
/// connection with a grace no longer than that, if the connection is still gone. A
/// holder bound with a longer grace gets the rest of it. (Linear in the key's holders:
/// once per grace, never on a command's path.)
fn release(ctx: &Context, id: &KeyId, binding: Binding) {
    let (db, name) = (id.db, id.name.as_slice());
    if ffi::client_connected(binding.client)
        || (ffi::selected_db(ctx) != db && !ffi::select_db(ctx, db))
    {
        return;
    }
    let key_name = ctx.create_string(name);
    let mut opened = Key::open_write(ctx, &key_name);
    let Ok(Some(value)) = opened.lock() else {
        return;
    };
    let bound: Vec<(Vec<u8>, i64)> = value
        .locks()
        .filter_map(|lock| {
            let session = lock.session()?;
            (session.client == binding.client).then(|| (lock.token().to_vec(), session.grace_ms))
        })
        .collect();
    let longer = bound
        .iter()
        .map(|(_, grace)| *grace)
        .filter(|grace| *grace > binding.grace_ms)
        .min();
    let shared = matches!(value, LockValue::Shared(_));
    let mut released = 0;
    for (token, _) in bound.iter().filter(|(_, grace)| *grace <= binding.grace_ms) {
        let gone = if shared {
            store::drop_holder(ctx, &mut opened, token).is_ok_and(|h| h.is_some())
        } else {
            events::releasing(|| opened.delete());
            ffi::replicate_del(ctx, opened.name());
            true
        };
        if gone {
            ffi::notify(ctx, EVENT_RELEASE, opened.name());
            stats::RELEASES.bump();
            stats::SESSION_RELEASES.bump();
            released += 1;
        }
    }
    if let Some(grace_ms) = longer {
        let rest = Binding {
            client: binding.client,
            grace_ms,
        };
        let keys = vec![id.clone()];
        start_grace(ctx, rest, Start::Own, keys, grace_ms - binding.grace_ms);
    }
    if released > 0 {
        waiting::watch_holders(ctx, KeyRef::new(db, name), &opened);
        drop(opened);
        waiting::handoff(ctx, KeyRef::new(db, name));
        watching::settle(ctx);
    }
}
