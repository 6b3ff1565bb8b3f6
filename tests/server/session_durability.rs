//! Session-bound locks beyond one running server (docs/sessions.md): the
//! release at the end of a grace reaches replicas and the AOF as an effect; after
//! `DEBUG RELOAD`, a restart from RDB or AOF, a replica's promotion or a `RESTORE` on
//! another server, the bound connection is gone by definition, the grace starts when the
//! server starts serving the key, and the owner can reclaim the lock with its fence.
//! A `DUMP`/`RESTORE` on the same running server keeps the binding. Data written by the
//! previous encodings (no sessions; no shared holders) still loads.

use std::fs;
use std::time::{Duration, Instant};

use crate::common::*;

/// The grace of the tests' locks: long enough for a loaded machine (four suites and a build
/// at once) to look at a lock after a restart before its grace ends.
const GRACE_MS: i64 = 8_000;

/// Takes `kept` (token `owner`) and `lost` (token `gone`) with `SESSION grace_ms` on
/// `holder`: the fences.
fn two_session_locks(holder: &mut redis::Connection, grace_ms: i64) -> (i64, i64) {
    (
        session_lock(holder, "kept", "owner", grace_ms),
        session_lock(holder, "lost", "gone", grace_ms),
    )
}

/// On a server that has just started serving `kept` and `lost` without their connection:
/// both show the grace running; the owner reclaims `kept` with the same fence, and
/// `lost` is released when the grace ends, not before.
/// `since` is a moment before the server could start serving them.
fn grace_runs_from(
    server: &TestServer,
    grace_ms: i64,
    fences: (i64, i64),
    since: Instant,
    step: &str,
) {
    let mut con = server.connection();
    assert_eq!(binding(&mut con, "kept"), (grace_ms, 0), "{step}: kept");
    assert_eq!(binding(&mut con, "lost"), (grace_ms, 0), "{step}: lost");
    assert_eq!(
        info_field(&mut con, "lost", "fence"),
        Some(fences.1),
        "{step}"
    );
    let mut owner = server.connection();
    let grace = grace_ms.to_string();
    let reclaimed = acquire(
        &mut owner,
        "kept",
        60_000,
        &["TOKEN", "owner", "SESSION", &grace],
    );
    assert_eq!(
        reclaimed,
        Some((b"owner".to_vec(), fences.0)),
        "{step}: reclaim"
    );
    assert_eq!(
        binding(&mut con, "kept"),
        (grace_ms, 1),
        "{step}: bound again"
    );
    wait_gone(
        &mut con,
        "lost",
        "the unclaimed lock to go when its grace ends",
    );
    assert!(
        since.elapsed() >= Duration::from_millis(grace_ms as u64),
        "{step}: released {:?} after the server started serving, grace {grace_ms}",
        since.elapsed()
    );
    assert!(exists(&mut con, "kept"), "{step}: the reclaimed lock stays");
    assert_eq!(lock_stat(&mut con, "lock_session_releases"), 1, "{step}");
    assert_eq!(lock_stat(&mut con, "lock_session_reclaims"), 1, "{step}");
    // A new grant after all this still gets a larger fence.
    let (_, fence) = acquire(&mut con, "lost", 1000, &[]).expect("free");
    assert!(fence > fences.1, "{step}: fences keep growing");
}

#[test]
fn the_release_at_the_end_of_a_grace_reaches_replicas_and_the_aof() {
    let master = TestServer::with_args(&["--appendonly", "yes"]);
    let replica = start_replica(&master, &[]);
    let mut con = master.connection();
    let mut holder = master.connection();
    session_lock(&mut holder, "k", "t", 200);
    // WAIT on the connection that wrote: it waits for that client's own writes.
    sync_replicas(&mut holder, 1);
    let mut on_replica = replica.connection();
    assert_eq!(
        binding(&mut on_replica, "k"),
        (200, 0),
        "a replica watches no connection"
    );
    assert_eq!(
        digest_value(&mut on_replica, "k"),
        digest_value(&mut con, "k"),
        "same token, fence, grant time and grace"
    );
    drop(holder);
    wait_gone(&mut con, "k", "the master to release the lock");
    wait_gone(&mut on_replica, "k", "the replica to follow");
    wait_for_aof_rewrite(&mut con);
    let aof = aof_once(
        &master,
        "i",
        "the release in the AOF as DEL, after the grant",
        |aof| match (aof.find("LOCK._SET"), aof.rfind("DEL")) {
            (Some(set), Some(del)) => del > set,
            _ => false,
        },
    );
    assert!(!aof.contains("SESSION"), "the effect, not the command");
    assert_eq!(lock_stat(&mut on_replica, "lock_session_releases"), 0);
}

