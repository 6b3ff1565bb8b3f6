//! Scenario 5: N clients compete for one key, each holding it for a short fixed critical
//! section, in a loop. The module's clients block in `LOCK.ACQUIRE ... WAIT`; the
//! recipe's poll `SET NX PX`, sleeping a fixed interval after each refusal. The best
//! non-polling recipe users run today, python-redis-lock's, is a third side in
//! `recipes`: `SET NX`, and on refusal `BLPOP` of a signal list that its unlock script
//! pushes to.
//!
//! Every client is a thread with its own connection (threads, not an async runtime:
//! the critical section and the polling sleeps need sub-millisecond sleeps, which
//! `nanosleep` gives and a runtime's millisecond timer wheel does not). All clients
//! stamp their grant and release times on one monotonic clock (`Instant` since a common
//! epoch), so the handoff latency (previous holder's release to next holder's grant) is
//! measured across threads, and a grant stamped before the previous release would show
//! a broken mutual exclusion (`overlaps`, always 0).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::cpu::{CpuUse, Meter};
use crate::info;
use crate::resp::Conn;
use crate::results::{Better, Metric, Target};
use crate::server::Server;
use crate::sides::{self, Side};
use crate::stats::{median, percentile};

/// TTL of the contended lock: never reached, every holder releases.
const TTL: &[u8] = b"10000";
/// How long a module client waits before its `WAIT` gives up (never reached).
const WAIT_MS: &[u8] = b"60000";
/// Stack of each client thread: they need little, and there may be 512 of them.
const STACK: usize = 256 * 1024;
/// python-redis-lock's unlock script (version 4): the lock goes, and one signal is
/// pushed to the waiters' list, which expires `ARGV[2]` ms later.
const SIGNAL_UNLOCK: &str = "if redis.call(\"get\", KEYS[1]) ~= ARGV[1] then return 1 else redis.call(\"del\", KEYS[2]) redis.call(\"lpush\", KEYS[2], 1) redis.call(\"pexpire\", KEYS[2], ARGV[2]) redis.call(\"del\", KEYS[1]) return 0 end";
/// python-redis-lock's default signal expiry.
const SIGNAL_EXPIRE_MS: &[u8] = b"1000";

/// How a client waits for the lock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Waiting {
    /// The module's `WAIT`: blocked in the server's first-come-first-served queue.
    Block,
    /// The recipe: `SET NX PX`, and on refusal sleep this long and try again.
    Poll(Duration),
    /// python-redis-lock: `SET NX PX`, and on refusal `BLPOP` of the lock's signal list
    /// (one second at most) and try again; its unlock script deletes the lock and pushes
    /// one signal.
    Signal,
}

impl Waiting {
    /// The label in tables.
    pub fn label(self) -> String {
        match self {
            Waiting::Block => "module WAIT".into(),
            Waiting::Poll(d) => format!("poll {} ms", d.as_millis()),
            Waiting::Signal => "python-redis-lock (SET NX, BLPOP signal)".into(),
        }
    }

    fn side(self) -> Side {
        match self {
            Waiting::Block => Side::Module,
            Waiting::Poll(_) | Waiting::Signal => Side::Recipe,
        }
    }
}

/// What one run of one point found.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Critical sections completed per second (grants in the measured window).
    pub sections_per_s: f64,
    /// Handoff latency, release to next grant, in microseconds.
    pub handoff_p50_us: f64,
    pub handoff_p99_us: f64,
    pub handoff_max_us: f64,
    /// Commands sent to the server per critical section.
    pub commands_per_section: f64,
    /// Most grants of one client / fewest; infinite when a client got none.
    pub spread: f64,
    /// Fewest grants of one client / most (0 when a client got none).
    pub fairness: f64,
    /// Time from wanting the lock to holding it, 99th percentile, in microseconds.
    pub wait_p99_us: f64,
    /// Clients that got no grant in the window.
    pub starved: usize,
    /// Median time a holder actually held the lock (the critical section's sleep).
    pub hold_us: f64,
    /// Grants stamped before the previous holder's release: must be 0.
    pub overlaps: usize,
    /// Module waits that timed out (never expected).
    pub wait_timeouts: u64,
    /// CPU use over the window.
    pub cpu: CpuUse,
}

