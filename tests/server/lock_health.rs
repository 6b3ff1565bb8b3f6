//! Seeing lock health (docs/operations.md, "Lock health"): the gauges of `INFO lock`
//! (`lock_keys`, `lock_holders`, `lock_waiters`, `lock_watchers`,
//! `lock_sessions_in_grace`) count what is there now, on a master and on its replica; the
//! wait-time and hold-time percentiles follow real waits and holds; `CONFIG RESETSTAT`
//! zeroes the counters and distributions, never the gauges; and `LOCK.CONTENDED` lists
//! the keys clients wait for, longest-waiting first, never a token.

use std::time::Duration;

use redis::Value;

use crate::common::*;

/// An integer field of `INFO lock`.
fn gauge(con: &mut redis::Connection, field: &str) -> i64 {
    info_int(&server_info(con, "lock"), field)
}

/// The (keys, holders) gauges.
fn keys_and_holders(con: &mut redis::Connection) -> (i64, i64) {
    (gauge(con, "lock_keys"), gauge(con, "lock_holders"))
}

/// The percentile line `field` of `INFO lock` (`lock_wait_usec`, `lock_hold_usec`) as
/// (p50, p99, p99.9), after checking it has the server's own shape.
fn percentiles(con: &mut redis::Connection, field: &str) -> (f64, f64, f64) {
    let info = server_info(con, "lock");
    let line = info
        .lines()
        .map(str::trim)
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("{field} in INFO lock:\n{info}"));
    let parts: Vec<(&str, f64)> = line
        .split(',')
        .map(|part| {
            let (name, value) = part.split_once('=').expect("name=value");
            // Three decimals, as INFO latencystats prints them; a plain 0 before any
            // sample, as the contract says.
            match value.split_once('.') {
                Some((_, decimals)) => assert_eq!(decimals.len(), 3, "{line}"),
                None => assert_eq!(line, "p50=0,p99=0,p99.9=0"),
            }
            (name, value.parse().expect("a number"))
        })
        .collect();
    let names: Vec<&str> = parts.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, ["p50", "p99", "p99.9"], "{line}");
    (parts[0].1, parts[1].1, parts[2].1)
}

#[test]
fn a_fresh_server_prints_zeroed_percentiles_and_counts_nothing_held() {
    let server = TestServer::start();
    let mut con = server.connection();
    let info = server_info(&mut con, "lock");
    for line in [
        "lock_wait_usec:p50=0,p99=0,p99.9=0",
        "lock_hold_usec:p50=0,p99=0,p99.9=0",
        "lock_keys:0",
        "lock_holders:0",
        "lock_sessions_in_grace:0",
    ] {
        assert!(info.lines().any(|l| l.trim() == line), "{line} in:\n{info}");
    }
}

#[test]
fn keys_and_holders_count_every_lock_and_shared_holder_now() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (a, _) = acquire(&mut con, "a", 30_000, &[]).expect("granted");
    for _ in 0..3 {
        redis::cmd("LOCK.ACQUIRE")
            .arg("readers")
            .arg(30_000)
            .arg("SHARED")
            .query::<Value>(&mut con)
            .unwrap();
    }
    acquire(&mut con, "gone", 50, &[]).expect("granted");
    let _: Value = redis::cmd("SET")
        .arg("plain")
        .arg("x")
        .query(&mut con)
        .unwrap();
    assert_eq!(keys_and_holders(&mut con), (3, 5));

    // A lock that expires, one released, a shared holder released, one deleted.
    poll_until(Duration::from_secs(10), "the short lock to expire", || {
        keys_and_holders(&mut con) == (2, 4)
    });
    assert_eq!(release(&mut con, "a", &a), 1);
    assert_eq!(keys_and_holders(&mut con), (1, 3));
    let (token, _) = acquire_shared(&mut con, "readers");
    assert_eq!(keys_and_holders(&mut con), (1, 4));
    assert_eq!(release(&mut con, "readers", token.as_bytes()), 1);
    assert_eq!(keys_and_holders(&mut con), (1, 3));

    // COPY makes a second key with the same holders; RENAME moves one; FLUSHALL empties.
    let _: i64 = redis::cmd("COPY")
        .arg("readers")
        .arg("copy")
        .query(&mut con)
        .unwrap();
    assert_eq!(keys_and_holders(&mut con), (2, 6));
    let _: () = redis::cmd("RENAME")
        .arg("copy")
        .arg("moved")
        .query(&mut con)
        .unwrap();
    assert_eq!(keys_and_holders(&mut con), (2, 6));
    let _: i64 = redis::cmd("DEL").arg("moved").query(&mut con).unwrap();
    assert_eq!(keys_and_holders(&mut con), (1, 3));
    // A flush may free its values on the server's background thread (Valkey flushes
    // asynchronously by default): the gauges follow as they are freed.
    let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
    poll_until(
        Duration::from_secs(10),
        "the flushed locks to be freed",
        || keys_and_holders(&mut con) == (0, 0),
    );
}

