//! A replica with `repl-diskless-load swapdb` loads a full sync beside its old data and
//! keeps answering reads from the old data until the new is whole
//! (docs/cluster-and-durability.md, "Replicas that load in the background"). The module
//! declares that it handles this, so loading it does not turn it off: on every server,
//! the replica answers `LOCK.INFO` from its old locks while it loads, ends with exactly the
//! master's locks, and keeps its old locks whole when the load is aborted.
//!
//! The server loads in the background only when it resyncs from the same master history
//! it already holds: the test stops the replica (`SIGSTOP`) while the master writes more
//! than its backlog keeps and its output-buffer limit allows, so that the master drops
//! the replica and the replica, let go again, must take a full sync.

use std::time::Duration;

use crate::common::{
    Snapshot, TestServer, config_set, dbsize, info_int, poll_until, server_info, signal, snapshot,
    start_replica, sync_replicas,
};

/// Filler keys of 8 KB, which the master's sync writes one `rdb-key-save-delay` (1 ms)
/// apart: the sync streams to the replica for about a second (each key fills the
/// writer's buffer, so the stream does not wait for its end), and a master that goes
/// away meanwhile cuts the load short.
const FILLER: usize = 1000;

/// The locks on the master, all of which the replica holds before the resync.
const KEPT: [&str; 4] = ["kept", "readers", "permits", "bound"];

/// A master with locks of every kind (and a connection holding a session-bound one, kept
/// open by the caller), and its swapdb replica, in sync.
fn master_and_swapdb_replica() -> (TestServer, TestServer, redis::Connection) {
    let master = TestServer::with_args(&[
        "--repl-diskless-sync",
        "yes",
        "--repl-diskless-sync-delay",
        "0",
    ]);
    let mut con = master.connection();
    let mut holder = master.connection();
    crate::common::acquire(&mut con, "gone", 60_000, &["TOKEN", "soon-released"]).expect("free");
    crate::common::acquire(&mut con, "kept", 60_000, &["TOKEN", "keeper"]).expect("free");
    crate::common::acquire(&mut con, "readers", 60_000, &["SHARED", "TOKEN", "r1"]).expect("free");
    crate::common::acquire(&mut con, "readers", 60_000, &["SHARED", "TOKEN", "r2"]).expect("free");
    crate::common::acquire(&mut con, "permits", 60_000, &["LIMIT", "2", "TOKEN", "p1"])
        .expect("free");
    crate::common::acquire(
        &mut holder,
        "bound",
        60_000,
        &["TOKEN", "b", "SESSION", "5000"],
    )
    .expect("free");
    let filler = vec![b'x'; 8192];
    let mut pipe = redis::pipe();
    for i in 0..FILLER {
        pipe.cmd("SET")
            .arg(format!("filler:{i}"))
            .arg(&filler)
            .ignore();
    }
    let _: () = pipe.query(&mut con).expect("fill");
    let replica = start_replica(&master, &["--repl-diskless-load", "swapdb"]);
    sync_replicas(&mut con, 1);
    (master, replica, holder)
}

/// Changes the master's locks while the replica is stopped, then lets the replica go:
/// it must take a full sync, which the master sends slowly and the replica loads beside
/// its old data, serving reads in between.
fn resync_with_changes(master: &TestServer, replica: &TestServer) {
    let mut rep = replica.connection();
    config_set(&mut rep, "loading-process-events-interval-bytes", "1024");
    let mut con = master.connection();
    config_set(&mut con, "rdb-key-save-delay", "1000");
    config_set(&mut con, "repl-backlog-size", "16384");
    config_set(
        &mut con,
        "client-output-buffer-limit",
        "replica 16384 16384 0",
    );

    // Stopped, the replica reads nothing: the master's writes overflow its backlog and
    // the replica's output buffer, and it drops the replica. Only then do the locks
    // change, so that nothing but the full sync can bring the changes.
    signal(replica, "STOP");
    let big = vec![b'y'; 4096];
    let mut pipe = redis::pipe();
    for i in 0..64 {
        pipe.cmd("SET").arg(format!("big:{i}")).arg(&big).ignore();
    }
    let _: () = pipe.query(&mut con).expect("overflow the backlog");
    poll_until(
        Duration::from_secs(10),
        "the master to drop its replica",
        || info_int(&server_info(&mut con, "replication"), "connected_slaves") == 0,
    );
    assert_eq!(
        crate::common::release(&mut con, "gone", b"soon-released"),
        1
    );
    crate::common::acquire(&mut con, "new", 60_000, &["TOKEN", "newcomer"]).expect("free");
    crate::common::acquire(&mut con, "permits", 60_000, &["LIMIT", "2", "TOKEN", "p2"])
        .expect("free");
    signal(replica, "CONT");
}

