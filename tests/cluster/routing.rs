//! Lock commands on a real Redis Cluster (3 masters, 3 replicas, the module on every
//! node): cluster-aware clients route them by their key, other nodes answer `MOVED`,
//! and hash tags put a lock beside the data it guards.
//!
//! One cluster serves every check of this file, run in sequence by one test; each
//! assertion names its step.

use std::collections::HashMap;
use std::thread;

use crate::cluster_common::{Cluster, key_slot, redis_cli};
use crate::common::error_of;
use redis::Commands;

#[test]
fn lock_commands_are_routed_by_key_across_the_cluster() {
    let cluster = Cluster::start(3);
    every_node_has_the_module(&cluster);
    hash_slots_match_the_server(&cluster);
    cluster_client_acquires_extends_and_releases_on_every_master(&cluster);
    cluster_client_waits_and_is_granted_on_the_key_owner(&cluster);
    redis_cli_follows_redirects(&cluster);
    other_nodes_answer_moved(&cluster);
    replicas_serve_lock_info_only_in_readonly_mode(&cluster);
    hash_tags_keep_a_lock_beside_its_data(&cluster);
    several_keys_at_once_need_one_slot(&cluster);
    fenced_writes_are_routed_and_stay_in_one_slot(&cluster);
    commands_declare_their_key(&cluster);
}

fn every_node_has_the_module(cluster: &Cluster) {
    for port in cluster.live_ports() {
        let modules: redis::Value = redis::cmd("MODULE")
            .arg("LIST")
            .query(&mut cluster.con(port))
            .expect("MODULE LIST");
        assert!(
            format!("{modules:?}").contains("lock"),
            "module: node {port} does not list the lock module: {modules:?}"
        );
    }
}

fn hash_slots_match_the_server(cluster: &Cluster) {
    for key in [
        "a",
        "lock:1",
        "{order:42}:lock",
        "{order:42}:data",
        "{}x",
        "x{}y{z}",
    ] {
        assert_eq!(
            key_slot(key.as_bytes()),
            cluster.keyslot(key),
            "slots: the test's slot of {key:?} differs from CLUSTER KEYSLOT"
        );
    }
}

fn cluster_client_acquires_extends_and_releases_on_every_master(cluster: &Cluster) {
    let step = "cluster client";
    let masters = cluster.masters();
    let mut con = cluster.client();
    let keys: Vec<String> = (0..200).map(|i| format!("route:{i}")).collect();
    let mut per_master: HashMap<u16, usize> = HashMap::new();
    let mut held = Vec::new();
    for key in &keys {
        let (token, fence): (Vec<u8>, i64) = redis::cmd("LOCK.ACQUIRE")
            .arg(key)
            .arg(30_000)
            .query::<Option<(Vec<u8>, i64)>>(&mut con)
            .unwrap_or_else(|e| panic!("{step}: LOCK.ACQUIRE {key}: {e}"))
            .unwrap_or_else(|| panic!("{step}: LOCK.ACQUIRE {key} answered nil"));
        assert_eq!(token.len(), 32, "{step}: server-made token of {key}");
        assert!(fence > 0, "{step}: fence of {key}");
        let slot = key_slot(key.as_bytes());
        let owner = masters
            .iter()
            .find(|m| m.serves(slot))
            .expect("an owner for every slot");
        *per_master.entry(owner.port).or_default() += 1;
        // The lock lives on the master that serves its slot, nowhere else.
        let mut direct = cluster.con(owner.port);
        assert_eq!(
            crate::common::info_field(&mut direct, key, "fence"),
            Some(fence),
            "{step}: {key} (slot {slot}) is held on its owner {}",
            owner.port
        );
        held.push((key.clone(), token, fence));
    }
    assert_eq!(
        per_master.len(),
        3,
        "{step}: keys on every master: {per_master:?}"
    );
    assert!(
        per_master.values().all(|&n| n >= 30),
        "{step}: keys spread over the masters: {per_master:?}"
    );

    for (key, token, fence) in &held {
        let other: Option<(Vec<u8>, i64)> = redis::cmd("LOCK.ACQUIRE")
            .arg(key)
            .arg(1000)
            .arg("TOKEN")
            .arg("someone-else")
            .query(&mut con)
            .expect("LOCK.ACQUIRE");
        assert_eq!(other, None, "{step}: {key} is busy for another token");
        let extended: i64 = redis::cmd("LOCK.EXTEND")
            .arg(key)
            .arg(token)
            .arg(60_000)
            .query(&mut con)
            .expect("LOCK.EXTEND");
        assert_eq!(extended, 1, "{step}: LOCK.EXTEND {key} by its token");
        let info: HashMap<String, i64> = redis::cmd("LOCK.INFO")
            .arg(key)
            .query::<crate::common::InfoFields>(&mut con)
            .expect("LOCK.INFO")
            .0
            .into_iter()
            .collect();
        assert_eq!(
            info.get("fence"),
            Some(fence),
            "{step}: LOCK.INFO fence of {key}"
        );
        assert!(
            info.get("ttl").is_some_and(|&ttl| ttl > 30_000),
            "{step}: LOCK.INFO ttl of {key} after extend: {info:?}"
        );
    }
    for (key, token, _) in &held {
        let released: i64 = redis::cmd("LOCK.RELEASE")
            .arg(key)
            .arg(token)
            .query(&mut con)
            .expect("LOCK.RELEASE");
        assert_eq!(released, 1, "{step}: LOCK.RELEASE {key} by its token");
        let again: i64 = redis::cmd("LOCK.RELEASE")
            .arg(key)
            .arg(token)
            .query(&mut con)
            .expect("LOCK.RELEASE");
        assert_eq!(again, 0, "{step}: a second LOCK.RELEASE of {key}");
        let info: Option<crate::common::InfoFields> = redis::cmd("LOCK.INFO")
            .arg(key)
            .query(&mut con)
            .expect("LOCK.INFO");
        assert_eq!(info, None, "{step}: {key} is gone after release");
    }
}

