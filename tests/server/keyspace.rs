//! A lock is a key like any other (docs/commands.md, "The lock as a key"): the server's generic key
//! commands work on it, string commands refuse it, and its type callbacks (DUMP/RESTORE,
//! COPY, MEMORY USAGE, digest) carry token, fence and grant time.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::*;
use redis::Value;

const TOKEN: &str = "the-holder";

/// A lock on `key` held by [`TOKEN`] for a minute: its fence and grant time.
fn hold(con: &mut redis::Connection, key: &str) -> (i64, i64) {
    let (_, fence) = acquire(con, key, 60_000, &["TOKEN", TOKEN]).expect("granted");
    (fence, info_field(con, key, "acquired").expect("info"))
}

/// Fails unless `key` is the grant `hold` returned (same fence and grant time), with at
/// most the minute it was granted for left.
fn assert_holds_grant(con: &mut redis::Connection, key: &str, (fence, acquired): (i64, i64)) {
    assert_eq!(info_field(con, key, "fence"), Some(fence));
    assert_eq!(info_field(con, key, "acquired"), Some(acquired));
    let ms = pttl(con, key);
    assert!(ms > 0 && ms <= 60_000, "PTTL {ms}");
}

/// Text of a status or bulk reply.
fn text(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Okay => "OK".into(),
        other => panic!("expected a string, got {other:?}"),
    }
}

#[test]
fn string_commands_on_a_lock_answer_wrongtype_and_change_nothing() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (fence, _) = hold(&mut con, "lk");
    let before = dump(&mut con, "lk");
    let cases: [&[&str]; 8] = [
        &["GET", "lk"],
        &["APPEND", "lk", "x"],
        &["INCR", "lk"],
        &["INCRBY", "lk", "5"],
        &["SET", "lk", "v", "GET"],
        &["STRLEN", "lk"],
        &["GETDEL", "lk"],
        &["GETRANGE", "lk", "0", "-1"],
    ];
    for case in cases {
        let err = error_of_command(&mut con, case);
        assert!(err.starts_with("WRONGTYPE "), "{case:?}: {err}");
        assert_eq!(dump(&mut con, "lk"), before, "{case:?}");
        let ttl = pttl(&mut con, "lk");
        assert!(ttl > 0 && ttl <= 60_000, "{case:?}: PTTL {ttl}");
    }
    assert_eq!(info_field(&mut con, "lk", "fence"), Some(fence));
    assert_eq!(release(&mut con, "lk", TOKEN.as_bytes()), 1);
}

#[test]
fn a_plain_set_overwrites_a_lock() {
    let server = TestServer::start();
    let mut con = server.connection();
    hold(&mut con, "lk");
    let () = redis::cmd("SET")
        .arg("lk")
        .arg("v")
        .query(&mut con)
        .unwrap();
    let value: String = redis::cmd("GET").arg("lk").query(&mut con).unwrap();
    assert_eq!(value, "v");
    let kind: String = redis::cmd("TYPE").arg("lk").query(&mut con).unwrap();
    assert_eq!(kind, "string");
    assert_eq!(
        pttl(&mut con, "lk"),
        -1,
        "SET without options clears the expiry"
    );
    let err = error_of(
        redis::cmd("LOCK.RELEASE")
            .arg("lk")
            .arg(TOKEN)
            .query(&mut con),
    );
    assert!(err.starts_with("WRONGTYPE "), "{err}");
}

#[test]
fn type_names_the_module_type() {
    let server = TestServer::start();
    let mut con = server.connection();
    hold(&mut con, "lk");
    let kind: String = redis::cmd("TYPE").arg("lk").query(&mut con).unwrap();
    assert_eq!(kind, "redislock");
}

