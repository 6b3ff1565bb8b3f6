//! `LOCK.ACQUIRE ... WAIT` on a real server: a waiter is handed the lock, with a new
//! fence and its own token, the moment it is free (release, `DEL`, `UNLINK`, expiry),
//! before any newcomer; waiters are served in the order they came; timeouts, `WAIT 0`,
//! `MULTI`/`EXEC` and scripts; the grant replicates and persists (docs/waiting.md).

use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;

fn is_lower_hex(token: &[u8]) -> bool {
    token
        .iter()
        .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}

/// A waiter with a server-made token was granted `key`: the token is 32 lowercase hex
/// characters, the fence beyond `previous_fence`, and `LOCK.RELEASE` with it succeeds.
fn assert_granted_with_server_token(
    con: &mut redis::Connection,
    key: &str,
    granted: Option<(Vec<u8>, i64)>,
    previous_fence: i64,
) {
    let (token, fence) = granted.expect("the waiter is granted the lock");
    assert_eq!(token.len(), 32, "server-made token: {token:?}");
    assert!(is_lower_hex(&token), "server-made token: {token:?}");
    assert!(fence > previous_fence, "{fence} > {previous_fence}");
    assert_eq!(info_field(con, key, "fence"), Some(fence));
    assert_eq!(release(con, key, &token), 1, "the waiter's token holds it");
}

/// A fresh server, a connection to it, and "job" held (30 s) with a `Waiter`
/// (`LOCK.ACQUIRE job 30000 extra...`) queued behind it: the server, the connection, the
/// holder's token and fence, and the waiter.
fn job_held_with_a_waiter(extra: &[&str]) -> (TestServer, redis::Connection, Vec<u8>, i64, Waiter) {
    let server = TestServer::start();
    let mut con = server.connection();
    let (holder, fence, waiter) = held_with_a_waiter(&server, &mut con, "job", 30_000, extra);
    (server, con, holder, fence, waiter)
}

#[test]
fn a_waiter_is_granted_the_lock_with_a_larger_fence_and_a_server_made_token_when_the_holder_releases()
 {
    let (_server, mut con, holder, fence, mut waiter) = job_held_with_a_waiter(&["WAIT", "10000"]);
    assert_eq!(info_field(&mut con, "job", "waiters"), Some(1));

    assert_eq!(release(&mut con, "job", &holder), 1);

    let granted = waiter.granted();
    assert_ne!(granted.as_ref().map(|g| g.0.clone()), Some(holder));
    assert_granted_with_server_token(&mut con, "job", granted, fence);
}

#[test]
fn a_waiter_with_its_own_token_is_granted_the_lock_with_that_token() {
    let (_server, mut con, holder, fence, mut waiter) =
        job_held_with_a_waiter(&["WAIT", "10000", "TOKEN", "worker-2"]);

    assert_eq!(release(&mut con, "job", &holder), 1);

    let (token, new_fence) = waiter.granted().expect("granted");
    assert_eq!(token, b"worker-2");
    assert!(new_fence > fence, "{new_fence} > {fence}");
    let pttl = pttl(&mut con, "job");
    assert!(
        (25_000..=30_000).contains(&pttl),
        "the waiter's own ttl: {pttl}"
    );
    assert_eq!(release(&mut con, "job", b"worker-2"), 1);
}

/// A waiter is granted the lock, with a server-made token and a larger fence, when
/// `command` (`DEL` or `UNLINK`) removes the key under its holder.
fn assert_a_waiter_is_granted_the_lock_when_the_key_is_removed_by(command: &str) {
    let (_server, mut con, _, fence, mut waiter) = job_held_with_a_waiter(&["WAIT", "10000"]);

    let removed: i64 = redis::cmd(command).arg("job").query(&mut con).unwrap();
    assert_eq!(removed, 1, "{command}");

    assert_granted_with_server_token(&mut con, "job", waiter.granted(), fence);
}

#[test]
fn a_waiter_is_granted_the_lock_when_the_key_is_deleted() {
    assert_a_waiter_is_granted_the_lock_when_the_key_is_removed_by("DEL");
}