/// A shared holder of `key` for 30 s: its token and fence.
fn acquire_shared(con: &mut redis::Connection, key: &str) -> (String, i64) {
    redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(30_000)
        .arg("SHARED")
        .query(con)
        .unwrap()
}

#[test]
fn a_replica_counts_the_keys_and_holders_it_follows_and_records_no_wait_or_hold() {
    let master = TestServer::start();
    let replica = start_replica(&master, &[]);
    let mut con = master.connection();
    let (token, _) = acquire(&mut con, "a", 30_000, &[]).expect("granted");
    acquire_shared(&mut con, "r");
    acquire_shared(&mut con, "r");
    sync_replicas(&mut con, 1);
    let mut on_replica = replica.connection();
    poll_until(
        Duration::from_secs(10),
        "the replica to count 2 keys",
        || keys_and_holders(&mut on_replica) == (2, 3),
    );
    // Held for 20 ms at least: a hold the millisecond clock of Redis 7.0 sees.
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(release(&mut con, "a", &token), 1);
    sync_replicas(&mut con, 1);
    poll_until(
        Duration::from_secs(10),
        "the replica to count 1 key",
        || keys_and_holders(&mut on_replica) == (1, 2),
    );
    // The master measured the hold; the replica, which ends no hold itself, did not.
    assert!(percentiles(&mut con, "lock_hold_usec").0 > 0.0);
    assert_eq!(
        percentiles(&mut on_replica, "lock_hold_usec"),
        (0.0, 0.0, 0.0)
    );
    // No waiter lives on a replica.
    let listed: Vec<Value> = redis::cmd("LOCK.CONTENDED").query(&mut on_replica).unwrap();
    assert!(listed.is_empty());
}

#[test]
fn a_lock_whose_connection_closed_is_in_grace_until_released_or_reclaimed() {
    let server = TestServer::start();
    let mut con = server.connection();
    assert_eq!(gauge(&mut con, "lock_sessions_in_grace"), 0);
    {
        let mut holder = server.connection();
        session_lock(&mut holder, "long", "t1", 60_000);
        session_lock(&mut holder, "short", "t2", 200);
        // A session lock released before its connection closes is not in grace.
        session_lock(&mut holder, "done", "t3", 60_000);
        assert_eq!(release(&mut holder, "done", b"t3"), 1);
        assert_eq!(
            gauge(&mut con, "lock_sessions_in_grace"),
            0,
            "still connected"
        );
    }
    poll_until(Duration::from_secs(10), "both locks in grace", || {
        gauge(&mut con, "lock_sessions_in_grace") == 2
    });
    // The short grace runs out: released.
    poll_until(Duration::from_secs(10), "the short grace to end", || {
        gauge(&mut con, "lock_sessions_in_grace") == 1
    });
    assert!(!exists(&mut con, "short"));
    // The holder reclaims the other one from a new connection.
    acquire_as(&mut con, "long", 30_000, b"t1").expect("reclaimed");
    assert_eq!(gauge(&mut con, "lock_sessions_in_grace"), 0);
}

