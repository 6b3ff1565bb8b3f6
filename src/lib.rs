//! redis-lock: distributed locks as a native Redis module.
//!
//! `LOCK.ACQUIRE`, `LOCK.RELEASE`, `LOCK.EXTEND` and `LOCK.INFO` run atomically inside
//! the server, with fencing tokens, blocking first-come-first-served waits, replication,
//! persistence and cluster routing. This file registers the module; the rules live in
//! `lock.rs` and `fence.rs`, the commands in `commands.rs`.

pub mod args;
pub mod commands;
pub mod datatype;
pub mod error;
pub mod fence;
pub mod ffi;
pub mod guard;
pub mod lock;
pub mod stats;
pub mod waiters;

use redis_module::raw::ModuleOptions;
use redis_module::{Context, RedisResult, RedisString, Status, redis_module};

use crate::datatype::LOCK_TYPE;

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

fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    // Signal modified keys ourselves, only when a command really changes one, so a busy
    // acquire does not break a client's WATCH; check I/O errors when loading.
    ctx.set_module_options(
        ModuleOptions::NO_IMPLICIT_SIGNAL_MODIFIED | ModuleOptions::HANDLE_IO_ERRORS,
    );
    Status::Ok
}

redis_module! {
    name: MODULE_NAME,
    version: MODULE_VERSION,
    allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
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
}
