//! Slot migration on a real Redis Cluster (3 masters, 3 replicas, the module on every
//! node) while locks are held and clients wait for them: the locks arrive with token,
//! fence, `acquired` time and expiry; their holders release them on the new node; fences
//! keep growing; and no waiter is left blocked.
//!
//! One cluster serves both migrations of this file (a manual `CLUSTER SETSLOT` +
//! `MIGRATE` of one slot, then `redis-cli --cluster reshard` of several), run in sequence
//! by one test; each assertion names its step.

use std::collections::HashMap;
use std::thread;
use std::time::Duration;

use crate::cluster_common::{Answer, Cluster, NodeInfo, Waiter, key_slot, redis_cli, setslot};
use crate::common::{error_of, info_field, poll_until};

/// How long a waiter on a migrated key may go unanswered before the test calls it stuck.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(15);

/// What a migration must keep of a lock.
#[derive(Debug, PartialEq)]
struct Snapshot {
    fence: i64,
    acquired: i64,
    /// Absolute expiry, unix ms (`PEXPIRETIME`).
    expire_at: i64,
}

fn snapshot(con: &mut redis::Connection, key: &str, step: &str) -> Snapshot {
    let info: HashMap<String, i64> = redis::cmd("LOCK.INFO")
        .arg(key)
        .query::<Option<crate::common::InfoFields>>(con)
        .expect("LOCK.INFO")
        .unwrap_or_else(|| panic!("{step}: no lock at {key}"))
        .0
        .into_iter()
        .collect();
    let expire_at: i64 = redis::cmd("PEXPIRETIME")
        .arg(key)
        .query(con)
        .expect("PEXPIRETIME");
    Snapshot {
        fence: info["fence"],
        acquired: info["acquired"],
        expire_at,
    }
}

/// How far a moved lock's deadline may drift: `MIGRATE` sends the remaining time, not
/// the deadline, so the new node's deadline may differ from the old one's by the time
/// the transfer took.
const EXPIRY_SLACK_MS: i64 = 250;

/// Waits until the lock at `key` (granted for a minute) is old enough that a node which
/// restarted its full TTL on arrival would miss the kept deadline by more than the
/// slack: without it, a lock moved right after its grant could not tell the two apart.
fn age_beyond_slack(con: &mut redis::Connection, key: &str) {
    poll_until(
        Duration::from_secs(10),
        "the lock to age past the slack",
        || {
            let pttl: i64 = redis::cmd("PTTL").arg(key).query(con).expect("PTTL");
            pttl < 60_000 - 2 * EXPIRY_SLACK_MS
        },
    );
}

fn assert_same_lock(before: &Snapshot, after: &Snapshot, what: &str) {
    assert_eq!(before.fence, after.fence, "{what}: fence kept");
    assert_eq!(before.acquired, after.acquired, "{what}: acquired kept");
    assert!(
        (before.expire_at - after.expire_at).abs() <= EXPIRY_SLACK_MS,
        "{what}: expiry kept (before {}, after {})",
        before.expire_at,
        after.expire_at
    );
}

/// Grants and releases `key` a few times on `con`, then grants it to `token` for a
/// minute: returns every fence granted, the holder's last.
fn lock_with_history(con: &mut redis::Connection, key: &str, token: &str) -> Vec<i64> {
    let mut fences = Vec::new();
    for round in 0..5 {
        let other = format!("earlier-{round}");
        let (_, fence) =
            crate::common::acquire(con, key, 60_000, &["TOKEN", &other]).expect("free");
        assert_eq!(crate::common::release(con, key, other.as_bytes()), 1);
        fences.push(fence);
    }
    let (_, fence) = crate::common::acquire(con, key, 60_000, &["TOKEN", token]).expect("free");
    fences.push(fence);
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences grow: {fences:?}"
    );
    fences
}

