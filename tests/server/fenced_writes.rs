//! `LOCK.DO key token command [arg ...]` (docs/commands.md, docs/fenced-writes.md): the
//! command runs, atomically, if and only if `token` holds `key`; else `-NOTHELD` and
//! nothing runs. It runs as the caller's ACL user, refuses what a script may not run and
//! `LOCK.*`, declares its keys, replicates and persists the inner command's effects only,
//! gets `OOM` for a write under a full `maxmemory`, works in `MULTI` and scripts, and never
//! shows the token in `SLOWLOG`.

use crate::common::*;

fn lock_do(con: &mut redis::Connection, argv: &[&str]) -> redis::RedisResult<redis::Value> {
    let mut cmd = redis::cmd("LOCK.DO");
    for arg in argv {
        cmd.arg(*arg);
    }
    cmd.query(con)
}

fn get(con: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(con).unwrap()
}

#[test]
fn the_holder_runs_the_command_and_gets_its_own_reply() {
    let server = TestServer::start();
    let mut con = server.connection();
    acquire(&mut con, "order:42:lock", 60_000, &["TOKEN", "t"]).unwrap();
    let before = snapshot(&mut con, "order:42:lock");
    assert_eq!(
        lock_do(&mut con, &["order:42:lock", "t", "SET", "order:42", "paid"]).unwrap(),
        redis::Value::Okay
    );
    assert_eq!(get(&mut con, "order:42").as_deref(), Some("paid"));
    let fields: i64 = redis::cmd("LOCK.DO")
        .arg("order:42:lock")
        .arg("t")
        .arg("HSET")
        .arg("order:42:h")
        .arg("a")
        .arg(1)
        .arg("b")
        .arg(2)
        .query(&mut con)
        .unwrap();
    assert_eq!(fields, 2);
    let all: Vec<String> = redis::cmd("LOCK.DO")
        .arg("order:42:lock")
        .arg("t")
        .arg("HGETALL")
        .arg("order:42:h")
        .query(&mut con)
        .unwrap();
    assert_eq!(all, ["a", "1", "b", "2"]);
    assert_eq!(
        lock_do(&mut con, &["order:42:lock", "t", "GET", "nothing"]).unwrap(),
        redis::Value::Nil
    );
    // The inner command's own error, as it would answer alone.
    let err = lock_do(&mut con, &["order:42:lock", "t", "INCR", "order:42"]).unwrap_err();
    assert!(err.to_string().contains("not an integer"), "{err}");
    // The lock is untouched: same fence, no renewal.
    let after = snapshot(&mut con, "order:42:lock");
    assert_eq!(
        (after.fence, after.expire_at),
        (before.fence, before.expire_at)
    );
}

#[test]
fn every_argument_reaches_the_inner_command_in_order_whatever_their_count() {
    // Short commands are passed to the server one argument at a time, longer ones as a
    // vector (`ffi/call.rs`): both ways, from none to many, give what the command alone
    // gives.
    let server = TestServer::start();
    let mut con = server.connection();
    acquire(&mut con, "list:lock", 60_000, &["TOKEN", "t"]).unwrap();
    assert_eq!(
        lock_do(&mut con, &["list:lock", "t", "PING"]).unwrap(),
        redis::Value::SimpleString("PONG".into())
    );
    assert_eq!(
        lock_do(&mut con, &["list:lock", "t", "DBSIZE"]).unwrap(),
        redis::Value::Int(1)
    );
    for count in 1..=20 {
        let key = format!("list:{count}");
        let items: Vec<String> = (0..count).map(|i| format!("item-{i}")).collect();
        let mut argv = vec!["list:lock", "t", "RPUSH", key.as_str()];
        argv.extend(items.iter().map(String::as_str));
        assert_eq!(
            lock_do(&mut con, &argv).unwrap(),
            redis::Value::Int(count),
            "{count} items"
        );
        let stored: Vec<String> = redis::cmd("LRANGE")
            .arg(&key)
            .arg(0)
            .arg(-1)
            .query(&mut con)
            .unwrap();
        assert_eq!(stored, items, "{count} items, in order");
    }
}

