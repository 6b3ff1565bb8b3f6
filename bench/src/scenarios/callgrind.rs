//! The second half of scenario 4: instructions per call, counted by
//! `valgrind --tool=callgrind` on the server (`instructions.rs` measures), the module
//! beside the script recipe and the module API's floor (`floor.rs`).

use std::io;

use super::instructions::{BATCH, TTL, measured};
use crate::config::Config;
use crate::resp::{Conn, Reply};
use crate::results::{Better, Metric, Target};
use crate::server::Server;
use crate::sides::{self, Side};

fn acquire_batch(
    conn: &mut Conn,
    side: Side,
    keys: &[Vec<u8>],
    tokens: &[Vec<u8>],
) -> io::Result<Vec<Vec<u8>>> {
    let mut held = Vec::with_capacity(keys.len());
    for (keys, tokens) in keys.chunks(BATCH).zip(tokens.chunks(BATCH)) {
        for (key, token) in keys.iter().zip(tokens) {
            let token = (side == Side::Recipe).then_some(token.as_slice());
            sides::queue_acquire(conn, side, key, TTL, token);
        }
        conn.flush()?;
        for token in tokens {
            let token = (side == Side::Recipe).then_some(token.as_slice());
            let granted = sides::granted(conn.read()?, token)?;
            held.push(granted.ok_or_else(|| io::Error::other("callgrind: not granted"))?);
        }
    }
    Ok(held)
}

fn release_batch(
    conn: &mut Conn,
    side: Side,
    sha: &[u8],
    keys: &[Vec<u8>],
    held: &[Vec<u8>],
) -> io::Result<()> {
    for (keys, held) in keys.chunks(BATCH).zip(held.chunks(BATCH)) {
        for (key, token) in keys.iter().zip(held) {
            sides::queue_release(conn, side, sha, key, token);
        }
        conn.flush()?;
        for _ in keys {
            if !sides::released(conn.read()?)? {
                return Err(io::Error::other("callgrind: not released"));
            }
        }
    }
    Ok(())
}

/// `LOCK.ACQUIRE key ttl [VALUE value]` on each key, in batches; every one granted.
fn acquire_valued_batch(conn: &mut Conn, keys: &[Vec<u8>], value: Option<&[u8]>) -> io::Result<()> {
    for keys in keys.chunks(BATCH) {
        for key in keys {
            match value {
                Some(value) => conn.queue(&[b"LOCK.ACQUIRE", key, TTL, b"VALUE", value]),
                None => conn.queue(&[b"LOCK.ACQUIRE", key, TTL]),
            }
        }
        conn.flush()?;
        for _ in keys {
            if sides::granted(conn.read()?, None)?.is_none() {
                return Err(io::Error::other("callgrind: not granted"));
            }
        }
    }
    Ok(())
}

