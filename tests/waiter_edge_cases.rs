//! What happens to clients blocked in `LOCK.ACQUIRE ... WAIT` when an admin command
//! changes the key or the server under them: `FLUSHALL`, `FLUSHDB`, `SWAPDB`, `RENAME`,
//! `MOVE`, `RESTORE ... REPLACE`, a plain `SET`, `REPLICAOF`. Each has one documented
//! outcome; in none is a waiter left blocked with the lock free, and in none do two
//! clients hold the lock at once.

mod common;

use std::thread::{self, JoinHandle};
use std::time::Duration;

use common::*;
use redis::Value;

/// A client blocked in `LOCK.ACQUIRE ... WAIT` on its own connection and thread.
struct Waiter {
    thread: JoinHandle<redis::RedisResult<Value>>,
}

impl Waiter {
    /// The reply: `Ok(Some((token, fence)))`, `Ok(None)` for nil, or the error.
    fn reply(self) -> redis::RedisResult<Option<(Vec<u8>, i64)>> {
        let reply = self.thread.join().expect("waiter thread")?;
        Ok(redis::from_redis_value(reply.extract_error()?)?)
    }

    /// The reply, expected to be a grant: the token.
    fn granted_token(self) -> Vec<u8> {
        self.reply()
            .expect("LOCK.ACQUIRE ... WAIT")
            .expect("the waiter is granted the lock")
            .0
    }

    fn is_blocked(&self) -> bool {
        !self.thread.is_finished()
    }
}

/// One integer field of `INFO lock`.
fn info_stat(con: &mut redis::Connection, field: &str) -> i64 {
    let info: String = redis::cmd("INFO")
        .arg("lock")
        .query(con)
        .expect("INFO lock");
    let prefix = format!("{field}:");
    info.lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("{field} in INFO lock:\n{info}"))
        .trim()
        .parse()
        .expect("an integer")
}

/// Clients blocked on any key of the server.
fn blocked(con: &mut redis::Connection) -> i64 {
    info_stat(con, "lock_waiters")
}

/// A connection to database `db`.
fn connection_to(server: &TestServer, db: i64) -> redis::Connection {
    let client = redis::Client::open(format!("{}{db}", server.url())).expect("client");
    client.get_connection().expect("connect")
}

/// Starts `LOCK.ACQUIRE key 30000 TOKEN token WAIT 20000` in database `db` on a new
/// connection and thread, and returns once the server counts it as blocked.
fn start_waiter(server: &TestServer, db: i64, key: &str, token: &str) -> Waiter {
    let mut observer = server.connection();
    let before = blocked(&mut observer);
    let mut con = connection_to(server, db);
    let mut command = redis::cmd("LOCK.ACQUIRE");
    command
        .arg(key)
        .arg(30_000)
        .arg("TOKEN")
        .arg(token)
        .arg("WAIT")
        .arg(20_000);
    let thread = thread::spawn(move || command.query::<Value>(&mut con));
    poll_until(Duration::from_secs(10), "the waiter to block", || {
        blocked(&mut observer) == before + 1
    });
    Waiter { thread }
}

fn acquire_as(con: &mut redis::Connection, key: &str, token: &str) -> Option<i64> {
    acquire(con, key, 30_000, &["TOKEN", token]).map(|(_, fence)| fence)
}

fn run(con: &mut redis::Connection, command: &[&str]) -> Value {
    let mut cmd = redis::cmd(command[0]);
    cmd.arg(&command[1..]);
    cmd.query(con)
        .unwrap_or_else(|e| panic!("{command:?}: {e}"))
}

#[test]
fn flushall_grants_the_freed_lock_to_the_head_waiter_while_the_others_keep_waiting() {
    let server = TestServer::start();
    let mut con = server.connection();
    let fence = acquire_as(&mut con, "job", "holder").expect("granted");
    let head = start_waiter(&server, 0, "job", "a");
    let next = start_waiter(&server, 0, "job", "b");

    run(&mut con, &["FLUSHALL"]);

    assert_eq!(head.granted_token(), b"a");
    assert!(info_field(&mut con, "job", "fence").unwrap() > fence);
    assert_eq!(info_field(&mut con, "job", "waiters"), Some(1));
    assert!(next.is_blocked(), "one grant at a time");
    assert_eq!(acquire_as(&mut con, "job", "newcomer"), None);
    assert_eq!(release(&mut con, "job", b"a"), 1);
    assert_eq!(next.granted_token(), b"b");
    assert_eq!(release(&mut con, "job", b"b"), 1);
}

