//! The module's integration-test helpers: the lock commands, replies, snapshots, raw
//! RESP and blocked waiters, on top of the workspace's one real-server harness, the
//! `redis-lock-testkit` crate (`TestServer`, `free_port`, `module_path`, `poll_until`,
//! `start_replica`, `sync_replicas`, ...), re-exported here so tests keep `common::*`.

#![allow(dead_code)]

use std::fs;
use std::net::TcpStream;
use std::time::{Duration, Instant};

pub use redis_lock_testkit::*;

/// AOF on, every write on disk before its reply (with the default `everysec` a server
/// may answer before it writes, while a background fsync runs, and a `kill -9` right
/// after loses the write), without an RDB preamble: every grant is a command in the AOF,
/// replayed at the restart.
pub const AOF_ALWAYS: [&str; 6] = [
    "--appendonly",
    "yes",
    "--appendfsync",
    "always",
    "--aof-use-rdb-preamble",
    "no",
];

/// Sends signal `name` (`STOP`, `CONT`) to `server`'s process.
pub fn signal(server: &TestServer, name: &str) {
    let pid = server.pid().expect("a running server").to_string();
    let status = std::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid)
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{name}");
}

/// `LOCK.ACQUIRE key ttl [extra...]`: `Some((token, fence))`, or `None` for nil.
pub fn acquire(
    con: &mut redis::Connection,
    key: &str,
    ttl_ms: u64,
    extra: &[&str],
) -> Option<(Vec<u8>, i64)> {
    redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(ttl_ms)
        .arg(extra)
        .query(con)
        .expect("LOCK.ACQUIRE")
}

/// `LOCK.RELEASE key token`: 1 or 0.
pub fn release(con: &mut redis::Connection, key: &str, token: &[u8]) -> i64 {
    redis::cmd("LOCK.RELEASE")
        .arg(key)
        .arg(token)
        .query(con)
        .expect("LOCK.RELEASE")
}

/// `LOCK.INFO key` as (field, value) pairs of its integer fields, `None` for nil.
pub fn info(con: &mut redis::Connection, key: &str) -> Option<Vec<(String, i64)>> {
    let fields: Option<InfoFields> = redis::cmd("LOCK.INFO")
        .arg(key)
        .query(con)
        .expect("LOCK.INFO");
    fields.map(|fields| fields.0)
}

/// The integer fields of a `LOCK.INFO` reply (all but the word `mode`), in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InfoFields(pub Vec<(String, i64)>);

impl redis::FromRedisValue for InfoFields {
    fn from_redis_value(v: redis::Value) -> Result<Self, redis::ParsingError> {
        let fields: Vec<(String, redis::Value)> = redis::FromRedisValue::from_redis_value(v)?;
        Ok(InfoFields(
            fields
                .into_iter()
                .filter_map(|(name, value)| match value {
                    redis::Value::Int(n) => Some((name, n)),
                    _ => None,
                })
                .collect(),
        ))
    }
}

impl InfoFields {
    /// The field `name`, if the reply has it.
    pub fn get(&self, name: &str) -> Option<i64> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }
}

/// A word field of `LOCK.INFO key` (`mode`).
pub fn info_word(con: &mut redis::Connection, key: &str, field: &str) -> Option<String> {
    let fields: Option<Vec<(String, redis::Value)>> = redis::cmd("LOCK.INFO")
        .arg(key)
        .query(con)
        .expect("LOCK.INFO");
    fields?.into_iter().find_map(|(name, value)| match value {
        redis::Value::BulkString(word) if name == field => String::from_utf8(word).ok(),
        _ => None,
    })
}

/// One field of `LOCK.INFO key`.
pub fn info_field(con: &mut redis::Connection, key: &str, field: &str) -> Option<i64> {
    info(con, key).and_then(|fields| {
        fields
            .into_iter()
            .find(|(name, _)| name == field)
            .map(|(_, value)| value)
    })
}