/// Runs the callgrind part of scenario 4.
pub fn run(cfg: &Config) -> io::Result<Vec<Metric>> {
    let (server, with_floor) = super::floor::callgrind_server(cfg)?;
    let mut conn = server.conn()?;
    let sha = sides::load_script(&mut conn)?;
    let what = |cmd: &str, scope: &str| format!("instructions per {cmd} ({scope}, callgrind)");
    let mut acquire = Metric::new(
        "4. server cost",
        &what("acquire", "processCommand"),
        "instr",
        "SET NX PX",
        Better::Lower,
    )
    .target(Target::RatioAtMost(1.1));
    let mut release = Metric::new(
        "4. server cost",
        &what("release", "processCommand"),
        "instr",
        "EVALSHA",
        Better::Lower,
    )
    .target(Target::RatioAtMost(0.5));
    let mut acquire_all = Metric::new(
        "4. server cost",
        &what("acquire", "whole server, pipelined"),
        "instr",
        "SET NX PX",
        Better::Lower,
    );
    let mut release_all = Metric::new(
        "4. server cost",
        &what("release", "whole server, pipelined"),
        "instr",
        "EVALSHA",
        Better::Lower,
    );
    let mut cycle = Metric::new(
        "4. server cost",
        &what("acquire + release", "processCommand"),
        "instr",
        "SET NX PX + EVALSHA",
        Better::Lower,
    )
    .target(Target::RatioAtMost(super::throughput::CYCLE_TARGET));
    let mut valued = Metric::new(
        "4. server cost",
        &what("acquire with a 20-byte VALUE", "processCommand"),
        "instr",
        "the same acquire without VALUE",
        Better::Lower,
    );
    let n = cfg.callgrind_ops;
    // A module built before VALUE (`--module` of an older build, to compare the plain
    // acquire with) refuses it: that figure is then left out.
    let knows_value = sides::granted(
        conn.call(&[b"LOCK.ACQUIRE", b"cg:probe", TTL, b"VALUE", b"v"])?,
        None,
    )
    .is_ok();
    for round in 0..cfg.rounds.min(3) {
        // What a published value costs, and that a plain acquire pays nothing for it.
        let keys: Vec<Vec<u8>> = (0..n)
            .map(|i| format!("cg:{round}:valued:{i}").into_bytes())
            .collect();
        if knows_value {
            let (_, with_value) = measured(&server, n, || {
                acquire_valued_batch(&mut conn, &keys, Some(b"10.0.0.1:6379/leader"))
            })?;
            valued.push(Side::Module, with_value, None);
            let keys: Vec<Vec<u8>> = (0..n)
                .map(|i| format!("cg:{round}:plain:{i}").into_bytes())
                .collect();
            let (_, plain) = measured(&server, n, || acquire_valued_batch(&mut conn, &keys, None))?;
            valued.push(Side::Recipe, plain, None);
        }
        for side in Side::alternating(round) {
            let keys: Vec<Vec<u8>> = (0..n)
                .map(|i| format!("cg:{round}:{}:{i}", side.tag()).into_bytes())
                .collect();
            let tokens: Vec<Vec<u8>> = (0..n).map(|_| sides::token()).collect();
            let mut held = Vec::new();
            let (all, in_command) = measured(&server, n, || {
                held = acquire_batch(&mut conn, side, &keys, &tokens)?;
                Ok(())
            })?;
            acquire.push(side, in_command, None);
            acquire_all.push(side, all, None);
            let acquired = in_command;
            let (all, in_command) = measured(&server, n, || {
                release_batch(&mut conn, side, sha.as_bytes(), &keys, &held)
            })?;
            release.push(side, in_command, None);
            release_all.push(side, all, None);
            cycle.push(side, acquired + in_command, None);
        }
    }
    let mut metrics = Vec::new();
    let own = native_compare_and_delete(cfg, &server, &mut conn, (&acquire, &release))?;
    if with_floor {
        let native = super::floor::Native {
            acquire: &acquire.recipe,
            release: &own[0].recipe,
            release_name: &own[0].recipe_label,
        };
        metrics.extend(super::floor::run(cfg, &server, &mut conn, &native)?);
    }
    metrics.splice(0..0, own);
    metrics.splice(0..0, [acquire, release, cycle]);
    if knows_value {
        metrics.push(valued);
    }
    metrics.extend([acquire_all, release_all]);
    // A module built before LOCK.ACQUIREALL (`--module` of an older build, to compare
    // the single-key figures with) does not know it: that figure is then left out.
    let knows_several = conn
        .call(&[b"LOCK.ACQUIREALL", b"1", b"cg:probe:all", TTL])?
        .ok()
        .is_ok();
    if knows_several {
        metrics.push(several_keys(cfg, &server, &mut conn)?);
    }
    Ok(metrics)
}

/// Keys per `LOCK.ACQUIREALL` in the cost comparison.
const SEVERAL: usize = 4;

