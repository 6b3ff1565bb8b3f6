//! The module's commands as typed [`redis::Cmd`] builders and reply types.
//!
//! These work with every connection of the `redis` crate: `query` on a sync
//! [`redis::Connection`] (or a cluster or pooled one), `query_async` on an async one.
//!
//! ```no_run
//! use std::time::Duration;
//! use redis_lock_client::commands::{acquire_cmd, release_cmd};
//! use redis_lock_client::Grant;
//!
//! # fn main() -> redis::RedisResult<()> {
//! let mut con = redis::Client::open("redis://127.0.0.1:7379/")?.get_connection()?;
//! let grant: Option<Grant> =
//!     acquire_cmd("orders:42", Duration::from_secs(10), None, None).query(&mut con)?;
//! if let Some(grant) = grant {
//!     let released: bool = release_cmd("orders:42", &grant.token).query(&mut con)?;
//!     assert!(released);
//! }
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

use redis::{FromRedisValue, ParsingError, Value};

/// Milliseconds of a duration, as the module's `ttl-ms` and `timeout-ms` take them.
/// A duration under one millisecond becomes 0, which the server refuses for a TTL.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// `LOCK.ACQUIRE key ttl-ms [TOKEN token] [WAIT timeout-ms]`.
///
/// Reply: `Option<Grant>`, `None` when another token holds the lock (at once, or when the
/// wait timed out). `wait` of `Some(Duration::ZERO)` waits without limit; a wait blocks
/// the connection, so give it a connection of its own and a response timeout longer
/// than the wait. See [`acquire_session_cmd`] for a lock bound to the connection.
pub fn acquire_cmd(
    key: impl AsRef<[u8]>,
    ttl: Duration,
    token: Option<&[u8]>,
    wait: Option<Duration>,
) -> redis::Cmd {
    acquire_session_cmd(key, ttl, token, wait, None)
}

/// `LOCK.ACQUIRE key ttl-ms [TOKEN token] [WAIT timeout-ms] [SESSION grace-ms]`: with a
/// `session` grace, the lock is bound to the connection that sends the command and is
/// released `grace` after that connection closes (unless its token acquires it again
/// first, from any connection: a reclaim). Reply as for [`acquire_cmd`].
pub fn acquire_session_cmd(
    key: impl AsRef<[u8]>,
    ttl: Duration,
    token: Option<&[u8]>,
    wait: Option<Duration>,
    session: Option<Duration>,
) -> redis::Cmd {
    let key = key.as_ref();
    // Room for every argument an acquire can take, so that none moves the buffers.
    let mut cmd = redis::Cmd::with_capacity(
        ACQUIRE_ARGS,
        ACQUIRE_BYTES + key.len() + token.map_or(0, <[u8]>::len),
    );
    cmd.arg("LOCK.ACQUIRE").arg(key).arg(millis(ttl));
    add_acquire_options(&mut cmd, token, wait, session);
    cmd
}

/// The most arguments a `LOCK.ACQUIRE` takes (name, key, TTL, and `TOKEN`, `WAIT`,
/// `SESSION`, `LIMIT`, `VALUE` with theirs, `SHARED`), and the bytes of all but the key,
/// the token and a value.
const ACQUIRE_ARGS: usize = 14;
const ACQUIRE_BYTES: usize = 128;

/// Adds `[TOKEN token] [WAIT timeout-ms] [SESSION grace-ms]`, the options both acquires
/// share.
fn add_acquire_options(
    cmd: &mut redis::Cmd,
    token: Option<&[u8]>,
    wait: Option<Duration>,
    session: Option<Duration>,
) {
    if let Some(token) = token {
        cmd.arg("TOKEN").arg(token);
    }
    if let Some(wait) = wait {
        cmd.arg("WAIT").arg(millis(wait));
    }
    if let Some(grace) = session {
        cmd.arg("SESSION").arg(millis(grace));
    }
}

/// How an acquire asks to hold a key: alone (a mutex, or a read/write lock's writer),
/// as one of any number of shared holders (a reader), or as one of at most `n` (a
/// counting semaphore).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// The only holder (`LOCK.ACQUIRE` without `SHARED`): a mutex, or a writer.
    #[default]
    Exclusive,
    /// A shared holder beside other shared holders (`SHARED`): a reader.
    Shared,
    /// A shared holder of a key with at most `n` of them (`LIMIT n`, 1 to 1,000,000).
    /// Every holder of a key must ask for the same `n`.
    Semaphore(u32),
}

impl Mode {
    /// Adds `SHARED` or `LIMIT n` to an acquire.
    pub fn add_to(self, cmd: &mut redis::Cmd) {
        match self {
            Mode::Exclusive => {}
            Mode::Shared => {
                cmd.arg("SHARED");
            }
            Mode::Semaphore(n) => {
                cmd.arg("LIMIT").arg(n);
            }
        }
    }
}

