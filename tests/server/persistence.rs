//! Persistence: a lock survives a restart from RDB, from AOF (with and without RDB
//! preamble, before and after a rewrite) and `DEBUG RELOAD` with the same token, fence,
//! grant time and absolute expiry, and the next fence exceeds every fence granted
//! before, including fences of locks released before the restart.

use std::time::Duration;

use crate::common::*;

/// A binary token: NUL, high bytes, CRLF and a space must survive every format.
const OWN_TOKEN: &[u8] = b"own\x00\xff token\r\n";

/// AOF on, without an RDB preamble: every lock is a `LOCK._SET` command in the AOF.
const PURE_AOF: [&str; 4] = ["--appendonly", "yes", "--aof-use-rdb-preamble", "no"];

/// A held lock, its token and its state before the restart.
struct Held {
    key: &'static str,
    token: Vec<u8>,
    before: Snapshot,
}

/// Locks granted before a restart: the ones still held and the largest fence granted.
struct Granted {
    held: Vec<Held>,
    max_fence: i64,
}

/// Grants a lock with a server-made token, one with an own binary token (then extended,
/// so its expiry comes from a later command), and one released at once.
fn grant_locks(con: &mut redis::Connection) -> Granted {
    let (made, made_fence) = acquire(con, "made", 600_000, &[]).expect("free");
    let (own, own_fence) = acquire_as(con, "own", 300_000, OWN_TOKEN).expect("free");
    assert_eq!(own, OWN_TOKEN);
    assert_eq!(extend(con, "own", OWN_TOKEN, 900_000), 1);
    let (gone, gone_fence) = acquire(con, "released", 600_000, &[]).expect("free");
    assert_eq!(release(con, "released", &gone), 1);
    let held = vec![
        Held {
            key: "made",
            before: snapshot(con, "made"),
            token: made,
        },
        Held {
            key: "own",
            before: snapshot(con, "own"),
            token: own,
        },
    ];
    Granted {
        held,
        max_fence: made_fence.max(own_fence).max(gone_fence),
    }
}

/// The locks are still held with the same state, the next fence exceeds every fence
/// granted before, and each lock is released with its own token (last, since that
/// changes the state).
fn assert_locks_survived(con: &mut redis::Connection, granted: &Granted) {
    for lock in &granted.held {
        assert_eq!(
            snapshot(con, lock.key),
            lock.before,
            "lock {} changed",
            lock.key
        );
        assert!(pttl(con, lock.key) > 0, "{} has no time left", lock.key);
    }
    let (_, next) = acquire(con, "released", 1_000, &[]).expect("free");
    assert!(
        next > granted.max_fence,
        "{next} after {}",
        granted.max_fence
    );
    for lock in &granted.held {
        assert_eq!(
            release(con, lock.key, &lock.token),
            1,
            "{} not held by its token",
            lock.key
        );
    }
}

/// Rewrites the AOF and waits until the rewrite is done.
fn rewrite_aof(con: &mut redis::Connection) {
    let _: String = redis::cmd("BGREWRITEAOF").query(con).unwrap();
    wait_for_aof_rewrite(con);
    let info = server_info(con, "persistence");
    assert!(info.contains("aof_last_bgrewrite_status:ok"), "{info}");
}

fn save(con: &mut redis::Connection) {
    let _: () = redis::cmd("SAVE").query(con).unwrap();
}

/// Grants locks on `server`, persists them with `persist` (which may also change what
/// `grant_locks` recorded), restarts, and checks that the locks survived.
fn assert_locks_survive_a_restart(
    mut server: TestServer,
    persist: impl FnOnce(&mut TestServer, &mut Granted),
) {
    let mut granted = grant_locks(&mut server.connection());
    persist(&mut server, &mut granted);
    server.restart();
    assert_locks_survived(&mut server.connection(), &granted);
}

/// Releases the lock of a server whose fence is a year ahead (started with `extra`
/// arguments), persists with `persist`, restarts with `restart`, and checks that the
/// next fence exceeds the released one: only the persisted clock can know it.
fn assert_a_released_fence_survives(
    extra: &[&str],
    persist: impl FnOnce(&mut TestServer),
    restart: impl FnOnce(&mut TestServer),
) {
    let (mut server, future) = server_with_future_fence("future", "holder", extra);
    assert_eq!(release(&mut server.connection(), "future", b"holder"), 1);
    persist(&mut server);
    restart(&mut server);
    let (_, next) = acquire(&mut server.connection(), "future", 1_000, &[]).expect("free");
    assert!(next > future, "{next} after {future}");
}

#[test]
fn an_rdb_restart_keeps_token_fence_grant_time_and_expiry() {
    assert_locks_survive_a_restart(TestServer::start(), |server, _| {
        save(&mut server.connection())
    });
}

#[test]
fn an_rdb_restart_keeps_the_high_water_mark_of_locks_released_before_the_save() {
    assert_a_released_fence_survives(
        &[],
        |server| save(&mut server.connection()),
        |server| {
            // RDB only: no key holds the fence any more, only the saved high-water mark does.
            server.restart_with(&[]);
            assert_eq!(dbsize(&mut server.connection()), 0);
        },
    );
}

#[test]
fn an_aof_restart_keeps_token_fence_grant_time_and_expiry() {
    assert_locks_survive_a_restart(TestServer::with_args(&PURE_AOF), |_, _| {});
}

#[test]
fn an_aof_restart_after_a_rewrite_keeps_token_fence_grant_time_and_expiry() {
    assert_locks_survive_a_restart(TestServer::with_args(&PURE_AOF), |server, _| {
        rewrite_aof(&mut server.connection());
        let base = aof_files(server, "type b");
        assert!(base.starts_with(b"*"), "base is not a plain AOF");
        assert!(
            contains(&base, b"LOCK._SET"),
            "the rewrite emitted no LOCK._SET"
        );
    });
}

