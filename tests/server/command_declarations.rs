//! What the server itself knows of the commands: their arity (so it refuses a wrong
//! number of arguments as for its own commands, aborting a transaction at `EXEC`), how
//! they use their key (so ACL key permissions `%R~`/`%W~` apply as for `GET`/`SET`), and
//! the integer syntax they share with the server.

use redis::Value;

use crate::common::{TestServer, acquire, error_of, exists, info_field, release};

/// `COMMAND INFO name`: the arity and the flags of the first key spec.
fn arity_and_key_flags(con: &mut redis::Connection, name: &str) -> (i64, Vec<String>) {
    let reply: Value = redis::cmd("COMMAND")
        .arg("INFO")
        .arg(name)
        .query(con)
        .unwrap();
    let Value::Array(mut commands) = reply else {
        panic!("COMMAND INFO: {reply:?}");
    };
    let Some(Value::Array(info)) = commands.pop() else {
        panic!("COMMAND INFO {name}: {commands:?}");
    };
    let arity: i64 = redis::from_redis_value(info[1].clone()).unwrap();
    // [name, arity, flags, first, last, step, acl categories, tips, key specs, subcommands]
    let Value::Array(specs) = &info[8] else {
        panic!("{name}: no key specs in {info:?}");
    };
    let spec: Vec<Value> = match &specs[0] {
        Value::Array(fields) => fields.clone(),
        Value::Map(pairs) => pairs
            .iter()
            .flat_map(|(k, v)| [k.clone(), v.clone()])
            .collect(),
        other => panic!("{name}: key spec {other:?}"),
    };
    let at = spec
        .iter()
        .position(|v| redis::from_redis_value::<String>(v.clone()).is_ok_and(|s| s == "flags"))
        .expect("a flags field");
    let flags: Vec<String> = redis::from_redis_value(spec[at + 1].clone()).unwrap();
    (arity, flags)
}

#[test]
fn every_command_declares_its_arity_and_how_it_uses_its_key() {
    let server = TestServer::start();
    let mut con = server.connection();
    for (name, arity, flags) in [
        ("lock.acquire", -3, &["RW", "update"][..]),
        ("lock.release", 3, &["RW", "delete"]),
        ("lock.extend", -4, &["RW", "update"]),
        ("lock.info", 2, &["RO", "access"]),
    ] {
        let (got_arity, got_flags) = arity_and_key_flags(&mut con, name);
        assert_eq!(got_arity, arity, "{name}");
        assert_eq!(got_flags, flags, "{name}");
    }
}

#[test]
fn a_wrong_number_of_arguments_inside_multi_aborts_the_transaction_like_a_native_command() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (token, fence) = acquire(&mut con, "held", 60_000, &["TOKEN", "t"]).unwrap();
    for bad in [
        &["LOCK.ACQUIRE", "free"][..],
        &["LOCK.RELEASE", "held"],
        &["LOCK.EXTEND", "held", "t"],
        &["LOCK.INFO"],
    ] {
        let () = redis::cmd("MULTI").query(&mut con).unwrap();
        let queued: String = redis::cmd("SET")
            .arg("mark")
            .arg(1)
            .query(&mut con)
            .unwrap();
        assert_eq!(queued, "QUEUED");
        let err = error_of(redis::cmd(bad[0]).arg(&bad[1..]).query(&mut con));
        assert_eq!(
            err,
            format!(
                "ERR wrong number of arguments for '{}' command",
                bad[0].to_lowercase()
            )
        );
        let err = error_of(redis::cmd("EXEC").query(&mut con));
        assert!(err.starts_with("EXECABORT"), "{bad:?}: {err}");
        assert!(!exists(&mut con, "mark"), "{bad:?}: the transaction ran");
    }
    assert_eq!(info_field(&mut con, "held", "fence"), Some(fence));
    assert!(!exists(&mut con, "free"));
    assert_eq!(release(&mut con, "held", &token), 1);
}

fn dry_run(con: &mut redis::Connection, user: &str, command: &[&str]) -> String {
    match redis::cmd("ACL")
        .arg("DRYRUN")
        .arg(user)
        .arg(command)
        .query::<String>(con)
    {
        Ok(ok) => ok,
        Err(err) => err.to_string(),
    }
}

#[test]
fn acl_read_rights_allow_lock_info_and_write_rights_allow_the_writes() {
    let server = TestServer::start();
    let mut con = server.connection();
    for (user, rights) in [("reader", "%R~*"), ("writer", "%W~*")] {
        let () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(user)
            .arg("on")
            .arg("nopass")
            .arg(rights)
            .arg("+@all")
            .query(&mut con)
            .unwrap();
    }
    let allowed = |reply: &str| reply == "OK";
    let read = ["LOCK.INFO", "k"];
    let writes = [
        &["LOCK.ACQUIRE", "k", "1000"][..],
        &["LOCK.RELEASE", "k", "t"],
        &["LOCK.EXTEND", "k", "t", "1000"],
    ];
    // As GET: readers may, writers may not.
    assert!(allowed(&dry_run(&mut con, "reader", &["GET", "k"])));
    assert!(allowed(&dry_run(&mut con, "reader", &read)));
    assert!(!allowed(&dry_run(&mut con, "writer", &read)));
    // As SET: writers may, readers may not. (A write shows no other client's data: the
    // token is compared, never returned, so write rights suffice.)
    assert!(allowed(&dry_run(&mut con, "writer", &["SET", "k", "v"])));
    for command in writes {
        assert!(
            !allowed(&dry_run(&mut con, "reader", command)),
            "{command:?}"
        );
        assert!(
            allowed(&dry_run(&mut con, "writer", command)),
            "{command:?}"
        );
    }
}

#[test]
fn integers_with_leading_zeros_are_refused_as_the_server_refuses_them() {
    let server = TestServer::start();
    let mut con = server.connection();
    let err = error_of(redis::cmd("PEXPIRE").arg("k").arg("010").query(&mut con));
    assert!(
        err.contains("not an integer"),
        "the server's own rule: {err}"
    );
    let err = error_of(
        redis::cmd("LOCK.ACQUIRE")
            .arg("k")
            .arg("010")
            .query(&mut con),
    );
    assert!(err.starts_with("ERR") && err.contains("ttl-ms"), "{err}");
    let err = error_of(
        redis::cmd("LOCK.ACQUIRE")
            .arg("k")
            .arg("100")
            .arg("WAIT")
            .arg("00")
            .query(&mut con),
    );
    assert!(
        err.starts_with("ERR") && err.contains("timeout-ms"),
        "{err}"
    );
    assert!(!exists(&mut con, "k"));
}

#[test]
fn lock_debug_runs_for_a_loopback_client_with_debug_commands_local() {
    let server = TestServer::with_args(&["--enable-debug-command", "local"]);
    let mut con = server.connection();
    let () = redis::cmd("DEBUG")
        .arg("SLEEP")
        .arg(0)
        .query(&mut con)
        .unwrap();
    // Allowed, it runs and panics (the guard answers); refused, it would say disabled.
    let err = error_of(redis::cmd("LOCK.DEBUG").arg("PANIC").query(&mut con));
    assert!(err.contains("internal error"), "{err}");
    assert!(!err.contains("disabled"), "{err}");
}
