//! `replicas` (docs/clients.md, "Failover-safe by default"): a grant counts once a
//! replica of the master has it. A master with one real replica, frozen with `SIGSTOP`
//! where a test needs it, and masters without one.

use std::time::{Duration, Instant};

use crate::common::*;
use redis_lock_client::{
    LockOptions, Locker, Redlock, RedlockOptions, Replicas, aio, is_not_replicated,
};

fn ttl(ms: u64) -> LockOptions {
    LockOptions::new(Duration::from_millis(ms))
}

/// A master with a replica in sync.
fn master_with_replica() -> (TestServer, TestServer) {
    let master = TestServer::start();
    let replica = start_replica(&master, &[]);
    in_sync(&master);
    (master, replica)
}

/// Waits until `master`'s replica acknowledges a write: right after a full sync, Redis
/// 7.0 streams nothing to a replica until its first acknowledgement, up to a second
/// later, and a `WAIT` with a short timeout answers 0 meanwhile. (A `WAIT` on a
/// connection that has written nothing answers at once.)
fn in_sync(master: &TestServer) {
    let mut con = master.connection();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let _: () = redis::cmd("SET")
            .arg("in-sync")
            .arg(1)
            .query(&mut con)
            .unwrap();
        let acked: i64 = redis::cmd("WAIT").arg(1).arg(100).query(&mut con).unwrap();
        if acked == 1 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the replica did not acknowledge a write"
        );
    }
}

/// The waits for replicas the server ran: the package's own `WAIT`s (where the server
/// cannot wait itself, or on a cluster), or the replies it held for its replicas
/// (`REPLICAS n`), each of which asks them with a `WAITAOF` of the module's own.
fn replica_waits(con: &mut redis::Connection) -> u64 {
    command_calls(con, "wait") + command_calls(con, "waitaof")
}

#[test]
fn a_grant_and_its_extends_wait_for_one_replica_in_the_same_round_trip() {
    let (master, _replica) = master_with_replica();
    let mut admin = master.connection();
    let locker = Locker::new(master.client());
    locker
        .acquire("r", &ttl(10_000))
        .unwrap()
        .expect("granted")
        .release()
        .unwrap();
    let (waits, own, roles) = (
        replica_waits(&mut admin),
        command_calls(&mut admin, "wait"),
        command_calls(&mut admin, "role"),
    );
    for _ in 0..3 {
        let lock = locker.acquire("r", &ttl(10_000)).unwrap().expect("granted");
        assert!(lock.extend(Duration::from_secs(10)).unwrap());
        assert!(lock.release().unwrap());
    }
    assert_eq!(replica_waits(&mut admin) - waits, 6);
    if server_kind().can_wait_for_replicas() {
        let sent = command_calls(&mut admin, "wait") - own;
        assert_eq!(sent, 0, "the server waited: no WAIT of the package's");
    }
    assert_eq!(
        command_calls(&mut admin, "role"),
        roles,
        "learned once, not per grant"
    );
}

#[test]
fn a_grant_no_replica_acknowledges_is_released_and_an_error() {
    let (master, replica) = master_with_replica();
    let mut admin = master.connection();
    let locker = Locker::new(master.client());
    let options = ttl(10_000).replicas_timeout(Duration::from_millis(100));
    locker
        .acquire("r", &options)
        .unwrap()
        .expect("granted")
        .release()
        .unwrap();
    {
        let _frozen = freeze(&replica);
        let err = locker.acquire("r", &options).unwrap_err();
        assert!(is_not_replicated(&err), "{err}");
        assert!(err.to_string().contains("0 of 1 replicas"), "{err}");
        assert!(!exists(&mut admin, "r"), "released at once");
        let started = Instant::now();
        let err = locker
            .acquire("r", &options.clone().wait(Duration::from_millis(400)))
            .unwrap_err();
        assert!(is_not_replicated(&err) && started.elapsed() >= Duration::from_millis(350));
        let err = locker.lock_all(&[b"{t}a", b"{t}b"], &options).unwrap_err();
        assert!(is_not_replicated(&err), "{err}");
        assert!(!exists(&mut admin, "{t}a") && !exists(&mut admin, "{t}b"));
    }
    in_sync(&master);
    let lock = locker.acquire("r", &options.clone().wait(Duration::from_secs(5)));
    let lock = lock.unwrap().expect("granted with the replica back");
    {
        let _frozen = freeze(&replica);
        let err = lock.extend(Duration::from_secs(20)).unwrap_err();
        assert!(is_not_replicated(&err), "{err}");
        assert!(
            exists(&mut admin, "r"),
            "an extend not replicated keeps the lock"
        );
    }
    assert!(lock.release().unwrap());
}

