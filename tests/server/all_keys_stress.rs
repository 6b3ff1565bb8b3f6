//! Several keys at once under stress (docs/commands.md, "LOCK.ACQUIREALL"): threads over
//! real connections take overlapping sets of keys in crossing orders with
//! `LOCK.ACQUIREALL ... WAIT` (and one key with `LOCK.ACQUIRE ... WAIT`), as writers or
//! readers, some holders dying with their connection (`SESSION 0`), some letting a short
//! TTL run out. Then, from what each thread saw and the server's `MONITOR` feed:
//!
//! - every request ends (granted or nil) within its timeout, plus scheduling slack;
//! - no two sections overlap on a key unless both are readers;
//! - on every key, the grants follow the order the requests arrived in (`MONITOR` shows
//!   commands in the order the server ran them): first come, first served, whatever
//!   mix of single-key and several-key waiters;
//! - every fence is a fence of its key, above the ones before.
//!
//! A section runs from the grant's reply to the earliest of the release's send time, the
//! drop of a dying connection and the acquire's send time plus its TTL: all within the
//! server's own holding, so an overlap seen here is one the server allowed.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;

/// How long the threads run (`ALL_KEYS_STRESS_SECONDS` to change it).
fn duration() -> Duration {
    let seconds = std::env::var("ALL_KEYS_STRESS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    Duration::from_secs(seconds)
}

const WORKERS: u64 = 8;
const KEYS: u64 = 4;
const WAIT_MS: u64 = 1_500;
const SHORT_WAIT_MS: u64 = 5;
const LONG_TTL_MS: u64 = 10_000;
const SHORT_TTL_MS: u64 = 40;
/// What a request may take beyond its timeout on a busy two-core machine.
const SLACK: Duration = Duration::from_secs(5);

fn key(k: u64) -> String {
    format!("st:{k}")
}

/// One request, as its thread saw it.
#[derive(Debug, Clone)]
struct Request {
    /// The connection's address, as `MONITOR` names it.
    addr: String,
    /// When it was sent: a dying holder's connection is new, and a later one (of any
    /// worker) may get its address again once it closed (loopback reuses ports at once).
    sent: Instant,
    keys: Vec<String>,
    reader: bool,
    /// One fence per key, if granted.
    fences: Option<Vec<i64>>,
    /// The section on every key, if granted.
    section: Option<(Instant, Instant)>,
}

fn address(con: &mut redis::Connection) -> String {
    let info: String = redis::cmd("CLIENT").arg("INFO").query(con).unwrap();
    info.split_whitespace()
        .find_map(|field| field.strip_prefix("addr="))
        .expect("addr= in CLIENT INFO")
        .to_string()
}

/// Sends `LOCK.ACQUIREALL` (or `LOCK.ACQUIRE`, for one key now and then) on `con`:
/// the token and a fence per key, if granted.
fn ask(
    con: &mut redis::Connection,
    keys: &[String],
    ttl_ms: u64,
    extra: &[&str],
    single: bool,
) -> Option<(Vec<u8>, Vec<i64>)> {
    if single && keys.len() == 1 {
        return acquire(con, &keys[0], ttl_ms, extra).map(|(token, fence)| (token, vec![fence]));
    }
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    acquire_all(con, &keys, ttl_ms as i64, extra)
}

/// How a holder lets go.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    Release,
    /// Its connection closes (`SESSION 0`).
    Dies,
    /// Its short TTL runs out.
    Expires,
}

/// Acquires a random set of keys in a random order, holds them briefly and lets go.
fn one_request(
    server: &TestServer,
    con: &mut redis::Connection,
    addr: &str,
    rng: &mut Rng,
) -> Request {
    let mut keys: Vec<String> = (0..KEYS).filter(|_| rng.below(2) == 0).map(key).collect();
    if keys.is_empty() {
        keys.push(key(rng.below(KEYS)));
    }
    if rng.below(2) == 0 {
        keys.reverse(); // crossing orders
    }
    let reader = rng.below(4) == 0;
    // Some give up soon: their leaving must leave every queue as before.
    let wait_ms = if rng.below(4) == 0 {
        SHORT_WAIT_MS
    } else {
        WAIT_MS
    };
    let wait = wait_ms.to_string();
    let mut extra = vec!["WAIT", wait.as_str()];
    if reader {
        extra.push("SHARED");
    }
    let single = rng.below(2) == 0;
    let (end, ttl_ms) = match rng.below(10) {
        0 => (End::Dies, LONG_TTL_MS),
        1 => (End::Expires, SHORT_TTL_MS),
        _ => (End::Release, LONG_TTL_MS),
    };
    let mut own = (end == End::Dies).then(|| server.connection());
    let (con, addr) = match own.as_mut() {
        Some(own) => {
            extra.extend(["SESSION", "0"]);
            let addr = address(own);
            (own, addr)
        }
        None => (con, addr.to_string()),
    };
    let sent = Instant::now();
    let granted = ask(con, &keys, ttl_ms, &extra, single);
    let replied = Instant::now();
    assert!(
        replied - sent < Duration::from_millis(wait_ms) + SLACK,
        "a request took {:?}, its timeout {wait_ms} ms",
        replied - sent
    );
    let expires = sent + Duration::from_millis(ttl_ms);
    let section = granted.as_ref().map(|(token, _)| {
        thread::sleep(Duration::from_micros(300));
        let ended = Instant::now().min(expires);
        if end == End::Release {
            for k in &keys {
                assert_eq!(release(con, k, token), 1, "{k} is still the holder's");
            }
        }
        (replied, ended)
    });
    drop(own); // a dying holder's connection closes after its section
    Request {
        addr,
        sent,
        keys,
        reader,
        fences: granted.map(|(_, fences)| fences),
        section,
    }
}

