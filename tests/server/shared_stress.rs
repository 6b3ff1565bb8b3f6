//! Shared holders under stress (docs/shared.md): many threads
//! over real connections take a read/write lock and a semaphore of limit 3 in every way
//! the contract allows (waiting or not, short TTLs that run out while held, waiters that
//! time out or disconnect, `DEL` of the key), and every critical section is recorded.
//! No two sections may overlap in a way the mode forbids: a writer with anyone, or more
//! than three holders of the semaphore.
//!
//! A section is recorded from the moment the grant's reply arrived to the earliest of:
//! sending the release, the command's send time plus its TTL (the server granted it no
//! earlier, so it expires no earlier), and the send time of a `DEL` of its key that the
//! server may have run after the grant: one whose reply came after the acquire was sent
//! (two connections' commands may reach the server in either order, so a `DEL` sent just
//! before the acquire may run just after it); nothing of it counts if that `DEL` went
//! before the reply came.
//! Each of these lies within the server's own holding, so an overlap seen here is one the
//! server allowed.

use std::io::Write;
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;

/// How long the threads run (`SHARED_STRESS_SECONDS` to change it).
fn duration() -> Duration {
    let seconds = std::env::var("SHARED_STRESS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    Duration::from_secs(seconds)
}

const LIMIT: usize = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Read,
    Write,
    Permit,
}

#[derive(Debug, Clone, Copy)]
struct Section {
    key: &'static str,
    mode: Mode,
    /// When the acquire was sent: the grant came after it.
    sent: Instant,
    start: Instant,
    end: Instant,
}

