//! Scenario 11: leader election. How long after the leader dies does every follower
//! know the new leader, and what does a follower cost the server while it waits?
//!
//! The module's side: the leader holds `LOCK.ACQUIRE ... SESSION 0 VALUE addr-a`, one
//! candidate waits (`WAIT 0 SESSION 0 VALUE addr-b`), and `watchers` followers block in
//! `LOCK.WATCH key leader-fence 0`. The leader's connection closes (it died): the server
//! releases its lock, elects the candidate and answers every follower in that event. The
//! time of each follower is when the generator reads its reply (8 reading threads, each
//! reading its followers in turn: an upper bound).
//!
//! The recipe's side, as people build it on `SET NX`: the leader holds `SET key addr-a NX
//! PX 300` and renews it every 100 ms; the candidate tries `SET key addr-b NX PX 300`
//! every 100 ms; the followers `GET` the key every 100 ms, each at its own phase. The
//! leader dies (stops renewing, closes its connection); the time of each follower is when
//! its `GET` first answers `addr-b`.
//!
//! Memory: `used_memory` per follower blocked in `LOCK.WATCH`, against a `BLPOP` client
//! on the same server (the waiters' measurement, `waiters.rs`), and how much of it is the
//! module's own (its allocator's count): the rest is what the server keeps for any
//! client a module blocks.

use std::io;
use std::thread;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::info;
use crate::resp::{Conn, Reply};
use crate::results::{Better, Metric};
use crate::scenarios::waiters;
use crate::server::{Launch, Server};
use crate::sides::Side;
use crate::stats::percentile;

const KEY: &str = "election";
/// Threads reading the followers' replies, or polling for the recipe.
const READERS: usize = 8;
/// The recipe's leader TTL, its renewal and everyone's poll, in ms.
const RECIPE_TTL_MS: u64 = 300;
const RECIPE_POLL: Duration = Duration::from_millis(100);
/// How long a handover may take before the run counts as failed.
const LIMIT: Duration = Duration::from_secs(10);

