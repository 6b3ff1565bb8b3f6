//! Scenario 8: what `WAIT 1` adds to an acquire. A master (with the module) and one
//! replica of it (with the module too, to apply the replicated grants); one client on one
//! connection acquires free locks one at a time, each on a distinct key, and times each
//! acquire from sending to the last reply read: alone, and pipelined with `WAIT 1 1000`
//! on the same connection (the durability recipe of docs/cluster-and-durability.md). The recipe side does the
//! same with `SET key token NX PX ttl`. Reported: p50 and p99 of each, and the cost of
//! the `WAIT` (with minus without).

use std::io;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::info;
use crate::resp::{Conn, Reply};
use crate::results::{Better, Metric};
use crate::server::{Launch, Server};
use crate::sides::{self, Side};
use crate::stats::percentile;

/// TTL of every lock here: long enough never to expire during a run.
const TTL: &[u8] = b"600000";
/// `WAIT`'s timeout (ms): far above a loopback round trip, so a reply other than 1 means
/// the replica is not acknowledging, which fails the run.
const WAIT_TIMEOUT: &[u8] = b"1000";
/// How long the replica may take to connect and finish its first sync.
const LINK_TIMEOUT: Duration = Duration::from_secs(60);

/// Latency percentiles of one timed run, in microseconds.
struct Latency {
    p50: f64,
    p99: f64,
}

/// The `field:value` lines of `INFO replication` hold `field` with value `value`.
fn replication_says(conn: &mut Conn, field: &str, value: &str) -> io::Result<bool> {
    Ok(info::info(conn, "replication")?
        .get(field)
        .is_some_and(|v| v == value))
}

/// Whether a master's `slave0` line (`ip=...,port=...,state=online,...`) says online.
fn says_online(slave: &str) -> bool {
    slave.split(',').any(|part| part == "state=online")
}

/// Whether the master lists its replica (`slave0`) as online.
fn replica_online(master: &mut Conn) -> io::Result<bool> {
    Ok(info::info(master, "replication")?
        .get("slave0")
        .is_some_and(|v| says_online(v)))
}