fn cluster_client_waits_and_is_granted_on_the_key_owner(cluster: &Cluster) {
    let step = "cluster client WAIT";
    let key = "route:wait";
    let mut holder = cluster.client();
    let (token, first_fence) = redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(30_000)
        .query::<Option<(Vec<u8>, i64)>>(&mut holder)
        .expect("LOCK.ACQUIRE")
        .expect("a free lock");
    let mut waiter_con = cluster.client();
    let waiter = thread::spawn(move || {
        redis::cmd("LOCK.ACQUIRE")
            .arg(key)
            .arg(30_000)
            .arg("TOKEN")
            .arg("waiter")
            .arg("WAIT")
            .arg(20_000)
            .query::<Option<(String, i64)>>(&mut waiter_con)
    });
    let owner = cluster.owner_of(key_slot(key.as_bytes()));
    crate::cluster_common::wait_for_waiters(&mut cluster.con(owner.port), key, 1);
    let released: i64 = redis::cmd("LOCK.RELEASE")
        .arg(key)
        .arg(&token)
        .query(&mut holder)
        .expect("LOCK.RELEASE");
    assert_eq!(released, 1, "{step}: the holder releases");
    let (token, fence) = waiter
        .join()
        .expect("waiter thread")
        .unwrap_or_else(|e| panic!("{step}: the waiter's LOCK.ACQUIRE failed: {e}"))
        .unwrap_or_else(|| panic!("{step}: the waiter was answered nil"));
    assert_eq!(token, "waiter", "{step}: granted to the waiter");
    assert!(fence > first_fence, "{step}: the waiter's fence grows");
    let released: i64 = redis::cmd("LOCK.RELEASE")
        .arg(key)
        .arg("waiter")
        .query(&mut holder)
        .expect("LOCK.RELEASE");
    assert_eq!(released, 1, "{step}: the waiter releases");
}

