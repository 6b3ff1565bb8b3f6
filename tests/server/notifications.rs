//! Keyspace notifications: with the module class enabled (`notify-keyspace-events Kd`,
//! or `KEA`), a client subscribed to a lock's keyspace channel sees `lock.acquire`,
//! `lock.extend` and `lock.release`, in order, including the grant to a waiter; with
//! notifications off it sees nothing (docs/operations.md).

use std::time::Duration;

use crate::common::*;

/// The keyspace channel of key `lock` in database 0.
const CHANNEL: &str = "__keyspace@0__:lock";
/// Published after the commands under test: every event they fired came before it.
const END: &str = "end-of-events";

/// A server with `notify-keyspace-events` set to `classes`, and a connection to it.
fn server_notifying(classes: &str) -> (TestServer, redis::Connection) {
    let server = TestServer::start();
    let mut con = server.connection();
    config_set(&mut con, "notify-keyspace-events", classes);
    (server, con)
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

/// Acquires `lock`, extends it and releases it, each of them succeeding: the three
/// commands whose events the tests expect.
fn acquire_extend_release(con: &mut redis::Connection) {
    let (token, _) = acquire(con, "lock", 30_000, &[]).expect("granted");
    assert_eq!(extend(con, "lock", &token, 60_000), 1);
    assert_eq!(release(con, "lock", &token), 1);
}

#[test]
fn acquire_extend_and_release_fire_their_events_in_order_with_the_module_class() {
    let (server, mut con) = server_notifying("Kd");

    let events = events_during(&server, &mut con, CHANNEL, CHANNEL, acquire_extend_release);

    assert_eq!(events, ["lock.acquire", "lock.extend", "lock.release"]);
}

#[test]
fn an_idempotent_renew_fires_lock_acquire_again() {
    let (server, mut con) = server_notifying("Kd");

    let events = events_during(&server, &mut con, CHANNEL, CHANNEL, |con| {
        acquire(con, "lock", 30_000, &["TOKEN", "me"]).expect("granted");
        acquire(con, "lock", 30_000, &["TOKEN", "me"]).expect("renewed");
    });

    assert_eq!(events, ["lock.acquire", "lock.acquire"]);
}

#[test]
fn commands_that_change_nothing_fire_no_event() {
    let (server, mut con) = server_notifying("Kd");
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
    let (server, mut con) = server_notifying("Kd");

    let events = events_during(&server, &mut con, CHANNEL, CHANNEL, |con| {
        let (holder, _, mut waiter) =
            held_with_a_waiter(&server, con, "lock", 30_000, &["WAIT", "10000"]);
        assert_eq!(release(con, "lock", &holder), 1);
        waiter.granted().expect("the waiter is granted the lock");
    });

    assert_eq!(events, ["lock.acquire", "lock.release", "lock.acquire"]);
}

#[test]
fn with_kea_the_lock_events_arrive_alongside_the_generic_ones() {
    let (server, mut con) = server_notifying("KEA");

    let events = events_during(&server, &mut con, CHANNEL, CHANNEL, |con| {
        acquire_extend_release(con);
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
    let (server, mut con) = server_notifying("Ed");

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
    let (server, mut con) = server_notifying("");

    let events = events_during(
        &server,
        &mut con,
        "__key*__:*",
        CHANNEL,
        acquire_extend_release,
    );

    assert_eq!(events, Vec::<String>::new());
}