#[test]
fn wait_times_count_grants_and_timeouts_from_arrival() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (token, _) = acquire(&mut con, "job", 30_000, &[]).expect("granted");
    // Timed from before the waiter is sent: the server's wait cannot be longer.
    let held_since = std::time::Instant::now();
    let mut waiter = Waiter::start(&server, "job", 30_000, &["WAIT", "0"]);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(release(&mut con, "job", &token), 1);
    let (granted, _) = waiter.outcome();
    let waited_us = held_since.elapsed().as_micros() as f64;
    assert!(granted.is_some());
    let (p50, p99, p999) = percentiles(&mut con, "lock_wait_usec");
    assert!((280_000.0..=waited_us * 1.02).contains(&p50), "p50 {p50}");
    assert_eq!((p50, p50), (p99, p999), "one wait");

    // A wait that times out after 100 ms counts too: now half the waits are short.
    let mut timing_out = Waiter::start(&server, "job", 30_000, &["WAIT", "100"]);
    assert_eq!(timing_out.granted(), None);
    let (p50, p99, _) = percentiles(&mut con, "lock_wait_usec");
    assert!((90_000.0..300_000.0).contains(&p50), "p50 {p50}");
    assert!(p99 >= 280_000.0, "p99 {p99}");
}

#[test]
fn hold_times_run_from_the_grant_to_the_release_or_the_expiry() {
    let server = TestServer::start();
    let mut con = server.connection();
    // Timed from before the acquire is sent: the server's hold cannot be longer.
    let started = std::time::Instant::now();
    let (token, _) = acquire(&mut con, "job", 30_000, &[]).expect("granted");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(release(&mut con, "job", &token), 1);
    let held_us = started.elapsed().as_micros() as f64;
    let (p50, _, _) = percentiles(&mut con, "lock_hold_usec");
    // The grant time has the millisecond of the fence: a millisecond either way.
    assert!(
        (290_000.0..=held_us * 1.02 + 1_000.0).contains(&p50),
        "p50 {p50}, held {held_us}"
    );

    // An expiry ends a hold at the lock's TTL (a shared holder's, at its own time).
    acquire(&mut con, "short", 100, &[]).expect("granted");
    let (_, _) = acquire_shared(&mut con, "r");
    redis::cmd("LOCK.ACQUIRE")
        .arg("r")
        .arg(100)
        .arg("SHARED")
        .query::<Value>(&mut con)
        .unwrap();
    poll_until(Duration::from_secs(10), "both to expire", || {
        !exists(&mut con, "short") && gauge(&mut con, "lock_holders") == 1
    });
    let (p50, p99, _) = percentiles(&mut con, "lock_hold_usec");
    assert!((95_000.0..250_000.0).contains(&p50), "p50 {p50}");
    assert!(p99 >= 290_000.0, "p99 {p99}");
}

