//! Replication: a replica ends with the same token, fence, grant time and absolute
//! expiry as its master (equal `DEBUG DIGEST-VALUE` proves it without reading the
//! token), refuses writes, and once promoted grants fences above every fence it has seen.

mod common;

use std::fs;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

/// A lock's state, without the token: the digest covers token, fence and grant time;
/// the expiry is absolute.
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
        expire_at: pexpiretime(con, key),
        digest: digest.into_iter().next().expect("one digest"),
    }
}

fn pexpiretime(con: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME").arg(key).query(con).unwrap()
}

/// Keys physically present (a replica hides logically expired keys from reads, but
/// keeps them until the master's `DEL` arrives).
fn dbsize(con: &mut redis::Connection) -> i64 {
    redis::cmd("DBSIZE").query(con).unwrap()
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

/// A master (AOF on) that holds lock `key` (token `token`, no expiry) with a fence a
/// year ahead of what the wall clock gives, loaded from a hand-written AOF. A fence above
/// it on another server proves that the fence was carried there, not re-derived from the
/// wall clock.
fn master_with_future_fence(key: &str, token: &str) -> (TestServer, i64) {
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
    server.restart_with(&["--appendonly", "yes", MASTER_ARGS[0], MASTER_ARGS[1]]);
    let mut con = server.connection();
    assert_eq!(
        info_field(&mut con, key, "fence"),
        Some(fence),
        "the hand-written AOF was not loaded; log:\n{}",
        server.log()
    );
    (server, fence)
}

/// Full syncs start at once (the default waits 5 s for more replicas to join).
const MASTER_ARGS: [&str; 2] = ["--repl-diskless-sync-delay", "0"];

fn master() -> TestServer {
    TestServer::with_args(&MASTER_ARGS)
}

fn promote(replica: &TestServer) {
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut replica.connection())
        .unwrap();
}

fn assert_same_lock(master: &mut redis::Connection, replica: &mut redis::Connection, key: &str) {
    let on_master = snapshot(master, key);
    assert_eq!(snapshot(replica, key), on_master, "{key} differs");
    assert!(on_master.expire_at > 0 || on_master.expire_at == -1);
}

/// Waits until no AOF rewrite runs or is scheduled (a replica rewrites its AOF after
/// each full sync, and refuses to shut down while writing its first one).
fn wait_for_aof_rewrite(con: &mut redis::Connection) {
    poll_until(Duration::from_secs(20), "AOF rewrite done", || {
        let info: String = redis::cmd("INFO").arg("persistence").query(con).unwrap();
        info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0")
    });
}

/// The concatenated contents of the AOF files of one type (`type b` or `type i`) named
/// in `server`'s manifest.
fn aof_files(server: &TestServer, kind: &str) -> Vec<u8> {
    let dir = server.dir.join("appendonlydir");
    let manifest =
        fs::read_to_string(dir.join("appendonly.aof.manifest")).expect("AOF manifest exists");
    manifest
        .lines()
        .filter(|line| line.ends_with(kind))
        .flat_map(|line| {
            let name = line
                .split(' ')
                .nth(1)
                .expect("manifest line: file <name> ...");
            fs::read(dir.join(name)).expect("read AOF file")
        })
        .collect()
}

#[test]
fn a_grant_with_a_server_made_token_reaches_the_replica_with_the_same_state() {
    let master = master();
    let replica = start_replica(&master, &[]);
    let (mut m, mut r) = (master.connection(), replica.connection());
    let (token, fence) = acquire(&mut m, "made", 600_000, &[]).expect("free");
    assert_eq!(token.len(), 32);
    sync_replicas(&mut m, 1);
    assert_same_lock(&mut m, &mut r, "made");
    assert_eq!(info_field(&mut r, "made", "fence"), Some(fence));
}

#[test]
fn a_grant_with_an_own_token_reaches_the_replica_with_the_same_state() {
    let master = master();
    let replica = start_replica(&master, &[]);
    let (mut m, mut r) = (master.connection(), replica.connection());
    let token: &[u8] = b"own\x00\xff token\r\n";
    let (granted, _): (Vec<u8>, i64) = redis::cmd("LOCK.ACQUIRE")
        .arg("own")
        .arg(600_000)
        .arg("TOKEN")
        .arg(token)
        .query(&mut m)
        .unwrap();
    assert_eq!(granted, token);
    sync_replicas(&mut m, 1);
    assert_same_lock(&mut m, &mut r, "own");
}