/// The error text of a command expected to fail.
pub fn error_of(result: redis::RedisResult<redis::Value>) -> String {
    match result {
        Ok(value) => panic!("expected an error, got {value:?}"),
        Err(err) => {
            let code = err.code().unwrap_or("").to_string();
            let detail = err.detail().unwrap_or("").to_string();
            format!("{code} {detail}")
        }
    }
}

/// The wall clock in unix ms (what the fence clock's wall-clock half reads).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

/// The server's clock in unix ms (`TIME`).
pub fn server_now_ms(con: &mut redis::Connection) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(con).expect("TIME");
    secs * 1000 + micros / 1000
}

/// `LOCK.ACQUIRE key ttl TOKEN token` with a binary token: `Some((token, fence))`, or
/// `None` for nil.
pub fn acquire_as(
    con: &mut redis::Connection,
    key: &str,
    ttl_ms: i64,
    token: &[u8],
) -> Option<(Vec<u8>, i64)> {
    redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(ttl_ms)
        .arg("TOKEN")
        .arg(token)
        .query(con)
        .expect("LOCK.ACQUIRE")
}

/// `LOCK.EXTEND key token ttl`: 1 or 0.
pub fn extend(con: &mut redis::Connection, key: &str, token: &[u8], ttl_ms: i64) -> i64 {
    redis::cmd("LOCK.EXTEND")
        .arg(key)
        .arg(token)
        .arg(ttl_ms)
        .query(con)
        .expect("LOCK.EXTEND")
}

/// `PEXPIRETIME key`: the absolute expiry in unix ms, -1 without an expiry, -2 for a
/// missing key.
pub fn pexpiretime(con: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME")
        .arg(key)
        .query(con)
        .expect("PEXPIRETIME")
}

/// `DUMP key`: the serialized value (of a lock: token, fence and grant time), read without
/// touching it; `None` for a missing key.
pub fn dump(con: &mut redis::Connection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("DUMP").arg(key).query(con).expect("DUMP")
}

/// `DBSIZE`: the keys physically present, counted without looking any up (a replica
/// hides logically expired keys from reads, but keeps them until the master's `DEL`
/// arrives).
pub fn dbsize(con: &mut redis::Connection) -> i64 {
    redis::cmd("DBSIZE").query(con).expect("DBSIZE")
}

/// `DEBUG DIGEST-VALUE key`: the digest of the value (of a lock: token, fence and grant
/// time), 40 hex characters.
pub fn digest_value(con: &mut redis::Connection, key: &str) -> String {
    let digests: Vec<String> = redis::cmd("DEBUG")
        .arg("DIGEST-VALUE")
        .arg(key)
        .query(con)
        .expect("DEBUG DIGEST-VALUE");
    assert_eq!(digests.len(), 1, "one digest for one key: {digests:?}");
    digests.into_iter().next().unwrap()
}

/// `CONFIG SET name value`.
pub fn config_set(con: &mut redis::Connection, name: &str, value: &str) {
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(con)
        .expect("CONFIG SET");
}

/// `PING`, which must answer `PONG`.
pub fn ping(con: &mut redis::Connection) {
    let pong: String = redis::cmd("PING").query(con).expect("PING");
    assert_eq!(pong, "PONG");
}

/// `INFO section`, as text.
pub fn server_info(con: &mut redis::Connection, section: &str) -> String {
    redis::cmd("INFO").arg(section).query(con).expect("INFO")
}

/// The integer field `field` (a `field:value` line) of an `INFO` text.
pub fn info_int(info: &str, field: &str) -> i64 {
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {field} in:\n{info}"))
        .trim()
        .parse()
        .expect("integer field")
}

/// A lock's state, without reading its token: the digest covers token, fence and grant
/// time; the expiry is absolute. Equal snapshots on two servers, or before and after a
/// restart, mean the same lock.
#[derive(Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub fence: i64,
    pub acquired: i64,
    pub expire_at: i64,
    pub digest: String,
}

