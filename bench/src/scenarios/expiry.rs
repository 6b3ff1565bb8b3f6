//! Scenario 7 (with 6's bytes per lock, measured on the same load): `count` locks whose
//! deadlines are spread evenly over one second. While they expire, a probe sends `PING`
//! every millisecond and the server's latency monitor (`latency-monitor-threshold 1`)
//! records any event over 1 ms (`expire-cycle` is the expiry's own); afterwards
//! `DBSIZE` is polled until every lock is gone.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::info;
use crate::resp::{Conn, Reply};
use crate::results::{Better, Metric, Target};
use crate::scenarios::{bulk, memory};
use crate::server::{Launch, Server};
use crate::sides::Side;

/// The window the deadlines are spread over.
const WINDOW: Duration = Duration::from_secs(1);
/// How long after the last deadline the server may take to reap everything.
const REAP_LIMIT: Duration = Duration::from_secs(120);

/// What one expiry run found.
struct Expiry {
    monitor_max_ms: f64,
    probe_max_ms: f64,
    reaped_after_ms: f64,
}

/// A thread that sends `PING` every millisecond and keeps each round trip.
pub struct Probe {
    stop: Arc<AtomicBool>,
    thread: thread::JoinHandle<io::Result<Vec<(Instant, f64)>>>,
}

impl Probe {
    pub fn start(port: u16) -> Probe {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = thread::spawn(move || {
            let mut conn = Conn::connect(port)?;
            let mut rtts = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                let sent = Instant::now();
                conn.call(&[b"PING"])?.ok()?;
                rtts.push((sent, sent.elapsed().as_secs_f64() * 1e3));
                thread::sleep(Duration::from_millis(1));
            }
            Ok(rtts)
        });
        Probe { stop, thread }
    }

    /// Stops it: the longest round trip (ms) of the `PING`s sent from `from` to `to`.
    pub fn longest(self, from: Instant, to: Instant) -> io::Result<f64> {
        self.stop.store(true, Ordering::Relaxed);
        let rtts = self
            .thread
            .join()
            .map_err(|_| io::Error::other("probe panicked"))??;
        Ok(rtts
            .iter()
            .filter(|(sent, _)| *sent >= from && *sent <= to)
            .map(|(_, rtt)| *rtt)
            .fold(0.0, f64::max))
    }
}

/// Polls `DBSIZE` every `every` until it is 0: when it was. Fails after `limit`.
pub fn until_empty(admin: &mut Conn, every: Duration, limit: Instant) -> io::Result<Instant> {
    loop {
        let keys = admin.cmd(&["DBSIZE"])?.int()?;
        let now = Instant::now();
        if keys == 0 {
            return Ok(now);
        }
        if now > limit {
            return Err(io::Error::other(format!("{keys} locks still there")));
        }
        thread::sleep(every);
    }
}

/// The largest `max` of `LATENCY LATEST` (ms), 0 when no event passed the threshold.
fn latency_monitor_max(admin: &mut Conn) -> io::Result<f64> {
    let Reply::Array(events) = admin.cmd(&["LATENCY", "LATEST"])? else {
        return Ok(0.0);
    };
    let mut max = 0.0f64;
    for event in events {
        if let Reply::Array(fields) = event
            && let Some(Reply::Int(ms)) = fields.get(3)
        {
            max = max.max(*ms as f64);
        }
    }
    Ok(max)
}

fn watch_expiry(
    server: &Server,
    admin: &mut Conn,
    side: Side,
    count: usize,
    first: Instant,
) -> io::Result<Expiry> {
    let last = first + WINDOW;
    admin.cmd(&["CONFIG", "SET", "latency-monitor-threshold", "1"])?;
    admin.cmd(&["LATENCY", "RESET"])?;
    let probe = Probe::start(server.port);
    thread::sleep(first.saturating_duration_since(Instant::now()));
    let reaped = until_empty(admin, Duration::from_millis(2), last + REAP_LIMIT)?;
    thread::sleep(Duration::from_millis(100));
    let probe_max_ms = probe.longest(first - Duration::from_millis(200), reaped)?;
    // The module counts the expiry of each of its locks.
    let expired = info::number(admin, "lock", "lock_expired")?;
    if side == Side::Module && expired < count as f64 {
        return Err(io::Error::other(format!(
            "lock_expired is {expired}, not {count}"
        )));
    }
    Ok(Expiry {
        monitor_max_ms: latency_monitor_max(admin)?,
        probe_max_ms,
        reaped_after_ms: reaped.saturating_duration_since(last).as_secs_f64() * 1e3,
    })
}

/// Runs scenario 6's bytes per lock and, if `cfg` asks for it, scenario 7.
pub fn run(cfg: &Config) -> io::Result<Vec<Metric>> {
    let n = cfg.locks;
    let mut bytes = Metric::new(
        "6. memory",
        &format!("bytes per held lock, 32-char token, {n} locks"),
        "B",
        "string key (SET PX)",
        Better::Lower,
    )
    .target(Target::RatioAtMost(1.1));
    let mut monitor = Metric::new(
        "7. expiry",
        &format!("server latency max while {n} locks expire in 1 s (LATENCY monitor)"),
        "ms",
        "string keys",
        Better::Lower,
    )
    .target(Target::ModuleAtMost(10.0));
    let mut probe = Metric::new(
        "7. expiry",
        "PING round trip max during the expiry (probe every 1 ms)",
        "ms",
        "string keys",
        Better::Lower,
    );
    let mut reaped = Metric::new(
        "7. expiry",
        "all expired: time from the last deadline until DBSIZE is 0",
        "ms",
        "string keys",
        Better::Lower,
    );
    for round in 0..cfg.slow_rounds {
        for side in Side::alternating(round) {
            let server = Server::start(&Launch {
                module: Some(&cfg.module),
                extra: &[],
                callgrind: false,
            })?;
            let mut admin = server.conn()?;
            let mut conn = server.conn()?;
            let salt = round as u64 + 1;
            let (per_lock, took) = memory::bytes_per_lock(&mut admin, &mut conn, side, salt, n)?;
            bytes.push(side, per_lock, None);
            if !cfg.runs("expiry") {
                continue;
            }
            // Setting the deadlines takes about as long as loading did: leave room.
            let first = Instant::now() + took.mul_f64(2.0) + Duration::from_millis(500);
            let spacing = WINDOW.as_secs_f64() / n as f64;
            bulk::set_deadlines(&mut conn, side, salt, n, |i| {
                first + Duration::from_secs_f64(i as f64 * spacing)
            })?;
            let run = watch_expiry(&server, &mut admin, side, n, first)?;
            monitor.push(side, run.monitor_max_ms, None);
            probe.push(side, run.probe_max_ms, None);
            reaped.push(side, run.reaped_after_ms, None);
        }
    }
    let mut out = vec![bytes];
    if cfg.runs("expiry") {
        out.extend([monitor, probe, reaped]);
    }
    Ok(out)
}