#[test]
fn the_replica_state_differs_when_the_token_differs() {
    // Guards the digest comparison itself: two grants with different tokens at the same
    // fence and time would be a different state, and the digest must see the token.
    let master = master();
    let replica = start_replica(&master, &[]);
    let (mut m, mut r) = (master.connection(), replica.connection());
    acquire(&mut m, "a", 600_000, &["TOKEN", "one"]).expect("free");
    acquire(&mut m, "b", 600_000, &["TOKEN", "two"]).expect("free");
    sync_replicas(&mut m, 1);
    assert_ne!(snapshot(&mut r, "a").digest, snapshot(&mut r, "b").digest);
}

#[test]
fn a_release_removes_the_lock_on_the_replica() {
    let master = master();
    let replica = start_replica(&master, &[]);
    let (mut m, mut r) = (master.connection(), replica.connection());
    let (token, _) = acquire(&mut m, "k", 600_000, &[]).expect("free");
    sync_replicas(&mut m, 1);
    assert!(info(&mut r, "k").is_some());
    assert_eq!(release(&mut m, "k", &token), 1);
    sync_replicas(&mut m, 1);
    assert_eq!(info(&mut r, "k"), None);
    assert_eq!(dbsize(&mut r), 0);
}

#[test]
fn an_extend_replicates_the_new_absolute_expiry() {
    let master = master();
    let replica = start_replica(&master, &[]);
    let (mut m, mut r) = (master.connection(), replica.connection());
    let (token, _) = acquire(&mut m, "k", 60_000, &[]).expect("free");
    sync_replicas(&mut m, 1);
    let before = snapshot(&mut r, "k");
    let extended: i64 = redis::cmd("LOCK.EXTEND")
        .arg("k")
        .arg(&token)
        .arg(3_600_000)
        .query(&mut m)
        .unwrap();
    assert_eq!(extended, 1);
    sync_replicas(&mut m, 1);
    assert_same_lock(&mut m, &mut r, "k");
    let after = snapshot(&mut r, "k");
    assert!(after.expire_at > before.expire_at + 3_000_000, "{after:?}");
    assert_eq!(after.fence, before.fence);
    assert_eq!(after.digest, before.digest);
}

#[test]
fn an_idempotent_reacquire_replicates_the_new_absolute_expiry() {
    let master = master();
    let replica = start_replica(&master, &[]);
    let (mut m, mut r) = (master.connection(), replica.connection());
    let (_, fence) = acquire(&mut m, "k", 60_000, &["TOKEN", "mine"]).expect("free");
    sync_replicas(&mut m, 1);
    let before = snapshot(&mut r, "k");
    let (_, again) = acquire(&mut m, "k", 3_600_000, &["TOKEN", "mine"]).expect("renewed");
    assert_eq!(again, fence);
    sync_replicas(&mut m, 1);
    assert_same_lock(&mut m, &mut r, "k");
    let after = snapshot(&mut r, "k");
    assert!(after.expire_at > before.expire_at + 3_000_000, "{after:?}");
    assert_eq!(after.acquired, before.acquired);
    assert_eq!(after.digest, before.digest);
}

#[test]
fn a_replica_added_later_gets_the_locks_and_the_high_water_mark() {
    let (master, future) = master_with_future_fence("future", "holder");
    let mut m = master.connection();
    assert_eq!(release(&mut m, "future", b"holder"), 1);
    acquire(&mut m, "made", 600_000, &[]).expect("free");
    acquire(&mut m, "own", 600_000, &["TOKEN", "mine"]).expect("free");

    let replica = start_replica(&master, &[]);
    let mut r = replica.connection();
    sync_replicas(&mut m, 1);
    assert_same_lock(&mut m, &mut r, "made");
    assert_same_lock(&mut m, &mut r, "own");
    assert_eq!(info(&mut r, "future"), None);

    // Only the full sync's high-water mark still knows the released fence.
    promote(&replica);
    let (_, next) = acquire(&mut r, "future", 1_000, &[]).expect("free");
    assert!(next > future, "{next} after {future}");
}

