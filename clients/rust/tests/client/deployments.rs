//! The lockers where people run them: the blocking one's connections are reused across
//! locks rather than opened for each; on a Redis Cluster, blocking and async, they route
//! by key, wait on the key's node and release there.

use std::thread;
use std::time::Duration;

use crate::common::*;
use redis_lock_client::{LockOptions, Locker};

/// A client of the master `sentinel` watches.
fn sentinel_client(sentinel: &Sentinel) -> redis::sentinel::SentinelClient {
    redis::sentinel::SentinelClient::build(
        vec![format!("redis://127.0.0.1:{}/", sentinel.port)],
        Sentinel::MASTER_NAME.to_string(),
        None,
        redis::sentinel::SentinelServerType::Master,
    )
    .expect("sentinel client")
}

/// A cluster client that knows every node of `cluster`.
fn cluster_client(cluster: &MiniCluster) -> redis::cluster::ClusterClient {
    let urls: Vec<String> = cluster
        .nodes
        .iter()
        .map(|node| format!("redis://127.0.0.1:{}/", node.port))
        .collect();
    redis::cluster::ClusterClient::new(urls).expect("cluster client")
}

fn connections_received(con: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query(con)
        .expect("INFO stats");
    info.lines()
        .find_map(|line| line.strip_prefix("total_connections_received:"))
        .and_then(|value| value.trim().parse().ok())
        .expect("total_connections_received")
}

#[test]
fn a_locker_reuses_its_connections_from_lock_to_lock() {
    let server = TestServer::start();
    let mut observer = server.connection();
    let locker = Locker::new(server.client());
    let options = LockOptions::new(Duration::from_secs(10));
    let before = connections_received(&mut observer);
    for round in 0..20 {
        let lock = locker
            .acquire(format!("orders:{}", round % 3), &options)
            .unwrap()
            .expect("free");
        assert!(lock.release().unwrap());
    }
    // A busy answer and a dropped guard give their connection back too.
    let held = locker.acquire("busy", &options).unwrap().expect("free");
    assert!(locker.acquire("busy", &options).unwrap().is_none());
    drop(held);
    let opened = connections_received(&mut observer) - before;
    assert!(opened <= 2, "20 locks in a row opened {opened} connections");
    // Two locks held at once still have a connection each.
    let a = locker.acquire("a", &options).unwrap().expect("free");
    let b = locker.acquire("b", &options).unwrap().expect("free");
    assert!(connections_received(&mut observer) - before <= 3);
    assert!(a.release().unwrap() && b.release().unwrap());
}

#[test]
fn a_cluster_locker_routes_waits_on_the_keys_node_and_releases() {
    let cluster = MiniCluster::start(3);
    let client = cluster_client(&cluster);
    let locker = Locker::cluster(client);
    let options = LockOptions::new(Duration::from_secs(30));
    // Keys on different nodes, each served where it lives.
    let keys = ["orders:1", "orders:2", "orders:3", "orders:4"];
    let ports: std::collections::BTreeSet<u16> = keys.iter().map(|k| cluster.port_of(k)).collect();
    assert!(ports.len() > 1, "the keys spread over the nodes");
    for key in keys {
        let lock = locker.acquire(key, &options).unwrap().expect("free");
        let mut node = redis::Client::open(format!("redis://127.0.0.1:{}/", cluster.port_of(key)))
            .unwrap()
            .get_connection()
            .unwrap();
        assert!(exists(&mut node, key), "{key} is on its node");
        assert!(lock.release().unwrap());
    }
    // A waiter on the key's node is granted when the holder lets go.
    let holder = locker.acquire("orders:9", &options).unwrap().expect("free");
    let holder_fence = holder.fence();
    let waiting = {
        let locker = locker.clone();
        thread::spawn(move || {
            let options = LockOptions::new(Duration::from_secs(30)).wait(Duration::from_secs(10));
            locker.acquire("orders:9", &options).unwrap()
        })
    };
    let mut node = redis::Client::open(format!(
        "redis://127.0.0.1:{}/",
        cluster.port_of("orders:9")
    ))
    .unwrap()
    .get_connection()
    .unwrap();
    poll_until(Duration::from_secs(10), "the waiter to queue", || {
        let waiters: Option<Vec<redis::Value>> = redis::cmd("LOCK.INFO")
            .arg("orders:9")
            .query(&mut node)
            .unwrap();
        waiters.is_some_and(|fields| {
            fields
                .chunks(2)
                .any(|pair| matches!((&pair[0], &pair[1]), (redis::Value::BulkString(n), redis::Value::Int(1)) if n == b"waiters"))
        })
    });
    assert!(holder.release().unwrap());
    let lock = waiting.join().unwrap().expect("granted after the wait");
    assert!(lock.fence() > holder_fence);
    assert!(lock.release().unwrap());
}

