//! Atomic slot migration (Valkey 9's `CLUSTER MIGRATESLOTS`) on a real cluster of three
//! masters with a replica each, the module on every node (docs/cluster-and-durability.md,
//! "Atomic slot migration"):
//!
//! - loading the module leaves the migration on: it declares that it handles it;
//! - a cancelled or failed migration leaves the source as it was and the target empty;
//! - a completed one moves every kind of lock whole (token, fence, `acquired`, expiry,
//!   shared and semaphore holders, session bindings), redirects the source's waiters
//!   with `MOVED` as `BLPOP` clients are, trims the source without `lock.release` events
//!   or counted releases, starts session graces on the target only once it owns the
//!   slot, and fences the next grant there above everything before;
//! - the target's replica, promoted right after, has all of it;
//! - migrating a slot back and forth while clients acquire, release and wait never
//!   yields two holders and never loses an acknowledged grant.
//!
//! Servers without atomic slot migration (Redis 7.0 to 8.2, Valkey before 9) skip these
//! tests, saying so.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::cluster_common::{Answer, Cluster, NodeInfo, Waiter, key_slot};
use crate::common::{
    LIMIT, Snapshot, binding, config_set, info_field, info_word, lock_stat, poll_until,
    server_kind, snapshot,
};

/// How long a migration may take before the test calls it stuck.
const MIGRATION_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether the server under test has atomic slot migration; if not, says so.
fn has_atomic_slot_migration(test: &str) -> bool {
    let kind = server_kind();
    let has = kind.valkey && kind.version >= (9, 0, 0);
    if !has {
        println!("{test}: skipped, {kind} has no atomic slot migration (Valkey 9+)");
    }
    has
}

/// The jobs `CLUSTER GETSLOTMIGRATIONS` lists on `con`, each as its text fields.
fn jobs(con: &mut redis::Connection) -> Vec<HashMap<String, String>> {
    let jobs: Vec<HashMap<String, redis::Value>> = redis::cmd("CLUSTER")
        .arg("GETSLOTMIGRATIONS")
        .query(con)
        .expect("CLUSTER GETSLOTMIGRATIONS");
    let text = |value: redis::Value| match value {
        redis::Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        redis::Value::SimpleString(text) => text,
        redis::Value::Int(n) => n.to_string(),
        other => format!("{other:?}"),
    };
    jobs.into_iter()
        .map(|job| job.into_iter().map(|(k, v)| (k, text(v))).collect())
        .collect()
}

/// The state of job `name` on `con`.
fn job_state(con: &mut redis::Connection, name: &str) -> String {
    jobs(con)
        .into_iter()
        .find(|job| job["name"] == name)
        .map(|job| job["state"].clone())
        .unwrap_or_else(|| panic!("no migration job {name}"))
}

/// Starts moving `slot` from `source` to `target` (`CLUSTER MIGRATESLOTS`): the name of
/// the job on the source.
fn start_migration(cluster: &Cluster, source: &NodeInfo, target: &NodeInfo, slot: u16) -> String {
    let mut con = cluster.con(source.port);
    let names = |con: &mut redis::Connection| -> Vec<String> {
        jobs(con)
            .into_iter()
            .map(|job| job["name"].clone())
            .collect()
    };
    let known = names(&mut con);
    let started: redis::RedisResult<String> = redis::cmd("CLUSTER")
        .arg("MIGRATESLOTS")
        .arg("SLOTSRANGE")
        .arg(slot)
        .arg(slot)
        .arg("NODE")
        .arg(&target.id)
        .query(&mut con);
    assert_eq!(
        started.as_deref(),
        Ok("OK"),
        "CLUSTER MIGRATESLOTS {slot} from {} to {} (refused if a module does not declare it)",
        source.port,
        target.port
    );
    names(&mut con)
        .into_iter()
        .find(|name| !known.contains(name))
        .expect("the new migration job")
}

/// Waits until job `name` of the source reaches a final state, and returns that state.
fn finished_job(cluster: &Cluster, source: &NodeInfo, name: &str) -> String {
    let mut con = cluster.con(source.port);
    let mut state = String::new();
    poll_until(MIGRATION_TIMEOUT, "the migration to finish", || {
        state = job_state(&mut con, name);
        matches!(state.as_str(), "success" | "failed" | "cancelled")
    });
    state
}