#[test]
fn an_aof_with_rdb_preamble_keeps_token_fence_grant_time_and_expiry() {
    let server = TestServer::with_args(&["--appendonly", "yes"]);
    assert_locks_survive_a_restart(server, |server, granted| {
        let mut con = server.connection();
        rewrite_aof(&mut con);
        assert!(is_rdb(&aof_files(server, "type b")), "base is not an RDB");
        // A change after the rewrite lands in the incremental file, after the preamble.
        assert_eq!(
            extend(&mut con, "made", &granted.held[0].token, 1_200_000),
            1
        );
        granted.held[0].before = snapshot(&mut con, "made");
    });
}

#[test]
fn an_aof_with_rdb_preamble_keeps_the_high_water_mark_of_released_locks() {
    assert_a_released_fence_survives(
        &[],
        |server| {
            // The rewrite drops the LOCK._SET and DEL: only the preamble's high-water mark
            // still knows the fence.
            rewrite_aof(&mut server.connection());
            assert!(is_rdb(&aof_files(server, "type b")), "base is not an RDB");
        },
        TestServer::restart,
    );
}

#[test]
fn an_aof_replay_raises_the_clock_to_the_fences_it_replays() {
    // No rewrite: the replay sets the lock with its fence, then deletes it.
    assert_a_released_fence_survives(
        &["--aof-use-rdb-preamble", "no"],
        |_| {},
        TestServer::restart,
    );
}

#[test]
fn a_rewritten_pure_aof_without_locks_still_restarts_with_higher_fences() {
    // No preamble and no lock key left: the AOF carries no fence at all, and the wall
    // clock alone must put the next fence above the old ones.
    let mut server = TestServer::with_args(&PURE_AOF);
    let mut con = server.connection();
    let (token, before) = acquire(&mut con, "k", 600_000, &[]).expect("free");
    assert_eq!(release(&mut con, "k", &token), 1);
    rewrite_aof(&mut con);
    server.restart();
    let (_, after) = acquire(&mut server.connection(), "k", 1_000, &[]).expect("free");
    assert!(after > before, "{after} after {before}");
}

#[test]
fn an_aof_with_fsync_always_keeps_the_locks_through_a_crash() {
    let server = TestServer::with_args(&AOF_ALWAYS);
    assert_locks_survive_a_restart(server, |server, _| server.kill());
}

/// Grants a short lock, persists with `persist`, stops the server, waits until the
/// lock's expiry has passed, restarts, and checks that the lock is gone.
fn assert_expired_while_down_is_gone(mut server: TestServer, persist: fn(&mut TestServer)) {
    let mut con = server.connection();
    let (_, before) = acquire(&mut con, "short", 1_500, &[]).expect("free");
    let expire_at = pexpiretime(&mut con, "short");
    persist(&mut server);
    server.stop();
    assert!(
        now_ms() < expire_at,
        "the lock expired before the server stopped: the test proves nothing"
    );
    poll_until(Duration::from_secs(5), "the expiry passes", || {
        now_ms() > expire_at + 20
    });
    server.restart();
    let mut con = server.connection();
    assert_eq!(info(&mut con, "short"), None);
    assert!(!exists(&mut con, "short"));
    let (_, after) = acquire(&mut con, "short", 1_000, &[]).expect("free after restart");
    assert!(after > before, "{after} after {before}");
}

#[test]
fn a_lock_that_expired_while_the_server_was_down_is_gone_after_an_rdb_restart() {
    assert_expired_while_down_is_gone(TestServer::start(), |server| save(&mut server.connection()));
}

#[test]
fn a_lock_that_expired_while_the_server_was_down_is_gone_after_an_aof_restart() {
    assert_expired_while_down_is_gone(TestServer::with_args(&PURE_AOF), |_| {});
}

/// Grants a lock, removes its expiry with `PERSIST`, persists with `persist`, restarts,
/// and checks that it is still held, still without expiry.
fn assert_persisted_lock_survives(mut server: TestServer, persist: fn(&mut TestServer)) {
    let mut con = server.connection();
    let (token, _) = acquire(&mut con, "forever", 1_000, &[]).expect("free");
    let persisted: i64 = redis::cmd("PERSIST")
        .arg("forever")
        .query(&mut con)
        .unwrap();
    assert_eq!(persisted, 1);
    let before = snapshot(&mut con, "forever");
    assert_eq!(before.expire_at, -1);
    persist(&mut server);
    server.restart();
    let mut con = server.connection();
    assert_eq!(snapshot(&mut con, "forever"), before);
    assert_eq!(info_field(&mut con, "forever", "ttl"), Some(-1));
    assert_eq!(pttl(&mut con, "forever"), -1);
    assert_eq!(release(&mut con, "forever", &token), 1);
}

#[test]
fn a_lock_without_expiry_survives_an_rdb_restart_without_expiry() {
    assert_persisted_lock_survives(TestServer::start(), |server| save(&mut server.connection()));
}

#[test]
fn a_lock_without_expiry_survives_an_aof_restart_without_expiry() {
    assert_persisted_lock_survives(TestServer::with_args(&PURE_AOF), |_| {});
}

#[test]
fn a_lock_without_expiry_survives_an_aof_rewrite_and_restart_without_expiry() {
    assert_persisted_lock_survives(TestServer::with_args(&PURE_AOF), |server| {
        rewrite_aof(&mut server.connection())
    });
}

#[test]
fn debug_reload_keeps_token_fence_grant_time_and_expiry() {
    let server = TestServer::start();
    let mut con = server.connection();
    let granted = grant_locks(&mut con);
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    assert_locks_survived(&mut con, &granted);
}
