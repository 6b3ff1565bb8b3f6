//! Scenario 12: fenced writes. The server time of a write that runs only while a token
//! holds the lock: `LOCK.DO lock token SET k v` (and `... HINCRBY h f 1`) against the
//! script users write today on the `SET NX` recipe,
//! `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('set', KEYS[2], ARGV[2]) end`,
//! by `EVALSHA`; and against the same write sent alone, the floor. `usec_per_call` from
//! `INFO commandstats` (the outer command's, which includes the write it runs), in turns
//! of a quarter of `ops` calls pipelined 50 a batch, four turns per side per round, the
//! sides alternating (as scenario 9: short turns put both sides through the same moments
//! of a shared machine), with the load generator and the server's main thread pinned to
//! separate cores.

use std::io;

use crate::config::Config;
use crate::cpu;
use crate::info;
use crate::resp::Conn;
use crate::results::{Better, Metric, Target};
use crate::scenarios::instructions;
use crate::server::Server;
use crate::sides::Side;

const BATCH: usize = 50;
const LOCK: &[u8] = b"fenced:lock";
const RECIPE_LOCK: &[u8] = b"fenced:recipe-lock";
const TOKEN: &[u8] = b"holder-token-0123456789abcdef0123";

/// One kind of write: its name, the script's form of it, and its arguments after the key.
struct Write {
    command: &'static str,
    script: &'static str,
    key: &'static [u8],
    args: &'static [&'static [u8]],
}

const WRITES: [Write; 2] = [
    Write {
        command: "set",
        script: "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('set', KEYS[2], ARGV[2]) end",
        key: b"fenced:string",
        args: &[b"some-value"],
    },
    Write {
        command: "hincrby",
        script: "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('hincrby', KEYS[2], ARGV[2], ARGV[3]) end",
        key: b"fenced:hash",
        args: &[b"field", b"1"],
    },
];

/// Sends `ops` copies of `argv`, pipelined, and reads every reply (none an error).
fn send(conn: &mut Conn, argv: &[&[u8]], ops: usize) -> io::Result<()> {
    let mut left = ops;
    while left > 0 {
        let batch = left.min(BATCH);
        for _ in 0..batch {
            conn.queue(argv);
        }
        conn.flush()?;
        for _ in 0..batch {
            conn.read()?.ok()?;
        }
        left -= batch;
    }
    Ok(())
}

/// `usec_per_call` of `command` after `ops` pipelined `argv`.
fn usec(
    admin: &mut Conn,
    conn: &mut Conn,
    argv: &[&[u8]],
    ops: usize,
    command: &str,
) -> io::Result<f64> {
    admin.cmd(&["CONFIG", "RESETSTAT"])?;
    send(conn, argv, ops)?;
    info::usec_per_call(admin, command)
}

/// Holds the module's lock and the recipe's, both by `TOKEN`: every fenced write of the
/// scenario is the holder's.
fn hold_both(admin: &mut Conn) -> io::Result<()> {
    admin
        .call(&[b"LOCK.ACQUIRE", LOCK, b"600000", b"TOKEN", TOKEN])?
        .ok()?;
    admin.call(&[b"SET", RECIPE_LOCK, TOKEN])?.ok()?;
    Ok(())
}

/// The two figures of one write, named by `what` (given what they are against): against
/// the script (target at most half) and against the write alone.
fn metric_pair(write: &Write, unit: &str, what: impl Fn(&str) -> String) -> (Metric, Metric) {
    let name = write.command.to_uppercase();
    let vs_script = Metric::new(
        "12. fenced write",
        &what("the script"),
        unit,
        &format!("EVALSHA (GET compare, then {name})"),
        Better::Lower,
    )
    .target(Target::RatioAtMost(0.5));
    let vs_floor = Metric::new(
        "12. fenced write",
        &what("the write alone"),
        unit,
        &format!("{name} alone (the floor)"),
        Better::Lower,
    );
    (vs_script, vs_floor)
}

