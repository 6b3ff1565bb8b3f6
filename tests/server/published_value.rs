//! Published values (docs/commands.md, `VALUE v`): a public value on an exclusive grant,
//! shown by `LOCK.INFO`, replaced by the holder's re-acquire with a new `VALUE` (same
//! fence) and kept by one without, handed to a waiter with its grant, and carried like the
//! rest of the lock by replication, the RDB, the AOF, `DUMP`/`RESTORE` and `COPY`.

use crate::common::*;

/// The `value` field of `LOCK.INFO key`: `None` for nil (no value), `Some(bytes)`
/// otherwise; panics if the key is gone or the field missing.
fn value_of(con: &mut redis::Connection, key: &str) -> Option<Vec<u8>> {
    let fields: Option<Vec<(String, redis::Value)>> = redis::cmd("LOCK.INFO")
        .arg(key)
        .query(con)
        .expect("LOCK.INFO");
    let fields = fields.unwrap_or_else(|| panic!("{key} is gone"));
    match fields.into_iter().find(|(name, _)| name == "value") {
        Some((_, redis::Value::Nil)) => None,
        Some((_, redis::Value::BulkString(bytes))) => Some(bytes),
        other => panic!("LOCK.INFO {key} value field: {other:?}"),
    }
}

/// `LOCK.ACQUIRE key 60000 TOKEN token VALUE value`, which must be granted: the fence.
fn publish(con: &mut redis::Connection, key: &str, token: &str, value: &[u8]) -> i64 {
    let granted: Option<(Vec<u8>, i64)> = redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(60_000)
        .arg("TOKEN")
        .arg(token)
        .arg("VALUE")
        .arg(value)
        .query(con)
        .expect("LOCK.ACQUIRE ... VALUE");
    granted.expect("granted").1
}

#[test]
fn info_shows_the_value_a_reacquire_replaces_it_and_one_without_keeps_it() {
    let server = TestServer::start();
    let mut con = server.connection();
    let fence = publish(&mut con, "leader", "me", b"10.0.0.1:6379");
    assert_eq!(
        value_of(&mut con, "leader").as_deref(),
        Some(&b"10.0.0.1:6379"[..])
    );
    // The holder proclaims anew: same fence, new value.
    assert_eq!(publish(&mut con, "leader", "me", b"10.0.0.2:6379"), fence);
    assert_eq!(
        value_of(&mut con, "leader").as_deref(),
        Some(&b"10.0.0.2:6379"[..])
    );
    // Without VALUE the re-acquire keeps it, and resets the TTL.
    assert_eq!(
        acquire(&mut con, "leader", 90_000, &["TOKEN", "me"]).map(|g| g.1),
        Some(fence)
    );
    assert_eq!(
        value_of(&mut con, "leader").as_deref(),
        Some(&b"10.0.0.2:6379"[..])
    );
    assert!(pttl(&mut con, "leader") > 60_000);
    // Another token is refused and changes nothing.
    let refused: Option<(Vec<u8>, i64)> = redis::cmd("LOCK.ACQUIRE")
        .arg("leader")
        .arg(1000)
        .arg("VALUE")
        .arg("intruder")
        .query(&mut con)
        .unwrap();
    assert_eq!(refused, None);
    assert_eq!(
        value_of(&mut con, "leader").as_deref(),
        Some(&b"10.0.0.2:6379"[..])
    );
    // Binary-safe, empty included (an empty string, not nil); none without VALUE.
    publish(&mut con, "bin", "t", &[0, 255, b'\n', 7]);
    assert_eq!(value_of(&mut con, "bin"), Some(vec![0, 255, b'\n', 7]));
    publish(&mut con, "empty", "t", b"");
    assert_eq!(value_of(&mut con, "empty"), Some(Vec::new()));
    acquire(&mut con, "plain", 60_000, &[]).unwrap();
    assert_eq!(value_of(&mut con, "plain"), None);
    let largest = vec![b'v'; 4096];
    publish(&mut con, "largest", "t", &largest);
    assert_eq!(value_of(&mut con, "largest"), Some(largest));
}

#[test]
fn a_bad_value_is_an_error_naming_value_and_changes_nothing() {
    let server = TestServer::start();
    let mut con = server.connection();
    let fence = publish(&mut con, "leader", "me", b"kept");
    let over = vec![b'x'; 4097];
    for (what, extra) in [
        ("4097 bytes", vec![&b"TOKEN"[..], b"me", b"VALUE", &over]),
        ("with SHARED", vec![&b"SHARED"[..], b"VALUE", b"v"]),
        ("with LIMIT", vec![&b"VALUE"[..], b"v", b"LIMIT", b"3"]),
        ("repeated", vec![&b"VALUE"[..], b"a", b"VALUE", b"b"]),
        ("without its value", vec![&b"VALUE"[..]]),
    ] {
        for key in ["leader", "fresh"] {
            let err = error_of(
                redis::cmd("LOCK.ACQUIRE")
                    .arg(key)
                    .arg(1000)
                    .arg(&extra)
                    .query::<redis::Value>(&mut con),
            );
            assert!(
                err.starts_with("ERR") && err.contains("VALUE"),
                "{what}: {err}"
            );
        }
        assert!(!exists(&mut con, "fresh"), "{what}");
        assert_eq!(
            value_of(&mut con, "leader").as_deref(),
            Some(&b"kept"[..]),
            "{what}"
        );
        assert_eq!(
            info_field(&mut con, "leader", "fence"),
            Some(fence),
            "{what}"
        );
    }
}

