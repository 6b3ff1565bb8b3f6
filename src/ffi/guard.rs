//! The panic guard at the FFI boundary.
//!
//! A panic that unwinds into the server's C code aborts the whole server, taking the
//! user's database down with it. Every entry point from the server (commands, type
//! callbacks, event handlers, blocking callbacks) runs its Rust body through one of
//! these functions, so a bug becomes an error reply or a logged failure instead.

use std::panic::{AssertUnwindSafe, catch_unwind};

use redis_module::Context;

use crate::ffi::reply::Reply;

use lock_core::error::Error;

/// Runs a command handler on its arguments; a panic becomes an `ERR` reply.
pub fn command<A>(ctx: &Context, args: A, handler: fn(&Context, A) -> Reply) -> Reply {
    catch_unwind(AssertUnwindSafe(|| handler(ctx, args))).unwrap_or_else(|_| {
        ctx.log_warning("lock: a command panicked; the error was sent to the client");
        Err(Error::InternalPanic)
    })
}

/// Runs the body of a server callback; a panic yields `fallback` (a null value, an
/// error status) so the server reports a failure it knows how to handle.
pub fn callback<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(fallback)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_callback_yields_its_fallback() {
        let prior = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let got = callback(-1, || -> i32 { panic!("bug") });
        std::panic::set_hook(prior);
        assert_eq!(got, -1);
        assert_eq!(callback(-1, || 5), 5);
    }
}