#[test]
fn a_waiter_is_granted_the_lock_when_the_key_is_unlinked() {
    assert_a_waiter_is_granted_the_lock_when_the_key_is_removed_by("UNLINK");
}

#[test]
fn a_waiter_is_granted_an_expired_lock_on_time_with_no_command_touching_the_key() {
    // 2 s: the waiter must queue before the lock expires, however slow the machine.
    const TTL_MS: u64 = 2_000;
    let server = TestServer::start();
    let mut con = server.connection();
    // The server's own expiry cycle off: only the module's timer can hand the lock over
    // on time (without it the waiter would wait out its 10 s), so the bound on lateness
    // below is about scheduling delays alone and can be generous.
    let () = redis::cmd("DEBUG")
        .arg("SET-ACTIVE-EXPIRE")
        .arg(0)
        .query(&mut con)
        .unwrap();
    let (_, fence) = acquire(&mut con, "job", TTL_MS, &[]).expect("granted");
    let asked = Instant::now();
    let pttl = u64::try_from(pttl(&mut con, "job")).expect("job expires");
    // The server's deadline lies between these two, whatever delays came around PTTL.
    let earliest = asked + Duration::from_millis(pttl);
    let deadline = Instant::now() + Duration::from_millis(pttl);
    let mut waiter = Waiter::start(&server, "job", 30_000, &["WAIT", "10000"]);
    assert!(
        Instant::now() < deadline,
        "the waiter queued before the lock expired (machine too slow for this TTL)"
    );

    // Nothing touches "job" from here on: only the server's expiry can free it.
    let (granted, at) = waiter.outcome();

    let late = at.saturating_duration_since(deadline);
    let early = earliest.saturating_duration_since(at);
    assert!(
        early < Duration::from_millis(20),
        "granted {early:?} before the deadline"
    );
    assert!(
        late < Duration::from_secs(3),
        "granted {late:?} after the deadline"
    );
    assert_granted_with_server_token(&mut con, "job", granted, fence);
}

#[test]
fn a_newcomer_pipelined_right_after_the_release_cannot_jump_the_queue() {
    let (_server, mut con, holder, _, mut waiter) =
        job_held_with_a_waiter(&["WAIT", "10000", "TOKEN", "waiter"]);

    // Both commands arrive in one read: the newcomer runs before the waiter's grant.
    let (released, newcomer): (i64, Option<(Vec<u8>, i64)>) = redis::pipe()
        .cmd("LOCK.RELEASE")
        .arg("job")
        .arg(&holder)
        .cmd("LOCK.ACQUIRE")
        .arg("job")
        .arg(30_000)
        .arg("TOKEN")
        .arg("newcomer")
        .query(&mut con)
        .unwrap();

    assert_eq!(released, 1);
    assert_eq!(newcomer, None, "the newcomer must stand back");
    let (token, _) = waiter.granted().expect("the waiter is granted the lock");
    assert_eq!(token, b"waiter");
    assert_eq!(release(&mut con, "job", b"newcomer"), 0);
    assert_eq!(release(&mut con, "job", b"waiter"), 1);
}

#[test]
fn a_newcomer_on_another_connection_after_the_release_cannot_jump_the_queue() {
    let (server, mut con, holder, _, mut waiter) =
        job_held_with_a_waiter(&["WAIT", "10000", "TOKEN", "waiter"]);
    let mut newcomer_con = server.connection();

    assert_eq!(release(&mut con, "job", &holder), 1);
    let newcomer = acquire(&mut newcomer_con, "job", 30_000, &["TOKEN", "newcomer"]);

    assert_eq!(newcomer, None, "the newcomer must stand back");
    let (token, _) = waiter.granted().expect("the waiter is granted the lock");
    assert_eq!(token, b"waiter");
    assert_eq!(release(&mut con, "job", b"waiter"), 1);
}

