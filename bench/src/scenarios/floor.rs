//! The module API's floor: what the server's module API itself costs for a lock, measured
//! with `bench/floor` (`libredis_lock_floor.so`), a module that does only the least a
//! lock must do: `FLOOR.SETNX` opens the key, sets the token and its expiry, and
//! replicates the effect as `SET ... PXAT`; `FLOOR.DELIFEQ` opens the key, compares the
//! token, deletes the key and replicates the effect as `DEL`; `.LOCAL` does the same
//! without replicating; `FLOOR.NOOP` is a module command that does nothing. Each is
//! counted (instructions in `processCommand`, callgrind) against the server's own `SET NX
//! PX` and `DELIFEQ`/`DEL`, on the same server as the rest of the scenario: where the
//! floor is over the 1.5x, no module can meet it with the API as it is. Scenario
//! 12 starts its server here too, for `FLOOR.DO`, the floor of a fenced write.

use std::io;
use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::resp::{Conn, Reply};
use crate::results::{Better, Metric};
use crate::server::{Launch, Server};
use crate::sides::{self, Side};

use super::instructions::{BATCH, TTL, measured};

/// The floor module, built beside the lock module (`make bench` builds both).
fn module_beside(lock_module: &Path) -> Option<PathBuf> {
    Some(lock_module.with_file_name("libredis_lock_floor.so")).filter(|path| path.exists())
}

/// A server under callgrind with the lock module, and the floor module beside it where it
/// is built; and whether it is (the floor's figures are left out otherwise).
pub fn callgrind_server(cfg: &Config) -> io::Result<(Server, bool)> {
    let floor = module_beside(&cfg.module).map(|path| path.display().to_string());
    let extra: Vec<&str> = match &floor {
        Some(path) => vec!["--loadmodule", path],
        None => Vec::new(),
    };
    let server = Server::start(&Launch {
        module: Some(&cfg.module),
        extra: &extra,
        callgrind: true,
    })?;
    Ok((server, floor.is_some()))
}

/// The server's own acquire and release per round (processCommand instructions), as the
/// scenario measured them, and which release that is.
pub struct Native<'a> {
    pub acquire: &'a [f64],
    pub release: &'a [f64],
    pub release_name: &'a str,
}

/// Sends `command key token [ttl]` for each key, in batches, and checks each reply.
fn batch(
    conn: &mut Conn,
    command: &[u8],
    keys: &[Vec<u8>],
    tokens: &[Vec<u8>],
    ttl: Option<&[u8]>,
) -> io::Result<()> {
    for (keys, tokens) in keys.chunks(BATCH).zip(tokens.chunks(BATCH)) {
        for (key, token) in keys.iter().zip(tokens) {
            match ttl {
                Some(ttl) => conn.queue(&[command, key, token, ttl]),
                None => conn.queue(&[command, key, token]),
            }
        }
        conn.flush()?;
        for _ in keys {
            let reply = conn.read()?.ok()?;
            let done = matches!(&reply, Reply::Status(s) if s == "OK") || reply == Reply::Int(1);
            if !done {
                return Err(io::Error::other(format!(
                    "floor: {} did not do its work",
                    String::from_utf8_lossy(command)
                )));
            }
        }
    }
    Ok(())
}

/// The floors, against the server's own commands of each round.
pub fn run(
    cfg: &Config,
    server: &Server,
    conn: &mut Conn,
    native: &Native,
) -> io::Result<Vec<Metric>> {
    let metric = |what: &str, recipe: &str| {
        Metric::new(
            "4. server cost",
            &format!("instructions per {what} (processCommand, callgrind)"),
            "instr",
            recipe,
            Better::Lower,
        )
    };
    let own = native.release_name;
    let mut acquire = metric("acquire, the API's floor: FLOOR.SETNX", "SET NX PX");
    let mut acquire_local = metric(
        "acquire, the API's floor unreplicated: FLOOR.SETNX.LOCAL",
        "SET NX PX",
    );
    let mut release = metric("release, the API's floor: FLOOR.DELIFEQ", own);
    let mut release_local = metric(
        "release, the API's floor unreplicated: FLOOR.DELIFEQ.LOCAL",
        own,
    );
    let mut cycle = metric(
        "acquire + release, the API's floor",
        &format!("SET NX PX + {own}"),
    );
    let mut call = metric("module command that does nothing: FLOOR.NOOP", own);
    let n = cfg.callgrind_ops;
    let ttl = TTL;
    for round in 0..native.release.len() {
        for (replicated, set, del) in [
            (true, &b"FLOOR.SETNX"[..], &b"FLOOR.DELIFEQ"[..]),
            (false, b"FLOOR.SETNX.LOCAL", b"FLOOR.DELIFEQ.LOCAL"),
        ] {
            let keys: Vec<Vec<u8>> = (0..n)
                .map(|i| format!("cg:{round}:floor:{replicated}:{i}").into_bytes())
                .collect();
            let tokens: Vec<Vec<u8>> = (0..n).map(|_| sides::token()).collect();
            let (_, acquired) =
                measured(server, n, || batch(conn, set, &keys, &tokens, Some(ttl)))?;
            let (_, released) = measured(server, n, || batch(conn, del, &keys, &tokens, None))?;
            let (acquire, release) = if replicated {
                cycle.push(Side::Module, acquired + released, None);
                cycle.push(
                    Side::Recipe,
                    native.acquire[round] + native.release[round],
                    None,
                );
                (&mut acquire, &mut release)
            } else {
                (&mut acquire_local, &mut release_local)
            };
            acquire.push(Side::Module, acquired, None);
            acquire.push(Side::Recipe, native.acquire[round], None);
            release.push(Side::Module, released, None);
            release.push(Side::Recipe, native.release[round], None);
        }
        let keys: Vec<Vec<u8>> = (0..n)
            .map(|i| format!("cg:{round}:noop:{i}").into_bytes())
            .collect();
        let (_, nothing) = measured(server, n, || {
            for keys in keys.chunks(BATCH) {
                for key in keys {
                    conn.queue(&[b"FLOOR.NOOP", key]);
                }
                conn.flush()?;
                for _ in keys {
                    conn.read()?.ok()?;
                }
            }
            Ok(())
        })?;
        call.push(Side::Module, nothing, None);
        call.push(Side::Recipe, native.release[round], None);
    }
    Ok(vec![
        acquire,
        release,
        cycle,
        acquire_local,
        release_local,
        call,
    ])
}
