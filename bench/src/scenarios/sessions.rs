//! Scenario 9: what session-bound locks cost.
//!
//! - A `SESSION` acquire against a plain one: the server's `usec_per_call` of
//!   `lock.acquire` over `ops` acquires of free keys, one at a time on one connection,
//!   the same run alternating which goes first. (Here the "recipe" side is the module's
//!   own plain acquire: the baseline is the lock without a binding.)
//! - The same two acquires in instructions (`processCommand` under callgrind), each
//!   batch on a database of its own so that both sides grow the keyspace alike: unlike
//!   time, which moved by ±20% between runs of one binary on a shared machine, a count
//!   repeats, so the target is judged on it.
//! - A connection's close when it holds no session-bound lock: the server's CPU time per
//!   connect + `PING` + close, with the module loaded against the same server binary
//!   without it. The module hears of every close (the client-change event); for a
//!   connection that bound nothing that is one map lookup.

use std::io;

use crate::config::Config;
use crate::cpu::Meter;
use crate::info;
use crate::resp::Reply;
use crate::results::{Better, Metric, Target};
use crate::scenarios::callgrind::{self, BATCH};
use crate::server::{Launch, Server};
use crate::sides::Side;

const TTL: &[u8] = b"600000";

/// Acquires `ops` free keys on one connection, with `SESSION 0` on the module side; the
/// server's `usec_per_call` of `lock.acquire`.
fn acquire_cost(server: &Server, ops: usize, side: Side) -> io::Result<f64> {
    let mut admin = server.conn()?;
    admin.cmd(&["FLUSHALL"])?;
    admin.cmd(&["CONFIG", "RESETSTAT"])?;
    let mut conn = server.conn()?;
    for i in 0..ops {
        let key = format!("session:{i}");
        let mut args: Vec<&[u8]> = vec![b"LOCK.ACQUIRE", key.as_bytes(), TTL];
        if side == Side::Module {
            args.extend_from_slice(&[b"SESSION", b"0"]);
        }
        match conn.call(&args)?.ok()? {
            Reply::Array(_) => {}
            other => return Err(crate::resp::unexpected("a grant", &other)),
        }
    }
    let cost = info::usec_per_call(&mut admin, "lock.acquire")?;
    // Closing the connection releases its session-bound locks (grace 0): wait until the
    // server has done so, so that the work does not spill into the next measurement.
    drop(conn);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while side == Side::Module && admin.cmd(&["DBSIZE"])?.int()? > 0 {
        if std::time::Instant::now() > deadline {
            return Err(io::Error::other("session-bound locks not released in 60 s"));
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    Ok(cost)
}

/// Instructions per acquire in `processCommand`, over `ops` acquires of free keys on
/// database `db` (empty), pipelined, with `SESSION 0` on the module side.
fn acquire_instructions(server: &Server, ops: usize, side: Side, db: usize) -> io::Result<f64> {
    let mut conn = server.conn()?;
    conn.cmd(&["SELECT", &db.to_string()])?.ok()?;
    let keys: Vec<String> = (0..ops).map(|i| format!("session:{i}")).collect();
    let (_, in_command) = callgrind::measured(server, ops, || {
        for batch in keys.chunks(BATCH) {
            for key in batch {
                let mut args: Vec<&[u8]> = vec![b"LOCK.ACQUIRE", key.as_bytes(), TTL];
                if side == Side::Module {
                    args.extend_from_slice(&[b"SESSION", b"0"]);
                }
                conn.queue(&args);
            }
            conn.flush()?;
            for _ in batch {
                match conn.read()?.ok()? {
                    Reply::Array(_) => {}
                    other => return Err(crate::resp::unexpected("a grant", &other)),
                }
            }
        }
        Ok(())
    })?;
    Ok(in_command)
}

/// Server CPU microseconds per connect + `PING` + close, over `count` of them.
fn close_cost(server: &Server, count: usize) -> io::Result<f64> {
    let mut admin = server.conn()?;
    let meter = Meter::start(&mut admin)?;
    let started = std::time::Instant::now();
    for _ in 0..count {
        let mut conn = server.conn()?;
        conn.call(&[b"PING"])?.ok()?;
    }
    let wall = started.elapsed().as_secs_f64();
    let cpu = meter.stop(&mut admin)?;
    Ok(cpu.server * wall * 1e6 / count as f64)
}

/// Runs scenario 9.
pub fn run(cfg: &Config) -> io::Result<Vec<Metric>> {
    let mut acquire = Metric::new(
        "9. session-bound locks",
        "usec_per_call of LOCK.ACQUIRE ... SESSION 0 (INFO commandstats)",
        "us",
        "LOCK.ACQUIRE without SESSION",
        Better::Lower,
    );
    let mut instructions = Metric::new(
        "9. session-bound locks",
        "instructions per LOCK.ACQUIRE ... SESSION 0 (processCommand, callgrind)",
        "instr",
        "LOCK.ACQUIRE without SESSION",
        Better::Lower,
    )
    .target(Target::RatioAtMost(1.1));
    let closes = cfg.ops / 10;
    let mut close = Metric::new(
        "9. session-bound locks",
        &format!("server CPU per connect+PING+close, no lock held ({closes} connections)"),
        "us",
        "the same server without the module",
        Better::Lower,
    );
    let with_module = Server::start(&Launch {
        module: Some(&cfg.module),
        extra: &[],
        callgrind: false,
    })?;
    let bare = Server::start(&Launch {
        module: None,
        extra: &[],
        callgrind: false,
    })?;
    for round in 0..cfg.rounds {
        for side in Side::alternating(round) {
            acquire.push(side, acquire_cost(&with_module, cfg.ops, side)?, None);
            let server = match side {
                Side::Module => &with_module,
                Side::Recipe => &bare,
            };
            close.push(side, close_cost(server, closes)?, None);
        }
    }
    let mut metrics = vec![acquire, close];
    if callgrind::available() {
        let server = Server::start(&Launch {
            module: Some(&cfg.module),
            extra: &[],
            callgrind: true,
        })?;
        let mut db = 0;
        for round in 0..cfg.rounds.min(3) {
            for side in Side::alternating(round) {
                db += 1;
                let cost = acquire_instructions(&server, cfg.callgrind_ops, side, db)?;
                instructions.push(side, cost, None);
            }
        }
        metrics.insert(1, instructions);
    }
    Ok(metrics)
}
