//! `LOCK.ACQUIREALL` without waiting, on a real server (docs/commands.md, "LOCK.ACQUIREALL"):
//! one token and a fence per key, in the order given, all or nothing; each key then an
//! ordinary lock; a key its token holds is renewed; readers with `SHARED`; every key
//! bound with `SESSION`; as without `WAIT` inside `MULTI` and scripts; bad input refused
//! with nothing changed; a grant counted per key.

use crate::common::*;

/// The fence of `key` as `LOCK.INFO` shows it.
fn fence_of(con: &mut redis::Connection, key: &str) -> Option<i64> {
    info_field(con, key, "fence")
}

#[test]
fn every_free_key_is_granted_with_one_token_and_a_larger_fence_per_key_in_order() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (_, old) = acquire(&mut con, "b", 10_000, &["TOKEN", "before"]).expect("b");
    assert_eq!(release(&mut con, "b", b"before"), 1);

    let (token, fences) = acquire_all(&mut con, &["a", "b", "c"], 10_000, &[]).expect("all");
    assert_eq!(token.len(), 32, "a server-made token: {token:?}");
    assert_eq!(fences.len(), 3);
    assert!(
        fences[1] > old,
        "b's fence {} above its earlier {old}",
        fences[1]
    );
    for (key, fence) in ["a", "b", "c"].iter().zip(&fences) {
        assert_eq!(fence_of(&mut con, key), Some(*fence), "{key}");
        assert!((9_000..=10_000).contains(&pttl(&mut con, key)), "{key}");
    }

    // Each key is an ordinary lock of that token.
    assert_eq!(extend(&mut con, "a", &token, 20_000), 1);
    assert!(pttl(&mut con, "a") > 15_000);
    let done: redis::Value = redis::cmd("LOCK.DO")
        .arg("b")
        .arg(&token)
        .arg("SET")
        .arg("b:data")
        .arg("x")
        .query(&mut con)
        .expect("LOCK.DO with the token of the grant");
    assert_eq!(done, redis::Value::Okay);
    let holders: Vec<redis::Value> = redis::cmd("LOCK.HOLDERS")
        .arg("c")
        .query(&mut con)
        .expect("LOCK.HOLDERS");
    assert_eq!(holders.len(), 1);
    assert_eq!(release(&mut con, "b", &token), 1);
    assert!(!exists(&mut con, "b"));
    assert_eq!(release(&mut con, "a", &token), 1);
    assert_eq!(release(&mut con, "c", &token), 1);
}

#[test]
fn a_busy_key_means_nil_and_no_key_changes() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (holder, held_fence) = acquire(&mut con, "b", 10_000, &[]).expect("b");
    assert_eq!(acquire_all(&mut con, &["a", "b", "c"], 10_000, &[]), None);
    assert!(!exists(&mut con, "a"), "nothing taken on a");
    assert!(!exists(&mut con, "c"), "nothing taken on c");
    assert_eq!(fence_of(&mut con, "b"), Some(held_fence));
    assert_eq!(dbsize(&mut con), 1);

    // A key with a waiter queued is busy for a newcomer, free or not.
    let mut waiter = Waiter::start(&server, "b", 10_000, &["WAIT", "10000"]);
    assert_eq!(release(&mut con, "b", &holder), 1);
    let (_, fence) = waiter.granted().expect("the waiter has b");
    assert!(fence > held_fence);
    assert_eq!(acquire_all(&mut con, &["a", "b"], 10_000, &[]), None);
    assert_eq!(dbsize(&mut con), 1);
}