#[test]
fn flushdb_grants_the_freed_lock_to_the_head_waiter_and_leaves_other_databases_alone() {
    let server = TestServer::start();
    let mut con = server.connection();
    let mut con1 = connection_to(&server, 1);
    acquire_as(&mut con, "job", "holder").expect("granted");
    acquire_as(&mut con1, "job", "holder-1").expect("granted in db 1");
    let waiter = start_waiter(&server, 0, "job", "a");
    let waiter1 = start_waiter(&server, 1, "job", "a1");

    run(&mut con, &["FLUSHDB"]);

    assert_eq!(waiter.granted_token(), b"a");
    assert_eq!(release(&mut con, "job", b"a"), 1);
    assert!(waiter1.is_blocked(), "db 1 was not flushed");
    assert_eq!(info_field(&mut con1, "job", "waiters"), Some(1));
    assert_eq!(release(&mut con1, "job", b"holder-1"), 1);
    assert_eq!(waiter1.granted_token(), b"a1");
}

#[test]
fn swapdb_grants_the_lock_to_a_waiter_whose_database_now_has_none() {
    let server = TestServer::start();
    let mut con = server.connection();
    let mut con1 = connection_to(&server, 1);
    let fence = acquire_as(&mut con, "job", "holder").expect("granted");
    let waiter = start_waiter(&server, 0, "job", "a");

    run(&mut con, &["SWAPDB", "0", "1"]);

    assert_eq!(waiter.granted_token(), b"a");
    assert_eq!(release(&mut con, "job", b"a"), 1);
    // The old lock moved to db 1 and still belongs to its holder.
    assert_eq!(info_field(&mut con1, "job", "fence"), Some(fence));
    assert_eq!(release(&mut con1, "job", b"holder"), 1);
}

#[test]
fn swapdb_makes_a_waiter_wait_for_the_lock_swapped_into_its_database() {
    let server = TestServer::start();
    let mut con = server.connection();
    let mut con1 = connection_to(&server, 1);
    acquire_as(&mut con, "job", "holder-0").expect("granted");
    acquire_as(&mut con1, "job", "holder-1").expect("granted in db 1");
    let waiter = start_waiter(&server, 0, "job", "a");

    run(&mut con, &["SWAPDB", "0", "1"]);

    // Db 0 now holds db 1's lock: the waiter waits for that one.
    assert_eq!(acquire_as(&mut con, "job", "newcomer"), None);
    assert_eq!(info_field(&mut con, "job", "waiters"), Some(1));
    assert_eq!(release(&mut con, "job", b"holder-0"), 0);
    assert!(waiter.is_blocked());
    assert_eq!(release(&mut con, "job", b"holder-1"), 1);
    assert_eq!(waiter.granted_token(), b"a");
    assert_eq!(release(&mut con1, "job", b"holder-0"), 1);
}

#[test]
fn renaming_a_lock_with_waiters_grants_the_old_name_to_the_head_waiter() {
    let server = TestServer::start();
    let mut con = server.connection();
    let fence = acquire_as(&mut con, "job", "holder").expect("granted");
    let head = start_waiter(&server, 0, "job", "a");
    let next = start_waiter(&server, 0, "job", "b");

    run(&mut con, &["RENAME", "job", "job:renamed"]);

    assert_eq!(head.granted_token(), b"a");
    assert!(info_field(&mut con, "job", "fence").unwrap() > fence);
    assert!(next.is_blocked(), "one grant at a time");
    // The renamed lock keeps its holder and fence under the new name.
    assert_eq!(info_field(&mut con, "job:renamed", "fence"), Some(fence));
    assert_eq!(release(&mut con, "job:renamed", b"holder"), 1);
    assert_eq!(release(&mut con, "job", b"a"), 1);
    assert_eq!(next.granted_token(), b"b");
}

#[test]
fn renaming_another_lock_onto_a_key_with_waiters_makes_them_wait_for_it() {
    let server = TestServer::start();
    let mut con = server.connection();
    acquire_as(&mut con, "job", "holder").expect("granted");
    let moved_fence = acquire_as(&mut con, "other", "mover").expect("granted");
    let waiter = start_waiter(&server, 0, "job", "a");

    run(&mut con, &["RENAME", "other", "job"]);

    assert_eq!(info_field(&mut con, "job", "fence"), Some(moved_fence));
    assert_eq!(info_field(&mut con, "job", "waiters"), Some(1));
    assert_eq!(release(&mut con, "job", b"holder"), 0);
    assert!(waiter.is_blocked());
    assert_eq!(release(&mut con, "job", b"mover"), 1);
    assert_eq!(waiter.granted_token(), b"a");
}

#[test]
fn moving_a_lock_with_waiters_to_another_database_grants_it_to_the_head_waiter() {
    let server = TestServer::start();
    let mut con = server.connection();
    let mut con1 = connection_to(&server, 1);
    let fence = acquire_as(&mut con, "job", "holder").expect("granted");
    let waiter = start_waiter(&server, 0, "job", "a");

    let moved: i64 = redis::cmd("MOVE")
        .arg("job")
        .arg(1)
        .query(&mut con)
        .unwrap();

    assert_eq!(moved, 1);
    assert_eq!(waiter.granted_token(), b"a");
    assert_eq!(info_field(&mut con1, "job", "fence"), Some(fence));
    assert_eq!(release(&mut con1, "job", b"holder"), 1);
    assert_eq!(release(&mut con, "job", b"a"), 1);
}