/// All runs of one (waiting, clients) point.
#[derive(Debug, Clone)]
pub struct Point {
    pub waiting: Waiting,
    pub clients: usize,
    pub samples: Vec<Sample>,
}

impl Point {
    /// The median over rounds of one field.
    pub fn median(&self, field: impl Fn(&Sample) -> f64) -> f64 {
        median(&self.samples.iter().map(field).collect::<Vec<_>>())
    }
}

/// One client's record.
#[derive(Default)]
struct ClientLog {
    /// (grant, release) times in ns since the common epoch.
    holds: Vec<(u64, u64)>,
    /// (grant, how long it was wanted) in ns: the wait before each grant.
    waits: Vec<(u64, u64)>,
    sent: u64,
    wait_timeouts: u64,
}

struct Shared {
    key: Vec<u8>,
    sha: Vec<u8>,
    /// python-redis-lock's signal list and unlock script.
    signal: Vec<u8>,
    signal_sha: Vec<u8>,
    waiting: Waiting,
    critical_section: Duration,
    epoch: Instant,
    stop: AtomicBool,
    start: Barrier,
}

impl Shared {
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
}

/// Waits until this client holds the lock; `false` if the run stopped first.
fn acquire(
    conn: &mut Conn,
    shared: &Shared,
    token: &[u8],
    log: &mut ClientLog,
) -> io::Result<bool> {
    let key = shared.key.as_slice();
    loop {
        match shared.waiting {
            Waiting::Block => {
                conn.queue(&[b"LOCK.ACQUIRE", key, TTL, b"TOKEN", token, b"WAIT", WAIT_MS]);
                conn.flush()?;
                if sides::granted(conn.read()?, Some(token))?.is_some() {
                    return Ok(true);
                }
                log.wait_timeouts += 1;
            }
            Waiting::Poll(interval) => {
                sides::queue_acquire(conn, Side::Recipe, key, TTL, Some(token));
                conn.flush()?;
                if sides::granted(conn.read()?, Some(token))?.is_some() {
                    return Ok(true);
                }
                thread::sleep(interval);
            }
            Waiting::Signal => {
                sides::queue_acquire(conn, Side::Recipe, key, TTL, Some(token));
                conn.flush()?;
                if sides::granted(conn.read()?, Some(token))?.is_some() {
                    return Ok(true);
                }
                conn.queue(&[b"BLPOP", &shared.signal, b"1"]);
                conn.flush()?;
                conn.read()?.ok()?;
            }
        }
        if shared.stop.load(Ordering::Relaxed) {
            return Ok(false);
        }
    }
}

fn client(mut conn: Conn, shared: &Shared) -> io::Result<ClientLog> {
    let token = sides::token();
    let mut log = ClientLog::default();
    shared.start.wait();
    // A module client blocked when the run stops is still granted in turn (the others
    // release on their way out), holds, releases and leaves: the queue drains.
    while !shared.stop.load(Ordering::Relaxed) {
        let wanted = shared.now();
        if !acquire(&mut conn, shared, &token, &mut log)? {
            break;
        }
        let granted = shared.now();
        if !shared.critical_section.is_zero() {
            thread::sleep(shared.critical_section);
        }
        let releasing = shared.now();
        release(&mut conn, shared, &token)?;
        log.holds.push((granted, releasing));
        log.waits.push((granted, granted - wanted));
    }
    log.sent = conn.sent;
    Ok(log)
}

/// Releases the lock `token` holds, as the client's side does.
fn release(conn: &mut Conn, shared: &Shared, token: &[u8]) -> io::Result<()> {
    let released = match shared.waiting {
        Waiting::Signal => {
            // python-redis-lock's unlock: 0 when released, 1 when not held.
            conn.queue(&[
                b"EVALSHA",
                &shared.signal_sha,
                b"2",
                &shared.key,
                &shared.signal,
                token,
                SIGNAL_EXPIRE_MS,
            ]);
            conn.flush()?;
            conn.read()?.ok()?.int()? == 0
        }
        waiting => {
            sides::queue_release(conn, waiting.side(), &shared.sha, &shared.key, token);
            conn.flush()?;
            sides::released(conn.read()?)?
        }
    };
    if released {
        Ok(())
    } else {
        Err(io::Error::other("a holder found its lock gone at release"))
    }
}

