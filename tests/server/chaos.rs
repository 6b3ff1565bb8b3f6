//! Chaos: many clients wait on a few keys (a third of their acquires session-bound, with
//! a grace of up to 50 ms) while an admin deletes, expires, flushes, renames, moves,
//! swaps databases, reloads, restores over, overwrites, pauses, unblocks and kills
//! clients under them. It passes when the server is alive, no client was left
//! blocked, no two clients ever held the same key at once, fences never repeat, and the
//! lock still works afterwards.
//!
//! `make test` runs it for a few seconds on every server; `make chaos` runs it longer
//! (`CHAOS_SECONDS`). The seed of the admin's choices is printed, and `CHAOS_SEED` replays
//! it (the clients' timing still varies).
//!
//! "Held at once" is judged only from what the server confirmed: a client held its lock
//! at least from the moment its grant reply arrived until it sent the `LOCK.RELEASE` that
//! answered 1 (the server granted before the first and released after the second). The
//! admin never brings an old lock back (no `RENAME`, `MOVE` or `SWAPDB` back, no `RESTORE`
//! of a client's lock), so a release that answers 1 proves the lock stayed with its
//! client all along; two such intervals of one key that overlap are a double grant.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;

const KEYS: [&str; 3] = ["chaos:0", "chaos:1", "chaos:2"];
const WORKERS: usize = 12;
/// The longest `WAIT` a worker asks for; a reply later than this plus `REPLY_SLACK`
/// means a client was left blocked.
const MAX_WAIT_MS: u64 = 400;
const REPLY_SLACK: Duration = Duration::from_secs(5);

/// Picks one of `KEYS`.
fn pick_key(rng: &mut Rng) -> &'static str {
    KEYS[rng.below(KEYS.len() as u64) as usize]
}

/// A time a lock was certainly held by one client: `[granted, releasing]`.
#[derive(Debug, Clone, Copy)]
struct Held {
    key: usize,
    from: Instant,
    to: Instant,
    fence: i64,
}

/// What the workers saw.
#[derive(Default)]
struct Record {
    held: Vec<Held>,
    fences: Vec<i64>,
    /// Replies that never came: a client left blocked.
    hung: Vec<String>,
}

fn seconds() -> u64 {
    std::env::var("CHAOS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4)
}

fn seed() -> u64 {
    std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| now_ms() as u64 | 1)
}

/// One client: acquires a random key with a fresh token and a bounded wait, holds it a
/// moment, releases it; reconnects when the admin kills its connection.
fn worker(
    server_port: u16,
    n: usize,
    stop: Arc<AtomicBool>,
    client_id: Arc<AtomicI64>,
    record: Arc<Mutex<Record>>,
    grants: Arc<AtomicU64>,
) {
    let url = format!("redis://127.0.0.1:{server_port}/");
    let client = redis::Client::open(url).expect("client");
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (n as u64 + 1));
    let mut round = 0u64;
    let mut con: Option<redis::Connection> = None;
    while !stop.load(Ordering::Relaxed) {
        let Some(c) = con.as_mut() else {
            match client.get_connection_with_timeout(Duration::from_secs(2)) {
                Ok(mut c) => {
                    let wait_limit = Duration::from_millis(MAX_WAIT_MS) + REPLY_SLACK;
                    c.set_read_timeout(Some(wait_limit)).expect("read timeout");
                    let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut c).unwrap_or(0);
                    client_id.store(id, Ordering::Relaxed);
                    con = Some(c);
                }
                Err(_) => thread::sleep(Duration::from_millis(5)),
            }
            continue;
        };
        round += 1;
        let key = rng.below(KEYS.len() as u64) as usize;
        let token = format!("w{n}-{round}");
        let ttl = 300 + rng.below(700);
        let wait = 1 + rng.below(MAX_WAIT_MS);
        let session: Vec<String> = match rng.below(3) {
            0 => vec!["SESSION".into(), rng.below(50).to_string()],
            _ => Vec::new(),
        };
        let sent = Instant::now();
        let reply: redis::RedisResult<Option<(Vec<u8>, i64)>> = redis::cmd("LOCK.ACQUIRE")
            .arg(KEYS[key])
            .arg(ttl)
            .arg("TOKEN")
            .arg(&token)
            .arg("WAIT")
            .arg(wait)
            .arg(&session)
            .query(c);
        let granted_at = Instant::now();
        let (fence, broken) = match reply {
            Ok(Some((got, fence))) => {
                assert_eq!(got, token.as_bytes(), "a grant carries the waiter's token");
                (Some(fence), false)
            }
            Ok(None) => (None, false),
            Err(err) if err.is_timeout() => {
                record.lock().unwrap().hung.push(format!(
                    "{token} on {} waited {wait} ms, no reply after {:?}",
                    KEYS[key],
                    sent.elapsed()
                ));
                (None, true)
            }
            // Killed by the admin, or unblocked with an error: start again.
            Err(_) => (None, true),
        };
        if broken {
            con = None;
            continue;
        }
        let Some(fence) = fence else { continue };
        grants.fetch_add(1, Ordering::Relaxed);
        thread::sleep(Duration::from_micros(rng.below(3000)));
        let releasing = Instant::now();
        let released: redis::RedisResult<i64> = redis::cmd("LOCK.RELEASE")
            .arg(KEYS[key])
            .arg(&token)
            .query(c);
        let mut record = record.lock().unwrap();
        record.fences.push(fence);
        match released {
            Ok(1) => record.held.push(Held {
                key,
                from: granted_at,
                to: releasing,
                fence,
            }),
            Ok(_) => {}
            Err(_) => con = None,
        }
    }
}

