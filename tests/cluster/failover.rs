//! Failover with locks held and clients waiting: on a real Redis Cluster (3 masters,
//! 3 replicas, the module on every node) by `CLUSTER FAILOVER TAKEOVER` and by `kill -9` of a
//! master, and on a standalone master and replica promoted by hand with
//! `REPLICAOF NO ONE`, as Sentinel does.
//!
//! Every lock is acknowledged by the replica (`LOCK.ACQUIRE`, then `WAIT 1 timeout`)
//! before its master goes away; the new master must hold it for the same token with the
//! same fence, `acquired` time and deadline, grant higher fences from then on, and keep
//! its waits, counters and keyspace notifications working.

use std::collections::HashMap;
use std::time::Duration;

use crate::cluster_common::{Answer, Cluster, NodeInfo, Waiter, wait_for_waiters};
use crate::common::{TestServer, info_field, poll_until};

/// How long a waiter on a master that goes away may go unanswered.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(15);

/// A lock granted on the old master and acknowledged by its replica.
struct Held {
    key: String,
    token: String,
    /// Every fence granted for the key on the old master, the holder's last.
    fences: Vec<i64>,
    acquired: i64,
    expire_at: i64,
}

/// Grants each key a few times, then to its holder for a minute, and waits until the
/// replica has acknowledged all of it (`WAIT 1`): the durability pattern under test.
fn hold_acknowledged(con: &mut redis::Connection, keys: &[String], step: &str) -> Vec<Held> {
    let held: Vec<Held> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| {
            let mut fences = Vec::new();
            for round in 0..3 {
                let other = format!("earlier-{round}");
                let (_, fence) = crate::common::acquire(con, key, 60_000, &["TOKEN", &other])
                    .unwrap_or_else(|| panic!("{step}: {key} is free"));
                assert_eq!(crate::common::release(con, key, other.as_bytes()), 1);
                fences.push(fence);
            }
            let token = format!("holder-{i}");
            let (_, fence) = crate::common::acquire(con, key, 60_000, &["TOKEN", &token])
                .unwrap_or_else(|| panic!("{step}: {key} is free"));
            fences.push(fence);
            let acked: i64 = redis::cmd("WAIT")
                .arg(1)
                .arg(5000)
                .query(con)
                .expect("WAIT");
            assert_eq!(
                acked, 1,
                "{step}: the replica acknowledged the grant of {key}"
            );
            let expire_at: i64 = redis::cmd("PEXPIRETIME")
                .arg(key)
                .query(con)
                .expect("PEXPIRETIME");
            Held {
                key: key.clone(),
                token,
                fences,
                acquired: info_field(con, key, "acquired").expect("acquired"),
                expire_at,
            }
        })
        .collect();
    held
}

fn lock_stats(con: &mut redis::Connection) -> HashMap<String, i64> {
    let text: String = redis::cmd("INFO")
        .arg("lock")
        .query(con)
        .expect("INFO lock");
    text.lines()
        .filter_map(|line| line.trim().split_once(':'))
        .filter_map(|(name, value)| Some((name.to_string(), value.parse().ok()?)))
        .collect()
}

/// Asserts that every waiter on the master that went away was answered, and returns
/// the answers for the report.
fn all_answered(waiters: &[Waiter], step: &str) -> Vec<Answer> {
    waiters
        .iter()
        .map(|waiter| {
            let answer = waiter.answer_within(ANSWER_TIMEOUT).unwrap_or_else(|| {
                panic!(
                    "{step}: {} still blocked after its master went away",
                    waiter.token
                )
            });
            println!("{step}: {} answered {answer:?}", waiter.token);
            answer
        })
        .collect()
}

