//! What happens to clients blocked in `LOCK.ACQUIRE ... WAIT` when an admin command
//! changes the key or the server under them: `FLUSHALL`, `FLUSHDB`, `SWAPDB`, `RENAME`,
//! `MOVE`, `RESTORE ... REPLACE`, `COPY ... REPLACE`, a plain `SET`, `REPLICAOF`, a `DEL` inside
//! `MULTI`/`EXEC`. Each has one documented
//! outcome; in none is a waiter left blocked with the lock free, and in none do two
//! clients hold the lock at once.

use std::time::Duration;

use crate::common::*;
use redis::Value;

/// A connection to database `db`.
fn connection_to(server: &TestServer, db: i64) -> redis::Connection {
    let client = redis::Client::open(format!("{}{db}", server.url())).expect("client");
    client.get_connection().expect("connect")
}

/// Starts `LOCK.ACQUIRE key 30000 TOKEN token WAIT 20000` in database `db` on a new
/// connection, and returns once the server counts it as blocked.
fn start_waiter(server: &TestServer, db: i64, key: &str, token: &str) -> Waiter {
    Waiter::start_in(server, db, key, 30_000, &["TOKEN", token, "WAIT", "20000"])
}

/// `LOCK.ACQUIRE key 30000 TOKEN token`: the fence, `None` if another token holds it.
fn take(con: &mut redis::Connection, key: &str, token: &str) -> Option<i64> {
    acquire_as(con, key, 30_000, token.as_bytes()).map(|(_, fence)| fence)
}

/// `job` held by token `holder`, with waiters of tokens `a` (the head) and `b` (next)
/// queued behind it in database 0: the holder's fence and the two waiters.
fn held_with_two_waiters(
    server: &TestServer,
    con: &mut redis::Connection,
) -> (i64, Waiter, Waiter) {
    let fence = take(con, "job", "holder").expect("granted");
    let head = start_waiter(server, 0, "job", "a");
    let next = start_waiter(server, 0, "job", "b");
    (fence, head, next)
}

/// Once `job` is free, the head waiter `a` is granted it alone, and the next waiter `b`
/// only after `a` releases.
fn assert_the_head_and_then_the_next_waiter_are_granted(
    con: &mut redis::Connection,
    head: &mut Waiter,
    next: &mut Waiter,
) {
    assert_eq!(head.granted_token(), b"a");
    assert!(next.is_blocked(), "one grant at a time");
    assert_eq!(release(con, "job", b"a"), 1);
    assert_eq!(next.granted_token(), b"b");
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
    let (fence, mut head, mut next) = held_with_two_waiters(&server, &mut con);

    run(&mut con, &["FLUSHALL"]);

    assert_eq!(head.granted_token(), b"a");
    assert!(info_field(&mut con, "job", "fence").unwrap() > fence);
    assert_eq!(info_field(&mut con, "job", "waiters"), Some(1));
    assert!(next.is_blocked(), "one grant at a time");
    assert_eq!(take(&mut con, "job", "newcomer"), None);
    assert_eq!(release(&mut con, "job", b"a"), 1);
    assert_eq!(next.granted_token(), b"b");
    assert_eq!(release(&mut con, "job", b"b"), 1);
}

#[test]
fn flushdb_grants_the_freed_lock_to_the_head_waiter_and_leaves_other_databases_alone() {
    let server = TestServer::start();
    let mut con = server.connection();
    let mut con1 = connection_to(&server, 1);
    take(&mut con, "job", "holder").expect("granted");
    take(&mut con1, "job", "holder-1").expect("granted in db 1");
    let mut waiter = start_waiter(&server, 0, "job", "a");
    let mut waiter1 = start_waiter(&server, 1, "job", "a1");

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
    let fence = take(&mut con, "job", "holder").expect("granted");
    let mut waiter = start_waiter(&server, 0, "job", "a");

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
    take(&mut con, "job", "holder-0").expect("granted");
    take(&mut con1, "job", "holder-1").expect("granted in db 1");
    let mut waiter = start_waiter(&server, 0, "job", "a");

    run(&mut con, &["SWAPDB", "0", "1"]);

    // Db 0 now holds db 1's lock: the waiter waits for that one.
    assert_eq!(take(&mut con, "job", "newcomer"), None);
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
    let (fence, mut head, mut next) = held_with_two_waiters(&server, &mut con);

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
    take(&mut con, "job", "holder").expect("granted");
    let moved_fence = take(&mut con, "other", "mover").expect("granted");
    let mut waiter = start_waiter(&server, 0, "job", "a");

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
    let fence = take(&mut con, "job", "holder").expect("granted");
    let mut waiter = start_waiter(&server, 0, "job", "a");

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
    let (_, mut head, mut next) = held_with_two_waiters(&server, &mut con);
    let restored_fence = take(&mut con, "other", "restorer").expect("granted");
    let payload = dump(&mut con, "other").expect("other exists");

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
    assert_eq!(take(&mut con, "job", "newcomer"), None);
    assert_eq!(release(&mut con, "job", b"holder"), 0);
    assert_eq!(release(&mut con, "job", b"restorer"), 1);
    assert_the_head_and_then_the_next_waiter_are_granted(&mut con, &mut head, &mut next);
}

