//! Every error message the module sends, in one place.
//!
//! Each message starts with its code (`ERR`, `WRONGTYPE`) so that clients read the code
//! correctly, and names the argument that was wrong and what was expected.

use redis_module::RedisError;

use crate::state::limits::{MAX_LIMIT, MAX_TOKEN_LEN, MAX_TTL_MS, MAX_VALUE_LEN};
use crate::state::rules::Refusal;

/// `ttl-ms` was not an integer from 1 to 2^47 - 1.
pub fn invalid_ttl() -> RedisError {
    RedisError::String(format!(
        "ERR invalid ttl-ms: expected an integer from 1 to {MAX_TTL_MS}"
    ))
}

/// `timeout-ms` was not an integer from 0 to 2^47 - 1.
pub fn invalid_timeout() -> RedisError {
    RedisError::String(format!(
        "ERR invalid timeout-ms: expected an integer from 0 to {MAX_TTL_MS}"
    ))
}

/// `fence` (`LOCK.WATCH`) was not an integer from 0 to 2^63 - 1.
pub fn invalid_fence() -> RedisError {
    RedisError::String(format!(
        "ERR invalid fence: expected an integer from 0 to {}",
        i64::MAX
    ))
}

/// `LOCK.DO`: `token` does not hold the lock `key`; nothing ran.
pub fn not_held(key: &[u8]) -> RedisError {
    RedisError::String(format!(
        "NOTHELD the lock '{}' is not held by this token: nothing ran",
        printable(key)
    ))
}

/// `LOCK.DO` may not run the command `name`.
pub fn not_in_lock_do(name: &[u8], reason: &str) -> RedisError {
    RedisError::String(format!(
        "ERR LOCK.DO cannot run '{}': {reason}",
        printable(name)
    ))
}

/// `LOCK.DO`'s command is not one the server knows.
pub fn unknown_inner(name: &[u8]) -> RedisError {
    RedisError::String(format!(
        "ERR LOCK.DO: unknown command '{}'",
        printable(name)
    ))
}

/// `LOCK.DO`'s command has the wrong number of arguments.
pub fn inner_arity(name: &[u8]) -> RedisError {
    RedisError::String(format!(
        "ERR LOCK.DO: wrong number of arguments for '{}'",
        printable(name)
    ))
}

/// The caller's ACL user may not run `LOCK.DO`'s command (when the server says so only by
/// `errno`; otherwise its own ACL error is the reply).
pub fn inner_denied(name: &[u8]) -> RedisError {
    RedisError::String(format!(
        "NOPERM this user has no permissions to run the '{}' command",
        printable(name)
    ))
}

/// `LOCK.DO`'s command is a write under a full `maxmemory` (when the server says so only
/// by `errno`), in the server's own words.
pub fn inner_out_of_memory() -> RedisError {
    RedisError::Str("OOM command not allowed when used memory > 'maxmemory'.")
}

/// The server refused `LOCK.DO`'s command before running it, for a reason it gave only
/// as a number.
pub fn inner_not_run(name: &[u8], errno: i32) -> RedisError {
    RedisError::String(format!(
        "ERR LOCK.DO: the server did not run '{}' (errno {errno})",
        printable(name)
    ))
}

/// The server handed back no reply for `LOCK.DO`'s command, and its error could not be
/// recovered (Valkey 8.1 and later lose a failed `GETDEL`'s or `GETSET`'s error while a
/// module follows keyspace events; see `ffi::call`).
pub fn inner_reply_lost(name: &[u8]) -> RedisError {
    RedisError::String(format!(
        "ERR LOCK.DO: '{}' failed and the server lost its error reply",
        printable(name)
    ))
}

/// An error reply the server lost and the module recovered, as the server wrote it.
pub fn recovered(text: &str) -> RedisError {
    RedisError::String(text.replace(['\r', '\n'], " "))
}

/// `grace-ms` was not an integer from 0 to 2^47 - 1.
pub fn invalid_grace() -> RedisError {
    RedisError::String(format!(
        "ERR invalid grace-ms: expected an integer from 0 to {MAX_TTL_MS}"
    ))
}

/// `LIMIT n` was not an integer from 1 to 1,000,000.
pub fn invalid_limit() -> RedisError {
    RedisError::String(format!(
        "ERR invalid LIMIT: expected an integer from 1 to {MAX_LIMIT}"
    ))
}

