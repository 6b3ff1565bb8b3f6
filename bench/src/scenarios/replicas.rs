//! Scenario 14: what the packages' failover-safe default costs (docs/clients.md,
//! "Failover-safe by default"). A master with one replica, then with two (all with the
//! module); one client of the Rust package (`redis-lock-client`'s blocking `Locker`)
//! acquires free locks one at a time, each on a distinct key, with `replicas` `auto`
//! (the default: `REPLICAS AUTO`, the server holds the reply until a replica has the
//! grant; on Redis 7.0 the package's own `WAIT 1` in the same round trip) and with it off
//! (`Exactly(0)`), and releases each (untimed). Timed straight to the master; the round
//! trips per acquire are counted apart, through a proxy of this process (each time the
//! client sends after the server has answered), on fewer acquires, untimed (the proxy's
//! two more loopback hops would be in the latency). In the report's columns, "module"
//! is `auto` and the other side is the same package with `replicas` off.
//!
//! Then, with one replica, the server's own wait against the client's: a raw client
//! acquires free locks one at a time with `LOCK.ACQUIRE key ttl REPLICAS 1` (the server
//! holds the reply until the replica acknowledged the grant) and, on the other side, with
//! `LOCK.ACQUIRE key ttl` and `WAIT 1 1000` pipelined on the same connection (the
//! recipe the packages use on Redis 7.0); both straight to the master, one round trip
//! each. And what the package adds to the server's wait: the package with its defaults
//! against that raw `REPLICAS 1`, in the same rounds; and so each of the other packages
//! (Python on redis-py, Node on ioredis, PHP on phpredis), by its driver in
//! `bench/drivers/`, against a raw `REPLICAS 1` on the same client library (what `make
//! deps-test` installs; a package whose driver cannot run is left out, with a line that
//! says why). The sides take turns in stretches of 100 acquires, so that all meet the
//! same state of the machine: on a 2-core virtual machine a round trip's latency shifts
//! by 15 us from one second to the next (its idle CPUs go through the guest's
//! `haltpoll` driver), and in blocks of 5,000 a side the same Python package
//! measured 1.02x to 1.07x from run to run. On a server that cannot wait (Redis 7.0)
//! these parts are skipped.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redis_lock_client::{LockOptions, Locker, Replicas};

use crate::config::Config;
use crate::info;
use crate::results::{Better, Metric, Target};
use crate::server::{Launch, Server};
use crate::sides::Side;
use crate::stats::percentile;

/// The acquires a side makes before the next side's turn, in the comparisons with the
/// server's wait (and in the drivers, `bench/drivers/`).
const STRETCH: usize = 100;

/// How long the replicas may take to connect and finish their first sync.
const LINK_TIMEOUT: Duration = Duration::from_secs(60);

/// A TCP proxy to one server that counts round trips: a client's bytes that follow the
/// server's (or come first) start a new one.
struct Proxy {
    port: u16,
    round_trips: Arc<AtomicU64>,
}

impl Proxy {
    fn start(target: u16) -> io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let round_trips = Arc::new(AtomicU64::new(0));
        let counter = round_trips.clone();
        thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                // true once the server spoke last: the client's next bytes are a new trip
                let answered = Arc::new(AtomicBool::new(true));
                let pipe = |mut from: TcpStream, mut to: TcpStream, upstream: bool| {
                    let (answered, counter) = (answered.clone(), counter.clone());
                    thread::spawn(move || {
                        let mut buf = [0u8; 16 * 1024];
                        loop {
                            let n = match from.read(&mut buf) {
                                Ok(0) => break,
                                Ok(n) => n,
                                // a signal, not the end of the stream: read again
                                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {
                                    continue;
                                }
                                Err(_) => break,
                            };
                            if upstream && answered.swap(false, Ordering::SeqCst) {
                                counter.fetch_add(1, Ordering::SeqCst);
                            }
                            if !upstream {
                                answered.store(true, Ordering::SeqCst);
                            }
                            if to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(Shutdown::Write);
                    });
                };
                if let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) {
                    pipe(client, s2, true);
                    pipe(server, c2, false);
                }
            }
        });
        Ok(Proxy { port, round_trips })
    }

    fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::SeqCst)
    }
}

