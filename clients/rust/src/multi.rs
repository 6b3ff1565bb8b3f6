//! What both faces of `MultiLock` (several keys at once, all or none, `LOCK.ACQUIREALL`)
//! share, with no I/O: its `Debug`, its accessors, and applying a command to every key.

use std::time::Duration;

use crate::commands::GrantAll;
use crate::commands::extend_cmd;
use crate::commands::release_cmd;

/// How the sync and async `MultiLock` show in logs: how many keys and their fences,
/// never the token.
pub(crate) fn debug_multi(
    f: &mut std::fmt::Formatter<'_>,
    keys: &[Vec<u8>],
    grant: &GrantAll,
) -> std::fmt::Result {
    f.debug_struct("MultiLock")
        .field("keys", &keys.len())
        .field("fences", &grant.fences)
        .finish_non_exhaustive()
}

/// `LOCK.EXTEND` of every key of `keys` to `ttl` (or, with `None`, `LOCK.RELEASE` of
/// each) by `token`, as one pipeline: each reply says whether the key was held.
pub(crate) fn on_every_key(
    keys: &[Vec<u8>],
    token: &[u8],
    ttl: Option<Duration>,
) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    for key in keys {
        pipe.add_command(match ttl {
            Some(ttl) => extend_cmd(key, token, ttl),
            None => release_cmd(key, token),
        });
    }
    pipe
}

/// The accessors of the sync and async `MultiLock` (fields `keys` and `grant`).
macro_rules! multi_lock_accessors {
    () => {
        /// The keys, in the order given.
        pub fn keys(&self) -> &[Vec<u8>] {
            &self.keys
        }

        /// The token that holds every key (a secret: it proves ownership).
        pub fn token(&self) -> &[u8] {
            &self.grant.token
        }

        /// One fencing token per key, in the order of [`keys`](Self::keys).
        pub fn fences(&self) -> &[u64] {
            &self.grant.fences
        }
    };
}

pub(crate) use multi_lock_accessors;
