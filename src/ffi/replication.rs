//! What a held grant's reply waits on (`REPLICAS n`): the master's replication offset,
//! the offsets its online replicas acknowledged, asking them to acknowledge now, and
//! the event-loop hook that looks at them before the server sleeps.

use std::os::raw::{c_int, c_void};
use std::ptr;
use std::sync::OnceLock;

use redis_module::{Context, raw};

use lock_core::{replica_acks, replicas};

use super::info::InfoSection;

/// The replication state of the server, from `INFO replication`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replication {
    /// Whether the server is a master.
    pub master: bool,
    /// `master_repl_offset`: the end of everything it has replicated so far.
    pub offset: i64,
    /// The offset each online replica acknowledged.
    pub acked: Vec<i64>,
    /// The replicas attached: online, or in their first sync.
    pub attached: usize,
}

/// The server's replication state now.
pub fn replication(ctx: &Context) -> Replication {
    let Some(info) = InfoSection::read(ctx, c"replication") else {
        return Replication::default();
    };
    let field = |name: &str| info.field(name);
    let master = field("role").as_deref() == Some("master");
    let offset = field("master_repl_offset")
        .and_then(|value| value.parse().ok())
        .unwrap_or(0);
    let linked: usize = field("connected_slaves")
        .and_then(|value| value.parse().ok())
        .unwrap_or(0);
    let lines: Vec<String> = (0..linked)
        .filter_map(|i| field(&format!("slave{i}")))
        .collect();
    let acked = lines
        .iter()
        .filter_map(|line| replicas::online_offset(line))
        .collect();
    Replication {
        master,
        offset,
        acked,
        attached: lines.len(),
    }
}

/// How many replicas are attached now, online or in their first sync: the server's
/// clients of type `replica` (`CLIENT LIST TYPE replica`, a line each), the same
/// clients `INFO replication` lists. `auto` reads this at most once a second while
/// grants come; on a master without replicas the server walks its clients and answers
/// an empty string, about a tenth of what building `INFO replication` costs. Read from
/// `INFO replication` when the server answers no string.
pub fn attached(ctx: &Context) -> usize {
    // SAFETY: ctx is a live module context; the format names three C strings that
    // follow, NUL-terminated and static. The reply's string is read (within its length)
    // before the reply is freed, here exactly once.
    let lines = unsafe {
        let reply = raw::RedisModule_Call.expect("RedisModule_Call")(
            ctx.get_raw(),
            c"CLIENT".as_ptr(),
            c"ccc".as_ptr(),
            c"LIST".as_ptr(),
            c"TYPE".as_ptr(),
            c"replica".as_ptr(),
        );
        if reply.is_null() {
            None
        } else {
            let kind = raw::RedisModule_CallReplyType.expect("RedisModule_CallReplyType")(reply);
            let mut len = 0;
            let text = raw::RedisModule_CallReplyStringPtr.expect("RedisModule_CallReplyStringPtr")(
                reply, &mut len,
            );
            let lines =
                (kind == raw::REDISMODULE_REPLY_STRING as c_int && !text.is_null()).then(|| {
                    std::slice::from_raw_parts(text.cast::<u8>(), len)
                        .iter()
                        .filter(|b| **b == b'\n')
                        .count()
                });
            raw::RedisModule_FreeCallReply.expect("RedisModule_FreeCallReply")(reply);
            lines
        }
    };
    lines.unwrap_or_else(|| replication(ctx).attached)
}

/// Asks every replica to acknowledge its offset now (the server's `REPLCONF GETACK`,
/// sent before it sleeps, and held back while writes are paused): a `WAITAOF 0` for more
/// replicas than can exist (no local fsync asked, so it runs without `appendonly`),
/// allowed to block (`K`), and abandoned at once. Only the server's own request for
/// acknowledgements outlives it. `WAITAOF` rather than `WAIT`, so that `INFO
/// commandstats` tells the clients' `WAIT`s apart. Redis 7.2 and Valkey 7.2 on; the
/// caller checks.
pub fn request_acks(ctx: &Context) {
    // SAFETY: ctx is a live module context; the format names two C strings that follow,
    // NUL-terminated and static. The reply, if any, is freed here exactly once.
    unsafe {
        let reply = raw::RedisModule_Call.expect("RedisModule_Call")(
            ctx.get_raw(),
            c"WAITAOF".as_ptr(),
            c"Kccc".as_ptr(),
            c"0".as_ptr(),
            c"1000000".as_ptr(),
            c"0".as_ptr(),
        );
        if reply.is_null() {
            return;
        }
        let kind = raw::RedisModule_CallReplyType.expect("RedisModule_CallReplyType")(reply);
        if kind == raw::REDISMODULE_REPLY_PROMISE as c_int {
            raw::RedisModule_CallReplyPromiseAbort.expect("RedisModule_CallReplyPromiseAbort")(
                reply,
                ptr::null_mut(),
            );
        }
        raw::RedisModule_FreeCallReply.expect("RedisModule_FreeCallReply")(reply);
    }
}

/// Who looks at the held replies before the server sleeps (set once).
static BEFORE_SLEEP: OnceLock<fn(&Context)> = OnceLock::new();