/// A master with `replicas` replicas, all with the module, each replica online.
fn start(cfg: &Config, replicas: usize) -> io::Result<(Server, Vec<Server>)> {
    let master = Server::start(&Launch {
        module: Some(&cfg.module),
        extra: &["--repl-diskless-sync-delay", "0"],
        callgrind: false,
    })?;
    let port = master.port.to_string();
    let mut started = Vec::new();
    for _ in 0..replicas {
        started.push(Server::start(&Launch {
            module: Some(&cfg.module),
            extra: &["--replicaof", "127.0.0.1", &port],
            callgrind: false,
        })?);
    }
    let deadline = Instant::now() + LINK_TIMEOUT;
    let mut admin = master.conn()?;
    loop {
        let online = info::info(&mut admin, "replication")?
            .iter()
            .filter(|(field, value)| field.starts_with("slave") && value.contains("state=online"))
            .count();
        if online == replicas {
            break;
        }
        if Instant::now() > deadline {
            return Err(io::Error::other("the replicas did not come online"));
        }
        thread::sleep(Duration::from_millis(20));
    }
    // Online is not yet acknowledging: a replica just past its sync acknowledges nothing
    // for a while (about a second on Valkey), and a grant then falls short. Timed
    // acquires start once every replica acknowledged a write.
    let count = replicas.to_string();
    loop {
        admin.call(&[b"SET", b"bench:replicas:sync", b"1"])?.ok()?;
        let acked = admin.call(&[b"WAIT", count.as_bytes(), b"100"])?.int()?;
        admin.call(&[b"DEL", b"bench:replicas:sync"])?.ok()?;
        if acked >= replicas as i64 {
            return Ok((master, started));
        }
        if Instant::now() > deadline {
            return Err(io::Error::other("the replicas did not acknowledge a write"));
        }
    }
}

/// The Rust package's options with `replicas`, a TTL no acquire outlives.
fn options(replicas: Replicas) -> LockOptions {
    LockOptions::new(Duration::from_secs(600)).replicas(replicas)
}

/// One acquire of free `key` by the package, released (untimed) once timed: its latency
/// (ns).
fn package_acquire(locker: &Locker, key: &str, options: &LockOptions) -> io::Result<u64> {
    let start = Instant::now();
    let lock = locker.acquire(key, options).map_err(io::Error::other)?;
    let nanos = start.elapsed().as_nanos() as u64;
    let lock = lock.ok_or_else(|| io::Error::other(format!("{key}: a free lock not granted")))?;
    lock.release().map_err(io::Error::other)?;
    Ok(nanos)
}

/// Latency p50 and p99 (µs) of `n` acquires by the package with `options`, straight to
/// the server on `port`.
fn timed(port: u16, options: &LockOptions, tag: &str, n: usize) -> io::Result<(f64, f64)> {
    let locker = Locker::new(redis_lock_client_client(port)?);
    let mut nanos = Vec::with_capacity(n);
    for i in 0..n {
        nanos.push(package_acquire(
            &locker,
            &format!("replicas:{tag}:{i}"),
            options,
        )?);
    }
    Ok(p50_p99(nanos))
}

/// Round trips per acquire of `n` acquires by the package with `replicas`, through
/// `proxy` (the first, which opens the connection, included).
fn round_trips(proxy: &Proxy, replicas: Replicas, tag: &str, n: usize) -> io::Result<f64> {
    let locker = Locker::new(redis_lock_client_client(proxy.port)?);
    let options = options(replicas);
    let mut trips = 0;
    for i in 0..n {
        let before = proxy.round_trips();
        let lock = locker
            .acquire(format!("trips:{tag}:{i}"), &options)
            .map_err(io::Error::other)?
            .ok_or_else(|| io::Error::other("a free lock not granted"))?;
        trips += proxy.round_trips() - before;
        lock.release().map_err(io::Error::other)?;
    }
    Ok(trips as f64 / n as f64)
}