/// Reads the server's `MONITOR` feed on a thread until the line that echoes `marker`.
fn monitor(port: u16, marker: &'static str) -> thread::JoinHandle<Vec<String>> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("MONITOR connection");
    stream.write_all(b"MONITOR\r\n").unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    thread::spawn(move || {
        let mut lines = Vec::new();
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        while reader.read_line(&mut line).expect("the MONITOR feed") > 0 {
            if line.contains(marker) {
                break;
            }
            lines.push(line.trim_end().to_string());
            line.clear();
        }
        lines
    })
}

/// The acquires in a `MONITOR` feed, in the order the server ran them: (address, keys).
fn arrivals(lines: &[String]) -> Vec<(String, Vec<String>)> {
    let mut found = Vec::new();
    for line in lines {
        let Some(open) = line.find(" [") else {
            continue;
        };
        let Some(close) = line[open..].find("] ") else {
            continue;
        };
        let addr = line[open + 2..open + close]
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_string();
        let words: Vec<&str> = line[open + close + 2..]
            .split('"')
            .skip(1)
            .step_by(2)
            .collect();
        let Some(command) = words.first() else {
            continue;
        };
        let keys: Vec<String> = if command.eq_ignore_ascii_case("LOCK.ACQUIREALL") {
            let n: usize = words[1].parse().expect("numkeys");
            words[2..2 + n].iter().map(|w| w.to_string()).collect()
        } else if command.eq_ignore_ascii_case("LOCK.ACQUIRE") {
            vec![words[1].to_string()]
        } else {
            continue;
        };
        found.push((addr, keys));
    }
    found
}

/// No two sections on a key overlap unless both are readers.
fn assert_no_forbidden_overlap(requests: &[Request]) {
    let mut by_key: HashMap<&str, Vec<(Instant, Instant, bool)>> = HashMap::new();
    for request in requests {
        let Some((start, end)) = request.section else {
            continue;
        };
        if start >= end {
            continue; // its TTL ran out before its reply was read
        }
        for k in &request.keys {
            by_key
                .entry(k)
                .or_default()
                .push((start, end, request.reader));
        }
    }
    for (k, mut sections) in by_key {
        sections.sort_by_key(|s| s.0);
        for (i, a) in sections.iter().enumerate() {
            for b in sections[i + 1..].iter().take_while(|b| b.0 < a.1) {
                assert!(
                    a.2 && b.2,
                    "{k}: a writer's section overlaps another: {a:?} {b:?}"
                );
            }
        }
    }
}

/// On every key, the grants' fences rise in the order the requests arrived.
fn assert_first_come_first_served(requests: &[Request], lines: &[String]) {
    // Per address in the order sent: requests that share an address (a port reused after
    // its connection closed) never overlap in time, so this is the order MONITOR shows.
    let mut in_order: Vec<&Request> = requests.iter().collect();
    in_order.sort_by_key(|request| request.sent);
    let mut by_addr: HashMap<&str, std::collections::VecDeque<&Request>> = HashMap::new();
    for request in in_order {
        by_addr.entry(&request.addr).or_default().push_back(request);
    }
    let mut last: HashMap<String, i64> = HashMap::new();
    let mut matched = 0;
    for (addr, keys) in arrivals(lines) {
        let Some(request) = by_addr.get_mut(addr.as_str()).and_then(|q| q.pop_front()) else {
            continue;
        };
        assert_eq!(request.keys, keys, "MONITOR and {addr} disagree");
        matched += 1;
        let Some(fences) = &request.fences else {
            continue;
        };
        for (k, fence) in keys.iter().zip(fences) {
            let before = last.insert(k.clone(), *fence).unwrap_or(0);
            assert!(
                *fence > before,
                "{k}: fence {fence} granted after {before}, to a later request"
            );
        }
    }
    assert_eq!(
        matched,
        requests.len(),
        "every request is in the MONITOR feed"
    );
}

#[test]
fn crossing_requests_for_several_keys_never_deadlock_overlap_or_pass_one_another() {
    const MARKER: &str = "end-of-the-stress-run";
    let server = TestServer::start();
    let feed = monitor(server.port, MARKER);
    let mut con = server.connection();
    poll_until(Duration::from_secs(10), "the monitor to attach", || {
        server_info(&mut con, "clients").contains("blocked_clients:") && {
            let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut con).unwrap();
            list.contains("cmd=monitor")
        }
    });
    let deadline = Instant::now() + duration();
    let requests: Vec<Request> = thread::scope(|scope| {
        let workers: Vec<_> = (0..WORKERS)
            .map(|w| {
                let server = &server;
                scope.spawn(move || {
                    let mut con = server.connection();
                    let addr = address(&mut con);
                    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (w + 1));
                    let mut mine = Vec::new();
                    while Instant::now() < deadline {
                        mine.push(one_request(server, &mut con, &addr, &mut rng));
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|worker| worker.join().expect("a worker"))
            .collect()
    });
    let _: String = redis::cmd("ECHO").arg(MARKER).query(&mut con).unwrap();
    let lines = feed.join().expect("the MONITOR reader");

    let granted = requests.iter().filter(|r| r.fences.is_some()).count();
    let several = requests
        .iter()
        .filter(|r| r.fences.is_some() && r.keys.len() > 1)
        .count();
    eprintln!(
        "all-keys stress: {} requests, {granted} granted ({several} of several keys), {} nil",
        requests.len(),
        requests.len() - granted
    );
    assert!(
        several > 20,
        "too few grants of several keys to tell: {several}"
    );
    assert_no_forbidden_overlap(&requests);
    assert_first_come_first_served(&requests, &lines);
    poll_until(Duration::from_secs(10), "no waiter left", || {
        lock_waiters(&mut con) == 0
    });
}
