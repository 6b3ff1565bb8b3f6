//! The client tests' real-server harness: the workspace's one harness, the
//! `redis-lock-testkit` crate (a `redis-server` on a free loopback port with the lock
//! module loaded and a directory of its own, killed on drop, panics included; plus
//! `poll_until`, `exists`, `pttl`), re-exported so tests keep `common::*`; and reads of
//! the server's own counters, so tests can prove what a client sent rather than trust
//! what it reports.

// Each test binary uses some of these helpers, none uses all.
#![allow(dead_code)]

pub use redis_lock_testkit::*;

/// One integer field of `INFO lock` (section `lock_stats`), e.g. `lock_extends`,
/// `lock_grants`, `lock_contended`: what the module itself counted.
pub fn lock_stat(con: &mut redis::Connection, field: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("lock")
        .query(con)
        .expect("INFO lock");
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {field} in INFO lock:\n{info}"))
        .trim()
        .parse()
        .unwrap_or_else(|err| panic!("{field} is not a number ({err}):\n{info}"))
}

/// How many times the server ran `command` (e.g. `lock.extend`), whatever it answered:
/// `calls` of `INFO commandstats`, 0 before the first call.
pub fn command_calls(con: &mut redis::Connection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(con)
        .expect("INFO commandstats");
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .map(|rest| {
            rest.split(',')
                .next()
                .and_then(|calls| calls.parse().ok())
                .unwrap_or_else(|| panic!("unreadable commandstats line for {command}: {rest}"))
        })
        .unwrap_or(0)
}
