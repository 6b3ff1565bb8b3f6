//! Persistence: a lock survives a restart from RDB, from AOF (with and without RDB
//! preamble, before and after a rewrite) and `DEBUG RELOAD` with the same token, fence,
//! grant time and absolute expiry, and the next fence exceeds every fence granted
//! before, including fences of locks released before the restart.

mod common;

use std::fs;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;

/// A binary token: NUL, high bytes, CRLF and a space must survive every format.
const OWN_TOKEN: &[u8] = b"own\x00\xff token\r\n";

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

/// What must survive a restart, without reading the token: the digest covers token,
/// fence and grant time; the expiry is absolute.
#[derive(Debug, PartialEq, Eq)]
struct Snapshot {
    fence: i64,
    acquired: i64,
    expire_at: i64,
    digest: String,
}

fn snapshot(con: &mut redis::Connection, key: &str) -> Snapshot {
    let digest: Vec<String> = redis::cmd("DEBUG")
        .arg("DIGEST-VALUE")
        .arg(key)
        .query(con)
        .unwrap();
    Snapshot {
        fence: info_field(con, key, "fence").unwrap_or_else(|| panic!("{key} is not a lock")),
        acquired: info_field(con, key, "acquired").expect("acquired"),
        expire_at: redis::cmd("PEXPIRETIME").arg(key).query(con).unwrap(),
        digest: digest.into_iter().next().expect("one digest"),
    }
}

/// A held lock, its token and its state before the restart.
struct Held {
    key: &'static str,
    token: Vec<u8>,
    before: Snapshot,
}

/// Locks granted before a restart: the ones still held and the largest fence granted.
struct Granted {
    held: Vec<Held>,
    max_fence: i64,
}

/// Grants a lock with a server-made token, one with an own binary token (then extended,
/// so its expiry comes from a later command), and one released at once.
fn grant_locks(con: &mut redis::Connection) -> Granted {
    let (made, made_fence) = acquire(con, "made", 600_000, &[]).expect("free");
    let (own, own_fence): (Vec<u8>, i64) = redis::cmd("LOCK.ACQUIRE")
        .arg("own")
        .arg(300_000)
        .arg("TOKEN")
        .arg(OWN_TOKEN)
        .query(con)
        .unwrap();
    assert_eq!(own, OWN_TOKEN);
    let extended: i64 = redis::cmd("LOCK.EXTEND")
        .arg("own")
        .arg(OWN_TOKEN)
        .arg(900_000)
        .query(con)
        .unwrap();
    assert_eq!(extended, 1);
    let (gone, gone_fence) = acquire(con, "released", 600_000, &[]).expect("free");
    assert_eq!(release(con, "released", &gone), 1);
    let held = vec![
        Held {
            key: "made",
            before: snapshot(con, "made"),
            token: made,
        },
        Held {
            key: "own",
            before: snapshot(con, "own"),
            token: own,
        },
    ];
    Granted {
        held,
        max_fence: made_fence.max(own_fence).max(gone_fence),
    }
}

/// The locks are still held with the same state, the next fence exceeds every fence
/// granted before, and each lock is released with its own token (last, since that
/// changes the state).
fn assert_locks_survived(con: &mut redis::Connection, granted: &Granted) {
    for lock in &granted.held {
        assert_eq!(
            snapshot(con, lock.key),
            lock.before,
            "lock {} changed",
            lock.key
        );
        assert!(
            redis::cmd("PTTL").arg(lock.key).query::<i64>(con).unwrap() > 0,
            "{} has no time left",
            lock.key
        );
    }
    let (_, next) = acquire(con, "released", 1_000, &[]).expect("free");
    assert!(
        next > granted.max_fence,
        "{next} after {}",
        granted.max_fence
    );
    for lock in &granted.held {
        assert_eq!(
            release(con, lock.key, &lock.token),
            1,
            "{} not held by its token",
            lock.key
        );
    }
}

fn info_persistence(con: &mut redis::Connection) -> String {
    redis::cmd("INFO").arg("persistence").query(con).unwrap()
}

/// Rewrites the AOF and waits until the rewrite is done.
fn rewrite_aof(con: &mut redis::Connection) {
    let _: String = redis::cmd("BGREWRITEAOF").query(con).unwrap();
    poll_until(Duration::from_secs(20), "AOF rewrite done", || {
        let info = info_persistence(con);
        info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0")
    });
    let info = info_persistence(con);
    assert!(info.contains("aof_last_bgrewrite_status:ok"), "{info}");
}