#[test]
fn a_waiter_publishes_its_value_when_it_is_granted() {
    let server = TestServer::start();
    let mut con = server.connection();
    publish(&mut con, "leader", "first", b"a:1");
    let mut waiter = Waiter::start(
        &server,
        "leader",
        60_000,
        &["TOKEN", "second", "WAIT", "10000", "VALUE", "b:2"],
    );
    assert_eq!(release(&mut con, "leader", b"first"), 1);
    let reply = waiter.reply().expect("granted");
    assert!(matches!(reply, redis::Value::Array(_)), "{reply:?}");
    assert_eq!(value_of(&mut con, "leader").as_deref(), Some(&b"b:2"[..]));
}

#[test]
fn replicas_and_a_session_bound_reclaim_keep_the_value() {
    let master = TestServer::start();
    let replica = start_replica(&master, &[]);
    let mut con = master.connection();
    let fence = publish(&mut con, "leader", "me", b"one");
    let grant: Option<(Vec<u8>, i64)> = redis::cmd("LOCK.ACQUIRE")
        .arg("bound")
        .arg(60_000)
        .arg("TOKEN")
        .arg("me")
        .arg("SESSION")
        .arg(5000)
        .arg("VALUE")
        .arg("bound-value")
        .query(&mut con)
        .unwrap();
    assert!(grant.is_some());
    sync_replicas(&mut con, 1);
    let mut on_replica = replica.connection();
    assert_eq!(
        value_of(&mut on_replica, "leader").as_deref(),
        Some(&b"one"[..])
    );
    assert_eq!(
        value_of(&mut on_replica, "bound").as_deref(),
        Some(&b"bound-value"[..])
    );
    assert_eq!(
        digest_value(&mut on_replica, "leader"),
        digest_value(&mut con, "leader")
    );
    assert_eq!(
        digest_value(&mut on_replica, "bound"),
        digest_value(&mut con, "bound")
    );
    // A proclaim replicates as a whole new state, with the same fence.
    assert_eq!(publish(&mut con, "leader", "me", b"two"), fence);
    sync_replicas(&mut con, 1);
    assert_eq!(
        value_of(&mut on_replica, "leader").as_deref(),
        Some(&b"two"[..])
    );
    assert_eq!(info_field(&mut on_replica, "leader", "fence"), Some(fence));
    // A reclaim from another connection, without VALUE, keeps it.
    let mut other = master.connection();
    let again = acquire(
        &mut other,
        "bound",
        60_000,
        &["TOKEN", "me", "SESSION", "5000"],
    );
    assert!(again.is_some());
    assert_eq!(
        value_of(&mut con, "bound").as_deref(),
        Some(&b"bound-value"[..])
    );
    assert_eq!(info_field(&mut con, "bound", "connected"), Some(1));
}

#[test]
fn the_rdb_the_aof_dump_restore_and_copy_carry_the_value() {
    let mut server = TestServer::with_args(&[&AOF_ALWAYS[..], &["--save", "3600 1"]].concat());
    let mut con = server.connection();
    let fence = publish(&mut con, "leader", "me", b"addr:1");
    let check = |con: &mut redis::Connection, key: &str, step: &str| {
        assert_eq!(
            value_of(con, key).as_deref(),
            Some(&b"addr:1"[..]),
            "{step}"
        );
        assert_eq!(info_field(con, key, "fence"), Some(fence), "{step}");
    };
    let () = redis::cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    check(&mut con, "leader", "DEBUG RELOAD");
    // The AOF as written, then rewritten.
    server.kill();
    server.restart();
    let mut con = server.connection();
    check(&mut con, "leader", "restart from the AOF");
    let _: String = redis::cmd("BGREWRITEAOF").query(&mut con).unwrap();
    wait_for_aof_rewrite(&mut con);
    server.kill();
    server.restart();
    let mut con = server.connection();
    check(&mut con, "leader", "restart from a rewritten AOF");
    // DUMP/RESTORE and COPY.
    let payload = dump(&mut con, "leader").expect("DUMP");
    let () = redis::cmd("RESTORE")
        .arg("restored")
        .arg(0)
        .arg(&payload)
        .query(&mut con)
        .unwrap();
    check(&mut con, "restored", "RESTORE");
    let copied: i64 = redis::cmd("COPY")
        .arg("leader")
        .arg("copied")
        .query(&mut con)
        .unwrap();
    assert_eq!(copied, 1);
    check(&mut con, "copied", "COPY");
    // A restart from the RDB (the AOF off).
    let () = redis::cmd("SAVE").query(&mut con).unwrap();
    server.kill();
    server.restart_with(&["--save", "3600 1"]);
    let mut con = server.connection();
    check(&mut con, "leader", "restart from the RDB");
}
