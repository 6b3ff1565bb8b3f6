//! redis-lock: distributed locks as a native Redis module.
//!
//! `LOCK.ACQUIRE`, `LOCK.RELEASE`, `LOCK.EXTEND`, `LOCK.INFO`, `LOCK.WATCH` and
//! `LOCK.DO` run atomically inside the server, with fencing tokens, blocking
//! first-come-first-served waits, replication, persistence and cluster routing. This file registers the module. The layers, each
//! using only those below it:
//!
//! - `commands/`: one file per command (`acquire.rs`, `release.rs`, `extend.rs`,
//!   `info.rs`, `holders.rs`, `watch.rs`, `fenced.rs` for `LOCK.DO`, `debug.rs`, and the
//!   internal effect commands in `internal.rs`), their arguments, their `COMMAND DOCS`
//!   and the `INFO lock` section;
//! - `server/`: the server's identity (which server and version, what it supports) and
//!   the server events the module follows;
//! - `keyspace/`: writes to lock keys (`store.rs`), the handoff of a freed lock to its
//!   waiters and the waits themselves (`waiting/`: who waits for a key and when they get it), the watchers of `LOCK.WATCH`
//!   (`watching.rs`), session-bound locks' graces and releases (`session.rs`, the running
//!   server's registry in `registry.rs`), what follows a change the type's callbacks
//!   report (`changes.rs`), cluster routing (`routing.rs`), slots being imported
//!   (`slot_import.rs`);
//! - `datatype/`: the data type: saving, loading, rewriting, measuring a lock value, and
//!   what its callbacks report (`events.rs`, to the keyspace's `changes.rs`, wired below);
//! - `ffi/`: the server's C API, the only home of `unsafe`; it reads and writes lock values
//!   for the layers above, and turns the core's errors into error replies (`reply.rs`);
//! - the core crate, `lock_core` (in `core/`): pure state and rules,
//!   with no server in it: a lock, its holders, who may be granted it, the queues,
//!   fences, tokens, the session registry, the typed `Error`. Everything above uses it.

#![deny(unsafe_code)]

mod commands;
mod datatype;
#[allow(unsafe_code)] // the one home of unsafe code: the server's C API
mod ffi;
mod keyspace;
#[cfg(test)]
mod layers;
#[cfg(test)]
mod properties;
mod server;

use redis_module::raw::ModuleOptions;
use redis_module::{Context, RedisString, Status, redis_module};

use crate::commands::docs;
use crate::ffi::command_info::{self, Doc, KeyUse, Keys};
use redis_module::native_types::RedisType;

/// Memory comes from the server's allocator, counted (`ffi::alloc`), so `INFO memory` and
/// `maxmemory` count it and `INFO lock` tells the module's part; unit tests, which run
/// without a server, use the system's.
#[cfg(not(test))]
type Allocator = ffi::alloc::CountingAlloc;
#[cfg(not(test))]
const ALLOCATOR: Allocator = ffi::alloc::CountingAlloc;
#[cfg(test)]
type Allocator = std::alloc::System;
#[cfg(test)]
const ALLOCATOR: Allocator = std::alloc::System;

/// The name the module registers under (`MODULE LIST`, `INFO lock`).
pub const MODULE_NAME: &str = "lock";
/// The module's version as `MODULE LIST` shows it: major * 10000 + minor * 100 + patch.
pub const MODULE_VERSION: i32 = 300;
/// The module's version as people read it (the crate's).
pub const MODULE_SEMVER: &str = env!("CARGO_PKG_VERSION");

/// A command as the module registers it.
struct CommandSpec {
    name: &'static std::ffi::CStr,
    entry: ffi::command::Entry,
    flags: &'static std::ffi::CStr,
    /// Where its keys are and how it uses them (ACL key permissions, cluster routing).
    keys: Keys,
    /// Arity (negative: at least), for `COMMAND INFO` and the server's own check.
    arity: i32,
    /// What `COMMAND DOCS` says of it (the internal commands say nothing).
    doc: Option<&'static Doc>,
    /// ACL categories beside those its flags give, where the server lets a module add
    /// `@lock` (empty: none; the internal commands are in no category of ours).
    categories: &'static std::ffi::CStr,
}

