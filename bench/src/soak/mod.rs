//! `make soak`: one server holds a million locks whose deadlines are spread over a
//! minute while ten thousand clients wait on a hundred keys; it must not crash, every lock
//! must expire, every waiter be answered, memory (`used_memory` and RSS) come back within
//! 1% of where it started, and no expiry pause be more than 10 ms longer than the same
//! number of plain string keys (`SET PX`, on a bare server of the same binary) show, side
//! by side in the same run. Progress is printed while it runs; `report.md`, the samples
//! (`samples.csv`) and, with gnuplot, `soak.png` are written at the end.

pub mod monitor;
pub mod report;
pub mod waiters;

use std::io;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use crate::info;
use crate::resp::{Conn, Reply};
use crate::scenarios::bulk;
use crate::server::{Launch, Server};
use monitor::{Monitor, Sample};
use waiters::Answers;

/// Commands per pipelined batch while loading.
const BATCH: usize = 1000;
/// Time between the first lock's grant and its deadline.
const LEAD: Duration = Duration::from_secs(2);
/// The margin the targets allow.
pub const MEMORY_MARGIN: f64 = 0.01;
pub const PAUSE_MARGIN_MS: f64 = 10.0;

/// How big the soak is.
#[derive(Debug, Clone)]
pub struct Config {
    pub module: PathBuf,
    pub out_dir: PathBuf,
    pub locks: usize,
    /// The deadlines are spread over this window.
    pub window: Duration,
    pub waiter_keys: usize,
    pub waiters_per_key: usize,
    /// How long memory may take to come back once everything is gone.
    pub memory_limit: Duration,
    /// Tiny sizes, targets on memory not judged (`make test` runs it).
    pub smoke: bool,
}

impl Config {
    /// The soak the issue asks for.
    pub fn full(module: PathBuf, out_dir: PathBuf) -> Self {
        Config {
            module,
            out_dir,
            locks: 1_000_000,
            window: Duration::from_secs(60),
            waiter_keys: 100,
            waiters_per_key: 100,
            memory_limit: Duration::from_secs(120),
            smoke: false,
        }
    }

    /// Seconds, for the test suite.
    pub fn smoke(module: PathBuf, out_dir: PathBuf) -> Self {
        Config {
            locks: 20_000,
            window: Duration::from_secs(2),
            waiter_keys: 10,
            waiters_per_key: 20,
            memory_limit: Duration::from_secs(3),
            smoke: true,
            ..Config::full(module, out_dir)
        }
    }
}

/// What is soaked: locks on the module, or plain string keys on a bare server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Locks,
    Strings,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Locks => "locks",
            Kind::Strings => "strings",
        }
    }
}

/// `used_memory` and RSS, in bytes, and what of `used_memory` the module holds itself
/// (`INFO lock` `lock_allocated_bytes`; 0 on a server without the module).
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    pub used: f64,
    pub rss: f64,
    pub module: f64,
}

/// What one side's run found.
#[derive(Debug, Clone)]
pub struct SideRun {
    pub kind: Kind,
    pub samples: Vec<Sample>,
    pub start: Memory,
    pub end: Memory,
    /// Seconds after everything was gone until memory was back within the margin;
    /// `None` if it was not back within `Config::memory_limit`.
    pub memory_back_after_s: Option<f64>,
    /// Keys the server counted as expired (`lock_expired`, or `expired_keys`).
    pub expired: i64,
    /// Seconds from the last deadline until no key was left.
    pub reaped_after_s: f64,
    /// The longest `expire-cycle` event of the latency monitor, in ms.
    pub expire_cycle_max_ms: f64,
    /// The longest `PING` round trip once everything was loaded, in ms.
    pub probe_max_ms: f64,
    pub waiters: usize,
    pub answers: Answers,
}

impl SideRun {
    pub fn peak(&self) -> Memory {
        self.samples.iter().fold(self.start, |m, s| Memory {
            used: m.used.max(s.used_memory),
            rss: m.rss.max(s.rss),
            module: m.module,
        })
    }
}

fn memory(admin: &mut Conn) -> io::Result<Memory> {
    let memory = info::info(admin, "memory")?;
    let number = |name: &str| -> io::Result<f64> {
        memory
            .get(name)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| io::Error::other(format!("INFO memory has no {name}")))
    };
    let module = info::info(admin, "lock")?
        .get("lock_allocated_bytes")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    Ok(Memory {
        used: number("used_memory")?,
        rss: number("used_memory_rss")?,
        module,
    })
}

/// Asks the allocator to return its free pages (`MEMORY PURGE`), then reads memory.
fn purged_memory(admin: &mut Conn) -> io::Result<Memory> {
    // Not every allocator knows it; what it frees is only what is already free.
    let _ = admin.cmd(&["MEMORY", "PURGE"]);
    memory(admin)
}

/// Loads `count` keys (locks, or `SET PX` strings with the same 32-byte tokens) whose
/// deadlines are spread evenly from `LEAD` after the start over `window`; returns the
/// last deadline.
fn load(conn: &mut Conn, kind: Kind, count: usize, window: Duration) -> io::Result<Instant> {
    let start = Instant::now();
    let deadline = |i: usize| start + LEAD + window.mul_f64(i as f64 / count.max(1) as f64);
    for first in (0..count).step_by(BATCH) {
        let range = first..(first + BATCH).min(count);
        let now = Instant::now();
        for i in range.clone() {
            let ttl = deadline(i)
                .saturating_duration_since(now)
                .as_millis()
                .max(1);
            let (key, token, ttl) = (bulk::key(i), bulk::token(7, i), ttl.to_string());
            match kind {
                Kind::Locks => {
                    conn.queue(&[b"LOCK.ACQUIRE", &key, ttl.as_bytes(), b"TOKEN", &token])
                }
                Kind::Strings => conn.queue(&[b"SET", &key, &token, b"PX", ttl.as_bytes()]),
            }
        }
        conn.flush()?;
        for i in range {
            match conn.read()? {
                Reply::Array(_) | Reply::Status(_) => {}
                other => {
                    return Err(io::Error::other(format!(
                        "key {i} was not written: {other:?}"
                    )));
                }
            }
        }
    }
    Ok(deadline(count))
}