/// A newcomer pipelined right behind `command` (`DEL` or `UNLINK`), which removes `job`
/// under its holder, cannot take the lock from the waiter queued for it.
fn assert_a_newcomer_pipelined_right_after_cannot_jump_the_queue(command: &str) {
    let (server, mut con, _, _, mut waiter) =
        job_held_with_a_waiter(&["WAIT", "10000", "TOKEN", "waiter"]);
    let mut newcomer_con = server.connection();

    // Both commands arrive in one read: the newcomer runs before anything else can.
    let (removed, newcomer): (i64, Option<(Vec<u8>, i64)>) = redis::pipe()
        .cmd(command)
        .arg("job")
        .cmd("LOCK.ACQUIRE")
        .arg("job")
        .arg(10_000)
        .arg("TOKEN")
        .arg("newcomer")
        .query(&mut newcomer_con)
        .unwrap();

    assert_eq!(removed, 1, "{command}");
    assert_eq!(
        newcomer, None,
        "the newcomer must stand back after {command}"
    );
    assert_eq!(waiter.granted_token(), b"waiter");
    assert_eq!(release(&mut con, "job", b"newcomer"), 0);
    assert_eq!(release(&mut con, "job", b"waiter"), 1);
}

#[test]
fn a_newcomer_pipelined_right_after_a_del_cannot_jump_the_queue() {
    assert_a_newcomer_pipelined_right_after_cannot_jump_the_queue("DEL");
}

#[test]
fn a_newcomer_pipelined_right_after_an_unlink_cannot_jump_the_queue() {
    assert_a_newcomer_pipelined_right_after_cannot_jump_the_queue("UNLINK");
}

/// `job` held for 3 s with a waiter (token `waiter`) queued, on a server whose
/// background expiry is off; then, on another connection and in one read, `DEBUG SLEEP`
/// past the lock's deadline, the commands `before` and a newcomer's `LOCK.ACQUIRE`. The
/// sleep holds the event loop, so no timer of the module (not its hand-over at the
/// deadline either) runs before the newcomer: the lock is past its deadline but still in
/// the keyspace, and only a lookup (lazy expiry) removes it. The newcomer must get nil
/// and the waiter the lock.
fn assert_a_newcomer_after_a_lazy_expiry_cannot_jump_the_queue(before: &[&str]) {
    let server = TestServer::start();
    let mut con = server.connection();
    let () = redis::cmd("DEBUG")
        .arg("SET-ACTIVE-EXPIRE")
        .arg(0)
        .query(&mut con)
        .unwrap();
    // 3 s: the window from here to the sleep below must close before the deadline,
    // however slow the machine (300 ms did not always, beside a CPU hog).
    acquire(&mut con, "job", 3_000, &["TOKEN", "holder"]).expect("granted");
    let mut waiter = Waiter::start(
        &server,
        "job",
        30_000,
        &["WAIT", "10000", "TOKEN", "waiter"],
    );
    let mut newcomer_con = server.connection();
    let expire_at = pexpiretime(&mut con, "job");
    let left_ms = expire_at - server_now_ms(&mut con);
    assert!(
        left_ms > 20,
        "{left_ms} ms left when the waiter queued (machine too slow for this TTL)"
    );
    let sleep_s = format!("{:.3}", (left_ms + 100) as f64 / 1000.0);

    // TIME and DBSIZE (which looks no key up) show that the test hit its window: past
    // the deadline, with the lock still in the keyspace.
    let mut pipe = redis::pipe();
    pipe.cmd("DEBUG").arg("SLEEP").arg(&sleep_s).ignore();
    pipe.cmd("TIME").cmd("DBSIZE");
    if let Some((name, args)) = before.split_first() {
        pipe.cmd(name).arg(args).ignore();
    }
    pipe.cmd("LOCK.ACQUIRE")
        .arg("job")
        .arg(10_000)
        .arg("TOKEN")
        .arg("newcomer");
    type Granted = Option<(Vec<u8>, i64)>;
    let ((secs, micros), keys, newcomer): ((i64, i64), i64, Granted) =
        pipe.query(&mut newcomer_con).unwrap();

    let now_ms = secs * 1000 + micros / 1000;
    assert!(
        now_ms >= expire_at,
        "{now_ms} is past the deadline {expire_at}"
    );
    assert_eq!(
        keys, 1,
        "nothing removed the lock before the newcomer's read"
    );
    assert_eq!(newcomer, None, "the newcomer must stand back");
    assert_eq!(waiter.granted_token(), b"waiter");
    assert_eq!(release(&mut con, "job", b"newcomer"), 0);
    assert_eq!(release(&mut con, "job", b"holder"), 0);
    assert_eq!(release(&mut con, "job", b"waiter"), 1);
}