/// Moves `slot` from `source` to `target` and waits until every node agrees.
fn migrate(cluster: &Cluster, source: &NodeInfo, target: &NodeInfo, slot: u16) {
    let job = start_migration(cluster, source, target, slot);
    let state = finished_job(cluster, source, &job);
    assert_eq!(state, "success", "migration of slot {slot}");
    poll_until(MIGRATION_TIMEOUT, "every node to see the new owner", || {
        cluster.owner_of(slot).port == target.port
    });
}

/// Waits until job `name` of the source is in `state` (a step of an unfinished migration).
fn wait_for_job_state(cluster: &Cluster, source: &NodeInfo, name: &str, state: &str) {
    let mut con = cluster.con(source.port);
    poll_until(
        MIGRATION_TIMEOUT,
        &format!("the migration to be {state}"),
        || job_state(&mut con, name) == state,
    );
}

/// Keys in the slot of `tag` that the source's snapshot must write before the migration
/// can end: with `rdb-key-save-delay`, they hold the migration in its snapshot for
/// `count` times the delay. Each is large enough (8 KB) that the snapshot reaches the
/// target in many pieces, the locks among them arriving at different times.
fn fill_slot(con: &mut redis::Connection, tag: &str, count: usize) {
    let filler = vec![b'x'; 8192];
    let mut pipe = redis::pipe();
    for i in 0..count {
        pipe.cmd("SET")
            .arg(format!("{{{tag}}}:filler:{i}"))
            .arg(&filler)
            .ignore();
    }
    let _: () = pipe.query(con).expect("fill the slot");
}

/// A hash tag whose slot `node` serves.
fn tag_on(node: &NodeInfo, prefix: &str) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|tag| node.serves(key_slot(tag.as_bytes())))
        .expect("a tag on the node")
}

fn count_in_slot(con: &mut redis::Connection, slot: u16) -> i64 {
    redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(con)
        .expect("CLUSTER COUNTKEYSINSLOT")
}

/// How long the session-bound locks outlive their connection.
const GRACE_MS: i64 = 1000;

/// How many more session-bound locks the slot holds: each arrives on the target at its
/// own point of a snapshot that lasts twice their grace, so that a target that started
/// their graces on arrival, not on completion, would have released some before the end.
const SESSION_LOCKS: usize = 12;

/// The locks of one slot, of every kind, with what the test needs to recognize them.
struct Locks {
    tag: String,
    exclusive: String,
    session: String,
    /// More session-bound locks, all bound to the same connection as `session`.
    sessions: Vec<String>,
    shared: String,
    semaphore: String,
    /// Two keys granted at once (`LOCK.ACQUIREALL`, token `all`).
    all: [String; 2],
    /// The largest fence granted in the slot.
    top_fence: i64,
}

impl Locks {
    fn keys(&self) -> [&String; 6] {
        [
            &self.exclusive,
            &self.session,
            &self.shared,
            &self.semaphore,
            &self.all[0],
            &self.all[1],
        ]
    }

    /// Takes one lock of each kind in the slot of a new tag on `con`'s node: an exclusive
    /// lock with a published value (released and granted again first, so its fence has
    /// history), a session-bound
    /// ones bound to `holder` (which stays open), two shared holders and a semaphore of
    /// limit 3 with two holders.
    fn take(con: &mut redis::Connection, holder: &mut redis::Connection, tag: String) -> Self {
        let key = |name: &str| format!("{{{tag}}}:{name}");
        let (exclusive, session, shared, semaphore) = (
            key("exclusive"),
            key("session"),
            key("shared"),
            key("semaphore"),
        );
        let mut top_fence = 0;
        let mut take = |con: &mut redis::Connection, k: &str, args: &[&str]| {
            let (_, fence) = crate::common::acquire(con, k, 60_000, args).expect("a free lock");
            top_fence = top_fence.max(fence);
        };
        take(con, &exclusive, &["TOKEN", "first"]);
        assert_eq!(crate::common::release(con, &exclusive, b"first"), 1);
        // Its published value moves with it: the digests compared after a migration
        // cover it.
        take(con, &exclusive, &["TOKEN", "owner", "VALUE", "owner:6379"]);
        let grace = GRACE_MS.to_string();
        take(holder, &session, &["TOKEN", "bound", "SESSION", &grace]);
        let sessions: Vec<String> = (0..SESSION_LOCKS)
            .map(|i| key(&format!("session:{i}")))
            .collect();
        for other in &sessions {
            take(holder, other, &["TOKEN", "bound", "SESSION", &grace]);
        }
        take(con, &shared, &["SHARED", "TOKEN", "reader-1"]);
        take(con, &shared, &["SHARED", "TOKEN", "reader-2"]);
        take(con, &semaphore, &["LIMIT", "3", "TOKEN", "permit-1"]);
        take(con, &semaphore, &["LIMIT", "3", "TOKEN", "permit-2"]);
        let all = [key("all:1"), key("all:2")];
        let (_, fences) =
            crate::common::acquire_all(con, &[&all[0], &all[1]], 60_000, &["TOKEN", "all"])
                .expect("two free keys at once");
        top_fence = top_fence.max(fences[0]).max(fences[1]);
        Self {
            tag,
            exclusive,
            session,
            sessions,
            shared,
            semaphore,
            all,
            top_fence,
        }
    }