/// Every command: handler, flags, keys, arity and key use.
const COMMANDS: [CommandSpec; 13] = [
    CommandSpec {
        name: c"lock.acquire",
        entry: command_entry!(commands::acquire::acquire),
        flags: c"write deny-oom",
        keys: Keys::One(KeyUse::Update),
        arity: -3,
        doc: Some(&docs::ACQUIRE),
        categories: c"lock blocking",
    },
    CommandSpec {
        name: c"lock.acquireall",
        entry: command_entry!(commands::acquire_all::acquire_all),
        flags: c"write deny-oom getkeys-api",
        keys: Keys::Counted(KeyUse::Update),
        arity: -4,
        doc: Some(&docs::ACQUIREALL),
        categories: c"lock blocking",
    },
    CommandSpec {
        name: c"lock.release",
        entry: command_entry!(commands::release::release),
        flags: c"write fast",
        keys: Keys::One(KeyUse::Delete),
        arity: 3,
        doc: Some(&docs::RELEASE),
        categories: c"lock",
    },
    CommandSpec {
        name: c"lock.extend",
        entry: command_entry!(commands::extend::extend),
        flags: c"write fast",
        keys: Keys::One(KeyUse::Update),
        arity: -4,
        doc: Some(&docs::EXTEND),
        categories: c"lock",
    },
    CommandSpec {
        name: c"lock.info",
        entry: command_entry!(commands::info::info),
        flags: c"readonly fast",
        keys: Keys::One(KeyUse::Read),
        arity: 2,
        doc: Some(&docs::INFO),
        categories: c"lock",
    },
    CommandSpec {
        name: c"lock.holders",
        entry: command_entry!(commands::holders::holders),
        flags: c"readonly",
        keys: Keys::One(KeyUse::Read),
        arity: 2,
        doc: Some(&docs::HOLDERS),
        categories: c"lock",
    },
    CommandSpec {
        name: c"lock.contended",
        entry: command_entry!(commands::contended::contended),
        flags: c"readonly",
        keys: Keys::None,
        arity: -1,
        doc: Some(&docs::CONTENDED),
        categories: c"lock",
    },
    CommandSpec {
        name: c"lock.watch",
        entry: command_entry!(commands::watch::watch),
        flags: c"readonly",
        keys: Keys::One(KeyUse::Read),
        arity: 4,
        doc: Some(&docs::WATCH),
        categories: c"lock blocking",
    },
    CommandSpec {
        name: c"lock.do",
        entry: command_entry!(commands::fenced::lock_do),
        flags: c"write getkeys-api",
        keys: Keys::One(KeyUse::ReadThenMore),
        arity: -4,
        doc: Some(&docs::DO),
        categories: c"lock",
    },
    CommandSpec {
        name: c"lock._set",
        entry: command_entry!(commands::internal::set),
        flags: c"write",
        keys: Keys::One(KeyUse::Overwrite),
        arity: -6,
        doc: None,
        categories: c"",
    },
    CommandSpec {
        name: c"lock._hold",
        entry: command_entry!(commands::internal::hold),
        flags: c"write",
        keys: Keys::One(KeyUse::Update),
        arity: 8,
        doc: None,
        categories: c"",
    },
    CommandSpec {
        name: c"lock._drop",
        entry: command_entry!(commands::internal::drop_holder),
        flags: c"write",
        keys: Keys::One(KeyUse::Delete),
        arity: 3,
        doc: None,
        categories: c"",
    },
    CommandSpec {
        name: c"lock.debug",
        entry: command_entry!(commands::debug::debug),
        flags: c"admin",
        keys: Keys::None,
        arity: 2,
        doc: None,
        categories: c"",
    },
];

/// The ACL category of the public commands (`ACL CAT lock`, `+@lock`).
const ACL_CATEGORY: &std::ffi::CStr = c"lock";

/// Registers every command with its entry, then declares its arity, key use and
/// documentation and, where the server lets a module add an ACL category, puts the
/// public commands in `@lock`.
fn register_commands(ctx: &Context) -> bool {
    let categorized = command_info::add_acl_category(ctx, ACL_CATEGORY);
    if !categorized {
        ctx.log_notice(
            "lock: this server's module API cannot add an ACL category: no @lock; \
             grant the commands by name (+lock.acquire +lock.release ...)",
        );
    }
    COMMANDS.iter().all(|c| {
        let ok = ffi::command::create(ctx, c.name, c.entry, c.flags, c.keys.legacy_range())
            && command_info::declare(ctx, c.name, c.arity, c.keys, c.doc)
            && (!categorized
                || c.categories.is_empty()
                || command_info::set_acl_categories(ctx, c.name, c.categories));
        if !ok {
            ctx.log_warning(&format!(
                "lock: could not register {:?} with the server",
                c.name
            ));
        }
        ok
    })
}

