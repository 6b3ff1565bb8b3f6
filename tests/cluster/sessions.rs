//! Session-bound locks on a real Redis Cluster (3 masters, 3 replicas, the module on
//! every node): after a slot moves to another master, and after `CLUSTER FAILOVER TAKEOVER`, the
//! bound connection is gone by definition; the grace starts on the node that now serves
//! the key, and the owner reclaims its lock there with the same fence.

use std::time::{Duration, Instant};

use crate::cluster_common::{Cluster, NodeInfo, key_slot, setslot};
use crate::common::{acquire, binding, exists, info_field, lock_stat, poll_until, session_lock};

const GRACE_MS: i64 = 1_000;

/// Two session-bound locks on `node`, in one slot (a hash tag): `kept` (token `owner`)
/// and `lost` (token `gone`). Returns their names and fences, and the holder's
/// connection, which stays open on `node`.
fn hold_two(
    cluster: &Cluster,
    node: &NodeInfo,
    tag_prefix: &str,
) -> ([String; 2], [i64; 2], redis::Connection) {
    let tag = (0..)
        .map(|i| format!("{tag_prefix}{i}"))
        .find(|tag| node.serves(key_slot(tag.as_bytes())))
        .expect("a tag on the node");
    let names = [format!("{{{tag}}}:kept"), format!("{{{tag}}}:lost")];
    let mut holder = cluster.con(node.port);
    let fences = [
        session_lock(&mut holder, &names[0], "owner", GRACE_MS),
        session_lock(&mut holder, &names[1], "gone", GRACE_MS),
    ];
    (names, fences, holder)
}

/// On `port`, which has just started serving the two locks: the grace runs, the owner
/// reclaims `kept` with its fence, `lost` goes when the grace ends.
fn grace_runs_on(
    cluster: &Cluster,
    port: u16,
    (names, fences): (&[String; 2], [i64; 2]),
    since: Instant,
    step: &str,
) {
    let mut con = cluster.con(port);
    assert_eq!(binding(&mut con, &names[0]), (GRACE_MS, 0), "{step}");
    assert_eq!(binding(&mut con, &names[1]), (GRACE_MS, 0), "{step}");
    let grace = GRACE_MS.to_string();
    let reclaimed = acquire(
        &mut con,
        &names[0],
        60_000,
        &["TOKEN", "owner", "SESSION", &grace],
    );
    assert_eq!(reclaimed, Some((b"owner".to_vec(), fences[0])), "{step}");
    poll_until(
        Duration::from_secs(10),
        &format!("{step}: the unclaimed lock to go"),
        || !exists(&mut con, &names[1]),
    );
    assert!(
        since.elapsed() >= Duration::from_millis(GRACE_MS as u64),
        "{step}: not before the grace ends"
    );
    assert!(
        exists(&mut con, &names[0]),
        "{step}: the reclaimed lock stays"
    );
    assert_eq!(lock_stat(&mut con, "lock_session_releases"), 1, "{step}");
    assert_eq!(lock_stat(&mut con, "lock_session_reclaims"), 1, "{step}");
    assert_eq!(info_field(&mut con, &names[0], "fence"), Some(fences[0]));
}

#[test]
fn session_bound_locks_after_a_slot_move_and_a_failover() {
    let cluster = Cluster::start(3);
    let masters = cluster.masters();

    // A slot moves from the first master to the second, its holder still connected to
    // the first.
    let step = "slot move";
    let (source, target) = (&masters[0], &masters[1]);
    let (names, fences, _holder) = hold_two(&cluster, source, "s");
    let slot = key_slot(names[0].as_bytes());
    let moved = Instant::now();
    setslot(&cluster, target.port, slot, "IMPORTING", &source.id);
    setslot(&cluster, source.port, slot, "MIGRATING", &target.id);
    let migrated: String = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(target.port)
        .arg("")
        .arg(0)
        .arg(5000)
        .arg("KEYS")
        .arg(&names[0])
        .arg(&names[1])
        .query(&mut cluster.con(source.port))
        .expect("MIGRATE");
    assert_eq!(migrated, "OK");
    for port in [target.port, source.port] {
        setslot(&cluster, port, slot, "NODE", &target.id);
    }
    grace_runs_on(&cluster, target.port, (&names, fences), moved, step);

    // The third master's replica takes over by CLUSTER FAILOVER TAKEOVER, the holder still
    // connected to the old master.
    let step = "CLUSTER FAILOVER TAKEOVER";
    let old = &masters[2];
    let (names, fences, mut holder) = hold_two(&cluster, old, "f");
    let _: () = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query::<i64>(&mut holder)
        .map(|acked| assert_eq!(acked, 1, "{step}: the replica has the locks"))
        .expect("WAIT");
    let new = cluster.replica_of(&old.id);
    let promoted = Instant::now();
    cluster.take_over(new.port);
    poll_until(
        crate::cluster_common::HEAL_TIMEOUT,
        &format!("{step}: the replica to be promoted"),
        || {
            let role: Vec<redis::Value> = redis::cmd("ROLE")
                .query(&mut cluster.con(new.port))
                .expect("ROLE");
            matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"master")
        },
    );
    grace_runs_on(&cluster, new.port, (&names, fences), promoted, step);
}
