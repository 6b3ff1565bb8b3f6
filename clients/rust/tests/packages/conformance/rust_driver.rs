//! The Rust package's conformance driver: each scenario's steps through
//! `redis-lock-client` (`Locker` and `Lock` on master 0, `Redlock` over the three), in
//! this process, with the outcomes written as `scenarios.txt` writes them.

use std::collections::HashMap;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use redis::Value;
use redis_lock_client::{
    Lock, LockOptions, Locker, Redlock, RedlockGuard, RedlockOptions, Replicas, is_not_replicated,
    is_too_few_replicas,
};

use super::scenarios::{Scenario, matches, options};
use crate::common::TestServer;

/// A Redlock step's result: the guard and its validity when granted, else the attempts.
enum Redlocked {
    Held(RedlockGuard, Duration),
    Refused(u32),
}

struct Driver<'a> {
    servers: &'a [TestServer],
    locker: Locker,
    raw: Vec<redis::Connection>,
    /// A released guard is consumed (`release(self)`): `None` from then on.
    locks: HashMap<String, Option<Lock>>,
    fences: HashMap<String, u64>,
    redlocks: HashMap<String, Redlocked>,
    frozen: Vec<usize>,
    took: Duration,
}

fn ms(value: u64) -> Duration {
    Duration::from_millis(value)
}

/// A reply as the scenarios write it.
fn shown(value: &Value) -> String {
    match value {
        Value::Nil => "nil".into(),
        Value::Int(n) => n.to_string(),
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(text) => text.clone(),
        Value::Okay => "OK".into(),
        Value::Array(_) | Value::Set(_) | Value::Map(_) => "array".into(),
        other => format!("{other:?}"),
    }
}

/// A `... lo hi` check of a duration: nothing to compare, or what it was.
fn in_range(what: &str, value: Duration, bounds: &[String]) -> Result<Option<String>, String> {
    let value = value.as_millis();
    let (lo, hi): (u128, u128) = (
        bounds[0].parse().expect("ms"),
        bounds[1].parse().expect("ms"),
    );
    if (lo..=hi).contains(&value) {
        Ok(None)
    } else {
        Err(format!("{what} {value} ms"))
    }
}

/// An error as the scenarios write it: `invalid` for a refused argument (the server's
/// `ERR`), else `error CODE`.
fn outcome_of(err: &redis::RedisError) -> String {
    if is_too_few_replicas(err) {
        return "too-few-replicas".into();
    }
    if is_not_replicated(err) {
        return "not-replicated".into();
    }
    match err.code() {
        Some("ERR") => "invalid".into(),
        Some(code) => format!("error {code}"),
        None => format!("{err}"),
    }
}

impl<'a> Driver<'a> {
    fn new(servers: &'a [TestServer]) -> Self {
        Driver {
            servers,
            locker: Locker::open(&servers[0].url()).expect("a locker"),
            raw: servers.iter().map(TestServer::connection).collect(),
            locks: HashMap::new(),
            fences: HashMap::new(),
            redlocks: HashMap::new(),
            frozen: Vec::new(),
            took: Duration::ZERO,
        }
    }

    fn lock(&mut self, words: &[String]) -> String {
        let found = options(&words[3..]);
        let mut options = LockOptions::new(ms(words[2].parse().expect("a ttl")));
        if let Some(wait) = found.get("wait") {
            options = options.wait(ms(*wait));
        }
        if found.contains_key("watchdog") {
            options = options.watchdog();
        }
        if let Some(replicas) = found.get("replicas") {
            options = options.replicas(Replicas::Exactly(*replicas as usize));
        }
        if let Some(timeout) = found.get("repltimeout") {
            options = options.replicas_timeout(ms(*timeout));
        }
        let on = found.get("on").copied().unwrap_or(0) as usize;
        let other;
        let locker = if on == 0 {
            &self.locker
        } else {
            other = Locker::open(&self.servers[on].url()).expect("a locker");
            &other
        };
        match locker.acquire(words[1].as_str(), &options) {
            Ok(Some(lock)) => {
                self.fences.insert(words[0].clone(), lock.fence());
                self.locks.insert(words[0].clone(), Some(lock));
                "granted".into()
            }
            Ok(None) => "busy".into(),
            Err(err) => outcome_of(&err),
        }
    }