/// The integer field `field` of `LOCK.INFO key` on `node` (`None` when the key is gone).
fn info_field(node: &mut redis::Connection, key: &str, field: &str) -> Option<i64> {
    let fields: Option<Vec<redis::Value>> = redis::cmd("LOCK.INFO")
        .arg(key)
        .query(node)
        .expect("LOCK.INFO");
    fields?
        .chunks(2)
        .find_map(|pair| match (&pair[0], &pair[1]) {
            (redis::Value::BulkString(name), redis::Value::Int(n)) if name == field.as_bytes() => {
                Some(*n)
            }
            _ => None,
        })
}

/// `LOCK.INFO key`'s `waiters` on `node` (0 when the key is gone).
fn waiters_on(node: &mut redis::Connection, key: &str) -> i64 {
    info_field(node, key, "waiters").unwrap_or(0)
}

#[test]
fn an_async_cluster_locker_routes_waits_on_the_keys_node_and_refuses_sessions() {
    let cluster = MiniCluster::start(3);
    let node_of = |key: &str| {
        redis::Client::open(format!("redis://127.0.0.1:{}/", cluster.port_of(key)))
            .unwrap()
            .get_connection()
            .unwrap()
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = cluster_client(&cluster);
        let locker = redis_lock_client::aio::Locker::cluster(client);
        let options = LockOptions::new(Duration::from_secs(30));
        let keys = ["orders:1", "orders:2", "orders:3", "orders:4"];
        let ports: std::collections::BTreeSet<u16> =
            keys.iter().map(|k| cluster.port_of(k)).collect();
        assert!(ports.len() > 1, "the keys spread over the nodes");
        for key in keys {
            let lock = locker.acquire(key, &options).await.unwrap().expect("free");
            assert!(exists(&mut node_of(key), key), "{key} is on its node");
            assert!(lock.release().await.unwrap());
        }

        // A waiter, on a cluster connection of its own, is granted when the holder lets
        // go, while the shared connection keeps answering.
        let holder = locker
            .acquire("orders:9", &options)
            .await
            .unwrap()
            .expect("free");
        let holder_fence = holder.fence();
        let waiting = {
            let locker = locker.clone();
            tokio::spawn(async move {
                let options =
                    LockOptions::new(Duration::from_secs(30)).wait(Duration::from_secs(10));
                locker.acquire("orders:9", &options).await.unwrap()
            })
        };
        let mut node = node_of("orders:9");
        poll_until(Duration::from_secs(10), "the waiter to queue", || {
            waiters_on(&mut node, "orders:9") == 1
        });
        let other = locker.acquire("orders:10", &options).await.unwrap();
        assert!(
            other
                .expect("the shared connection is not held up")
                .release()
                .await
                .unwrap()
        );
        assert!(holder.release().await.unwrap());
        let lock = waiting.await.unwrap().expect("granted after the wait");
        assert!(lock.fence() > holder_fence);
        assert!(lock.release().await.unwrap());

        // A session-bound lock cannot be kept bound to a cluster connection: refused
        // before anything is sent.
        let session = LockOptions::new(Duration::from_secs(30)).session(Duration::from_secs(1));
        let err = locker
            .acquire("orders:11", &session)
            .await
            .expect_err("a session-bound lock on an async cluster locker");
        assert_eq!(err.kind(), redis::ErrorKind::InvalidClientConfig, "{err}");
        assert!(!exists(&mut node_of("orders:11"), "orders:11"));
    });
}

