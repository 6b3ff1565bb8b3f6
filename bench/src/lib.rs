//! redis-lock-bench: the lock module against the recipe it replaces (`SET NX PX` to
//! acquire, a compare-and-delete Lua script to release, client-side polling to wait),
//! both measured in the same run on servers the benchmark starts itself.
//!
//! `run` is the whole benchmark; the binary (`make bench`) calls it with the full sizes
//! and the smoke test (`make test`) with tiny ones, so the code cannot rot.

pub mod chart;
pub mod cleanup;
pub mod config;
pub mod cpu;
pub mod info;
pub mod json;
pub mod report;
pub mod resp;
pub mod results;
pub mod scenarios;
pub mod server;
pub mod sides;
pub mod soak;
pub mod stats;

use std::io;
use std::time::Instant;

pub use config::Config;
pub use report::Report;

use scenarios::{
    callgrind, contention, durability, election, expiry, fenced, instructions, replicas, sessions,
    shared, throughput, transfers, waiters,
};
use server::{Launch, Server};

/// Prints progress to stderr.
fn step(what: &str) {
    eprintln!("redis-lock-bench: {what}");
}

/// Runs every scenario `cfg` selects and returns the report (not yet written).
pub fn run(cfg: &Config) -> io::Result<Report> {
    let started = Instant::now();
    let mut report = Report {
        config: cfg.clone(),
        machine: report::machine(),
        metrics: Vec::new(),
        contention: Vec::new(),
        notes: Vec::new(),
        elapsed: Default::default(),
    };
    let launch = Launch {
        module: Some(&cfg.module),
        extra: &[],
        callgrind: false,
    };
    if cfg.runs("throughput") {
        step("scenarios 1-4: acquire, release, cycles, usec_per_call");
        let server = Server::start(&launch)?;
        report.metrics.extend(throughput::run(cfg, &server)?);
    }
    if cfg.runs("callgrind") {
        if instructions::available() {
            step("scenario 4: instructions per call under callgrind");
            report.metrics.extend(callgrind::run(cfg)?);
        } else {
            report.notes.push(
                "callgrind skipped: valgrind is not installed (`make bench` installs it)".into(),
            );
        }
    }
    if cfg.runs("contention") {
        step("scenario 5: contention");
        let server = Server::start(&launch)?;
        let (metrics, points) = contention::run(cfg, &server)?;
        report.metrics.extend(metrics);
        report.contention = points;
        step("scenario 5: the contended recipes: module, polling, python-redis-lock");
        report.metrics.extend(contention::recipes(cfg, &server)?);
    }
    if cfg.runs("memory") || cfg.runs("expiry") {
        step("scenarios 6-7: memory per lock, expiry at scale");
        report.metrics.extend(expiry::run(cfg)?);
    }
    if cfg.runs("waiters") {
        step("scenario 6: bytes per waiter");
        report.metrics.extend(waiters::run(cfg)?);
    }
    if cfg.runs("durability") {
        step("scenario 8: durability, acquire then WAIT 1 (one replica)");
        report.metrics.extend(durability::run(cfg)?);
    }
    if cfg.runs("sessions") {
        step("scenario 9: session-bound locks: SESSION acquire, connection close");
        report.metrics.extend(sessions::run(cfg)?);
    }
    if cfg.runs("shared") {
        step("scenario 10: read/write locks against Redisson's scripts");
        report.metrics.extend(shared::run(cfg)?);
    }
    if cfg.runs("election") {
        step(
            "scenario 11: leader election: a leader's death to every follower, a follower's memory",
        );
        report.metrics.extend(election::run(cfg)?);
    }
    if cfg.runs("fenced") {
        step("scenario 12: fenced writes: LOCK.DO against the compare-then-write script");
        let server = Server::start(&launch)?;
        report.metrics.extend(fenced::run(cfg, &server)?);
        if instructions::available() {
            report.metrics.extend(fenced::instructions(cfg)?);
        }
    }
    if cfg.runs("transfers") {
        step("scenario 13: crossing transfers: LOCK.ACQUIREALL against sorted keys one by one");
        let server = Server::start(&launch)?;
        report.metrics.extend(transfers::run(cfg, &server)?);
    }
    if cfg.runs("replicas") {
        step("scenario 14: the packages' replicas default: acquire with WAIT 1 against off");
        report.metrics.extend(replicas::run(cfg)?);
    }
    report.elapsed = started.elapsed();
    Ok(report)
}