/// The state of the lock `key` (which must exist).
pub fn snapshot(con: &mut redis::Connection, key: &str) -> Snapshot {
    let digest = digest_value(con, key);
    Snapshot {
        fence: info_field(con, key, "fence").unwrap_or_else(|| panic!("{key} is not a lock")),
        acquired: info_field(con, key, "acquired").expect("acquired"),
        expire_at: pexpiretime(con, key),
        digest,
    }
}

/// Whether `needle` occurs in `haystack`.
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Fails if any of `tokens` occurs in `seen`, what `source` (a reply, SLOWLOG, MONITOR,
/// the log) showed.
pub fn assert_no_token_in<T: AsRef<[u8]>>(source: &str, seen: &[u8], tokens: &[T]) {
    for token in tokens {
        assert!(
            !contains(seen, token.as_ref()),
            "{source} shows {}: {}",
            String::from_utf8_lossy(token.as_ref()),
            String::from_utf8_lossy(seen)
        );
    }
}

/// Runs `argv` (the command name first, then its arguments as bytes) and returns its
/// error text, as `error_of` does; fails if the command succeeds.
pub fn error_of_command<A: AsRef<[u8]>>(con: &mut redis::Connection, argv: &[A]) -> String {
    let name = std::str::from_utf8(argv[0].as_ref()).expect("a command name is text");
    let mut cmd = redis::cmd(name);
    for arg in &argv[1..] {
        cmd.arg(arg.as_ref());
    }
    error_of(cmd.query(con))
}

/// One command in RESP, as a client sends it and the AOF stores it.
pub fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// A plain TCP connection to the server on `port` (10 s read timeout), for bytes exactly
/// as they go over the wire.
pub fn raw_connection(port: u16) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("set read timeout");
    stream
}

/// Reads from `stream`, appending to `seen`, until `done(seen)` holds; fails if the
/// server closes the connection first (or the read times out).
pub fn read_until(stream: &mut TcpStream, seen: &mut Vec<u8>, done: impl Fn(&[u8]) -> bool) {
    use std::io::Read;
    let mut buf = [0u8; 4096];
    while !done(seen) {
        let n = stream.read(&mut buf).expect("read from the raw connection");
        assert!(n > 0, "the server closed the raw connection");
        seen.extend_from_slice(&buf[..n]);
    }
}

/// Waits until no AOF rewrite runs or is scheduled (a replica rewrites its AOF after each
/// full sync, and refuses to shut down while writing its first one).
pub fn wait_for_aof_rewrite(con: &mut redis::Connection) {
    poll_until(Duration::from_secs(20), "AOF rewrite done", || {
        let info = server_info(con, "persistence");
        info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0")
    });
}

/// The text of `server`'s AOF files of `kind` (as `aof_files` reads them) once
/// `written` holds of it, read again until then (10 s): a server writes its AOF buffer
/// before it sleeps, or up to 2 s later while a slow disk is still busy with the last
/// fsync, so a test reads until what it waits for is there.
pub fn aof_once(
    server: &TestServer,
    kind: &str,
    what: &str,
    written: impl Fn(&str) -> bool,
) -> String {
    let mut text = String::new();
    poll_until(Duration::from_secs(10), what, || {
        text = String::from_utf8_lossy(&aof_files(server, kind)).into_owned();
        written(&text)
    });
    text
}

/// The concatenated contents of the AOF files of one type (`type b` for the base,
/// `type i` for the incremental files) named in `server`'s manifest; fails if there is
/// none. The manifest is read by field name: Redis 7.4+ adds fields after `type`
/// (`startoffset`, `endoffset`).
pub fn aof_files(server: &TestServer, kind: &str) -> Vec<u8> {
    let dir = server.dir.join("appendonlydir");
    let manifest =
        fs::read_to_string(dir.join("appendonly.aof.manifest")).expect("AOF manifest exists");
    let wanted = kind.strip_prefix("type ").unwrap_or(kind);
    let names: Vec<String> = manifest
        .lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let field = |name: &str| {
                words
                    .chunks(2)
                    .find(|pair| pair[0] == name)
                    .and_then(|pair| pair.get(1).copied())
            };
            (field("type") == Some(wanted)).then(|| field("file").map(str::to_string))?
        })
        .collect();
    assert!(!names.is_empty(), "no {kind} file in manifest:\n{manifest}");
    names
        .into_iter()
        .flat_map(|name| fs::read(dir.join(name)).expect("read AOF file"))
        .collect()
}