fn redis_cli_follows_redirects(cluster: &Cluster) {
    let step = "redis-cli -c";
    let masters = cluster.masters();
    let (owner, other) = (&masters[0], &masters[1]);
    let key = &cluster.keys_on(owner, "cli:", 1)[0];
    let cli = |args: &[&str]| -> String {
        let port = other.port.to_string();
        let mut all = vec!["-c", "-p", &port];
        all.extend_from_slice(args);
        let out = redis_cli(&all);
        assert!(out.status.success(), "{step}: redis-cli {args:?} failed");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // Sent to a node that does not own the key: redis-cli follows the MOVED.
    let acquired = cli(&["LOCK.ACQUIRE", key, "30000", "TOKEN", "cli-token"]);
    let lines: Vec<&str> = acquired.lines().collect();
    assert_eq!(lines.len(), 2, "{step}: [token, fence] reply: {acquired:?}");
    assert_eq!(lines[0], "cli-token", "{step}: token of the reply");
    let fence: i64 = lines[1].parse().expect("fence is an integer");
    let mut direct = cluster.con(owner.port);
    assert_eq!(
        crate::common::info_field(&mut direct, key, "fence"),
        Some(fence),
        "{step}: the lock is on the owner {}",
        owner.port
    );
    assert!(
        cli(&["LOCK.INFO", key]).contains(&fence.to_string()),
        "{step}: LOCK.INFO shows the fence"
    );
    assert_eq!(
        cli(&["LOCK.EXTEND", key, "cli-token", "40000"]).trim(),
        "1",
        "{step}: extend"
    );
    assert_eq!(
        cli(&["LOCK.RELEASE", key, "cli-token"]).trim(),
        "1",
        "{step}: release"
    );
    assert_eq!(
        cli(&["LOCK.RELEASE", key, "cli-token"]).trim(),
        "0",
        "{step}: release again"
    );
}

fn other_nodes_answer_moved(cluster: &Cluster) {
    let step = "MOVED";
    let masters = cluster.masters();
    let (owner, other) = (&masters[0], &masters[2]);
    let key = &cluster.keys_on(owner, "moved:", 1)[0];
    let slot = key_slot(key.as_bytes());
    let expected = format!("MOVED {slot} 127.0.0.1:{}", owner.port);
    let mut con = cluster.con(other.port);
    let commands = [
        redis::cmd("LOCK.ACQUIRE").arg(key).arg(1000).clone(),
        redis::cmd("LOCK.ACQUIRE")
            .arg(key)
            .arg(1000)
            .arg("WAIT")
            .arg(1000)
            .clone(),
        redis::cmd("LOCK.RELEASE").arg(key).arg("t").clone(),
        redis::cmd("LOCK.EXTEND")
            .arg(key)
            .arg("t")
            .arg(1000)
            .clone(),
        redis::cmd("LOCK.INFO").arg(key).clone(),
    ];
    for cmd in &commands {
        assert_eq!(
            error_of(cmd.query(&mut con)),
            expected,
            "{step}: {:?} on node {} for a key of node {}",
            String::from_utf8_lossy(&cmd.get_packed_command()),
            other.port,
            owner.port
        );
    }
    let local: i64 = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut con)
        .expect("COUNTKEYSINSLOT");
    assert_eq!(local, 0, "{step}: the redirected commands created nothing");
}

fn replicas_serve_lock_info_only_in_readonly_mode(cluster: &Cluster) {
    let step = "replica reads";
    let owner = &cluster.masters()[1];
    let replica = cluster.replica_of(&owner.id);
    let key = &cluster.keys_on(owner, "replica:", 1)[0];
    let slot = key_slot(key.as_bytes());
    let mut master = cluster.con(owner.port);
    let (token, fence) =
        crate::common::acquire(&mut master, key, 30_000, &[]).expect("a free lock");
    crate::common::sync_replicas(&mut master, 1);

    let mut con = cluster.con(replica.port);
    let moved = format!("MOVED {slot} 127.0.0.1:{}", owner.port);
    assert_eq!(
        error_of(redis::cmd("LOCK.INFO").arg(key).query(&mut con)),
        moved,
        "{step}: LOCK.INFO on a replica without READONLY"
    );
    let _: () = redis::cmd("READONLY").query(&mut con).expect("READONLY");
    assert_eq!(
        crate::common::info_field(&mut con, key, "fence"),
        Some(fence),
        "{step}: LOCK.INFO on a READONLY replica connection shows the replicated lock"
    );
    assert_eq!(
        error_of(
            redis::cmd("LOCK.ACQUIRE")
                .arg(key)
                .arg(1000)
                .query(&mut con)
        ),
        moved,
        "{step}: writes on a READONLY replica connection still go to the master"
    );
    assert_eq!(
        crate::common::release(&mut master, key, &token),
        1,
        "{step}: release"
    );
}

