//! `LOCK.WATCH key fence timeout-ms` (docs/commands.md, docs/election.md): answered at
//! once when the key's state differs from `fence`, else when it changes, whatever
//! changes it (grant, release, expiry, `DEL`, flush, `RENAME`, `RESTORE`, session
//! release, a role change), with `[fence, value]`, `[0, nil]`, or nil on timeout; on a
//! replica too. Watchers take nothing and are counted by `LOCK.INFO` and `INFO lock`.

use crate::common::*;

type Seen = Option<(i64, Option<Vec<u8>>)>;

/// `LOCK.WATCH key fence timeout-ms` on `con`, answered without blocking.
fn watch_now(con: &mut redis::Connection, key: &str, fence: i64) -> Seen {
    redis::cmd("LOCK.WATCH")
        .arg(key)
        .arg(fence)
        .arg(0)
        .query(con)
        .expect("LOCK.WATCH")
}

/// `LOCK.ACQUIRE key ttl TOKEN token VALUE value`, granted: the fence.
fn elect(con: &mut redis::Connection, key: &str, ttl_ms: u64, token: &str, value: &str) -> i64 {
    acquire(con, key, ttl_ms, &["TOKEN", token, "VALUE", value])
        .expect("granted")
        .1
}

fn held(fence: i64, value: &str) -> Seen {
    Some((fence, Some(value.as_bytes().to_vec())))
}

const FREE: Seen = Some((0, None));

#[test]
fn a_state_other_than_the_fence_given_is_answered_at_once() {
    let server = TestServer::start();
    let mut con = server.connection();
    // Nobody holds it: [0, nil] for any fence but 0.
    assert_eq!(watch_now(&mut con, "leader", 7), FREE);
    let fence = elect(&mut con, "leader", 60_000, "a", "10.0.0.1:6379");
    assert_eq!(
        watch_now(&mut con, "leader", 0),
        held(fence, "10.0.0.1:6379")
    );
    assert_eq!(
        watch_now(&mut con, "leader", fence - 1),
        held(fence, "10.0.0.1:6379")
    );
    // No value published: nil in its place.
    let plain = acquire(&mut con, "plain", 60_000, &[]).unwrap().1;
    assert_eq!(watch_now(&mut con, "plain", 0), Some((plain, None)));
    // The watch took nothing and left no watcher.
    assert_eq!(info_field(&mut con, "leader", "watchers"), Some(0));
    assert_eq!(info_field(&mut con, "leader", "fence"), Some(fence));
    assert!(!exists(&mut con, "free"), "a watch creates no key");
    assert_eq!(watch_now(&mut con, "free", 3), FREE);
    assert!(!exists(&mut con, "free"));
}

#[test]
fn a_grant_and_a_release_answer_the_watchers_with_the_new_state() {
    let server = TestServer::start();
    let mut con = server.connection();
    let mut for_leader = Waiter::watch(&server, "leader", 0, 0);
    assert_eq!(
        info_field(&mut con, "leader", "watchers"),
        None,
        "no key yet"
    );
    let fence = elect(&mut con, "leader", 60_000, "a", "addr-a");
    assert_eq!(for_leader.seen(), held(fence, "addr-a"));

    let mut for_resign = Waiter::watch(&server, "leader", fence, 0);
    assert_eq!(info_field(&mut con, "leader", "watchers"), Some(1));
    assert_eq!(
        info_field(&mut con, "leader", "waiters"),
        Some(0),
        "not a waiter"
    );
    assert_eq!(release(&mut con, "leader", b"a"), 1);
    assert_eq!(for_resign.seen(), FREE);
}

#[test]
fn a_handoff_to_a_waiter_is_seen_as_the_new_term_never_as_nobody() {
    let server = TestServer::start();
    let mut con = server.connection();
    let first = elect(&mut con, "leader", 60_000, "a", "addr-a");
    let mut candidate = Waiter::start(
        &server,
        "leader",
        60_000,
        &["TOKEN", "b", "VALUE", "addr-b", "WAIT", "0"],
    );
    let mut watchers: Vec<Waiter> = (0..5)
        .map(|_| Waiter::watch(&server, "leader", first, 0))
        .collect();
    assert_eq!(release(&mut con, "leader", b"a"), 1);
    let second = candidate.granted().expect("elected").1;
    assert!(second > first, "terms grow");
    for watcher in &mut watchers {
        assert_eq!(watcher.seen(), held(second, "addr-b"));
    }
}