/// `SESSION` asked for where no connection can be bound: inside a script or function (the
/// module API does not tell which client ran it), or from a context without a client.
pub fn session_without_connection() -> RedisError {
    RedisError::Str(
        "ERR SESSION cannot bind a lock inside a script or function: call LOCK.ACQUIRE directly or in MULTI/EXEC",
    )
}

/// A `VALUE` longer than 4096 bytes.
pub fn invalid_value() -> RedisError {
    RedisError::String(format!(
        "ERR invalid VALUE: expected 0 to {MAX_VALUE_LEN} bytes"
    ))
}

/// `VALUE` with `SHARED` or `LIMIT`: a published value belongs to the one holder of an
/// exclusive lock.
pub fn value_with_shared() -> RedisError {
    RedisError::Str("ERR VALUE is for an exclusive lock: not with SHARED or LIMIT")
}

/// A token was empty or longer than 256 bytes.
pub fn invalid_token() -> RedisError {
    RedisError::String(format!(
        "ERR invalid token: expected 1 to {MAX_TOKEN_LEN} bytes"
    ))
}

/// An option name that the command does not know, quoted as the client gave it.
pub fn unknown_option(given: &[u8]) -> RedisError {
    RedisError::String(format!(
        "ERR unknown option '{}': expected TOKEN, WAIT, SESSION, SHARED, LIMIT or VALUE",
        printable(given)
    ))
}

/// An option that appeared twice.
pub fn repeated_option(given: &[u8]) -> RedisError {
    RedisError::String(format!(
        "ERR option '{}' given more than once",
        printable(given)
    ))
}

/// An option whose value is missing at the end of the arguments.
pub fn missing_value(given: &[u8]) -> RedisError {
    RedisError::String(format!("ERR option '{}' needs a value", printable(given)))
}

/// The key holds a value of another type. The server's own message, with its code.
pub fn wrong_type() -> RedisError {
    RedisError::WrongType
}

/// The fencing clock reached 2^53 and cannot grant a larger fence.
pub fn fence_exhausted() -> RedisError {
    RedisError::Str("ERR fence space exhausted: no fence below 2^53 is left for this server")
}

/// A command reserved for the replication stream and the AOF (`LOCK._SET`, `LOCK._HOLD`,
/// `LOCK._DROP`) was sent by a client.
pub fn internal_command(name: &str) -> RedisError {
    RedisError::String(format!(
        "ERR {name} is internal: it only runs from the replication stream or the AOF"
    ))
}

/// An argument of an internal command was malformed.
pub fn invalid_internal(name: &str, what: &str) -> RedisError {
    RedisError::String(format!("ERR {name}: invalid {what}"))
}

/// An acquire the rules refuse outright: a limit other than the one the key's shared
/// holders agree on, or a token that holds the key in the other mode.
pub fn refused(refusal: Refusal) -> RedisError {
    RedisError::Str(match refusal {
        Refusal::Limit => {
            "ERR LIMIT disagrees with the key's shared holders: all of them have the same LIMIT, or none"
        }
        Refusal::Kind => {
            "ERR the token holds the key in the other mode (SHARED or exclusive): release it first, no upgrade or downgrade"
        }
    })
}

/// `LOCK.DEBUG` was called on a server that does not allow debugging commands.
pub fn debug_disabled() -> RedisError {
    RedisError::Str(
        "ERR LOCK.DEBUG is disabled: start the server with 'enable-debug-command yes' (or 'local')",
    )
}

/// `LOCK.DEBUG` with a subcommand it does not know.
pub fn unknown_debug_subcommand(given: &[u8]) -> RedisError {
    RedisError::String(format!(
        "ERR unknown LOCK.DEBUG subcommand '{}': expected PANIC",
        printable(given)
    ))
}

/// A key handle the server did not give (never expected: every write opens its key
/// first); refused rather than passed to the server.
pub fn key_not_open() -> RedisError {
    RedisError::Str("ERR the lock key could not be opened")
}

/// What a waiter on a master that became a replica is told, in the server's own words
/// for the clients it unblocks itself (Redis does; Valkey leaves module waiters alone).
pub fn unblocked_by_role_change() -> RedisError {
    RedisError::Str(
        "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)",
    )
}

/// A Rust panic was caught at the FFI boundary: a bug in the module.
pub fn internal_panic() -> RedisError {
    RedisError::Str(
        "ERR internal error in the lock module (a bug: see the server log); the server keeps running",
    )
}