/// `LOCK.ACQUIREALL` declares its keys: keys of different slots are refused with
/// `CROSSSLOT` on the node that owns the first, and a hash tag puts them in one slot,
/// where a cluster client routes the command and they are granted at once.
fn several_keys_at_once_need_one_slot(cluster: &Cluster) {
    let step = "several keys";
    let (a, b) = ("transfer:a", "transfer:b");
    assert_ne!(cluster.keyslot(a), cluster.keyslot(b), "{step}: two slots");
    let mut owner = cluster.con(cluster.owner_of(cluster.keyslot(a)).port);
    let err = error_of(
        redis::cmd("LOCK.ACQUIREALL")
            .arg(2)
            .arg(a)
            .arg(b)
            .arg(1000)
            .query(&mut owner),
    );
    assert!(err.starts_with("CROSSSLOT"), "{step}: {err}");
    let exists: i64 = redis::cmd("EXISTS").arg(a).query(&mut owner).unwrap();
    assert_eq!(exists, 0, "{step}: nothing taken");

    let (a, b) = ("{transfer:7}:from", "{transfer:7}:to");
    let mut con = cluster.client();
    let granted: Option<(Vec<u8>, Vec<i64>)> = redis::cmd("LOCK.ACQUIREALL")
        .arg(2)
        .arg(a)
        .arg(b)
        .arg(30_000)
        .query(&mut con)
        .expect("LOCK.ACQUIREALL through the cluster client");
    let (token, fences) = granted.expect("two free keys of one slot");
    assert_eq!(fences.len(), 2, "{step}");
    for key in [a, b] {
        let released: i64 = redis::cmd("LOCK.RELEASE")
            .arg(key)
            .arg(&token)
            .query(&mut con)
            .expect("LOCK.RELEASE");
        assert_eq!(released, 1, "{step}: {key}");
    }
}

fn hash_tags_keep_a_lock_beside_its_data(cluster: &Cluster) {
    let step = "hash tags";
    let (lock_key, data_key) = ("{order:42}:lock", "{order:42}:data");
    let slot = cluster.keyslot(lock_key);
    assert_eq!(
        cluster.keyslot(data_key),
        slot,
        "{step}: one slot for the tag"
    );
    let owner = cluster.owner_of(slot);

    let mut con = cluster.client();
    let (token, _fence): (Vec<u8>, i64) = redis::cmd("LOCK.ACQUIRE")
        .arg(lock_key)
        .arg(30_000)
        .query::<Option<(Vec<u8>, i64)>>(&mut con)
        .expect("LOCK.ACQUIRE")
        .expect("a free lock");
    let _: () = con.set(data_key, "paid").expect("SET");
    let mut direct = cluster.con(owner.port);
    let both: i64 = redis::cmd("EXISTS")
        .arg(lock_key)
        .arg(data_key)
        .query(&mut direct)
        .expect("EXISTS");
    assert_eq!(both, 2, "{step}: lock and data live on the same node");

    // Same slot: one transaction may check the lock and write the data.
    let (extended, set): (i64, String) = redis::pipe()
        .atomic()
        .cmd("LOCK.EXTEND")
        .arg(lock_key)
        .arg(&token)
        .arg(30_000)
        .cmd("SET")
        .arg(data_key)
        .arg("shipped")
        .query(&mut direct)
        .expect("MULTI/EXEC on one slot");
    assert_eq!(
        (extended, set.as_str()),
        (1, "OK"),
        "{step}: MULTI on one slot"
    );

    // Another slot of the same node in the same transaction: CROSSSLOT, as for any keys.
    let elsewhere = &cluster.keys_on(&owner, "crossslot:", 1)[0];
    assert_ne!(key_slot(elsewhere.as_bytes()), slot);
    // Sent one by one: the crate's pipeline hides EXEC's error behind a parse error.
    let _: () = redis::cmd("MULTI").query(&mut direct).expect("MULTI");
    let queued: String = redis::cmd("LOCK.ACQUIRE")
        .arg(elsewhere)
        .arg(1000)
        .query(&mut direct)
        .expect("queue LOCK.ACQUIRE");
    assert_eq!(queued, "QUEUED", "{step}: LOCK.ACQUIRE queued");
    let queued: String = redis::cmd("LOCK.EXTEND")
        .arg(lock_key)
        .arg(&token)
        .arg(30_000)
        .query(&mut direct)
        .expect("queue LOCK.EXTEND");
    assert_eq!(queued, "QUEUED", "{step}: LOCK.EXTEND queued");
    let crossed = error_of(redis::cmd("EXEC").query(&mut direct));
    assert!(
        crossed.starts_with("CROSSSLOT"),
        "{step}: a transaction over two slots answers CROSSSLOT, not {crossed:?}"
    );
    assert_eq!(
        crate::common::info(&mut direct, elsewhere),
        None,
        "{step}: the CROSSSLOT transaction changed nothing"
    );
    assert_eq!(
        crate::common::release(&mut direct, lock_key, &token),
        1,
        "{step}: release"
    );
}