#[test]
fn ttl_and_pttl_show_the_lock_expiry() {
    let server = TestServer::start();
    let mut con = server.connection();
    acquire(&mut con, "lk", 90_000, &[]).expect("granted");
    let ms = pttl(&mut con, "lk");
    assert!(ms > 30_000 && ms <= 90_000, "PTTL {ms}");
    let secs: i64 = redis::cmd("TTL").arg("lk").query(&mut con).unwrap();
    assert!(secs > 30 && secs <= 90, "TTL {secs}");
    let info_ttl = info_field(&mut con, "lk", "ttl").unwrap();
    assert!(
        info_ttl > 30_000 && info_ttl <= 90_000,
        "LOCK.INFO ttl {info_ttl}"
    );
}

#[test]
fn persist_removes_the_expiry_and_the_lock_stays_held() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (fence, _) = hold(&mut con, "lk");
    let removed: i64 = redis::cmd("PERSIST").arg("lk").query(&mut con).unwrap();
    assert_eq!(removed, 1);
    assert_eq!(pttl(&mut con, "lk"), -1);
    assert_eq!(info_field(&mut con, "lk", "ttl"), Some(-1));
    assert_eq!(info_field(&mut con, "lk", "fence"), Some(fence));
    assert_eq!(acquire(&mut con, "lk", 1_000, &["TOKEN", "other"]), None);

    // The holder can give it an expiry again.
    assert_eq!(extend(&mut con, "lk", TOKEN.as_bytes(), 30_000), 1);
    let ms = pttl(&mut con, "lk");
    assert!(ms > 0 && ms <= 30_000, "PTTL {ms}");
    assert_eq!(release(&mut con, "lk", TOKEN.as_bytes()), 1);
}

#[test]
fn an_admin_expire_changes_the_lock_expiry() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (fence, _) = hold(&mut con, "lk");
    let set: i64 = redis::cmd("EXPIRE")
        .arg("lk")
        .arg(1_000)
        .query(&mut con)
        .unwrap();
    assert_eq!(set, 1);
    let ms = info_field(&mut con, "lk", "ttl").unwrap();
    assert!(ms > 900_000 && ms <= 1_000_000, "LOCK.INFO ttl {ms}");
    let ms = pttl(&mut con, "lk");
    assert!(ms > 900_000 && ms <= 1_000_000, "PTTL {ms}");

    let set: i64 = redis::cmd("PEXPIRE")
        .arg("lk")
        .arg(50)
        .query(&mut con)
        .unwrap();
    assert_eq!(set, 1);
    poll_until(Duration::from_secs(10), "the lock expires", || {
        !exists(&mut con, "lk")
    });
    assert_eq!(release(&mut con, "lk", TOKEN.as_bytes()), 0);
    let (_, next) = acquire(&mut con, "lk", 1_000, &[]).expect("free again");
    assert!(next > fence);
}

#[test]
fn del_unlink_and_exists_work_on_a_lock() {
    let server = TestServer::start();
    let mut con = server.connection();
    hold(&mut con, "a");
    hold(&mut con, "b");
    let count: i64 = redis::cmd("EXISTS")
        .arg("a")
        .arg("b")
        .arg("c")
        .query(&mut con)
        .unwrap();
    assert_eq!(count, 2);

    let deleted: i64 = redis::cmd("DEL").arg("a").query(&mut con).unwrap();
    assert_eq!(deleted, 1);
    assert!(!exists(&mut con, "a"));
    assert_eq!(info(&mut con, "a"), None);
    assert_eq!(release(&mut con, "a", TOKEN.as_bytes()), 0);

    let unlinked: i64 = redis::cmd("UNLINK").arg("b").query(&mut con).unwrap();
    assert_eq!(unlinked, 1);
    assert!(!exists(&mut con, "b"));
    assert_eq!(release(&mut con, "b", TOKEN.as_bytes()), 0);

    // Free again for anyone.
    assert!(acquire(&mut con, "a", 1_000, &["TOKEN", "next"]).is_some());
    assert!(acquire(&mut con, "b", 1_000, &["TOKEN", "next"]).is_some());
}

