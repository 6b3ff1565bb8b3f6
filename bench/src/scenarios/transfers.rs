//! Scenario 13: crossing transfers. Workers each move money between two accounts picked
//! at random among a few (so their key sets overlap, in crossing orders), holding both
//! accounts' locks for a short critical section, in a loop. The module's workers take
//! both at once with `LOCK.ACQUIREALL 2 a b ... WAIT` (any order, nothing held while
//! waiting); the other side is what the clients do today (Redisson's `MultiLock`,
//! node-redlock's resources one by one): sort the keys so that crossing orders cannot
//! deadlock, then take each with the recipe's `SET NX PX`, polling every millisecond,
//! holding the first while waiting for the second; release each with the
//! compare-and-delete script.
//!
//! Reported side by side: critical sections per second, the 99th percentile of the wait
//! (wanting both to holding both), and the spread between workers (most sections of one
//! worker / fewest, a worker with none counted as one). Overlaps (two holders of one account at once, from the workers'
//! stamps) must be 0.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::resp::Conn;
use crate::results::{Better, Metric};
use crate::server::Server;
use crate::sides::{self, Side};
use crate::stats::percentile;

const TTL: &[u8] = b"10000";
const WAIT_MS: &[u8] = b"60000";
const STACK: usize = 256 * 1024;
/// Accounts the workers pick from.
const ACCOUNTS: u64 = 16;
/// How long a transfer holds both accounts.
const SECTION: Duration = Duration::from_micros(200);
/// The recipe's sleep after a refused `SET NX`.
const POLL: Duration = Duration::from_millis(1);

/// What one worker did in the window.
#[derive(Default)]
struct Log {
    /// Wait before each section, ns.
    waits: Vec<u64>,
    /// (account, grant ns, release ns) of each account held.
    holds: Vec<(u64, u64, u64)>,
}

struct Run {
    side: Side,
    sha: Vec<u8>,
    epoch: Instant,
    stop: AtomicBool,
    start: Barrier,
}

fn account(n: u64) -> Vec<u8> {
    format!("acct:{n}").into_bytes()
}

/// Takes both accounts; the token that holds them.
fn take_both(conn: &mut Conn, run: &Run, pair: [u64; 2]) -> io::Result<Option<Vec<u8>>> {
    let (a, b) = (account(pair[0]), account(pair[1]));
    match run.side {
        Side::Module => {
            conn.queue(&[b"LOCK.ACQUIREALL", b"2", &a, &b, TTL, b"WAIT", WAIT_MS]);
            conn.flush()?;
            match conn.read()?.ok()? {
                crate::resp::Reply::Array(mut parts) if parts.len() == 2 => {
                    match parts.swap_remove(0) {
                        crate::resp::Reply::Bulk(token) => Ok(Some(token)),
                        other => Err(crate::resp::unexpected("a token", &other)),
                    }
                }
                crate::resp::Reply::Nil => Ok(None),
                other => Err(crate::resp::unexpected("a grant of both", &other)),
            }
        }
        Side::Recipe => {
            let token = sides::token();
            let mut sorted = [a, b];
            sorted.sort();
            for key in &sorted {
                loop {
                    if run.stop.load(Ordering::Relaxed) {
                        // Give back what is held: the run is over.
                        for held in &sorted {
                            sides::queue_release(conn, Side::Recipe, &run.sha, held, &token);
                            conn.flush()?;
                            conn.read()?;
                        }
                        return Ok(None);
                    }
                    sides::queue_acquire(conn, Side::Recipe, key, TTL, Some(&token));
                    conn.flush()?;
                    if sides::granted(conn.read()?, Some(&token))?.is_some() {
                        break;
                    }
                    thread::sleep(POLL);
                }
            }
            Ok(Some(token))
        }
    }
}

fn worker(port: u16, run: &Run, seed: u64) -> io::Result<Log> {
    let mut conn = Conn::connect(port)?;
    let mut log = Log::default();
    let mut x = seed;
    run.start.wait();
    while !run.stop.load(Ordering::Relaxed) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let first = x % ACCOUNTS;
        let second = (first + 1 + (x >> 8) % (ACCOUNTS - 1)) % ACCOUNTS;
        let wanted = run.epoch.elapsed().as_nanos() as u64;
        let Some(token) = take_both(&mut conn, run, [first, second])? else {
            continue;
        };
        let granted = run.epoch.elapsed().as_nanos() as u64;
        thread::sleep(SECTION);
        let released = run.epoch.elapsed().as_nanos() as u64;
        for n in [first, second] {
            sides::queue_release(&mut conn, run.side, &run.sha, &account(n), &token);
        }
        conn.flush()?;
        for _ in 0..2 {
            if !sides::released(conn.read()?)? {
                return Err(io::Error::other("transfers: an account was not released"));
            }
        }
        log.waits.push(granted - wanted);
        log.holds.push((first, granted, released));
        log.holds.push((second, granted, released));
    }
    Ok(log)
}