/// `LOCK.ACQUIRE key ttl-ms ... [SHARED | LIMIT n]`: [`acquire_session_cmd`] in `mode`.
pub fn acquire_mode_cmd(
    key: impl AsRef<[u8]>,
    ttl: Duration,
    token: Option<&[u8]>,
    wait: Option<Duration>,
    session: Option<Duration>,
    mode: Mode,
) -> redis::Cmd {
    let mut cmd = acquire_session_cmd(key, ttl, token, wait, session);
    mode.add_to(&mut cmd);
    cmd
}

/// `LOCK.ACQUIREALL numkeys key [key ...] ttl-ms [TOKEN token] [WAIT timeout-ms]
/// [SESSION grace-ms] [SHARED]`: every key at once, or none.
///
/// Reply: `Option<GrantAll>`, `None` when a key is busy (at once, or when the wait timed
/// out). `mode` is [`Mode::Exclusive`] or [`Mode::Shared`]; the server refuses a
/// semaphore (`LIMIT`) for several keys.
pub fn acquire_all_cmd<K: AsRef<[u8]>>(
    keys: &[K],
    ttl: Duration,
    token: Option<&[u8]>,
    wait: Option<Duration>,
    session: Option<Duration>,
    mode: Mode,
) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.ACQUIREALL");
    cmd.arg(keys.len());
    for key in keys {
        cmd.arg(key.as_ref());
    }
    cmd.arg(millis(ttl));
    add_acquire_options(&mut cmd, token, wait, session);
    mode.add_to(&mut cmd);
    cmd
}

/// Several keys granted at once: the reply `[token, [fence, ...]]` of `LOCK.ACQUIREALL`.
#[derive(Clone, PartialEq, Eq)]
pub struct GrantAll {
    /// The secret that proves ownership of every key.
    pub token: Vec<u8>,
    /// One fencing token per key, in the order the keys were given.
    pub fences: Vec<u64>,
}

impl std::fmt::Debug for GrantAll {
    // The token is a secret: keep it out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrantAll")
            .field("token", &"<redacted>")
            .field("fences", &self.fences)
            .finish()
    }
}

impl FromRedisValue for GrantAll {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let (token, fences) = <(Vec<u8>, Vec<u64>)>::from_redis_value(v)?;
        Ok(GrantAll { token, fences })
    }
}

/// `LOCK.RELEASE key token`. Reply: `bool`, true if this token held the lock and it is
/// now released.
pub fn release_cmd(key: impl AsRef<[u8]>, token: &[u8]) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.RELEASE");
    cmd.arg(key.as_ref()).arg(token);
    cmd
}

/// `LOCK.EXTEND key token ttl-ms`. Reply: `bool`, true if this token holds the lock and
/// its remaining time is now `ttl`.
pub fn extend_cmd(key: impl AsRef<[u8]>, token: &[u8], ttl: Duration) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.EXTEND");
    cmd.arg(key.as_ref()).arg(token).arg(millis(ttl));
    cmd
}

/// `LOCK.INFO key`. Reply: `Option<LockInfo>`, `None` when the key does not exist.
pub fn info_cmd(key: impl AsRef<[u8]>) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.INFO");
    cmd.arg(key.as_ref());
    cmd
}

/// `LOCK.WATCH key fence timeout-ms`: answers when the key's holder differs from
/// `fence` (`0`: nobody), at once or when it changes; `timeout` of zero waits without
/// limit. Reply: `Option<(u64, Option<Vec<u8>>)>`: the holder's fence and published
/// value (`(0, None)` when nobody holds the key), `None` when the timeout passed. A wait
/// blocks the connection: give it one of its own and a response timeout longer than
/// `timeout`.
pub fn watch_cmd(key: impl AsRef<[u8]>, fence: u64, timeout: Duration) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.WATCH");
    cmd.arg(key.as_ref()).arg(fence).arg(millis(timeout));
    cmd
}

/// `LOCK.DO key token command [arg ...]`: `inner` run atomically if and only if `token`
/// holds `key`. Reply: `inner`'s own; an error with code `NOTHELD` (nothing ran) when
/// `token` does not hold `key`.
pub fn do_cmd(key: impl AsRef<[u8]>, token: &[u8], inner: &redis::Cmd) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.DO");
    cmd.arg(key.as_ref()).arg(token);
    for arg in inner.args_iter() {
        if let redis::Arg::Simple(bytes) = arg {
            cmd.arg(bytes);
        }
    }
    cmd
}