/// A server (AOF on, plus `extra` arguments) that holds lock `key` (token `token`, no
/// expiry) with a fence a year ahead of what the wall clock gives, loaded from a
/// hand-written AOF (`LOCK._SET` is accepted while loading). A later fence above it, on
/// this server or another, proves that the fence was carried, not re-derived from the
/// wall clock. Returns the server and that fence.
pub fn server_with_future_fence(key: &str, token: &str, extra: &[&str]) -> (TestServer, i64) {
    let year_ms = 365 * 24 * 3_600_000;
    let fence = (now_ms() + year_ms) << 10;
    let mut server = TestServer::start();
    server.stop();
    let aof = resp(&[
        b"LOCK._SET",
        key.as_bytes(),
        token.as_bytes(),
        fence.to_string().as_bytes(),
        now_ms().to_string().as_bytes(),
        b"-1",
    ]);
    fs::write(server.dir.join("appendonly.aof"), aof).expect("write AOF");
    let mut args = vec!["--appendonly", "yes"];
    args.extend_from_slice(extra);
    server.restart_with(&args);
    let mut con = server.connection();
    assert_eq!(
        info_field(&mut con, key, "fence"),
        Some(fence),
        "the hand-written AOF was not loaded; log:\n{}",
        server.log()
    );
    (server, fence)
}

/// One integer field of `INFO lock` (the `lock_stats` counters and `lock_waiters`).
/// Reading it touches no key, so it cannot expire one as a side effect.
pub fn lock_stat(con: &mut redis::Connection, field: &str) -> i64 {
    info_int(&server_info(con, "lock"), field)
}

/// `INFO lock` field `lock_waiters`: the clients blocked in `LOCK.ACQUIRE ... WAIT` now,
/// on any key of the server.
pub fn lock_waiters(con: &mut redis::Connection) -> i64 {
    lock_stat(con, "lock_waiters")
}

/// How long a `Waiter` reads for its reply before failing: longer than any `WAIT`
/// timeout the tests use, so that the server's own nil for a timed-out wait comes first.
const WAITER_REPLY_LIMIT: Duration = Duration::from_secs(30);

/// A client that sent `LOCK.ACQUIRE ... WAIT` on a connection of its own, which the test
/// holds: the reply waits in the socket until the test reads it, the test can tell
/// whether it has arrived without reading it, and dropping the waiter disconnects it.
pub struct Waiter {
    stream: TcpStream,
    parser: redis::Parser,
    /// The connection's `CLIENT ID`, for `CLIENT KILL ID` and `CLIENT UNBLOCK`.
    pub id: i64,
}

impl Waiter {
    /// Sends `LOCK.ACQUIRE key ttl [extra...]` in database 0 on a new connection and
    /// returns once the server counts one more blocked client.
    pub fn start(server: &TestServer, key: &str, ttl_ms: u64, extra: &[&str]) -> Self {
        Self::start_in(server, 0, key, ttl_ms, extra)
    }

    /// `start`, in database `db`.
    pub fn start_in(server: &TestServer, db: i64, key: &str, ttl_ms: u64, extra: &[&str]) -> Self {
        let mut observer = server.connection();
        let before = lock_waiters(&mut observer);
        let waiter = Self::send_in(server, db, key, ttl_ms, extra);
        poll_until(Duration::from_secs(10), "the waiter to block", || {
            lock_waiters(&mut observer) == before + 1
        });
        waiter
    }

    /// Sends `LOCK.ACQUIRE key ttl [extra...]` in database 0 on a new connection without
    /// waiting for it to block (for many waiters at once: poll `lock_waiters` after).
    pub fn send(server: &TestServer, key: &str, ttl_ms: u64, extra: &[&str]) -> Self {
        Self::send_in(server, 0, key, ttl_ms, extra)
    }