/// On the new master: every acknowledged lock is held by its token with its fence,
/// `acquired` time and deadline; waits, grants with higher fences, counters and keyspace
/// notifications all work.
fn new_master_keeps_the_locks(node: &TestServer, held: &[Held], step: &str) {
    let mut con = node.connection();
    let mut events = node.connection();
    events
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let mut events = events.as_pubsub();
    events
        .psubscribe("__keyspace@0__:*")
        .expect("PSUBSCRIBE keyspace events");
    let stats_before = lock_stats(&mut con);

    for lock in held {
        let key = &lock.key;
        assert_eq!(
            info_field(&mut con, key, "fence"),
            lock.fences.last().copied(),
            "{step}: fence of {key} on the new master"
        );
        assert_eq!(
            info_field(&mut con, key, "acquired"),
            Some(lock.acquired),
            "{step}: acquired time of {key} on the new master"
        );
        let expire_at: i64 = redis::cmd("PEXPIRETIME")
            .arg(key)
            .query(&mut con)
            .expect("PEXPIRETIME");
        assert_eq!(expire_at, lock.expire_at, "{step}: deadline of {key}");
        assert_eq!(
            crate::common::acquire(&mut con, key, 1000, &["TOKEN", "intruder"]),
            None,
            "{step}: {key} is busy for another token"
        );
        let extended: i64 = redis::cmd("LOCK.EXTEND")
            .arg(key)
            .arg(&lock.token)
            .arg(60_000)
            .query(&mut con)
            .expect("LOCK.EXTEND");
        assert_eq!(extended, 1, "{step}: {} still holds {key}", lock.token);
    }

    // A waiter on the new master is served when the holder releases, with a higher fence.
    let first = &held[0];
    let waiter = Waiter::start(node, &first.key, "new-waiter", 30_000, 20_000);
    wait_for_waiters(&mut con, &first.key, 1);
    assert_eq!(
        lock_stats(&mut con).get("lock_waiters"),
        Some(&1),
        "{step}: INFO lock counts the waiter"
    );
    assert_eq!(
        crate::common::release(&mut con, &first.key, first.token.as_bytes()),
        1,
        "{step}: {} releases {} on the new master",
        first.token,
        first.key
    );
    match waiter.answer_within(ANSWER_TIMEOUT) {
        Some(Answer::Granted(token, fence)) => {
            assert_eq!(token, b"new-waiter", "{step}: granted to the waiter");
            let max = *first.fences.iter().max().unwrap();
            assert!(
                fence > max,
                "{step}: waiter's fence {fence} > old master's {max}"
            );
        }
        other => panic!("{step}: the waiter on the new master answered {other:?}"),
    }
    assert_eq!(
        crate::common::release(&mut con, &first.key, b"new-waiter"),
        1
    );

    // The other holders release; the next grant of each key fences above the old master.
    for lock in &held[1..] {
        assert_eq!(
            crate::common::release(&mut con, &lock.key, lock.token.as_bytes()),
            1,
            "{step}: {} releases {} on the new master",
            lock.token,
            lock.key
        );
        let (_, fence) = crate::common::acquire(&mut con, &lock.key, 60_000, &["TOKEN", "next"])
            .unwrap_or_else(|| panic!("{step}: {} is free after release", lock.key));
        let max = *lock.fences.iter().max().unwrap();
        assert!(
            fence > max,
            "{step}: next fence {fence} of {} > old master's {max}",
            lock.key
        );
        assert_eq!(crate::common::release(&mut con, &lock.key, b"next"), 1);
    }

    let stats = lock_stats(&mut con);
    let delta = |name: &str| stats[name] - stats_before[name];
    let n = held.len() as i64;
    assert_eq!(
        delta("lock_grants"),
        n,
        "{step}: INFO lock grants on the new master"
    );
    assert_eq!(delta("lock_releases"), 2 * n, "{step}: INFO lock releases");
    assert_eq!(delta("lock_extends"), n, "{step}: INFO lock extends");
    assert_eq!(delta("lock_waits"), 1, "{step}: INFO lock waits");
    assert_eq!(
        delta("lock_contended"),
        n + 1,
        "{step}: INFO lock contended"
    );
    assert_eq!(stats["lock_waiters"], 0, "{step}: INFO lock waiters now");

    // Keyspace notifications of the first key, in order.
    let mut seen = Vec::new();
    let expected = [
        "lock.extend",
        "lock.release",
        "lock.acquire",
        "lock.release",
    ];
    while seen.len() < expected.len() {
        let msg = events
            .get_message()
            .unwrap_or_else(|e| panic!("{step}: keyspace events so far {seen:?}: {e}"));
        if msg.get_channel_name().ends_with(&format!(":{}", first.key)) {
            seen.push(msg.get_payload::<String>().expect("event name"));
        }
    }
    assert_eq!(seen, expected, "{step}: keyspace events of {}", first.key);
}

/// Waits until `port` is a master serving `slots` in every live node's view.
fn wait_promoted(cluster: &Cluster, port: u16, slots: &[(u16, u16)], step: &str) {
    poll_until(
        crate::cluster_common::HEAL_TIMEOUT,
        &format!("{step}: {port} promoted"),
        || {
            cluster.live_ports().iter().all(|&p| {
                crate::cluster_common::topology_of(&mut cluster.con(p))
                    .iter()
                    .any(|n| n.port == port && n.master && n.slots == slots)
            })
        },
    );
    cluster.wait_healthy(step);
}