#[test]
fn a_failed_getdel_or_getset_gets_its_error_and_the_next_command_its_own_reply() {
    // Valkey 8.1 and later, while a module follows keyspace events (this one does),
    // hand a module's call of a failing GETDEL or GETSET back with no reply: LOCK.DO
    // answered nothing (the client waited for ever) and, on Valkey 8.1, the lost error
    // came in front of the next call's reply. Found by the LOCK.DO fuzz test.
    let server = TestServer::start();
    let mut con = server.connection();
    con.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    acquire(&mut con, "l", 60_000, &["TOKEN", "t"]).unwrap();
    let _: i64 = redis::cmd("HSET")
        .arg("h")
        .arg("f")
        .arg("v")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SET").arg("s").arg("v").query(&mut con).unwrap();
    for inner in [
        &["GETDEL", "h"][..],
        &["GETSET", "h", "x"],
        &["GETDEL", "h"],
    ] {
        let mut argv = vec!["l", "t"];
        argv.extend_from_slice(inner);
        let err = lock_do(&mut con, &argv).unwrap_err();
        assert_eq!(err.code(), Some("WRONGTYPE"), "{inner:?}: {err}");
        // The next command, on the same connection, gets its own reply and no other.
        assert_eq!(
            lock_do(&mut con, &["l", "t", "GET", "s"]).unwrap(),
            redis::Value::BulkString(b"v".to_vec())
        );
        ping(&mut con);
    }
    // Nothing changed: the hash is there, the string too.
    let field: Option<String> = redis::cmd("HGET")
        .arg("h")
        .arg("f")
        .query(&mut con)
        .unwrap();
    assert_eq!(field.as_deref(), Some("v"));
    assert_eq!(
        lock_do(&mut con, &["l", "t", "GETDEL", "s"]).unwrap(),
        redis::Value::BulkString(b"v".to_vec())
    );
    assert_eq!(get(&mut con, "s"), None);
}

#[test]
fn a_token_that_does_not_hold_the_lock_runs_nothing() {
    let server = TestServer::start();
    let mut con = server.connection();
    let not_held = "NOTHELD the lock 'k' is not held by this token: nothing ran";
    // No lock at all.
    assert_eq!(
        error_of(lock_do(&mut con, &["k", "t", "SET", "x", "1"])),
        not_held
    );
    acquire(&mut con, "k", 60_000, &["TOKEN", "t"]).unwrap();
    // Another token.
    assert_eq!(
        error_of(lock_do(&mut con, &["k", "other", "SET", "x", "1"])),
        not_held
    );
    // Released.
    release(&mut con, "k", b"t");
    assert_eq!(
        error_of(lock_do(&mut con, &["k", "t", "SET", "x", "1"])),
        not_held
    );
    // Expired.
    acquire(&mut con, "k", 50, &["TOKEN", "t"]).unwrap();
    poll_until(LIMIT, "the lock to expire", || !exists(&mut con, "k"));
    assert_eq!(
        error_of(lock_do(&mut con, &["k", "t", "SET", "x", "1"])),
        not_held
    );
    // Taken over by the next holder: the old token is refused, the new one runs.
    acquire(&mut con, "k", 60_000, &["TOKEN", "new"]).unwrap();
    assert_eq!(
        error_of(lock_do(&mut con, &["k", "t", "SET", "x", "1"])),
        not_held
    );
    assert!(!exists(&mut con, "x"), "nothing ran");
    assert_eq!(
        lock_do(&mut con, &["k", "new", "SET", "x", "2"]).unwrap(),
        redis::Value::Okay
    );
    // A key of another type: WRONGTYPE, as for the other commands.
    let err = error_of(lock_do(&mut con, &["x", "t", "SET", "y", "1"]));
    assert!(err.starts_with("WRONGTYPE"), "{err}");
    assert!(!exists(&mut con, "y"));
}

