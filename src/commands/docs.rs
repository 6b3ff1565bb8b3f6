//! What `COMMAND DOCS` tells of each public command: summary, since, complexity and
//! arguments, which `redis-cli help` prints and the interactive cli shows as hints.
//! (`ffi/command_info.rs` hands them to the server.)

use crate::ffi::command_info::{Arg, ArgKind, Doc};

/// The module version that added the commands of the first release.
const FIRST: &std::ffi::CStr = c"0.1.0";

/// The module version that added `LOCK.ACQUIREALL`.
const ALL_KEYS: &std::ffi::CStr = c"0.2.0";

/// The module version that added `LOCK.CONTENDED`.
const HEALTH: &std::ffi::CStr = c"0.3.0";

const REPLICAS: Arg = Arg::option(c"n|AUTO", c"REPLICAS", ArgKind::String);
const REPLTIMEOUT: Arg = Arg::option(c"ms", c"REPLTIMEOUT", ArgKind::Integer);

const KEY: Arg = Arg::required(c"key", ArgKind::Key);
const TOKEN: Arg = Arg::required(c"token", ArgKind::String);
const TTL: Arg = Arg::required(c"ttl-ms", ArgKind::Integer);

/// `LOCK.ACQUIRE key ttl-ms [TOKEN token] [WAIT timeout-ms] [SESSION grace-ms] [SHARED]
/// [LIMIT n] [VALUE value]`
pub const ACQUIRE: Doc = Doc {
    summary: c"Takes a lock for ttl-ms and replies its token and fencing token; with WAIT, waits first come, first served",
    since: FIRST,
    complexity: c"O(1) for an exclusive lock; O(log N) for a shared holder, where N is the number of the key's holders",
    args: &[
        KEY,
        TTL,
        Arg::option(c"token", c"TOKEN", ArgKind::String),
        Arg::option(c"timeout-ms", c"WAIT", ArgKind::Integer),
        Arg::option(c"grace-ms", c"SESSION", ArgKind::Integer),
        Arg::option(c"shared", c"SHARED", ArgKind::PureToken),
        Arg::option(c"n", c"LIMIT", ArgKind::Integer),
        Arg::option(c"value", c"VALUE", ArgKind::String),
        REPLICAS,
        REPLTIMEOUT,
    ],
};

/// `LOCK.ACQUIREALL numkeys key [key ...] ttl-ms [TOKEN token] [WAIT timeout-ms]
/// [SESSION grace-ms] [SHARED]`
pub const ACQUIREALL: Doc = Doc {
    summary: c"Takes the locks of several keys at once, all or none, with one token and a fence per key; with WAIT, waits first come, first served on every key",
    since: ALL_KEYS,
    complexity: c"O(N) where N is the number of keys",
    args: &[
        Arg::required(c"numkeys", ArgKind::Integer),
        Arg {
            multiple: true,
            ..KEY
        },
        TTL,
        Arg::option(c"token", c"TOKEN", ArgKind::String),
        Arg::option(c"timeout-ms", c"WAIT", ArgKind::Integer),
        Arg::option(c"grace-ms", c"SESSION", ArgKind::Integer),
        Arg::option(c"shared", c"SHARED", ArgKind::PureToken),
        REPLICAS,
        REPLTIMEOUT,
    ],
};

/// `LOCK.RELEASE key token`
pub const RELEASE: Doc = Doc {
    summary: c"Deletes the lock if the token holds it; the oldest waiters get it at once",
    since: FIRST,
    complexity: c"O(1), plus O(M) for the M waiters granted the lock",
    args: &[KEY, TOKEN],
};

/// `LOCK.EXTEND key token ttl-ms [REPLICAS n] [REPLTIMEOUT ms]`
pub const EXTEND: Doc = Doc {
    summary: c"Sets the lock's remaining time to ttl-ms if the token holds it; with REPLICAS, replies once replicas have it",
    since: FIRST,
    complexity: c"O(1) for an exclusive lock; O(log N) for a shared holder, where N is the number of the key's holders",
    args: &[KEY, TOKEN, TTL, REPLICAS, REPLTIMEOUT],
};

/// `LOCK.INFO key`
pub const INFO: Doc = Doc {
    summary: c"Returns the lock's time left, fence, grant time, waiters, watchers, session, mode and value, never its token",
    since: FIRST,
    complexity: c"O(1)",
    args: &[KEY],
};

/// `LOCK.WATCH key fence timeout-ms`
pub const WATCH: Doc = Doc {
    summary: c"Replies the lock's holder (fence and value) once it differs from the given fence, or nil after timeout-ms",
    since: FIRST,
    complexity: c"O(1)",
    args: &[
        KEY,
        Arg::required(c"fence", ArgKind::Integer),
        Arg::required(c"timeout-ms", ArgKind::Integer),
    ],
};

/// `LOCK.DO key token command [arg ...]`
pub const DO: Doc = Doc {
    summary:
        c"Runs a command atomically if and only if the token holds the lock, and replies its reply",
    since: FIRST,
    complexity: c"O(1) plus the complexity of the command it runs",
    args: &[
        KEY,
        TOKEN,
        Arg::required(c"command", ArgKind::String),
        Arg {
            name: c"arg",
            kind: ArgKind::String,
            token: None,
            optional: true,
            multiple: true,
        },
    ],
};

/// `LOCK.HOLDERS key`
pub const HOLDERS: Doc = Doc {
    summary: c"Returns who holds the lock: each holder's fence, time left, grant time, client id, session and value, never a token",
    since: FIRST,
    complexity: c"O(N) where N is the number of the key's holders",
    args: &[KEY],
};

/// `LOCK.CONTENDED [COUNT n]`
pub const CONTENDED: Doc = Doc {
    summary: c"Lists the locks clients wait for now, longest-waiting first: key, waiters, how long the oldest waited, holders and how long the oldest grant is held; never a token",
    since: HEALTH,
    complexity: c"O(N log N) where N is the number of keys with waiters",
    args: &[Arg::option(c"n", c"COUNT", ArgKind::Integer)],
};
