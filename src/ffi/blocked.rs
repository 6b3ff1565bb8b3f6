//! Blocked clients: the server's `BlockClient` family, typed.
//!
//! A client is blocked with `block::<W>`, where `W` says what the module does when the
//! server calls back: send the answer handed to `unblock` (`reply`), a disconnect or an
//! unblocking by the server (`disconnected`), an admin's `CLIENT UNBLOCK` (`admin_unblocked`,
//! registered only when asked for). A blocked client is named by its `Handle` until the
//! module unblocks it, exactly once.
//!
//! The server's own timeout is never asked for (the module times waits out itself), so no
//! server can race its timeout path against an answer already given.

use std::marker::PhantomData;
use std::os::raw::{c_int, c_void};
use std::ptr;

use redis_module::{Context, RedisValue, raw};

use crate::ffi::guard;

/// A client this module blocked, until it unblocks it, and the type of the answer it is
/// unblocked with (what the reply callback it was blocked with reads back).
pub struct Handle<A>(usize, PhantomData<fn() -> A>);

impl<A> Handle<A> {
    /// The handle as a number (the queues' key for it).
    pub fn id(self) -> usize {
        self.0
    }

    /// The handle `block` returned, from the number `id` gave.
    pub fn from_id(id: usize) -> Self {
        Handle(id, PhantomData)
    }

    fn raw(self) -> *mut raw::RedisModuleBlockedClient {
        self.0 as *mut raw::RedisModuleBlockedClient
    }
}

impl<A> Clone for Handle<A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A> Copy for Handle<A> {}

impl<A> std::fmt::Debug for Handle<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Handle({:#x})", self.0)
    }
}

/// What the module does when the server calls back about a client it blocked.
pub trait Waits {
    /// What `unblock` hands the server, to be sent by `reply`.
    type Answer: 'static;

    /// Sends `answer` (none: the client was unblocked without one) to the client.
    fn reply(ctx: &Context, answer: Option<&Self::Answer>);

    /// The client disconnected, was killed, or the server unblocked it with an error:
    /// the module must `unblock` it (without an answer) if it has not already.
    fn disconnected(ctx: &Context, handle: Handle<Self::Answer>);

    /// An admin ended the wait (`CLIENT UNBLOCK`): the client gets nil, and the module
    /// must `unblock` it (without an answer) if it has not already.
    fn admin_unblocked(ctx: &Context, handle: Handle<Self::Answer>);
}

type BlockedCallback = unsafe extern "C" fn(
    *mut raw::RedisModuleCtx,
    *mut *mut raw::RedisModuleString,
    c_int,
) -> c_int;

/// Blocks the client of `ctx` (a command that may block: the caller checked
/// `DENY_BLOCKING`) with no server timeout; `admin_unblock`: whether `CLIENT UNBLOCK` may
/// end the wait. `None` if the server did not block it.
pub fn block<W: Waits>(ctx: &Context, admin_unblock: bool) -> Option<Handle<W::Answer>> {
    let on_admin: Option<BlockedCallback> = if admin_unblock {
        Some(on_admin_unblock::<W> as BlockedCallback)
    } else {
        None
    };
    // SAFETY: ctx is the live context of a command that may block; the callbacks match the
    // server's signatures and live as long as the module. No server timeout (0).
    let bc = unsafe {
        raw::RedisModule_BlockClient.expect("RedisModule_BlockClient")(
            ctx.get_raw(),
            Some(on_reply::<W>),
            on_admin,
            Some(free_answer::<W>),
            0,
        )
    };
    if bc.is_null() {
        return None;
    }
    // SAFETY: bc was just returned by BlockClient and is live until UnblockClient.
    unsafe {
        raw::RedisModule_SetDisconnectCallback.expect("RedisModule_SetDisconnectCallback")(
            bc,
            Some(on_disconnect::<W>),
        )
    };
    Some(Handle::from_id(bc as usize))
}

/// Unblocks `handle`, exactly once per blocked client (or its handle leaks): with an
/// answer, the `reply` of the `Waits` it was blocked with sends it when the server gets to
/// it; without one, the server only frees the handle. (The handle's type is that reply's
/// answer: no need to name the `Waits` here.)
pub fn unblock<A: 'static>(handle: Handle<A>, answer: Option<A>) {
    let data = answer.map_or(ptr::null_mut(), |a| {
        Box::into_raw(Box::new(a)).cast::<c_void>()
    });
    // SAFETY: handle names a client this module blocked and has not unblocked (the
    // caller's promise), so it is unblocked exactly once, here; the server owns data from
    // now on and gives it back to free_answer.
    unsafe {
        raw::RedisModule_UnblockClient.expect("RedisModule_UnblockClient")(handle.raw(), data)
    };
}

extern "C" fn on_reply<W: Waits>(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    guard::callback((), || {
        // SAFETY: ctx is the reply context of a client this module blocked; the private
        // data is a W::Answer that unblock::<W> handed over, or null.
        let answer = unsafe {
            raw::RedisModule_GetBlockedClientPrivateData
                .expect("RedisModule_GetBlockedClientPrivateData")(ctx)
            .cast::<W::Answer>()
            .as_ref()
        };
        W::reply(&context, answer);
    });
    raw::REDISMODULE_OK as c_int
}

extern "C" fn free_answer<W: Waits>(_ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if !data.is_null() {
        // SAFETY: data is the Box<W::Answer> that unblock::<W> handed to the server; the
        // server gives it back exactly once.
        guard::callback((), || {
            drop(unsafe { Box::from_raw(data.cast::<W::Answer>()) })
        });
    }
}

extern "C" fn on_admin_unblock<W: Waits>(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    guard::callback((), || {
        // SAFETY: ctx is the timeout context of a client this module blocked.
        let bc = unsafe {
            raw::RedisModule_GetBlockedClientHandle.expect("RedisModule_GetBlockedClientHandle")(
                ctx,
            )
        };
        W::admin_unblocked(&context, Handle::from_id(bc as usize));
    });
    context.reply(Ok(RedisValue::Null));
    raw::REDISMODULE_OK as c_int
}

extern "C" fn on_disconnect<W: Waits>(
    ctx: *mut raw::RedisModuleCtx,
    bc: *mut raw::RedisModuleBlockedClient,
) {
    guard::callback((), || {
        W::disconnected(&Context::new(ctx), Handle::from_id(bc as usize))
    })
}