#[test]
fn config_resetstat_zeroes_the_counters_and_distributions_never_the_gauges() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (token, _) = acquire(&mut con, "a", 30_000, &[]).expect("granted");
    acquire(&mut con, "b", 30_000, &[]).expect("granted");
    assert_eq!(acquire_as(&mut con, "b", 30_000, b"other"), None);
    // Held for 20 ms: a hold the millisecond clock of Redis 7.0 sees.
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(release(&mut con, "a", &token), 1);
    let mut waiter = Waiter::start(&server, "b", 30_000, &["WAIT", "50"]);
    assert_eq!(waiter.granted(), None);
    assert!(gauge(&mut con, "lock_grants") == 2);
    assert!(percentiles(&mut con, "lock_hold_usec").0 > 0.0);
    assert!(percentiles(&mut con, "lock_wait_usec").0 > 0.0);

    let () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut con)
        .unwrap();
    for counter in [
        "lock_grants",
        "lock_contended",
        "lock_releases",
        "lock_waits",
        "lock_wait_timeouts",
    ] {
        assert_eq!(gauge(&mut con, counter), 0, "{counter}");
    }
    for field in ["lock_wait_usec", "lock_hold_usec"] {
        assert_eq!(percentiles(&mut con, field), (0.0, 0.0, 0.0), "{field}");
    }
    assert_eq!(keys_and_holders(&mut con), (1, 1), "the gauges stay");

    // Counting goes on from zero.
    acquire(&mut con, "c", 30_000, &[]).expect("granted");
    assert_eq!(gauge(&mut con, "lock_grants"), 1);
}

#[test]
fn the_distributions_are_counted_in_the_modules_bytes_and_stay_bounded() {
    let server = TestServer::start();
    let mut con = server.connection();
    let fresh = gauge(&mut con, "lock_allocated_bytes");
    // Two distributions of 2,240 eight-byte buckets each, allocated at load.
    assert!(fresh >= 2 * 2240 * 8, "{fresh}");
    // A thousand holds and waits later, not a byte more for them.
    let mut pipe = redis::pipe();
    for i in 0..1000 {
        pipe.cmd("LOCK.ACQUIRE")
            .arg(format!("k{i}"))
            .arg(60_000)
            .arg("TOKEN")
            .arg("t")
            .ignore();
        pipe.cmd("LOCK.RELEASE")
            .arg(format!("k{i}"))
            .arg("t")
            .ignore();
    }
    let () = pipe.query(&mut con).unwrap();
    assert_eq!(keys_and_holders(&mut con), (0, 0));
    let after = gauge(&mut con, "lock_allocated_bytes");
    assert!(after <= fresh + 1024, "fresh {fresh}, after {after}");
}

/// `LOCK.CONTENDED` with `args`, each entry as its fields in order.
fn contended(con: &mut redis::Connection, args: &[&str]) -> Vec<Vec<(String, Value)>> {
    let listed: Vec<Value> = redis::cmd("LOCK.CONTENDED").arg(args).query(con).unwrap();
    listed.iter().map(fields_of).collect()
}

/// A RESP2 field/value array or a RESP3 map, as (name, value) pairs in order.
fn fields_of(value: &Value) -> Vec<(String, Value)> {
    let pairs: Vec<(Value, Value)> = match value {
        Value::Array(items) => items
            .chunks(2)
            .map(|pair| (pair[0].clone(), pair[1].clone()))
            .collect(),
        Value::Map(pairs) => pairs.clone(),
        other => panic!("not a map: {other:?}"),
    };
    pairs
        .into_iter()
        .map(|(name, value)| (redis::from_redis_value(name).unwrap(), value))
        .collect()
}

fn int(fields: &[(String, Value)], name: &str) -> i64 {
    let value = fields
        .iter()
        .find(|(n, _)| n == name)
        .expect(name)
        .1
        .clone();
    redis::from_redis_value(value).unwrap()
}

fn key_of(fields: &[(String, Value)]) -> String {
    redis::from_redis_value(fields[0].1.clone()).unwrap()
}