    fn snapshots(&self, con: &mut redis::Connection) -> Vec<Snapshot> {
        self.keys().iter().map(|key| snapshot(con, key)).collect()
    }
}

/// The state of the source's locks that a migration that did not happen must not touch.
fn assert_untouched(con: &mut redis::Connection, locks: &Locks, before: &[Snapshot], step: &str) {
    assert_eq!(
        locks.snapshots(con),
        before,
        "{step}: the source's locks are as they were"
    );
    assert_eq!(info_field(con, &locks.shared, "holders"), Some(2), "{step}");
    assert_eq!(
        info_field(con, &locks.semaphore, "limit"),
        Some(3),
        "{step}"
    );
    assert_eq!(
        binding(con, &locks.session),
        (GRACE_MS, 1),
        "{step}: the session-bound lock is still bound to its open connection"
    );
}

#[test]
fn atomic_slot_migration_moves_locks_whole_and_leaves_the_source_whole_when_it_fails() {
    if !has_atomic_slot_migration("atomic slot migration") {
        return;
    }
    let cluster = Cluster::start(3);
    let masters = cluster.masters();
    let (source, target) = (&masters[0], &masters[1]);
    let mut src = cluster.con(source.port);
    let mut dst = cluster.con(target.port);
    let mut holder = cluster.con(source.port);
    let locks = Locks::take(&mut src, &mut holder, tag_on(source, "asm"));
    let slot = key_slot(locks.tag.as_bytes());
    fill_slot(&mut src, &locks.tag, 400);
    let waiter = Waiter::start(
        cluster.node(source.port),
        &locks.exclusive,
        "waiter",
        30_000,
        60_000,
    );
    crate::cluster_common::wait_for_waiters(&mut src, &locks.exclusive, 1);
    // A waiter for several keys of the slot, one of them free and kept for it.
    let free = format!("{{{}}}:free", locks.tag);
    let waiter_all = Waiter::start_all(
        cluster.node(source.port),
        &[&free, &locks.all[1]],
        "waiter-all",
        30_000,
        60_000,
    );
    crate::cluster_common::wait_for_waiters(&mut src, &locks.all[1], 1);
    let before = locks.snapshots(&mut src);

    // A slow snapshot (5 ms a key) keeps each migration in flight long enough to stop it.
    config_set(&mut src, "rdb-key-save-delay", "5000");

    let step = "cancelled migration";
    let job = start_migration(&cluster, source, target, slot);
    wait_for_job_state(&cluster, source, &job, "snapshotting");
    let _: () = redis::cmd("CLUSTER")
        .arg("CANCELSLOTMIGRATIONS")
        .query(&mut src)
        .expect("CLUSTER CANCELSLOTMIGRATIONS");
    assert_eq!(finished_job(&cluster, source, &job), "cancelled", "{step}");
    assert_stopped_migration_left_nothing(&cluster, source, target, &locks, &before, step);

    let step = "failed migration";
    let job = start_migration(&cluster, source, target, slot);
    wait_for_job_state(&cluster, source, &job, "snapshotting");
    // The target loses its connection to the source: the import fails there.
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("slot-import")
        .query(&mut dst)
        .or_else(|_| kill_import_client(&mut dst))
        .expect("kill the import connection");
    assert!(killed >= 1, "{step}: the import connection was killed");
    assert_eq!(finished_job(&cluster, source, &job), "failed", "{step}");
    assert_stopped_migration_left_nothing(&cluster, source, target, &locks, &before, step);
    assert!(
        waiter.answer_within(Duration::from_millis(100)).is_none(),
        "the waiter still waits on the source after two stopped migrations"
    );
    assert!(waiter_all.answer_within(Duration::from_millis(1)).is_none());

    completed_migration_moves_every_kind(&cluster, source, target, &locks, &before, waiter);
    let moved = format!("MOVED {slot} 127.0.0.1:{}", target.port);
    assert_eq!(
        waiter_all.answer_within(LIMIT),
        Some(Answer::Error(moved)),
        "the waiter for several keys is redirected"
    );
    promoted_replica_of_the_target_has_the_locks(&cluster, target, &locks);
    drop(holder);
}