#[test]
fn rename_keeps_token_fence_grant_time_and_expiry() {
    let server = TestServer::start();
    let mut con = server.connection();
    let grant = hold(&mut con, "old");
    let () = redis::cmd("RENAME")
        .arg("old")
        .arg("new")
        .query(&mut con)
        .unwrap();
    assert!(!exists(&mut con, "old"));
    assert_holds_grant(&mut con, "new", grant);
    assert_eq!(acquire(&mut con, "new", 1_000, &["TOKEN", "other"]), None);
    assert_eq!(release(&mut con, "old", TOKEN.as_bytes()), 0);
    assert_eq!(release(&mut con, "new", TOKEN.as_bytes()), 1);
}

#[test]
fn dump_and_restore_carry_token_fence_and_grant_time() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (fence, acquired) = hold(&mut con, "lk");
    let payload = dump(&mut con, "lk").expect("DUMP of a lock");
    let _: i64 = redis::cmd("DEL").arg("lk").query(&mut con).unwrap();

    // No TTL: the restored lock has no expiry.
    let () = redis::cmd("RESTORE")
        .arg("plain")
        .arg(0)
        .arg(&payload)
        .query(&mut con)
        .unwrap();
    let kind: String = redis::cmd("TYPE").arg("plain").query(&mut con).unwrap();
    assert_eq!(kind, "redislock");
    assert_eq!(info_field(&mut con, "plain", "fence"), Some(fence));
    assert_eq!(info_field(&mut con, "plain", "acquired"), Some(acquired));
    assert_eq!(info_field(&mut con, "plain", "ttl"), Some(-1));
    assert_eq!(acquire(&mut con, "plain", 1_000, &["TOKEN", "other"]), None);
    assert_eq!(release(&mut con, "plain", TOKEN.as_bytes()), 1);

    // A relative TTL.
    let () = redis::cmd("RESTORE")
        .arg("relative")
        .arg(30_000)
        .arg(&payload)
        .query(&mut con)
        .unwrap();
    let ms = pttl(&mut con, "relative");
    assert!(ms > 0 && ms <= 30_000, "PTTL {ms}");
    let ms = info_field(&mut con, "relative", "ttl").unwrap();
    assert!(ms > 0 && ms <= 30_000, "LOCK.INFO ttl {ms}");
    assert_eq!(release(&mut con, "relative", TOKEN.as_bytes()), 1);

    // An absolute expiry.
    let at = server_now_ms(&mut con) + 45_000;
    let () = redis::cmd("RESTORE")
        .arg("absolute")
        .arg(at)
        .arg(&payload)
        .arg("ABSTTL")
        .query(&mut con)
        .unwrap();
    let ms = pttl(&mut con, "absolute");
    assert!(ms > 0 && ms <= 45_000, "PTTL {ms}");
    assert_eq!(info_field(&mut con, "absolute", "fence"), Some(fence));

    // Onto an existing key only with REPLACE.
    let err = error_of(
        redis::cmd("RESTORE")
            .arg("absolute")
            .arg(0)
            .arg(&payload)
            .query(&mut con),
    );
    assert!(err.starts_with("BUSYKEY"), "{err}");
    let () = redis::cmd("SET")
        .arg("str")
        .arg("v")
        .query(&mut con)
        .unwrap();
    let () = redis::cmd("RESTORE")
        .arg("str")
        .arg(0)
        .arg(&payload)
        .arg("REPLACE")
        .query(&mut con)
        .unwrap();
    assert_eq!(info_field(&mut con, "str", "fence"), Some(fence));
    assert_eq!(release(&mut con, "str", TOKEN.as_bytes()), 1);
    assert_eq!(release(&mut con, "absolute", TOKEN.as_bytes()), 1);
}

#[test]
fn copy_duplicates_a_lock_with_its_token() {
    let server = TestServer::start();
    let mut con = server.connection();
    let grant @ (fence, _) = hold(&mut con, "src");
    let copied: i64 = redis::cmd("COPY")
        .arg("src")
        .arg("dst")
        .query(&mut con)
        .unwrap();
    assert_eq!(copied, 1);
    assert_holds_grant(&mut con, "dst", grant);
    assert_eq!(release(&mut con, "dst", TOKEN.as_bytes()), 1);
    // The original is untouched by what happens to the copy.
    assert_eq!(info_field(&mut con, "src", "fence"), Some(fence));
    assert_eq!(release(&mut con, "src", TOKEN.as_bytes()), 1);
}