#[test]
fn a_sentinel_locker_locks_on_the_master_the_sentinel_names() {
    let master = TestServer::start();
    let sentinel = Sentinel::watch(&master);
    let client = sentinel_client(&sentinel);
    let locker = Locker::sentinel(client);
    let options = LockOptions::new(Duration::from_secs(30));
    let holder = locker.acquire("orders:1", &options).unwrap().expect("free");
    assert!(
        exists(&mut master.connection(), "orders:1"),
        "on the master"
    );
    let waiting = {
        let locker = locker.clone();
        thread::spawn(move || {
            let options = LockOptions::new(Duration::from_secs(30)).wait(Duration::from_secs(10));
            locker.acquire("orders:1", &options).unwrap()
        })
    };
    let mut con = master.connection();
    poll_until(Duration::from_secs(10), "the waiter to queue", || {
        let info: String = redis::cmd("INFO").arg("lock").query(&mut con).unwrap();
        info.contains("lock_waiters:1")
    });
    assert!(holder.release().unwrap());
    let lock = waiting.join().unwrap().expect("granted after the wait");
    assert!(lock.release().unwrap());
}

#[test]
fn an_async_sentinel_locker_locks_and_waits_on_the_master_the_sentinel_names() {
    let master = TestServer::start();
    let sentinel = Sentinel::watch(&master);
    let client = sentinel_client(&sentinel);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let locker = redis_lock_client::aio::Locker::sentinel(client);
        let options = LockOptions::new(Duration::from_secs(30)).session(Duration::from_secs(5));
        let holder = locker
            .acquire("orders:1", &options)
            .await
            .unwrap()
            .expect("free");
        let mut con = master.connection();
        assert_eq!(
            (
                info_field(&mut con, "orders:1", "session"),
                info_field(&mut con, "orders:1", "connected")
            ),
            (Some(5000), Some(1)),
            "on the master, bound to the locker's connection"
        );
        let waiting = {
            let locker = locker.clone();
            tokio::spawn(async move {
                let options =
                    LockOptions::new(Duration::from_secs(30)).wait(Duration::from_secs(10));
                locker.acquire("orders:1", &options).await.unwrap()
            })
        };
        poll_until(Duration::from_secs(10), "the waiter to queue", || {
            let info: String = redis::cmd("INFO").arg("lock").query(&mut con).unwrap();
            info.contains("lock_waiters:1")
        });
        let holder_fence = holder.fence();
        assert!(holder.release().await.unwrap());
        let lock = waiting.await.unwrap().expect("granted after the wait");
        assert!(lock.fence() > holder_fence);
        assert!(lock.release().await.unwrap());
    });
}

#[test]
fn a_pooled_locker_borrows_from_the_programs_r2d2_pool_and_gives_back() {
    let server = TestServer::start();
    let mut observer = server.connection();
    let pool = r2d2::Pool::builder()
        .max_size(2)
        .build(server.client())
        .expect("an r2d2 pool");
    let before = connections_received(&mut observer);
    let locker = Locker::pooled(pool.clone());
    let options = LockOptions::new(Duration::from_secs(10));
    for round in 0..20 {
        let lock = locker
            .acquire(format!("jobs:{round}"), &options)
            .unwrap()
            .expect("free");
        assert!(lock.release().unwrap());
    }
    // Two held at once take both of the pool's connections; released, they go back.
    let a = locker.acquire("a", &options).unwrap().expect("free");
    let b = locker.acquire("b", &options).unwrap().expect("free");
    assert_eq!(pool.state().idle_connections, 0, "both lent out");
    drop(a);
    drop(b);
    assert_eq!(pool.state().idle_connections, 2, "both given back");
    assert!(
        connections_received(&mut observer) - before <= 2,
        "only the pool's two connections were ever opened"
    );
}