    fn held(&self, name: &str) -> &Lock {
        self.locks[name].as_ref().expect("a lock not released yet")
    }

    fn signal(&mut self, index: usize, stop: bool) {
        let pid = self.servers[index].pid().expect("a running server");
        let status = Command::new("kill")
            .args([if stop { "-STOP" } else { "-CONT" }, &pid.to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -STOP/-CONT {pid}");
        if stop {
            self.frozen.push(index);
        } else {
            self.frozen.retain(|i| *i != index);
        }
    }

    fn server(&mut self, index: usize, args: &[String]) -> String {
        let mut cmd = redis::cmd(&args[0]);
        for arg in &args[1..] {
            cmd.arg(arg);
        }
        match cmd.query::<Value>(&mut self.raw[index]) {
            Ok(value) => shown(&value),
            Err(err) => outcome_of(&err),
        }
    }

    fn redlock(&mut self, words: &[String]) -> String {
        let found = options(&words[3..]);
        let mut options = RedlockOptions::new(ms(words[2].parse().expect("a ttl")));
        if let Some(retries) = found.get("retries") {
            options = options.retry_count(*retries as u32);
        }
        if found.contains_key("delay") || found.contains_key("jitter") {
            options = options.retry_delay(
                ms(*found.get("delay").unwrap_or(&200)),
                ms(*found.get("jitter").unwrap_or(&100)),
            );
        }
        let urls: Vec<String> = self.servers[..3].iter().map(TestServer::url).collect();
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        let redlock = Redlock::open(&urls).expect("a Redlock");
        let (outcome, result) = match redlock.lock(words[1].as_str(), &options) {
            Ok(guard) => {
                let validity = guard.remaining();
                ("granted", Redlocked::Held(guard, validity))
            }
            Err(err) => ("refused", Redlocked::Refused(err.attempts)),
        };
        self.redlocks.insert(words[0].clone(), result);
        outcome.into()
    }

    /// One step: its outcome (`None`: nothing to compare), or why it failed.
    fn step(&mut self, words: &[String], expected: Option<&str>) -> Result<Option<String>, String> {
        let args = &words[1..];
        let outcome = match words[0].as_str() {
            "lock" => self.lock(args),
            "release" => match self.locks.get_mut(&args[0]).and_then(Option::take) {
                Some(lock) => lock.release().map_err(|e| e.to_string())?.to_string(),
                // Released already: Rust's guard is consumed by `release`, so a second
                // release cannot even be written, and nothing is released.
                None => "false".into(),
            },
            "extend" => match self.locks[&args[0]].as_ref() {
                Some(lock) => match lock.extend(ms(args[1].parse().expect("a ttl"))) {
                    Ok(extended) => extended.to_string(),
                    Err(err) if is_not_replicated(&err) => "not-replicated".into(),
                    Err(err) => return Err(err.to_string()),
                },
                None => "false".into(),
            },
            "do" => {
                let mut cmd = redis::cmd(&args[1]);
                for arg in &args[2..] {
                    cmd.arg(arg);
                }
                match self.held(&args[0]).run::<Value>(&cmd) {
                    Ok(value) => shown(&value),
                    Err(err) if err.code() == Some("NOTHELD") => "lost".into(),
                    Err(err) => outcome_of(&err),
                }
            }
            "fence-above" => {
                let (high, low) = (self.fences[&args[0]], self.fences[&args[1]]);
                return if high > low {
                    Ok(None)
                } else {
                    Err(format!("fence {high} is not above {low}"))
                };
            }
            "held" => self.held(&args[0]).check().is_ok().to_string(),
            "lost" => {
                let within = ms(args[2].parse().expect("ms"));
                self.held(&args[0]).wait_lost(within).is_some().to_string()
            }
            "server" => self.server(args[0].parse().expect("an index"), &args[1..]),
            "calls" => {
                let index = args[0].parse().expect("an index");
                let info = self.server(index, &["INFO".into(), "commandstats".into()]);
                calls(&info, &args[1]).to_string()
            }
            "waits" | "own-waits" => {
                let index = args[0].parse().expect("an index");
                let info = self.server(index, &["INFO".into(), "commandstats".into()]);
                if words[0] == "waits" {
                    (calls(&info, "wait") + calls(&info, "waitaof")).to_string()
                } else if crate::common::server_kind().can_wait_for_replicas() {
                    calls(&info, "wait").to_string()
                } else {
                    "0".to_string()
                }
            }
            "eventually" => {
                let index = args[0].parse().expect("an index");
                let deadline = Instant::now() + ms(args[args.len() - 1].parse().expect("ms"));
                loop {
                    let got = self.server(index, &args[1..args.len() - 2]);
                    if Some(got.as_str()) == expected || Instant::now() > deadline {
                        break got;
                    }
                    thread::sleep(ms(20));
                }
            }
            "freeze" | "thaw" => {
                self.signal(args[0].parse().expect("an index"), words[0] == "freeze");
                return Ok(None);
            }
            "sleep" => {
                thread::sleep(ms(args[0].parse().expect("ms")));
                return Ok(None);
            }
            "redlock" => self.redlock(args),
            "attempts" => match &self.redlocks[&args[0]] {
                Redlocked::Refused(attempts) => attempts.to_string(),
                Redlocked::Held(..) => "granted".into(),
            },
            "took-between" => return in_range("took", self.took, &args[0..2]),
            "validity-between" => {
                let Redlocked::Held(_, validity) = &self.redlocks[&args[0]] else {
                    return Err("not held".into());
                };
                return in_range("validity", *validity, &args[1..3]);
            }
            "redlock-release" => match self.redlocks.remove(&args[0]) {
                Some(Redlocked::Held(guard, _)) => (guard.release() > 0).to_string(),
                _ => "false".into(),
            },
            other => return Err(format!("unknown step {other}")),
        };
        Ok(Some(outcome))
    }
}

/// How many calls of `command` an `INFO commandstats` reply counts.
fn calls(info: &str, command: &str) -> u64 {
    let prefix = format!("cmdstat_{}:calls=", command.to_lowercase());
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

impl Driver<'_> {
    /// Server 3 a replica of master 0 again, in sync with master 0's flush (a `WAIT 1`
    /// on the connection that flushed answers 1 once the replica has it).
    fn attach_replica(&mut self) {
        let Some(replica) = self.servers.get(3) else {
            return;
        };
        let _: Value = redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(self.servers[0].port)
            .query(&mut replica.connection())
            .expect("REPLICAOF");
        let _: () = redis::cmd("FLUSHALL")
            .query(&mut self.raw[0])
            .expect("FLUSHALL");
        let deadline = Instant::now() + Duration::from_secs(15);
        while redis::cmd("WAIT")
            .arg(1)
            .arg(100)
            .query::<i64>(&mut self.raw[0])
            != Ok(1)
        {
            assert!(
                Instant::now() < deadline,
                "the replica of master 0 did not catch up"
            );
        }
    }
}

impl Drop for Driver<'_> {
    fn drop(&mut self) {
        for index in self.frozen.clone() {
            self.signal(index, false);
        }
    }
}

/// Runs `scenario` with the Rust package: its report line.
pub fn run(scenario: &Scenario, servers: &[TestServer]) -> String {
    if let Some(missing) = scenario
        .needs
        .iter()
        .find(|n| !["redlock", "watchdog"].contains(&n.as_str()))
    {
        return format!("skip {}: the rust package has no {missing}", scenario.name);
    }
    for server in &servers[..3] {
        let _: () = redis::cmd("FLUSHALL")
            .query(&mut server.connection())
            .expect("FLUSHALL");
    }
    let mut driver = Driver::new(servers);
    driver.attach_replica();
    for step in &scenario.steps {
        let expected = step.expected(
            "rust",
            !crate::common::server_kind().can_wait_for_replicas(),
        );
        let started = Instant::now();
        let outcome = driver.step(&step.words, expected);
        driver.took = started.elapsed();
        match (outcome, expected) {
            (Err(why), _) => return format!("FAIL {}: {}: {why}", scenario.name, step.text),
            (Ok(Some(got)), Some(expected)) if !matches(&got, expected) => {
                return format!(
                    "FAIL {}: {}: expected {expected}, got {got}",
                    scenario.name, step.text
                );
            }
            (Ok(None), Some(expected)) => {
                return format!(
                    "FAIL {}: {}: expected {expected}, got nothing",
                    scenario.name, step.text
                );
            }
            _ => {}
        }
    }
    format!("ok {}", scenario.name)
}