#[test]
fn after_debug_reload_the_grace_starts_and_the_owner_reclaims() {
    let server = TestServer::start();
    let mut holder = server.connection();
    let fences = two_session_locks(&mut holder, GRACE_MS);
    let since = Instant::now();
    let _: () = redis::cmd("DEBUG")
        .arg("RELOAD")
        .query(&mut holder)
        .expect("RELOAD");
    grace_runs_from(&server, GRACE_MS, fences, since, "DEBUG RELOAD");
}

#[test]
fn after_a_restart_from_rdb_the_grace_starts_and_the_owner_reclaims() {
    let mut server = TestServer::with_args(&["--save", "3600 1"]);
    let mut holder = server.connection();
    let fences = two_session_locks(&mut holder, GRACE_MS);
    let _: () = redis::cmd("SAVE").query(&mut holder).expect("SAVE");
    server.kill();
    let since = Instant::now();
    server.restart();
    grace_runs_from(&server, GRACE_MS, fences, since, "restart from RDB");
}

#[test]
fn after_a_restart_from_the_aof_the_grace_starts_and_the_owner_reclaims() {
    let mut server = TestServer::with_args(&AOF_ALWAYS);
    let mut holder = server.connection();
    let fences = two_session_locks(&mut holder, GRACE_MS);
    let aof = String::from_utf8_lossy(&aof_files(&server, "i")).into_owned();
    assert!(aof.contains("LOCK._SET"), "the grant is in the AOF");
    server.kill();
    let since = Instant::now();
    server.restart();
    grace_runs_from(&server, GRACE_MS, fences, since, "restart from the AOF");

    // The same after a rewrite, which writes the lock and its grace anew.
    let mut holder = server.connection();
    session_lock(&mut holder, "rewritten", "r", GRACE_MS);
    let _: String = redis::cmd("BGREWRITEAOF")
        .query(&mut holder)
        .expect("rewrite");
    wait_for_aof_rewrite(&mut holder);
    server.kill();
    server.restart();
    let mut con = server.connection();
    assert_eq!(binding(&mut con, "rewritten"), (GRACE_MS, 0));
    wait_gone(
        &mut con,
        "rewritten",
        "the rewritten lock to go after its grace",
    );
}

#[test]
fn after_a_promotion_the_grace_starts_and_the_owner_reclaims() {
    let mut master = TestServer::start();
    let replica = start_replica(&master, &[]);
    let mut holder = master.connection();
    let fences = two_session_locks(&mut holder, GRACE_MS);
    sync_replicas(&mut holder, 1);
    master.kill();
    let since = Instant::now();
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut replica.connection())
        .expect("REPLICAOF NO ONE");
    grace_runs_from(&replica, GRACE_MS, fences, since, "promotion");
}