#[test]
fn migrate_moves_a_lock_with_token_fence_grant_time_and_expiry() {
    let source = TestServer::start();
    let target = TestServer::start();
    let mut con = source.connection();
    let mut there = target.connection();
    let grant = hold(&mut con, "moving");
    let () = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(target.port)
        .arg("moving")
        .arg(0)
        .arg(10_000)
        .query(&mut con)
        .unwrap();
    assert!(!exists(&mut con, "moving"));
    assert_holds_grant(&mut there, "moving", grant);
    assert_eq!(acquire(&mut there, "moving", 1_000, &["TOKEN", "x"]), None);
    assert_eq!(release(&mut there, "moving", TOKEN.as_bytes()), 1);
}

#[test]
fn memory_usage_answers_an_integer() {
    let server = TestServer::start();
    let mut con = server.connection();
    hold(&mut con, "lk");
    let bytes: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("lk")
        .query(&mut con)
        .unwrap();
    assert!(bytes > 0, "{bytes}");
}

/// Fills a fresh server with `count` keys written by `command(i)`: the growth of
/// `used_memory` per key less the clients' buffers (`mem_clients_normal`: a loaded
/// machine leaves them larger after a pipeline), once no rehash of the keyspace is under
/// way, and the mean `MEMORY USAGE` of the first hundred (some servers answer a little
/// more for some keys than for others).
fn footprint_of(count: usize, command: impl Fn(usize) -> redis::Cmd) -> (f64, f64) {
    let server = TestServer::start();
    let mut con = server.connection();
    let used = |con: &mut redis::Connection| {
        let memory = server_info(con, "memory");
        info_int(&memory, "used_memory") - info_int(&memory, "mem_clients_normal")
    };
    let before = used(&mut con);
    for first in (0..count).step_by(1000) {
        let mut pipe = redis::pipe();
        for i in first..(first + 1000).min(count) {
            pipe.add_command(command(i)).ignore();
        }
        let () = pipe.query(&mut con).expect("the keys are written");
    }
    // A table being rehashed into a larger one holds both for a while, which the server
    // finishes a little at a time (a cron that runs late on a loaded machine): both fills
    // are measured once the main table is whole again.
    poll_until(
        Duration::from_secs(20),
        "the keyspace's rehash done",
        || {
            let stats: String = redis::cmd("DEBUG")
                .arg("HTSTATS")
                .arg(0)
                .query(&mut con)
                .expect("DEBUG HTSTATS");
            !stats.contains("rehashing target")
        },
    );
    let grown = (used(&mut con) - before) as f64 / count as f64;
    let usage: i64 = (0..100)
        .map(|i| {
            redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(format!("key:{i:06}"))
                .query::<i64>(&mut con)
                .expect("MEMORY USAGE")
        })
        .sum();
    (grown, usage as f64 / 100.0)
}

