//! Locks of every kind, made on one version and found intact on the other: exclusive
//! with a waiter, session-bound in its grace, shared, a semaphore, with a published
//! value, a several-keys grant, and a lock near the fence limit.

use std::collections::HashMap;
use std::fs;
use std::time::Duration;

use crate::common::*;

/// The largest fence there is, and the fence of the lock near it.
pub const MAX_FENCE: i64 = (1 << 53) - 1;
pub const EDGE_FENCE: i64 = MAX_FENCE - 100_000;
/// Every lock's TTL, and the session-bound lock's grace.
pub const TTL_MS: i64 = 600_000;
pub const GRACE_MS: i64 = 60_000;

/// One holder made before the upgrade, as it must be found after it.
#[derive(Debug, Clone)]
pub struct Held {
    pub key: String,
    pub token: Vec<u8>,
    pub fence: i64,
    pub value: Option<Vec<u8>>,
    /// The session's grace; -1 when not bound.
    pub session: i64,
}

/// A server running `module` with an AOF (no RDB preamble: its commands are replayed)
/// and `extra` arguments, holding `up:edge` (fence [`EDGE_FENCE`]) from a hand-written
/// AOF, as no client can make one.
pub fn server_with(module: &str, extra: &[&str]) -> TestServer {
    let mut server = TestServer::with_args(&["--no-module", "--loadmodule", module]);
    server.stop();
    let expire_at = now_ms() + TTL_MS;
    let aof = resp(&[
        b"LOCK._SET",
        b"up:edge",
        b"tok-edge",
        EDGE_FENCE.to_string().as_bytes(),
        now_ms().to_string().as_bytes(),
        expire_at.to_string().as_bytes(),
    ]);
    fs::write(server.dir.join("appendonly.aof"), aof).expect("write the AOF");
    let mut args = vec![
        "--no-module",
        "--loadmodule",
        module,
        "--appendonly",
        "yes",
        "--aof-use-rdb-preamble",
        "no",
    ];
    args.extend_from_slice(extra);
    server.restart_with(&args);
    let mut con = server.connection();
    assert_eq!(
        info_field(&mut con, "up:edge", "fence"),
        Some(EDGE_FENCE),
        "the hand-written AOF was not loaded; log:\n{}",
        server.log()
    );
    server
}

fn grant(con: &mut redis::Connection, key: &str, args: &[&str]) -> Held {
    let token = format!("tok-{}", key.replace([':', '{', '}'], "-"));
    let mut extra = vec!["TOKEN", token.as_str()];
    extra.extend_from_slice(args);
    let (token, fence) = acquire(con, key, TTL_MS as u64, &extra).expect("granted");
    Held {
        key: key.to_owned(),
        token,
        fence,
        value: None,
        session: -1,
    }
}

/// Makes every kind of lock on `server` (beside `up:edge`); the waiter blocked on
/// `up:exclusive` is returned to be kept connected until the test is done with it.
pub fn make_every_kind(server: &TestServer) -> (Vec<Held>, Waiter) {
    let mut con = server.connection();
    let mut made = vec![Held {
        key: "up:edge".into(),
        token: b"tok-edge".to_vec(),
        fence: EDGE_FENCE,
        value: None,
        session: -1,
    }];
    made.push(grant(&mut con, "up:exclusive", &[]));
    let waiter = Waiter::start(server, "up:exclusive", TTL_MS as u64, &["WAIT", "0"]);

    let mut bound = server.connection();
    let mut session = grant(
        &mut bound,
        "up:session",
        &["SESSION", &GRACE_MS.to_string()],
    );
    session.session = GRACE_MS;
    drop(bound);
    poll_until(Duration::from_secs(10), "the session's grace runs", || {
        info_field(&mut con, "up:session", "connected") == Some(0)
    });
    made.push(session);

    for (key, args) in [
        ("up:shared", vec!["SHARED"]),
        ("up:semaphore", vec!["SHARED", "LIMIT", "3"]),
    ] {
        for holder in ["a", "b"] {
            let token = format!("tok-{key}-{holder}");
            let mut extra = vec!["TOKEN", token.as_str()];
            extra.extend_from_slice(&args);
            let (token, fence) = acquire(&mut con, key, TTL_MS as u64, &extra).expect("a place");
            made.push(Held {
                key: key.to_owned(),
                token,
                fence,
                value: None,
                session: -1,
            });
        }
    }

    let mut valued = grant(&mut con, "up:value", &["VALUE", "host-7:4242"]);
    valued.value = Some(b"host-7:4242".to_vec());
    made.push(valued);

    let (token, fences) = acquire_all(
        &mut con,
        &["{up}all-a", "{up}all-b"],
        TTL_MS,
        &["TOKEN", "tok-all"],
    )
    .expect("all");
    for (key, fence) in ["{up}all-a", "{up}all-b"].iter().zip(fences) {
        made.push(Held {
            key: (*key).to_owned(),
            token: token.clone(),
            fence,
            value: None,
            session: -1,
        });
    }
    (made, waiter)
}