#[test]
fn replicas_zero_sends_no_wait_and_more_than_the_master_has_are_refused() {
    let (master, _replica) = master_with_replica();
    let mut admin = master.connection();
    let locker = Locker::new(master.client());
    let waits = replica_waits(&mut admin);
    let off = ttl(10_000).replicas(Replicas::Exactly(0));
    let lock = locker.acquire("r", &off).unwrap().expect("granted");
    assert!(lock.extend(Duration::from_secs(5)).unwrap());
    assert!(lock.release().unwrap());
    assert_eq!(replica_waits(&mut admin), waits);
    let two = ttl(10_000)
        .replicas(Replicas::Exactly(2))
        .replicas_timeout(Duration::from_millis(200));
    let err = locker.acquire("r", &two).unwrap_err();
    // Where the server waits, it holds the grant for two and undoes it with one; where
    // the package counts the replicas itself (Redis 7.0), it refuses before sending.
    let why = if server_kind().can_wait_for_replicas() {
        "only 1 of 2"
    } else {
        "1 replicas online"
    };
    assert!(
        is_not_replicated(&err) && err.to_string().contains(why),
        "{err}"
    );
    assert!(!exists(&mut admin, "r"));
}

#[test]
fn a_master_without_replicas_grants_without_a_wait_and_redlock_asks_each_master() {
    let masters: Vec<TestServer> = (0..3).map(|_| TestServer::start()).collect();
    let mut admin = masters[0].connection();
    let waits = replica_waits(&mut admin);
    let lock = Locker::new(masters[0].client())
        .acquire("r", &ttl(10_000))
        .unwrap();
    assert!(lock.expect("granted").release().unwrap());
    let redlock = Redlock::new(masters.iter().map(TestServer::client).collect());
    let guard = redlock
        .lock("r", &RedlockOptions::new(Duration::from_secs(10)))
        .unwrap();
    assert_eq!(guard.release(), 3);
    assert_eq!(replica_waits(&mut admin), waits);
}