/// A granted lock: the reply `[token, fence]` of `LOCK.ACQUIRE`.
#[derive(Clone, PartialEq, Eq)]
pub struct Grant {
    /// The secret that proves ownership; needed to release or extend.
    pub token: Vec<u8>,
    /// The fencing token: greater than every fence granted before for this key.
    pub fence: u64,
}

impl std::fmt::Debug for Grant {
    // The token is a secret: keep it out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grant")
            .field("token", &"<redacted>")
            .field("fence", &self.fence)
            .finish()
    }
}

impl FromRedisValue for Grant {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        match v {
            Value::Array(items) if items.len() == 2 => {
                let mut items = items.into_iter();
                let token = Vec::<u8>::from_redis_value(items.next().unwrap_or(Value::Nil))?;
                let fence = u64::from_redis_value(items.next().unwrap_or(Value::Nil))?;
                Ok(Grant { token, fence })
            }
            other => Err(format!("LOCK.ACQUIRE: expected [token, fence], got {other:?}").into()),
        }
    }
}

/// What `LOCK.INFO` tells about a lock (never its token).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockInfo {
    /// Time left before the lock expires; `None` if an admin removed the expiry.
    pub ttl: Option<Duration>,
    /// The fence of the current grant.
    pub fence: u64,
    /// When the lock was granted, in Unix milliseconds.
    pub acquired_unix_ms: u64,
    /// How many clients are blocked in `LOCK.ACQUIRE ... WAIT` on this key.
    pub waiters: u64,
    /// How many clients are blocked in `LOCK.WATCH` on this key (0 from a module that
    /// predates it).
    pub watchers: u64,
    /// For a session-bound lock, its grace; `None` for a plain lock (or a server whose
    /// module predates sessions).
    pub session: Option<Duration>,
    /// For a session-bound lock, whether its connection is open (`false` while the grace
    /// runs); `None` for a plain lock.
    pub connected: Option<bool>,
    /// Whether the key is held by shared holders (readers, a semaphore's holders).
    pub shared: bool,
    /// How many holders the key has (1 for an exclusive lock).
    pub holders: u64,
    /// The limit the shared holders agreed on (`LIMIT n`), `None` for none.
    pub limit: Option<u64>,
    /// The value the holder published (`VALUE`), `None` for none.
    pub value: Option<Vec<u8>>,
}

impl FromRedisValue for LockInfo {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        // RESP3 answers a map, RESP2 a flat field/value array.
        let pairs: Vec<(Value, Value)> = match v {
            Value::Map(pairs) => pairs,
            Value::Array(items) if items.len() % 2 == 0 => {
                let mut pairs = Vec::with_capacity(items.len() / 2);
                let mut items = items.into_iter();
                while let (Some(name), Some(value)) = (items.next(), items.next()) {
                    pairs.push((name, value));
                }
                pairs
            }
            other => return Err(format!("LOCK.INFO: expected a map, got {other:?}").into()),
        };
        let mut ttl = None;
        let mut fence = None;
        let mut acquired = None;
        let mut waiters = None;
        let mut session = None;
        let mut connected = None;
        let mut holders = None;
        let mut limit = None;
        let mut shared = false;
        let mut watchers = None;
        let mut published = None;
        for (name, value) in pairs {
            let name = String::from_redis_value(name)?;
            if name == "mode" {
                shared = String::from_redis_value(value)? == "shared";
                continue;
            }
            if name == "value" {
                published = Option::<Vec<u8>>::from_redis_value(value)?;
                continue;
            }
            let slot = match name.as_str() {
                "ttl" => &mut ttl,
                "fence" => &mut fence,
                "acquired" => &mut acquired,
                "waiters" => &mut waiters,
                "watchers" => &mut watchers,
                "session" => &mut session,
                "connected" => &mut connected,
                "holders" => &mut holders,
                "limit" => &mut limit,
                _ => continue,
            };
            *slot = Some(i64::from_redis_value(value)?);
        }
        let field = |value: Option<i64>, name: &str| {
            value.ok_or_else(|| ParsingError::from(format!("LOCK.INFO: no field {name}")))
        };
        let ttl = field(ttl, "ttl")?;
        Ok(LockInfo {
            ttl: u64::try_from(ttl).ok().map(Duration::from_millis),
            fence: u64::try_from(field(fence, "fence")?).unwrap_or(0),
            acquired_unix_ms: u64::try_from(field(acquired, "acquired")?).unwrap_or(0),
            waiters: u64::try_from(field(waiters, "waiters")?).unwrap_or(0),
            session: session
                .and_then(|ms| u64::try_from(ms).ok())
                .map(Duration::from_millis),
            connected: connected.and_then(|c| (c >= 0).then_some(c == 1)),
            shared,
            holders: holders.and_then(|h| u64::try_from(h).ok()).unwrap_or(1),
            limit: limit.and_then(|l| u64::try_from(l).ok()),
            watchers: watchers.and_then(|w| u64::try_from(w).ok()).unwrap_or(0),
            value: published,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acquire_cmd_carries_token_and_wait_in_milliseconds() {
        let cmd = acquire_cmd(
            "k",
            Duration::from_secs(2),
            Some(b"t"),
            Some(Duration::from_millis(1500)),
        );
        let args: Vec<Vec<u8>> = cmd
            .args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => bytes.to_vec(),
                _ => Vec::new(),
            })
            .collect();
        let expected: Vec<&[u8]> = vec![
            b"LOCK.ACQUIRE",
            b"k",
            b"2000",
            b"TOKEN",
            b"t",
            b"WAIT",
            b"1500",
        ];
        assert_eq!(args, expected);
    }