/// Names the server in the log, and refuses one older than the module supports.
fn check_server(ctx: &Context) -> Option<server::identity::Server> {
    let (redis_version, valkey_version) = ffi::server_versions(ctx);
    let Some(found) =
        server::identity::Server::identify(redis_version.as_deref(), valkey_version.as_deref())
    else {
        ctx.log_warning("lock: cannot tell which server this is (no version in INFO server)");
        return None;
    };
    if let Some(why) = found.unsupported() {
        ctx.log_warning(&format!(
            "lock: redis-lock {MODULE_SEMVER} cannot load: {why}"
        ));
        return None;
    }
    let admin_unblock = if found.unblock_is_safe() {
        "CLIENT UNBLOCK ends a wait"
    } else {
        "CLIENT UNBLOCK does not end a wait on this server"
    };
    let handoff = if ffi::has_post_jobs() {
        "in the freeing command or expiry"
    } else {
        "right after the freeing command or expiry"
    };
    ctx.log_notice(&format!(
        "lock: redis-lock {MODULE_SEMVER} loaded on {found}; handoff {handoff}; {admin_unblock}"
    ));
    Some(found)
}

fn init(ctx: &Context, args: &[RedisString]) -> Status {
    let Some(found) = check_server(ctx) else {
        return Status::Err;
    };
    if !datatype::register(&LOCK_TYPE) {
        ctx.log_warning("lock: the server did not create the lock type");
        return Status::Err;
    }
    if !register_commands(ctx) {
        return Status::Err;
    }
    // Signal modified keys ourselves, only when a command really changes one, so a busy
    // acquire does not break a client's WATCH; check I/O errors when loading; load a
    // replica's new data beside the old (`repl-diskless-load swapdb`: the type keeps
    // no state outside its values that a load into another database could disturb);
    // and on Valkey 9, let whole slots migrate atomically (`slot_import` keeps what an
    // import brings idle until the slot is this node's).
    let mut options = (ModuleOptions::NO_IMPLICIT_SIGNAL_MODIFIED
        | ModuleOptions::HANDLE_IO_ERRORS
        | ModuleOptions::HANDLE_REPL_ASYNC_LOAD)
        .bits();
    if found.has_atomic_slot_migration() {
        options |= ffi::OPTION_HANDLE_ATOMIC_SLOT_MIGRATION;
    }
    ffi::set_module_options(ctx, options);
    // Replaces the binding's default INFO handler with the `lock_stats` section.
    redis_module::raw::register_info_function(ctx.get_raw(), Some(commands::info_section::section));
    lock_core::stats::allocate();
    commands::info_section::follow_resets(ctx);
    keyspace::waiting::init(found.unblock_is_safe());
    keyspace::waiting::held::init(found.replica_wait_needs());
    keyspace::replicated::init();
    if let Err(why) = server::settings::register(ctx, args) {
        ctx.log_warning(&format!(
            "lock: redis-lock {MODULE_SEMVER} cannot load: {why}"
        ));
        return Status::Err;
    }
    lock_core::footprint::set_server_cells(found.memory_usage_leaves_out());
    lock_core::footprint::set_allocator(&ffi::server_allocator(ctx));
    keyspace::watching::init(found.key_moves_can_be_followed());
    lock_core::bindings::instance();
    if !ffi::init_detached(ctx) || !server::events::init(ctx) {
        ctx.log_warning(
            "lock: could not set up waits and sessions (detached context, server events)",
        );
        return Status::Err;
    }
    if found.has_atomic_slot_migration() && !server::events::follow_slot_migrations(ctx) {
        ctx.log_warning("lock: could not subscribe to the atomic slot migration events");
        return Status::Err;
    }
    // Finds a session-bound lock again where a RENAME or MOVE puts it, where subscribing
    // to those events does no harm to other commands.
    if found.key_moves_can_be_followed() && !server::events::follow_key_moves(ctx) {
        ctx.log_warning("lock: could not subscribe to the generic keyspace events");
        return Status::Err;
    }
    Status::Ok
}

/// The lock type, whose callbacks tell the keyspace what they learn of lock keys
/// (`keyspace/changes.rs`).
static LOCK_TYPE: RedisType = datatype::lock_type::<keyspace::changes::Changes>();

redis_module! {
    name: MODULE_NAME,
    version: MODULE_VERSION,
    allocator: (Allocator, ALLOCATOR),
    data_types: [LOCK_TYPE],
    init: init,
    event_handlers: [
        // Counts held locks that expire. (Freed locks are noticed by the type's unlink
        // callback, which runs for lock keys only.)
        [@EXPIRED: server::events::on_keyspace_event],
    ],
}