#[test]
fn a_newcomer_whose_own_lookup_expires_the_lock_cannot_jump_the_queue() {
    assert_a_newcomer_after_a_lazy_expiry_cannot_jump_the_queue(&[]);
}

#[test]
fn a_newcomer_right_after_a_lookup_expired_the_lock_cannot_jump_the_queue() {
    assert_a_newcomer_after_a_lazy_expiry_cannot_jump_the_queue(&["EXISTS", "job"]);
}

#[test]
fn waiters_are_granted_the_lock_one_at_a_time_in_the_order_they_started_waiting() {
    const WAITERS: usize = 5;
    let server = TestServer::start();
    let mut con = server.connection();
    let (mut holder, mut fence) = acquire(&mut con, "job", 30_000, &[]).expect("granted");
    let mut waiters = Vec::new();
    for i in 0..WAITERS {
        let token = format!("waiter-{i}");
        waiters.push(Waiter::start(
            &server,
            "job",
            30_000,
            &["WAIT", "20000", "TOKEN", &token],
        ));
        assert_eq!(
            info_field(&mut con, "job", "waiters"),
            Some(i as i64 + 1),
            "waiter {i} is queued"
        );
    }

    for (i, mut waiter) in waiters.into_iter().enumerate() {
        assert_eq!(release(&mut con, "job", &holder), 1);
        let (token, new_fence) = waiter.granted().expect("granted in turn");
        assert_eq!(token, format!("waiter-{i}").into_bytes(), "grant {i}");
        assert!(new_fence > fence, "{new_fence} > {fence}");
        assert_eq!(
            info_field(&mut con, "job", "waiters"),
            Some((WAITERS - i - 1) as i64),
            "the others still wait after grant {i}"
        );
        (holder, fence) = (token, new_fence);
    }
    assert_eq!(release(&mut con, "job", &holder), 1);
    assert!(!exists(&mut con, "job"));
}

#[test]
fn a_wait_that_times_out_answers_nil_after_the_timeout() {
    const TIMEOUT_MS: u64 = 300;
    let server = TestServer::start();
    let mut holder_con = server.connection();
    let mut con = server.connection();
    let (holder, fence) = acquire(&mut holder_con, "job", 30_000, &[]).expect("granted");

    let started = Instant::now();
    let reply = acquire(&mut con, "job", 30_000, &["WAIT", &TIMEOUT_MS.to_string()]);
    let waited = started.elapsed();

    assert_eq!(reply, None);
    assert!(
        waited >= Duration::from_millis(TIMEOUT_MS),
        "answered after {waited:?}, before the timeout"
    );
    assert!(
        waited < Duration::from_millis(TIMEOUT_MS + 200),
        "answered after {waited:?}"
    );
    assert_eq!(info_field(&mut con, "job", "waiters"), Some(0));
    assert_eq!(info_field(&mut con, "job", "fence"), Some(fence));
    assert_eq!(release(&mut holder_con, "job", &holder), 1);
}

#[test]
fn wait_zero_waits_without_limit_until_the_lock_is_released() {
    let (_server, mut con, holder, fence, mut waiter) = job_held_with_a_waiter(&["WAIT", "0"]);

    // Proving "no limit" takes some waiting: a second is well beyond any rounding.
    thread::sleep(Duration::from_secs(1));
    assert!(waiter.is_blocked(), "WAIT 0 must not time out");
    assert_eq!(lock_waiters(&mut con), 1);

    assert_eq!(release(&mut con, "job", &holder), 1);
    assert_granted_with_server_token(&mut con, "job", waiter.granted(), fence);
}

