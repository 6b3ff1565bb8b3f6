//! Keyspace notifications: with the module class enabled (`notify-keyspace-events Kd`,
//! or `KEA`), a client subscribed to a lock's keyspace channel sees `lock.acquire`,
//! `lock.extend` and `lock.release`, in order, including the grant to a waiter; with
//! notifications off it sees nothing (SPEC.md, "Server-side notes").

mod common;

use std::thread;
use std::time::Duration;

use common::*;

/// The keyspace channel of key `lock` in database 0.
const CHANNEL: &str = "__keyspace@0__:lock";
/// Published after the commands under test: every event they fired came before it.
const END: &str = "end-of-events";

fn notify(con: &mut redis::Connection, classes: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg(classes)
        .query(con)
        .expect("CONFIG SET notify-keyspace-events");
}

/// Subscribes to `pattern`, runs `commands` on `con`, then publishes the end marker on
/// `marker_channel` and returns the payloads received before it, in order.
fn events_during(
    server: &TestServer,
    con: &mut redis::Connection,
    pattern: &str,
    marker_channel: &str,
    commands: impl FnOnce(&mut redis::Connection),
) -> Vec<String> {
    let mut sub_con = server.connection();
    let mut pubsub = sub_con.as_pubsub();
    pubsub.psubscribe(pattern).expect("PSUBSCRIBE");
    pubsub
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();

    commands(con);
    let _: i64 = redis::cmd("PUBLISH")
        .arg(marker_channel)
        .arg(END)
        .query(con)
        .expect("PUBLISH");

    let mut events = Vec::new();
    loop {
        let message = pubsub.get_message().expect("a message before the marker");
        let payload: String = message.get_payload().expect("a text payload");
        if payload == END {
            return events;
        }
        events.push(payload);
    }
}

fn extend(con: &mut redis::Connection, key: &str, token: &[u8], ttl_ms: u64) -> i64 {
    redis::cmd("LOCK.EXTEND")
        .arg(key)
        .arg(token)
        .arg(ttl_ms)
        .query(con)
        .expect("LOCK.EXTEND")
}

#[test]
fn acquire_extend_and_release_fire_their_events_in_order_with_the_module_class() {
    let server = TestServer::start();
    let mut con = server.connection();
    notify(&mut con, "Kd");

    let events = events_during(&server, &mut con, CHANNEL, CHANNEL, |con| {
        let (token, _) = acquire(con, "lock", 30_000, &[]).expect("granted");
        assert_eq!(extend(con, "lock", &token, 60_000), 1);
        assert_eq!(release(con, "lock", &token), 1);
    });

    assert_eq!(events, ["lock.acquire", "lock.extend", "lock.release"]);
}

#[test]
fn an_idempotent_renew_fires_lock_acquire_again() {
    let server = TestServer::start();
    let mut con = server.connection();
    notify(&mut con, "Kd");

    let events = events_during(&server, &mut con, CHANNEL, CHANNEL, |con| {
        acquire(con, "lock", 30_000, &["TOKEN", "me"]).expect("granted");
        acquire(con, "lock", 30_000, &["TOKEN", "me"]).expect("renewed");
    });

    assert_eq!(events, ["lock.acquire", "lock.acquire"]);
}

#[test]
fn commands_that_change_nothing_fire_no_event() {
    let server = TestServer::start();
    let mut con = server.connection();
    notify(&mut con, "Kd");
    acquire(&mut con, "lock", 30_000, &["TOKEN", "holder"]).expect("granted");

    let events = events_during(&server, &mut con, CHANNEL, CHANNEL, |con| {
        assert_eq!(acquire(con, "lock", 30_000, &["TOKEN", "other"]), None);
        assert_eq!(extend(con, "lock", b"other", 30_000), 0);
        assert_eq!(release(con, "lock", b"other"), 0);
        assert_eq!(release(con, "absent", b"other"), 0);
    });

    assert_eq!(events, Vec::<String>::new());
}

#[test]
fn a_grant_to_a_waiter_fires_lock_acquire() {
    let server = TestServer::start();
    let mut con = server.connection();
    notify(&mut con, "Kd");
    let mut waiter_con = server.connection();
    let mut observer = server.connection();

    let events = events_during(&server, &mut con, CHANNEL, CHANNEL, |con| {
        let (holder, _) = acquire(con, "lock", 30_000, &[]).expect("granted");
        let waiter =
            thread::spawn(move || acquire(&mut waiter_con, "lock", 30_000, &["WAIT", "10000"]));
        poll_until(Duration::from_secs(10), "the waiter to block", || {
            info_field(&mut observer, "lock", "waiters") == Some(1)
        });
        assert_eq!(release(con, "lock", &holder), 1);
        waiter
            .join()
            .expect("waiter thread")
            .expect("the waiter is granted the lock");
    });

    assert_eq!(events, ["lock.acquire", "lock.release", "lock.acquire"]);
}

#[test]
fn with_kea_the_lock_events_arrive_alongside_the_generic_ones() {
    let server = TestServer::start();
    let mut con = server.connection();
    notify(&mut con, "KEA");

    let events = events_during(&server, &mut con, CHANNEL, CHANNEL, |con| {
        let (token, _) = acquire(con, "lock", 30_000, &[]).expect("granted");
        assert_eq!(extend(con, "lock", &token, 60_000), 1);
        assert_eq!(release(con, "lock", &token), 1);
        acquire(con, "lock", 30_000, &[]).expect("granted");
        let _: i64 = redis::cmd("DEL").arg("lock").query(con).unwrap();
    });

    assert_eq!(
        events,
        [
            "lock.acquire",
            "lock.extend",
            "lock.release",
            "lock.acquire",
            "del"
        ]
    );
}

#[test]
fn keyevent_channels_name_the_lock_that_was_acquired() {
    let server = TestServer::start();
    let mut con = server.connection();
    notify(&mut con, "Ed");

    let keys = events_during(
        &server,
        &mut con,
        "__keyevent@0__:lock.acquire",
        "__keyevent@0__:lock.acquire",
        |con| {
            acquire(con, "orders:1", 30_000, &[]).expect("granted");
            acquire(con, "orders:2", 30_000, &[]).expect("granted");
        },
    );

    assert_eq!(keys, ["orders:1", "orders:2"]);
}

#[test]
fn with_notifications_off_no_lock_event_arrives() {
    let server = TestServer::start();
    let mut con = server.connection();
    notify(&mut con, "");

    let events = events_during(&server, &mut con, "__key*__:*", CHANNEL, |con| {
        let (token, _) = acquire(con, "lock", 30_000, &[]).expect("granted");
        assert_eq!(extend(con, "lock", &token, 60_000), 1);
        assert_eq!(release(con, "lock", &token), 1);
    });

    assert_eq!(events, Vec::<String>::new());
}