/// One atomic look at the replica: whether it loads in the background now, and whether
/// it holds `gone` (only in the old data) and `new` (only in the master's new data).
fn look(rep: &mut redis::Connection) -> (bool, bool, bool) {
    let (persistence, gone, new): (String, Option<redis::Value>, Option<redis::Value>) =
        redis::pipe()
            .atomic()
            .cmd("INFO")
            .arg("persistence")
            .cmd("LOCK.INFO")
            .arg("gone")
            .cmd("LOCK.INFO")
            .arg("new")
            .query(rep)
            .expect("a read while the replica loads");
    (
        info_int(&persistence, "async_loading") == 1,
        gone.is_some(),
        new.is_some(),
    )
}

fn snapshots(con: &mut redis::Connection, keys: &[&str]) -> Vec<Snapshot> {
    keys.iter().map(|key| snapshot(con, key)).collect()
}

#[test]
fn a_swapdb_replica_answers_from_its_old_locks_while_loading_and_ends_with_the_masters() {
    let (master, replica, _holder) = master_and_swapdb_replica();
    let mut rep = replica.connection();
    let mut con = master.connection();
    resync_with_changes(&master, &replica);

    // Reads all through the load: the old locks until the new data is whole, then the
    // master's, never a mix and never back.
    let (mut while_loading, mut switched) = (0, false);
    poll_until(
        Duration::from_secs(30),
        "the replica to load the resync",
        || {
            let (loading, gone, new) = look(&mut rep);
            assert!(
                gone != new,
                "one data set at a time: gone {gone}, new {new}"
            );
            if loading {
                assert!(
                    gone && !switched,
                    "while loading, the replica answers from its old locks"
                );
                while_loading += 1;
            }
            switched |= new;
            switched && !loading
        },
    );
    assert!(
        while_loading > 0,
        "the replica loaded in the background (the module must not turn swapdb off)"
    );
    assert!(
        !replica.log().contains("not aware of async"),
        "the server kept async loading on"
    );
    sync_replicas(&mut con, 1);
    let mut keys = KEPT.to_vec();
    keys.push("new");
    assert_eq!(
        snapshots(&mut rep, &keys),
        snapshots(&mut con, &keys),
        "the replica ends with exactly the master's locks"
    );
    assert_eq!(
        crate::common::info(&mut rep, "gone"),
        None,
        "the released lock is gone"
    );
    assert_eq!(dbsize(&mut rep), dbsize(&mut con));
    assert_eq!(
        crate::common::info_field(&mut rep, "permits", "holders"),
        Some(2),
        "the semaphore's new holder arrived"
    );
}

#[test]
fn an_aborted_background_load_leaves_the_replicas_locks_as_they_were() {
    let (mut master, replica, _holder) = master_and_swapdb_replica();
    let mut rep = replica.connection();
    let mut keys = KEPT.to_vec();
    keys.push("gone");
    let before = snapshots(&mut rep, &keys);
    resync_with_changes(&master, &replica);

    poll_until(
        Duration::from_secs(30),
        "the replica to load in the background",
        || look(&mut rep).0,
    );
    // The master goes away mid-sync: the replica drops what it loaded and keeps its old
    // data, as if the resync had never started.
    master.kill();
    poll_until(
        Duration::from_secs(30),
        "the replica to abort the load",
        || !look(&mut rep).0,
    );
    // The replica would keep trying the dead master's port, where a server of a test
    // running beside this one may start and sync it: it stops replicating first.
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut rep)
        .expect("REPLICAOF NO ONE");
    assert_eq!(
        snapshots(&mut rep, &keys),
        before,
        "the old locks are whole"
    );
    assert_eq!(
        crate::common::info(&mut rep, "new"),
        None,
        "nothing of the load is left"
    );
    assert_eq!(
        crate::common::info_field(&mut rep, "permits", "holders"),
        Some(1),
        "the semaphore is as it was"
    );
}
