//! What the module does on the server events it follows (subscribed and read in
//! `ffi::server_events`, handed here as plain values), and who is told: flushes and
//! database swaps (many keys change with no callback per key), role changes (a replica
//! grants and releases nothing itself), the end of loading (the server starts serving its
//! keys), closed connections (session-bound locks), key moves, and Valkey 9's atomic slot
//! migrations (`slot_import`).

use redis_module::Context;

use crate::ffi;
use crate::ffi::guard;
use crate::ffi::server_events::{ServerEvent, SlotMigration, SlotMigrationEvent};
use crate::keyspace::replicated;
use crate::keyspace::session;
use crate::keyspace::slot_import;
use crate::keyspace::waiting;
use crate::keyspace::watching;
use lock_core::key::KeyRef;
use lock_core::stats;

/// Follows every event below; false if the server refused one. The client-change event
/// is subscribed only while a session-bound lock waits on a connection
/// (`ffi::watch_connections`, which `session` drives).
pub fn init(ctx: &Context) -> bool {
    stats::set_serving(!ffi::is_replica(ctx) && !ffi::is_loading());
    ffi::server_events::follow(ctx, on_server_event)
}

/// Follows the generic keyspace events, of which the sessions follow `rename_to` and
/// `move_to` and the watchers every one (see `Server::key_moves_can_be_followed` for
/// where this is safe).
pub fn follow_key_moves(ctx: &Context) -> bool {
    ffi::server_events::follow_generic_key_events(ctx, on_generic_key_event)
}

/// A generic keyspace event: the sessions follow `rename_to` and `move_to`; the
/// watchers of the key look again (a lock moved onto it, its expiry changed).
fn on_generic_key_event(ctx: &Context, event: &[u8], key: &[u8]) {
    session::key_moved(ctx, event, key);
    guard::callback((), || {
        watching::touched(KeyRef::new(ffi::selected_db(ctx), key))
    });
}

/// Follows Valkey 9's atomic slot migrations (see `slot_import`); false if the server
/// refused the subscription.
pub fn follow_slot_migrations(ctx: &Context) -> bool {
    ffi::server_events::follow_slot_migrations(ctx, on_slot_migration)
}

fn on_slot_migration(ctx: &Context, event: &SlotMigrationEvent) {
    match event.what {
        SlotMigration::ImportStarted => slot_import::started(&event.job, event.ranges.clone()),
        SlotMigration::ImportCompleted => {
            // The slots are this node's now: the graces of their session-bound locks
            // start, and their shared holders' expiries are watched.
            slot_import::ended(&event.job);
            session::serving(ctx);
            waiting::serving(ctx);
        }
        // The server deletes what the import brought; nothing of it was acted on.
        SlotMigration::ImportAborted => slot_import::ended(&event.job),
        // The server trims the slots here, which frees their locks one by one (and so
        // redirects their waiters); every queue is looked at once more all the same, in
        // case a server trims without the type's unlink callback.
        SlotMigration::ExportCompleted => {
            waiting::many_keys_changed();
            watching::everything_changed();
        }
        SlotMigration::ExportStarted | SlotMigration::ExportAborted => {}
    }
}

fn on_server_event(ctx: &Context, event: ServerEvent) {
    match event {
        ServerEvent::ClientClosed(client) => session::disconnected(ctx, client),
        ServerEvent::Flushed(db) => {
            replicated::flushed(db);
            session::flushed(ctx, db);
            waiting::many_keys_changed();
            watching::everything_changed();
        }
        ServerEvent::Swapped(a, b) => {
            replicated::swapped(a, b);
            session::swapped(a, b);
            waiting::many_keys_changed();
            watching::everything_changed();
        }
        ServerEvent::NowReplica => {
            stats::set_serving(false);
            replicated::demoted();
            session::demoted(ctx);
            waiting::demoted(ctx);
            watching::demoted(ctx);
        }
        ServerEvent::LoadingStarted => stats::set_serving(false),
        ServerEvent::ReplicaChanged => waiting::held::replicas_changed(),
        ServerEvent::NowMaster | ServerEvent::LoadingEnded => {
            if event == ServerEvent::NowMaster {
                waiting::held::promoted();
                replicated::promoted();
            }
            stats::set_serving(!ffi::is_replica(ctx) && !ffi::is_loading());
            session::serving(ctx);
            waiting::serving(ctx);
            // What was loaded, or what a promotion now expires, may differ from what the
            // watchers saw.
            watching::everything_changed();
        }
    }
}

/// The `expired` keyspace event: counts held locks that expired (the unlink callback,
/// just before, noted that the key was a lock).
pub fn on_keyspace_event(
    _ctx: &redis_module::Context,
    _class: redis_module::NotifyEvent,
    event: &str,
    key: &[u8],
) {
    guard::callback((), || {
        if event == "expired" && stats::take_unlinked_lock(key) {
            stats::EXPIRED.bump();
        }
    })
}