/// With `job` held by another client, `acquire_with_wait` (a `LOCK.ACQUIRE job ... WAIT 0`
/// sent some way that must not block) answers nil at once and leaves nobody waiting.
fn assert_wait_answers_nil_at_once(
    acquire_with_wait: impl FnOnce(&mut redis::Connection) -> Option<(Vec<u8>, i64)>,
) {
    let server = TestServer::start();
    let mut holder_con = server.connection();
    let mut con = server.connection();
    acquire(&mut holder_con, "job", 30_000, &[]).expect("granted");

    let started = Instant::now();
    let reply = acquire_with_wait(&mut con);

    assert_eq!(reply, None);
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(lock_waiters(&mut con), 0);
    assert_eq!(info_field(&mut con, "job", "waiters"), Some(0));
}

#[test]
fn wait_inside_multi_exec_answers_nil_at_once() {
    assert_wait_answers_nil_at_once(|con| {
        let (reply,): (Option<(Vec<u8>, i64)>,) = redis::pipe()
            .atomic()
            .cmd("LOCK.ACQUIRE")
            .arg("job")
            .arg(30_000)
            .arg("WAIT")
            .arg(0)
            .query(con)
            .unwrap();
        reply
    });
}

#[test]
fn wait_inside_a_script_answers_nil_at_once() {
    assert_wait_answers_nil_at_once(|con| {
        redis::cmd("EVAL")
            .arg("return redis.call('LOCK.ACQUIRE', KEYS[1], 30000, 'WAIT', 0)")
            .arg(1)
            .arg("job")
            .query(con)
            .unwrap()
    });
}

/// Has `job` (ttl `ttl_ms`) granted to a waiter: a holder takes it, a waiter queues, the
/// holder releases. The waiter's `(token, fence)`.
fn grant_to_a_waiter(
    server: &TestServer,
    con: &mut redis::Connection,
    ttl_ms: u64,
) -> (Vec<u8>, i64) {
    let (holder, _, mut waiter) =
        held_with_a_waiter(server, con, "job", ttl_ms, &["WAIT", "10000"]);
    assert_eq!(release(con, "job", &holder), 1);
    waiter.granted().expect("granted")
}

/// On a master with a replica, `job` is held (`holder_ttl_ms`) with a waiter queued
/// (server-made token); `free` frees it on the master (given the master connection and
/// the holder's token). The waiter's grant reaches the replica exactly: the same fence,
/// grant time, absolute expiry and value (token included, as `DUMP` shows without
/// reading it), and the waiter's token, which the replica did not invent, releases it on
/// the master, after which the replica has no key.
fn assert_a_grant_to_a_waiter_replicates_exactly(
    holder_ttl_ms: u64,
    free: impl FnOnce(&mut redis::Connection, &[u8]),
) {
    // What replicates, not a wait for it (replica_wait.rs): the holder's short TTL would
    // give its grant a 30 ms wait for the replica (a tenth of the TTL), which a loaded
    // machine's replica can miss.
    let master = TestServer::with_args(&["--lock.replicas", "0"]);
    let replica = start_replica(&master, &[]);
    let mut con = master.connection();
    let mut replica_con = replica.connection();
    let (holder, holder_fence) = acquire(&mut con, "job", holder_ttl_ms, &[]).expect("granted");
    let mut waiter = Waiter::start(&master, "job", 600_000, &["WAIT", "10000"]);

    free(&mut con, &holder);
    let (token, fence) = waiter.granted().expect("the waiter is granted the lock");
    assert_ne!(token, holder);
    assert!(fence > holder_fence, "{fence} > {holder_fence}");
    sync_replicas(&mut con, 1);

    assert_eq!(info_field(&mut replica_con, "job", "fence"), Some(fence));
    assert_eq!(
        info_field(&mut replica_con, "job", "acquired"),
        info_field(&mut con, "job", "acquired")
    );
    let expire_at = pexpiretime(&mut con, "job");
    assert!(expire_at > 0, "the waiter's lock expires: {expire_at}");
    assert_eq!(pexpiretime(&mut replica_con, "job"), expire_at);
    assert_eq!(dump(&mut replica_con, "job"), dump(&mut con, "job"));
    assert_eq!(
        digest_value(&mut replica_con, "job"),
        digest_value(&mut con, "job")
    );

    assert_eq!(release(&mut con, "job", &token), 1, "the waiter's token");
    sync_replicas(&mut con, 1);
    assert_eq!(info(&mut replica_con, "job"), None);
    assert_eq!(dbsize(&mut replica_con), 0);
}