#[derive(Default)]
struct Record {
    sections: Vec<Section>,
    /// `DEL` of a key: when it was sent, and when its reply came.
    deletes: Vec<(&'static str, Instant, Instant)>,
    timeouts: usize,
}

fn worker(server: &TestServer, record: &Mutex<Record>, seed: u64, until: Instant) {
    let mut con = server.connection();
    let mut rng = Rng(seed);
    let mut n = 0u64;
    while Instant::now() < until {
        n += 1;
        let (key, mode) = match rng.below(4) {
            0 => ("rw", Mode::Write),
            1 | 2 => ("rw", Mode::Read),
            _ => ("sem", Mode::Permit),
        };
        let ttl = 20 + rng.below(200);
        let token = format!("w{seed}-{n}");
        let mut cmd = redis::cmd("LOCK.ACQUIRE");
        cmd.arg(key).arg(ttl).arg("TOKEN").arg(&token);
        match mode {
            Mode::Read => {
                cmd.arg("SHARED");
            }
            Mode::Permit => {
                cmd.arg("LIMIT").arg(LIMIT);
            }
            Mode::Write => {}
        }
        if rng.below(4) != 0 {
            cmd.arg("WAIT").arg(rng.below(150));
        }
        let sent = Instant::now();
        let granted: Option<(Vec<u8>, i64)> = cmd.query(&mut con).expect("LOCK.ACQUIRE");
        let Some(_) = granted else {
            record.lock().unwrap().timeouts += 1;
            continue;
        };
        let start = Instant::now();
        // Mostly well inside the TTL; sometimes past it, so that it expires while held.
        let hold = if rng.below(10) == 0 {
            ttl + 10
        } else {
            rng.below(ttl / 2 + 1)
        };
        thread::sleep(Duration::from_millis(hold));
        let end = Instant::now().min(sent + Duration::from_millis(ttl));
        let _: i64 = redis::cmd("LOCK.RELEASE")
            .arg(key)
            .arg(&token)
            .query(&mut con)
            .expect("LOCK.RELEASE");
        record.lock().unwrap().sections.push(Section {
            key,
            mode,
            sent,
            start,
            end,
        });
    }
}

/// Deletes the keys now and then, and sends waits that disconnect before an answer.
fn troublemaker(server: &TestServer, record: &Mutex<Record>, until: Instant) {
    let mut con = server.connection();
    let mut rng = Rng(99);
    while Instant::now() < until {
        thread::sleep(Duration::from_millis(20 + rng.below(60)));
        if rng.below(3) == 0 {
            let key = if rng.below(2) == 0 { "rw" } else { "sem" };
            let sent = Instant::now();
            let _: i64 = redis::cmd("DEL").arg(key).query(&mut con).expect("DEL");
            let done = Instant::now();
            record.lock().unwrap().deletes.push((key, sent, done));
        } else {
            let mut stream = raw_connection(server.port);
            let args: &[&[u8]] = if rng.below(2) == 0 {
                &[b"LOCK.ACQUIRE", b"rw", b"1000", b"WAIT", b"0"]
            } else {
                &[
                    b"LOCK.ACQUIRE",
                    b"sem",
                    b"1000",
                    b"LIMIT",
                    b"3",
                    b"WAIT",
                    b"0",
                ]
            };
            stream.write_all(&resp(args)).expect("send");
            thread::sleep(Duration::from_millis(rng.below(10)));
            drop(stream);
        }
    }
}

/// The section cut short by the first `DEL` of its key that may have run after its grant
/// (answered after the acquire was sent): a `DEL` sent before the grant's reply arrived
/// may have removed the holding already, which leaves nothing of the section to trust.
fn cut(section: Section, deletes: &[(&'static str, Instant, Instant)]) -> Section {
    let end = deletes
        .iter()
        .filter(|(key, at, done)| *key == section.key && *done >= section.sent && *at < section.end)
        .map(|(_, at, _)| (*at).max(section.start))
        .min()
        .unwrap_or(section.end);
    Section { end, ..section }
}

/// The most sections of `key` running at once, and whether a writer ever ran beside
/// anyone.
fn overlaps(sections: &[Section], key: &str) -> (usize, bool) {
    let mut events: Vec<(Instant, i32, Mode)> = Vec::new();
    for s in sections.iter().filter(|s| s.key == key && s.start < s.end) {
        events.push((s.start, 1, s.mode));
        events.push((s.end, -1, s.mode));
    }
    // Ends before starts at the same instant: touching sections do not overlap.
    events.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut running, mut writers, mut most, mut writer_shared) = (0i32, 0i32, 0i32, false);
    for (_, step, mode) in events {
        running += step;
        if mode == Mode::Write {
            writers += step;
        }
        most = most.max(running);
        if writers > 0 && running > 1 {
            writer_shared = true;
        }
    }
    (most as usize, writer_shared)
}

#[test]
fn no_section_ever_overlaps_another_in_a_way_its_mode_forbids() {
    let server = TestServer::start();
    let record = Mutex::new(Record::default());
    let until = Instant::now() + duration();
    thread::scope(|scope| {
        for seed in 1..=8 {
            let record = &record;
            let server = &server;
            scope.spawn(move || worker(server, record, seed, until));
        }
        scope.spawn(|| troublemaker(&server, &record, until));
    });
    let record = record.lock().unwrap();
    let sections: Vec<Section> = record
        .sections
        .iter()
        .map(|s| cut(*s, &record.deletes))
        .collect();
    let count = |mode| sections.iter().filter(|s| s.mode == mode).count();
    assert!(
        count(Mode::Read) > 20 && count(Mode::Write) > 10 && count(Mode::Permit) > 10,
        "too little happened: {} reads, {} writes, {} permits",
        count(Mode::Read),
        count(Mode::Write),
        count(Mode::Permit)
    );
    let (_, writer_shared) = overlaps(&sections, "rw");
    assert!(!writer_shared, "a writer ran beside another holder");
    let (most, _) = overlaps(&sections, "sem");
    assert!(
        most <= LIMIT,
        "{most} semaphore holders at once, limit {LIMIT}"
    );
    let (readers, _) = overlaps(
        &sections
            .iter()
            .copied()
            .filter(|s| s.mode == Mode::Read)
            .collect::<Vec<_>>(),
        "rw",
    );
    assert!(readers > 1, "readers never ran together");
    assert!(record.timeouts > 0, "no wait ever timed out");
    // The server is sound, and every waiter was answered.
    let mut con = server.connection();
    poll_until(Duration::from_secs(5), "every waiter answered", || {
        lock_waiters(&mut con) == 0
    });
}