/// `LOCK.DO` (docs/commands.md): routed by its keys, `CROSSSLOT` across slots, `MOVED`
/// from another node.
fn fenced_writes_are_routed_and_stay_in_one_slot(cluster: &Cluster) {
    let step = "LOCK.DO";
    let (lock_key, data_key) = ("{sale:7}:lock", "{sale:7}:stock");
    let slot = cluster.keyslot(lock_key);
    let owner = cluster.owner_of(slot);
    let mut con = cluster.client();
    let (token, _): (Vec<u8>, i64) = redis::cmd("LOCK.ACQUIRE")
        .arg(lock_key)
        .arg(30_000)
        .query::<Option<(Vec<u8>, i64)>>(&mut con)
        .expect("LOCK.ACQUIRE")
        .expect("a free lock");
    // The cluster client routes it by its first key, the lock's, to the tag's node.
    let set: String = redis::cmd("LOCK.DO")
        .arg(lock_key)
        .arg(&token)
        .arg("SET")
        .arg(data_key)
        .arg(10)
        .query(&mut con)
        .expect("LOCK.DO through the cluster client");
    assert_eq!(set, "OK", "{step}: routed");
    let left: i64 = redis::cmd("LOCK.DO")
        .arg(lock_key)
        .arg(&token)
        .arg("DECR")
        .arg(data_key)
        .query(&mut con)
        .expect("LOCK.DO DECR");
    assert_eq!(left, 9, "{step}: the write ran on the key's node");
    let mut direct = cluster.con(owner.port);
    // A key of another slot: CROSSSLOT, nothing run.
    let elsewhere = &cluster.keys_on(&owner, "crossslot-do:", 1)[0];
    let crossed = error_of(
        redis::cmd("LOCK.DO")
            .arg(lock_key)
            .arg(&token)
            .arg("SET")
            .arg(elsewhere)
            .arg(1)
            .query(&mut direct),
    );
    assert!(crossed.starts_with("CROSSSLOT"), "{step}: {crossed:?}");
    assert!(
        !crate::common::exists(&mut direct, elsewhere),
        "{step}: nothing ran"
    );
    // Another node answers MOVED to the owner.
    let other = cluster
        .masters()
        .into_iter()
        .find(|m| m.port != owner.port)
        .expect("another master");
    let moved = error_of(
        redis::cmd("LOCK.DO")
            .arg(lock_key)
            .arg(&token)
            .arg("GET")
            .arg(data_key)
            .query(&mut cluster.con(other.port)),
    );
    assert_eq!(
        moved,
        format!("MOVED {slot} 127.0.0.1:{}", owner.port),
        "{step}: another node redirects"
    );
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("LOCK.DO")
        .arg(lock_key)
        .arg(&token)
        .arg("MSET")
        .arg(data_key)
        .arg(1)
        .arg("{sale:7}:price")
        .arg(2)
        .query(&mut direct)
        .expect("COMMAND GETKEYS");
    assert_eq!(
        keys,
        [lock_key, data_key, "{sale:7}:price"],
        "{step}: keys declared"
    );
    assert_eq!(crate::common::release(&mut direct, lock_key, &token), 1);
}

fn commands_declare_their_key(cluster: &Cluster) {
    let step = "COMMAND GETKEYS";
    let mut con = cluster.con(cluster.live_ports()[0]);
    let cases: [&[&str]; 4] = [
        &["LOCK.ACQUIRE", "k1", "1000", "TOKEN", "t", "WAIT", "5"],
        &["LOCK.RELEASE", "k1", "t"],
        &["LOCK.EXTEND", "k1", "t", "1000"],
        &["LOCK.INFO", "k1"],
    ];
    for args in cases {
        let keys: Vec<String> = redis::cmd("COMMAND")
            .arg("GETKEYS")
            .arg(args)
            .query(&mut con)
            .expect("COMMAND GETKEYS");
        assert_eq!(
            keys,
            ["k1"],
            "{step}: {args:?} has its first argument as key"
        );
    }
}