#[test]
fn contended_lists_the_keys_with_waiters_longest_waiting_first() {
    let server = TestServer::start();
    let mut con = server.connection();
    assert!(contended(&mut con, &[]).is_empty(), "nothing waits");
    let (first, _) = acquire(&mut con, "first", 30_000, &[]).expect("granted");
    acquire(&mut con, "second", 30_000, &[]).expect("granted");
    acquire(&mut con, "quiet", 30_000, &[]).expect("granted");
    let _w1 = Waiter::start(&server, "first", 30_000, &["WAIT", "0"]);
    std::thread::sleep(Duration::from_millis(50));
    let _w2 = Waiter::start(&server, "second", 30_000, &["WAIT", "0"]);
    let _w3 = Waiter::start(&server, "second", 30_000, &["WAIT", "0"]);
    std::thread::sleep(Duration::from_millis(100));

    let listed = contended(&mut con, &[]);
    let names: Vec<String> = listed.iter().map(|f| key_of(f)).collect();
    assert_eq!(
        names,
        ["first", "second"],
        "oldest wait first; never 'quiet'"
    );
    let fields: Vec<&str> = listed[0].iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(fields, ["key", "waiters", "waited", "holders", "held"]);
    assert_eq!(int(&listed[0], "waiters"), 1);
    assert_eq!(int(&listed[1], "waiters"), 2);
    assert!(int(&listed[0], "waited") >= 140, "{:?}", listed[0]);
    assert!(int(&listed[0], "waited") > int(&listed[1], "waited"));
    assert_eq!(int(&listed[0], "holders"), 1);
    assert!(int(&listed[0], "held") >= int(&listed[0], "waited"));
    assert_no_token_in(
        "LOCK.CONTENDED",
        format!("{listed:?}").as_bytes(),
        &[&first],
    );

    // COUNT bounds the list; RESP3 gives maps with the same fields.
    let one = contended(&mut con, &["COUNT", "1"]);
    assert_eq!(one.len(), 1);
    assert_eq!(key_of(&one[0]), "first");
    let mut resp3 = server.connection_resp3();
    let maps: Vec<Value> = redis::cmd("LOCK.CONTENDED").query(&mut resp3).unwrap();
    assert!(matches!(maps[0], Value::Map(_)), "{maps:?}");
    assert_eq!(fields_of(&maps[1]).len(), 5);

    // Another database has its own list; a granted waiter leaves it.
    let mut other = server.connection();
    let () = redis::cmd("SELECT").arg(1).query(&mut other).unwrap();
    assert!(contended(&mut other, &[]).is_empty());
    assert_eq!(release(&mut con, "first", &first), 1);
    let names: Vec<String> = contended(&mut con, &[]).iter().map(|f| key_of(f)).collect();
    assert_eq!(names, ["second"]);
}

#[test]
fn a_contended_key_without_a_holder_says_held_minus_one() {
    // A waiter for two keys keeps the free one for itself while the other is held.
    let server = TestServer::start();
    let mut con = server.connection();
    acquire(&mut con, "{k}b", 30_000, &[]).expect("granted");
    let _all = Waiter::start_all(&server, &["{k}a", "{k}b"], 30_000, &["WAIT", "0"]);
    let _behind = Waiter::start(&server, "{k}a", 30_000, &["WAIT", "0"]);
    let listed = contended(&mut con, &["COUNT", "1000"]);
    let a = listed
        .iter()
        .find(|f| key_of(f) == "{k}a")
        .expect("{k}a listed");
    assert_eq!((int(a, "holders"), int(a, "held")), (0, -1));
    assert_eq!(int(a, "waiters"), 2);
}

#[test]
fn contended_refuses_bad_arguments_with_an_error_naming_them() {
    let server = TestServer::start();
    let mut con = server.connection();
    for (args, expected) in [
        (&["COUNT", "0"][..], "COUNT"),
        (&["COUNT", "1001"], "COUNT"),
        (&["COUNT", "x"], "COUNT"),
        (&["COUNT"], "needs a value"),
        (&["COUNT", "1", "COUNT", "2"], "more than once"),
        (&["LIMIT", "1"], "'LIMIT'"),
    ] {
        let err = error_of(redis::cmd("LOCK.CONTENDED").arg(args).query(&mut con));
        assert!(
            err.starts_with("ERR") && err.contains(expected),
            "{args:?}: {err}"
        );
    }
    let listed = contended(&mut con, &["count", "1000"]);
    assert!(listed.is_empty(), "option names are case-insensitive");
}