#[test]
fn redlock_counts_a_master_whose_replica_did_not_acknowledge_as_a_vote_against() {
    let (master, replica) = master_with_replica();
    let others: Vec<TestServer> = (0..2).map(|_| TestServer::start()).collect();
    let clients = vec![master.client(), others[0].client(), others[1].client()];
    let redlock = Redlock::new(clients);
    let options = RedlockOptions::new(Duration::from_secs(10)).retry_count(0);
    let _frozen = freeze(&replica);
    let guard = redlock
        .lock("r", &options)
        .expect("a quorum of the other two");
    assert!(
        !exists(&mut master.connection(), "r"),
        "released where not replicated"
    );
    assert_eq!(guard.release(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_locker_waits_releases_and_refuses_the_same_way() {
    let (master, replica) = master_with_replica();
    let mut admin = master.connection();
    let locker = aio::Locker::new(master.client());
    let options = ttl(10_000).replicas_timeout(Duration::from_millis(100));
    let lock = locker
        .acquire("r", &options)
        .await
        .unwrap()
        .expect("granted");
    let waits = replica_waits(&mut admin);
    assert!(lock.extend(Duration::from_secs(10)).await.unwrap());
    assert!(lock.release().await.unwrap());
    assert_eq!(replica_waits(&mut admin) - waits, 1);
    let _frozen = freeze(&replica);
    let err = locker.acquire("r", &options).await.unwrap_err();
    assert!(is_not_replicated(&err), "{err}");
    assert!(!exists(&mut admin, "r"));
    let err = locker
        .acquire("r", &options.clone().wait(Duration::from_millis(300)))
        .await
        .unwrap_err();
    assert!(is_not_replicated(&err), "{err}");
    let err = locker
        .lock_all(&[b"{t}a", b"{t}b"], &options)
        .await
        .unwrap_err();
    assert!(is_not_replicated(&err), "{err}");
    assert!(!exists(&mut admin, "r") && !exists(&mut admin, "{t}a"));
}

#[test]
fn fsync_waits_for_waitaof_where_the_server_has_it_and_is_refused_where_not() {
    let (master, replica) = master_with_replica();
    let mut admin = master.connection();
    let locker = Locker::new(master.client());
    let options = ttl(10_000).fsync(true);
    let has_waitaof = redis::cmd("WAITAOF")
        .arg(0)
        .arg(0)
        .arg(0)
        .query::<redis::Value>(&mut admin)
        .is_ok();
    if !has_waitaof {
        let err = locker.acquire("f", &options).unwrap_err();
        assert!(
            is_not_replicated(&err) && err.to_string().contains("WAITAOF"),
            "{err}"
        );
        assert!(!exists(&mut admin, "f"));
        return;
    }
    // Both fsync every write, so that a grant need not wait for the next second's fsync.
    for server in [&master, &replica] {
        let mut con = server.connection();
        for (name, value) in [("appendonly", "yes"), ("appendfsync", "always")] {
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg(name)
                .arg(value)
                .query(&mut con)
                .unwrap();
        }
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut streak = 0;
    while streak < 3 {
        assert!(Instant::now() < deadline, "both AOFs fsyncing");
        let _: () = redis::cmd("SET")
            .arg("warm")
            .arg(1)
            .query(&mut admin)
            .unwrap();
        let counts: Vec<i64> = redis::cmd("WAITAOF")
            .arg(1)
            .arg(1)
            .arg(100)
            .query(&mut admin)
            .unwrap();
        streak = if counts == [1, 1] { streak + 1 } else { 0 };
    }
    let waits = command_calls(&mut admin, "waitaof");
    let lock = locker
        .acquire("f", &options)
        .unwrap()
        .expect("granted, fsynced");
    // The package's WAITAOF, and the module's own with which the held reply asks the
    // replica to acknowledge.
    assert_eq!(command_calls(&mut admin, "waitaof") - waits, 2);
    assert!(lock.release().unwrap());
    {
        let _frozen = freeze(&replica);
        let err = locker
            .acquire(
                "f",
                &options.clone().replicas_timeout(Duration::from_millis(300)),
            )
            .unwrap_err();
        assert!(is_not_replicated(&err), "{err}");
        assert!(!exists(&mut admin, "f"));
    }
    let alone = options.clone().replicas(Replicas::Exactly(0));
    assert!(
        locker
            .acquire("f", &alone)
            .unwrap()
            .expect("the master's own fsync")
            .release()
            .unwrap()
    );
}

#[test]
fn on_a_cluster_the_grant_waits_on_the_key_s_node_for_that_node_s_replica() {
    let cluster = MiniCluster::start(3);
    let key = "{replicated}:k";
    let port = cluster.port_of(key);
    let replica = cluster.add_replica(port);
    let node = cluster.node(port);
    in_sync(node);
    let urls: Vec<String> = cluster.nodes.iter().map(TestServer::url).collect();
    let client = redis::cluster::ClusterClient::new(urls).expect("cluster client");
    let mut admin = node.connection();
    let others: u64 = cluster
        .nodes
        .iter()
        .filter(|n| n.port != port)
        .map(|n| replica_waits(&mut n.connection()))
        .sum();
    let locker = Locker::cluster(client);
    let options = ttl(10_000).replicas_timeout(Duration::from_millis(200));
    let waits = replica_waits(&mut admin);
    let lock = locker.acquire(key, &options).unwrap().expect("granted");
    assert_eq!(replica_waits(&mut admin) - waits, 1, "on the key's node");
    assert!(lock.release().unwrap());
    let after: u64 = cluster
        .nodes
        .iter()
        .filter(|n| n.port != port)
        .map(|n| replica_waits(&mut n.connection()))
        .sum();
    assert_eq!(after, others, "no wait on the other nodes");
    let _frozen = freeze(&replica);
    let err = locker.acquire(key, &options).unwrap_err();
    assert!(is_not_replicated(&err), "{err}");
    assert!(!exists(&mut admin, key));
}

/// A slot that moves (a resharding): the cluster client follows the `MOVED`, and the
/// package asks the node that took the grant for its replicas at once. The first
/// acquire on a node without a replica is granted (it used to be refused as not
/// replicated, the old node's replica counted), and the first on a node with one waits
/// for it there (it used to be granted without a wait).
#[test]
fn after_a_slot_moved_the_first_grant_waits_as_the_new_node_needs() {
    let cluster = MiniCluster::start(3);
    let key = "{moving}:k";
    let a = cluster.port_of(key);
    let _replica = cluster.add_replica(a);
    let b = cluster
        .nodes
        .iter()
        .map(|n| n.port)
        .find(|p| *p != a)
        .expect("another master");
    let waits = |port: u16| replica_waits(&mut cluster.node(port).connection());
    let urls: Vec<String> = cluster.nodes.iter().map(TestServer::url).collect();
    let options = ttl(10_000);

    // the blocking face: the writes and CLIENT INFO, then the WAIT the node needs
    let locker = Locker::cluster(redis::cluster::ClusterClient::new(urls.clone()).unwrap());
    assert!(
        locker
            .acquire(key, &options)
            .unwrap()
            .expect("on a")
            .release()
            .unwrap()
    );
    cluster.move_slot(key, a, b);
    let before = waits(b);
    let lock = locker
        .acquire(key, &options)
        .expect("granted on b, first try")
        .expect("free");
    assert_eq!(waits(b), before, "no wait on b: it has no replica");
    assert!(lock.release().unwrap());
    cluster.move_slot(key, b, a);
    let before = waits(a);
    let lock = locker
        .acquire(key, &options)
        .unwrap()
        .expect("granted on a");
    assert_eq!(waits(a), before + 1, "the wait for a's replica, on a");
    assert!(lock.release().unwrap());

    // the async face: one round trip, the node named at its end
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let locker = aio::Locker::cluster(redis::cluster::ClusterClient::new(urls).unwrap());
        let lock = locker.acquire(key, &options).await.unwrap().expect("on a");
        assert!(lock.release().await.unwrap());
        cluster.move_slot(key, a, b);
        let lock = locker
            .acquire(key, &options)
            .await
            .expect("granted on b, first try");
        assert!(lock.expect("free").release().await.unwrap());
        cluster.move_slot(key, b, a);
        let before = waits(a);
        let lock = locker
            .acquire(key, &options)
            .await
            .unwrap()
            .expect("granted on a");
        assert_eq!(waits(a), before + 1, "the WAIT for a's replica, on a");
        assert!(lock.release().await.unwrap());
    });
}

/// What every package's `WAIT` after a grant relies on: the grant moves the replication
/// offset of the connection that is told of it, whoever made the write. A grant handed
/// to a blocked waiter by another client's release or by the holder's expiry, and a
/// same-token re-acquire or an extend on a connection of its own, are each followed by
/// a `WAIT 1` that counts only a replica that has them: 0 while the replica is stopped.
/// Every write says `REPLICAS 0`: the server's own wait (its `lock.replicas`, `auto` by
/// default) is what the package's `WAIT` stands in for where the server cannot wait.
#[test]
fn a_wait_after_any_grant_counts_only_a_replica_that_has_it() {
    let (master, replica) = master_with_replica();
    let wait_on = |con: &mut redis::Connection| -> i64 {
        redis::cmd("WAIT").arg(1).arg(200).query(con).unwrap()
    };
    let acquire = |con: &mut redis::Connection, ttl: u64, token: &str, wait: Option<u64>| {
        let mut cmd = redis::cmd("LOCK.ACQUIRE");
        cmd.arg("h")
            .arg(ttl)
            .arg("TOKEN")
            .arg(token)
            .arg("REPLICAS")
            .arg(0);
        if let Some(ms) = wait {
            cmd.arg("WAIT").arg(ms);
        }
        cmd.query::<redis::Value>(con).unwrap()
    };
    for by_expiry in [false, true] {
        let mut holder = master.connection();
        acquire(
            &mut holder,
            if by_expiry { 2_000 } else { 10_000 },
            "a",
            None,
        );
        assert_eq!(wait_on(&mut holder), 1, "the replica has the first grant");
        let url = master.url();
        let waiter = std::thread::spawn(move || {
            let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
            let granted = acquire(&mut con, 10_000, "w", Some(5_000));
            (con, granted)
        });
        wait_for_waiters(&mut master.connection(), 1);
        let frozen = freeze(&replica);
        if !by_expiry {
            let released: i64 = redis::cmd("LOCK.RELEASE")
                .arg("h")
                .arg("a")
                .query(&mut holder)
                .unwrap();
            assert_eq!(released, 1);
        }
        let (mut con, granted) = waiter.join().unwrap();
        assert!(matches!(granted, redis::Value::Array(_)), "{granted:?}");
        assert_eq!(
            wait_on(&mut con),
            0,
            "by_expiry {by_expiry}: the replica is stopped"
        );
        for cmd in [
            redis::cmd("LOCK.ACQUIRE")
                .arg("h")
                .arg(10_000)
                .arg("TOKEN")
                .arg("w")
                .arg("REPLICAS")
                .arg(0)
                .clone(),
            redis::cmd("LOCK.EXTEND")
                .arg("h")
                .arg("w")
                .arg(10_000)
                .arg("REPLICAS")
                .arg(0)
                .clone(),
        ] {
            let mut own = master.connection();
            let _: redis::Value = cmd.query(&mut own).unwrap();
            assert_eq!(wait_on(&mut own), 0, "{cmd:?}: the replica is stopped");
        }
        drop(frozen);
        in_sync(&master);
        let _: i64 = redis::cmd("LOCK.RELEASE")
            .arg("h")
            .arg("w")
            .query(&mut con)
            .unwrap();
    }
}