/// Finds the target's import connection in `CLIENT LIST` (the `i` flag) and kills it,
/// for servers whose `CLIENT KILL` has no type for it.
fn kill_import_client(con: &mut redis::Connection) -> redis::RedisResult<i64> {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(con)?;
    let id = list
        .lines()
        .find(|line| line.split_whitespace().any(|field| field == "flags=i"))
        .and_then(|line| line.split_whitespace().find_map(|f| f.strip_prefix("id=")))
        .expect("the import connection in CLIENT LIST")
        .to_string();
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(id)
        .query(con)
}

fn assert_stopped_migration_left_nothing(
    cluster: &Cluster,
    source: &NodeInfo,
    target: &NodeInfo,
    locks: &Locks,
    before: &[Snapshot],
    step: &str,
) {
    let mut src = cluster.con(source.port);
    let mut dst = cluster.con(target.port);
    let slot = key_slot(locks.tag.as_bytes());
    assert_eq!(
        cluster.owner_of(slot).port,
        source.port,
        "{step}: the source owns the slot"
    );
    assert_untouched(&mut src, locks, before, step);
    assert_eq!(
        info_field(&mut src, &locks.exclusive, "waiters"),
        Some(1),
        "{step}"
    );
    poll_until(LIMIT, "the target to drop what the import brought", || {
        count_in_slot(&mut dst, slot) == 0 && crate::common::dbsize(&mut dst) == 0
    });
    assert_eq!(
        lock_stat(&mut dst, "lock_releases"),
        0,
        "{step}: the target released nothing"
    );
    assert_eq!(
        lock_stat(&mut dst, "lock_session_releases"),
        0,
        "{step}: the target ended no grace"
    );
}