#[test]
fn any_shared_holder_may_write_while_its_place_lasts() {
    let server = TestServer::start();
    let mut con = server.connection();
    acquire(&mut con, "r", 60_000, &["TOKEN", "reader-1", "SHARED"]).unwrap();
    acquire(&mut con, "r", 60_000, &["TOKEN", "reader-2", "SHARED"]).unwrap();
    for reader in ["reader-1", "reader-2"] {
        assert_eq!(
            lock_do(&mut con, &["r", reader, "INCR", "counter"]).unwrap(),
            redis::Value::Int(if reader == "reader-1" { 1 } else { 2 })
        );
    }
    release(&mut con, "r", b"reader-1");
    assert!(
        error_of(lock_do(&mut con, &["r", "reader-1", "INCR", "counter"])).starts_with("NOTHELD")
    );
    assert_eq!(get(&mut con, "counter").as_deref(), Some("2"));
}

#[test]
fn what_a_script_may_not_run_and_lock_commands_are_refused_naming_them() {
    let server = TestServer::start();
    let mut con = server.connection();
    acquire(&mut con, "k", 60_000, &["TOKEN", "t"]).unwrap();
    let before = snapshot(&mut con, "k");
    for (argv, expected) in [
        (
            vec!["BLPOP", "list", "0"],
            "ERR LOCK.DO cannot run 'BLPOP': it may block",
        ),
        (
            vec!["brpop", "list", "0"],
            "ERR LOCK.DO cannot run 'brpop': it may block",
        ),
        (
            vec!["MULTI"],
            "ERR LOCK.DO cannot run 'MULTI': it may not run inside a script",
        ),
        (
            vec!["EXEC"],
            "ERR LOCK.DO cannot run 'EXEC': it may not run inside a script",
        ),
        (
            vec!["WATCH", "x"],
            "ERR LOCK.DO cannot run 'WATCH': it may not run inside a script",
        ),
        (
            vec!["SUBSCRIBE", "ch"],
            "ERR LOCK.DO cannot run 'SUBSCRIBE': it may not run inside a script",
        ),
        (
            vec!["LOCK.RELEASE", "k", "t"],
            "ERR LOCK.DO cannot run 'LOCK.RELEASE': a LOCK command cannot run inside LOCK.DO",
        ),
        (
            vec!["lock.do", "k", "t", "SET", "x", "1"],
            "ERR LOCK.DO cannot run 'lock.do': a LOCK command cannot run inside LOCK.DO",
        ),
    ] {
        let mut full = vec!["k", "t"];
        full.extend(argv.iter().copied());
        assert_eq!(error_of(lock_do(&mut con, &full)), expected, "{argv:?}");
    }
    // Unknown commands and wrong arities: the server's own errors.
    let err = error_of(lock_do(&mut con, &["k", "t", "NOSUCHCMD", "a"]));
    assert!(err.contains("unknown command"), "{err}");
    let err = error_of(lock_do(&mut con, &["k", "t", "SET", "x"]));
    assert!(err.contains("wrong number of arguments"), "{err}");
    assert!(!exists(&mut con, "x"));
    assert_eq!(snapshot(&mut con, "k"), before, "the lock is untouched");
    assert_eq!(lock_waiters(&mut con), 0);
}

#[test]
fn bad_input_is_refused_before_anything_is_looked_at() {
    let server = TestServer::start();
    let mut con = server.connection();
    acquire(&mut con, "k", 60_000, &["TOKEN", "t"]).unwrap();
    let long = "x".repeat(257);
    for argv in [
        vec!["k", "", "SET", "x", "1"],
        vec!["k", long.as_str(), "SET", "x", "1"],
    ] {
        assert_eq!(
            error_of(lock_do(&mut con, &argv)),
            "ERR invalid token: expected 1 to 256 bytes"
        );
    }
    for argv in [vec!["k", "t"], vec!["k"]] {
        assert!(error_of(lock_do(&mut con, &argv)).contains("wrong number of arguments"));
    }
    assert!(!exists(&mut con, "x"));
}