#[test]
fn restore_replace_over_a_lock_with_waiters_makes_them_wait_for_the_restored_lock() {
    let server = TestServer::start();
    let mut con = server.connection();
    acquire_as(&mut con, "job", "holder").expect("granted");
    let restored_fence = acquire_as(&mut con, "other", "restorer").expect("granted");
    let payload: Vec<u8> = redis::cmd("DUMP").arg("other").query(&mut con).unwrap();
    let head = start_waiter(&server, 0, "job", "a");
    let next = start_waiter(&server, 0, "job", "b");

    let _: () = redis::cmd("RESTORE")
        .arg("job")
        .arg(30_000)
        .arg(&payload)
        .arg("REPLACE")
        .query(&mut con)
        .unwrap();

    // The restored lock is held: nobody is granted anything.
    assert_eq!(info_field(&mut con, "job", "fence"), Some(restored_fence));
    assert_eq!(info_field(&mut con, "job", "waiters"), Some(2));
    assert!(head.is_blocked() && next.is_blocked());
    assert_eq!(acquire_as(&mut con, "job", "newcomer"), None);
    assert_eq!(release(&mut con, "job", b"holder"), 0);
    assert_eq!(release(&mut con, "job", b"restorer"), 1);
    assert_eq!(head.granted_token(), b"a");
    assert!(next.is_blocked(), "one grant at a time");
    assert_eq!(release(&mut con, "job", b"a"), 1);
    assert_eq!(next.granted_token(), b"b");
}

#[test]
fn a_plain_set_over_a_lock_with_waiters_keeps_them_waiting_until_the_key_is_deleted() {
    let server = TestServer::start();
    let mut con = server.connection();
    acquire_as(&mut con, "job", "holder").expect("granted");
    let head = start_waiter(&server, 0, "job", "a");
    let next = start_waiter(&server, 0, "job", "b");

    run(&mut con, &["SET", "job", "not a lock"]);

    // The key is not free: the waiters keep waiting, a newcomer is told its type.
    assert_eq!(blocked(&mut con), 2);
    let err = error_of(
        redis::cmd("LOCK.ACQUIRE")
            .arg("job")
            .arg(30_000)
            .query(&mut con),
    );
    assert!(err.starts_with("WRONGTYPE"), "{err}");
    assert!(head.is_blocked() && next.is_blocked());

    run(&mut con, &["DEL", "job"]);

    assert_eq!(head.granted_token(), b"a");
    assert!(next.is_blocked(), "one grant at a time");
    assert_eq!(release(&mut con, "job", b"a"), 1);
    assert_eq!(next.granted_token(), b"b");
}

#[test]
fn replicaof_on_a_master_with_waiters_unblocks_them_with_an_error() {
    let master = TestServer::start();
    let other = TestServer::start();
    let mut con = master.connection();
    acquire_as(&mut con, "job", "holder").expect("granted");
    let head = start_waiter(&master, 0, "job", "a");
    let next = start_waiter(&master, 0, "job", "b");

    run(
        &mut con,
        &["REPLICAOF", "127.0.0.1", &other.port.to_string()],
    );

    for waiter in [head, next] {
        let err = error_of(waiter.reply().map(|_| Value::Nil));
        assert!(err.starts_with("UNBLOCKED"), "{err}");
    }
    assert_eq!(blocked(&mut con), 0);
    assert_eq!(
        info_stat(&mut con, "lock_grants"),
        1,
        "only the holder's grant"
    );
    // Now a replica: it queues no new waiters.
    let err = error_of(
        redis::cmd("LOCK.ACQUIRE")
            .arg("job")
            .arg(30_000)
            .arg("WAIT")
            .arg(0)
            .query(&mut con),
    );
    assert!(err.starts_with("READONLY"), "{err}");
    assert_eq!(blocked(&mut con), 0);
}

#[test]
fn a_replica_refuses_to_queue_waiters_so_a_promotion_finds_none_and_then_serves_new_ones() {
    let master = TestServer::start();
    let replica = start_replica(&master, &[]);
    let mut con = master.connection();
    let fence = acquire_as(&mut con, "job", "holder").expect("granted");
    sync_replicas(&mut con, 1);
    let mut replica_con = replica.connection();

    let err = error_of(
        redis::cmd("LOCK.ACQUIRE")
            .arg("job")
            .arg(30_000)
            .arg("WAIT")
            .arg(0)
            .query(&mut replica_con),
    );
    assert!(err.starts_with("READONLY"), "{err}");
    assert_eq!(blocked(&mut replica_con), 0);

    run(&mut replica_con, &["REPLICAOF", "NO", "ONE"]);

    let waiter = start_waiter(&replica, 0, "job", "a");
    assert_eq!(release(&mut replica_con, "job", b"holder"), 1);
    assert_eq!(waiter.granted_token(), b"a");
    assert!(info_field(&mut replica_con, "job", "fence").unwrap() > fence);
}
