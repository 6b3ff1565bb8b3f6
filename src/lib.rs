//! redis-lock: distributed locks as a native Redis module.
//!
//! `LOCK.ACQUIRE`, `LOCK.RELEASE`, `LOCK.EXTEND` and `LOCK.INFO` run atomically inside
//! the server, with fencing tokens, blocking first-come-first-served waits, replication,
//! persistence and cluster routing. This file registers the module; the rules live in
//! `lock.rs` and `fence.rs`, the commands in `commands.rs`.

pub mod args;
pub mod cluster;
pub mod command_info;
pub mod commands;
pub mod datatype;
pub mod decimal;
pub mod error;
pub mod fence;
pub mod ffi;
pub mod guard;
pub mod lock;
pub mod queue;
pub mod stats;
pub mod waiters;

use redis_module::raw::ModuleOptions;
use redis_module::{Context, RedisResult, RedisString, Status, redis_module};

use crate::command_info::KeyUse;
use crate::datatype::LOCK_TYPE;

/// Memory comes from the server's allocator, so `INFO memory` and `maxmemory` count
/// it; unit tests, which run without a server, use the system's.
#[cfg(not(test))]
type Allocator = redis_module::alloc::RedisAlloc;
#[cfg(not(test))]
const ALLOCATOR: Allocator = redis_module::alloc::RedisAlloc;
#[cfg(test)]
type Allocator = std::alloc::System;
#[cfg(test)]
const ALLOCATOR: Allocator = std::alloc::System;

/// The name the module registers under (`MODULE LIST`, `INFO lock`).
pub const MODULE_NAME: &str = "lock";
/// The module's version as `MODULE LIST` shows it: major * 10000 + minor * 100 + patch.
pub const MODULE_VERSION: i32 = 100;

fn acquire(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guard::command(ctx, args, commands::acquire)
}

fn release(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guard::command(ctx, args, commands::release)
}

fn extend(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guard::command(ctx, args, commands::extend)
}

fn info(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guard::command(ctx, args, commands::info)
}

fn set_internal(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guard::command(ctx, args, commands::set_internal)
}

fn debug(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guard::command(ctx, args, commands::debug)
}

/// Arity (negative: at least) and key use of every command, for `COMMAND INFO`, the
/// server's own arity check and ACL key permissions.
const COMMAND_INFO: [(&std::ffi::CStr, i32, Option<KeyUse>); 6] = [
    (c"lock.acquire", -3, Some(KeyUse::Update)),
    (c"lock.release", 3, Some(KeyUse::Delete)),
    (c"lock.extend", 4, Some(KeyUse::Update)),
    (c"lock.info", 2, Some(KeyUse::Read)),
    (c"lock._set", 6, Some(KeyUse::Overwrite)),
    (c"lock.debug", 2, None),
];

fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    for (name, arity, key_use) in COMMAND_INFO {
        if !command_info::declare(ctx, name, arity, key_use) {
            ctx.log_warning(&format!("lock: could not declare {name:?} to the server"));
            return Status::Err;
        }
    }
    // Signal modified keys ourselves, only when a command really changes one, so a busy
    // acquire does not break a client's WATCH; check I/O errors when loading.
    ctx.set_module_options(
        ModuleOptions::NO_IMPLICIT_SIGNAL_MODIFIED | ModuleOptions::HANDLE_IO_ERRORS,
    );
    // Replaces the binding's default INFO handler with the `lock_stats` section.
    redis_module::raw::register_info_function(ctx.get_raw(), Some(stats::info));
    if !waiters::init(ctx) {
        ctx.log_warning("lock: could not set up blocking waits (flush/swapdb events, timers)");
        return Status::Err;
    }
    Status::Ok
}

redis_module! {
    name: MODULE_NAME,
    version: MODULE_VERSION,
    allocator: (Allocator, ALLOCATOR),
    data_types: [LOCK_TYPE],
    init: init,
    commands: [
        // name, handler, flags, first key, last key, key step, ACL categories ("" on 7.0)
        ["lock.acquire", acquire, "write deny-oom", 1, 1, 1, ""],
        ["lock.release", release, "write fast", 1, 1, 1, ""],
        ["lock.extend", extend, "write fast", 1, 1, 1, ""],
        ["lock.info", info, "readonly fast", 1, 1, 1, ""],
        ["lock._set", set_internal, "write", 1, 1, 1, ""],
        ["lock.debug", debug, "admin", 0, 0, 0, ""],
    ],
    event_handlers: [
        // Counts held locks that expire. (Freed locks are noticed by the type's unlink
        // callback, which runs for lock keys only.)
        [@EXPIRED: waiters::on_keyspace_event],
    ],
}