/// p50 and p99 (µs) of latencies in ns.
fn p50_p99(mut nanos: Vec<u64>) -> (f64, f64) {
    nanos.sort_unstable();
    (
        percentile(&nanos, 50.0) / 1e3,
        percentile(&nanos, 99.0) / 1e3,
    )
}

/// One raw acquire of free `key` on `con`: with `REPLICAS 1` (`server_side`) or
/// pipelined with `WAIT 1 1000`; released (untimed) once timed. Its latency (ns).
fn raw_acquire(con: &mut redis::Connection, key: &str, server_side: bool) -> io::Result<u64> {
    // Timed from before the command is built, as the drivers' raw sides and the package
    // (which builds its own inside `acquire`) are.
    let start = Instant::now();
    let mut acquire = redis::cmd("LOCK.ACQUIRE");
    acquire.arg(key).arg(600_000);
    let granted: Option<(Vec<u8>, i64)> = if server_side {
        acquire.arg("REPLICAS").arg(1).arg("REPLTIMEOUT").arg(1000);
        acquire.query(con).map_err(io::Error::other)?
    } else {
        let (granted, acked): (Option<(Vec<u8>, i64)>, i64) = redis::pipe()
            .add_command(acquire)
            .cmd("WAIT")
            .arg(1)
            .arg(1000)
            .query(con)
            .map_err(io::Error::other)?;
        if acked < 1 {
            return Err(io::Error::other(format!("{key}: WAIT answered {acked}")));
        }
        granted
    };
    let nanos = start.elapsed().as_nanos() as u64;
    let (token, _) = granted.ok_or_else(|| io::Error::other(format!("{key}: not granted")))?;
    let _: i64 = redis::cmd("LOCK.RELEASE")
        .arg(key)
        .arg(token)
        .query(con)
        .map_err(io::Error::other)?;
    Ok(nanos)
}

/// Whether the server takes `REPLICAS` (Redis 7.2+, Valkey).
fn server_waits(port: u16) -> io::Result<bool> {
    let mut con = redis_lock_client_client(port)?
        .get_connection()
        .map_err(io::Error::other)?;
    // A grant that fell short (NOTREPLICATED) was held for the replica all the same: only
    // a refusal of the option says the server cannot wait. (A 1 ms TTL's default wait of
    // 1 ms fell short now and then, and the comparisons were left out unsaid.)
    let reply: redis::RedisResult<Option<(Vec<u8>, i64)>> = redis::cmd("LOCK.ACQUIRE")
        .arg("raw:probe")
        .arg(1000)
        .arg("REPLICAS")
        .arg(1)
        .arg("REPLTIMEOUT")
        .arg(1000)
        .query(&mut con);
    Ok(match reply {
        Ok(_) => true,
        Err(err) => err.code() == Some("NOTREPLICATED"),
    })
}

fn redis_lock_client_client(port: u16) -> io::Result<redis::Client> {
    redis::Client::open(format!("redis://127.0.0.1:{port}/")).map_err(io::Error::other)
}

/// How many acquires the round trips are counted on.
const COUNTED: usize = 200;

/// Runs scenario 14: one replica, then two.
pub fn run(cfg: &Config) -> io::Result<Vec<Metric>> {
    let n = cfg.durability_acquires;
    let mut metrics = Vec::new();
    for replicas in [1, 2] {
        let (master, _replicas) = start(cfg, replicas)?;
        let metric = |what: &str, unit: &str| {
            Metric::new(
                "14. replicas (Rust package)",
                &format!("{what}, {replicas} replica(s), replicas auto"),
                unit,
                "replicas off",
                Better::Lower,
            )
        };
        let mut p50 = metric(&format!("acquire latency p50, {n} acquires"), "us");
        let mut p99 = metric(&format!("acquire latency p99, {n} acquires"), "us");
        let mut trips = metric(
            &format!("round trips per acquire, {} acquires", n.min(COUNTED)),
            "round trips",
        );
        let proxy = Proxy::start(master.port)?;
        for round in 0..cfg.rounds {
            for side in Side::alternating(round) {
                let setting = match side {
                    Side::Module => Replicas::Auto,
                    Side::Recipe => Replicas::Exactly(0),
                };
                let tag = format!("{replicas}:{}:{round}", side.tag());
                let (lo, hi) = timed(master.port, &options(setting), &tag, n)?;
                p50.push(side, lo, None);
                p99.push(side, hi, None);
                trips.push(
                    side,
                    round_trips(&proxy, setting, &tag, n.min(COUNTED))?,
                    None,
                );
            }
        }
        metrics.extend([p50, p99, trips]);
        if replicas == 1 {
            if server_waits(master.port)? {
                metrics.extend(server_wait(cfg, master.port)?);
            } else {
                eprintln!(
                    "redis-lock-bench: scenario 14: the server refuses REPLICAS (it cannot wait): the comparisons with its wait are left out"
                );
            }
        }
    }
    Ok(metrics)
}