/// `LOCK.ACQUIRE` with `extra` options against `SET PX`, on the same names, 32-byte values
/// and TTLs on two fresh servers: whatever the server adds per key (name, table entries,
/// expiry) is the same on both sides, so the difference of `MEMORY USAGE` must be the
/// difference of what memory really grew by, less `beside` bytes a lock costs outside
/// its key.
fn memory_usage_matches_growth(extra: &[&str], beside: f64) {
    const COUNT: usize = 20_000;
    const TOKEN: &str = "0123456789abcdef0123456789abcdef";
    let (lock_grown, lock_usage) = footprint_of(COUNT, |i| {
        let mut cmd = redis::cmd("LOCK.ACQUIRE");
        cmd.arg(format!("key:{i:06}"))
            .arg(600_000)
            .arg("TOKEN")
            .arg(TOKEN)
            .arg(extra);
        cmd
    });
    let (string_grown, string_usage) = footprint_of(COUNT, |i| {
        let mut cmd = redis::cmd("SET");
        cmd.arg(format!("key:{i:06}"))
            .arg(TOKEN)
            .arg("PX")
            .arg(600_000);
        cmd
    });
    let real = lock_grown - string_grown - beside;
    println!(
        "{extra:?}: a lock: {lock_grown:.1} bytes of used_memory, MEMORY USAGE {lock_usage:.1}; \
         a string key: {string_grown:.1}, MEMORY USAGE {string_usage:.1}"
    );
    let reported = lock_usage - string_usage;
    // Within 12 bytes: MEMORY USAGE counts what the key's allocations were asked for,
    // used_memory what the allocator's size classes gave; on Redis 8, which keeps a
    // string's value inside its key's object and a lock's value apart, the two differ by
    // 8 to 9 bytes a key once no rehash is under way (measured). A lock that forgot its
    // token or its holder table would be 32 bytes or more off.
    assert!(
        (reported - real).abs() <= 12.0,
        "{extra:?}: MEMORY USAGE says a lock costs {reported:.1} bytes more than a string \
         key; memory grew by {real:.1} more ({lock_grown:.1} against {string_grown:.1} a \
         key, less {beside} beside it)"
    );
}

#[test]
fn memory_usage_counts_what_a_lock_costs_beside_a_string_key() {
    memory_usage_matches_growth(&[], 0.0);
}

#[test]
fn memory_usage_counts_what_a_session_bound_lock_costs() {
    // Its value and lock in one block. Beside the key, the session registry keeps the
    // name after a length byte: 11 bytes for `key:000000`, which MEMORY USAGE of the key
    // does not count.
    memory_usage_matches_growth(&["SESSION", "5000"], 11.0);
}

#[test]
fn object_subcommands_answer_without_harming_the_lock() {
    let server = TestServer::start();
    let mut con = server.connection();
    hold(&mut con, "lk");
    let before = dump(&mut con, "lk");
    for sub in ["ENCODING", "REFCOUNT", "IDLETIME"] {
        let reply: redis::RedisResult<Value> =
            redis::cmd("OBJECT").arg(sub).arg("lk").query(&mut con);
        assert!(reply.is_ok(), "OBJECT {sub}: {reply:?}");
    }
    config_set(&mut con, "maxmemory-policy", "allkeys-lfu");
    let freq: i64 = redis::cmd("OBJECT")
        .arg("FREQ")
        .arg("lk")
        .query(&mut con)
        .unwrap();
    assert!(freq >= 0);
    ping(&mut con);
    assert_eq!(dump(&mut con, "lk"), before);
}

#[test]
fn scan_type_redislock_finds_lock_keys_only() {
    let server = TestServer::start();
    let mut con = server.connection();
    let mut locks = BTreeSet::new();
    for i in 0..30 {
        let key = format!("lock:{i}");
        acquire(&mut con, &key, 60_000, &[]).expect("granted");
        locks.insert(key);
        let () = redis::cmd("SET")
            .arg(format!("str:{i}"))
            .arg("v")
            .query(&mut con)
            .unwrap();
        let _: i64 = redis::cmd("RPUSH")
            .arg(format!("list:{i}"))
            .arg("v")
            .query(&mut con)
            .unwrap();
    }
    let mut found = BTreeSet::new();
    let mut cursor = "0".to_string();
    loop {
        let (next, keys): (String, Vec<String>) = redis::cmd("SCAN")
            .arg(&cursor)
            .arg("COUNT")
            .arg(7)
            .arg("TYPE")
            .arg("redislock")
            .query(&mut con)
            .unwrap();
        found.extend(keys);
        if next == "0" {
            break;
        }
        cursor = next;
    }
    assert_eq!(found, locks);
}

