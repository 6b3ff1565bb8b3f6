//! Every error the module replies with, as one enum: what went wrong, with what the
//! client gave. The module crate turns one into its error reply (`Display` is the reply's
//! text) where a command answers; nothing here knows the server's types.
//!
//! Each message starts with its code (`ERR`, `WRONGTYPE`, `NOTHELD`...) so that clients read
//! the code correctly, and names the argument that was wrong and what was expected.
//!
//! `Error` deliberately does not implement `std::error::Error`: the server binding turns
//! any such error into a reply prefixed `ERR`, which would hide the codes. A conversion
//! has to be written where it happens.

use std::fmt;

use crate::cluster::Route;
use crate::limits::{
    MAX_CONTENDED, MAX_KEYS, MAX_LIMIT, MAX_REPLICAS, MAX_TOKEN_LEN, MAX_TTL_MS, MAX_VALUE_LEN,
};
use crate::rules::Refusal;

impl Route {
    /// The error reply that redirects a client, as the server words it (here, beside the
    /// error it makes: the cluster's routing knows nothing of errors).
    pub fn redirect(self) -> Option<Error> {
        match self {
            Route::Local => None,
            elsewhere => Some(Error::Redirect(elsewhere)),
        }
    }
}

/// An error reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The command was sent with the wrong number of arguments (the server names the
    /// command in its reply).
    WrongArity,
    /// `ttl-ms` was not an integer from 1 to `MAX_TTL_MS`.
    InvalidTtl,
    /// `timeout-ms` was not an integer from 0 to `MAX_TTL_MS`.
    InvalidTimeout,
    /// `fence` (`LOCK.WATCH`) was not an integer from 0 to 2^63 - 1.
    InvalidFence,
    /// `grace-ms` was not an integer from 0 to `MAX_TTL_MS`.
    InvalidGrace,
    /// `LIMIT n` was not an integer from 1 to `MAX_LIMIT`.
    InvalidLimit,
    /// A `VALUE` longer than `MAX_VALUE_LEN` bytes.
    InvalidValue,
    /// A token was empty or longer than `MAX_TOKEN_LEN` bytes.
    InvalidToken,
    /// `VALUE` with `SHARED` or `LIMIT`: a published value belongs to the one holder of
    /// an exclusive lock.
    ValueWithShared,
    /// `SESSION` asked for where no connection can be bound: inside a script or function
    /// (the module API does not tell which client ran it), or without a client.
    SessionWithoutConnection,
    /// An option name the command does not know, as the client gave it.
    UnknownOption(Vec<u8>),
    /// An option `LOCK.EXTEND` does not know, as the client gave it.
    UnknownExtendOption(Vec<u8>),
    /// An option that appeared twice.
    RepeatedOption(Vec<u8>),
    /// `REPLICAS n` was not an integer from 0 to `MAX_REPLICAS`.
    InvalidReplicas,
    /// `REPLTIMEOUT ms` was not an integer from 1 to `MAX_TTL_MS`.
    InvalidReplTimeout,
    /// Fewer replicas than required acknowledged a grant (or an extend) in time: the
    /// grant was undone (an extend keeps the lock).
    NotReplicated { acked: u32, required: u32 },
    /// `REPLICAS n` (n > 0) on a server where the module cannot wait for replicas: the
    /// oldest server of its family that can.
    ReplicasUnsupported(&'static str),
    /// `REPLICAS n` (n > 0) where the server forbids holding a reply: inside MULTI/EXEC
    /// or a script.
    ReplicasCannotWait,
    /// An option whose value is missing at the end of the arguments.
    MissingValue(Vec<u8>),
    /// `COUNT n` (`LOCK.CONTENDED`) was not an integer from 1 to `MAX_CONTENDED`.
    InvalidCount,
    /// An option `LOCK.CONTENDED` does not know, as the client gave it.
    UnknownListOption(Vec<u8>),
    /// `numkeys` (`LOCK.ACQUIREALL`) was not an integer from 1 to `MAX_KEYS`, or named
    /// more keys than followed it.
    InvalidNumkeys,
    /// A key given twice to `LOCK.ACQUIREALL`.
    RepeatedKey(Vec<u8>),
    /// An option of `LOCK.ACQUIRE` that `LOCK.ACQUIREALL` does not take (`LIMIT`, `VALUE`).
    NotForAllKeys(Vec<u8>),
    /// The key holds a value of another type (the server's own message).
    WrongType,
    /// The fencing clock reached 2^53 and cannot grant a larger fence.
    FenceExhausted,
    /// An acquire the rules refuse outright (see `Refusal`).
    Refused(Refusal),
    /// `LOCK.DO`: the token does not hold the lock `key`; nothing ran.
    NotHeld(Vec<u8>),
    /// `LOCK.DO` may not run the command `name`, for `reason`.
    NotInLockDo { name: Vec<u8>, reason: &'static str },
    /// `LOCK.DO`'s command is not one the server knows.
    UnknownInner(Vec<u8>),
    /// `LOCK.DO`'s command has the wrong number of arguments.
    InnerArity(Vec<u8>),
    /// The caller's ACL user may not run `LOCK.DO`'s command (when the server says so
    /// only by `errno`; otherwise its own ACL error is the reply).
    InnerDenied(Vec<u8>),
    /// `LOCK.DO`'s command is a write under a full `maxmemory` (when the server says so
    /// only by `errno`), in the server's own words.
    InnerOutOfMemory,
    /// The server refused `LOCK.DO`'s command before running it, for a reason it gave
    /// only as a number.
    InnerNotRun { name: Vec<u8>, errno: i32 },
    /// The server handed back no reply for `LOCK.DO`'s command, and its error could not
    /// be recovered (Valkey 8.1 and later lose a failed `GETDEL`'s or `GETSET`'s error
    /// while a module follows keyspace events).
    InnerReplyLost(Vec<u8>),
    /// An error the server wrote, as it wrote it, on one line: its reply to a command
    /// the module called, or one it lost and the module recovered (`LOCK.DO`).
    Server(String),
    /// A command reserved for the replication stream and the AOF (`LOCK._SET`,
    /// `LOCK._HOLD`, `LOCK._DROP`) was sent by a client.
    InternalCommand(&'static str),
    /// An argument (`what`) of an internal command (`command`) was malformed.
    InvalidInternal {
        command: &'static str,
        what: &'static str,
    },
    /// `LOCK.DEBUG` was called on a server that does not allow debugging commands.
    DebugDisabled,
    /// `LOCK.DEBUG` with a subcommand it does not know.
    UnknownDebugSubcommand(Vec<u8>),
    /// A waiter's key is elsewhere in the cluster now: redirected as the server
    /// redirects any command (`ASK`, `MOVED`, `CLUSTERDOWN`).
    Redirect(Route),
    /// What a waiter on a master that became a replica is told, in the server's own
    /// words for the clients it unblocks itself (Redis does; Valkey leaves module
    /// waiters alone).
    UnblockedByRoleChange,
    /// A Rust panic was caught at the FFI boundary: a bug in the module.
    InternalPanic,
    // What can only go wrong inside the module or the server (a bug, or the server
    // refusing a write it should take): named like every other error, so that a client
    // that meets one reads a code and a sentence.
    /// A key handle the server did not give (never expected: every write opens its key
    /// first); refused rather than passed to the server.
    KeyNotOpen,
    /// A re-acquire was decided without a token to renew (a bug).
    RenewWithoutToken,
    /// A waiter for several keys found one busy again between the look that chose it and
    /// its grant, in the same step (a bug): it is answered with this, nothing granted.
    ChangedWhileGranting,
    /// The lock being renewed was gone right after the renewal (a bug).
    VanishedWhileRenewing,
    /// The shared holder being renewed was gone (a bug).
    HolderVanishedWhileRenewing,
    /// `LOCK._HOLD` could not place the holder it carries.
    HoldNotSet,
    /// A shared grant found its token holding the key already (a bug: the rules renew
    /// it).
    AlreadyHeldByToken,
    /// A shared grant found the key held in the other mode (a bug: the rules refuse it).
    HeldInAnotherMode,
    /// A key was touched before the module's type was registered.
    TypeNotRegistered,
    /// The server refused to store a lock value in its key.
    KeyNotWritten,
    /// The server refused to set a lock key's expiry.
    ExpiryNotSet,
    /// The server refused to block a waiting client.
    ClientNotBlocked,
}

/// The server's own words for a key of another type.
pub const WRONG_TYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidTtl => {
                write!(f, "ERR invalid ttl-ms: expected an integer from 1 to {MAX_TTL_MS}")
            }
            Error::InvalidTimeout => write!(
                f,
                "ERR invalid timeout-ms: expected an integer from 0 to {MAX_TTL_MS}"
            ),
            Error::InvalidFence => write!(
                f,
                "ERR invalid fence: expected an integer from 0 to {}",
                i64::MAX
            ),
            Error::InvalidGrace => write!(
                f,
                "ERR invalid grace-ms: expected an integer from 0 to {MAX_TTL_MS}"
            ),
            Error::InvalidLimit => write!(
                f,
                "ERR invalid LIMIT: expected an integer from 1 to {MAX_LIMIT}"
            ),
            Error::InvalidValue => {
                write!(f, "ERR invalid VALUE: expected 0 to {MAX_VALUE_LEN} bytes")
            }
            Error::InvalidToken => {
                write!(f, "ERR invalid token: expected 1 to {MAX_TOKEN_LEN} bytes")
            }
            Error::ValueWithShared => {
                f.write_str("ERR VALUE is for an exclusive lock: not with SHARED or LIMIT")
            }
            Error::SessionWithoutConnection => f.write_str(
                "ERR SESSION cannot bind a lock inside a script or function: call LOCK.ACQUIRE directly or in MULTI/EXEC",
            ),
            Error::UnknownOption(given) => write!(
                f,
                "ERR unknown option '{}': expected TOKEN, WAIT, SESSION, SHARED, LIMIT, VALUE, REPLICAS or REPLTIMEOUT",
                Printable(given)
            ),
            Error::UnknownExtendOption(given) => write!(
                f,
                "ERR unknown option '{}': expected REPLICAS or REPLTIMEOUT",
                Printable(given)
            ),
            Error::InvalidReplicas => write!(
                f,
                "ERR invalid REPLICAS: expected an integer from 0 to {MAX_REPLICAS} or AUTO"
            ),
            Error::InvalidReplTimeout => write!(
                f,
                "ERR invalid REPLTIMEOUT: expected an integer from 1 to {MAX_TTL_MS}"
            ),
            Error::NotReplicated { acked, required } => {
                write!(f, "NOTREPLICATED acked {acked} required {required}")
            }
            Error::ReplicasUnsupported(oldest) => {
                write!(f, "ERR REPLICAS needs {oldest} or later")
            }
            Error::ReplicasCannotWait => f.write_str(
                "ERR REPLICAS cannot hold a reply inside MULTI/EXEC or a script: send the command on its own",
            ),
            Error::InvalidCount => write!(
                f,
                "ERR invalid COUNT: expected an integer from 1 to {MAX_CONTENDED}"
            ),
            Error::UnknownListOption(given) => write!(
                f,
                "ERR unknown option '{}': expected COUNT",
                Printable(given)
            ),
            Error::RepeatedOption(given) => {
                write!(f, "ERR option '{}' given more than once", Printable(given))
            }
            Error::MissingValue(given) => {
                write!(f, "ERR option '{}' needs a value", Printable(given))
            }
            Error::WrongType => f.write_str(WRONG_TYPE),
            Error::FenceExhausted => f.write_str(
                "ERR fence space exhausted: no fence below 2^53 is left for this server",
            ),
            Error::Refused(Refusal::Limit) => f.write_str(
                "ERR LIMIT disagrees with the key's shared holders: all of them have the same LIMIT, or none",
            ),
            Error::Refused(Refusal::Kind) => f.write_str(
                "ERR the token holds the key in the other mode (SHARED or exclusive): release it first, no upgrade or downgrade",
            ),
            Error::NotHeld(key) => write!(
                f,
                "NOTHELD the lock '{}' is not held by this token: nothing ran",
                Printable(key)
            ),
            Error::NotInLockDo { name, reason } => {
                write!(f, "ERR LOCK.DO cannot run '{}': {reason}", Printable(name))
            }
            Error::UnknownInner(name) => {
                write!(f, "ERR LOCK.DO: unknown command '{}'", Printable(name))
            }
            Error::InnerArity(name) => write!(
                f,
                "ERR LOCK.DO: wrong number of arguments for '{}'",
                Printable(name)
            ),
            Error::InnerDenied(name) => write!(
                f,
                "NOPERM this user has no permissions to run the '{}' command",
                Printable(name)
            ),
            Error::InnerOutOfMemory => {
                f.write_str("OOM command not allowed when used memory > 'maxmemory'.")
            }
            Error::InnerNotRun { name, errno } => write!(
                f,
                "ERR LOCK.DO: the server did not run '{}' (errno {errno})",
                Printable(name)
            ),
            Error::InnerReplyLost(name) => write!(
                f,
                "ERR LOCK.DO: '{}' failed and the server lost its error reply",
                Printable(name)
            ),
            Error::WrongArity => f.write_str("ERR wrong number of arguments"),
            Error::InvalidNumkeys => write!(
                f,
                "ERR numkeys must be an integer from 1 to {MAX_KEYS}, followed by that many keys and the ttl-ms"
            ),
            Error::RepeatedKey(key) => write!(
                f,
                "ERR key '{}' is given more than once: each key once",
                Printable(key)
            ),
            Error::NotForAllKeys(option) => write!(
                f,
                "ERR {} is not an option of LOCK.ACQUIREALL (LIMIT and VALUE belong to LOCK.ACQUIRE of one key)",
                Printable(option)
            ),
            Error::Server(text) => f.write_str(&text.replace(['\r', '\n'], " ")),
            Error::InternalCommand(name) => write!(
                f,
                "ERR {name} is internal: it only runs from the replication stream or the AOF"
            ),
            Error::InvalidInternal { command, what } => {
                write!(f, "ERR {command}: invalid {what}")
            }
            Error::DebugDisabled => f.write_str(
                "ERR LOCK.DEBUG is disabled: start the server with 'enable-debug-command yes' (or 'local')",
            ),
            Error::UnknownDebugSubcommand(given) => write!(
                f,
                "ERR unknown LOCK.DEBUG subcommand '{}': expected PANIC",
                Printable(given)
            ),
            Error::Redirect(Route::Ask(slot, addr)) => write!(f, "ASK {slot} {addr}"),
            Error::Redirect(Route::Moved(slot, addr)) => write!(f, "MOVED {slot} {addr}"),
            Error::Redirect(Route::Down(_) | Route::Local) => {
                f.write_str("CLUSTERDOWN Hash slot not served")
            }
            Error::UnblockedByRoleChange => f.write_str(
                "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)",
            ),
            Error::InternalPanic => f.write_str(
                "ERR internal error in the lock module (a bug: see the server log); the server keeps running",
            ),
            Error::KeyNotOpen => f.write_str("ERR the lock key could not be opened"),
            Error::RenewWithoutToken => f.write_str("ERR renew without a token"),
            Error::ChangedWhileGranting => {
                f.write_str("ERR a key changed while the keys were granted: nothing was granted")
            }
            Error::VanishedWhileRenewing => f.write_str("ERR lock vanished while renewing"),
            Error::HolderVanishedWhileRenewing => {
                f.write_str("ERR holder vanished while renewing")
            }
            Error::HoldNotSet => f.write_str("ERR LOCK._HOLD: the holder could not be set"),
            Error::AlreadyHeldByToken => f.write_str("ERR the token holds the key already"),
            Error::HeldInAnotherMode => f.write_str("ERR the key is held in another mode"),
            Error::TypeNotRegistered => f.write_str("ERR the lock type is not registered"),
            Error::KeyNotWritten => f.write_str("ERR could not write the lock key"),
            Error::ExpiryNotSet => f.write_str("ERR could not set the lock's expiry"),
            Error::ClientNotBlocked => f.write_str("ERR the client could not be blocked"),
        }
    }
}