thread_local! {
    /// Whether `on_event_loop` is subscribed now.
    static SUBSCRIBED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Makes `handler` the one `watch_before_sleep` subscribes (once, at load).
pub fn on_before_sleep(handler: fn(&Context)) {
    let _ = BEFORE_SLEEP.set(handler);
}

/// Calls the `on_before_sleep` handler each time the server is about to sleep (`on`),
/// or no more (`!on`): subscribed only while replies are held, so that nothing runs per
/// turn of the event loop otherwise. Never turned off from inside the handler itself:
/// the server still reads the subscription it would free. False if the server refused.
pub fn watch_before_sleep(ctx: &Context, on: bool) -> bool {
    if SUBSCRIBED.with(std::cell::Cell::get) == on {
        return true;
    }
    let callback: raw::RedisModuleEventCallback = if on { Some(on_event_loop) } else { None };
    // SAFETY: ctx is a live module context; the callback lives as long as the module
    // (none: unsubscribes).
    let status = unsafe {
        raw::RedisModule_SubscribeToServerEvent.expect("SubscribeToServerEvent")(
            ctx.get_raw(),
            raw::RedisModuleEvent {
                id: raw::REDISMODULE_EVENT_EVENTLOOP,
                dataver: 1,
            },
            callback,
        )
    };
    let done = status == raw::REDISMODULE_OK as c_int;
    if done {
        SUBSCRIBED.with(|s| s.set(on));
    }
    done
}

extern "C" fn on_event_loop(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    if subevent != raw::REDISMODULE_SUBEVENT_EVENTLOOP_BEFORE_SLEEP {
        return;
    }
    crate::ffi::guard::callback((), || {
        if let Some(handler) = BEFORE_SLEEP.get() {
            handler(&Context::new(ctx));
        }
    })
}

/// Who is told that a replica's acknowledgement arrived (set once): with the
/// connection it came on (where the server can say) and the offset it acknowledged.
static ON_ACK: OnceLock<fn(Option<u64>, i64)> = OnceLock::new();

thread_local! {
    /// The command filter that spots acknowledgements, while registered.
    static ACK_FILTER: std::cell::Cell<*mut raw::RedisModuleCommandFilter> =
        const { std::cell::Cell::new(ptr::null_mut()) };
}

/// Makes `handler` the one told of each replica acknowledgement (`REPLCONF ACK`) while
/// `watch_acks` is on (once, at load). It runs before the server applies the
/// acknowledgement: it may only note it and arrange for a look right after (a timer),
/// which the server runs before it sends this turn's replies.
pub fn on_ack(handler: fn(Option<u64>, i64)) {
    let _ = ON_ACK.set(handler);
}

/// Whether client `id` is a replica's connection (`CLIENT LIST ID <id>` shows the flag
/// `S`); false for a client that is gone.
pub fn is_replica_client(ctx: &Context, id: u64) -> bool {
    let id = id.to_string();
    match ctx
        .call("CLIENT", &["LIST", "ID", id.as_str()])
        .map(String::try_from)
    {
        Ok(Ok(line)) => line
            .split_whitespace()
            .find_map(|field| field.strip_prefix("flags="))
            .is_some_and(|flags| flags.contains('S')),
        _ => false,
    }
}

/// Spots replica acknowledgements (`on`), or no more: a command filter, registered only
/// while replies are held, so that no other command pays for it. False if the server
/// refused.
pub fn watch_acks(ctx: &Context, on: bool) -> bool {
    let current = ACK_FILTER.with(std::cell::Cell::get);
    if current.is_null() != on {
        return true;
    }
    if on {
        // SAFETY: ctx is a live module context; the callback lives as long as the module.
        let filter = unsafe {
            raw::RedisModule_RegisterCommandFilter.expect("RegisterCommandFilter")(
                ctx.get_raw(),
                Some(on_command),
                0,
            )
        };
        ACK_FILTER.with(|f| f.set(filter));
        !filter.is_null()
    } else {
        // SAFETY: current is the filter this module registered and has not unregistered.
        let status = unsafe {
            raw::RedisModule_UnregisterCommandFilter.expect("UnregisterCommandFilter")(
                ctx.get_raw(),
                current,
            )
        };
        ACK_FILTER.with(|f| f.set(ptr::null_mut()));
        status == raw::REDISMODULE_OK as c_int
    }
}

/// The filter's argument `i`, as bytes (empty if absent).
///
/// SAFETY (caller): `fctx` is the live filter context of the current call.
unsafe fn filter_arg<'a>(fctx: *mut raw::RedisModuleCommandFilterCtx, i: c_int) -> &'a [u8] {
    // SAFETY: the caller's promise; an argument the server gives lives for this call.
    unsafe {
        let arg = raw::RedisModule_CommandFilterArgGet.expect("CommandFilterArgGet")(fctx, i);
        if arg.is_null() {
            return &[];
        }
        redis_module::RedisString::string_as_slice(arg)
    }
}

extern "C" fn on_command(fctx: *mut raw::RedisModuleCommandFilterCtx) {
    crate::ffi::guard::callback((), || {
        // SAFETY: fctx is the live filter context of this call; arguments are only read,
        // the first three at most, and only while the call lasts.
        let (offset, client) = unsafe {
            if raw::RedisModule_CommandFilterArgsCount.expect("CommandFilterArgsCount")(fctx) < 3 {
                return;
            }
            let args = [
                filter_arg(fctx, 0),
                filter_arg(fctx, 1),
                filter_arg(fctx, 2),
            ];
            let Some(offset) = replica_acks::ack_offset(&args) else {
                return;
            };
            // Redis 7.2 and Valkey 7.2 on, where the module waits for replicas at all.
            let client = raw::RedisModule_CommandFilterGetClientId.map(|id| id(fctx));
            (offset, client)
        };
        if let Some(handler) = ON_ACK.get() {
            handler(client, offset);
        }
    })
}