#[test]
fn a_grant_to_a_waiter_replicates_exactly() {
    assert_a_grant_to_a_waiter_replicates_exactly(30_000, |con, holder| {
        assert_eq!(release(con, "job", holder), 1);
    });
}

#[test]
fn a_grant_to_a_waiter_on_del_replicates_exactly() {
    assert_a_grant_to_a_waiter_replicates_exactly(30_000, |con, _| {
        let deleted: i64 = redis::cmd("DEL").arg("job").query(con).unwrap();
        assert_eq!(deleted, 1);
    });
}

#[test]
fn a_grant_to_a_waiter_on_expiry_replicates_exactly() {
    // Nothing touches "job": the master's own expiry frees it.
    assert_a_grant_to_a_waiter_replicates_exactly(300, |_, _| {});
}

#[test]
fn a_grant_to_a_waiter_on_flushall_replicates_exactly() {
    assert_a_grant_to_a_waiter_replicates_exactly(30_000, |con, _| {
        let () = redis::cmd("FLUSHALL").query(con).unwrap();
    });
}

#[test]
fn a_grant_to_a_waiter_survives_a_save_and_restart() {
    let mut server = TestServer::start();
    let (token, fence, acquired) = {
        let mut con = server.connection();
        let (token, fence) = grant_to_a_waiter(&server, &mut con, 60_000);
        let acquired = info_field(&mut con, "job", "acquired");
        let _: () = redis::cmd("SAVE").query(&mut con).unwrap();
        (token, fence, acquired)
    };

    server.restart();

    let mut con = server.connection();
    assert_eq!(info_field(&mut con, "job", "fence"), Some(fence));
    assert_eq!(info_field(&mut con, "job", "acquired"), acquired);
    assert_eq!(acquire(&mut con, "job", 60_000, &[]), None, "still held");
    assert_eq!(release(&mut con, "job", &token), 1, "by the waiter's token");
}

#[test]
fn a_grant_to_a_waiter_survives_debug_reload() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (token, fence) = grant_to_a_waiter(&server, &mut con, 60_000);
    let before = dump(&mut con, "job");

    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();

    assert_eq!(dump(&mut con, "job"), before);
    assert_eq!(info_field(&mut con, "job", "fence"), Some(fence));
    assert_eq!(release(&mut con, "job", &token), 1, "by the waiter's token");
}

#[test]
fn the_grant_to_a_waiter_is_made_inside_the_release_so_no_command_sees_the_lock_free() {
    let (_server, mut con, holder, old_fence, mut waiter) =
        job_held_with_a_waiter(&["WAIT", "0", "TOKEN", "next"]);

    // One read: the commands right behind the release already see the waiter's lock.
    type Info = Option<InfoFields>;
    type Granted = Option<(Vec<u8>, i64)>;
    let (released, fence, newcomer): (i64, Info, Granted) = redis::pipe()
        .cmd("LOCK.RELEASE")
        .arg("job")
        .arg(&holder)
        .cmd("LOCK.INFO")
        .arg("job")
        .cmd("LOCK.ACQUIRE")
        .arg("job")
        .arg(1000)
        .query(&mut con)
        .unwrap();
    assert_eq!(released, 1);
    let fence = fence
        .expect("the lock is held right after the release")
        .get("fence")
        .expect("fence");
    assert!(fence > old_fence);
    assert_eq!(newcomer, None, "the newcomer finds it held");
    let (token, granted_fence) = waiter.granted().expect("the waiter got it");
    assert_eq!((token.as_slice(), granted_fence), (&b"next"[..], fence));
}
