//! Replication: a replica ends with the same token, fence, grant time and absolute
//! expiry as its master (equal `DEBUG DIGEST-VALUE` proves it without reading the
//! token), refuses writes, and once promoted grants fences above every fence it has seen.

use std::time::Duration;

use crate::common::*;

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

#[test]
fn a_grant_with_a_server_made_token_reaches_the_replica_with_the_same_state() {
    let master = TestServer::start();
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
    let master = TestServer::start();
    let replica = start_replica(&master, &[]);
    let (mut m, mut r) = (master.connection(), replica.connection());
    let token: &[u8] = b"own\x00\xff token\r\n";
    let (granted, _) = acquire_as(&mut m, "own", 600_000, token).expect("free");
    assert_eq!(granted, token);
    sync_replicas(&mut m, 1);
    assert_same_lock(&mut m, &mut r, "own");
}

#[test]
fn the_replica_state_differs_when_the_token_differs() {
    // Guards the digest comparison itself: two grants with different tokens at the same
    // fence and time would be a different state, and the digest must see the token.
    let master = TestServer::start();
    let replica = start_replica(&master, &[]);
    let (mut m, mut r) = (master.connection(), replica.connection());
    acquire(&mut m, "a", 600_000, &["TOKEN", "one"]).expect("free");
    acquire(&mut m, "b", 600_000, &["TOKEN", "two"]).expect("free");
    sync_replicas(&mut m, 1);
    assert_ne!(snapshot(&mut r, "a").digest, snapshot(&mut r, "b").digest);
}

#[test]
fn a_release_removes_the_lock_on_the_replica() {
    let master = TestServer::start();
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

/// Grants `k` for a minute on a master (with `acquire_args`), lets `renew` renew it for
/// an hour there, and checks that the replica got the master's state: the same lock
/// with an expiry about an hour later. Returns the replica's state before and after.
fn renewal_on_the_replica(
    acquire_args: &[&str],
    renew: impl FnOnce(&mut redis::Connection, &[u8], i64),
) -> (Snapshot, Snapshot) {
    let master = TestServer::start();
    let replica = start_replica(&master, &[]);
    let (mut m, mut r) = (master.connection(), replica.connection());
    let (token, fence) = acquire(&mut m, "k", 60_000, acquire_args).expect("free");
    sync_replicas(&mut m, 1);
    let before = snapshot(&mut r, "k");
    renew(&mut m, &token, fence);
    sync_replicas(&mut m, 1);
    assert_same_lock(&mut m, &mut r, "k");
    let after = snapshot(&mut r, "k");
    assert!(after.expire_at > before.expire_at + 3_000_000, "{after:?}");
    assert_eq!(after.digest, before.digest);
    (before, after)
}

#[test]
fn an_extend_replicates_the_new_absolute_expiry() {
    let (before, after) = renewal_on_the_replica(&[], |m, token, _| {
        assert_eq!(extend(m, "k", token, 3_600_000), 1);
    });
    assert_eq!(after.fence, before.fence);
}

#[test]
fn an_idempotent_reacquire_replicates_the_new_absolute_expiry() {
    let (before, after) = renewal_on_the_replica(&["TOKEN", "mine"], |m, _, fence| {
        let (_, again) = acquire(m, "k", 3_600_000, &["TOKEN", "mine"]).expect("renewed");
        assert_eq!(again, fence);
    });
    assert_eq!(after.acquired, before.acquired);
}

#[test]
fn a_replica_added_later_gets_the_locks_and_the_high_water_mark() {
    let (master, future) = server_with_future_fence("future", "holder", &[]);
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
    let master = TestServer::start();
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
    let (master, future) = server_with_future_fence("future", "holder", &[]);
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
    let master = TestServer::start();
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
    let master = TestServer::start();
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
    let master = TestServer::start();
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
    aof_once(
        &replica,
        "type i",
        "the replicated LOCK._SET in the replica's incremental AOF",
        |aof| aof.contains("LOCK._SET"),
    );

    replica.restart_with(&["--appendonly", "yes"]);
    let mut r = replica.connection();
    let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut r).unwrap();
    assert_eq!(role[0], redis::Value::BulkString(b"master".to_vec()));
    assert_same_lock(&mut m, &mut r, "synced");
    assert_same_lock(&mut m, &mut r, "streamed");
    assert_eq!(release(&mut r, "streamed", &streamed_token), 1);
}

#[test]
fn a_blocking_acquire_is_never_replayed_on_the_replica_only_its_effect() {
    let master = TestServer::start();
    let replica = start_replica(&master, &[]);
    let (mut m, mut r) = (master.connection(), replica.connection());
    let (holder, _) = acquire(&mut m, "job", 600_000, &[]).expect("free");
    let mut waiter = Waiter::start(&master, "job", 600_000, &["WAIT", "0"]);
    assert_eq!(release(&mut m, "job", &holder), 1);
    let (token, fence) = waiter.granted().expect("the waiter is granted the lock");
    sync_replicas(&mut m, 1);

    assert_same_lock(&mut m, &mut r, "job");
    assert_eq!(info_field(&mut r, "job", "fence"), Some(fence));
    let stats = server_info(&mut r, "commandstats");
    assert!(
        !stats.contains("cmdstat_lock.acquire:"),
        "the replica ran LOCK.ACQUIRE itself:\n{stats}"
    );
    assert!(stats.contains("cmdstat_lock._set:calls=2"), "{stats}");
    assert_eq!(release(&mut m, "job", &token), 1);
}
