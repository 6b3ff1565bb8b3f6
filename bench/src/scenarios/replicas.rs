//! Scenario 14: what the packages' failover-safe default costs (docs/clients.md,
//! "Failover-safe by default"). A master with one replica, then with two (all with the
//! module); one client of the Rust package (`redis-lock-client`'s blocking `Locker`)
//! acquires free locks one at a time, each on a distinct key, with `replicas` `auto`
//! (the default: a grant goes with `WAIT 1` in the same round trip) and with it off
//! (`Exactly(0)`), and releases each (untimed). It talks to the master through a proxy
//! of this process that counts round trips: each time the client sends after the server
//! has answered. Reported per setting: acquire latency p50 and p99, and round trips per
//! acquire (the `ROLE` that learns the replicas once per connection included). In the
//! report's columns, "module" is `auto` and the other side is the same package with
//! `replicas` off.
//!
//! Then, with one replica, the server's own wait against the client's: a raw client
//! acquires free locks one at a time with `LOCK.ACQUIRE key ttl REPLICAS 1` (the server
//! holds the reply until the replica acknowledged the grant) and, on the other side, with
//! `LOCK.ACQUIRE key ttl` and `WAIT 1 1000` pipelined on the same connection (the
//! recipe the packages use on Redis 7.0); both straight to the master, one round trip
//! each. On a server that cannot wait (Redis 7.0) this part is skipped.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redis_lock_client::{LockOptions, Locker, Replicas};

use crate::config::Config;
use crate::info;
use crate::results::{Better, Metric};
use crate::server::{Launch, Server};
use crate::sides::Side;
use crate::stats::percentile;

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
    Ok((master, started))
}

/// Latency p50 and p99 (µs) and round trips per acquire of `n` acquires with `replicas`.
fn timed(proxy: &Proxy, replicas: Replicas, tag: &str, n: usize) -> io::Result<(f64, f64, f64)> {
    let client = redis_lock_client_client(proxy.port)?;
    let locker = Locker::new(client);
    let options = LockOptions::new(Duration::from_secs(600)).replicas(replicas);
    let mut nanos = Vec::with_capacity(n);
    let mut trips = 0;
    for i in 0..n {
        let key = format!("replicas:{tag}:{i}");
        let before = proxy.round_trips();
        let start = Instant::now();
        let lock = locker.acquire(&key, &options).map_err(io::Error::other)?;
        nanos.push(start.elapsed().as_nanos() as u64);
        trips += proxy.round_trips() - before;
        let lock =
            lock.ok_or_else(|| io::Error::other(format!("{key}: a free lock not granted")))?;
        lock.release().map_err(io::Error::other)?;
    }
    nanos.sort_unstable();
    Ok((
        percentile(&nanos, 50.0) / 1e3,
        percentile(&nanos, 99.0) / 1e3,
        trips as f64 / n as f64,
    ))
}

/// Latency p50 and p99 (µs) of `n` raw acquires on `port`: with `REPLICAS 1`
/// (`server_side`) or pipelined with `WAIT 1 1000`.
fn raw_timed(port: u16, server_side: bool, tag: &str, n: usize) -> io::Result<(f64, f64)> {
    let mut con = redis_lock_client_client(port)?
        .get_connection()
        .map_err(io::Error::other)?;
    let mut nanos = Vec::with_capacity(n);
    for i in 0..n {
        let key = format!("raw:{tag}:{i}");
        let mut acquire = redis::cmd("LOCK.ACQUIRE");
        acquire.arg(&key).arg(600_000);
        let start = Instant::now();
        let granted: Option<(Vec<u8>, i64)> = if server_side {
            acquire.arg("REPLICAS").arg(1).arg("REPLTIMEOUT").arg(1000);
            acquire.query(&mut con).map_err(io::Error::other)?
        } else {
            let (granted, acked): (Option<(Vec<u8>, i64)>, i64) = redis::pipe()
                .add_command(acquire)
                .cmd("WAIT")
                .arg(1)
                .arg(1000)
                .query(&mut con)
                .map_err(io::Error::other)?;
            if acked < 1 {
                return Err(io::Error::other(format!("{key}: WAIT answered {acked}")));
            }
            granted
        };
        nanos.push(start.elapsed().as_nanos() as u64);
        let (token, _) = granted.ok_or_else(|| io::Error::other(format!("{key}: not granted")))?;
        let _: i64 = redis::cmd("LOCK.RELEASE")
            .arg(&key)
            .arg(token)
            .query(&mut con)
            .map_err(io::Error::other)?;
    }
    nanos.sort_unstable();
    Ok((
        percentile(&nanos, 50.0) / 1e3,
        percentile(&nanos, 99.0) / 1e3,
    ))
}

/// Whether the server takes `REPLICAS` (Redis 7.2+, Valkey).
fn server_waits(port: u16) -> io::Result<bool> {
    let mut con = redis_lock_client_client(port)?
        .get_connection()
        .map_err(io::Error::other)?;
    let reply: redis::RedisResult<Option<(Vec<u8>, i64)>> = redis::cmd("LOCK.ACQUIRE")
        .arg("raw:probe")
        .arg(1)
        .arg("REPLICAS")
        .arg(1)
        .query(&mut con);
    Ok(reply.is_ok())
}

fn redis_lock_client_client(port: u16) -> io::Result<redis::Client> {
    redis::Client::open(format!("redis://127.0.0.1:{port}/")).map_err(io::Error::other)
}

/// Runs scenario 14: one replica, then two.
pub fn run(cfg: &Config) -> io::Result<Vec<Metric>> {
    let n = cfg.durability_acquires;
    let mut metrics = Vec::new();
    for replicas in [1, 2] {
        let (master, _replicas) = start(cfg, replicas)?;
        let proxy = Proxy::start(master.port)?;
        let metric = |what: &str, unit: &str| {
            Metric::new(
                "14. replicas (Rust package)",
                &format!("{what}, {replicas} replica(s), {n} acquires, replicas auto"),
                unit,
                "replicas off",
                Better::Lower,
            )
        };
        let mut p50 = metric("acquire latency p50", "us");
        let mut p99 = metric("acquire latency p99", "us");
        let mut trips = metric("round trips per acquire", "round trips");
        for round in 0..cfg.rounds {
            for side in Side::alternating(round) {
                let setting = match side {
                    Side::Module => Replicas::Auto,
                    Side::Recipe => Replicas::Exactly(0),
                };
                let tag = format!("{replicas}:{}:{round}", side.tag());
                let (lo, hi, rt) = timed(&proxy, setting, &tag, n)?;
                p50.push(side, lo, None);
                p99.push(side, hi, None);
                trips.push(side, rt, None);
            }
        }
        metrics.extend([p50, p99, trips]);
        if replicas == 1 && server_waits(master.port)? {
            let metric = |what: &str| {
                Metric::new(
                    "14. replicas (raw client)",
                    &format!("{what}, 1 replica, {n} acquires, REPLICAS 1 (the server waits)"),
                    "us",
                    "pipelined WAIT 1",
                    Better::Lower,
                )
            };
            let (mut p50, mut p99) = (metric("acquire latency p50"), metric("acquire latency p99"));
            for round in 0..cfg.rounds {
                for side in Side::alternating(round) {
                    let tag = format!("{}:{round}", side.tag());
                    let (lo, hi) = raw_timed(master.port, side == Side::Module, &tag, n)?;
                    p50.push(side, lo, None);
                    p99.push(side, hi, None);
                }
            }
            metrics.extend([p50, p99]);
        }
    }
    Ok(metrics)
}