#[test]
fn held_locks_and_their_waiters_survive_slot_migration() {
    let cluster = Cluster::start(3);
    let masters = cluster.masters();
    manual_migration_moves_locks_and_redirects_waiters(&cluster, &masters[0], &masters[1]);
    redis_cli_reshard_moves_locks_and_answers_waiters(&cluster, &masters[2], &masters[0]);
}

/// `CLUSTER SETSLOT ... IMPORTING/MIGRATING`, `MIGRATE`, `CLUSTER SETSLOT ... NODE`.
fn manual_migration_moves_locks_and_redirects_waiters(
    cluster: &Cluster,
    source: &NodeInfo,
    target: &NodeInfo,
) {
    let step = "manual migration";
    // Two locks in one slot of the source (a hash tag), one of them with two waiters.
    let tag = (0..)
        .map(|i| format!("mv{i}"))
        .find(|tag| source.serves(key_slot(tag.as_bytes())))
        .expect("a tag on the source");
    let held = format!("{{{tag}}}:held");
    let quiet = format!("{{{tag}}}:quiet");
    let slot = key_slot(held.as_bytes());
    let target_addr = format!("127.0.0.1:{}", target.port);

    let mut src = cluster.con(source.port);
    let held_fences = lock_with_history(&mut src, &held, "holder");
    let quiet_fences = lock_with_history(&mut src, &quiet, "quiet-holder");
    // Shared holders in the same slot: each must arrive with its own expiry.
    let readers = format!("{{{tag}}}:readers");
    crate::common::acquire(&mut src, &readers, 6_000, &["SHARED", "TOKEN", "short"])
        .expect("reader");
    let (_, newest) =
        crate::common::acquire(&mut src, &readers, 60_000, &["SHARED", "TOKEN", "long"])
            .expect("reader");
    let held_before = snapshot(&mut src, &held, step);
    let quiet_before = snapshot(&mut src, &quiet, step);
    age_beyond_slack(&mut src, &quiet);

    let source_node = cluster.node(source.port);
    let waiters = [
        Waiter::start(source_node, &held, "waiter-1", 30_000, 20_000),
        Waiter::start(source_node, &held, "waiter-2", 30_000, 20_000),
    ];
    // A waiter for several keys of the slot, the other one free and kept for it.
    let free = format!("{{{tag}}}:free");
    let waiter_all = Waiter::start_all(source_node, &[&free, &held], "waiter-all", 30_000, 20_000);
    crate::cluster_common::wait_for_waiters(&mut src, &held, 3);
    // A follower of the holder (docs/commands.md, LOCK.WATCH): redirected with the key.
    let mut watch_con = cluster.con(source.port);
    let (watch_key, watch_fence) = (held.clone(), held_before.fence);
    let watcher = thread::spawn(move || {
        error_of(
            redis::cmd("LOCK.WATCH")
                .arg(&watch_key)
                .arg(watch_fence)
                .arg(20_000)
                .query(&mut watch_con),
        )
    });
    poll_until(Duration::from_secs(10), "the watcher to block", || {
        info_field(&mut src, &held, "watchers") == Some(1)
    });

    setslot(cluster, target.port, slot, "IMPORTING", &source.id);
    setslot(cluster, source.port, slot, "MIGRATING", &target.id);
    // Keys not moved yet are still served by the source.
    assert_eq!(
        info_field(&mut src, &held, "waiters"),
        Some(3),
        "{step}: the source serves its keys while the slot migrates"
    );

    let migrated: String = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(target.port)
        .arg("")
        .arg(0)
        .arg(5000)
        .arg("KEYS")
        .arg(&held)
        .arg(&quiet)
        .arg(&readers)
        .query(&mut src)
        .expect("MIGRATE");
    assert_eq!(migrated, "OK", "{step}: MIGRATE");

    // Every waiter on the moved key is answered; the module redirects them like the
    // server redirects any command on a key that has left a migrating slot.
    let ask = format!("ASK {slot} {target_addr}");
    for waiter in &waiters {
        let answer = waiter
            .answer_within(ANSWER_TIMEOUT)
            .unwrap_or_else(|| panic!("{step}: {} still blocked after MIGRATE", waiter.token));
        println!("{step}: {} answered {answer:?}", waiter.token);
        assert_eq!(
            answer,
            Answer::Error(ask.clone()),
            "{step}: {} is redirected to the new node",
            waiter.token
        );
    }
    assert_eq!(
        waiter_all.answer_within(ANSWER_TIMEOUT),
        Some(Answer::Error(ask.clone())),
        "{step}: the waiter for several keys is redirected to the new node"
    );
    assert_eq!(
        watcher.join().expect("the watcher thread"),
        ask,
        "{step}: the watcher is redirected to the new node"
    );
    // New commands on the moved keys, and new locks in the slot, go to the target too.
    let fresh = format!("{{{tag}}}:fresh");
    for cmd in [
        redis::cmd("LOCK.ACQUIRE").arg(&held).arg(1000).clone(),
        redis::cmd("LOCK.INFO").arg(&held).clone(),
        redis::cmd("LOCK.ACQUIRE").arg(&fresh).arg(1000).clone(),
    ] {
        assert_eq!(
            error_of(cmd.query(&mut src)),
            ask,
            "{step}: the source answers ASK while the slot migrates"
        );
    }

    // Nothing was granted or created on the source behind the moved locks' back.
    let left: i64 = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut src)
        .expect("COUNTKEYSINSLOT");
    assert_eq!(left, 0, "{step}: no lock of the slot is left on the source");

    // A waiter that follows the redirect (as cluster clients do) waits on the target.
    let mut dst = cluster.con(target.port);
    let asking = |con: &mut redis::Connection| {
        let _: () = redis::cmd("ASKING").query(con).expect("ASKING");
    };
    let mut follower = cluster.con(target.port);
    asking(&mut follower);
    let follower_key = held.clone();
    let follower = thread::spawn(move || {
        redis::cmd("LOCK.ACQUIRE")
            .arg(&follower_key)
            .arg(30_000)
            .arg("TOKEN")
            .arg("waiter-1")
            .arg("WAIT")
            .arg(20_000)
            .query::<Option<(String, i64)>>(&mut follower)
    });
    poll_until(
        Duration::from_secs(10),
        "the follower waits on the target",
        || {
            asking(&mut dst);
            info_field(&mut dst, &held, "waiters") == Some(1)
        },
    );

    for port in [target.port, source.port] {
        setslot(cluster, port, slot, "NODE", &target.id);
    }
    cluster.wait_healthy(step);
    assert_eq!(
        cluster.owner_of(slot).port,
        target.port,
        "{step}: slot moved"
    );

    // What a slot move brings names no connection of the target (`LOCK.HOLDERS`).
    for key in [&held, &readers] {
        let holders: Vec<HashMap<String, redis::Value>> = redis::cmd("LOCK.HOLDERS")
            .arg(key)
            .query(&mut dst)
            .expect("LOCK.HOLDERS");
        assert!(!holders.is_empty(), "{step}: {key} has holders");
        for holder in holders {
            assert_eq!(
                holder.get("client"),
                Some(&redis::Value::Int(0)),
                "{step}: {key}"
            );
        }
    }

    // The shared holders arrived, each with its own expiry, which still ends it.
    assert_eq!(info_field(&mut dst, &readers, "holders"), Some(2), "{step}");
    assert_eq!(
        info_field(&mut dst, &readers, "fence"),
        Some(newest),
        "{step}"
    );
    poll_until(
        Duration::from_secs(15),
        "the short reader to expire on the target",
        || info_field(&mut dst, &readers, "holders") == Some(1),
    );
    assert_eq!(
        crate::common::release(&mut dst, &readers, b"long"),
        1,
        "{step}"
    );

    // The locks arrived whole, still held by their tokens.
    assert_same_lock(&held_before, &snapshot(&mut dst, &held, step), step);
    assert_same_lock(&quiet_before, &snapshot(&mut dst, &quiet, step), step);
    for key in [&held, &quiet] {
        assert_eq!(
            crate::common::acquire(&mut dst, key, 1000, &["TOKEN", "intruder"]),
            None,
            "{step}: {key} is busy for another token on the target"
        );
        let extended: i64 = redis::cmd("LOCK.EXTEND")
            .arg(key)
            .arg("intruder")
            .arg(1000)
            .query(&mut dst)
            .expect("LOCK.EXTEND");
        assert_eq!(extended, 0, "{step}: another token cannot extend {key}");
    }
    assert_eq!(
        error_of(redis::cmd("LOCK.INFO").arg(&held).query(&mut src)),
        format!("MOVED {slot} {target_addr}"),
        "{step}: the source answers MOVED once the slot moved"
    );

    // The target's replica has the migrated locks too.
    crate::common::sync_replicas(&mut dst, 1);
    let replica = cluster.replica_of(&target.id);
    let mut rep = cluster.con(replica.port);
    let _: () = redis::cmd("READONLY").query(&mut rep).expect("READONLY");
    assert_eq!(
        info_field(&mut rep, &held, "fence"),
        Some(held_before.fence),
        "{step}: the target's replica has the migrated lock"
    );

    // The holders release on the target; the next grants fence above the source's.
    assert_eq!(
        crate::common::release(&mut dst, &held, b"holder"),
        1,
        "{step}: the holder releases on the target with its token"
    );
    let (token, fence) = follower
        .join()
        .expect("follower thread")
        .unwrap_or_else(|e| panic!("{step}: the follower's LOCK.ACQUIRE failed: {e}"))
        .unwrap_or_else(|| panic!("{step}: the follower was answered nil"));
    assert_eq!(
        token, "waiter-1",
        "{step}: the follower is granted on the target"
    );
    assert!(
        fence > *held_fences.iter().max().unwrap(),
        "{step}: fence {fence} on the target exceeds every fence of the source {held_fences:?}"
    );
    assert_eq!(crate::common::release(&mut dst, &held, b"waiter-1"), 1);
    assert_eq!(
        crate::common::release(&mut dst, &quiet, b"quiet-holder"),
        1,
        "{step}: the second holder releases on the target with its token"
    );
    let (_, fence) = crate::common::acquire(&mut dst, &quiet, 1000, &[]).expect("free");
    assert!(
        fence > *quiet_fences.iter().max().unwrap(),
        "{step}: fence {fence} on the target exceeds every fence of the source {quiet_fences:?}"
    );
}

