//! Every way a lock can vanish under its waiters, on every server: the oldest waiter is
//! granted it, a newcomer pipelined right behind the removal cannot jump the queue, the
//! server survives (Redis 8.2 used to crash on these), and the next waiter follows.
//!
//! Where the server runs post-notification jobs (Redis 7.2+, Valkey), the grant is made
//! in the same event as the removal: a `LOCK.INFO` pipelined right after it already sees
//! the waiter's lock. Redis 7.0 has no such jobs; there the grant comes right after the
//! removing command, before any other lock command on the key, and what a plain read in
//! between sees is pinned below (docs/servers.md says so).

use std::time::Duration;

use crate::common::*;

/// `job` held by a holder (30 s) with waiter `a` (`WAIT 0`) queued: the holder's token
/// and fence, and the waiter.
fn held_by_a_holder_with_waiter_a(
    server: &TestServer,
    con: &mut redis::Connection,
) -> (Vec<u8>, i64, Waiter) {
    held_with_a_waiter(server, con, "job", 30_000, &["WAIT", "0", "TOKEN", "a"])
}

/// `job` held by a holder (30 s) with waiters `a` then `b` (`WAIT 0`).
fn held_with_two_waiters(
    server: &TestServer,
    con: &mut redis::Connection,
) -> (i64, Waiter, Waiter) {
    let (_, fence, head) = held_by_a_holder_with_waiter_a(server, con);
    let next = Waiter::start(server, "job", 30_000, &["WAIT", "0", "TOKEN", "b"]);
    (fence, head, next)
}

/// `LOCK.INFO`'s fields (`None`: no lock) and a newcomer's reply (`None`: nil).
type LookAndIntrusion = (Option<InfoFields>, Option<(Vec<u8>, i64)>);

/// Sends `removal` (one or more commands), then `LOCK.INFO job` and a newcomer's
/// `LOCK.ACQUIRE job 5000 TOKEN intruder`, all in one write, and returns the fence that
/// `LOCK.INFO` saw (`None`: no lock) and the newcomer's reply.
fn remove_then_look_and_intrude(
    con: &mut redis::Connection,
    removal: &[&[&str]],
) -> (Option<i64>, Option<(Vec<u8>, i64)>) {
    let mut pipe = redis::pipe();
    for command in removal {
        pipe.cmd(command[0]).arg(&command[1..]).ignore();
    }
    pipe.cmd("LOCK.INFO").arg("job");
    pipe.cmd("LOCK.ACQUIRE")
        .arg("job")
        .arg(5_000)
        .arg("TOKEN")
        .arg("intruder");
    let (seen, intruder): LookAndIntrusion = pipe.query(con).expect("the removal pipeline");
    let fence = seen.and_then(|fields| fields.get("fence"));
    (fence, intruder)
}

/// The whole check for one way of removing `job` (in database 0) under two waiters.
fn assert_the_head_waiter_is_granted_after(removal: &[&[&str]]) {
    let server = TestServer::start();
    let mut con = server.connection();
    let (holder_fence, mut head, mut next) = held_with_two_waiters(&server, &mut con);

    let (seen, intruder) = remove_then_look_and_intrude(&mut con, removal);

    assert_eq!(
        intruder, None,
        "a newcomer cannot jump the queue ({removal:?})"
    );
    let (token, fence) = head.granted().expect("the head waiter is granted the lock");
    assert_eq!(token, b"a");
    assert!(fence > holder_fence);
    if server_kind().has_post_jobs() {
        assert_eq!(
            seen,
            Some(fence),
            "on {} the grant is made in the removing event ({removal:?})",
            server_kind()
        );
    } else {
        // Redis 7.0: a read pipelined right behind sees no lock or the waiter's, never
        // the removed holder's, and never another.
        assert!(
            seen.is_none() || seen == Some(fence),
            "{seen:?} ({removal:?})"
        );
    }
    assert_eq!(info_field(&mut con, "job", "fence"), Some(fence));
    assert_eq!(info_field(&mut con, "job", "waiters"), Some(1));
    assert_eq!(release(&mut con, "job", b"a"), 1);
    assert_eq!(next.granted_token(), b"b");
    assert_eq!(release(&mut con, "job", b"b"), 1);
    assert_eq!(lock_waiters(&mut con), 0);
    ping(&mut con);
}

#[test]
fn del() {
    assert_the_head_waiter_is_granted_after(&[&["DEL", "job"]]);
}

#[test]
fn unlink() {
    assert_the_head_waiter_is_granted_after(&[&["UNLINK", "job"]]);
}

#[test]
fn an_expire_in_the_past() {
    assert_the_head_waiter_is_granted_after(&[&["PEXPIRE", "job", "0"]]);
}

#[test]
fn flushall() {
    assert_the_head_waiter_is_granted_after(&[&["FLUSHALL"]]);
}

#[test]
fn flushall_async() {
    assert_the_head_waiter_is_granted_after(&[&["FLUSHALL", "ASYNC"]]);
}

#[test]
fn flushdb() {
    assert_the_head_waiter_is_granted_after(&[&["FLUSHDB"]]);
}