#[test]
fn a_key_the_token_holds_is_renewed_with_its_fence_and_the_others_granted() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (_, a_fence) = acquire(&mut con, "a", 1_000, &["TOKEN", "mine"]).expect("a");
    let (token, fences) =
        acquire_all(&mut con, &["a", "b"], 30_000, &["TOKEN", "mine"]).expect("both");
    assert_eq!(token, b"mine");
    assert_eq!(fences[0], a_fence, "a renewal keeps the fence");
    assert!(fences[1] > a_fence);
    assert!(pttl(&mut con, "a") > 20_000, "a's TTL was reset");

    // The same call again (a retry after a lost reply) answers the same, even with a
    // waiter queued on both keys meanwhile: waiters hold back newcomers, not the holder.
    let mut waiter = Waiter::start_all(&server, &["b", "a"], 30_000, &["WAIT", "20000"]);
    let again = acquire_all(&mut con, &["a", "b"], 30_000, &["TOKEN", "mine"]).expect("again");
    assert_eq!(again, (token, fences.clone()));
    assert_eq!(info_field(&mut con, "a", "waiters"), Some(1));
    assert!(waiter.is_blocked());
    assert_eq!(release(&mut con, "a", b"mine"), 1);
    assert_eq!(release(&mut con, "b", b"mine"), 1);
    let (_, after) = waiter.granted_all().expect("then the waiter has both");
    assert!(after[0] > fences[1] && after[1] > fences[0]);
}

#[test]
fn shared_reads_every_key_and_a_writer_of_any_of_them_waits() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (r1, _) = acquire_all(&mut con, &["a", "b"], 10_000, &["SHARED"]).expect("reader 1");
    let (r2, _) = acquire_all(&mut con, &["b", "a"], 10_000, &["SHARED"]).expect("reader 2");
    assert_ne!(r1, r2);
    assert_eq!(info_word(&mut con, "a", "mode").as_deref(), Some("shared"));
    assert_eq!(info_field(&mut con, "b", "holders"), Some(2));
    assert_eq!(acquire_all(&mut con, &["c", "b"], 10_000, &[]), None);
    assert!(!exists(&mut con, "c"));
    assert_eq!(acquire(&mut con, "a", 10_000, &[]), None);
    let reader = acquire(&mut con, "a", 10_000, &["SHARED"]);
    assert!(reader.is_some(), "another reader fits");
    // A token holding a key in the other mode is refused, and nothing changes.
    let err = error_of(
        redis::cmd("LOCK.ACQUIREALL")
            .arg(2)
            .arg("a")
            .arg("d")
            .arg(1000)
            .arg("TOKEN")
            .arg(&r1)
            .query(&mut con),
    );
    assert!(err.contains("other mode"), "{err}");
    assert!(!exists(&mut con, "d"));
}

#[test]
fn session_binds_every_key_to_the_connection() {
    let server = TestServer::start();
    let mut con = server.connection();
    let mut holder = server.connection();
    let (_, _) = acquire_all(&mut holder, &["a", "b"], 60_000, &["SESSION", "0"]).expect("both");
    for key in ["a", "b"] {
        assert_eq!(binding(&mut con, key), (0, 1), "{key}");
    }
    drop(holder);
    for key in ["a", "b"] {
        wait_gone(&mut con, key, "the session's lock");
    }
}

#[test]
fn inside_multi_and_scripts_wait_is_ignored() {
    let server = TestServer::start();
    let mut con = server.connection();
    acquire(&mut con, "b", 10_000, &[]).expect("b");
    let replies: Vec<redis::Value> = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIREALL")
        .arg(2)
        .arg("a")
        .arg("b")
        .arg(1000)
        .arg("WAIT")
        .arg(0)
        .cmd("LOCK.ACQUIREALL")
        .arg(1)
        .arg("c")
        .arg(1000)
        .query(&mut con)
        .expect("EXEC");
    assert_eq!(replies[0], redis::Value::Nil);
    assert!(matches!(replies[1], redis::Value::Array(_)), "{replies:?}");
    let scripted: redis::Value = redis::cmd("EVAL")
        .arg("return redis.call('LOCK.ACQUIREALL', 2, 'd', 'b', 1000, 'WAIT', 0)")
        .arg(0)
        .query(&mut con)
        .expect("EVAL");
    assert_eq!(scripted, redis::Value::Nil);
    assert!(!exists(&mut con, "a") && !exists(&mut con, "d"));
    assert_eq!(lock_waiters(&mut con), 0);
}