/// The admin: one disruptive command every few ms, never one that brings back an old
/// lock.
fn admin(
    con: &mut redis::Connection,
    rng: &mut Rng,
    decoy: &[u8],
    ids: &[Arc<AtomicI64>],
) -> &'static str {
    let key = pick_key(rng);
    // Refusals (a RENAME of a missing key, a MOVE onto an existing one) are fine.
    let mut run = |args: &[&[u8]]| {
        let mut cmd = redis::Cmd::new();
        for arg in args {
            cmd.arg(*arg);
        }
        let _: redis::RedisResult<redis::Value> = cmd.query(con);
    };
    let victim = ids[rng.below(ids.len() as u64) as usize]
        .load(Ordering::Relaxed)
        .to_string();
    let (short, soon) = (
        (1 + rng.below(20)).to_string(),
        (1 + rng.below(30)).to_string(),
    );
    match rng.below(16) {
        0 => {
            run(&[b"DEL", key.as_bytes()]);
            "DEL"
        }
        1 => {
            run(&[b"UNLINK", key.as_bytes()]);
            "UNLINK"
        }
        2 => {
            run(&[b"PEXPIRE", key.as_bytes(), short.as_bytes()]);
            "PEXPIRE"
        }
        3 => {
            run(&[b"FLUSHDB"]);
            "FLUSHDB"
        }
        4 => {
            run(&[b"FLUSHALL", b"ASYNC"]);
            "FLUSHALL ASYNC"
        }
        5 => {
            // Away, never back: the scratch key is dropped at once.
            run(&[b"RENAME", key.as_bytes(), b"chaos:scratch"]);
            run(&[b"DEL", b"chaos:scratch"]);
            "RENAME away"
        }
        6 => {
            // Another lock onto the key: the decoy, which no client holds.
            run(&[b"RESTORE", b"chaos:scratch", b"200", decoy, b"REPLACE"]);
            run(&[b"RENAME", b"chaos:scratch", key.as_bytes()]);
            "RENAME onto"
        }
        7 => {
            run(&[b"SELECT", b"1"]);
            run(&[b"FLUSHDB"]);
            run(&[b"SELECT", b"0"]);
            run(&[b"MOVE", key.as_bytes(), b"1"]);
            run(&[b"SELECT", b"1"]);
            run(&[b"FLUSHDB"]);
            run(&[b"SELECT", b"0"]);
            "MOVE away"
        }
        8 => {
            // Database 0 swapped with an empty one, whose old keys are then dropped.
            run(&[b"SELECT", b"9"]);
            run(&[b"FLUSHDB"]);
            run(&[b"SWAPDB", b"0", b"9"]);
            run(&[b"FLUSHDB"]);
            run(&[b"SELECT", b"0"]);
            "SWAPDB"
        }
        9 => {
            run(&[b"RESTORE", key.as_bytes(), b"200", decoy, b"REPLACE"]);
            "RESTORE REPLACE"
        }
        10 => {
            run(&[b"SET", key.as_bytes(), b"plain", b"PX", soon.as_bytes()]);
            "SET over"
        }
        11 => {
            run(&[b"CLIENT", b"PAUSE", short.as_bytes(), b"WRITE"]);
            "CLIENT PAUSE WRITE"
        }
        12 => {
            run(&[b"CLIENT", b"KILL", b"ID", victim.as_bytes()]);
            "CLIENT KILL"
        }
        13 => {
            // Redis 7.0 itself panics when CLIENT UNBLOCK meets a client that CLIENT
            // PAUSE holds back (no module involved): the admin lifts the pause first.
            run(&[b"CLIENT", b"UNPAUSE"]);
            run(&[b"CLIENT", b"UNBLOCK", victim.as_bytes()]);
            "CLIENT UNBLOCK"
        }
        14 if rng.below(8) == 0 => {
            run(&[b"DEBUG", b"RELOAD"]);
            "DEBUG RELOAD"
        }
        _ => {
            run(&[b"EXISTS", key.as_bytes()]);
            "EXISTS (a lazy expiry)"
        }
    }
}