#[test]
fn a_shared_lock_copied_onto_a_key_grants_the_waiters_at_the_head_that_fit_beside_it() {
    let server = TestServer::start();
    let mut con = server.connection();
    take(&mut con, "job", "holder").expect("granted");
    let shared = ["TOKEN", "a", "SHARED", "WAIT", "20000"];
    let mut reader = Waiter::start_in(&server, 0, "job", 30_000, &shared);
    let mut writer = start_waiter(&server, 0, "job", "b");
    let copied_fence = acquire(&mut con, "other", 30_000, &["TOKEN", "r", "SHARED"])
        .expect("granted")
        .1;

    let copied: i64 = redis::cmd("COPY")
        .arg("other")
        .arg("job")
        .arg("REPLACE")
        .query(&mut con)
        .unwrap();

    // The copy's reader holds `job` now; the waiting reader fits beside it, the writer
    // behind it does not.
    assert_eq!(copied, 1);
    assert_eq!(reader.granted_token(), b"a");
    assert!(writer.is_blocked());
    assert_eq!(info_field(&mut con, "job", "holders"), Some(2));
    assert_eq!(info_field(&mut con, "job", "waiters"), Some(1));
    assert!(info_field(&mut con, "job", "fence") > Some(copied_fence));
    assert_eq!(release(&mut con, "job", b"holder"), 0);
    assert_eq!(release(&mut con, "job", b"r"), 1);
    assert!(writer.is_blocked(), "one reader still holds it");
    assert_eq!(release(&mut con, "job", b"a"), 1);
    assert_eq!(writer.granted_token(), b"b");
}

#[test]
fn a_plain_set_over_a_lock_with_waiters_keeps_them_waiting_until_the_key_is_deleted() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (_, mut head, mut next) = held_with_two_waiters(&server, &mut con);

    run(&mut con, &["SET", "job", "not a lock"]);

    // The key is not free: the waiters keep waiting, a newcomer is told its type.
    assert_eq!(lock_waiters(&mut con), 2);
    let err = error_of(
        redis::cmd("LOCK.ACQUIRE")
            .arg("job")
            .arg(30_000)
            .query(&mut con),
    );
    assert!(err.starts_with("WRONGTYPE"), "{err}");
    assert!(head.is_blocked() && next.is_blocked());

    run(&mut con, &["DEL", "job"]);

    assert_the_head_and_then_the_next_waiter_are_granted(&mut con, &mut head, &mut next);
}

/// `LOCK.ACQUIRE job 30000 WAIT 0` on a replica is refused with `READONLY`, and nobody
/// is left blocked.
/// `MULTI`, `DEL key`, then `command` on `key`, `EXEC`: the replies.
fn delete_then_in_one_transaction(
    con: &mut redis::Connection,
    key: &str,
    command: &[&str],
) -> (i64, i64) {
    redis::pipe()
        .atomic()
        .cmd("DEL")
        .arg(key)
        .cmd(command[0])
        .arg(key)
        .arg(&command[1..])
        .query(con)
        .expect("MULTI/EXEC")
}