/// Renders client bytes for an error message: lossy UTF-8, control characters escaped,
/// and cut short, so a reply never carries a newline or a huge argument.
fn printable(given: &[u8]) -> String {
    const MAX_SHOWN: usize = 64;
    let text = String::from_utf8_lossy(&given[..given.len().min(MAX_SHOWN)]);
    let mut shown: String = text.chars().flat_map(char::escape_default).collect();
    if given.len() > MAX_SHOWN {
        shown.push_str("...");
    }
    shown
}

/// The redirection of a waiter whose key's slot is migrating to `addr`, as the server
/// words it for any command.
pub fn ask(slot: u16, addr: &str) -> String {
    format!("ASK {slot} {addr}")
}

/// The redirection of a waiter whose key's slot is served by `addr` now.
pub fn moved(slot: u16, addr: &str) -> String {
    format!("MOVED {slot} {addr}")
}

/// A waiter's key's slot is served by no node.
pub fn cluster_down() -> String {
    "CLUSTERDOWN Hash slot not served".to_string()
}

// What can only go wrong inside the module or the server (a bug, or the server refusing
// a write it should take): named here like every other message, so that a client that
// meets one reads a code and a sentence.

/// A re-acquire was decided without a token to renew (a bug).
pub fn renew_without_token() -> RedisError {
    RedisError::Str("ERR renew without a token")
}

/// The lock being renewed was gone right after the renewal (a bug).
pub fn vanished_while_renewing() -> RedisError {
    RedisError::Str("ERR lock vanished while renewing")
}

/// The shared holder being renewed was gone (a bug).
pub fn holder_vanished_while_renewing() -> RedisError {
    RedisError::Str("ERR holder vanished while renewing")
}

/// `LOCK._HOLD` could not place the holder it carries.
pub fn hold_not_set() -> RedisError {
    RedisError::Str("ERR LOCK._HOLD: the holder could not be set")
}

/// A shared grant found its token holding the key already (a bug: the rules renew it).
pub fn already_held_by_token() -> RedisError {
    RedisError::Str("ERR the token holds the key already")
}

/// A shared grant found the key held in the other mode (a bug: the rules refuse it).
pub fn held_in_another_mode() -> RedisError {
    RedisError::Str("ERR the key is held in another mode")
}

/// A key was touched before the module's type was registered.
pub fn type_not_registered() -> RedisError {
    RedisError::Str("ERR the lock type is not registered")
}

/// The server refused to store a lock value in its key.
pub fn key_not_written() -> RedisError {
    RedisError::Str("ERR could not write the lock key")
}

/// The server refused to set a lock key's expiry.
pub fn expiry_not_set() -> RedisError {
    RedisError::Str("ERR could not set the lock's expiry")
}

/// The server refused to block a waiting client.
pub fn client_not_blocked() -> RedisError {
    RedisError::Str("ERR the client could not be blocked")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(err: RedisError) -> String {
        err.to_string()
    }

    #[test]
    fn every_message_starts_with_its_code() {
        for err in [
            invalid_ttl(),
            invalid_timeout(),
            invalid_token(),
            unknown_option(b"FOO"),
            repeated_option(b"TOKEN"),
            missing_value(b"WAIT"),
            fence_exhausted(),
            internal_command("LOCK._HOLD"),
            invalid_internal("LOCK._SET", "fence"),
            invalid_limit(),
            debug_disabled(),
            unknown_debug_subcommand(b"X"),
            internal_panic(),
            key_not_open(),
        ] {
            assert!(text(err).starts_with("ERR "));
        }
        assert!(text(unblocked_by_role_change()).starts_with("UNBLOCKED "));
        assert!(text(wrong_type()).starts_with("WRONGTYPE "));
    }

    #[test]
    fn messages_name_the_argument() {
        assert!(text(invalid_ttl()).contains("ttl-ms"));
        assert!(text(invalid_timeout()).contains("timeout-ms"));
        assert!(text(invalid_token()).contains("token"));
        assert!(text(unknown_option(b"NoSuch")).contains("'NoSuch'"));
        assert!(text(repeated_option(b"wait")).contains("'wait'"));
    }

    #[test]
    fn client_bytes_cannot_break_the_reply() {
        let shown = text(unknown_option(b"a\r\nb"));
        assert!(!shown.contains('\r') && !shown.contains('\n'));
        let long = vec![b'x'; 1000];
        assert!(text(unknown_option(&long)).len() < 200);
    }
}