#[test]
fn bad_input_is_refused_before_any_key_is_touched() {
    let server = TestServer::start();
    let mut con = server.connection();
    redis::cmd("SET")
        .arg("s")
        .arg("string")
        .query::<()>(&mut con)
        .unwrap();
    let cases: [(&[&str], &str); 9] = [
        (&["0", "a", "100"], "numkeys"),
        (&["65", "a", "100"], "numkeys"),
        (&["x", "a", "100"], "numkeys"),
        (&["3", "a", "b", "100"], "numkeys"),
        (&["2", "a", "a", "100"], "key 'a' is given more than once"),
        (&["1", "a", "100", "LIMIT", "2"], "LIMIT is not an option"),
        (&["1", "a", "100", "VALUE", "v"], "VALUE is not an option"),
        (&["2", "a", "b", "0"], "ttl"),
        (&["2", "a", "s", "100"], "WRONGTYPE"),
    ];
    for (args, expected) in cases {
        let mut argv = vec!["LOCK.ACQUIREALL"];
        argv.extend(args);
        let err = error_of_command(&mut con, &argv);
        assert!(err.contains(expected), "{args:?}: {err}");
        assert!(!exists(&mut con, "a") && !exists(&mut con, "b"), "{args:?}");
    }
    let err = error_of_command(&mut con, &["LOCK.ACQUIREALL", "1", "a"]);
    assert!(err.contains("wrong number of arguments"), "{err}");
    assert_eq!(dbsize(&mut con), 1);
}

#[test]
fn info_lock_counts_a_grant_per_key_and_the_server_finds_the_keys() {
    let server = TestServer::start();
    let mut con = server.connection();
    let before = lock_stat(&mut con, "lock_grants");
    acquire_all(&mut con, &["a", "b", "c"], 10_000, &[]).expect("all");
    assert_eq!(lock_stat(&mut con, "lock_grants"), before + 3);
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("LOCK.ACQUIREALL")
        .arg(2)
        .arg("x")
        .arg("y")
        .arg(100)
        .arg("TOKEN")
        .arg("t")
        .query(&mut con)
        .expect("COMMAND GETKEYS");
    assert_eq!(keys, ["x", "y"]);
}

#[test]
fn acl_key_rights_cover_every_key() {
    let server = TestServer::start();
    let mut admin = server.connection();
    redis::cmd("ACL")
        .arg(&["SETUSER", "app", "on", ">pw", "~a*", "+lock.acquireall"][..])
        .query::<()>(&mut admin)
        .unwrap();
    let mut app = server.connection();
    redis::cmd("AUTH")
        .arg("app")
        .arg("pw")
        .query::<()>(&mut app)
        .unwrap();
    assert!(acquire_all(&mut app, &["a1", "a2"], 1000, &[]).is_some());
    let err = error_of_command(&mut app, &["LOCK.ACQUIREALL", "2", "a3", "b1", "1000"]);
    assert!(err.starts_with("NOPERM"), "{err}");
    assert!(!exists(&mut admin, "a3"));
}

#[test]
fn the_token_is_hidden_from_slowlog_and_monitor() {
    let server = TestServer::start();
    let mut con = server.connection();
    config_set(&mut con, "slowlog-log-slower-than", "0");
    acquire_all(&mut con, &["a", "b"], 1000, &["TOKEN", "secret-token"]).expect("granted");
    let log: redis::Value = redis::cmd("SLOWLOG").arg("GET").query(&mut con).unwrap();
    let seen = format!("{log:?}");
    assert!(seen.contains("LOCK.ACQUIREALL") || seen.contains("lock.acquireall"));
    assert!(!seen.contains("secret-token"), "{seen}");
}