/// Turns the clients' records into a sample for the window `[from, to]` (ns).
fn analyse(logs: &[ClientLog], from: u64, to: u64, cpu: CpuUse) -> Sample {
    let mut holds: Vec<(u64, u64)> = logs.iter().flat_map(|l| l.holds.iter().copied()).collect();
    holds.sort_unstable();
    let mut handoffs = Vec::new();
    let mut overlaps = 0;
    for pair in holds.windows(2) {
        let ((prev_grant, prev_release), (grant, _)) = (pair[0], pair[1]);
        if prev_grant < from || grant > to {
            continue;
        }
        if grant < prev_release {
            overlaps += 1;
        } else {
            handoffs.push(grant - prev_release);
        }
    }
    handoffs.sort_unstable();
    let mut waits: Vec<u64> = logs
        .iter()
        .flat_map(|l| l.waits.iter())
        .filter(|(granted, _)| (from..=to).contains(granted))
        .map(|(_, wait)| *wait)
        .collect();
    waits.sort_unstable();
    let in_window = |l: &ClientLog| {
        l.holds
            .iter()
            .filter(|(g, _)| (from..=to).contains(g))
            .count()
    };
    let per_client: Vec<usize> = logs.iter().map(in_window).collect();
    let grants: usize = per_client.iter().sum();
    let most = per_client.iter().copied().max().unwrap_or(0);
    let fewest = per_client.iter().copied().min().unwrap_or(0);
    let all_holds: usize = logs.iter().map(|l| l.holds.len()).sum();
    let sent: u64 = logs.iter().map(|l| l.sent).sum();
    let hold_ns: Vec<f64> = holds.iter().map(|(g, r)| (r - g) as f64).collect();
    Sample {
        sections_per_s: grants as f64 / ((to - from) as f64 / 1e9),
        handoff_p50_us: percentile(&handoffs, 50.0) / 1e3,
        handoff_p99_us: percentile(&handoffs, 99.0) / 1e3,
        handoff_max_us: percentile(&handoffs, 100.0) / 1e3,
        commands_per_section: sent as f64 / all_holds.max(1) as f64,
        spread: if fewest == 0 {
            f64::INFINITY
        } else {
            most as f64 / fewest as f64
        },
        fairness: if most == 0 {
            0.0
        } else {
            fewest as f64 / most as f64
        },
        wait_p99_us: percentile(&waits, 99.0) / 1e3,
        starved: per_client.iter().filter(|&&n| n == 0).count(),
        hold_us: median(&hold_ns) / 1e3,
        overlaps,
        wait_timeouts: logs.iter().map(|l| l.wait_timeouts).sum(),
        cpu,
    }
}

