//! The floor of a lock in a module: what any module pays, through the server's module
//! API, for the least a lock's acquire and release must do. `make bench` (scenario 4)
//! loads it beside the lock module and counts these commands' instructions against the
//! server's own `SET NX PX` and `DEL`/`DELIFEQ`, so that what the API itself costs is
//! measured, not estimated.
//!
//! - `FLOOR.NOOP key`: a module command that opens nothing and answers `0` (what calling
//!   a module command costs).
//! - `FLOOR.DELIFEQ key token`: deletes a string key if it holds `token` (`1`, else `0`),
//!   and replicates the effect as `DEL key`.
//! - `FLOOR.SETNX key token ttl-ms`: sets a string key to `token` with an expiry if the
//!   key is empty (`OK`, else nil), and replicates the effect as `SET key token PXAT t`.
//! - `FLOOR.DELIFEQ.LOCAL`, `FLOOR.SETNX.LOCAL`: the same without the replication.
//! - `FLOOR.DO command [arg ...]`: runs the command through `RedisModule_Call` as
//!   `LOCK.DO` does (format `!0CSME` and its arguments) and replies with its reply,
//!   checking no lock: the floor of a fenced write.
//!
//! Commands are plain C callbacks: no argument vectors built, no reply values, nothing
//! between the server and the work.

use std::os::raw::c_int;

use redis_module::alloc::RedisAlloc;
use redis_module::{Context, RedisString, Status, raw, redis_module};

type Ctx = *mut raw::RedisModuleCtx;
type Argv = *mut *mut raw::RedisModuleString;

const OK: c_int = raw::REDISMODULE_OK as c_int;
const ERR: c_int = raw::REDISMODULE_ERR as c_int;

/// Whether a command replicates its effect.
#[derive(Clone, Copy, PartialEq)]
enum Replicate {
    Effect,
    Not,
}

extern "C" fn noop(ctx: Ctx, _argv: Argv, argc: c_int) -> c_int {
    // SAFETY: ctx is the live context of this command.
    unsafe {
        if argc != 2 {
            return raw::RedisModule_WrongArity.unwrap()(ctx);
        }
        raw::RedisModule_ReplyWithLongLong.unwrap()(ctx, 0)
    }
}

extern "C" fn delifeq(ctx: Ctx, argv: Argv, argc: c_int) -> c_int {
    compare_and_delete(ctx, argv, argc, Replicate::Effect)
}

extern "C" fn delifeq_local(ctx: Ctx, argv: Argv, argc: c_int) -> c_int {
    compare_and_delete(ctx, argv, argc, Replicate::Not)
}

extern "C" fn setnx(ctx: Ctx, argv: Argv, argc: c_int) -> c_int {
    set_if_empty(ctx, argv, argc, Replicate::Effect)
}

extern "C" fn setnx_local(ctx: Ctx, argv: Argv, argc: c_int) -> c_int {
    set_if_empty(ctx, argv, argc, Replicate::Not)
}