#[test]
fn a_proclaim_keeps_the_term_and_wakes_no_watcher() {
    let server = TestServer::start();
    let mut con = server.connection();
    let fence = elect(&mut con, "leader", 60_000, "a", "addr-1");
    let mut watcher = Waiter::watch(&server, "leader", fence, 0);
    assert_eq!(elect(&mut con, "leader", 60_000, "a", "addr-2"), fence);
    // Same term: still blocked; the next change carries the proclaimed value's successor.
    assert!(watcher.is_blocked());
    assert_eq!(watch_now(&mut con, "leader", 0), held(fence, "addr-2"));
    release(&mut con, "leader", b"a");
    assert_eq!(watcher.seen(), FREE);
}

#[test]
fn expiry_answers_the_watchers_when_the_lock_runs_out() {
    let server = TestServer::start();
    let mut con = server.connection();
    let fence = elect(&mut con, "leader", 300, "a", "addr-a");
    let started = std::time::Instant::now();
    let mut watcher = Waiter::watch(&server, "leader", fence, 0);
    assert_eq!(watcher.seen(), FREE);
    let waited = started.elapsed();
    assert!(
        waited >= std::time::Duration::from_millis(250),
        "answered at expiry, not before: {waited:?}"
    );
}

#[test]
fn del_unlink_flush_and_an_overwrite_answer_the_watchers() {
    let server = TestServer::start();
    let mut con = server.connection();
    for removal in [&["DEL"][..], &["UNLINK"], &["FLUSHDB"], &["FLUSHALL"]] {
        let fence = elect(&mut con, "k", 60_000, "a", "v");
        let mut watcher = Waiter::watch(&server, "k", fence, 0);
        let mut command = redis::cmd(removal[0]);
        if removal[0].ends_with("LINK") || removal[0] == "DEL" {
            command.arg("k");
        }
        let _: redis::Value = command.query(&mut con).unwrap();
        assert_eq!(watcher.seen(), FREE, "{removal:?}");
    }
    // A value of another type in the lock's place: the error LOCK.WATCH would give now.
    let fence = elect(&mut con, "k", 60_000, "a", "v");
    let mut watcher = Waiter::watch(&server, "k", fence, 0);
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("text")
        .query(&mut con)
        .unwrap();
    let err = watcher.reply().unwrap_err();
    assert_eq!(err.code(), Some("WRONGTYPE"), "{err}");
}

#[test]
fn rename_restore_copy_and_swapdb_bring_a_lock_to_the_watchers_of_its_new_key() {
    let server = TestServer::start();
    let mut con = server.connection();
    let fence = elect(&mut con, "old", 60_000, "a", "addr-a");
    let mut at_source = Waiter::watch(&server, "old", fence, 0);
    let mut at_target = Waiter::watch(&server, "new", 0, 0);
    let _: () = redis::cmd("RENAME")
        .arg("old")
        .arg("new")
        .query(&mut con)
        .unwrap();
    assert_eq!(at_source.seen(), FREE);
    assert_eq!(at_target.seen(), held(fence, "addr-a"));

    let payload = dump(&mut con, "new").expect("a dump");
    let mut at_restored = Waiter::watch(&server, "restored", 0, 0);
    let _: () = redis::cmd("RESTORE")
        .arg("restored")
        .arg(0)
        .arg(payload)
        .query(&mut con)
        .unwrap();
    assert_eq!(at_restored.seen(), held(fence, "addr-a"));

    let mut at_copy = Waiter::watch(&server, "copy", 0, 0);
    let copied: i64 = redis::cmd("COPY")
        .arg("new")
        .arg("copy")
        .query(&mut con)
        .unwrap();
    assert_eq!(copied, 1);
    assert_eq!(at_copy.seen(), held(fence, "addr-a"));

    // SWAPDB: database 1's "new" is empty; the watcher of database 0 sees it so.
    let mut in_db0 = Waiter::watch(&server, "new", fence, 0);
    let _: () = redis::cmd("SWAPDB").arg(0).arg(1).query(&mut con).unwrap();
    assert_eq!(in_db0.seen(), FREE);
}

#[test]
fn a_session_release_answers_the_watchers() {
    let server = TestServer::start();
    let mut holder = server.connection();
    let fence = session_lock(&mut holder, "leader", "a", 0);
    let id = client_id(&mut holder);
    let mut watcher = Waiter::watch(&server, "leader", fence, 0);
    let mut con = server.connection();
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(id)
        .query(&mut con)
        .unwrap();
    assert_eq!(watcher.seen(), FREE);
}