/// The three runs of a round with the server's wait.
enum Run {
    /// A raw client's `REPLICAS 1`.
    Raw,
    /// A raw client's acquire with `WAIT 1` pipelined.
    Wait,
    /// The package with its defaults.
    Package,
}

impl Run {
    /// The run's part of its keys' names.
    fn tag(&self) -> &'static str {
        match self {
            Run::Raw => "server",
            Run::Wait => "wait",
            Run::Package => "package",
        }
    }
}

/// With one replica on a server that waits: the raw `REPLICAS 1` against a pipelined
/// `WAIT 1`, and the package with its defaults against the raw `REPLICAS 1`, in the same
/// rounds.
fn server_wait(cfg: &Config, port: u16) -> io::Result<Vec<Metric>> {
    let n = cfg.durability_acquires;
    let raw = |what: &str| {
        Metric::new(
            "14. replicas (raw client)",
            &format!("{what}, 1 replica, {n} acquires, REPLICAS 1 (the server waits)"),
            "us",
            "pipelined WAIT 1",
            Better::Lower,
        )
    };
    let package = |what: &str, at_most: f64| {
        Metric::new(
            "14. replicas (Rust package, defaults)",
            &format!("{what}, 1 replica, {n} acquires, the package's defaults"),
            "us",
            "raw REPLICAS 1",
            Better::Lower,
        )
        .target(Target::RatioAtMost(at_most))
    };
    let (mut raw_p50, mut raw_p99) = (
        raw("acquire latency p50").target(Target::RatioAtMost(1.10)),
        raw("acquire latency p99").target(Target::RatioAtMost(1.05)),
    );
    let (mut pkg_p50, mut pkg_p99) = (
        package("acquire latency p50", 1.05),
        package("acquire latency p99", 1.05),
    );
    let defaults = LockOptions::new(Duration::from_secs(600));
    let mut con = redis_lock_client_client(port)?
        .get_connection()
        .map_err(io::Error::other)?;
    let locker = Locker::new(redis_lock_client_client(port)?);
    for round in 0..cfg.rounds {
        // The three take turns in stretches of `STRETCH` acquires (so that all meet the
        // same state of the machine, each acquire after its own side's release), in an
        // order that turns from round to round.
        let mut order = [Run::Raw, Run::Wait, Run::Package];
        order.rotate_left(round % 3);
        let (mut raw, mut wait, mut package) = (Vec::new(), Vec::new(), Vec::new());
        for start in (0..n).step_by(STRETCH) {
            for run in &order {
                for i in start..n.min(start + STRETCH) {
                    let key = format!("{}:{round}:{i}", run.tag());
                    match run {
                        Run::Raw => raw.push(raw_acquire(&mut con, &key, true)?),
                        Run::Wait => wait.push(raw_acquire(&mut con, &key, false)?),
                        Run::Package => package.push(package_acquire(&locker, &key, &defaults)?),
                    }
                }
            }
        }
        let ((raw_lo, raw_hi), (wait_lo, wait_hi), (pkg_lo, pkg_hi)) =
            (p50_p99(raw), p50_p99(wait), p50_p99(package));
        raw_p50.push(Side::Module, raw_lo, None);
        raw_p99.push(Side::Module, raw_hi, None);
        raw_p50.push(Side::Recipe, wait_lo, None);
        raw_p99.push(Side::Recipe, wait_hi, None);
        pkg_p50.push(Side::Recipe, raw_lo, None);
        pkg_p99.push(Side::Recipe, raw_hi, None);
        pkg_p50.push(Side::Module, pkg_lo, None);
        pkg_p99.push(Side::Module, pkg_hi, None);
    }
    let mut metrics = vec![raw_p50, raw_p99, pkg_p50, pkg_p99];
    for driver in Driver::ALL {
        match driver.run(port, n, cfg.rounds) {
            Ok(mut runs) => metrics.append(&mut runs),
            Err(err) => eprintln!(
                "redis-lock-bench: scenario 14: the {} package left out: {err}",
                driver.package
            ),
        }
    }
    Ok(metrics)
}