fn compare_and_delete(ctx: Ctx, argv: Argv, argc: c_int, replicate: Replicate) -> c_int {
    // SAFETY: ctx is the live context of this command and argv its `argc` live argument
    // strings; the key handle is checked for NULL, read while open, and closed once.
    unsafe {
        if argc != 3 {
            return raw::RedisModule_WrongArity.unwrap()(ctx);
        }
        let (name, token) = (*argv.add(1), *argv.add(2));
        let mode = (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int;
        let key = raw::RedisModule_OpenKey.unwrap()(ctx, name, mode).cast::<raw::RedisModuleKey>();
        if key.is_null() {
            return raw::RedisModule_ReplyWithLongLong.unwrap()(ctx, 0);
        }
        let mut held = false;
        if raw::RedisModule_KeyType.unwrap()(key) == raw::REDISMODULE_KEYTYPE_STRING as c_int {
            let mut len = 0;
            let value =
                raw::RedisModule_StringDMA.unwrap()(key, &mut len, raw::REDISMODULE_READ as c_int);
            let mut token_len = 0;
            let token = raw::RedisModule_StringPtrLen.unwrap()(token, &mut token_len);
            held = !value.is_null()
                && len == token_len
                && std::slice::from_raw_parts(value.cast::<u8>(), len)
                    == std::slice::from_raw_parts(token.cast::<u8>(), token_len);
        }
        if held {
            raw::RedisModule_DeleteKey.unwrap()(key);
            if replicate == Replicate::Effect {
                raw::RedisModule_Replicate.unwrap()(ctx, c"DEL".as_ptr(), c"s".as_ptr(), name);
            }
        }
        raw::RedisModule_CloseKey.unwrap()(key);
        raw::RedisModule_ReplyWithLongLong.unwrap()(ctx, i64::from(held))
    }
}

fn set_if_empty(ctx: Ctx, argv: Argv, argc: c_int, replicate: Replicate) -> c_int {
    // SAFETY: as in compare_and_delete: live context and arguments, a checked key handle
    // closed once.
    unsafe {
        if argc != 4 {
            return raw::RedisModule_WrongArity.unwrap()(ctx);
        }
        let (name, token) = (*argv.add(1), *argv.add(2));
        let mut ttl: i64 = 0;
        if raw::RedisModule_StringToLongLong.unwrap()(*argv.add(3), &mut ttl) != OK || ttl <= 0 {
            return raw::RedisModule_ReplyWithError.unwrap()(ctx, c"ERR invalid ttl".as_ptr());
        }
        let mode = (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int;
        let key = raw::RedisModule_OpenKey.unwrap()(ctx, name, mode).cast::<raw::RedisModuleKey>();
        if key.is_null() {
            return raw::RedisModule_ReplyWithNull.unwrap()(ctx);
        }
        if raw::RedisModule_KeyType.unwrap()(key) != raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
            raw::RedisModule_CloseKey.unwrap()(key);
            return raw::RedisModule_ReplyWithNull.unwrap()(ctx);
        }
        raw::RedisModule_StringSet.unwrap()(key, token);
        raw::RedisModule_SetExpire.unwrap()(key, ttl);
        if replicate == Replicate::Effect {
            let at = raw::RedisModule_Milliseconds.unwrap()() + ttl;
            raw::RedisModule_Replicate.unwrap()(
                ctx,
                c"SET".as_ptr(),
                c"sscl".as_ptr(),
                name,
                token,
                c"PXAT".as_ptr(),
                at,
            );
        }
        raw::RedisModule_CloseKey.unwrap()(key);
        raw::RedisModule_ReplyWithSimpleString.unwrap()(ctx, c"OK".as_ptr())
    }
}

extern "C" fn call(ctx: Ctx, argv: Argv, argc: c_int) -> c_int {
    // SAFETY: ctx is the live context of this command and argv its `argc` live argument
    // strings; the name is a server string, NUL-terminated; the reply, when there is one,
    // is sent and then freed once.
    unsafe {
        if argc < 2 {
            return raw::RedisModule_WrongArity.unwrap()(ctx);
        }
        let mut len = 0;
        let name = raw::RedisModule_StringPtrLen.unwrap()(*argv.add(1), &mut len);
        // As LOCK.DO: a short command's arguments one by one (the server then allocates
        // its argument vector once), a longer one's as a vector.
        let call = raw::RedisModule_Call.unwrap();
        let arg = |i: usize| *argv.add(2 + i);
        let reply = match argc - 2 {
            1 => call(ctx, name, c"!0CSMEs".as_ptr(), arg(0)),
            2 => call(ctx, name, c"!0CSMEss".as_ptr(), arg(0), arg(1)),
            3 => call(ctx, name, c"!0CSMEsss".as_ptr(), arg(0), arg(1), arg(2)),
            n => call(ctx, name, c"!0CSMEv".as_ptr(), argv.add(2), n as usize),
        };
        if reply.is_null() {
            return raw::RedisModule_ReplyWithError.unwrap()(ctx, c"ERR not run".as_ptr());
        }
        raw::RedisModule_ReplyWithCallReply.unwrap()(ctx, reply);
        raw::RedisModule_FreeCallReply.unwrap()(reply);
        OK
    }
}

type Command = extern "C" fn(Ctx, Argv, c_int) -> c_int;

/// Name, callback, flags, and the position of the key (`FLOOR.DO`'s is the inner
/// command's first argument, as for the commands the benchmark runs through it).
const COMMANDS: [(&std::ffi::CStr, Command, &std::ffi::CStr, c_int); 6] = [
    (c"floor.noop", noop, c"readonly fast", 1),
    (c"floor.delifeq", delifeq, c"write fast", 1),
    (c"floor.delifeq.local", delifeq_local, c"write fast", 1),
    (c"floor.setnx", setnx, c"write deny-oom fast", 1),
    (c"floor.setnx.local", setnx_local, c"write deny-oom fast", 1),
    (c"floor.do", call, c"write", 2),
];

fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    for (name, command, flags, key) in COMMANDS {
        // SAFETY: ctx is the load context; the name and flags are static C strings.
        let created = unsafe {
            raw::RedisModule_CreateCommand.unwrap()(
                ctx.ctx,
                name.as_ptr(),
                Some(command),
                flags.as_ptr(),
                key,
                key,
                1,
            )
        };
        if created == ERR {
            return Status::Err;
        }
    }
    Status::Ok
}

redis_module! {
    name: "floor",
    version: 1,
    allocator: (RedisAlloc, RedisAlloc),
    data_types: [],
    init: init,
}
