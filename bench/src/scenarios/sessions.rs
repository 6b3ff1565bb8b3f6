//! Scenario 9: what session-bound locks cost.
//!
//! - A `SESSION` acquire against a plain one: the server's `usec_per_call` of
//!   `lock.acquire` in many short turns (`acquire_times`). (Here the "recipe" side is
//!   the module's own plain acquire: the baseline is the lock without a binding.)
//! - The same two acquires in instructions (`processCommand` under callgrind), each
//!   batch on a database of its own so that both sides grow the keyspace alike: a count
//!   repeats exactly, where time does not. Both carry the 1.1x target.
//! - A connection's close when it holds no session-bound lock: the server's CPU time per
//!   connect + `PING` + close, with the module loaded against the same server binary
//!   without it. The module hears of every close (the client-change event); for a
//!   connection that bound nothing that is one map lookup.
//! - A connection's close when it holds many (`session_close.rs`).

use std::io;

use crate::config::Config;
use crate::cpu::{self, Meter};
use crate::info;
use crate::resp::{Conn, Reply};
use crate::results::{Better, Metric, Target};
use crate::scenarios::instructions::{self, BATCH};
use crate::scenarios::session_close;
use crate::server::{Launch, Server};
use crate::sides::Side;

const TTL: &[u8] = b"600000";

/// The acquires of one side in the time measurement: its own connection, on its own
/// database, each key new; the keys of its last turn, for `clear` to delete.
struct Acquirer {
    conn: Conn,
    side: Side,
    next: usize,
    held: Vec<String>,
}

impl Acquirer {
    fn new(server: &Server, side: Side, db: &str) -> io::Result<Acquirer> {
        let mut conn = server.conn()?;
        conn.cmd(&["SELECT", db])?.ok()?;
        Ok(Acquirer {
            conn,
            side,
            next: 0,
            held: Vec::new(),
        })
    }

    /// Deletes the keys of its last turn, pipelined `BATCH` at a time.
    fn clear(&mut self) -> io::Result<()> {
        for batch in self.held.chunks(BATCH) {
            let mut args: Vec<&[u8]> = vec![b"DEL"];
            args.extend(batch.iter().map(|key| key.as_bytes()));
            let deleted = self.conn.call(&args)?.ok()?.int()?;
            if deleted != batch.len() as i64 {
                return Err(io::Error::other(format!(
                    "DEL removed {deleted} of {} locks",
                    batch.len()
                )));
            }
        }
        self.held.clear();
        Ok(())
    }

    /// `ops` acquires of new keys, pipelined `BATCH` at a time.
    fn acquire(&mut self, ops: usize) -> io::Result<()> {
        let mut left = ops;
        while left > 0 {
            let batch = left.min(BATCH);
            for _ in 0..batch {
                self.next += 1;
                let key = format!("session:{}", self.next);
                let mut args: Vec<&[u8]> = vec![b"LOCK.ACQUIRE", key.as_bytes(), TTL];
                if self.side == Side::Module {
                    args.extend_from_slice(&[b"SESSION", b"0"]);
                }
                self.conn.queue(&args);
                self.held.push(key);
            }
            self.conn.flush()?;
            for _ in 0..batch {
                match self.conn.read()?.ok()? {
                    Reply::Array(_) => {}
                    other => return Err(crate::resp::unexpected("a grant", &other)),
                }
            }
            left -= batch;
        }
        Ok(())
    }
}

/// Server time per acquire, `SESSION 0` (module side) against plain: `chunks` short
/// measurements of `ops` acquires each, the sides taking turns (which goes first
/// alternates), each after deleting the side's keys of its last turn and resetting the
/// counters; one `usec_per_call` of `lock.acquire` per chunk. Turns of a fraction of a
/// second put both sides through the same moments of a shared machine, where whole
/// rounds one after the other differed by ±20%. The load generator and the server's
/// main thread run on separate cores. The keys are deleted, as releases would, not
/// flushed: a `FLUSHALL` hands the freed memory back to the kernel (jemalloc's purge),
/// so that every turn would fault in fresh pages, a cost of a server's first fill and
/// not of one in service (docs/sessions.md gives that figure too).
fn acquire_times(
    server: &Server,
    chunks: usize,
    ops: usize,
    metric: &mut Metric,
) -> io::Result<()> {
    let pinned = cpu::cores() >= 2 && cpu::pin(server.pid(), 1) && cpu::pin(0, 0);
    let result = (|| {
        let mut admin = server.conn()?;
        let mut plain = Acquirer::new(server, Side::Recipe, "1")?;
        let mut bound = Acquirer::new(server, Side::Module, "2")?;
        for chunk in 0..chunks {
            for side in Side::alternating(chunk) {
                let acquirer = match side {
                    Side::Module => &mut bound,
                    Side::Recipe => &mut plain,
                };
                acquirer.clear()?;
                admin.cmd(&["CONFIG", "RESETSTAT"])?.ok()?;
                acquirer.acquire(ops)?;
                metric.push(side, info::usec_per_call(&mut admin, "lock.acquire")?, None);
            }
        }
        Ok(())
    })();
    if pinned {
        cpu::unpin();
    }
    result
}

/// Instructions per acquire in `processCommand`, over `ops` acquires of free keys on
/// database `db` (empty), pipelined, with `SESSION 0` on the module side.
fn acquire_instructions(server: &Server, ops: usize, side: Side, db: usize) -> io::Result<f64> {
    let mut conn = server.conn()?;
    conn.cmd(&["SELECT", &db.to_string()])?.ok()?;
    let keys: Vec<String> = (0..ops).map(|i| format!("session:{i}")).collect();
    let (_, in_command) = instructions::measured(server, ops, || {
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
        "usec_per_call of LOCK.ACQUIRE ... SESSION 0 (INFO commandstats, turns of short chunks)",
        "us",
        "LOCK.ACQUIRE without SESSION",
        Better::Lower,
    )
    .target(Target::RatioAtMost(1.1));
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
    acquire_times(&with_module, cfg.rounds * 16, cfg.ops / 20, &mut acquire)?;
    for round in 0..cfg.rounds {
        for side in Side::alternating(round) {
            let server = match side {
                Side::Module => &with_module,
                Side::Recipe => &bare,
            };
            close.push(side, close_cost(server, closes)?, None);
        }
    }
    let mut metrics = vec![acquire, close];
    metrics.extend(session_close::run(cfg, &with_module, &bare)?);
    if instructions::available() {
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