/// Runs one point once.
fn run_point(
    cfg: &Config,
    server: &Server,
    scripts: &Scripts,
    (waiting, clients, critical_section): (Waiting, usize, Duration),
) -> io::Result<Sample> {
    let mut admin = server.conn()?;
    admin.cmd(&["FLUSHALL"])?;
    let conns = (0..clients)
        .map(|_| server.conn())
        .collect::<io::Result<Vec<_>>>()?;
    let shared = Arc::new(Shared {
        key: format!("contended:{clients}").into_bytes(),
        sha: scripts.release.as_bytes().to_vec(),
        signal: format!("lock-signal:contended:{clients}").into_bytes(),
        signal_sha: scripts.signal_unlock.as_bytes().to_vec(),
        waiting,
        critical_section,
        epoch: Instant::now(),
        stop: AtomicBool::new(false),
        start: Barrier::new(clients + 1),
    });
    let handles = conns
        .into_iter()
        .map(|conn| {
            let shared = Arc::clone(&shared);
            thread::Builder::new()
                .stack_size(STACK)
                .spawn(move || client(conn, &shared))
        })
        .collect::<io::Result<Vec<_>>>()?;
    shared.start.wait();
    let meter = Meter::start(&mut admin)?;
    let from = shared.now();
    thread::sleep(cfg.contention_time);
    let to = shared.now();
    shared.stop.store(true, Ordering::Relaxed);
    let cpu = meter.stop(&mut admin)?;
    let mut logs = Vec::with_capacity(clients);
    for handle in handles {
        logs.push(
            handle
                .join()
                .map_err(|_| io::Error::other("a client panicked"))??,
        );
    }
    let sample = analyse(&logs, from, to, cpu);
    let waiters = info::number(&mut admin, "lock", "lock_waiters")?;
    if sample.overlaps > 0 || waiters != 0.0 {
        return Err(io::Error::other(format!(
            "{} with {clients} clients: {} overlapping holds, {waiters} waiters left",
            waiting.label(),
            sample.overlaps
        )));
    }
    Ok(sample)
}

/// The client count whose figures the targets speak of (64, or the largest run).
fn headline(cfg: &Config) -> usize {
    if cfg.clients.contains(&64) {
        64
    } else {
        cfg.clients.iter().copied().max().unwrap_or(1)
    }
}

/// The headline metrics: at the headline client count, the module against each polling
/// interval for throughput, and against 5 ms polling for the rest.
fn metrics(cfg: &Config, points: &[Point]) -> Vec<Metric> {
    let n = headline(cfg);
    let find = |w: Waiting| points.iter().find(|p| p.waiting == w && p.clients == n);
    let Some(module) = find(Waiting::Block) else {
        return Vec::new();
    };
    let scenario = format!("5. contention, {n} clients");
    let mut out = Vec::new();
    let mut add = |what: &str,
                   unit: &str,
                   better: Better,
                   recipe: &Point,
                   target: Option<Target>,
                   field: fn(&Sample) -> f64| {
        let mut m = Metric::new(&scenario, what, unit, &recipe.waiting.label(), better);
        m.target = target;
        for s in &module.samples {
            m.push(Side::Module, field(s), Some(s.cpu));
        }
        for s in &recipe.samples {
            m.push(Side::Recipe, field(s), Some(s.cpu));
        }
        out.push(m);
    };
    for interval in &cfg.poll_intervals {
        let Some(recipe) = find(Waiting::Poll(*interval)) else {
            continue;
        };
        let target = (n == 64 && interval.as_millis() == 5).then_some(Target::RatioAtLeast(5.0));
        add(
            "critical sections/s",
            "1/s",
            Better::Higher,
            recipe,
            target,
            |s| s.sections_per_s,
        );
    }
    if let Some(recipe) = find(Waiting::Poll(Duration::from_millis(5))) {
        let lower = Better::Lower;
        add(
            "handoff p50",
            "us",
            lower,
            recipe,
            Some(Target::ModuleBelow(100.0)),
            |s| s.handoff_p50_us,
        );
        add(
            "handoff p99",
            "us",
            lower,
            recipe,
            Some(Target::ModuleBelow(1000.0)),
            |s| s.handoff_p99_us,
        );
        add("handoff max", "us", lower, recipe, None, |s| {
            s.handoff_max_us
        });
        add(
            "commands per critical section",
            "cmds",
            lower,
            recipe,
            Some(Target::ModuleAtMost(2.0)),
            |s| s.commands_per_section,
        );
        add(
            "grant spread (most/fewest per client)",
            "x",
            lower,
            recipe,
            Some(Target::ModuleAtMost(2.0)),
            |s| s.spread,
        );
    }
    out
}

/// The scripts the recipes' clients run.
struct Scripts {
    /// The `SET NX` recipe's compare-and-delete.
    release: String,
    /// python-redis-lock's unlock.
    signal_unlock: String,
}

impl Scripts {
    fn load(server: &Server) -> io::Result<Scripts> {
        let mut conn = server.conn()?;
        Ok(Scripts {
            release: sides::load_script(&mut conn)?,
            signal_unlock: conn.cmd(&["SCRIPT", "LOAD", SIGNAL_UNLOCK])?.text()?,
        })
    }
}

