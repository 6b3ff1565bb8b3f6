//! Grants made to waiters persist like direct grants (docs/waiting.md,
//! docs/guarantees.md): an AOF replay ends with the waiter's token, fence, grant time
//! and absolute expiry, whether the lock was handed over on a release, on a `DEL` or on
//! its own expiry, and the next fence for each key exceeds the one granted before.

use crate::common::*;

/// A waiter's own token with a CRLF and a space, which the AOF must carry as they are.
const OWN_TOKEN: &str = "waiter own\r\ntoken";

/// A lock granted to a waiter: its key, the waiter's token and the lock's state.
struct Granted {
    key: &'static str,
    token: Vec<u8>,
    before: Snapshot,
}

/// `key` held (`holder_ttl_ms`) with a waiter queued (`LOCK.ACQUIRE key 600000 extra...
/// WAIT 10000`); `free` frees it (given a connection and the holder's token); the
/// waiter's grant, which must carry a larger fence than the holder's.
fn grant_to_a_waiter(
    server: &TestServer,
    key: &'static str,
    holder_ttl_ms: u64,
    extra: &[&str],
    free: impl FnOnce(&mut redis::Connection, &[u8]),
) -> Granted {
    let mut con = server.connection();
    let (holder, holder_fence) = acquire(&mut con, key, holder_ttl_ms, &[]).expect("granted");
    let mut args = vec!["WAIT", "10000"];
    args.extend_from_slice(extra);
    let mut waiter = Waiter::start(server, key, 600_000, &args);
    free(&mut con, &holder);
    let (token, fence) = waiter.granted().expect("the waiter is granted the lock");
    assert_ne!(token, holder, "{key}");
    assert!(fence > holder_fence, "{key}: {fence} > {holder_fence}");
    let before = snapshot(&mut con, key);
    assert_eq!(before.fence, fence, "{key}");
    assert!(before.expire_at > 0, "{key} expires: {before:?}");
    Granted { key, token, before }
}

/// Grants one lock to a waiter on a release (server-made token), one on a `DEL` (its own
/// token) and one on the server's own expiry of the holder's lock.
fn grant_to_waiters(server: &TestServer) -> Vec<Granted> {
    vec![
        grant_to_a_waiter(server, "released", 60_000, &[], |con, holder| {
            assert_eq!(release(con, "released", holder), 1);
        }),
        grant_to_a_waiter(
            server,
            "deleted",
            60_000,
            &["TOKEN", OWN_TOKEN],
            |con, _| {
                let deleted: i64 = redis::cmd("DEL").arg("deleted").query(con).unwrap();
                assert_eq!(deleted, 1);
            },
        ),
        // Nothing touches "expired": the server's expiry frees it.
        grant_to_a_waiter(server, "expired", 300, &[], |_, _| {}),
    ]
}

/// Each lock has the state it had before, is released by the waiter's token, and is
/// granted again with a larger fence.
fn assert_the_waiters_still_hold_their_locks(con: &mut redis::Connection, granted: &[Granted]) {
    for lock in granted {
        assert_eq!(
            snapshot(con, lock.key),
            lock.before,
            "{} changed in the replay",
            lock.key
        );
        assert!(pttl(con, lock.key) > 0, "{} has no time left", lock.key);
    }
    for lock in granted {
        assert_eq!(
            release(con, lock.key, &lock.token),
            1,
            "{} is not held by the waiter's token",
            lock.key
        );
        let (_, next) = acquire(con, lock.key, 1_000, &[]).expect("free");
        assert!(
            next > lock.before.fence,
            "{}: {next} after {}",
            lock.key,
            lock.before.fence
        );
    }
}

#[test]
fn grants_to_waiters_survive_a_crash_and_an_aof_replay() {
    let mut server = TestServer::with_args(&AOF_ALWAYS);
    let granted = grant_to_waiters(&server);
    let token = &granted[1].token;
    assert_eq!(token, OWN_TOKEN.as_bytes());
    let incremental = aof_files(&server, "type i");
    assert!(
        contains(&incremental, b"LOCK._SET"),
        "the grants did not reach the AOF"
    );

    server.kill();
    server.restart();

    let mut con = server.connection();
    assert_eq!(
        dbsize(&mut con),
        3,
        "the three waiters' locks, and no other"
    );
    assert_the_waiters_still_hold_their_locks(&mut con, &granted);
}

#[test]
fn grants_to_waiters_survive_debug_loadaof() {
    let server = TestServer::with_args(&AOF_ALWAYS);
    let granted = grant_to_waiters(&server);
    let mut con = server.connection();

    // Empties the dataset and replays the AOF into it.
    let () = redis::cmd("DEBUG").arg("LOADAOF").query(&mut con).unwrap();

    assert_eq!(
        dbsize(&mut con),
        3,
        "the three waiters' locks, and no other"
    );
    assert_the_waiters_still_hold_their_locks(&mut con, &granted);
}