/// `COMMAND INFO name`: (flags, first key, last key, step).
fn command_info(con: &mut redis::Connection, name: &str) -> (Vec<String>, i64, i64, i64) {
    let reply: Value = redis::cmd("COMMAND")
        .arg("INFO")
        .arg(name)
        .query(con)
        .unwrap();
    let Value::Array(commands) = reply else {
        panic!("COMMAND INFO: {reply:?}");
    };
    let Some(Value::Array(fields)) = commands.first() else {
        panic!("COMMAND INFO {name}: {commands:?}");
    };
    assert_eq!(text(&fields[0]), name);
    let flags = match &fields[2] {
        Value::Array(flags) | Value::Set(flags) => flags.iter().map(text).collect(),
        other => panic!("flags: {other:?}"),
    };
    let int = |v: &Value| match v {
        Value::Int(i) => *i,
        other => panic!("expected an integer, got {other:?}"),
    };
    (flags, int(&fields[3]), int(&fields[4]), int(&fields[5]))
}

#[test]
fn command_info_declares_the_key_at_position_1_and_the_flags() {
    let server = TestServer::start();
    let mut con = server.connection();
    let cases: [(&str, &[&str], &[&str]); 4] = [
        ("lock.acquire", &["write", "denyoom"], &["readonly"]),
        ("lock.release", &["write", "fast"], &["readonly", "denyoom"]),
        ("lock.extend", &["write", "fast"], &["readonly", "denyoom"]),
        ("lock.info", &["readonly", "fast"], &["write", "denyoom"]),
    ];
    for (name, present, absent) in cases {
        let (flags, first, last, step) = command_info(&mut con, name);
        for flag in present {
            assert!(
                flags.iter().any(|f| f == flag),
                "{name}: {flag} in {flags:?}"
            );
        }
        for flag in absent {
            assert!(
                !flags.iter().any(|f| f == flag),
                "{name}: no {flag} in {flags:?}"
            );
        }
        assert_eq!((first, last, step), (1, 1, 1), "{name}");
    }
}

#[test]
fn command_getkeys_finds_the_key_of_every_command() {
    let server = TestServer::start();
    let mut con = server.connection();
    let cases: [&[&str]; 5] = [
        &["LOCK.ACQUIRE", "the-key", "1000"],
        &["LOCK.ACQUIRE", "the-key", "1000", "TOKEN", "t", "WAIT", "5"],
        &["LOCK.RELEASE", "the-key", "t"],
        &["LOCK.EXTEND", "the-key", "t", "1000"],
        &["LOCK.INFO", "the-key"],
    ];
    for case in cases {
        let keys: Vec<String> = redis::cmd("COMMAND")
            .arg("GETKEYS")
            .arg(case)
            .query(&mut con)
            .unwrap();
        assert_eq!(keys, ["the-key"], "{case:?}");
    }
}

#[test]
fn debug_digest_value_answers_and_follows_the_lock_value() {
    let server = TestServer::start();
    let mut con = server.connection();
    hold(&mut con, "a");
    acquire(&mut con, "b", 60_000, &["TOKEN", "someone-else"]).expect("granted");
    let a = digest_value(&mut con, "a");
    assert_eq!(a.len(), 40);
    assert_ne!(a, "0".repeat(40), "a lock must digest to something");
    assert_ne!(
        a,
        digest_value(&mut con, "b"),
        "different locks, different digests"
    );

    // A copy of the value digests the same (with an expiry too: the server mixes in
    // whether the key has one).
    let payload = dump(&mut con, "a").unwrap();
    let () = redis::cmd("RESTORE")
        .arg("a-copy")
        .arg(60_000)
        .arg(&payload)
        .query(&mut con)
        .unwrap();
    assert_eq!(digest_value(&mut con, "a-copy"), a);
    let whole: String = redis::cmd("DEBUG").arg("DIGEST").query(&mut con).unwrap();
    assert_ne!(whole, "0".repeat(40));
}

