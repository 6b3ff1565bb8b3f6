//! Scenario 6, second half: bytes per waiter. `count` clients block on one key;
//! `used_memory` is read just before (each connection open and having just sent a
//! `PING`) and while they are all blocked, so the difference is what being blocked costs
//! the server: for the module, its queue entry plus the server's blocked-client state
//! and the command's arguments the server keeps while the client is blocked.
//!
//! The recipe's waiter sleeps in the client between polls and holds nothing on the
//! server but its connection, which is open on both sides and not counted: zero. For
//! scale, the same figure for a native blocking command (`BLPOP` on an empty list) is
//! measured on the same server. Which part of a module waiter's cost is the module's own
//! comes from `INFO lock`'s `lock_allocated_bytes` (the module's allocator counts it);
//! the rest is the server's blocked-client state.

use std::io;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::info;
use crate::resp::{Conn, Reply};
use crate::results::{Better, Metric};
use crate::server::{Launch, Server};
use crate::sides::Side;

fn blocked_become(admin: &mut Conn, count: usize) -> io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if info::number(admin, "clients", "blocked_clients")? == count as f64 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(io::Error::other(format!(
                "blocked clients never reached {count}"
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The bytes the module holds (`lock_allocated_bytes`).
fn module_bytes(admin: &mut Conn) -> io::Result<f64> {
    info::number(admin, "lock", "lock_allocated_bytes")
}

/// Bytes per client blocked in the command `command` makes from the fence of the lock
/// `waited` (which must time out after about 2 s with nil): in all, and the module's own.
pub fn bytes_per_blocked(
    server: &Server,
    count: usize,
    command: &dyn Fn(i64) -> Vec<Vec<u8>>,
) -> io::Result<(f64, f64)> {
    let mut admin = server.conn()?;
    admin.cmd(&["FLUSHALL"])?;
    let fence = match admin.cmd(&["LOCK.ACQUIRE", "waited", "600000"])?.ok()? {
        Reply::Array(items) if items.len() == 2 => items[1].int()?,
        other => return Err(io::Error::other(format!("not granted: {other:?}"))),
    };
    let command = command(fence);
    let command: Vec<&[u8]> = command.iter().map(Vec::as_slice).collect();
    let mut conns = (0..count)
        .map(|_| server.conn())
        .collect::<io::Result<Vec<_>>>()?;
    for conn in &mut conns {
        conn.call(&[b"PING"])?.ok()?;
    }
    // Every client has just sent a command, so each holds a query buffer in both
    // readings (the server trims the buffers of clients idle for 2 s; both readings
    // come well within that).
    let idle = info::used_memory(&mut admin)?;
    let idle_own = module_bytes(&mut admin)?;
    let started = Instant::now();
    for conn in &mut conns {
        conn.queue(&command);
        conn.flush()?;
    }
    blocked_become(&mut admin, count)?;
    let blocked = info::used_memory(&mut admin)?;
    let blocked_own = module_bytes(&mut admin)?;
    if started.elapsed() > Duration::from_millis(1500) {
        return Err(io::Error::other(
            "clients took too long to block to compare memory",
        ));
    }
    for conn in &mut conns {
        if conn.read()?.ok()? != Reply::Nil {
            return Err(io::Error::other("a blocked client was served unexpectedly"));
        }
    }
    blocked_become(&mut admin, 0)?;
    let per = |bytes: f64| bytes / count as f64;
    Ok((per(blocked - idle), per(blocked_own - idle_own)))
}

/// Runs the bytes-per-waiter measurement, on a fresh server each round (the server keeps
/// some blocked-client state pooled for reuse, which would hide it in later rounds).
pub fn run(cfg: &Config) -> io::Result<Vec<Metric>> {
    let what = format!("bytes per waiter ({} blocked clients)", cfg.waiters);
    let mut polling = Metric::new(
        "6. memory",
        &what,
        "B",
        "polling client (holds nothing between polls)",
        Better::Lower,
    );
    let mut native = Metric::new(
        "6. memory",
        &what,
        "B",
        "for scale: a BLPOP waiter",
        Better::Lower,
    );
    let mut own = Metric::new(
        "6. memory",
        &format!("{what}: the module's own part (lock_allocated_bytes)"),
        "B",
        "the server's part (the rest of used_memory)",
        Better::Lower,
    );
    let module_wait = |_| {
        [&b"LOCK.ACQUIRE"[..], b"waited", b"600000", b"WAIT", b"2000"]
            .map(<[u8]>::to_vec)
            .to_vec()
    };
    let blpop = |_| {
        [&b"BLPOP"[..], b"empty-list", b"2"]
            .map(<[u8]>::to_vec)
            .to_vec()
    };
    for _ in 0..cfg.slow_rounds {
        let server = &Server::start(&Launch {
            module: Some(&cfg.module),
            extra: &[],
            callgrind: false,
        })?;
        let (module, module_own) = bytes_per_blocked(server, cfg.waiters, &module_wait)?;
        own.push(Side::Module, module_own, None);
        own.push(Side::Recipe, module - module_own, None);
        polling.push(Side::Module, module, None);
        polling.push(Side::Recipe, 0.0, None);
        native.push(Side::Module, module, None);
        native.push(
            Side::Recipe,
            bytes_per_blocked(server, cfg.waiters, &blpop)?.0,
            None,
        );
    }
    Ok(vec![polling, native, own])
}
