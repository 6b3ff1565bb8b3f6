//! Session-bound locks (docs/sessions.md): a lock taken
//! with `SESSION grace-ms` is released `grace-ms` after its connection closes, however it
//! closes, and the next waiter is granted it at once; its holder may reclaim it before;
//! the TTL still bounds it; a lock changed meanwhile is left alone.

use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;

/// Takes `key` with `SESSION grace_ms` on a connection of its own, queues a waiter,
/// closes the holder's connection with `close` (given its id and the connection), and
/// checks that nobody gets the lock while the grace runs and the waiter gets it right
/// after. Returns how long after the close the waiter was granted.
fn released_after_close(
    server: &TestServer,
    grace_ms: i64,
    close: impl FnOnce(&mut redis::Connection, i64, redis::Connection),
) -> Duration {
    let mut admin = server.connection();
    let mut holder = server.connection();
    let id = client_id(&mut holder);
    session_lock(&mut holder, "k", "holder", grace_ms);
    assert_eq!(binding(&mut admin, "k"), (grace_ms, 1));
    let mut waiter = Waiter::start(server, "k", 5_000, &["TOKEN", "next", "WAIT", "0"]);
    let closed_at = Instant::now();
    close(&mut admin, id, holder);
    if grace_ms > 0 {
        poll_until(LIMIT, "the server to see the close", || {
            !exists(&mut admin, "k") || binding(&mut admin, "k").1 == 0
        });
        if closed_at.elapsed() < Duration::from_millis(grace_ms as u64 / 2) {
            assert!(
                waiter.is_blocked(),
                "nobody gets the lock while the grace runs"
            );
            assert_eq!(binding(&mut admin, "k"), (grace_ms, 0));
        }
    }
    let (granted, at) = waiter.outcome();
    assert_eq!(granted.expect("the waiter is granted").0, b"next");
    assert_eq!(lock_stat(&mut admin, "lock_session_releases"), 1);
    at - closed_at
}

#[test]
fn quit_releases_the_lock_when_the_grace_ends() {
    let server = TestServer::start();
    let after = released_after_close(&server, 400, |_, _, mut holder| {
        let _: () = redis::cmd("QUIT").query(&mut holder).expect("QUIT");
    });
    assert!(
        after >= Duration::from_millis(390),
        "released {after:?} after QUIT"
    );
}

#[test]
fn client_kill_by_id_and_by_address_releases_at_once_with_grace_0() {
    let server = TestServer::start();
    released_after_close(&server, 0, |admin, id, _holder| {
        let killed: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(id)
            .query(admin)
            .expect("CLIENT KILL ID");
        assert_eq!(killed, 1);
    });

    let server = TestServer::start();
    released_after_close(&server, 0, |admin, id, _holder| {
        let list: String = redis::cmd("CLIENT").arg("LIST").query(admin).expect("LIST");
        let line = list
            .lines()
            .find(|line| line.starts_with(&format!("id={id} ")))
            .expect("the holder in CLIENT LIST");
        let addr = line
            .split(' ')
            .find_map(|field| field.strip_prefix("addr="))
            .expect("addr=");
        let _: () = redis::cmd("CLIENT")
            .arg("KILL")
            .arg(addr)
            .query(admin)
            .expect("CLIENT KILL addr");
    });
}

#[test]
fn client_kill_by_type_releases_every_lock_of_the_killed_clients() {
    let server = TestServer::start();
    let mut admin = server.connection();
    let mut holders: Vec<redis::Connection> = (0..3).map(|_| server.connection()).collect();
    for (i, holder) in holders.iter_mut().enumerate() {
        session_lock(holder, &format!("k{i}"), "t", 0);
    }
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query(&mut admin)
        .expect("CLIENT KILL TYPE normal");
    assert_eq!(killed, 3, "the caller is skipped");
    for i in 0..3 {
        wait_gone(
            &mut admin,
            &format!("k{i}"),
            "each killed holder's lock to go",
        );
    }
    assert_eq!(lock_stat(&mut admin, "lock_session_releases"), 3);
}

#[test]
fn the_idle_timeout_closes_the_connection_and_releases_the_lock() {
    let server = TestServer::start();
    let mut admin = server.connection();
    config_set(&mut admin, "timeout", "1");
    let mut holder = server.connection();
    session_lock(&mut holder, "k", "t", 0);
    let mut waiter = Waiter::start(&server, "k", 5_000, &["WAIT", "0"]);
    // The waiter is blocked, not idle: the server's timeout spares it.
    assert!(waiter.granted().is_some(), "the waiter gets the lock");
    // The admin connection was idle too, and is gone.
    let mut fresh = server.connection();
    assert_eq!(lock_stat(&mut fresh, "lock_session_releases"), 1);
    drop(holder);
}