#[test]
fn the_keys_are_declared_for_routing_and_acl() {
    let server = TestServer::start();
    let mut con = server.connection();
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("LOCK.DO")
        .arg("k")
        .arg("t")
        .arg("MSET")
        .arg("a")
        .arg("1")
        .arg("b")
        .arg("2")
        .query(&mut con)
        .unwrap();
    assert_eq!(keys, ["k", "a", "b"]);
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("LOCK.DO")
        .arg("k")
        .arg("t")
        .arg("PING")
        .query(&mut con)
        .unwrap();
    assert_eq!(keys, ["k"]);
}

#[test]
fn the_command_runs_as_the_callers_acl_user() {
    let server = TestServer::start();
    let mut admin = server.connection();
    acquire(&mut admin, "lock:1", 60_000, &["TOKEN", "t"]).unwrap();
    for rule in [
        "ACL SETUSER writer on nopass ~* +lock.do +get",
        "ACL SETUSER scoped on nopass %R~lock:* ~data:* +lock.do +set",
    ] {
        let words: Vec<&str> = rule.split(' ').collect();
        let _: () = redis::cmd(words[0])
            .arg(&words[1..])
            .query(&mut admin)
            .unwrap();
    }
    let as_user = |user: &str| {
        let client =
            redis::Client::open(format!("redis://{user}:x@127.0.0.1:{}/", server.port)).unwrap();
        client.get_connection().unwrap()
    };
    let mut writer = as_user("writer");
    // +lock.do alone does not grant SET: the server's ACL error, nothing ran.
    let err = lock_do(&mut writer, &["lock:1", "t", "SET", "data:1", "v"]).unwrap_err();
    assert!(
        err.code() == Some("NOPERM") || err.to_string().contains("acl verification failed"),
        "{err}"
    );
    assert!(!exists(&mut admin, "data:1"));
    // GET is granted: it runs.
    let _: () = redis::cmd("SET")
        .arg("data:2")
        .arg("v")
        .query(&mut admin)
        .unwrap();
    assert_eq!(
        lock_do(&mut writer, &["lock:1", "t", "GET", "data:2"]).unwrap(),
        redis::Value::BulkString(b"v".to_vec())
    );
    // Key rights: the lock's key read-only is enough; the data key needs its own.
    let mut scoped = as_user("scoped");
    assert_eq!(
        lock_do(&mut scoped, &["lock:1", "t", "SET", "data:3", "v"]).unwrap(),
        redis::Value::Okay
    );
    let err = lock_do(&mut scoped, &["lock:1", "t", "SET", "elsewhere", "v"]).unwrap_err();
    assert_eq!(err.code(), Some("NOPERM"), "{err}");
    assert!(!exists(&mut admin, "elsewhere"));
}

#[test]
fn a_write_under_a_full_maxmemory_gets_oom_and_a_read_runs() {
    let server = TestServer::start();
    let mut con = server.connection();
    acquire(&mut con, "k", 60_000, &["TOKEN", "t"]).unwrap();
    let _: () = redis::cmd("SET").arg("x").arg("v").query(&mut con).unwrap();
    config_set(&mut con, "maxmemory", "1");
    let err = lock_do(&mut con, &["k", "t", "SET", "y", "v"]).unwrap_err();
    assert!(
        err.to_string().starts_with("OOM") || err.code() == Some("OOM"),
        "{err}"
    );
    assert_eq!(
        lock_do(&mut con, &["k", "t", "GET", "x"]).unwrap(),
        redis::Value::BulkString(b"v".to_vec())
    );
    config_set(&mut con, "maxmemory", "0");
    assert!(!exists(&mut con, "y"));
}