/// What `LOCK.ACQUIREALL` of `SEVERAL` free keys costs against `SEVERAL` single
/// `LOCK.ACQUIRE`s of free keys: instructions in `processCommand` per set of keys.
fn several_keys(cfg: &Config, server: &Server, conn: &mut Conn) -> io::Result<Metric> {
    let mut metric = Metric::new(
        "4. server cost",
        &format!("instructions per {SEVERAL} free keys taken (processCommand, callgrind)"),
        "instr",
        &format!("{SEVERAL} LOCK.ACQUIRE"),
        Better::Lower,
    )
    .target(Target::RatioAtMost(1.0));
    let sets = (cfg.callgrind_ops / SEVERAL).max(1);
    for round in 0..cfg.rounds.min(3) {
        let keys: Vec<Vec<Vec<u8>>> = (0..sets)
            .map(|set| {
                (0..SEVERAL)
                    .map(|k| format!("cg:{round}:all:{set}:{k}").into_bytes())
                    .collect()
            })
            .collect();
        let (_, all) = measured(server, sets, || {
            for batch in keys.chunks(BATCH) {
                for set in batch {
                    let count = SEVERAL.to_string();
                    let mut args: Vec<&[u8]> = vec![b"LOCK.ACQUIREALL", count.as_bytes()];
                    args.extend(set.iter().map(Vec::as_slice));
                    args.push(TTL);
                    conn.queue(&args);
                }
                conn.flush()?;
                for _ in batch {
                    if !matches!(conn.read()?.ok()?, Reply::Array(_)) {
                        return Err(io::Error::other("callgrind: several keys not granted"));
                    }
                }
            }
            Ok(())
        })?;
        metric.push(Side::Module, all, None);
        let singles: Vec<Vec<u8>> = keys
            .iter()
            .flatten()
            .map(|key| [key.as_slice(), b":one"].concat())
            .collect();
        let (_, one_by_one) =
            measured(server, sets, || acquire_valued_batch(conn, &singles, None))?;
        metric.push(Side::Recipe, one_by_one, None);
    }
    Ok(metric)
}

/// The server's own compare-and-delete: `DELIFEQ key token` where the server has it
/// (Valkey 9), else `DEL key`, the floor of any release.
fn native_release(conn: &mut Conn) -> io::Result<&'static [u8]> {
    let info = conn.call(&[b"COMMAND", b"INFO", b"DELIFEQ"])?.ok()?;
    let known =
        matches!(&info, Reply::Array(entries) if entries.first().is_some_and(|e| *e != Reply::Nil));
    Ok(if known { b"DELIFEQ" } else { b"DEL" })
}

/// The release and the whole cycle against the server's own primitives: `SET NX PX` to
/// acquire, and `DELIFEQ` (or `DEL`) to release, instructions in `processCommand`; the
/// target, 1.5x for both. The module's figures are the rounds of `release` above.
fn native_compare_and_delete(
    cfg: &Config,
    server: &Server,
    conn: &mut Conn,
    (module_acquire, module_release): (&Metric, &Metric),
) -> io::Result<Vec<Metric>> {
    let native = native_release(conn)?;
    let name = String::from_utf8_lossy(native).into_owned();
    let mut release = Metric::new(
        "4. server cost",
        "instructions per release (processCommand, callgrind), against the server's own",
        "instr",
        &name,
        Better::Lower,
    )
    .target(Target::RatioAtMost(1.5));
    let mut cycle = Metric::new(
        "4. server cost",
        "instructions per acquire + release (processCommand, callgrind), against the server's own",
        "instr",
        &format!("SET NX PX + {name}"),
        Better::Lower,
    )
    .target(Target::RatioAtMost(1.5));
    let n = cfg.callgrind_ops;
    for round in 0..cfg.rounds.min(3) {
        let keys: Vec<Vec<u8>> = (0..n)
            .map(|i| format!("cg:{round}:native:{i}").into_bytes())
            .collect();
        let tokens: Vec<Vec<u8>> = (0..n).map(|_| sides::token()).collect();
        let (_, acquired) = measured(server, n, || {
            acquire_batch(conn, Side::Recipe, &keys, &tokens).map(|_| ())
        })?;
        let (_, released) = measured(server, n, || {
            for (keys, tokens) in keys.chunks(BATCH).zip(tokens.chunks(BATCH)) {
                for (key, token) in keys.iter().zip(tokens) {
                    if native == b"DELIFEQ" {
                        conn.queue(&[native, key, token]);
                    } else {
                        conn.queue(&[native, key]);
                    }
                }
                conn.flush()?;
                for _ in keys {
                    if conn.read()?.ok()?.int()? != 1 {
                        return Err(io::Error::other(
                            "callgrind: not released by the server's own",
                        ));
                    }
                }
            }
            Ok(())
        })?;
        release.push(Side::Recipe, released, None);
        cycle.push(Side::Recipe, acquired + released, None);
    }
    // The module's side: the same rounds' release and acquire figures.
    for (acquired, released) in module_acquire.module.iter().zip(&module_release.module) {
        release.push(Side::Module, *released, None);
        cycle.push(Side::Module, acquired + released, None);
    }
    Ok(vec![release, cycle])
}