#[test]
fn the_replica_refuses_acquire_release_and_extend_as_readonly() {
    let master = master();
    let replica = start_replica(&master, &[]);
    let mut m = master.connection();
    let (token, _) = acquire(&mut m, "k", 600_000, &[]).expect("free");
    sync_replicas(&mut m, 1);
    let mut r = replica.connection();
    let attempts = [
        redis::cmd("LOCK.ACQUIRE")
            .arg("other")
            .arg(1000)
            .query(&mut r),
        redis::cmd("LOCK.RELEASE")
            .arg("k")
            .arg(&token)
            .query(&mut r),
        redis::cmd("LOCK.EXTEND")
            .arg("k")
            .arg(&token)
            .arg(1000)
            .query(&mut r),
    ];
    for attempt in attempts {
        let err = error_of(attempt);
        assert!(err.starts_with("READONLY"), "{err}");
    }
    assert!(info(&mut r, "k").is_some(), "LOCK.INFO works on a replica");
    assert_same_lock(&mut m, &mut r, "k");
    assert_eq!(info(&mut r, "other"), None);
}

#[test]
fn a_promoted_replica_grants_fences_above_every_fence_it_has_seen() {
    let (master, future) = master_with_future_fence("future", "holder");
    let replica = start_replica(&master, &[]);
    let mut m = master.connection();
    // After the full sync, grants above the loaded fence reach the replica only as
    // replicated LOCK._SET commands, and are released again before the promotion.
    assert_eq!(release(&mut m, "future", b"holder"), 1);
    let mut streamed = 0;
    for key in ["a", "b", "a"] {
        let (token, fence) = acquire(&mut m, key, 600_000, &[]).expect("free");
        assert!(fence > future);
        streamed = streamed.max(fence);
        assert_eq!(release(&mut m, key, &token), 1);
    }
    sync_replicas(&mut m, 1);
    let mut r = replica.connection();
    assert_eq!(dbsize(&mut r), 0);

    promote(&replica);
    let (_, next) = acquire(&mut r, "c", 1_000, &[]).expect("free");
    assert!(next > streamed, "{next} after {streamed}");
}

#[test]
fn a_promoted_replica_grants_fences_above_the_locks_it_holds() {
    let master = master();
    let replica = start_replica(&master, &[]);
    let mut m = master.connection();
    let (token, fence) = acquire(&mut m, "k", 600_000, &[]).expect("free");
    sync_replicas(&mut m, 1);
    promote(&replica);
    let mut r = replica.connection();
    assert_eq!(release(&mut r, "k", &token), 1, "the token carries over");
    let (_, next) = acquire(&mut r, "k", 1_000, &[]).expect("free");
    assert!(next > fence, "{next} after {fence}");
}

#[test]
fn expiry_on_the_master_removes_the_lock_on_the_replica() {
    let master = master();
    let replica = start_replica(&master, &[]);
    let mut m = master.connection();
    acquire(&mut m, "short", 100, &[]).expect("free");
    sync_replicas(&mut m, 1);
    let mut r = replica.connection();
    // The master's own expiry cycle deletes the key and replicates the DEL.
    poll_until(
        Duration::from_secs(10),
        "the replica drops the lock",
        || dbsize(&mut r) == 0,
    );
    assert_eq!(info(&mut r, "short"), None);
}

#[test]
fn a_replica_with_aof_restarted_standalone_keeps_the_locks() {
    let master = master();
    let mut m = master.connection();
    // One lock reaches the replica by the full sync (its AOF base), the other by the
    // stream after the replica's AOF rewrite (its incremental AOF file).
    acquire(&mut m, "synced", 600_000, &[]).expect("free");
    let mut replica = start_replica(&master, &["--appendonly", "yes"]);
    let mut r = replica.connection();
    wait_for_aof_rewrite(&mut r);
    let (streamed_token, _) = acquire(&mut m, "streamed", 600_000, &[]).expect("free");
    sync_replicas(&mut m, 1);
    drop(r);
    let incremental = aof_files(&replica, "type i");
    assert!(
        incremental.windows(9).any(|w| w == b"LOCK._SET"),
        "the replica's AOF did not get the replicated LOCK._SET"
    );

    replica.restart_with(&["--appendonly", "yes"]);
    let mut r = replica.connection();
    let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut r).unwrap();
    assert_eq!(role[0], redis::Value::BulkString(b"master".to_vec()));
    assert_same_lock(&mut m, &mut r, "synced");
    assert_same_lock(&mut m, &mut r, "streamed");
    assert_eq!(release(&mut r, "streamed", &streamed_token), 1);
}