fn wait_for(admin: &mut Conn, section: &str, field: &str, value: f64) -> io::Result<()> {
    let deadline = Instant::now() + LIMIT;
    while info::number(admin, section, field)? != value {
        if Instant::now() > deadline {
            return Err(io::Error::other(format!("{field} never reached {value}")));
        }
        thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

fn fence_of(reply: Reply) -> io::Result<i64> {
    match reply.ok()? {
        Reply::Array(items) if items.len() == 2 => items[1].int(),
        other => Err(io::Error::other(format!("not granted: {other:?}"))),
    }
}

/// Microseconds from the leader's death to each follower reading the new leader.
fn module_handover(server: &Server, watchers: usize) -> io::Result<Vec<u64>> {
    let mut admin = server.conn()?;
    admin.cmd(&["FLUSHALL"])?;
    let mut leader = server.conn()?;
    let fence = fence_of(leader.cmd(&[
        "LOCK.ACQUIRE",
        KEY,
        "600000",
        "TOKEN",
        "a",
        "SESSION",
        "0",
        "VALUE",
        "addr-a",
    ])?)?;
    let mut candidate = server.conn()?;
    candidate.queue(&[
        b"LOCK.ACQUIRE",
        KEY.as_bytes(),
        b"600000",
        b"TOKEN",
        b"b",
        b"WAIT",
        b"0",
        b"SESSION",
        b"0",
        b"VALUE",
        b"addr-b",
    ]);
    candidate.flush()?;
    wait_for(&mut admin, "lock", "lock_waiters", 1.0)?;
    let fence_text = fence.to_string();
    let mut followers = (0..watchers)
        .map(|_| server.conn())
        .collect::<io::Result<Vec<_>>>()?;
    for follower in &mut followers {
        follower.queue(&[b"LOCK.WATCH", KEY.as_bytes(), fence_text.as_bytes(), b"0"]);
        follower.flush()?;
    }
    wait_for(&mut admin, "lock", "lock_watchers", watchers as f64)?;
    let died = Instant::now();
    drop(leader);
    let chunk = watchers.div_ceil(READERS).max(1);
    let mut readers = Vec::new();
    while !followers.is_empty() {
        let mine: Vec<Conn> = followers.drain(..chunk.min(followers.len())).collect();
        readers.push(thread::spawn(move || -> io::Result<Vec<u64>> {
            let mut times = Vec::with_capacity(mine.len());
            for mut follower in mine {
                let reply = follower.read()?.ok()?;
                let Reply::Array(items) = &reply else {
                    return Err(io::Error::other(format!("LOCK.WATCH answered {reply:?}")));
                };
                if items.get(1) != Some(&Reply::Bulk(b"addr-b".to_vec())) {
                    return Err(io::Error::other(format!("a follower saw {reply:?}")));
                }
                times.push(died.elapsed().as_micros() as u64);
            }
            Ok(times)
        }));
    }
    let mut times = Vec::with_capacity(watchers);
    for reader in readers {
        times.extend(
            reader
                .join()
                .map_err(|_| io::Error::other("a reader panicked"))??,
        );
    }
    if fence_of(candidate.read()?)? <= fence {
        return Err(io::Error::other("the new term is not greater"));
    }
    Ok(times)
}

/// Microseconds from the recipe leader's death to each follower's `GET` reading the new
/// leader.
fn recipe_handover(server: &Server, watchers: usize) -> io::Result<Vec<u64>> {
    let ttl = RECIPE_TTL_MS.to_string();
    let mut admin = server.conn()?;
    admin.cmd(&["FLUSHALL"])?;
    let mut leader = server.conn()?;
    leader
        .cmd(&["SET", KEY, "addr-a", "NX", "PX", &ttl])?
        .ok()?;
    let started = Instant::now();
    // Followers poll from now on, each at its own phase.
    let mut follower_sets: Vec<Vec<(Conn, Instant)>> = (0..READERS).map(|_| Vec::new()).collect();
    for i in 0..watchers {
        let phase = RECIPE_POLL.mul_f64(i as f64 / watchers.max(1) as f64);
        follower_sets[i % READERS].push((server.conn()?, started + phase));
    }
    // The leader renews twice, then dies (stops renewing, closes its connection).
    for _ in 0..2 {
        thread::sleep(RECIPE_POLL);
        leader.cmd(&["PEXPIRE", KEY, &ttl])?.ok()?;
    }
    let died = Instant::now();
    drop(leader);
    let mut pollers = Vec::new();
    for set in follower_sets.into_iter().filter(|s| !s.is_empty()) {
        pollers.push(thread::spawn(move || poll_until_new_leader(set, died)));
    }
    // The candidate tries every 100 ms from before the death.
    let mut candidate = server.conn()?;
    let deadline = Instant::now() + LIMIT;
    while candidate.cmd(&["SET", KEY, "addr-b", "NX", "PX", "600000"])? == Reply::Nil {
        if Instant::now() > deadline {
            return Err(io::Error::other("the recipe's candidate was never elected"));
        }
        thread::sleep(RECIPE_POLL);
    }
    let mut times = Vec::with_capacity(watchers);
    for poller in pollers {
        times.extend(
            poller
                .join()
                .map_err(|_| io::Error::other("a poller panicked"))??,
        );
    }
    Ok(times)
}

/// Polls each follower's `GET` every 100 ms at its phase until it reads `addr-b`.
fn poll_until_new_leader(mut set: Vec<(Conn, Instant)>, died: Instant) -> io::Result<Vec<u64>> {
    let mut times = Vec::with_capacity(set.len());
    let deadline = Instant::now() + LIMIT;
    while !set.is_empty() {
        let now = Instant::now();
        if now > deadline {
            return Err(io::Error::other(
                "a recipe follower never saw the new leader",
            ));
        }
        let mut i = 0;
        while i < set.len() {
            if set[i].1 <= now {
                let reply = set[i].0.cmd(&["GET", KEY])?;
                if reply == Reply::Bulk(b"addr-b".to_vec()) {
                    times.push(died.elapsed().as_micros() as u64);
                    set.swap_remove(i);
                    continue;
                }
                set[i].1 += RECIPE_POLL;
            }
            i += 1;
        }
        let next = set.iter().map(|(_, at)| *at).min();
        if let Some(next) = next {
            thread::sleep(next.saturating_duration_since(Instant::now()));
        }
    }
    Ok(times)
}

/// Runs scenario 11.
pub fn run(cfg: &Config) -> io::Result<Vec<Metric>> {
    let n = cfg.watchers;
    let recipe_label = format!(
        "SET NX PX {RECIPE_TTL_MS} renewed every 100 ms; candidate and followers poll every 100 ms"
    );
    let what = |p: &str| format!("leader death to all {n} followers knowing the new leader, {p}");
    let mut p50 = Metric::new(
        "11. election",
        &what("p50"),
        "ms",
        &recipe_label,
        Better::Lower,
    );
    let mut p99 = Metric::new(
        "11. election",
        &what("p99"),
        "ms",
        &recipe_label,
        Better::Lower,
    );
    let mut memory = Metric::new(
        "11. election",
        &format!("bytes per follower ({n} blocked in LOCK.WATCH)"),
        "B",
        "for scale: a BLPOP waiter",
        Better::Lower,
    );
    let mut own = Metric::new(
        "11. election",
        "bytes per follower: the module's own part (lock_allocated_bytes)",
        "B",
        "the server's part (its blocked-client state for a module)",
        Better::Lower,
    );
    for round in 0..cfg.slow_rounds {
        let server = Server::start(&Launch {
            module: Some(&cfg.module),
            extra: &[],
            callgrind: false,
        })?;
        for side in Side::alternating(round) {
            let mut times = match side {
                Side::Module => module_handover(&server, n)?,
                Side::Recipe => recipe_handover(&server, n)?,
            };
            times.sort_unstable();
            let ms = |us: f64| us / 1000.0;
            p50.push(side, ms(percentile(&times, 50.0)), None);
            p99.push(side, ms(percentile(&times, 99.0)), None);
        }
        // On a fresh server each time, as for the waiters.
        let server = Server::start(&Launch {
            module: Some(&cfg.module),
            extra: &[],
            callgrind: false,
        })?;
        let watch = |fence: i64| {
            vec![
                b"LOCK.WATCH".to_vec(),
                b"waited".to_vec(),
                fence.to_string().into_bytes(),
                b"2000".to_vec(),
            ]
        };
        let (all, module_own) = waiters::bytes_per_blocked(&server, n, &watch)?;
        memory.push(Side::Module, all, None);
        own.push(Side::Module, module_own, None);
        own.push(Side::Recipe, all - module_own, None);
        let blpop = |_| vec![b"BLPOP".to_vec(), b"empty-list".to_vec(), b"2".to_vec()];
        memory.push(
            Side::Recipe,
            waiters::bytes_per_blocked(&server, n, &blpop)?.0,
            None,
        );
    }
    Ok(vec![p50, p99, memory, own])
}
