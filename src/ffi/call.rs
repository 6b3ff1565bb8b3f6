//! Running another command from inside a command (`RedisModule_Call`), for `LOCK.DO`,
//! and declaring a command's keys when the server asks for them (`getkeys-api`).

use std::ffi::CStr;
use std::os::raw::c_int;

use redis_module::{Context, RedisError, raw};

use crate::ffi::command::Args;

/// How the inner command runs (`RedisModule_Call`'s format): its effects replicate and
/// reach the AOF as the command's own (`!`); its reply is in the caller's protocol
/// (`0`); it runs as the caller's ACL user, checked (`C`); as in a script, so that what a
/// script may not run is refused (`S`); a `deny-oom` command gets `OOM` under a full
/// `maxmemory` (`M`); errors found before it runs come back as replies with the server's
/// own text (`E`); its arguments are the vector that follows (`v`).
const FORMAT: &CStr = c"!0CSMEv";

/// The same with the arguments one by one (`s` each), for an inner command of up to
/// eight: the server sizes its argument vector by the format's length, so a vector
/// (`v`) costs it a second allocation that these do not (about 3% of a `LOCK.DO`).
const FORMATS: [&CStr; 9] = [
    c"!0CSME",
    c"!0CSMEs",
    c"!0CSMEss",
    c"!0CSMEsss",
    c"!0CSMEssss",
    c"!0CSMEsssss",
    c"!0CSMEssssss",
    c"!0CSMEsssssss",
    c"!0CSMEssssssss",
];

/// Why the server did not run the inner command, when it answered no reply at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotRun {
    /// No such command.
    Unknown,
    /// The wrong number of arguments for it.
    Arity,
    /// Not allowed in a script.
    NotInScript,
    /// The caller's ACL user may not run it.
    Denied,
    /// A write or `deny-oom` command while over `maxmemory`.
    OutOfMemory,
    /// Any other refusal, with the server's `errno`.
    Other(i32),
    /// It ran, but the server handed back no reply for it: the error it had, when one
    /// could be recovered (see `recover_lost_reply`), else nothing.
    Lost(Option<String>),
}

/// Runs the command made of `args[from..]` as `FORMAT` says, and replies with its reply
/// (an error included: the server's text). `Err` when the server answered nothing.
pub fn run_and_reply(ctx: &Context, args: &Args, from: usize) -> Result<(), NotRun> {
    let argv = args.raw();
    let Some(inner) = argv.get(from..).filter(|inner| !inner.is_empty()) else {
        return Err(NotRun::Arity);
    };
    let name = inner[0];
    let mut name_len = 0;
    // SAFETY: name is one of the server's live argument strings; the pointer it returns
    // is valid for name_len bytes while the command runs. The server's call reads a
    // NUL-terminated name: a copy with one is made below.
    let name_bytes = unsafe {
        let ptr =
            raw::RedisModule_StringPtrLen.expect("RedisModule_StringPtrLen")(name, &mut name_len);
        if ptr.is_null() {
            &[][..]
        } else {
            std::slice::from_raw_parts(ptr.cast::<u8>(), name_len)
        }
    };
    // The server reads a NUL-terminated name: copied with one, on the stack when short.
    if name_bytes.contains(&0) {
        return Err(NotRun::Unknown); // no command has a NUL in its name
    }
    let mut short = [0u8; 64];
    let long;
    let name: &[u8] = if name_bytes.len() < short.len() {
        short[..name_bytes.len()].copy_from_slice(name_bytes);
        &short[..=name_bytes.len()]
    } else {
        long = [name_bytes, &[0]].concat();
        &long
    };
    let reply = call(ctx, name, &inner[1..]);
    if reply.is_null() {
        return Err(not_run(errno()));
    }
    let mut proto_len = 0;
    // SAFETY: reply is the call's live reply; only its length is read.
    unsafe {
        raw::RedisModule_CallReplyProto.expect("RedisModule_CallReplyProto")(reply, &mut proto_len);
    }
    if proto_len == 0 {
        // SAFETY: reply is the call's live reply, freed once and not read again.
        unsafe { raw::RedisModule_FreeCallReply.expect("RedisModule_FreeCallReply")(reply) };
        return Err(NotRun::Lost(recover_lost_reply(ctx)));
    }
    // SAFETY: reply is the call's live reply: sent to the client, then freed once.
    unsafe {
        raw::RedisModule_ReplyWithCallReply.expect("RedisModule_ReplyWithCallReply")(
            ctx.get_raw(),
            reply,
        );
        raw::RedisModule_FreeCallReply.expect("RedisModule_FreeCallReply")(reply);
    }
    Ok(())
}