#[test]
fn a_client_process_killed_with_sigkill_loses_its_lock() {
    let server = TestServer::start();
    let mut admin = server.connection();
    // redis-cli repeats the command every 1000 s on one connection: it acquires once,
    // then sleeps holding the connection open until it is killed.
    let mut cli = Command::new("redis-cli")
        .args(["-p", &server.port.to_string(), "-r", "-1", "-i", "1000"])
        .args([
            "LOCK.ACQUIRE",
            "k",
            "60000",
            "TOKEN",
            "cli",
            "SESSION",
            "200",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-cli (installed with redis-server)");
    poll_until(LIMIT, "redis-cli to take the lock", || {
        exists(&mut admin, "k") && binding(&mut admin, "k") == (200, 1)
    });
    let fence = info_field(&mut admin, "k", "fence").expect("fence");
    let mut waiter = Waiter::start(&server, "k", 5_000, &["WAIT", "0"]);
    let _ = Command::new("kill")
        .args(["-9", &cli.id().to_string()])
        .status();
    let _ = cli.wait();
    let (granted, fence_after) = waiter.granted().expect("granted after the grace");
    assert_ne!(granted, b"cli");
    assert!(fence_after > fence);
    assert_eq!(lock_stat(&mut admin, "lock_session_releases"), 1);
}

#[test]
fn the_holder_reclaims_its_lock_during_the_grace_with_the_same_fence() {
    let server = TestServer::start();
    let mut admin = server.connection();
    let mut holder = server.connection();
    let fence = session_lock(&mut holder, "k", "mine", 1_000);
    let mut waiter = Waiter::start(&server, "k", 5_000, &["WAIT", "0"]);
    drop(holder);
    poll_until(LIMIT, "the grace to start", || {
        binding(&mut admin, "k").1 == 0
    });

    let mut back = server.connection();
    let reclaimed = acquire(
        &mut back,
        "k",
        60_000,
        &["TOKEN", "mine", "SESSION", "1000"],
    );
    assert_eq!(reclaimed, Some((b"mine".to_vec(), fence)));
    assert_eq!(
        binding(&mut admin, "k"),
        (1_000, 1),
        "bound to the new connection"
    );
    assert_eq!(lock_stat(&mut admin, "lock_session_reclaims"), 1);
    // The first grace's timer no longer fires: the lock outlives it.
    thread::sleep(Duration::from_millis(1_200));
    assert!(waiter.is_blocked(), "nobody got the lock in between");
    assert_eq!(info_field(&mut admin, "k", "fence"), Some(fence));
    assert_eq!(lock_stat(&mut admin, "lock_session_releases"), 0);

    // The new connection's close starts a new grace.
    drop(back);
    assert!(waiter.granted().is_some());
    assert_eq!(lock_stat(&mut admin, "lock_session_releases"), 1);
}

#[test]
fn a_reclaim_without_session_makes_a_plain_ttl_lock() {
    let server = TestServer::start();
    let mut admin = server.connection();
    let mut holder = server.connection();
    let fence = session_lock(&mut holder, "k", "mine", 1_000);
    drop(holder);
    poll_until(LIMIT, "the grace to start", || {
        binding(&mut admin, "k").1 == 0
    });
    let reclaimed = acquire(&mut admin, "k", 60_000, &["TOKEN", "mine"]);
    assert_eq!(reclaimed, Some((b"mine".to_vec(), fence)));
    assert_eq!(binding(&mut admin, "k"), (-1, -1));
    assert_eq!(lock_stat(&mut admin, "lock_session_reclaims"), 1);
    thread::sleep(Duration::from_millis(1_200));
    assert!(
        exists(&mut admin, "k"),
        "a plain lock outlives the old grace"
    );
    assert_eq!(lock_stat(&mut admin, "lock_session_releases"), 0);

    // And a plain lock re-acquired with SESSION becomes bound.
    let mut other = server.connection();
    acquire(&mut other, "k", 60_000, &["TOKEN", "mine", "SESSION", "0"]).expect("renewed");
    assert_eq!(binding(&mut admin, "k"), (0, 1));
    assert_eq!(
        lock_stat(&mut admin, "lock_session_reclaims"),
        1,
        "not a reclaim"
    );
    drop(other);
    wait_gone(
        &mut admin,
        "k",
        "the re-bound lock to go with its connection",
    );
}

#[test]
fn a_reacquire_from_another_open_connection_moves_the_binding() {
    let server = TestServer::start();
    let mut admin = server.connection();
    let mut first = server.connection();
    let mut second = server.connection();
    session_lock(&mut first, "k", "mine", 0);
    session_lock(&mut second, "k", "mine", 0);
    assert_eq!(lock_stat(&mut admin, "lock_session_reclaims"), 0);
    drop(first);
    // The first connection's close no longer concerns the lock.
    ping(&mut admin);
    thread::sleep(Duration::from_millis(100));
    assert!(exists(&mut admin, "k"));
    drop(second);
    wait_gone(&mut admin, "k", "the lock to go with the second connection");
}

#[test]
fn the_ttl_still_bounds_a_session_bound_lock() {
    let server = TestServer::start();
    let mut admin = server.connection();
    let mut holder = server.connection();
    acquire(&mut holder, "k", 200, &["SESSION", "60000"]).expect("granted");
    let mut waiter = Waiter::start(&server, "k", 5_000, &["WAIT", "0"]);
    assert!(waiter.granted().is_some(), "granted when the TTL ends");
    assert_eq!(
        binding(&mut admin, "k"),
        (-1, -1),
        "the waiter's lock is plain"
    );
    assert_eq!(lock_stat(&mut admin, "lock_session_releases"), 0);
    assert_eq!(lock_stat(&mut admin, "lock_expired"), 1);
    ping(&mut holder);
}

#[test]
fn extend_and_release_keep_or_end_the_binding_as_for_any_lock() {
    let server = TestServer::start();
    let mut admin = server.connection();
    let mut holder = server.connection();
    session_lock(&mut holder, "k", "t", 100);
    assert_eq!(extend(&mut admin, "k", b"t", 90_000), 1);
    assert_eq!(binding(&mut admin, "k"), (100, 1));
    assert_eq!(release(&mut admin, "k", b"t"), 1);
    drop(holder);
    thread::sleep(Duration::from_millis(200));
    assert_eq!(lock_stat(&mut admin, "lock_session_releases"), 0);
    assert_eq!(lock_stat(&mut admin, "lock_releases"), 1);
}

#[test]
fn thousands_of_locks_in_many_databases_go_with_their_connection() {
    const PER_DB: usize = 1_000;
    const DBS: i64 = 4;
    let server = TestServer::start();
    let mut admin = server.connection();
    let mut holder = server.connection();
    for db in 0..DBS {
        let mut pipe = redis::pipe();
        pipe.cmd("SELECT").arg(db).ignore();
        for i in 0..PER_DB {
            pipe.cmd("LOCK.ACQUIRE")
                .arg(format!("lock:{i}"))
                .arg(60_000)
                .arg("SESSION")
                .arg(i % 3)
                .ignore();
        }
        let _: () = pipe.query(&mut holder).expect("pipeline of acquires");
    }
    let mut sizes = Vec::new();
    for db in 0..DBS {
        let _: () = redis::cmd("SELECT").arg(db).query(&mut admin).unwrap();
        sizes.push(dbsize(&mut admin));
    }
    assert_eq!(sizes, vec![PER_DB as i64; DBS as usize]);
    drop(holder);
    for db in 0..DBS {
        let _: () = redis::cmd("SELECT").arg(db).query(&mut admin).unwrap();
        poll_until(LIMIT, "every lock of the database to go", || {
            dbsize(&mut admin) == 0
        });
    }
    assert_eq!(
        lock_stat(&mut admin, "lock_session_releases"),
        PER_DB as i64 * DBS
    );
}

#[test]
fn a_lock_changed_during_the_grace_is_left_alone() {
    let server = TestServer::start();
    let mut admin = server.connection();
    let mut holder = server.connection();
    for key in ["released", "deleted", "replaced", "taken"] {
        session_lock(&mut holder, key, "old", 300);
    }
    assert_eq!(release(&mut holder, "released", b"old"), 1);
    let _: i64 = redis::cmd("DEL").arg("deleted").query(&mut admin).unwrap();
    let _: () = redis::cmd("SET")
        .arg("replaced")
        .arg("v")
        .query(&mut admin)
        .unwrap();
    assert_eq!(release(&mut holder, "taken", b"old"), 1);
    drop(holder);
    // Other holders take the released and deleted keys while the grace would run.
    let mut other = server.connection();
    acquire(&mut other, "released", 60_000, &["TOKEN", "new"]).expect("free");
    acquire(
        &mut other,
        "deleted",
        60_000,
        &["TOKEN", "new", "SESSION", "0"],
    )
    .expect("free");
    acquire(
        &mut other,
        "taken",
        60_000,
        &["TOKEN", "new", "SESSION", "300"],
    )
    .expect("free");
    thread::sleep(Duration::from_millis(500));
    for key in ["released", "deleted", "taken"] {
        assert!(exists(&mut admin, key), "{key} is left to its new holder");
        assert_eq!(release(&mut admin, key, b"new"), 1, "{key}");
    }
    let value: String = redis::cmd("GET").arg("replaced").query(&mut admin).unwrap();
    assert_eq!(value, "v");
    assert_eq!(lock_stat(&mut admin, "lock_session_releases"), 0);
}

#[test]
fn a_waiter_with_session_is_bound_to_its_own_connection() {
    let server = TestServer::start();
    let mut admin = server.connection();
    let (holder, _, mut waiter) = held_with_a_waiter(
        &server,
        &mut admin,
        "k",
        60_000,
        &["SESSION", "0", "WAIT", "0"],
    );
    assert_eq!(release(&mut admin, "k", &holder), 1);
    assert!(waiter.granted().is_some());
    assert_eq!(binding(&mut admin, "k"), (0, 1));
    drop(waiter);
    wait_gone(
        &mut admin,
        "k",
        "the waiter's lock to go with its connection",
    );
    assert_eq!(lock_stat(&mut admin, "lock_session_releases"), 1);
}

#[test]
fn copied_renamed_and_moved_locks_stay_bound() {
    let server = TestServer::start();
    let mut admin = server.connection();
    let mut holder = server.connection();
    for key in ["a", "b", "c"] {
        session_lock(&mut holder, key, "t", 0);
    }
    let copied: i64 = redis::cmd("COPY")
        .arg("c")
        .arg("c2")
        .query(&mut admin)
        .unwrap();
    assert_eq!(copied, 1);
    let _: () = redis::cmd("RENAME")
        .arg("a")
        .arg("a2")
        .query(&mut admin)
        .unwrap();
    let moved: i64 = redis::cmd("MOVE")
        .arg("b")
        .arg(5)
        .query(&mut admin)
        .unwrap();
    assert_eq!(moved, 1);
    assert_eq!(binding(&mut admin, "c2"), (0, 1));
    assert_eq!(binding(&mut admin, "a2"), (0, 1));
    drop(holder);
    for key in ["c", "c2"] {
        wait_gone(&mut admin, key, "each copy to go with its connection");
    }
    if !server_kind().follows_key_moves() {
        // Valkey 8.1 to 9.1.1: the binding stays in the lock (LOCK.INFO) but nothing
        // follows the key to its new name; the TTL ends it (docs/servers.md).
        assert_eq!(binding(&mut admin, "a2"), (0, 0));
        return;
    }
    wait_gone(&mut admin, "a2", "the renamed lock to go too");
    let _: () = redis::cmd("SELECT").arg(5).query(&mut admin).unwrap();
    wait_gone(&mut admin, "b", "the moved lock to go too");
    assert_eq!(lock_stat(&mut admin, "lock_session_releases"), 4);
}

#[test]
fn a_lock_renamed_during_its_grace_starts_a_grace_of_its_own() {
    const GRACE_MS: i64 = 1_500;
    let server = TestServer::start();
    let mut admin = server.connection();
    let mut holder = server.connection();
    session_lock(&mut holder, "k", "t", GRACE_MS);
    session_lock(&mut holder, "other", "t", GRACE_MS);
    drop(holder);
    poll_until(LIMIT, "the server to see the close", || {
        binding(&mut admin, "k").1 == 0
    });
    // Halfway through the grace both locks share since their connection closed, `k`
    // goes away and comes back: on a server that tells where a key moved, its grace
    // starts again there, and the one the close started no longer ends it. (Half a grace
    // on either side leaves a loaded machine room: `k`'s own grace ends 750 ms after
    // the other lock goes.)
    thread::sleep(Duration::from_millis(GRACE_MS as u64 / 2));
    for (from, to) in [("k", "k2"), ("k2", "k")] {
        let _: () = redis::cmd("RENAME")
            .arg(from)
            .arg(to)
            .query(&mut admin)
            .expect("RENAME");
    }
    wait_gone(
        &mut admin,
        "other",
        "the other lock to go when the grace ends",
    );
    if server_kind().follows_key_moves() {
        assert!(
            exists(&mut admin, "k"),
            "the renamed lock has a grace of its own"
        );
        assert_eq!(binding(&mut admin, "k"), (GRACE_MS, 0));
    }
    wait_gone(
        &mut admin,
        "k",
        "the renamed lock to go when its grace ends",
    );
    assert_eq!(lock_stat(&mut admin, "lock_session_releases"), 2);
}

#[test]
fn move_and_copy_leave_the_callers_database_alone() {
    // A module that subscribes to MOVE's and COPY's notifications on Valkey 8.1 would
    // leave their caller in the destination database (valkey#4024).
    let server = TestServer::start();
    let mut con = server.connection();
    for key in ["s", "t", "u"] {
        let _: () = redis::cmd("SET").arg(key).arg("v").query(&mut con).unwrap();
    }
    acquire(&mut con, "l", 60_000, &["SESSION", "0"]).expect("granted");
    let _: i64 = redis::cmd("MOVE").arg("s").arg(5).query(&mut con).unwrap();
    let _: i64 = redis::cmd("MOVE").arg("l").arg(5).query(&mut con).unwrap();
    let _: i64 = redis::cmd("COPY")
        .arg("t")
        .arg("t")
        .arg("DB")
        .arg(6)
        .query(&mut con)
        .unwrap();
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    keys.sort();
    assert_eq!(keys, ["t", "u"], "still in database 0");
}

#[test]
fn multi_exec_binds_to_the_client_that_runs_exec_and_scripts_are_refused() {
    let server = TestServer::start();
    let mut admin = server.connection();
    let mut holder = server.connection();
    let replies: Vec<redis::Value> = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg(60_000)
        .arg("SESSION")
        .arg(0)
        .query(&mut holder)
        .expect("MULTI/EXEC");
    assert_eq!(replies.len(), 1);
    assert_eq!(binding(&mut admin, "k"), (0, 1));
    drop(holder);
    wait_gone(&mut admin, "k", "the lock to go with the EXEC client");

    let script = "return redis.call('LOCK.ACQUIRE', KEYS[1], 1000, 'SESSION', 0)";
    let err = error_of(
        redis::cmd("EVAL")
            .arg(script)
            .arg(1)
            .arg("s")
            .query(&mut admin),
    );
    assert!(err.contains("SESSION"), "{err}");
    assert!(!exists(&mut admin, "s"), "nothing changed");
}

#[test]
fn bad_session_arguments_name_themselves_and_change_nothing() {
    let server = TestServer::start();
    let mut con = server.connection();
    acquire(&mut con, "held", 60_000, &["TOKEN", "t"]).expect("granted");
    let before = snapshot(&mut con, "held");
    for (args, names) in [
        (vec!["SESSION"], "SESSION"),
        (vec!["SESSION", "-1"], "grace-ms"),
        (vec!["SESSION", "9007199254740992"], "grace-ms"),
        (vec!["SESSION", "1.5"], "grace-ms"),
        (vec!["SESSION", "x"], "grace-ms"),
        (vec!["SESSION", "1", "SESSION", "1"], "SESSION"),
        (vec!["SESSION", "1", "session", "2"], "session"),
    ] {
        for key in ["free", "held"] {
            let err = error_of(
                redis::cmd("LOCK.ACQUIRE")
                    .arg(key)
                    .arg(1000)
                    .arg("TOKEN")
                    .arg("t")
                    .arg(&args)
                    .query(&mut con),
            );
            assert!(
                err.starts_with("ERR") && err.contains(names),
                "{args:?}: {err}"
            );
        }
    }
    assert!(!exists(&mut con, "free"));
    assert_eq!(snapshot(&mut con, "held"), before);
    assert_eq!(binding(&mut con, "held"), (-1, -1));
}

#[test]
fn a_session_release_is_notified_and_counted_like_a_release() {
    let server = TestServer::start();
    let mut admin = server.connection();
    config_set(&mut admin, "notify-keyspace-events", "Kd");
    let mut sub_con = server.connection();
    let mut pubsub = sub_con.as_pubsub();
    pubsub.subscribe("__keyspace@0__:k").expect("SUBSCRIBE");
    pubsub
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut holder = server.connection();
    session_lock(&mut holder, "k", "t", 0);
    drop(holder);
    let mut events = Vec::new();
    while events.len() < 2 {
        let message = pubsub.get_message().expect("an event");
        events.push(message.get_payload::<String>().unwrap());
    }
    assert_eq!(events, ["lock.acquire", "lock.release"]);
    assert_eq!(lock_stat(&mut admin, "lock_releases"), 1);
    assert_eq!(lock_stat(&mut admin, "lock_session_releases"), 1);
    assert_eq!(lock_stat(&mut admin, "lock_session_reclaims"), 0);
}

#[test]
fn a_close_without_session_locks_changes_nothing() {
    let server = TestServer::start();
    let mut admin = server.connection();
    let mut plain = server.connection();
    acquire(&mut plain, "k", 60_000, &[]).expect("granted");
    drop(plain);
    for _ in 0..20 {
        drop(server.connection());
    }
    ping(&mut admin);
    thread::sleep(Duration::from_millis(100));
    assert!(exists(&mut admin, "k"));
    assert_eq!(binding(&mut admin, "k"), (-1, -1));
    assert_eq!(lock_stat(&mut admin, "lock_session_releases"), 0);
}

/// The module listens to connection closes only while some lock is bound to an open
/// connection: the listener goes when the last such connection closes and comes back
/// with the next binding, every time.
#[test]
fn closes_are_heard_again_after_the_last_bound_connection_went() {
    let server = TestServer::start();
    let mut admin = server.connection();
    for round in 0..4 {
        let key = format!("k{round}");
        let mut holder = server.connection();
        session_lock(&mut holder, &key, "holder", 0);
        // A connection that binds nothing comes and goes meanwhile.
        drop(server.connection());
        assert!(exists(&mut admin, &key), "round {round}: still held");
        drop(holder);
        wait_gone(&mut admin, &key, "the lock released with its connection");
        // Round trips, so that the listener's removal (after the close) has run before
        // the next round binds again.
        ping(&mut admin);
        ping(&mut admin);
    }
    assert_eq!(lock_stat(&mut admin, "lock_session_releases"), 4);
}

#[test]
fn swapdb_takes_bound_locks_and_running_graces_along() {
    let server = TestServer::start();
    let mut admin = server.connection();
    let mut bound = server.connection();
    session_lock(&mut bound, "bound", "t", 0);
    let mut cut = server.connection();
    session_lock(&mut cut, "in-grace", "t", 1_000);
    let _: () = redis::cmd("SELECT").arg(1).query(&mut admin).unwrap();
    acquire(&mut admin, "stay", 60_000, &["TOKEN", "plain"]).expect("granted in db 1");
    drop(cut);
    let _: () = redis::cmd("SELECT").arg(0).query(&mut admin).unwrap();
    poll_until(LIMIT, "the grace to start", || {
        binding(&mut admin, "in-grace").1 == 0
    });
    let _: () = redis::cmd("SWAPDB")
        .arg(0)
        .arg(1)
        .query(&mut admin)
        .unwrap();
    let _: () = redis::cmd("SELECT").arg(1).query(&mut admin).unwrap();
    wait_gone(
        &mut admin,
        "in-grace",
        "the running grace to end in the new database",
    );
    assert!(exists(&mut admin, "bound"));
    drop(bound);
    wait_gone(
        &mut admin,
        "bound",
        "the bound lock to go from the new database",
    );
    let _: () = redis::cmd("SELECT").arg(0).query(&mut admin).unwrap();
    assert!(
        exists(&mut admin, "stay"),
        "the plain lock swapped in is untouched"
    );
    assert_eq!(lock_stat(&mut admin, "lock_session_releases"), 2);
}

#[test]
fn a_flush_forgets_the_bindings_of_its_locks() {
    let server = TestServer::start();
    let mut admin = server.connection();
    let mut holder = server.connection();
    session_lock(&mut holder, "k", "old", 0);
    let _: () = redis::cmd("FLUSHALL").query(&mut admin).unwrap();
    acquire(&mut admin, "k", 60_000, &["TOKEN", "new"]).expect("free after the flush");
    drop(holder);
    ping(&mut admin);
    thread::sleep(Duration::from_millis(100));
    assert_eq!(
        release(&mut admin, "k", b"new"),
        1,
        "left to its new holder"
    );
    assert_eq!(lock_stat(&mut admin, "lock_session_releases"), 0);
}