#[test]
fn flushdb_async() {
    assert_the_head_waiter_is_granted_after(&[&["FLUSHDB", "ASYNC"]]);
}

#[test]
fn swapdb_with_an_empty_database() {
    assert_the_head_waiter_is_granted_after(&[&["SWAPDB", "0", "1"]]);
}

#[test]
fn move_to_another_database() {
    assert_the_head_waiter_is_granted_after(&[&["MOVE", "job", "1"]]);
}

#[test]
fn rename_away() {
    assert_the_head_waiter_is_granted_after(&[&["RENAME", "job", "elsewhere"]]);
}

#[test]
fn del_inside_multi_exec() {
    assert_the_head_waiter_is_granted_after(&[&["MULTI"], &["DEL", "job"], &["EXEC"]]);
}

#[test]
fn del_from_a_script() {
    assert_the_head_waiter_is_granted_after(&[&[
        "EVAL",
        "return redis.call('DEL', KEYS[1])",
        "1",
        "job",
    ]]);
}

#[test]
fn active_expiry_with_nothing_touching_the_key() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (_, fence, mut head) =
        held_with_a_waiter(&server, &mut con, "job", 150, &["WAIT", "0", "TOKEN", "a"]);
    let (token, next) = head.granted().expect("granted when the lock expires");
    assert_eq!(token, b"a");
    assert!(next > fence);
    assert_eq!(lock_stat(&mut con, "lock_expired"), 1);
}

#[test]
fn lazy_expiry_by_a_lookup() {
    let server = TestServer::start();
    let mut con = server.connection();
    config_set(&mut con, "hz", "1");
    let (_, fence, mut head) = held_by_a_holder_with_waiter_a(&server, &mut con);
    // Expires in 1 ms; the lookup that follows finds it past its time.
    let (seen, intruder) = remove_then_look_and_intrude(
        &mut con,
        &[&["PEXPIRE", "job", "1"], &["DEBUG", "SLEEP", "0.01"]],
    );
    assert_eq!(intruder, None);
    let (token, next) = head.granted().expect("granted");
    assert_eq!(token, b"a");
    assert!(next > fence);
    assert!(seen.is_none() || seen == Some(next), "{seen:?}");
}

#[test]
fn debug_reload_keeps_the_lock_and_its_waiters() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (holder, fence, mut head) = held_by_a_holder_with_waiter_a(&server, &mut con);
    let () = redis::cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    assert!(head.is_blocked());
    assert_eq!(info_field(&mut con, "job", "fence"), Some(fence));
    assert_eq!(info_field(&mut con, "job", "waiters"), Some(1));
    assert_eq!(release(&mut con, "job", &holder), 1);
    assert_eq!(head.granted_token(), b"a");
}

#[test]
fn a_lock_that_expires_across_debug_reload_goes_to_its_waiter() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (_, fence, mut head) = held_by_a_holder_with_waiter_a(&server, &mut con);
    // The reload does not load a key past its time: no callback tells the module, its
    // deadline timer does.
    let (): () = redis::pipe()
        .cmd("PEXPIRE")
        .arg("job")
        .arg(5)
        .ignore()
        .cmd("DEBUG")
        .arg("SLEEP")
        .arg("0.01")
        .ignore()
        .cmd("DEBUG")
        .arg("RELOAD")
        .ignore()
        .query(&mut con)
        .unwrap();
    let reply = head
        .reply_within(Duration::from_secs(2))
        .expect("granted soon after the reload");
    let (token, next): (Vec<u8>, i64) = redis::from_redis_value(reply).expect("[token, fence]");
    assert_eq!(token, b"a");
    assert!(next > fence);
}

#[test]
fn restore_replace_puts_another_lock_in_its_place_and_the_waiters_wait_for_it() {
    let server = TestServer::start();
    let mut con = server.connection();
    acquire(&mut con, "other", 60_000, &["TOKEN", "other"]).unwrap();
    let payload = dump(&mut con, "other").unwrap();
    let (_, _, mut head) = held_by_a_holder_with_waiter_a(&server, &mut con);
    let () = redis::cmd("RESTORE")
        .arg("job")
        .arg(0)
        .arg(payload)
        .arg("REPLACE")
        .query(&mut con)
        .unwrap();
    assert!(head.is_blocked(), "another lock holds the key now");
    assert_eq!(release(&mut con, "job", b"other"), 1);
    assert_eq!(head.granted_token(), b"a");
}

#[test]
fn a_plain_set_over_it_holds_the_waiters_until_the_string_goes() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (_, _, mut head) = held_by_a_holder_with_waiter_a(&server, &mut con);
    let () = redis::cmd("SET")
        .arg("job")
        .arg("plain")
        .query(&mut con)
        .unwrap();
    assert!(head.is_blocked(), "a string holds the key now");
    let _: i64 = redis::cmd("DEL").arg("job").query(&mut con).unwrap();
    let reply = head
        .reply_within(Duration::from_secs(2))
        .expect("granted once the string is gone");
    let (token, _): (Vec<u8>, i64) = redis::from_redis_value(reply).unwrap();
    assert_eq!(token, b"a");
}