#[test]
fn a_shared_key_is_held_with_its_newest_holders_fence() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (_, older) = acquire(&mut con, "room", 60_000, &["TOKEN", "r1", "SHARED"]).unwrap();
    assert_eq!(watch_now(&mut con, "room", 0), Some((older, None)));
    let mut watcher = Waiter::watch(&server, "room", older, 0);
    let (_, newer) = acquire(&mut con, "room", 60_000, &["TOKEN", "r2", "SHARED"]).unwrap();
    assert_eq!(watcher.seen(), Some((newer, None)));
    let mut watcher = Waiter::watch(&server, "room", newer, 0);
    release(&mut con, "room", b"r2");
    assert_eq!(
        watcher.seen(),
        Some((older, None)),
        "the newest left: the older one's fence"
    );
}

/// `LOCK.WATCH key fence 0` inside `MULTI`/`EXEC`, and inside a script: what each answers.
fn watch_in_multi_and_script(con: &mut redis::Connection, key: &str, fence: i64) -> (Seen, Seen) {
    let (in_multi,): (Seen,) = redis::pipe()
        .atomic()
        .cmd("LOCK.WATCH")
        .arg(key)
        .arg(fence)
        .arg(0)
        .query(con)
        .unwrap();
    let in_script: Seen = redis::cmd("EVAL")
        .arg("return redis.call('LOCK.WATCH', KEYS[1], ARGV[1], 0)")
        .arg(1)
        .arg(key)
        .arg(fence)
        .query(con)
        .unwrap();
    (in_multi, in_script)
}

#[test]
fn a_timeout_answers_nil_and_inside_multi_or_a_script_it_never_blocks() {
    let server = TestServer::start();
    let mut con = server.connection();
    let fence = elect(&mut con, "leader", 60_000, "a", "addr-a");
    let mut watcher = Waiter::watch(&server, "leader", fence, 200);
    assert_eq!(watcher.seen(), None);
    assert_eq!(lock_stat(&mut con, "lock_watchers"), 0);

    // Nothing changed: nil, as a timeout (and BLPOP in a transaction) would answer, so
    // a reply with a fence always means a change.
    assert_eq!(
        watch_in_multi_and_script(&mut con, "leader", fence),
        (None, None)
    );
    // Changed: the state now, at once.
    assert_eq!(
        watch_in_multi_and_script(&mut con, "leader", 0),
        (held(fence, "addr-a"), held(fence, "addr-a"))
    );
    assert_eq!(
        watch_in_multi_and_script(&mut con, "nobody", fence),
        (FREE, FREE)
    );
    assert_eq!(
        watch_in_multi_and_script(&mut con, "nobody", 0),
        (None, None)
    );
    assert_eq!(lock_stat(&mut con, "lock_watchers"), 0, "nothing blocked");
}

#[test]
fn a_closed_watcher_leaves_and_info_counts_watchers_and_replies() {
    let server = TestServer::start();
    let mut con = server.connection();
    let replies = lock_stat(&mut con, "lock_watch_replies");
    let fence = elect(&mut con, "leader", 60_000, "a", "addr-a");
    let watchers: Vec<Waiter> = (0..3)
        .map(|_| Waiter::watch(&server, "leader", fence, 0))
        .collect();
    assert_eq!(lock_stat(&mut con, "lock_watchers"), 3);
    assert_eq!(info_field(&mut con, "leader", "watchers"), Some(3));
    drop(watchers);
    poll_until(LIMIT, "the closed watchers to leave", || {
        lock_stat(&mut con, "lock_watchers") == 0
    });
    assert_eq!(info_field(&mut con, "leader", "watchers"), Some(0));
    assert_eq!(watch_now(&mut con, "leader", 0), held(fence, "addr-a"));
    assert_eq!(lock_stat(&mut con, "lock_watch_replies"), replies + 1);
    // The lock is untouched by its watchers.
    assert_eq!(release(&mut con, "leader", b"a"), 1);
}