/// The contents of the AOF's current base file (from the manifest).
fn aof_base(server: &TestServer) -> Vec<u8> {
    let dir = server.dir.join("appendonlydir");
    let manifest =
        fs::read_to_string(dir.join("appendonly.aof.manifest")).expect("AOF manifest exists");
    let line = manifest
        .lines()
        .find(|line| line.ends_with("type b"))
        .unwrap_or_else(|| panic!("no base file in manifest:\n{manifest}"));
    let name = line
        .split(' ')
        .nth(1)
        .expect("manifest line: file <name> seq <n> type b");
    fs::read(dir.join(name)).expect("read AOF base")
}

/// One RESP command, as the AOF stores it.
fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// A server (AOF on, plus `extra`) that holds lock `key` (token `token`, no expiry) with
/// a fence a year ahead of what the wall clock gives, loaded from a hand-written AOF.
/// A later fence above it proves that the fence was carried, not re-derived from the
/// wall clock.
fn server_with_future_fence(key: &str, token: &str, extra: &[&str]) -> (TestServer, i64) {
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

fn save(con: &mut redis::Connection) {
    let _: () = redis::cmd("SAVE").query(con).unwrap();
}

#[test]
fn an_rdb_restart_keeps_token_fence_grant_time_and_expiry() {
    let mut server = TestServer::start();
    let granted = grant_locks(&mut server.connection());
    save(&mut server.connection());
    server.restart();
    assert_locks_survived(&mut server.connection(), &granted);
}

#[test]
fn an_rdb_restart_keeps_the_high_water_mark_of_locks_released_before_the_save() {
    let (mut server, future) = server_with_future_fence("future", "holder", &[]);
    let mut con = server.connection();
    assert_eq!(release(&mut con, "future", b"holder"), 1);
    save(&mut con);
    // RDB only: no key holds the fence any more, only the saved high-water mark does.
    server.restart_with(&[]);
    let mut con = server.connection();
    let keys: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(keys, 0);
    let (_, next) = acquire(&mut con, "future", 1_000, &[]).expect("free");
    assert!(next > future, "{next} after {future}");
}

#[test]
fn an_aof_restart_keeps_token_fence_grant_time_and_expiry() {
    let mut server =
        TestServer::with_args(&["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]);
    let granted = grant_locks(&mut server.connection());
    server.restart();
    assert_locks_survived(&mut server.connection(), &granted);
}

#[test]
fn an_aof_restart_after_a_rewrite_keeps_token_fence_grant_time_and_expiry() {
    let mut server =
        TestServer::with_args(&["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]);
    let mut con = server.connection();
    let granted = grant_locks(&mut con);
    rewrite_aof(&mut con);
    let base = aof_base(&server);
    assert!(base.starts_with(b"*"), "base is not a plain AOF");
    assert!(
        base.windows(9).any(|w| w == b"LOCK._SET"),
        "the rewrite emitted no LOCK._SET"
    );
    server.restart();
    assert_locks_survived(&mut server.connection(), &granted);
}

#[test]
fn an_aof_with_rdb_preamble_keeps_token_fence_grant_time_and_expiry() {
    let mut server = TestServer::with_args(&["--appendonly", "yes"]);
    let mut con = server.connection();
    let mut granted = grant_locks(&mut con);
    rewrite_aof(&mut con);
    assert!(
        aof_base(&server).starts_with(b"REDIS"),
        "base is not an RDB"
    );
    // A change after the rewrite lands in the incremental file, after the preamble.
    let extended: i64 = redis::cmd("LOCK.EXTEND")
        .arg("made")
        .arg(&granted.held[0].token)
        .arg(1_200_000)
        .query(&mut con)
        .unwrap();
    assert_eq!(extended, 1);
    granted.held[0].before = snapshot(&mut con, "made");
    server.restart();
    assert_locks_survived(&mut server.connection(), &granted);
}

#[test]
fn an_aof_with_rdb_preamble_keeps_the_high_water_mark_of_released_locks() {
    let (mut server, future) = server_with_future_fence("future", "holder", &[]);
    let mut con = server.connection();
    assert_eq!(release(&mut con, "future", b"holder"), 1);
    // The rewrite drops the LOCK._SET and DEL: only the preamble's high-water mark
    // still knows the fence.
    rewrite_aof(&mut con);
    assert!(
        aof_base(&server).starts_with(b"REDIS"),
        "base is not an RDB"
    );
    server.restart();
    let (_, next) = acquire(&mut server.connection(), "future", 1_000, &[]).expect("free");
    assert!(next > future, "{next} after {future}");
}

#[test]
fn an_aof_replay_raises_the_clock_to_the_fences_it_replays() {
    let (mut server, future) =
        server_with_future_fence("future", "holder", &["--aof-use-rdb-preamble", "no"]);
    let mut con = server.connection();
    assert_eq!(release(&mut con, "future", b"holder"), 1);
    // No rewrite: the replay sets the lock with its fence, then deletes it.
    server.restart();
    let (_, next) = acquire(&mut server.connection(), "future", 1_000, &[]).expect("free");
    assert!(next > future, "{next} after {future}");
}

#[test]
fn a_rewritten_pure_aof_without_locks_still_restarts_with_higher_fences() {
    // No preamble and no lock key left: the AOF carries no fence at all, and the wall
    // clock alone must put the next fence above the old ones.
    let mut server =
        TestServer::with_args(&["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]);
    let mut con = server.connection();
    let (token, before) = acquire(&mut con, "k", 600_000, &[]).expect("free");
    assert_eq!(release(&mut con, "k", &token), 1);
    rewrite_aof(&mut con);
    server.restart();
    let (_, after) = acquire(&mut server.connection(), "k", 1_000, &[]).expect("free");
    assert!(after > before, "{after} after {before}");
}

#[test]
fn an_aof_with_fsync_always_keeps_the_locks_through_a_crash() {
    let mut server = TestServer::with_args(&[
        "--appendonly",
        "yes",
        "--aof-use-rdb-preamble",
        "no",
        "--appendfsync",
        "always",
    ]);
    let granted = grant_locks(&mut server.connection());
    server.kill();
    server.restart();
    assert_locks_survived(&mut server.connection(), &granted);
}

/// Grants a short lock, persists with `persist`, stops the server, waits until the
/// lock's expiry has passed, restarts, and checks that the lock is gone.
fn assert_expired_while_down_is_gone(mut server: TestServer, persist: fn(&mut TestServer)) {
    let mut con = server.connection();
    let (_, before) = acquire(&mut con, "short", 1_500, &[]).expect("free");
    let expire_at: i64 = redis::cmd("PEXPIRETIME")
        .arg("short")
        .query(&mut con)
        .unwrap();
    persist(&mut server);
    server.stop();
    assert!(
        now_ms() < expire_at,
        "the lock expired before the server stopped: the test proves nothing"
    );
    poll_until(Duration::from_secs(5), "the expiry passes", || {
        now_ms() > expire_at + 20
    });
    server.restart();
    let mut con = server.connection();
    assert_eq!(info(&mut con, "short"), None);
    let exists: i64 = redis::cmd("EXISTS").arg("short").query(&mut con).unwrap();
    assert_eq!(exists, 0);
    let (_, after) = acquire(&mut con, "short", 1_000, &[]).expect("free after restart");
    assert!(after > before, "{after} after {before}");
}

#[test]
fn a_lock_that_expired_while_the_server_was_down_is_gone_after_an_rdb_restart() {
    assert_expired_while_down_is_gone(TestServer::start(), |server| save(&mut server.connection()));
}

#[test]
fn a_lock_that_expired_while_the_server_was_down_is_gone_after_an_aof_restart() {
    assert_expired_while_down_is_gone(
        TestServer::with_args(&["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]),
        |_| {},
    );
}

/// Grants a lock, removes its expiry with `PERSIST`, persists with `persist`, restarts,
/// and checks that it is still held, still without expiry.
fn assert_persisted_lock_survives(mut server: TestServer, persist: fn(&mut TestServer)) {
    let mut con = server.connection();
    let (token, _) = acquire(&mut con, "forever", 1_000, &[]).expect("free");
    let persisted: i64 = redis::cmd("PERSIST")
        .arg("forever")
        .query(&mut con)
        .unwrap();
    assert_eq!(persisted, 1);
    let before = snapshot(&mut con, "forever");
    assert_eq!(before.expire_at, -1);
    persist(&mut server);
    server.restart();
    let mut con = server.connection();
    assert_eq!(snapshot(&mut con, "forever"), before);
    assert_eq!(info_field(&mut con, "forever", "ttl"), Some(-1));
    let ttl: i64 = redis::cmd("PTTL").arg("forever").query(&mut con).unwrap();
    assert_eq!(ttl, -1);
    assert_eq!(release(&mut con, "forever", &token), 1);
}

#[test]
fn a_lock_without_expiry_survives_an_rdb_restart_without_expiry() {
    assert_persisted_lock_survives(TestServer::start(), |server| save(&mut server.connection()));
}

#[test]
fn a_lock_without_expiry_survives_an_aof_restart_without_expiry() {
    assert_persisted_lock_survives(
        TestServer::with_args(&["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]),
        |_| {},
    );
}

#[test]
fn a_lock_without_expiry_survives_an_aof_rewrite_and_restart_without_expiry() {
    assert_persisted_lock_survives(
        TestServer::with_args(&["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]),
        |server| rewrite_aof(&mut server.connection()),
    );
}

#[test]
fn debug_reload_keeps_token_fence_grant_time_and_expiry() {
    let server = TestServer::start();
    let mut con = server.connection();
    let granted = grant_locks(&mut con);
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    assert_locks_survived(&mut con, &granted);
}