    /// Sends `LOCK.ACQUIREALL numkeys keys... ttl [extra...]` in database 0 on a new
    /// connection and returns once the server counts one more blocked client.
    pub fn start_all(server: &TestServer, keys: &[&str], ttl_ms: u64, extra: &[&str]) -> Self {
        let mut observer = server.connection();
        let before = lock_waiters(&mut observer);
        let waiter = Self::send_all(server, keys, ttl_ms, extra);
        poll_until(Duration::from_secs(10), "the waiter to block", || {
            lock_waiters(&mut observer) == before + 1
        });
        waiter
    }

    /// Sends `command` in database 0 on a new connection without waiting for its reply
    /// (one the server may hold: `... REPLICAS n`).
    pub fn send_command(server: &TestServer, command: &[&str]) -> Self {
        let mut waiter = Self::connect(server, &[], 0);
        let command: Vec<&[u8]> = command.iter().map(|arg| arg.as_bytes()).collect();
        waiter.write(&command);
        waiter
    }

    /// Sends `LOCK.ACQUIREALL numkeys keys... ttl [extra...]` in database 0 on a new
    /// connection without waiting for it to block.
    pub fn send_all(server: &TestServer, keys: &[&str], ttl_ms: u64, extra: &[&str]) -> Self {
        let mut waiter = Self::connect(server, &[], 0);
        let (count, ttl) = (keys.len().to_string(), ttl_ms.to_string());
        let mut command: Vec<&[u8]> = vec![b"LOCK.ACQUIREALL", count.as_bytes()];
        command.extend(keys.iter().map(|key| key.as_bytes()));
        command.push(ttl.as_bytes());
        command.extend(extra.iter().map(|arg| arg.as_bytes()));
        waiter.write(&command);
        waiter
    }

    /// The reply to `LOCK.ACQUIREALL`, which must not be an error: `Some((token,
    /// fences))`, `None` for nil.
    pub fn granted_all(&mut self) -> Option<(Vec<u8>, Vec<i64>)> {
        let reply = self.reply().expect("LOCK.ACQUIREALL ... WAIT");
        redis::from_redis_value(reply).expect("[token, [fence, ...]] or nil")
    }

    /// `start`, after `before` (a command that must answer `OK`, such as `CLIENT CAPA
    /// redirect`) on the same connection.
    pub fn start_after(
        server: &TestServer,
        before: &[&str],
        key: &str,
        ttl_ms: u64,
        extra: &[&str],
    ) -> Self {
        let mut observer = server.connection();
        let waiting = lock_waiters(&mut observer);
        let waiter = Self::send_after(server, before, 0, key, ttl_ms, extra);
        poll_until(Duration::from_secs(10), "the waiter to block", || {
            lock_waiters(&mut observer) == waiting + 1
        });
        waiter
    }

    fn send_in(server: &TestServer, db: i64, key: &str, ttl_ms: u64, extra: &[&str]) -> Self {
        Self::send_after(server, &[], db, key, ttl_ms, extra)
    }

    fn send_after(
        server: &TestServer,
        before: &[&str],
        db: i64,
        key: &str,
        ttl_ms: u64,
        extra: &[&str],
    ) -> Self {
        let mut waiter = Self::connect(server, before, db);
        let ttl = ttl_ms.to_string();
        let mut command: Vec<&[u8]> = vec![b"LOCK.ACQUIRE", key.as_bytes(), ttl.as_bytes()];
        command.extend(extra.iter().map(|arg| arg.as_bytes()));
        waiter.write(&command);
        waiter
    }