/// The same comparison in instructions in `processCommand` (callgrind), which the
/// machine's load does not change: `callgrind_ops` calls per side per round, 3 rounds.
/// Where the floor module is built (`bench/floor`), `FLOOR.DO` runs the same write through
/// `RedisModule_Call` with no lock to check: the API's floor of any fenced write, counted
/// against the script and against `LOCK.DO`.
pub fn instructions(cfg: &Config) -> io::Result<Vec<Metric>> {
    let (server, with_floor) = super::floor::callgrind_server(cfg)?;
    let mut admin = server.conn()?;
    let mut conn = server.conn()?;
    hold_both(&mut admin)?;
    let mut metrics = Vec::new();
    for write in &WRITES {
        let sha = admin.cmd(&["SCRIPT", "LOAD", write.script])?.text()?;
        let (fenced, scripted, alone) = commands(write, &sha);
        let (mut vs_script, mut vs_floor) = metric_pair(write, "instr", |against| {
            format!(
                "instructions per LOCK.DO ... {} (processCommand, callgrind) against {against}",
                write.command.to_uppercase()
            )
        });
        let name = write.command.to_uppercase();
        let api = |against: &str| {
            Metric::new(
                "12. fenced write",
                &format!(
                    "instructions per FLOOR.DO {name}, the API's floor (processCommand, callgrind) against {against}"
                ),
                "instr",
                against,
                Better::Lower,
            )
        };
        let (mut api_vs_script, mut api_vs_module) = (api("the script"), api("LOCK.DO"));
        let through_api: Argv = [&b"FLOOR.DO"[..]]
            .into_iter()
            .chain(alone.iter().copied())
            .collect();
        let n = cfg.callgrind_ops;
        for _ in 0..cfg.rounds.min(3) {
            let (_, module) = instructions::measured(&server, n, || send(&mut conn, &fenced, n))?;
            let (_, script) = instructions::measured(&server, n, || send(&mut conn, &scripted, n))?;
            let (_, floor) = instructions::measured(&server, n, || send(&mut conn, &alone, n))?;
            vs_script.push(Side::Module, module, None);
            vs_script.push(Side::Recipe, script, None);
            vs_floor.push(Side::Module, module, None);
            vs_floor.push(Side::Recipe, floor, None);
            if with_floor {
                let (_, api) =
                    instructions::measured(&server, n, || send(&mut conn, &through_api, n))?;
                api_vs_script.push(Side::Module, api, None);
                api_vs_script.push(Side::Recipe, script, None);
                api_vs_module.push(Side::Module, api, None);
                api_vs_module.push(Side::Recipe, module, None);
            }
        }
        metrics.push(vs_script);
        metrics.push(vs_floor);
        if with_floor {
            metrics.extend([api_vs_script, api_vs_module]);
        }
    }
    Ok(metrics)
}

/// A command's arguments.
type Argv<'a> = Vec<&'a [u8]>;

/// The fenced write, the script's and the write alone, as argument vectors.
fn commands<'a>(write: &'a Write, sha: &'a str) -> (Argv<'a>, Argv<'a>, Argv<'a>) {
    let fenced = [
        &b"LOCK.DO"[..],
        LOCK,
        TOKEN,
        write.command.as_bytes(),
        write.key,
    ]
    .into_iter()
    .chain(write.args.iter().copied())
    .collect();
    let scripted = [
        &b"EVALSHA"[..],
        sha.as_bytes(),
        b"2",
        RECIPE_LOCK,
        write.key,
        TOKEN,
    ]
    .into_iter()
    .chain(write.args.iter().copied())
    .collect();
    let alone = [write.command.as_bytes(), write.key]
        .into_iter()
        .chain(write.args.iter().copied())
        .collect();
    (fenced, scripted, alone)
}

/// Runs scenario 12 on `server`.
pub fn run(cfg: &Config, server: &Server) -> io::Result<Vec<Metric>> {
    let pinned = cpu::cores() >= 2 && cpu::pin(server.pid(), 1) && cpu::pin(0, 0);
    let result = measure(cfg, server);
    if pinned {
        cpu::unpin();
    }
    result
}

fn measure(cfg: &Config, server: &Server) -> io::Result<Vec<Metric>> {
    let mut admin = server.conn()?;
    let mut conn = server.conn()?;
    admin.cmd(&["FLUSHALL"])?;
    hold_both(&mut admin)?;
    let mut metrics = Vec::new();
    for write in &WRITES {
        let sha = admin.cmd(&["SCRIPT", "LOAD", write.script])?.text()?;
        let (mut vs_script, mut vs_floor) = metric_pair(write, "us", |against| {
            format!(
                "usec_per_call, LOCK.DO ... {} against {against}",
                write.command.to_uppercase()
            )
        });
        let (fenced, scripted, alone) = commands(write, &sha);
        let ops = (cfg.ops / 4).max(1);
        for turn in 0..cfg.rounds * 4 {
            for side in Side::alternating(turn) {
                match side {
                    Side::Module => {
                        let module = usec(&mut admin, &mut conn, &fenced, ops, "lock.do")?;
                        vs_script.push(Side::Module, module, None);
                        vs_floor.push(Side::Module, module, None);
                    }
                    Side::Recipe => {
                        let script = usec(&mut admin, &mut conn, &scripted, ops, "evalsha")?;
                        vs_script.push(Side::Recipe, script, None);
                        let floor = usec(&mut admin, &mut conn, &alone, ops, write.command)?;
                        vs_floor.push(Side::Recipe, floor, None);
                    }
                }
            }
        }
        metrics.push(vs_script);
        metrics.push(vs_floor);
    }
    Ok(metrics)
}