#[test]
fn it_works_inside_multi_and_scripts() {
    let server = TestServer::start();
    let mut con = server.connection();
    acquire(&mut con, "k", 60_000, &["TOKEN", "t"]).unwrap();
    let (set, incr): (String, i64) = redis::pipe()
        .atomic()
        .cmd("LOCK.DO")
        .arg("k")
        .arg("t")
        .arg("SET")
        .arg("n")
        .arg(5)
        .cmd("LOCK.DO")
        .arg("k")
        .arg("t")
        .arg("INCR")
        .arg("n")
        .query(&mut con)
        .unwrap();
    assert_eq!((set.as_str(), incr), ("OK", 6));
    let from_script: i64 = redis::cmd("EVAL")
        .arg("return redis.call('LOCK.DO', KEYS[1], ARGV[1], 'INCR', KEYS[2])")
        .arg(2)
        .arg("k")
        .arg("n")
        .arg("t")
        .query(&mut con)
        .unwrap();
    assert_eq!(from_script, 7);
    let refused: redis::RedisResult<redis::Value> = redis::cmd("EVAL")
        .arg("return redis.call('LOCK.DO', KEYS[1], 'wrong', 'INCR', KEYS[2])")
        .arg(2)
        .arg("k")
        .arg("n")
        .query(&mut con);
    assert!(error_of(refused).contains("NOTHELD"));
    assert_eq!(get(&mut con, "n").as_deref(), Some("7"));
}

#[test]
fn replicas_and_the_aof_get_the_inner_effects_only() {
    let mut master = TestServer::with_args(&AOF_ALWAYS);
    let replica = start_replica(&master, &[]);
    let mut m = master.connection();
    acquire(&mut m, "k", 600_000, &["TOKEN", "t"]).unwrap();
    for argv in [
        vec!["k", "t", "SET", "a", "1"],
        vec!["k", "t", "HINCRBY", "h", "f", "5"],
        vec!["k", "t", "INCRBYFLOAT", "f", "1.5"],
        vec!["k", "t", "SADD", "s", "x", "y"],
        vec!["k", "t", "SPOP", "s"],
        vec!["k", "t", "DEL", "a"],
    ] {
        lock_do(&mut m, &argv).unwrap();
    }
    sync_replicas(&mut m, 1);
    let mut r = replica.connection();
    for key in ["a", "h", "f", "s", "k"] {
        assert_eq!(
            digest_value(&mut m, key),
            digest_value(&mut r, key),
            "{key} differs on the replica"
        );
    }
    let calls = server_info(&mut r, "commandstats");
    assert!(
        !calls.contains("cmdstat_lock.do"),
        "the replica ran the effects, not LOCK.DO"
    );
    let before: Vec<String> = ["a", "h", "f", "s"]
        .iter()
        .map(|k| digest_value(&mut m, k))
        .collect();
    master.restart();
    let mut m = master.connection();
    let after: Vec<String> = ["a", "h", "f", "s"]
        .iter()
        .map(|k| digest_value(&mut m, k))
        .collect();
    assert_eq!(before, after, "the AOF replays the same data");
}

#[test]
fn slowlog_never_shows_the_token() {
    let server = TestServer::start();
    let mut con = server.connection();
    config_set(&mut con, "slowlog-log-slower-than", "0");
    acquire(&mut con, "k", 60_000, &["TOKEN", "secret-token"]).unwrap();
    lock_do(&mut con, &["k", "secret-token", "SET", "x", "1"]).unwrap();
    let _ = lock_do(&mut con, &["k", "secret-token", "BLPOP", "l", "0"]);
    let _ = lock_do(&mut con, &["k", "secret-token"]);
    let log: redis::Value = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(100)
        .query(&mut con)
        .unwrap();
    assert_no_token_in("SLOWLOG", format!("{log:?}").as_bytes(), &["secret-token"]);
}