/// Runs scenario 5: every client count with the module and each polling interval,
/// alternating within each round.
pub fn run(cfg: &Config, server: &Server) -> io::Result<(Vec<Metric>, Vec<Point>)> {
    let scripts = Scripts::load(server)?;
    let mut variants = vec![Waiting::Block];
    variants.extend(cfg.poll_intervals.iter().map(|d| Waiting::Poll(*d)));
    let mut points: Vec<Point> = Vec::new();
    for round in 0..cfg.slow_rounds {
        for &clients in &cfg.clients {
            let mut order = variants.clone();
            if round % 2 == 1 {
                order.reverse();
            }
            for waiting in order {
                let sample = run_point(
                    cfg,
                    server,
                    &scripts,
                    (waiting, clients, cfg.critical_section),
                )?;
                match points
                    .iter_mut()
                    .find(|p| p.waiting == waiting && p.clients == clients)
                {
                    Some(point) => point.samples.push(sample),
                    None => points.push(Point {
                        waiting,
                        clients,
                        samples: vec![sample],
                    }),
                }
            }
        }
    }
    points.sort_by_key(|p| (p.clients, variants.iter().position(|v| *v == p.waiting)));
    Ok((metrics(cfg, &points), points))
}

/// A measure of the recipes' comparison: what, its unit, which way is better, and the
/// field of a sample it reads.
type Measure = (&'static str, &'static str, Better, fn(&Sample) -> f64);

/// The contended recipes side by side (`recipes` in `Config`: 48 clients with an empty
/// critical section, 64 holding it 1 ms): the module's `WAIT`, polling `SET NX` every
/// 5 ms, and python-redis-lock's signal list; sections per second, fairness (fewest /
/// most grants per client), commands per section and the p99 of the wait, the module
/// against each recipe. The sides alternate within each round.
pub fn recipes(cfg: &Config, server: &Server) -> io::Result<Vec<Metric>> {
    let scripts = Scripts::load(server)?;
    let sides = [
        Waiting::Block,
        Waiting::Poll(Duration::from_millis(5)),
        Waiting::Signal,
    ];
    let mut metrics = Vec::new();
    for &(clients, section) in &cfg.recipes {
        let mut samples: Vec<(Waiting, Vec<Sample>)> =
            sides.iter().map(|w| (*w, Vec::new())).collect();
        for round in 0..cfg.slow_rounds {
            let mut order = sides.to_vec();
            if round % 2 == 1 {
                order.reverse();
            }
            for waiting in order {
                let sample = run_point(cfg, server, &scripts, (waiting, clients, section))?;
                if let Some((_, list)) = samples.iter_mut().find(|(w, _)| *w == waiting) {
                    list.push(sample);
                }
            }
        }
        let scenario = format!(
            "5. contended recipes, {clients} clients, {} section",
            if section.is_zero() {
                "empty".to_string()
            } else {
                format!("{} ms", section.as_millis())
            }
        );
        let module = &samples[0].1;
        for (recipe, recipe_samples) in &samples[1..] {
            let measures: [Measure; 4] = [
                ("critical sections/s", "1/s", Better::Higher, |s| {
                    s.sections_per_s
                }),
                (
                    "fairness (fewest / most grants per client)",
                    "x",
                    Better::Higher,
                    |s| s.fairness,
                ),
                (
                    "commands per critical section",
                    "cmds",
                    Better::Lower,
                    |s| s.commands_per_section,
                ),
                ("wait p99", "us", Better::Lower, |s| s.wait_p99_us),
            ];
            for (what, unit, better, field) in measures {
                let mut m = Metric::new(&scenario, what, unit, &recipe.label(), better);
                for s in module {
                    m.push(Side::Module, field(s), Some(s.cpu));
                }
                for s in recipe_samples {
                    m.push(Side::Recipe, field(s), Some(s.cpu));
                }
                metrics.push(m);
            }
        }
    }
    Ok(metrics)
}