/// `RedisModule_Call` of the command `name` (NUL-terminated) with the arguments `rest`,
/// as `FORMAT` says: one by one when there are few, else as a vector.
fn call(
    ctx: &Context,
    name: &[u8],
    rest: &[*mut raw::RedisModuleString],
) -> *mut raw::RedisModuleCallReply {
    // SAFETY: reading a function pointer from the API table filled at load time.
    let call = unsafe { raw::RedisModule_Call }.expect("RedisModule_Call");
    let (ctx, name) = (ctx.get_raw(), name.as_ptr().cast());
    let format = FORMATS.get(rest.len()).map(|f| f.as_ptr());
    // SAFETY: ctx is the live context of the running command and name a NUL-terminated
    // string. Each format asks for exactly the arguments passed after it: as many
    // strings (`s`) as `rest` holds, or one vector (`v`), passed as the pointer to
    // `rest`'s strings and its length. They are the server's live argument strings,
    // which the call only reads (and retains for as long as it needs them).
    unsafe {
        match (format, rest) {
            (Some(f), []) => call(ctx, name, f),
            (Some(f), [a]) => call(ctx, name, f, *a),
            (Some(f), [a, b]) => call(ctx, name, f, *a, *b),
            (Some(f), [a, b, c]) => call(ctx, name, f, *a, *b, *c),
            (Some(f), [a, b, c, d]) => call(ctx, name, f, *a, *b, *c, *d),
            (Some(f), [a, b, c, d, e]) => call(ctx, name, f, *a, *b, *c, *d, *e),
            (Some(f), [a, b, c, d, e, g]) => call(ctx, name, f, *a, *b, *c, *d, *e, *g),
            (Some(f), [a, b, c, d, e, g, h]) => call(ctx, name, f, *a, *b, *c, *d, *e, *g, *h),
            (Some(f), [a, b, c, d, e, g, h, i]) => {
                call(ctx, name, f, *a, *b, *c, *d, *e, *g, *h, *i)
            }
            _ => call(
                ctx,
                name,
                FORMAT.as_ptr(),
                rest.as_ptr() as *mut *mut raw::RedisModuleString,
                rest.len(),
            ),
        }
    }
}