#[test]
fn acknowledged_locks_survive_failover_in_a_cluster() {
    let mut cluster = Cluster::start(3);
    let mut router = cluster.client();
    let first = cluster.masters()[0].clone();
    let second = cluster.replica_of(&first.id);

    // The replica takes over by CLUSTER FAILOVER TAKEOVER; the old master becomes its replica.
    let step = "CLUSTER FAILOVER TAKEOVER";
    let held = held_with_waiters(&cluster, &first, "manual", step);
    cluster.take_over(second.port);
    // The waiters' answers are awaited once the takeover is seen: until the old master
    // hears of it, it serves.
    wait_promoted(&cluster, second.port, &first.slots, step);
    let answers = all_answered(&held.1, step);
    for answer in &answers {
        assert!(
            matches!(answer, Answer::Error(e) if e.starts_with("UNBLOCKED "))
                || matches!(answer, Answer::Dropped(_)),
            "{step}: a waiter on the demoted master is unblocked with an error: {answer:?}"
        );
    }
    new_master_keeps_the_locks(cluster.node(second.port), &held.0, step);
    routed_by_the_cluster_client(&mut router, cluster.node(second.port), &held.0[1].key, step);

    // The new master dies; the old one, its replica now, takes over after node timeout.
    let step = "kill -9";
    let promoted = NodeInfo {
        id: second.id.clone(),
        slots: first.slots.clone(),
        ..second.clone()
    };
    let held = held_with_waiters(&cluster, &promoted, "killed", step);
    cluster.kill(second.port);
    let answers = all_answered(&held.1, step);
    for answer in &answers {
        assert!(
            matches!(answer, Answer::Dropped(_)),
            "{step}: a waiter on the killed master loses its connection: {answer:?}"
        );
    }
    wait_promoted(&cluster, first.port, &first.slots, step);
    new_master_keeps_the_locks(cluster.node(first.port), &held.0, step);
    // redis-rs 1.8's synchronous cluster client retries a dead node's address rather than
    // asking the cluster where its slots went: a client made after the takeover is used.
    routed_by_the_cluster_client(
        &mut cluster.client(),
        cluster.node(first.port),
        &held.0[1].key,
        step,
    );
}

/// Acknowledged locks on four keys of `master`, and a waiter on each of the first two.
fn held_with_waiters(
    cluster: &Cluster,
    master: &NodeInfo,
    prefix: &str,
    step: &str,
) -> (Vec<Held>, Vec<Waiter>) {
    let keys = cluster.keys_on(master, &format!("{prefix}:"), 4);
    let mut con = cluster.con(master.port);
    let held = hold_acknowledged(&mut con, &keys, step);
    let node = cluster.node(master.port);
    let waiters = keys[..2]
        .iter()
        .enumerate()
        .map(|(i, key)| {
            let waiter = Waiter::start(node, key, &format!("{prefix}-waiter-{i}"), 30_000, 20_000);
            wait_for_waiters(&mut con, key, 1);
            waiter
        })
        .collect();
    (held, waiters)
}

/// The cluster client reaches the key's new master.
fn routed_by_the_cluster_client(
    con: &mut redis::cluster::ClusterConnection,
    new_master: &TestServer,
    key: &str,
    step: &str,
) {
    let (_, fence) = redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(60_000)
        .arg("TOKEN")
        .arg("router")
        .query::<Option<(String, i64)>>(con)
        .unwrap_or_else(|e| panic!("{step}: LOCK.ACQUIRE through the cluster client: {e}"))
        .unwrap_or_else(|| panic!("{step}: {key} is free"));
    assert_eq!(
        info_field(&mut new_master.connection(), key, "fence"),
        Some(fence),
        "{step}: the cluster client's lock is on the new master"
    );
    let released: i64 = redis::cmd("LOCK.RELEASE")
        .arg(key)
        .arg("router")
        .query(con)
        .expect("LOCK.RELEASE");
    assert_eq!(released, 1, "{step}: release through the cluster client");
}

#[test]
fn acknowledged_locks_survive_manual_promotion_of_a_standalone_replica() {
    let step = "REPLICAOF NO ONE";
    let events = ["--notify-keyspace-events", "Kd"];
    let mut master = TestServer::with_args(&events);
    let replica = crate::common::start_replica(&master, &events);
    let keys: Vec<String> = (0..4).map(|i| format!("standalone:{i}")).collect();
    let held = hold_acknowledged(&mut master.connection(), &keys, step);
    let waiters: Vec<Waiter> = keys[..2]
        .iter()
        .enumerate()
        .map(|(i, key)| {
            let waiter = Waiter::start(&master, key, &format!("waiter-{i}"), 30_000, 20_000);
            wait_for_waiters(&mut master.connection(), key, 1);
            waiter
        })
        .collect();

    master.kill();
    for answer in all_answered(&waiters, step) {
        assert!(
            matches!(answer, Answer::Dropped(_)),
            "{step}: a waiter on the killed master loses its connection: {answer:?}"
        );
    }
    let mut con = replica.connection();
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut con)
        .expect("REPLICAOF NO ONE");
    new_master_keeps_the_locks(&replica, &held, step);

    // The old master comes back as a replica of the new one and gets its locks.
    let (_, fence) = crate::common::acquire(&mut con, &keys[0], 60_000, &["TOKEN", "after"])
        .expect("a free lock");
    let port = replica.port.to_string();
    let mut args = vec!["--replicaof", "127.0.0.1", port.as_str()];
    args.extend_from_slice(&events);
    master.restart_with(&args);
    let mut old = master.connection();
    poll_until(Duration::from_secs(20), "old master resynced", || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut old)
            .unwrap();
        info.contains("master_link_status:up")
    });
    crate::common::sync_replicas(&mut con, 1);
    assert_eq!(
        info_field(&mut old, &keys[0], "fence"),
        Some(fence),
        "{step}: the old master, back as a replica, has the new master's lock"
    );
}