/// Polls both servers until the replica's link is up and the master sees it online.
fn wait_for_link(master: &mut Conn, replica: &mut Conn) -> io::Result<()> {
    let deadline = Instant::now() + LINK_TIMEOUT;
    loop {
        if replication_says(replica, "master_link_status", "up")? && replica_online(master)? {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(io::Error::other(format!(
                "the replica did not come online within {} s",
                LINK_TIMEOUT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A master and its replica, both with the module, the link up. The master starts its
/// (diskless) sync at once instead of after the default 5 s delay; nothing else differs
/// from the other scenarios' servers. Both stop when dropped, on success or error.
fn start_pair(cfg: &Config) -> io::Result<(Server, Server)> {
    let master = Server::start(&Launch {
        module: Some(&cfg.module),
        extra: &["--repl-diskless-sync-delay", "0"],
        callgrind: false,
    })?;
    let port = master.port.to_string();
    let replica = Server::start(&Launch {
        module: Some(&cfg.module),
        extra: &["--replicaof", "127.0.0.1", &port],
        callgrind: false,
    })?;
    wait_for_link(&mut master.conn()?, &mut replica.conn()?)?;
    Ok((master, replica))
}

fn wait_error(reply: Reply) -> io::Error {
    io::Error::other(format!(
        "WAIT 1 answered {reply:?}, not 1: the replica did not acknowledge an acquire"
    ))
}

/// Times `n` acquires of `side` on fresh keys, each followed by `WAIT 1` if `wait`.
fn timed_run(
    master: &Server,
    replica: &Server,
    side: Side,
    wait: bool,
    tag: &str,
    n: usize,
) -> io::Result<Latency> {
    let mut admin = master.conn()?;
    admin.cmd(&["FLUSHALL"])?;
    // The replica has applied the flush before the timing starts.
    if admin.cmd(&["WAIT", "1", "5000"])?.int()? != 1 {
        return Err(io::Error::other("the replica did not acknowledge FLUSHALL"));
    }
    let keys: Vec<Vec<u8>> = (0..n)
        .map(|i| format!("durable:{tag}:{i}").into_bytes())
        .collect();
    // The recipe's client brings its token; the module makes its own.
    let tokens: Vec<Option<Vec<u8>>> = (0..n)
        .map(|_| (side == Side::Recipe).then(sides::token))
        .collect();
    let mut conn = master.conn()?;
    let mut nanos = Vec::with_capacity(n);
    for (key, token) in keys.iter().zip(&tokens) {
        let token = token.as_deref();
        let start = Instant::now();
        sides::queue_acquire(&mut conn, side, key, TTL, token);
        if wait {
            conn.queue(&[b"WAIT", b"1", WAIT_TIMEOUT]);
        }
        conn.flush()?;
        let granted = sides::granted(conn.read()?, token)?;
        let acked = if wait { Some(conn.read()?) } else { None };
        nanos.push(start.elapsed().as_nanos() as u64);
        if granted.is_none() {
            return Err(io::Error::other(format!(
                "a free lock was not granted: {}",
                String::from_utf8_lossy(key)
            )));
        }
        if let Some(reply) = acked
            && reply != Reply::Int(1)
        {
            return Err(wait_error(reply));
        }
    }
    if wait {
        // Every grant acknowledged is on the replica.
        let on_replica = replica.conn()?.cmd(&["DBSIZE"])?.int()?;
        if on_replica != n as i64 {
            return Err(io::Error::other(format!(
                "{on_replica} of {n} acknowledged grants on the replica"
            )));
        }
    }
    nanos.sort_unstable();
    Ok(Latency {
        p50: percentile(&nanos, 50.0) / 1e3,
        p99: percentile(&nanos, 99.0) / 1e3,
    })
}

/// Runs scenario 8 on a master and replica of its own.
pub fn run(cfg: &Config) -> io::Result<Vec<Metric>> {
    let (master, replica) = start_pair(cfg)?;
    let n = cfg.durability_acquires;
    let metric = |what: &str, recipe: &str| {
        Metric::new(
            "8. durability",
            &format!("{what}, 1 replica, {n} acquires"),
            "us",
            recipe,
            Better::Lower,
        )
    };
    let mut alone_p50 = metric("acquire latency p50, no WAIT", "SET NX PX");
    let mut alone_p99 = metric("acquire latency p99, no WAIT", "SET NX PX");
    let mut waited_p50 = metric("acquire + WAIT 1 latency p50", "SET NX PX + WAIT 1");
    let mut waited_p99 = metric("acquire + WAIT 1 latency p99", "SET NX PX + WAIT 1");
    let recipe_cost = "WAIT 1 after SET NX PX";
    let mut cost_p50 = metric("cost of WAIT 1 (with - without), p50", recipe_cost);
    let mut cost_p99 = metric("cost of WAIT 1 (with - without), p99", recipe_cost);
    for round in 0..cfg.rounds {
        for side in Side::alternating(round) {
            let tag = format!("{}:{round}", side.tag());
            let alone = timed_run(&master, &replica, side, false, &format!("{tag}:alone"), n)?;
            let waited = timed_run(&master, &replica, side, true, &format!("{tag}:wait"), n)?;
            alone_p50.push(side, alone.p50, None);
            alone_p99.push(side, alone.p99, None);
            waited_p50.push(side, waited.p50, None);
            waited_p99.push(side, waited.p99, None);
            cost_p50.push(side, waited.p50 - alone.p50, None);
            cost_p99.push(side, waited.p99 - alone.p99, None);
        }
    }
    Ok(vec![
        alone_p50, alone_p99, waited_p50, waited_p99, cost_p50, cost_p99,
    ])
}

#[cfg(test)]
mod tests {
    use super::says_online;

    #[test]
    fn a_replica_is_online_only_once_its_sync_is_done() {
        assert!(says_online(
            "ip=127.0.0.1,port=4242,state=online,offset=42,lag=0"
        ));
        assert!(!says_online(
            "ip=127.0.0.1,port=4242,state=wait_bgsave,offset=0,lag=0"
        ));
    }
}
