//! Replies the binding has no shape for.

use std::os::raw::c_long;

use redis_module::{Context, RedisError, RedisValue, raw};

use lock_core::error::Error;

/// What a command returns: its reply, or one of the core's errors, which the command's
/// entry (`command.rs`) turns into the error reply (`error_reply`).
pub type Reply = Result<RedisValue, Error>;

/// `err` as the server's error reply: its text, code first.
pub fn error_reply(err: Error) -> RedisError {
    match err {
        // The binding sends the server's own constant.
        Error::WrongType => RedisError::WrongType,
        Error::WrongArity => RedisError::WrongArity,
        other => RedisError::String(other.to_string()),
    }
}

/// Replies `[token, fence]`, the answer to a granted acquire.
pub fn reply_granted(ctx: &Context, token: &[u8], fence: u64) {
    let ctx = ctx.get_raw();
    raw::reply_with_array(ctx, 2);
    raw::reply_with_string_buffer(ctx, token.as_ptr().cast(), token.len());
    raw::reply_with_long_long(ctx, fence as i64);
}

/// Replies `[token, [fence, ...]]`, the answer to a granted `LOCK.ACQUIREALL`: one
/// fence per key, in the order the keys were given.
pub fn reply_granted_all(ctx: &Context, token: &[u8], fences: &[u64]) {
    let ctx = ctx.get_raw();
    raw::reply_with_array(ctx, 2);
    raw::reply_with_string_buffer(ctx, token.as_ptr().cast(), token.len());
    raw::reply_with_array(ctx, fences.len() as c_long);
    for fence in fences {
        raw::reply_with_long_long(ctx, *fence as i64);
    }
}

/// A field's value in a map reply.
#[derive(Debug, Clone, Copy)]
pub enum Field<'a> {
    /// An integer.
    Integer(i64),
    /// A word, sent as a bulk string.
    Word(&'static str),
    /// Bytes as a bulk string, or nil (`None`).
    Bulk(Option<&'a [u8]>),
}

/// Replies with a map of fields: a map in RESP3, a flat field/value array in RESP2.
/// Field names are bulk strings, as in `XINFO`.
pub fn reply_map(ctx: &Context, fields: &[(&str, Field)]) {
    let ctx = ctx.get_raw();
    raw::reply_with_map(ctx, fields.len() as c_long);
    for (name, value) in fields {
        raw::reply_with_string_buffer(ctx, name.as_ptr().cast(), name.len());
        match value {
            Field::Integer(n) => raw::reply_with_long_long(ctx, *n),
            Field::Word(word) => {
                raw::reply_with_string_buffer(ctx, word.as_ptr().cast(), word.len())
            }
            Field::Bulk(Some(bytes)) => {
                raw::reply_with_string_buffer(ctx, bytes.as_ptr().cast(), bytes.len())
            }
            Field::Bulk(None) => raw::reply_with_null(ctx),
        };
    }
}

/// Starts an array reply of `len` elements, which the caller then sends.
pub fn reply_array(ctx: &Context, len: usize) {
    raw::reply_with_array(ctx.get_raw(), len as c_long);
}