/// `redis-cli --cluster reshard` of the source's lowest slots (the ones it moves first).
fn redis_cli_reshard_moves_locks_and_answers_waiters(
    cluster: &Cluster,
    source: &NodeInfo,
    target: &NodeInfo,
) {
    let step = "redis-cli reshard";
    const SLOTS: u16 = 40;
    let first = source.slots.iter().map(|&(lo, _)| lo).min().expect("slots");
    let moving = |key: &str| (first..first + SLOTS).contains(&key_slot(key.as_bytes()));
    let keys: Vec<String> = (0..)
        .map(|i| format!("rs:{i}"))
        .filter(|key| moving(key))
        .take(6)
        .collect();
    // A key on the source outside the moved slots, as a control.
    let stay = (0..)
        .map(|i| format!("stay:{i}"))
        .find(|key| source.serves(key_slot(key.as_bytes())) && !moving(key))
        .expect("a key that stays");

    let mut src = cluster.con(source.port);
    let mut history = HashMap::new();
    let mut before = HashMap::new();
    for (i, key) in keys.iter().chain([&stay]).enumerate() {
        let fences = lock_with_history(&mut src, key, &format!("holder-{i}"));
        before.insert(key.clone(), snapshot(&mut src, key, step));
        history.insert(key.clone(), fences);
    }
    age_beyond_slack(&mut src, &stay);
    // Plain waiters on the first two keys (their raw answers are what the module says);
    // a cluster-client waiter on the third, which follows redirects by itself.
    let source_node = cluster.node(source.port);
    let plain = [
        Waiter::start(source_node, &keys[0], "plain-0", 30_000, 20_000),
        Waiter::start(source_node, &keys[1], "plain-1", 30_000, 20_000),
    ];
    crate::cluster_common::wait_for_waiters(&mut src, &keys[0], 1);
    crate::cluster_common::wait_for_waiters(&mut src, &keys[1], 1);
    let mut client_waiter_con = cluster.client();
    let client_key = keys[2].clone();
    let mut client_waiter = Some(thread::spawn(move || {
        redis::cmd("LOCK.ACQUIRE")
            .arg(&client_key)
            .arg(30_000)
            .arg("TOKEN")
            .arg("cluster-client")
            .arg("WAIT")
            .arg(20_000)
            .query::<Option<(String, i64)>>(&mut client_waiter_con)
    }));
    crate::cluster_common::wait_for_waiters(&mut src, &keys[2], 1);

    let out = redis_cli(&[
        "--cluster",
        "reshard",
        &format!("127.0.0.1:{}", source.port),
        "--cluster-from",
        &source.id,
        "--cluster-to",
        &target.id,
        "--cluster-slots",
        &SLOTS.to_string(),
        "--cluster-yes",
    ]);
    assert!(
        out.status.success(),
        "{step}: redis-cli --cluster reshard failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    cluster.wait_healthy(step);
    for key in &keys {
        assert_eq!(
            cluster.owner_of(key_slot(key.as_bytes())).port,
            target.port,
            "{step}: the slot of {key} moved to the target"
        );
    }

    // Every plain waiter is answered: redirected to the new node.
    for waiter in &plain {
        let answer = waiter
            .answer_within(ANSWER_TIMEOUT)
            .unwrap_or_else(|| panic!("{step}: {} still blocked after reshard", waiter.token));
        println!("{step}: {} answered {answer:?}", waiter.token);
        match &answer {
            Answer::Error(e) if e.starts_with("ASK ") || e.starts_with("MOVED ") => assert!(
                e.ends_with(&format!(" 127.0.0.1:{}", target.port)),
                "{step}: {} is redirected to the target, not {e}",
                waiter.token
            ),
            other => panic!(
                "{step}: {} answered {other:?}, not a redirect",
                waiter.token
            ),
        }
    }

    // The locks arrived whole on the target and are released there by their holders;
    // the cluster client routes to the new owner, and its waiter, which followed the
    // redirect, is granted there with a fence above the source's.
    let mut dst = cluster.con(target.port);
    let mut con = cluster.client();
    for (i, key) in keys.iter().enumerate() {
        assert_same_lock(&before[key], &snapshot(&mut dst, key, step), step);
        let released: i64 = redis::cmd("LOCK.RELEASE")
            .arg(key)
            .arg(format!("holder-{i}"))
            .query(&mut con)
            .expect("LOCK.RELEASE");
        assert_eq!(
            released, 1,
            "{step}: holder-{i} releases {key} on the target"
        );
        let max = *history[key].iter().max().unwrap();
        if i == 2 {
            let (token, fence) = client_waiter
                .take()
                .expect("one cluster-client waiter")
                .join()
                .expect("waiter thread")
                .unwrap_or_else(|e| panic!("{step}: the cluster-client waiter failed: {e}"))
                .unwrap_or_else(|| panic!("{step}: the cluster-client waiter got nil"));
            assert_eq!(token, "cluster-client", "{step}: the waiter gets {key}");
            assert!(
                fence > max,
                "{step}: waiter's fence {fence} > source's {max}"
            );
        } else {
            let (_, fence) = crate::common::acquire(&mut dst, key, 1000, &[]).expect("free");
            assert!(
                fence > max,
                "{step}: next fence {fence} of {key} > source's {max}"
            );
        }
    }
    // The control key never moved.
    assert_same_lock(&before[&stay], &snapshot(&mut src, &stay, step), step);
}