/// A package's driver in `bench/drivers/`: its acquires with the package's defaults
/// against a raw `REPLICAS 1` on the same client library.
struct Driver {
    /// How the driver runs.
    runs: Runs,
    /// The package, as the report names it.
    package: &'static str,
    /// The client library both sides use.
    library: &'static str,
}

impl Driver {
    const ALL: [Driver; 3] = [
        Driver {
            runs: Runs::Python,
            package: "Python",
            library: "redis-py",
        },
        Driver {
            runs: Runs::Node,
            package: "Node",
            library: "ioredis",
        },
        Driver {
            runs: Runs::Php,
            package: "PHP",
            library: "phpredis",
        },
    ];

    /// The command that runs the driver on `port`: `n` acquires a side, `rounds` rounds.
    fn command(&self, port: u16, n: usize, rounds: usize) -> Command {
        let root = workspace_root();
        let drivers = root.join("bench/drivers");
        let args = [port.to_string(), n.to_string(), rounds.to_string()];
        match self.runs {
            Runs::Python => {
                let mut c = Command::new(redis_lock_testkit::python());
                c.arg(drivers.join("replicas.py"))
                    .args(args)
                    .env("PYTHONPATH", root.join("clients/python/src"));
                c
            }
            Runs::Node => {
                let mut c = Command::new("node");
                c.arg(drivers.join("replicas.cjs")).arg(&root).args(args);
                c
            }
            Runs::Php => {
                let mut c = Command::new("php");
                c.arg(drivers.join("replicas.php")).arg(&root).args(args);
                c
            }
        }
    }

    /// Runs the driver: its p50 and p99 metrics, the package against the raw command.
    fn run(&self, port: u16, n: usize, rounds: usize) -> io::Result<Vec<Metric>> {
        let out = self.command(port, n, rounds).output()?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(io::Error::other(format!("{}: {}", out.status, err.trim())));
        }
        let metric = |what: &str| {
            Metric::new(
                &format!("14. replicas ({} package, defaults)", self.package),
                &format!("{what}, 1 replica, {n} acquires, the package's defaults"),
                "us",
                &format!("raw REPLICAS 1 ({})", self.library),
                Better::Lower,
            )
            .target(Target::RatioAtMost(1.05))
        };
        let (mut p50, mut p99) = (metric("acquire latency p50"), metric("acquire latency p99"));
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let mut words = line.split_whitespace();
            let side = match words.next() {
                Some("package") => Side::Module,
                Some("raw") => Side::Recipe,
                _ => return Err(io::Error::other(format!("a line not understood: {line}"))),
            };
            let nanos: Vec<u64> = words
                .map(str::parse)
                .collect::<Result<_, _>>()
                .map_err(io::Error::other)?;
            let (lo, hi) = p50_p99(nanos);
            p50.push(side, lo, None);
            p99.push(side, hi, None);
        }
        Ok(vec![p50, p99])
    }
}

/// The interpreter a driver runs in.
enum Runs {
    /// The tests' virtualenv (redis-py), the package from its source.
    Python,
    /// node, ioredis from the Node package's `node_modules`.
    Node,
    /// php with phpredis.
    Php,
}

/// The repository's root.
fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}
