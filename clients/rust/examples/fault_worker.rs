//! A module worker of the fault harness (`python3 -m faults`, docs/faults.md) written with
//! this package's blocking `Locker`, with its defaults (`Replicas::Auto`: a grant counts
//! once a replica has it): the same rounds as the harness's Python and Node workers (a
//! waiting acquire, plain, session-bound or shared; an extend in every other round; a
//! write through `LOCK.DO`; the release), the same history (JSON lines, times on the
//! machine's monotonic clock) and the same state file. The harness starts it with a
//! preloaded library that binds its connections to its own loopback address, so a
//! partition can cut it alone; it asks the Sentinels for the master.
//!
//! ```sh
//! fault_worker --id N --address A --sentinels a,b,c --service S --port P --keys k1,k2 \
//!     --ttl MS --wait MS --seed N --seconds S --history F --state F [--replicas auto|n]
//! ```

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::thread::sleep;
use std::time::Duration;

use redis::RedisError;
use redis_lock_client::{Lock, LockOptions, Locker, Mode, Replicas, is_not_replicated};

/// The machine's monotonic clock in seconds, the clock every worker's history uses
/// (`std::time::Instant` reads it too, but does not show its value).
fn now() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration, and
    // CLOCK_MONOTONIC is a clock every Linux kernel has.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// mulberry32: the worker's choices, from its seed.
struct Choices(u32);

impl Choices {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x6d2b_79f5);
        let mut t = self.0;
        t = (t ^ (t >> 15)).wrapping_mul(t | 1);
        t ^= t.wrapping_add((t ^ (t >> 7)).wrapping_mul(t | 61));
        f64::from(t ^ (t >> 14)) / 4_294_967_296.0
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[(self.next() * items.len() as f64) as usize % items.len()]
    }

    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next()
    }
}