/// The DUMP payload with the module type's encoding version replaced, CRC recomputed.
fn with_encoding_version(payload: &[u8], encver: u64) -> Vec<u8> {
    let mut patched = payload.to_vec();
    let id = u64::from_be_bytes(patched[2..10].try_into().unwrap());
    let id = (id & !1023) | encver;
    patched[2..10].copy_from_slice(&id.to_be_bytes());
    let body = patched.len() - 8;
    let crc = crc64(&patched[..body]);
    patched[body..].copy_from_slice(&crc.to_le_bytes());
    patched
}

#[test]
fn crc64_matches_redis_for_its_check_value_and_for_a_dump() {
    // The check value from Redis's own crc64 test.
    assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    let server = TestServer::start();
    let mut con = server.connection();
    hold(&mut con, "lk");
    let payload = dump(&mut con, "lk").unwrap();
    let body = payload.len() - 8;
    let stored = u64::from_le_bytes(payload[body..].try_into().unwrap());
    assert_eq!(crc64(&payload[..body]), stored);
}

#[test]
fn a_restore_payload_with_a_newer_encoding_version_is_refused_and_changes_nothing() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (fence, _) = hold(&mut con, "lk");
    let payload = dump(&mut con, "lk").unwrap();
    // [RDB_TYPE_MODULE_2] [0x81, 8-byte big-endian module id] ... [RDB version] [CRC64]
    assert_eq!(payload[0], 7, "RDB_TYPE_MODULE_2");
    assert_eq!(payload[1], 0x81, "64-bit length encoding of the module id");
    let id = u64::from_be_bytes(payload[2..10].try_into().unwrap());
    assert_eq!(id & 1023, 4, "this module writes encoding version 4");
    let body = payload.len() - 8;
    assert_eq!(
        crc64(&payload[..body]),
        u64::from_le_bytes(payload[body..].try_into().unwrap())
    );

    // The patching itself is sound: version 4 with a recomputed CRC restores.
    let same = with_encoding_version(&payload, 4);
    assert_eq!(same, payload);
    let () = redis::cmd("RESTORE")
        .arg("control")
        .arg(0)
        .arg(&same)
        .query(&mut con)
        .unwrap();
    assert_eq!(info_field(&mut con, "control", "fence"), Some(fence));

    for encver in [5, 6, 1023] {
        let newer = with_encoding_version(&payload, encver);
        let err = error_of(
            redis::cmd("RESTORE")
                .arg("from-the-future")
                .arg(0)
                .arg(&newer)
                .query(&mut con),
        );
        assert!(!err.trim().is_empty(), "encver {encver}");
        assert!(!exists(&mut con, "from-the-future"), "encver {encver}");

        // Nor may it replace an existing lock.
        let err = error_of(
            redis::cmd("RESTORE")
                .arg("lk")
                .arg(0)
                .arg(&newer)
                .arg("REPLACE")
                .query(&mut con),
        );
        assert!(!err.trim().is_empty(), "encver {encver}");
        assert_eq!(
            dump(&mut con, "lk").as_ref(),
            Some(&payload),
            "encver {encver}"
        );
        let ms = pttl(&mut con, "lk");
        assert!(ms > 0 && ms <= 60_000, "encver {encver}: PTTL {ms}");
    }
    ping(&mut con);
    assert_eq!(dbsize(&mut con), 2, "only the lock and the control copy");
}

/// An RDB length as the server writes it (`rdbSaveLen`).
fn rdb_len(value: u64) -> Vec<u8> {
    match value {
        0..0x40 => vec![value as u8],
        0x40..0x4000 => vec![0x40 | (value >> 8) as u8, value as u8],
        0x4000..=0xFFFF_FFFF => [&[0x80][..], &(value as u32).to_be_bytes()].concat(),
        _ => [&[0x81][..], &value.to_be_bytes()].concat(),
    }
}