/// Fails if two certain holding intervals of one key overlap.
fn assert_no_overlap(held: &mut [Held]) {
    held.sort_by_key(|h| (h.key, h.from));
    for pair in held.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        assert!(
            a.key != b.key || b.from >= a.to,
            "two clients held {} at once: fence {} until {:?}, fence {} from {:?}",
            KEYS[a.key],
            a.fence,
            a.to,
            b.fence,
            b.from
        );
    }
}

#[test]
fn waiters_survive_an_admin_who_removes_and_replaces_their_locks_under_them() {
    let server = TestServer::start();
    let mut con = server.connection();
    let seed = seed();
    println!(
        "chaos on {} for {} s, CHAOS_SEED={seed}",
        server_kind(),
        seconds()
    );

    let (_, decoy_fence) = acquire(&mut con, "decoy", 100_000, &["TOKEN", "decoy"]).unwrap();
    let decoy = dump(&mut con, "decoy").expect("DUMP decoy");
    let _: i64 = redis::cmd("DEL").arg("decoy").query(&mut con).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let record = Arc::new(Mutex::new(Record::default()));
    let grants = Arc::new(AtomicU64::new(0));
    let ids: Vec<Arc<AtomicI64>> = (0..WORKERS).map(|_| Arc::new(AtomicI64::new(0))).collect();
    let workers: Vec<_> = (0..WORKERS)
        .map(|n| {
            let (stop, id, record, grants) =
                (stop.clone(), ids[n].clone(), record.clone(), grants.clone());
            let port = server.port;
            thread::spawn(move || worker(port, n, stop, id, record, grants))
        })
        .collect();

    let mut rng = Rng(seed);
    let mut done = std::collections::BTreeMap::<&str, u32>::new();
    let deadline = Instant::now() + Duration::from_secs(seconds());
    while Instant::now() < deadline {
        *done
            .entry(admin(&mut con, &mut rng, &decoy, &ids))
            .or_default() += 1;
        thread::sleep(Duration::from_millis(2 + rng.below(10)));
    }
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.join().expect("a worker panicked");
    }
    println!(
        "admin: {done:?}; grants to workers: {}",
        grants.load(Ordering::Relaxed)
    );

    // The server is alive and nobody is left blocked.
    ping(&mut con);
    let record = std::mem::take(&mut *record.lock().unwrap());
    assert!(
        record.hung.is_empty(),
        "clients left blocked: {:?}",
        record.hung
    );
    poll_until(Duration::from_secs(5), "no waiter left", || {
        lock_waiters(&mut con) == 0
    });
    assert_eq!(
        info_int(&server_info(&mut con, "clients"), "blocked_clients"),
        0
    );

    // No double grant, no fence given twice, and the admin did not starve the clients.
    let mut held = record.held;
    assert!(
        held.len() >= 20,
        "only {} confirmed grants under chaos",
        held.len()
    );
    assert_no_overlap(&mut held);
    let unique: HashSet<i64> = record.fences.iter().copied().collect();
    assert_eq!(
        unique.len(),
        record.fences.len(),
        "a fence was granted twice"
    );
    assert!(!unique.contains(&decoy_fence));

    // The lock still works: a grant, a waiter, a hand-over with a larger fence.
    let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
    let (holder, fence) = acquire(&mut con, "after", 10_000, &[]).expect("granted");
    let mut waiter = Waiter::start(&server, "after", 10_000, &["WAIT", "5000"]);
    assert_eq!(release(&mut con, "after", &holder), 1);
    let (_, next) = waiter.granted().expect("the waiter is handed the lock");
    assert!(next > fence);
}