#[test]
fn dump_and_restore_keep_the_binding_on_the_same_server() {
    let server = TestServer::start();
    let mut con = server.connection();
    let mut holder = server.connection();
    let fence = session_lock(&mut holder, "k", "t", 0);
    let payload = dump(&mut con, "k").expect("DUMP");
    let _: () = redis::cmd("RESTORE")
        .arg("copy")
        .arg(0)
        .arg(&payload)
        .query(&mut con)
        .expect("RESTORE");
    assert_eq!(
        binding(&mut con, "copy"),
        (0, 1),
        "still bound to the holder"
    );
    assert_eq!(info_field(&mut con, "copy", "fence"), Some(fence));
    // Restored over itself: the new value's binding outlives the old value's removal.
    let _: () = redis::cmd("RESTORE")
        .arg("k")
        .arg(0)
        .arg(&payload)
        .arg("REPLACE")
        .query(&mut con)
        .expect("RESTORE REPLACE");
    ping(&mut con);
    assert_eq!(binding(&mut con, "k"), (0, 1));
    drop(holder);
    wait_gone(&mut con, "k", "the lock to go with its connection");
    wait_gone(&mut con, "copy", "the restored copy too");
}

#[test]
fn a_lock_restored_on_another_server_starts_its_grace_there() {
    let source = TestServer::start();
    let target = TestServer::start();
    let mut holder = source.connection();
    let fences = two_session_locks(&mut holder, GRACE_MS);
    let mut con = target.connection();
    let since = Instant::now();
    for key in ["kept", "lost"] {
        let payload = dump(&mut holder, key).expect("DUMP");
        let ttl = pttl(&mut holder, key);
        let _: () = redis::cmd("RESTORE")
            .arg(key)
            .arg(ttl)
            .arg(&payload)
            .query(&mut con)
            .expect("RESTORE");
    }
    grace_runs_from(
        &target,
        GRACE_MS,
        fences,
        since,
        "RESTORE on another server",
    );
}

#[test]
fn locks_written_by_encoding_version_1_still_load() {
    let mut server = TestServer::start();
    server.stop();
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/locks-v1.rdb");
    fs::copy(&fixture, server.dir.join("dump.rdb")).expect("copy the fixture");
    server.restart();
    let mut con = server.connection();
    assert_eq!(
        info_field(&mut con, "fixture:a", "fence"),
        Some(1838521766370304)
    );
    assert_eq!(binding(&mut con, "fixture:a"), (-1, -1), "a plain lock");
    assert_eq!(release(&mut con, "fixture:a", b"token-a"), 1);
    let _: () = redis::cmd("SELECT").arg(3).query(&mut con).unwrap();
    assert_eq!(
        info_field(&mut con, "fixture:b", "fence"),
        Some(1838521766387712)
    );
    // The fencing clock came along: new grants are larger.
    let (_, fence) = acquire(&mut con, "new", 1000, &[]).expect("free");
    assert!(fence > 1838521766387712);
}

#[test]
fn locks_written_by_encoding_version_2_still_load_with_their_sessions() {
    let mut server = TestServer::start();
    server.stop();
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/locks-v2.rdb");
    fs::copy(&fixture, server.dir.join("dump.rdb")).expect("copy the fixture");
    server.restart();
    let mut con = server.connection();
    assert_eq!(
        info_field(&mut con, "fixture:plain", "fence"),
        Some(1838559097263104)
    );
    assert_eq!(binding(&mut con, "fixture:plain"), (-1, -1), "a plain lock");
    assert_eq!(
        info_field(&mut con, "fixture:session", "fence"),
        Some(1838559097270272)
    );
    // Its connection is gone by definition: the grace runs from the start.
    assert_eq!(binding(&mut con, "fixture:session"), (60_000, 0));
    let reclaimed = acquire(
        &mut con,
        "fixture:session",
        60_000,
        &["TOKEN", "token-session"],
    );
    assert_eq!(
        reclaimed,
        Some((b"token-session".to_vec(), 1838559097270272)),
        "the owner reclaims it with its fence"
    );
    assert_eq!(binding(&mut con, "fixture:session"), (-1, -1));
    assert_eq!(release(&mut con, "fixture:plain", b"token-plain"), 1);
    let _: () = redis::cmd("SELECT").arg(2).query(&mut con).unwrap();
    assert_eq!(
        info_field(&mut con, "fixture:db2", "fence"),
        Some(1838559097275392)
    );
    let (_, fence) = acquire(&mut con, "new", 1000, &[]).expect("free");
    assert!(fence > 1838559097275392);
}