    /// A new connection in database `db`, after `before` (a command that must answer
    /// `OK`), its `CLIENT ID` read.
    fn connect(server: &TestServer, before: &[&str], db: i64) -> Self {
        let mut waiter = Self {
            stream: raw_connection(server.port),
            parser: redis::Parser::new(),
            id: 0,
        };
        if !before.is_empty() {
            let command: Vec<&[u8]> = before.iter().map(|arg| arg.as_bytes()).collect();
            let answered = waiter.query(&command);
            assert_eq!(answered.expect("the command before"), redis::Value::Okay);
        }
        if db != 0 {
            let selected = waiter.query(&[b"SELECT", db.to_string().as_bytes()]);
            assert_eq!(selected.expect("SELECT"), redis::Value::Okay);
        }
        let id = waiter.query(&[b"CLIENT", b"ID"]).expect("CLIENT ID");
        waiter.id = redis::from_redis_value(id).expect("an integer id");
        waiter
    }

    /// Sends `LOCK.WATCH key fence timeout-ms` in database `db` on a new connection and
    /// returns once the server counts one more watcher (`INFO lock`, `watchers`).
    pub fn watch_in(server: &TestServer, db: i64, key: &str, fence: i64, timeout_ms: u64) -> Self {
        let mut observer = server.connection();
        let before = lock_stat(&mut observer, "lock_watchers");
        let watcher = Self::send_watch(server, db, key, fence, timeout_ms);
        poll_until(Duration::from_secs(10), "the watcher to block", || {
            lock_stat(&mut observer, "lock_watchers") == before + 1
        });
        watcher
    }

    /// `watch_in` database 0.
    pub fn watch(server: &TestServer, key: &str, fence: i64, timeout_ms: u64) -> Self {
        Self::watch_in(server, 0, key, fence, timeout_ms)
    }

    /// Sends `LOCK.WATCH key fence timeout-ms` in database `db` on a new connection
    /// without waiting for it to block (many at once: poll `watchers` after).
    pub fn send_watch(
        server: &TestServer,
        db: i64,
        key: &str,
        fence: i64,
        timeout_ms: u64,
    ) -> Self {
        let mut watcher = Self::connect(server, &[], db);
        let (fence, timeout) = (fence.to_string(), timeout_ms.to_string());
        watcher.write(&[
            b"LOCK.WATCH",
            key.as_bytes(),
            fence.as_bytes(),
            timeout.as_bytes(),
        ]);
        watcher
    }

    /// The reply to `LOCK.WATCH`, which must not be an error: `Some((fence, value))` (the
    /// value `None` for nil), `None` for nil (timed out).
    pub fn seen(&mut self) -> Option<(i64, Option<Vec<u8>>)> {
        let reply = self.reply().expect("LOCK.WATCH");
        redis::from_redis_value(reply).expect("[fence, value] or nil")
    }

    fn write(&mut self, command: &[&[u8]]) {
        use std::io::Write;
        self.stream
            .write_all(&resp(command))
            .expect("send to the waiter's connection");
    }

    /// Sends `command` on the waiter's connection and reads the reply that comes next.
    fn query(&mut self, command: &[&[u8]]) -> redis::RedisResult<redis::Value> {
        self.write(command);
        self.reply()
    }

    /// Whether no reply has arrived yet (looked at without reading it).
    pub fn is_blocked(&self) -> bool {
        self.stream.set_nonblocking(true).expect("set nonblocking");
        let peeked = self.stream.peek(&mut [0u8; 1]);
        self.stream.set_nonblocking(false).expect("set blocking");
        matches!(peeked, Err(err) if err.kind() == std::io::ErrorKind::WouldBlock)
    }

    /// The reply to the blocked command, an error reply as `Err` (and `Err` if the
    /// connection was closed, or nothing came within 30 s).
    pub fn reply(&mut self) -> redis::RedisResult<redis::Value> {
        self.reply_within(WAITER_REPLY_LIMIT)
    }

    /// The reply, or an error if none comes within `limit`.
    pub fn reply_within(&mut self, limit: Duration) -> redis::RedisResult<redis::Value> {
        self.stream.set_read_timeout(Some(limit))?;
        self.parser
            .parse_value(&mut self.stream)
            .and_then(redis::Value::extract_error)
    }

