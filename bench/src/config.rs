//! How big each scenario is: the full run (`make bench`) and the smoke run (`make test`).

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The scenarios, by the names `--only` takes.
pub const SCENARIOS: [&str; 13] = [
    "throughput",
    "callgrind",
    "contention",
    "memory",
    "waiters",
    "expiry",
    "durability",
    "sessions",
    "shared",
    "election",
    "fenced",
    "transfers",
    "replicas",
];

/// Sizes and durations of one benchmark run.
#[derive(Debug, Clone)]
pub struct Config {
    /// The module to load (`libredis_lock.so`).
    pub module: PathBuf,
    /// Where `results.md`, `results.json` and the chart go.
    pub out_dir: PathBuf,
    /// A smoke run: tiny sizes, targets not judged.
    pub smoke: bool,
    /// Scenarios to run (names from `SCENARIOS`).
    pub only: Vec<String>,
    /// Rounds of the quick scenarios (throughput, server cost, callgrind).
    pub rounds: usize,
    /// Rounds of the slow ones (contention, memory, waiters, expiry).
    pub slow_rounds: usize,
    /// Commands per side per round, one at a time on one connection.
    pub ops: usize,
    /// Acquire/release cycles per side per round when pipelined.
    pub pipelined_cycles: usize,
    /// Cycles per pipeline batch.
    pub pipeline_depth: usize,
    /// Commands per side per round under callgrind (about 50x slower).
    pub callgrind_ops: usize,
    /// Client counts of the contention scenario.
    pub clients: Vec<usize>,
    /// How long each contention point runs.
    pub contention_time: Duration,
    /// How long a client holds the lock (a sleep).
    pub critical_section: Duration,
    /// Sleeps between attempts of the polling recipe.
    pub poll_intervals: Vec<Duration>,
    /// The contended recipes side by side: (clients, critical section) points.
    pub recipes: Vec<(usize, Duration)>,
    /// Locks held at once for the memory and expiry scenarios.
    pub locks: usize,
    /// Clients blocked at once for the bytes-per-waiter figure.
    pub waiters: usize,
    /// Followers of the election scenario (blocked in `LOCK.WATCH`, or polling `GET`).
    pub watchers: usize,
    /// Acquires per side per round of the durability scenario (each kind: alone, and
    /// followed by `WAIT 1`), one at a time on one connection.
    pub durability_acquires: usize,
}

impl Config {
    /// The full benchmark.
    pub fn full(module: PathBuf, out_dir: PathBuf) -> Config {
        Config {
            module,
            out_dir,
            smoke: false,
            only: SCENARIOS.iter().map(|s| s.to_string()).collect(),
            rounds: 5,
            slow_rounds: 3,
            ops: 40_000,
            pipelined_cycles: 200_000,
            pipeline_depth: 50,
            callgrind_ops: 2_000,
            clients: vec![1, 8, 64, 512],
            contention_time: Duration::from_secs(2),
            critical_section: Duration::from_micros(100),
            poll_intervals: [1, 5, 100].map(Duration::from_millis).to_vec(),
            recipes: vec![(48, Duration::ZERO), (64, Duration::from_millis(1))],
            locks: 1_000_000,
            waiters: 1_000,
            watchers: 1_000,
            durability_acquires: 5_000,
        }
    }

    /// A run of a few seconds that exercises every code path with tiny sizes.
    pub fn smoke(module: PathBuf, out_dir: PathBuf) -> Config {
        Config {
            smoke: true,
            rounds: 2,
            slow_rounds: 1,
            ops: 300,
            pipelined_cycles: 500,
            pipeline_depth: 50,
            callgrind_ops: 100,
            clients: vec![1, 8],
            contention_time: Duration::from_millis(150),
            recipes: vec![(4, Duration::ZERO), (4, Duration::from_millis(1))],
            locks: 2_000,
            waiters: 20,
            watchers: 20,
            durability_acquires: 50,
            ..Config::full(module, out_dir)
        }
    }

    /// Whether scenario `name` is to run.
    pub fn runs(&self, name: &str) -> bool {
        self.only.iter().any(|s| s == name)
    }
}

/// The workspace's `target` directory (`CARGO_TARGET_DIR` if set at run time).
pub fn target_dir() -> PathBuf {
    std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

/// The module built with the same profile as this code (`make bench` builds both with
/// `--release`), or `LOCK_MODULE` if set.
pub fn default_module() -> PathBuf {
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    std::env::var("LOCK_MODULE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| target_dir().join(profile).join("libredis_lock.so"))
}