fn completed_migration_moves_every_kind(
    cluster: &Cluster,
    source: &NodeInfo,
    target: &NodeInfo,
    locks: &Locks,
    before: &[Snapshot],
    waiter: Waiter,
) {
    let step = "completed migration";
    let slot = key_slot(locks.tag.as_bytes());
    let target_addr = format!("127.0.0.1:{}", target.port);
    let mut src = cluster.con(source.port);
    let mut dst = cluster.con(target.port);
    // What BLPOP clients on the source are answered when their slot leaves.
    let list_waiter = {
        let mut con = cluster.con(source.port);
        let key = format!("{{{}}}:list", locks.tag);
        thread::spawn(move || {
            let reply: redis::RedisResult<redis::Value> =
                redis::cmd("BLPOP").arg(key).arg(60).query(&mut con);
            crate::common::error_of(reply)
        })
    };
    // Keyspace events of the source's locks, to see that the trim sends none.
    let mut events = cluster.con(source.port);
    config_set(&mut events, "notify-keyspace-events", "KEA");
    let mut pubsub = events.as_pubsub();
    pubsub
        .psubscribe(format!("__keyspace@0__:{{{}}}:*", locks.tag))
        .expect("PSUBSCRIBE");
    pubsub
        .set_read_timeout(Some(Duration::from_millis(50)))
        .expect("read timeout");
    let releases_before = lock_stat(&mut src, "lock_releases");

    let job = start_migration(cluster, source, target, slot);
    assert_eq!(finished_job(cluster, source, &job), "success", "{step}");
    // Right after the import completed: every lock arrived whole, the session-bound ones
    // included (their graces start now that the target owns them, not when they arrived).
    assert_eq!(
        locks.snapshots(&mut dst),
        before,
        "{step}: the locks arrived whole"
    );
    for key in &locks.sessions {
        assert_eq!(
            binding(&mut dst, key),
            (GRACE_MS, 0),
            "{step}: {key} is on the target, in grace since the import completed"
        );
    }
    assert_eq!(
        info_field(&mut dst, &locks.shared, "holders"),
        Some(2),
        "{step}"
    );
    assert_eq!(
        info_word(&mut dst, &locks.shared, "mode").as_deref(),
        Some("shared")
    );
    assert_eq!(
        info_field(&mut dst, &locks.semaphore, "holders"),
        Some(2),
        "{step}"
    );
    assert_eq!(
        info_field(&mut dst, &locks.semaphore, "limit"),
        Some(3),
        "{step}"
    );
    assert_eq!(
        binding(&mut dst, &locks.session).0,
        GRACE_MS,
        "{step}: still session-bound"
    );
    poll_until(MIGRATION_TIMEOUT, "every node to see the new owner", || {
        cluster.owner_of(slot).port == target.port
    });

    // The source's waiter and BLPOP client are both sent to the new owner.
    let moved = format!("MOVED {slot} {target_addr}");
    assert_eq!(
        waiter.answer_within(LIMIT),
        Some(Answer::Error(moved.clone())),
        "{step}: the waiter is redirected"
    );
    assert_eq!(
        list_waiter.join().expect("BLPOP thread"),
        moved,
        "{step}: BLPOP likewise"
    );

    // The source was trimmed: its locks are gone without being released.
    assert_eq!(
        count_in_slot(&mut src, slot),
        0,
        "{step}: the source keeps nothing"
    );
    assert_eq!(
        lock_stat(&mut src, "lock_releases"),
        releases_before,
        "{step}: no release counted"
    );
    let mut seen = Vec::new();
    while let Ok(message) = pubsub.get_message() {
        seen.push(message.get_payload::<String>().expect("event name"));
    }
    assert!(
        !seen.iter().any(|event| event.starts_with("lock.")),
        "{step}: the trim sends no lock events, saw {seen:?}"
    );
    drop(pubsub);

    // The locks hold on the target for their tokens only; the next grant fences above.
    assert_eq!(
        crate::common::acquire(&mut dst, &locks.exclusive, 1000, &["TOKEN", "x"]),
        None
    );
    assert_eq!(
        crate::common::release(&mut dst, &locks.exclusive, b"owner"),
        1,
        "{step}"
    );
    let (_, fence) = crate::common::acquire(&mut dst, &locks.exclusive, 60_000, &["TOKEN", "next"])
        .expect("free on the target");
    assert!(
        fence > locks.top_fence,
        "{step}: the target's grant {fence} fences above the source's {}",
        locks.top_fence
    );
    assert_eq!(
        crate::common::release(&mut dst, &locks.shared, b"reader-1"),
        1,
        "{step}"
    );
    assert!(
        crate::common::acquire(
            &mut dst,
            &locks.semaphore,
            60_000,
            &["LIMIT", "3", "TOKEN", "p3"]
        )
        .is_some(),
        "{step}: the semaphore has one permit left on the target"
    );
    assert_eq!(
        crate::common::acquire(
            &mut dst,
            &locks.semaphore,
            60_000,
            &["LIMIT", "3", "TOKEN", "p4"]
        ),
        None,
        "{step}: and no more"
    );

    // The session-bound locks' connection stayed on the source: on the target they are
    // in grace from the completion on, and released when the grace ends.
    for key in locks.sessions.iter().chain([&locks.session]) {
        crate::common::wait_gone(&mut dst, key, "the grace to end on the target");
    }
    assert_eq!(
        lock_stat(&mut dst, "lock_session_releases"),
        SESSION_LOCKS as i64 + 1,
        "{step}"
    );
}