    /// The reply, which must not be an error (`Some((token, fence))`, `None` for nil),
    /// and when it was read: at once if the test reads it right away, as it waits.
    pub fn outcome(&mut self) -> (Option<(Vec<u8>, i64)>, Instant) {
        let reply = self.reply().expect("LOCK.ACQUIRE ... WAIT");
        let at = Instant::now();
        (
            redis::from_redis_value(reply).expect("[token, fence] or nil"),
            at,
        )
    }

    /// The reply, which must not be an error: `Some((token, fence))`, `None` for nil.
    pub fn granted(&mut self) -> Option<(Vec<u8>, i64)> {
        self.outcome().0
    }

    /// The reply, which must be a grant: its token.
    pub fn granted_token(&mut self) -> Vec<u8> {
        self.granted().expect("the waiter is granted the lock").0
    }

    /// `PING` on the waiter's connection: the text of the reply that comes next.
    pub fn ping(&mut self) -> String {
        let pong = self.query(&[b"PING"]).expect("PING");
        redis::from_redis_value(pong).expect("a text reply")
    }
}

/// `LOCK.ACQUIREALL numkeys keys... ttl [extra...]` on `con`: `Some((token, fences))`,
/// `None` for nil; panics on an error reply.
pub fn acquire_all(
    con: &mut redis::Connection,
    keys: &[&str],
    ttl_ms: i64,
    extra: &[&str],
) -> Option<(Vec<u8>, Vec<i64>)> {
    redis::cmd("LOCK.ACQUIREALL")
        .arg(keys.len())
        .arg(keys)
        .arg(ttl_ms)
        .arg(extra)
        .query(con)
        .expect("LOCK.ACQUIREALL")
}

/// `key` held (`ttl_ms`) by a holder, and a `Waiter` (`LOCK.ACQUIRE key ttl_ms extra...`)
/// queued behind it: the holder's token and fence, and the waiter.
pub fn held_with_a_waiter(
    server: &TestServer,
    con: &mut redis::Connection,
    key: &str,
    ttl_ms: u64,
    extra: &[&str],
) -> (Vec<u8>, i64, Waiter) {
    let (holder, fence) = acquire(con, key, ttl_ms, &[]).expect("granted");
    let waiter = Waiter::start(server, key, ttl_ms, extra);
    (holder, fence, waiter)
}

/// How long a test waits for something the server does on its own (a grace ending).
pub const LIMIT: Duration = Duration::from_secs(10);

/// `LOCK.ACQUIRE key 60000 TOKEN token SESSION grace`, which must be granted: the fence.
pub fn session_lock(con: &mut redis::Connection, key: &str, token: &str, grace_ms: i64) -> i64 {
    let grace = grace_ms.to_string();
    acquire(con, key, 60_000, &["TOKEN", token, "SESSION", &grace])
        .expect("a free lock is granted")
        .1
}

/// The connection's `CLIENT ID`.
pub fn client_id(con: &mut redis::Connection) -> i64 {
    redis::cmd("CLIENT")
        .arg("ID")
        .query(con)
        .expect("CLIENT ID")
}

/// Waits until `key` is gone.
pub fn wait_gone(con: &mut redis::Connection, key: &str, what: &str) {
    poll_until(LIMIT, what, || !exists(con, key));
}

/// The binding fields of `LOCK.INFO key`: `(session, connected)`.
pub fn binding(con: &mut redis::Connection, key: &str) -> (i64, i64) {
    (
        info_field(con, key, "session").expect("LOCK.INFO session"),
        info_field(con, key, "connected").expect("LOCK.INFO connected"),
    )
}

/// CRC-64 as Redis computes it for DUMP payloads ("Jones" polynomial, reflected,
/// initial value 0, no final xor).
pub fn crc64(data: &[u8]) -> u64 {
    const POLY_REFLECTED: u64 = 0x95ac_9329_ac4b_c9b5; // 0xad93d23594c935a9 bit-reversed
    let mut crc = 0u64;
    for &byte in data {
        crc ^= u64::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY_REFLECTED
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// A small deterministic generator (xorshift64*), so that a printed seed replays a run.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number below `n` (0 for `n` of 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}