/// Valkey 8.1 and later, while any module follows keyspace events (this one does), hand
/// back an empty reply for a `GETDEL` or `GETSET` that fails (on a key of another type):
/// the error is written to the server's pooled call client after the call returned. On
/// Valkey 8.1 it stays there, and the next call on that client (any module's, in any
/// later command) would get it in front of its own reply; Valkey 9 drops it when the
/// command ends. A `PING` on the same client at once, through the binding's own call,
/// takes it out on both: its first reply is then the lost error, which is returned;
/// `None` when nothing was left.
fn recover_lost_reply(ctx: &Context) -> Option<String> {
    match ctx.call("PING", &[][..] as &[&[u8]]) {
        Err(RedisError::String(text)) if !text.is_empty() => Some(text),
        _ => None,
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn not_run(errno: i32) -> NotRun {
    match errno {
        2 => NotRun::Unknown,      // ENOENT
        22 => NotRun::Arity,       // EINVAL
        29 => NotRun::NotInScript, // ESPIPE
        13 => NotRun::Denied,      // EACCES
        28 => NotRun::OutOfMemory, // ENOSPC
        other => NotRun::Other(other),
    }
}

/// Whether the server called the command only to learn its keys (`getkeys-api`:
/// `COMMAND GETKEYS`, cluster routing, ACL key checks).
pub fn keys_requested(ctx: &Context) -> bool {
    // SAFETY: reading a function pointer from the API table, then calling it with the
    // command's live context.
    unsafe { raw::RedisModule_IsKeysPositionRequest }
        .is_some_and(|is_request| unsafe { is_request(ctx.get_raw()) } != 0)
}

/// What the server knows of a key's use, for a key declared by position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyFlags(i32);

impl KeyFlags {
    /// Read only, reading what it holds (a lock's key to `LOCK.DO`).
    pub const READ: KeyFlags =
        KeyFlags((raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS) as i32);
    /// Read and written, perhaps added (the keys of `LOCK.ACQUIREALL`).
    pub const UPDATE: KeyFlags =
        KeyFlags((raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_UPDATE) as i32);
}

/// Declares argument `pos` a key with `flags` (answering a keys request).
pub fn key_at(ctx: &Context, pos: usize, flags: KeyFlags) {
    let Ok(pos) = c_int::try_from(pos) else {
        return;
    };
    // SAFETY: reading function pointers from the API table; ctx is the live context of
    // a keys request, and pos an index into its arguments.
    unsafe {
        if let Some(with_flags) = raw::RedisModule_KeyAtPosWithFlags {
            with_flags(ctx.get_raw(), pos, flags.0);
        } else if let Some(key_at_pos) = raw::RedisModule_KeyAtPos {
            key_at_pos(ctx.get_raw(), pos);
        }
    }
}

/// The keys of the command made of `args[from..]`: each one's position in `args` and its
/// flags, as the server finds them for that command; empty for an unknown command or one
/// with no keys.
pub fn command_keys(ctx: &Context, args: &Args, from: usize) -> Vec<(usize, KeyFlags)> {
    let argv = args.raw();
    let Some(inner) = argv.get(from..).filter(|inner| !inner.is_empty()) else {
        return Vec::new();
    };
    let Ok(argc) = c_int::try_from(inner.len()) else {
        return Vec::new();
    };
    // SAFETY: reading a function pointer from the API table.
    let Some(get_keys) = (unsafe { raw::RedisModule_GetCommandKeysWithFlags }) else {
        return Vec::new();
    };
    let mut count: c_int = 0;
    let mut flags: *mut c_int = std::ptr::null_mut();
    // SAFETY: inner holds the server's live argument strings, which the call only reads;
    // it returns an array of `count` positions (and one of flags) that the module frees.
    let positions = unsafe {
        get_keys(
            ctx.get_raw(),
            inner.as_ptr() as *mut *mut raw::RedisModuleString,
            argc,
            &mut count,
            &mut flags,
        )
    };
    if positions.is_null() {
        return Vec::new();
    }
    let count = usize::try_from(count).unwrap_or(0);
    // SAFETY: reading a function pointer from the API table filled at load time.
    let free = unsafe { raw::RedisModule_Free }.expect("RedisModule_Free");
    // SAFETY: both arrays hold `count` integers; each is freed once, after being read.
    unsafe {
        let positions_read = std::slice::from_raw_parts(positions, count);
        let flags_read = if flags.is_null() {
            None
        } else {
            Some(std::slice::from_raw_parts(flags, count))
        };
        let keys = positions_read
            .iter()
            .enumerate()
            .filter_map(|(i, &pos)| {
                let pos = usize::try_from(pos).ok()?;
                let flag = flags_read.map_or(KeyFlags::READ.0, |f| f[i]);
                Some((from + pos, KeyFlags(flag)))
            })
            .collect();
        free(positions.cast());
        if !flags.is_null() {
            free(flags.cast());
        }
        keys
    }
}
