//! The `@lock` ACL category, where the server's module API can add one (Redis 7.4+,
//! Valkey 8+), and the per-command rights that do the same everywhere.

use crate::common::{TestServer, error_of, server_kind};

/// The public commands, which `@lock` holds (and the per-command rights name).
const PUBLIC: [&str; 9] = [
    "lock.acquire",
    "lock.acquireall",
    "lock.release",
    "lock.extend",
    "lock.info",
    "lock.holders",
    "lock.contended",
    "lock.watch",
    "lock.do",
];

/// Creates user `name` with password `pw` and `rules`, and a connection logged in as it.
fn user(server: &TestServer, name: &str, rules: &[&str]) -> redis::Connection {
    let mut admin = server.connection();
    let () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(name)
        .arg("on")
        .arg(">pw")
        .arg(rules)
        .query(&mut admin)
        .unwrap();
    let mut con = server.connection();
    let () = redis::cmd("AUTH")
        .arg(name)
        .arg("pw")
        .query(&mut con)
        .unwrap();
    con
}

/// What a user limited to `orders:*` can do with the lock commands.
fn can_lock_orders_only(mut con: redis::Connection) {
    let (token, _): (String, i64) = redis::cmd("LOCK.ACQUIRE")
        .arg("orders:1")
        .arg(30_000)
        .query(&mut con)
        .unwrap();
    let extended: i64 = redis::cmd("LOCK.EXTEND")
        .arg("orders:1")
        .arg(&token)
        .arg(60_000)
        .query(&mut con)
        .unwrap();
    assert_eq!(extended, 1);
    let _: redis::Value = redis::cmd("LOCK.INFO")
        .arg("orders:1")
        .query(&mut con)
        .unwrap();
    let _: redis::Value = redis::cmd("LOCK.HOLDERS")
        .arg("orders:1")
        .query(&mut con)
        .unwrap();
    let _: redis::Value = redis::cmd("LOCK.CONTENDED").query(&mut con).unwrap();
    let _: redis::Value = redis::cmd("LOCK.WATCH")
        .arg("orders:1")
        .arg(0)
        .arg(1)
        .query(&mut con)
        .unwrap();
    let released: i64 = redis::cmd("LOCK.RELEASE")
        .arg("orders:1")
        .arg(&token)
        .query(&mut con)
        .unwrap();
    assert_eq!(released, 1);
    let err = error_of(
        redis::cmd("LOCK.ACQUIRE")
            .arg("other:1")
            .arg(30_000)
            .query(&mut con),
    );
    assert!(err.starts_with("NOPERM"), "{err}");
    // LOCK.DO still needs the inner command's own rights: the server's own ACL error,
    // whose text differs on Redis 7.0.
    let (token, _): (String, i64) = redis::cmd("LOCK.ACQUIRE")
        .arg("orders:2")
        .arg(30_000)
        .query(&mut con)
        .unwrap();
    let err = error_of(
        redis::cmd("LOCK.DO")
            .arg("orders:2")
            .arg(&token)
            .arg("SET")
            .arg("orders:2:state")
            .arg("paid")
            .query(&mut con),
    );
    assert!(
        err.starts_with("NOPERM") || err.contains("acl verification failed"),
        "{err}"
    );
    // And no other command: the user has the lock commands only.
    let err = error_of(redis::cmd("GET").arg("orders:1").query(&mut con));
    assert!(err.starts_with("NOPERM"), "{err}");
}

#[test]
fn the_lock_category_holds_the_public_commands_where_the_server_can_add_one() {
    let server = TestServer::start();
    let mut con = server.connection();
    let listed: redis::RedisResult<Vec<String>> =
        redis::cmd("ACL").arg("CAT").arg("lock").query(&mut con);
    if !server_kind().has_module_acl_categories() {
        let err = error_of(redis::cmd("ACL").arg("CAT").arg("lock").query(&mut con));
        assert!(err.contains("lock"), "{err}");
        assert!(
            server.log().contains("no @lock"),
            "the module says why at load"
        );
        return;
    }
    let mut listed = listed.expect("ACL CAT lock");
    listed.sort();
    let mut public = PUBLIC.to_vec();
    public.sort();
    assert_eq!(listed, public, "the public commands, never LOCK._*");
    let categories: Vec<String> = redis::cmd("ACL").arg("CAT").query(&mut con).unwrap();
    assert!(categories.iter().any(|c| c == "lock"), "{categories:?}");
    can_lock_orders_only(user(&server, "app", &["~orders:*", "+@lock"]));
    // `-@lock` takes them away again.
    let mut denied = user(&server, "revoked", &["~*", "+@all", "-@lock"]);
    let err = error_of(redis::cmd("LOCK.INFO").arg("orders:1").query(&mut denied));
    assert!(err.starts_with("NOPERM"), "{err}");
}

#[test]
fn the_per_command_rights_do_the_same_on_every_server() {
    let server = TestServer::start();
    let rights: Vec<String> = PUBLIC.iter().map(|c| format!("+{c}")).collect();
    let mut rules = vec!["~orders:*"];
    rules.extend(rights.iter().map(String::as_str));
    can_lock_orders_only(user(&server, "app", &rules));
}