/// One holder as `LOCK.HOLDERS` shows it: its fields by name.
fn holders(con: &mut redis::Connection, key: &str) -> Vec<HashMap<String, redis::Value>> {
    let reply: Option<Vec<Vec<redis::Value>>> = redis::cmd("LOCK.HOLDERS")
        .arg(key)
        .query(con)
        .expect("LOCK.HOLDERS");
    reply
        .unwrap_or_default()
        .into_iter()
        .map(|fields| {
            fields
                .chunks(2)
                .map(|pair| {
                    let name = match &pair[0] {
                        redis::Value::BulkString(bytes) => {
                            String::from_utf8_lossy(bytes).into_owned()
                        }
                        other => format!("{other:?}"),
                    };
                    (name, pair[1].clone())
                })
                .collect()
        })
        .collect()
}

fn int(fields: &HashMap<String, redis::Value>, name: &str) -> i64 {
    match fields.get(name) {
        Some(redis::Value::Int(n)) => *n,
        other => panic!("{name}: {other:?}"),
    }
}

fn bytes(fields: &HashMap<String, redis::Value>, name: &str) -> Option<Vec<u8>> {
    match fields.get(name) {
        Some(redis::Value::BulkString(bytes)) => Some(bytes.clone()),
        _ => None,
    }
}

/// Every holder of `made` is on the server `con` reaches: the same fence, a TTL left
/// that no more than the lock's, the same value and session binding (its grace
/// running: the connection that held it is gone); nobody else holds those keys.
pub fn check(con: &mut redis::Connection, made: &[Held], what: &str) {
    let mut keys: Vec<&str> = made.iter().map(|held| held.key.as_str()).collect();
    keys.dedup();
    for key in keys {
        let found = holders(con, key);
        let wanted: Vec<&Held> = made.iter().filter(|held| held.key == key).collect();
        assert_eq!(
            found.len(),
            wanted.len(),
            "{what}: the holders of {key}: {found:?}"
        );
        for held in wanted {
            let holder = found
                .iter()
                .find(|fields| int(fields, "fence") == held.fence)
                .unwrap_or_else(|| panic!("{what}: {key} lost fence {}: {found:?}", held.fence));
            let ttl = int(holder, "ttl");
            assert!(ttl > 0 && ttl <= TTL_MS, "{what}: {key}'s TTL {ttl}");
            assert_eq!(bytes(holder, "value"), held.value, "{what}: {key}'s value");
            assert_eq!(
                int(holder, "session"),
                held.session,
                "{what}: {key}'s session"
            );
            if held.session >= 0 {
                assert_eq!(int(holder, "connected"), 0, "{what}: {key}'s grace runs");
            }
        }
    }
}

/// Each holder's token releases it, and the fences that follow are above every fence
/// made before (the clock came along with the locks).
pub fn release_and_go_on(con: &mut redis::Connection, made: &[Held], what: &str) {
    for held in made {
        assert_eq!(
            release(con, &held.key, &held.token),
            1,
            "{what}: {}'s token releases it",
            held.key
        );
    }
    let highest = made.iter().map(|held| held.fence).max().unwrap_or(0);
    for key in ["up:edge", "up:next"] {
        let (_, fence) = acquire(con, key, 10_000, &[]).expect("free");
        assert!(
            fence > highest,
            "{what}: {key}'s next fence {fence} is above {highest}"
        );
    }
}