#[test]
fn a_thousand_watchers_are_all_answered_by_one_release() {
    let server = TestServer::start();
    let mut con = server.connection();
    let fence = elect(&mut con, "leader", 60_000, "a", "addr-a");
    let mut watchers: Vec<Waiter> = (0..1000)
        .map(|_| Waiter::send_watch(&server, 0, "leader", fence, 0))
        .collect();
    poll_until(LIMIT, "1000 watchers", || {
        lock_stat(&mut con, "lock_watchers") == 1000
    });
    assert_eq!(release(&mut con, "leader", b"a"), 1);
    for watcher in &mut watchers {
        assert_eq!(watcher.seen(), FREE);
    }
    assert_eq!(lock_stat(&mut con, "lock_watchers"), 0);
}

#[test]
fn bad_input_gets_an_error_naming_the_argument_and_changes_nothing() {
    let server = TestServer::start();
    let mut con = server.connection();
    let fence = elect(&mut con, "leader", 60_000, "a", "addr-a");
    let before = snapshot(&mut con, "leader");
    let bad_fence = "ERR invalid fence: expected an integer from 0 to 9223372036854775807";
    let bad_timeout = "ERR invalid timeout-ms: expected an integer from 0 to 9007199254740991";
    for (argv, expected) in [
        (vec!["LOCK.WATCH", "leader", "x", "0"], bad_fence),
        (vec!["LOCK.WATCH", "leader", "-1", "0"], bad_fence),
        (
            vec!["LOCK.WATCH", "leader", "9223372036854775808", "0"],
            bad_fence,
        ),
        (vec!["LOCK.WATCH", "leader", "1.5", "0"], bad_fence),
        (vec!["LOCK.WATCH", "leader", "0", "-1"], bad_timeout),
        (
            vec!["LOCK.WATCH", "leader", "0", "9007199254740992"],
            bad_timeout,
        ),
        (vec!["LOCK.WATCH", "leader", "0", "soon"], bad_timeout),
    ] {
        assert_eq!(error_of_command(&mut con, &argv), expected, "{argv:?}");
    }
    for argv in [
        vec!["LOCK.WATCH", "leader", "0"],
        vec!["LOCK.WATCH", "leader", "0", "0", "x"],
    ] {
        assert!(
            error_of_command(&mut con, &argv).contains("wrong number of arguments"),
            "{argv:?}"
        );
    }
    let _: () = redis::cmd("SET")
        .arg("text")
        .arg("v")
        .query(&mut con)
        .unwrap();
    assert!(error_of_command(&mut con, &["LOCK.WATCH", "text", "0", "0"]).starts_with("WRONGTYPE"));
    assert_eq!(snapshot(&mut con, "leader"), before);
    assert_eq!(lock_stat(&mut con, "lock_watchers"), 0);
    assert_eq!(watch_now(&mut con, "leader", 0), held(fence, "addr-a"));
}

#[test]
fn on_a_replica_watchers_follow_the_replication_stream() {
    let master = TestServer::start();
    let replica = start_replica(&master, &[]);
    let mut m = master.connection();
    let mut for_first = Waiter::watch(&replica, "leader", 0, 0);
    let first = elect(&mut m, "leader", 60_000, "a", "addr-a");
    assert_eq!(for_first.seen(), held(first, "addr-a"));

    // A handoff on the master: the replica's watchers see the new term.
    let mut candidate = Waiter::start(
        &master,
        "leader",
        60_000,
        &["TOKEN", "b", "VALUE", "addr-b", "WAIT", "0"],
    );
    let mut for_second = Waiter::watch(&replica, "leader", first, 0);
    release(&mut m, "leader", b"a");
    let second = candidate.granted().expect("elected").1;
    assert_eq!(for_second.seen(), held(second, "addr-b"));

    // The master's DEL of an expired lock reaches them too.
    let _: () = redis::cmd("PEXPIRE")
        .arg("leader")
        .arg(100)
        .query(&mut m)
        .unwrap();
    let mut for_none = Waiter::watch(&replica, "leader", second, 0);
    assert_eq!(for_none.seen(), FREE);
}

#[test]
fn a_master_that_becomes_a_replica_answers_its_watchers_unblocked() {
    let server = TestServer::start();
    let other = TestServer::start();
    let mut con = server.connection();
    let fence = elect(&mut con, "leader", 60_000, "a", "addr-a");
    let mut watcher = Waiter::watch(&server, "leader", fence, 0);
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(other.port)
        .query(&mut con)
        .unwrap();
    let err = watcher.reply().unwrap_err();
    assert_eq!(err.code(), Some("UNBLOCKED"), "{err}");
    poll_until(LIMIT, "no watcher left", || {
        lock_stat(&mut con, "lock_watchers") == 0
    });
}