/// A JSON string literal of `text`.
fn quoted(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON value: a number, a boolean, null or a string.
enum J {
    N(f64),
    B(bool),
    Null,
    S(String),
}

impl J {
    fn text(&self) -> String {
        match self {
            J::N(n) => format!("{n}"),
            J::B(b) => b.to_string(),
            J::Null => "null".into(),
            J::S(s) => quoted(s),
        }
    }

    fn ok(ok: Option<bool>) -> J {
        ok.map_or(J::Null, J::B)
    }

    fn err(err: &Option<String>) -> J {
        err.clone().map_or(J::Null, J::S)
    }
}

/// What a call answered: `ok` None when the server was not reached (or refused as a
/// master no longer), with the reason for the history.
struct Outcome<T> {
    ok: Option<bool>,
    value: Option<T>,
    err: Option<String>,
}

struct Worker {
    o: HashMap<String, String>,
    name: String,
    ttl: Duration,
    wait: Duration,
    replicas: Replicas,
    choices: Choices,
    locker: Option<Locker>,
    master: String,
}

impl Worker {
    fn opt(&self, name: &str) -> &str {
        self.o
            .get(name)
            .unwrap_or_else(|| panic!("--{name} is required"))
    }

    fn log(&self, fields: &[(&str, J)]) {
        let mut line = String::from("{");
        for (name, value) in fields {
            line.push_str(&format!("{}: {}, ", quoted(name), value.text()));
        }
        line.push_str(&format!("\"w\": {}}}\n", quoted(&self.name)));
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.opt("history"))
            .expect("the history file opens");
        file.write_all(line.as_bytes())
            .expect("the history file takes the line");
    }

    fn state(&self, phase: &str, key: Option<&str>, answered_at: f64, mode: Option<&str>) {
        let text = format!(
            "{{\"phase\": {}, \"key\": {}, \"answered_at\": {}, \"mode\": {}}}",
            quoted(phase),
            key.map_or("null".into(), quoted),
            answered_at,
            mode.map_or("null".into(), quoted)
        );
        let path = self.opt("state").to_string();
        fs::write(format!("{path}.new"), text).expect("the state file is written");
        fs::rename(format!("{path}.new"), path).expect("the state file is replaced");
    }

    /// Asks the Sentinels (in a random order) for the master, and makes a locker on it.
    fn connect(&mut self) -> bool {
        let mut sentinels: Vec<String> = self
            .opt("sentinels")
            .split(',')
            .map(str::to_string)
            .collect();
        for i in (1..sentinels.len()).rev() {
            let j = (self.choices.next() * (i + 1) as f64) as usize % (i + 1);
            sentinels.swap(i, j);
        }
        let port = self.opt("port").to_string();
        for sentinel in sentinels {
            if let Some(master) = ask_sentinel(&sentinel, &port, self.opt("service")) {
                let Ok(client) = redis::Client::open(format!("redis://{master}:{port}/")) else {
                    continue;
                };
                // A waiting acquire takes its wait and then this: the longest any call
                // of the worker is allowed before the master counts as unreachable.
                self.locker =
                    Some(Locker::new(client).with_command_timeout(Duration::from_secs(1)));
                self.master = master;
                return true;
            }
        }
        false
    }

    /// `result` as an Outcome; an error that is not the package's own answer drops the
    /// locker (unreachable, READONLY, a broken connection): the next round finds the
    /// master again.
    fn outcome<T>(&mut self, result: Result<T, RedisError>) -> Outcome<T> {
        match result {
            Ok(value) => Outcome {
                ok: Some(true),
                value: Some(value),
                err: None,
            },
            Err(err) if is_not_replicated(&err) => Outcome {
                ok: Some(false),
                value: None,
                err: Some(format!("NOTREPLICATED {err}")),
            },
            Err(err) if err.code() == Some("NOTHELD") => Outcome {
                ok: Some(false),
                value: None,
                err: Some(format!("NOTHELD {err}")),
            },
            Err(err) => {
                self.locker = None;
                Outcome {
                    ok: None,
                    value: None,
                    err: Some(err.to_string()),
                }
            }
        }
    }

    fn round(&mut self) {
        let keys: Vec<String> = self.opt("keys").split(',').map(str::to_string).collect();
        let key = self.choices.pick(&keys).clone();
        let mode = *self.choices.pick(&["plain", "plain", "session", "shared"]);
        let token: String = (0..16)
            .map(|_| format!("{:x}", (self.choices.next() * 16.0) as u32 % 16))
            .collect();
        if self.locker.is_none() && !self.connect() {
            let t = now();
            self.log(&[
                ("op", J::S("acquire".into())),
                ("key", J::S(key)),
                ("mode", J::S(mode.into())),
                ("t0", J::N(t)),
                ("t1", J::N(t)),
                ("ok", J::Null),
                ("err", J::S("no master reachable".into())),
            ]);
            sleep(Duration::from_millis(50));
            return;
        }
        let mut options = LockOptions::new(self.ttl)
            .wait(self.wait)
            .token(token.clone())
            .replicas(self.replicas);
        if mode == "session" {
            options = options.session(Duration::from_millis(200));
        }
        if mode == "shared" {
            options = options.mode(Mode::Shared);
        }
        let locker = self.locker.clone().expect("connected above");
        let t0 = now();
        let result = locker.acquire(&key, &options);
        let t1 = now();
        let got = self.outcome(result);
        let lock: Lock = match (got.ok, got.value) {
            (Some(true), Some(Some(lock))) => lock,
            (ok, _) => {
                // busy after the wait (ok, no lock), not replicated, or unreachable
                let ok = if ok == Some(true) { Some(false) } else { ok };
                self.log(&[
                    ("op", J::S("acquire".into())),
                    ("key", J::S(key)),
                    ("mode", J::S(mode.into())),
                    ("t0", J::N(t0)),
                    ("t1", J::N(t1)),
                    ("ok", J::ok(ok)),
                    ("err", J::err(&got.err)),
                ]);
                if got.err.is_some() {
                    sleep(Duration::from_millis(50));
                }
                return;
            }
        };
        let fence = lock.fence();
        self.log(&[
            ("op", J::S("acquire".into())),
            ("key", J::S(key.clone())),
            ("mode", J::S(mode.into())),
            ("t0", J::N(t0)),
            ("t1", J::N(t1)),
            ("ok", J::B(true)),
            ("fence", J::N(fence as f64)),
            ("ttl", J::N(self.ttl.as_millis() as f64)),
            ("token", J::S(token)),
            ("server", J::S(self.master.clone())),
        ]);
        self.state("holding", Some(&key), t1, Some(mode));
        let pause = self.choices.uniform(0.1, 0.3) * self.ttl.as_secs_f64();
        if self.choices.next() < 0.5 {
            sleep(Duration::from_secs_f64(pause / 2.0));
            let r0 = now();
            let result = lock.extend(self.ttl);
            let renewed = self.outcome(result);
            let ok = match (renewed.ok, renewed.value) {
                (Some(true), Some(false)) => Some(false),
                (ok, _) => ok,
            };
            self.log(&[
                ("op", J::S("extend".into())),
                ("key", J::S(key.clone())),
                ("fence", J::N(fence as f64)),
                ("t0", J::N(r0)),
                ("t1", J::N(now())),
                ("ok", J::ok(ok)),
                ("err", J::err(&renewed.err)),
            ]);
            sleep(Duration::from_secs_f64(pause / 2.0));
        } else {
            sleep(Duration::from_secs_f64(pause));
        }
        self.state("writing", Some(&key), t1, Some(mode));
        let data = format!("data:{key}");
        let cmd = if mode == "shared" {
            redis::cmd("LLEN").arg(&data).clone()
        } else {
            redis::cmd("RPUSH")
                .arg(&data)
                .arg(format!("{fence}:{}", self.name))
                .clone()
        };
        let w0 = now();
        let result = lock.run::<redis::Value>(&cmd);
        let done = self.outcome(result);
        self.log(&[
            ("op", J::S("do".into())),
            ("key", J::S(key.clone())),
            ("fence", J::N(fence as f64)),
            ("read", J::B(mode == "shared")),
            ("t0", J::N(w0)),
            ("t1", J::N(now())),
            ("ok", J::ok(done.ok)),
            ("err", J::err(&done.err)),
        ]);
        let rest = self.choices.uniform(0.0, 0.1) * self.ttl.as_secs_f64();
        sleep(Duration::from_secs_f64(rest));
        self.state("idle", None, 0.0, None);
        let r0 = now();
        let result = lock.release();
        let released = self.outcome(result);
        self.log(&[
            ("op", J::S("release".into())),
            ("key", J::S(key)),
            ("fence", J::N(fence as f64)),
            ("t0", J::N(r0)),
            ("t1", J::N(now())),
            ("ok", J::B(released.value == Some(true))),
            (
                "err",
                if released.ok.is_none() {
                    J::err(&released.err)
                } else {
                    J::Null
                },
            ),
        ]);
    }
}

