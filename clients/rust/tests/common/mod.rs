//! The client tests' real-server harness: the workspace's one harness, the
//! `redis-lock-testkit` crate (a `redis-server` on a free loopback port with the lock
//! module loaded and a directory of its own, killed on drop, panics included; plus
//! `poll_until`, `exists`, `pttl`), re-exported so tests keep `common::*`; and reads of
//! the server's own counters, so tests can prove what a client sent rather than trust
//! what it reports.

// Each test binary uses some of these helpers, none uses all.
#![allow(dead_code)]

pub use redis_lock_testkit::*;

pub mod python;

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

/// Watches a lock kept alive by a watchdog for `window`: how many extends the server
/// counted meanwhile (`lock_extends`), and the lowest `PTTL` of `key` seen, sampled
/// every 20 ms. Waits on purpose: the cadence is measured over a fixed time.
pub fn watch_extends(server: &TestServer, key: &str, window: std::time::Duration) -> (u64, i64) {
    let mut con = server.connection();
    let before = lock_stat(&mut con, "lock_extends");
    let until = std::time::Instant::now() + window;
    let mut lowest = i64::MAX;
    while std::time::Instant::now() < until {
        lowest = lowest.min(pttl(&mut con, key));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    (lock_stat(&mut con, "lock_extends") - before, lowest)
}

/// Asserts that `extends` over `window` fit a watchdog extending every `every`: within
/// half and twice (plus one) the expected `window / every`, generous for a loaded
/// machine, yet far from a watchdog on another cadence (a different fraction of the
/// TTL) or none.
pub fn assert_cadence(extends: u64, window: std::time::Duration, every: std::time::Duration) {
    let expected = window.as_secs_f64() / every.as_secs_f64();
    assert!(
        extends as f64 >= expected / 2.0 && extends as f64 <= expected * 2.0 + 1.0,
        "{extends} extends in {window:?}; every {every:?} makes about {expected:.0}"
    );
}

/// After a release and ten watchdog periods: not one more `LOCK.EXTEND` reached the
/// server (`calls` of them, `extends` successful, were counted at the release), and the
/// next holder's short TTL on `key` runs out as set.
pub fn assert_watchdog_stopped(con: &mut redis::Connection, calls: u64, extends: u64, key: &str) {
    poll_until(
        std::time::Duration::from_secs(5),
        "the next holder's lock expires",
        || !exists(con, key),
    );
    assert_eq!(
        command_calls(con, "lock.extend"),
        calls,
        "the watchdog sent extends after the release"
    );
    assert_eq!(lock_stat(con, "lock_extends"), extends);
}

/// One integer field of `LOCK.INFO key` (`None` if the key or the field is missing).
pub fn info_field(con: &mut redis::Connection, key: &str, field: &str) -> Option<i64> {
    // `mode` is a word, every other field an integer.
    let fields: Option<Vec<(String, redis::Value)>> = redis::cmd("LOCK.INFO")
        .arg(key)
        .query(con)
        .expect("LOCK.INFO");
    fields?.into_iter().find_map(|(name, value)| match value {
        redis::Value::Int(n) if name == field => Some(n),
        _ => None,
    })
}

/// The number of keys in the server's database 0.
pub fn dbsize(con: &mut redis::Connection) -> i64 {
    redis::cmd("DBSIZE").query(con).expect("DBSIZE")
}

/// Waits until the server counts `n` clients blocked in a lock's queue (`INFO lock`,
/// `lock_waiters`).
pub fn wait_for_waiters(con: &mut redis::Connection, n: u64) {
    poll_until(
        std::time::Duration::from_secs(10),
        "the waiters to block",
        || lock_stat(con, "lock_waiters") == n,
    );
}

/// `server` stopped (`SIGSTOP`) while the guard lives, continued when it drops: its
/// port stays taken and connections are accepted, but nothing is answered.
pub struct Frozen(u32);

pub fn freeze(server: &TestServer) -> Frozen {
    let pid = server.pid().expect("running");
    let status = std::process::Command::new("kill")
        .args(["-STOP", &pid.to_string()])
        .status();
    assert!(status.expect("kill").success());
    Frozen(pid)
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status();
    }
}