/// A `DUMP` payload of a lock written field by field, as the module's `rdb_save` does
/// (opcode 5 and a raw string for the token, opcode 2 and a length for each number),
/// with the header (type and module id, `encver` in its low bits) and the RDB version of
/// `template`, a real `DUMP` of a lock, and a valid CRC: what a `RESTORE` of a tampered
/// or foreign payload hands the module.
fn lock_payload(template: &[u8], encver: u64, token: &[u8], numbers: &[i64]) -> Vec<u8> {
    let mut payload = with_encoding_version(template, encver)[..10].to_vec();
    payload.push(5);
    payload.extend(rdb_len(token.len() as u64));
    payload.extend_from_slice(token);
    for &number in numbers {
        payload.push(2);
        payload.extend(rdb_len(number as u64));
    }
    payload.push(0);
    let version_at = template.len() - 10;
    payload.extend_from_slice(&template[version_at..version_at + 2]);
    let crc = crc64(&payload);
    payload.extend_from_slice(&crc.to_le_bytes());
    payload
}

#[test]
fn a_restore_payload_out_of_the_contracts_range_is_refused_and_changes_nothing() {
    const MAX_FENCE: i64 = (1 << 53) - 1;
    let server = TestServer::start();
    let mut con = server.connection();
    hold(&mut con, "lk");
    let template = dump(&mut con, "lk").unwrap();
    let restore = |con: &mut redis::Connection, key: &str, payload: &[u8]| {
        redis::cmd("RESTORE")
            .arg(key)
            .arg(0)
            .arg(payload)
            .query::<redis::Value>(con)
    };

    // The encoder is sound: in-range payloads of both versions restore as written.
    let v1 = lock_payload(&template, 1, b"tok-a", &[1_000, 1_700_000_000_000]);
    restore(&mut con, "v1", &v1).expect("a version 1 payload");
    assert_eq!(info_field(&mut con, "v1", "fence"), Some(1_000));
    let v2 = lock_payload(&template, 2, b"tok-b", &[7, 0, 250, 99, 1]);
    restore(&mut con, "v2", &v2).expect("a version 2 payload of another server");
    assert_eq!(
        (
            info_field(&mut con, "v2", "fence"),
            info_field(&mut con, "v2", "session")
        ),
        (Some(7), Some(250))
    );
    assert_eq!(info_field(&mut con, "v2", "connected"), Some(0));

    let long_token = vec![b'x'; 257];
    for (what, encver, token, numbers) in [
        ("fence 2^53", 1, &b"tok"[..], vec![MAX_FENCE + 1, 0]),
        ("fence 0", 1, b"tok", vec![0, 0]),
        ("a negative grant time", 1, b"tok", vec![5, -1]),
        ("a token of 257 bytes", 1, &long_token, vec![5, 0]),
        ("an empty token", 1, b"", vec![5, 0]),
        ("a negative grace", 2, b"tok", vec![5, 0, -2, 1, 1]),
        (
            "a grace over 2^53 - 1",
            2,
            b"tok",
            vec![5, 0, 1 << 53, 1, 1],
        ),
        (
            "fence 2^53 in version 2",
            2,
            b"tok",
            vec![MAX_FENCE + 1, 0, -1],
        ),
        ("a missing field", 2, b"tok", vec![5, 0]),
    ] {
        let payload = lock_payload(&template, encver, token, &numbers);
        assert!(
            restore(&mut con, "bad", &payload).is_err(),
            "{what}: refused"
        );
        assert!(!exists(&mut con, "bad"), "{what}: nothing created");
        let replaced = redis::cmd("RESTORE")
            .arg("lk")
            .arg(0)
            .arg(&payload)
            .arg("REPLACE")
            .query::<redis::Value>(&mut con);
        assert!(replaced.is_err(), "{what}: no lock replaced");
        assert_eq!(dump(&mut con, "lk").as_ref(), Some(&template), "{what}");
    }
    ping(&mut con);
    // No refused fence reached the fencing clock: it is not exhausted.
    let (_, fence) = acquire(&mut con, "fresh", 1000, &[]).expect("granted below 2^53");
    assert!(fence < MAX_FENCE);
}