    #[test]
    fn a_grant_reads_token_and_fence_and_nil_reads_as_none() {
        let reply = Value::Array(vec![Value::BulkString(b"abc".to_vec()), Value::Int(42)]);
        let grant = Grant::from_redis_value(reply).unwrap();
        assert_eq!(grant.token, b"abc");
        assert_eq!(grant.fence, 42);
        assert_eq!(Option::<Grant>::from_redis_value(Value::Nil).unwrap(), None);
        assert!(!format!("{grant:?}").contains("abc"));
    }

    #[test]
    fn info_reads_both_the_resp2_array_and_the_resp3_map() {
        let fields = [
            ("ttl", 900),
            ("fence", 7),
            ("acquired", 1_700),
            ("waiters", 2),
            ("watchers", 3),
            ("session", 500),
            ("connected", 0),
        ];
        let flat = Value::Array(
            fields
                .iter()
                .flat_map(|(n, v)| [Value::BulkString(n.as_bytes().to_vec()), Value::Int(*v)])
                .collect(),
        );
        let map = Value::Map(
            fields
                .iter()
                .map(|(n, v)| (Value::BulkString(n.as_bytes().to_vec()), Value::Int(*v)))
                .collect(),
        );
        let expected = LockInfo {
            ttl: Some(Duration::from_millis(900)),
            fence: 7,
            acquired_unix_ms: 1_700,
            waiters: 2,
            session: Some(Duration::from_millis(500)),
            connected: Some(false),
            shared: false,
            holders: 1,
            limit: None,
            watchers: 3,
            value: None,
        };
        assert_eq!(LockInfo::from_redis_value(flat).unwrap(), expected);
        assert_eq!(LockInfo::from_redis_value(map).unwrap(), expected);
    }

    #[test]
    fn info_reads_the_mode_holders_and_limit_of_shared_holders() {
        let mut items = Vec::new();
        for (name, value) in [
            ("ttl", Value::Int(5)),
            ("fence", Value::Int(9)),
            ("acquired", Value::Int(1)),
            ("waiters", Value::Int(0)),
            ("mode", Value::BulkString(b"shared".to_vec())),
            ("holders", Value::Int(3)),
            ("limit", Value::Int(4)),
            ("value", Value::Nil),
        ] {
            items.push(Value::BulkString(name.as_bytes().to_vec()));
            items.push(value);
        }
        let info = LockInfo::from_redis_value(Value::Array(items)).unwrap();
        assert!(info.shared);
        assert_eq!((info.holders, info.limit), (3, Some(4)));
    }

    #[test]
    fn a_mode_adds_shared_or_limit_to_an_acquire() {
        let words = |mode: Mode| -> Vec<Vec<u8>> {
            acquire_mode_cmd("k", Duration::from_secs(1), None, None, None, mode)
                .args_iter()
                .skip(3)
                .map(|arg| match arg {
                    redis::Arg::Simple(bytes) => bytes.to_vec(),
                    _ => Vec::new(),
                })
                .collect()
        };
        assert!(words(Mode::Exclusive).is_empty());
        assert_eq!(words(Mode::Shared), vec![b"SHARED".to_vec()]);
        assert_eq!(
            words(Mode::Semaphore(5)),
            vec![b"LIMIT".to_vec(), b"5".to_vec()]
        );
    }

    #[test]
    fn info_without_expiry_has_no_ttl() {
        let reply = Value::Array(vec![
            Value::BulkString(b"ttl".to_vec()),
            Value::Int(-1),
            Value::BulkString(b"fence".to_vec()),
            Value::Int(1),
            Value::BulkString(b"acquired".to_vec()),
            Value::Int(1),
            Value::BulkString(b"waiters".to_vec()),
            Value::Int(0),
        ]);
        let info = LockInfo::from_redis_value(reply).unwrap();
        assert_eq!((info.ttl, info.session, info.connected), (None, None, None));
    }
}