/// Right after the migration, the target's replica takes over: it has every lock the
/// migration brought, and its own grants fence above them.
fn promoted_replica_of_the_target_has_the_locks(
    cluster: &Cluster,
    target: &NodeInfo,
    locks: &Locks,
) {
    let step = "failover after migration";
    let mut dst = cluster.con(target.port);
    crate::common::sync_replicas(&mut dst, 1);
    let replica = cluster.replica_of(&target.id);
    let fences: Vec<Option<i64>> = locks
        .keys()
        .iter()
        .map(|key| info_field(&mut dst, key, "fence"))
        .collect();
    cluster.take_over(replica.port);
    poll_until(MIGRATION_TIMEOUT, "the replica to take over", || {
        cluster.owner_of(key_slot(locks.tag.as_bytes())).port == replica.port
    });
    cluster.wait_healthy(step);
    let mut rep = cluster.con(replica.port);
    for (key, fence) in locks.keys().iter().zip(&fences) {
        assert_eq!(info_field(&mut rep, key, "fence"), *fence, "{step}: {key}");
    }
    let top = fences.iter().flatten().max().copied().unwrap_or(0);
    assert_eq!(
        crate::common::release(&mut rep, &locks.exclusive, b"next"),
        1,
        "{step}"
    );
    let (_, fence) = crate::common::acquire(&mut rep, &locks.exclusive, 1000, &[]).expect("free");
    assert!(fence > top, "{step}: {fence} fences above {top}");
}

#[test]
fn migrating_back_and_forth_under_load_never_yields_two_holders() {
    if !has_atomic_slot_migration("atomic slot migration chaos") {
        return;
    }
    let cluster = Cluster::start(3);
    let masters = cluster.masters();
    let (a, b) = (masters[0].clone(), masters[1].clone());
    let tag = tag_on(&a, "chaos");
    let slot = key_slot(tag.as_bytes());
    let keys: Vec<String> = (0..3).map(|i| format!("{{{tag}}}:k{i}")).collect();

    // Who believes they hold each key now, and every fence acknowledged per key.
    let holders: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    let fences: Arc<Mutex<HashMap<String, Vec<i64>>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let sections = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..6)
        .map(|w| {
            let (keys, holders, fences) = (keys.clone(), holders.clone(), fences.clone());
            let (stop, sections) = (stop.clone(), sections.clone());
            let mut con = cluster.client();
            thread::spawn(move || {
                let mut round = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    round += 1;
                    let key = &keys[(w + round as usize) % keys.len()];
                    let token = format!("w{w}-{round}");
                    // A retried acquire with the same token is idempotent, so the cluster
                    // client may follow redirects freely.
                    let granted: Option<(String, i64)> = redis::cmd("LOCK.ACQUIRE")
                        .arg(key)
                        .arg(20_000)
                        .arg("TOKEN")
                        .arg(&token)
                        .arg("WAIT")
                        .arg(2_000)
                        .query(&mut con)
                        .unwrap_or_else(|e| panic!("{token}: LOCK.ACQUIRE failed: {e}"));
                    let Some((_, fence)) = granted else {
                        continue;
                    };
                    if let Some(other) = holders.lock().unwrap().insert(key.clone(), token.clone())
                    {
                        panic!("{token} was granted {key} while {other} held it");
                    }
                    fences
                        .lock()
                        .unwrap()
                        .entry(key.clone())
                        .or_default()
                        .push(fence);
                    thread::sleep(Duration::from_millis(2));
                    holders.lock().unwrap().remove(key);
                    let released: i64 = redis::cmd("LOCK.RELEASE")
                        .arg(key)
                        .arg(&token)
                        .query(&mut con)
                        .unwrap_or_else(|e| panic!("{token}: LOCK.RELEASE failed: {e}"));
                    assert_eq!(
                        released, 1,
                        "{token}: the acknowledged grant of {key} was lost"
                    );
                    sections.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();

    let mut moves = 0;
    let (mut from, mut to) = (a, b);
    let deadline = Instant::now() + Duration::from_secs(8);
    while Instant::now() < deadline || moves < 4 {
        let before = sections.load(Ordering::Relaxed);
        poll_until(LIMIT, "clients to make progress between moves", || {
            sections.load(Ordering::Relaxed) >= before + 20
        });
        migrate(&cluster, &from, &to, slot);
        moves += 1;
        std::mem::swap(&mut from, &mut to);
    }
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker
            .join()
            .expect("a client saw two holders or a lost grant");
    }
    for (key, fences) in fences.lock().unwrap().iter() {
        assert!(
            fences.windows(2).all(|w| w[0] < w[1]),
            "fences of {key} only grow across {moves} moves: {fences:?}"
        );
    }
    println!(
        "{moves} moves, {} critical sections",
        sections.load(Ordering::Relaxed)
    );
}