/// Client bytes as an error message shows them: lossy UTF-8, control characters escaped,
/// and cut short, so a reply never carries a newline or a huge argument.
struct Printable<'a>(&'a [u8]);

impl fmt::Display for Printable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MAX_SHOWN: usize = 64;
        let given = self.0;
        let text = String::from_utf8_lossy(&given[..given.len().min(MAX_SHOWN)]);
        for c in text.chars().flat_map(char::escape_default) {
            fmt::Write::write_char(f, c)?;
        }
        if given.len() > MAX_SHOWN {
            f.write_str("...")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(err: Error) -> String {
        err.to_string()
    }

    #[test]
    fn every_message_starts_with_its_code() {
        for err in [
            Error::InvalidTtl,
            Error::InvalidTimeout,
            Error::InvalidToken,
            Error::UnknownOption(b"FOO".to_vec()),
            Error::RepeatedOption(b"TOKEN".to_vec()),
            Error::MissingValue(b"WAIT".to_vec()),
            Error::FenceExhausted,
            Error::InternalCommand("LOCK._HOLD"),
            Error::InvalidInternal {
                command: "LOCK._SET",
                what: "fence",
            },
            Error::InvalidLimit,
            Error::InvalidCount,
            Error::UnknownListOption(b"X".to_vec()),
            Error::DebugDisabled,
            Error::UnknownDebugSubcommand(b"X".to_vec()),
            Error::InternalPanic,
            Error::KeyNotOpen,
        ] {
            assert!(text(err).starts_with("ERR "));
        }
        assert!(text(Error::UnblockedByRoleChange).starts_with("UNBLOCKED "));
        assert!(text(Error::WrongType).starts_with("WRONGTYPE "));
        assert!(text(Error::NotHeld(b"k".to_vec())).starts_with("NOTHELD "));
    }

    #[test]
    fn messages_name_the_argument() {
        assert!(text(Error::InvalidTtl).contains("ttl-ms"));
        assert!(text(Error::InvalidTimeout).contains("timeout-ms"));
        assert!(text(Error::InvalidToken).contains("token"));
        assert!(text(Error::UnknownOption(b"NoSuch".to_vec())).contains("'NoSuch'"));
        assert!(text(Error::RepeatedOption(b"wait".to_vec())).contains("'wait'"));
    }

    #[test]
    fn client_bytes_cannot_break_the_reply() {
        let shown = text(Error::UnknownOption(b"a\r\nb".to_vec()));
        assert!(!shown.contains('\r') && !shown.contains('\n'));
        let long = vec![b'x'; 1000];
        assert!(text(Error::UnknownOption(long)).len() < 200);
    }

    #[test]
    fn redirections_are_worded_as_the_server_words_them() {
        let addr = "127.0.0.1:7001".to_string();
        assert_eq!(
            text(Error::Redirect(Route::Ask(3, addr.clone()))),
            "ASK 3 127.0.0.1:7001"
        );
        assert_eq!(
            text(Error::Redirect(Route::Moved(3, addr))),
            "MOVED 3 127.0.0.1:7001"
        );
        assert_eq!(
            text(Error::Redirect(Route::Down(3))),
            "CLUSTERDOWN Hash slot not served"
        );
    }
}