/// Polls `DBSIZE` until no key is left; fails after `limit` past `last_deadline`.
fn wait_reaped(admin: &mut Conn, last_deadline: Instant, limit: Duration) -> io::Result<f64> {
    loop {
        let keys = admin.cmd(&["DBSIZE"])?.int()?;
        let now = Instant::now();
        if keys == 0 {
            return Ok(now.saturating_duration_since(last_deadline).as_secs_f64());
        }
        if now > last_deadline + limit {
            return Err(io::Error::other(format!(
                "{keys} keys still there {limit:?} after the last deadline"
            )));
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Polls memory until it is back within the margin of `start`, for at most `limit`.
fn wait_memory_back(
    admin: &mut Conn,
    start: Memory,
    limit: Duration,
) -> io::Result<(Memory, Option<f64>)> {
    let began = Instant::now();
    loop {
        let now = purged_memory(admin)?;
        let within = |now: f64, then: f64| now <= then * (1.0 + MEMORY_MARGIN);
        if within(now.used, start.used) && within(now.rss, start.rss) {
            return Ok((now, Some(began.elapsed().as_secs_f64())));
        }
        if began.elapsed() > limit {
            return Ok((now, None));
        }
        thread::sleep(Duration::from_millis(500));
    }
}

/// The `max` of the latency monitor's `expire-cycle` event (0 if none passed 1 ms).
fn expire_cycle_max(admin: &mut Conn) -> io::Result<f64> {
    let Reply::Array(events) = admin.cmd(&["LATENCY", "LATEST"])? else {
        return Ok(0.0);
    };
    Ok(events
        .iter()
        .filter_map(|event| match event {
            Reply::Array(fields) => match (fields.first(), fields.get(3)) {
                (Some(Reply::Bulk(name)), Some(Reply::Int(max))) if name == b"expire-cycle" => {
                    Some(*max as f64)
                }
                _ => None,
            },
            _ => None,
        })
        .fold(0.0, f64::max))
}

/// One side: a fresh server, the load (and for locks the crowd of waiters), until every
/// key has expired, every waiter is answered and memory is back.
pub fn run_side(cfg: &Config, kind: Kind) -> io::Result<SideRun> {
    let started = Instant::now();
    let launch = Launch {
        module: (kind == Kind::Locks).then_some(cfg.module.as_path()),
        extra: &["--maxclients", "15000", "--latency-monitor-threshold", "1"],
        callgrind: false,
    };
    let server = Server::start(&launch)?;
    let mut admin = server.conn()?;
    let monitor = Monitor::start(server.port, kind.label(), started)?;
    // With the admin's, sampler's and probe's connections open, as at the end.
    let start = purged_memory(&mut admin)?;
    let crowd = match kind {
        Kind::Locks => Some(waiters::gather(
            &mut admin,
            server.port,
            cfg.waiter_keys,
            cfg.waiters_per_key,
        )?),
        Kind::Strings => None,
    };
    eprintln!("soak: {} loading {} keys", kind.label(), cfg.locks);
    let last_deadline = load(&mut server.conn()?, kind, cfg.locks, cfg.window)?;
    // Pauses are compared from here on, while the keys expire (loading a million keys
    // in batches of a thousand, and ten thousand connections, pause the server too).
    let loaded_at = started.elapsed().as_secs_f64();
    let mut answers = Answers::default();
    let mut waiters = 0;
    if let Some(crowd) = crowd {
        waiters = crowd.len();
        // The ones that give up are answered while the keys are still held.
        let deadline = Instant::now() + Duration::from_secs(60);
        while (info::number(&mut admin, "lock", "lock_waiters")? as usize) != crowd.staying() {
            if Instant::now() > deadline {
                return Err(io::Error::other(
                    "the waiters that give up were not answered",
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
        crowd.release_holders(&mut admin)?;
        answers = crowd.answers(Duration::from_secs(120))?;
    }
    eprintln!("soak: {} waiting for every key to expire", kind.label());
    let reaped_after_s = wait_reaped(&mut admin, last_deadline, Duration::from_secs(120))?;
    let expired = match kind {
        Kind::Locks => info::number(&mut admin, "lock", "lock_expired")? as i64,
        Kind::Strings => info::number(&mut admin, "stats", "expired_keys")? as i64,
    };
    eprintln!("soak: {} waiting for memory to come back", kind.label());
    let (end, memory_back_after_s) = wait_memory_back(&mut admin, start, cfg.memory_limit)?;
    let expire_cycle_max_ms = expire_cycle_max(&mut admin)?;
    let samples = monitor.finish()?;
    admin.cmd(&["PING"])?;
    Ok(SideRun {
        kind,
        probe_max_ms: samples
            .iter()
            .filter(|s| s.t > loaded_at + 0.25)
            .map(|s| s.probe_max_ms)
            .fold(0.0, f64::max),
        samples,
        start,
        end,
        memory_back_after_s,
        expired,
        reaped_after_s,
        expire_cycle_max_ms,
        waiters,
        answers,
    })
}