#[test]
fn a_release_after_a_del_in_the_same_transaction_sees_the_waiter_granted() {
    // The server runs post-notification jobs (the handoff of a deleted lock) when the
    // transaction is over; the release must not find the key free before that.
    let server = TestServer::start();
    let mut con = server.connection();
    let (_, fence, mut waiter) = held_with_a_waiter(
        &server,
        &mut con,
        "tx",
        30_000,
        &["TOKEN", "next", "WAIT", "0"],
    );
    assert_eq!(
        delete_then_in_one_transaction(&mut con, "tx", &["LOCK.RELEASE", "next"]),
        (1, 1)
    );
    let (token, granted) = waiter
        .granted()
        .expect("the waiter is granted the deleted lock");
    assert_eq!(token, b"next");
    assert!(granted > fence);
    assert!(
        !exists(&mut con, "tx"),
        "released by its holder inside the transaction"
    );
}

#[test]
fn an_extend_after_a_del_in_the_same_transaction_extends_the_waiters_grant() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (_, _, mut waiter) = held_with_a_waiter(
        &server,
        &mut con,
        "tx",
        30_000,
        &["TOKEN", "next", "WAIT", "0"],
    );
    let replies =
        delete_then_in_one_transaction(&mut con, "tx", &["LOCK.EXTEND", "next", "900000"]);
    assert_eq!(replies, (1, 1));
    assert_eq!(waiter.granted_token(), b"next");
    assert!(
        pttl(&mut con, "tx") > 800_000,
        "the waiter's grant was extended"
    );
}

fn assert_a_replica_refuses_to_queue_a_waiter(con: &mut redis::Connection) {
    let err = error_of(
        redis::cmd("LOCK.ACQUIRE")
            .arg("job")
            .arg(30_000)
            .arg("WAIT")
            .arg(0)
            .query(con),
    );
    assert!(err.starts_with("READONLY"), "{err}");
    assert_eq!(lock_waiters(con), 0);
}

#[test]
fn replicaof_on_a_master_with_waiters_unblocks_them_with_an_error() {
    let master = TestServer::start();
    let other = TestServer::start();
    let mut con = master.connection();
    let (_, head, next) = held_with_two_waiters(&master, &mut con);

    run(
        &mut con,
        &["REPLICAOF", "127.0.0.1", &other.port.to_string()],
    );

    for mut waiter in [head, next] {
        let err = error_of(waiter.reply());
        assert!(err.starts_with("UNBLOCKED"), "{err}");
    }
    assert_eq!(lock_waiters(&mut con), 0);
    assert_eq!(
        lock_stat(&mut con, "lock_grants"),
        1,
        "only the holder's grant"
    );
    // Now a replica: it queues no new waiters.
    assert_a_replica_refuses_to_queue_a_waiter(&mut con);
}

/// Valkey 8+ leaves a module's blocked clients alone on a role change when they said they
/// follow redirects (`CLIENT CAPA redirect`): the module answers them itself, as Redis
/// answers every blocked client, so nobody is left blocked on a replica.
#[test]
fn replicaof_answers_waiters_that_follow_redirects_too() {
    let master = TestServer::start();
    let other = TestServer::start();
    let mut con = master.connection();
    take(&mut con, "job", "holder").expect("granted");
    let capa: &[&str] = if server_kind().valkey {
        &["CLIENT", "CAPA", "redirect"]
    } else {
        &[]
    };
    let mut waiter = Waiter::start_after(&master, capa, "job", 30_000, &["WAIT", "0"]);

    run(
        &mut con,
        &["REPLICAOF", "127.0.0.1", &other.port.to_string()],
    );

    let err = error_of(waiter.reply_within(Duration::from_secs(5)));
    assert!(err.starts_with("UNBLOCKED"), "{err}");
    assert_eq!(lock_waiters(&mut con), 0);
    assert_eq!(
        info_int(&server_info(&mut con, "clients"), "blocked_clients"),
        0
    );
}

#[test]
fn a_replica_refuses_to_queue_waiters_so_a_promotion_finds_none_and_then_serves_new_ones() {
    let master = TestServer::start();
    let replica = start_replica(&master, &[]);
    let mut con = master.connection();
    let fence = take(&mut con, "job", "holder").expect("granted");
    sync_replicas(&mut con, 1);
    let mut replica_con = replica.connection();

    assert_a_replica_refuses_to_queue_a_waiter(&mut replica_con);

    run(&mut replica_con, &["REPLICAOF", "NO", "ONE"]);

    let mut waiter = start_waiter(&replica, 0, "job", "a");
    assert_eq!(release(&mut replica_con, "job", b"holder"), 1);
    assert_eq!(waiter.granted_token(), b"a");
    assert!(info_field(&mut replica_con, "job", "fence").unwrap() > fence);
}