/// Holds of one account that overlap (a grant before the previous holder's release).
fn overlaps(logs: &[Log]) -> usize {
    let mut by_account: HashMap<u64, Vec<(u64, u64)>> = HashMap::new();
    for log in logs {
        for &(n, granted, released) in &log.holds {
            by_account.entry(n).or_default().push((granted, released));
        }
    }
    by_account
        .values_mut()
        .map(|holds| {
            holds.sort_unstable();
            holds.windows(2).filter(|w| w[1].0 < w[0].1).count()
        })
        .sum()
}

/// What one side's run found.
struct Found {
    per_s: f64,
    wait_p99_us: f64,
    wait_max_ms: f64,
    spread: f64,
    overlaps: usize,
}

/// One side's run.
fn one_side(cfg: &Config, server: &Server, side: Side, workers: usize) -> io::Result<Found> {
    let mut conn = server.conn()?;
    let run = Arc::new(Run {
        side,
        sha: sides::load_script(&mut conn)?.into_bytes(),
        epoch: Instant::now(),
        stop: AtomicBool::new(false),
        start: Barrier::new(workers + 1),
    });
    let logs = Arc::new(Mutex::new(Vec::new()));
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let (run, logs, port) = (run.clone(), logs.clone(), server.port);
            thread::Builder::new()
                .stack_size(STACK)
                .spawn(move || -> io::Result<()> {
                    let log = worker(port, &run, 0x9E37_79B9_7F4A_7C15 ^ (w as u64 + 1))?;
                    logs.lock().expect("logs").push(log);
                    Ok(())
                })
        })
        .collect::<io::Result<_>>()?;
    run.start.wait();
    let window = cfg.contention_time;
    thread::sleep(window);
    run.stop.store(true, Ordering::Relaxed);
    for handle in handles {
        handle
            .join()
            .map_err(|_| io::Error::other("a transfer worker panicked"))??;
    }
    let logs = std::mem::take(&mut *logs.lock().expect("logs"));
    let sections: Vec<usize> = logs.iter().map(|log| log.waits.len()).collect();
    let total: usize = sections.iter().sum();
    let mut waits: Vec<u64> = logs
        .iter()
        .flat_map(|log| log.waits.iter().copied())
        .collect();
    waits.sort_unstable();
    let (most, fewest) = (
        sections.iter().copied().max().unwrap_or(0),
        sections.iter().copied().min().unwrap_or(0),
    );
    let spread = if fewest == 0 {
        f64::INFINITY
    } else {
        most as f64 / fewest as f64
    };
    Ok(Found {
        per_s: total as f64 / window.as_secs_f64(),
        wait_p99_us: percentile(&waits, 0.99) / 1_000.0,
        wait_max_ms: waits.last().copied().unwrap_or(0) as f64 / 1e6,
        spread,
        overlaps: overlaps(&logs),
    })
}

/// Runs scenario 13 on `server`.
pub fn run(cfg: &Config, server: &Server) -> io::Result<Vec<Metric>> {
    let workers = if cfg.smoke { 8 } else { 64 };
    let label = "sorted keys one by one (SET NX PX, poll 1 ms)";
    let scenario = "13. crossing transfers";
    let mut rate = Metric::new(
        scenario,
        &format!("transfers/s, {workers} workers, 2 of {ACCOUNTS} accounts each"),
        "/s",
        label,
        Better::Higher,
    );
    let mut wait = Metric::new(
        scenario,
        "wait for both accounts, p99",
        "us",
        label,
        Better::Lower,
    );
    // The p99 over transfers favours whoever transfers most: a worker left polling does
    // few. The longest wait shows it.
    let mut longest = Metric::new(
        scenario,
        "wait for both accounts, longest",
        "ms",
        label,
        Better::Lower,
    );
    let mut spread = Metric::new(
        scenario,
        "transfers of the busiest worker / the least busy",
        "x",
        label,
        Better::Lower,
    );
    for round in 0..cfg.slow_rounds {
        for side in Side::alternating(round) {
            let found = one_side(cfg, server, side, workers)?;
            if found.overlaps > 0 {
                return Err(io::Error::other(format!(
                    "transfers: {} overlapping holds of an account ({side:?})",
                    found.overlaps
                )));
            }
            rate.push(side, found.per_s, None);
            wait.push(side, found.wait_p99_us, None);
            longest.push(side, found.wait_max_ms, None);
            spread.push(side, found.spread, None);
        }
    }
    Ok(vec![rate, wait, longest, spread])
}