/// The master's host a Sentinel names for `service`, or None (unreachable, no answer).
fn ask_sentinel(sentinel: &str, port: &str, service: &str) -> Option<String> {
    let client = redis::Client::open(format!("redis://{sentinel}:{port}/")).ok()?;
    let mut con = client
        .get_connection_with_timeout(Duration::from_millis(500))
        .ok()?;
    con.set_read_timeout(Some(Duration::from_millis(600)))
        .ok()?;
    let reply: Option<Vec<String>> = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(service)
        .query(&mut con)
        .ok()?;
    reply?.into_iter().next()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o: HashMap<String, String> = args
        .chunks(2)
        .map(|pair| {
            (
                pair[0].trim_start_matches("--").to_string(),
                pair.get(1).cloned().unwrap_or_default(),
            )
        })
        .collect();
    let ms = |name: &str| -> Duration {
        Duration::from_millis(o[name].parse().expect("a whole number of milliseconds"))
    };
    let replicas = match o.get("replicas").map(String::as_str) {
        None | Some("auto") => Replicas::Auto,
        Some(n) => Replicas::Exactly(n.parse().expect("--replicas: auto or a number")),
    };
    let mut worker = Worker {
        name: format!("module-{}", o["id"]),
        ttl: ms("ttl"),
        wait: ms("wait"),
        replicas,
        choices: Choices(o["seed"].parse::<u64>().expect("a seed") as u32),
        locker: None,
        master: String::new(),
        o,
    };
    worker.state("idle", None, 0.0, None);
    let deadline = now() + worker.opt("seconds").parse::<f64>().expect("seconds");
    while now() < deadline {
        worker.round();
    }
}
