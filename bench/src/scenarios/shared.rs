//! Scenario 10: read/write locks against Redisson's `RReadWriteLock`, whose Lua scripts
//! (read lock, write lock, and their unlocks, as Redisson 3.x sends them) run here
//! through `EVALSHA` on the same server: the best-known script recipe for a read/write
//! lock on Redis.
//!
//! - Server time per shared acquire + release while `BACKGROUND_READERS` other readers
//!   hold the key (INFO commandstats: `lock.acquire` + `lock.release` against
//!   `evalsha`), in alternating turns. Target: the module at least 2x the recipe's
//!   server-side throughput, i.e. at most half its time.
//! - Contended handoff between a writer and a reader, both ways: the time from the
//!   holder's release being sent to the waiter's grant arriving. The module's waiter
//!   blocks in `LOCK.ACQUIRE ... WAIT`; Redisson's subscribes to the lock's channel, is
//!   woken by the unlock's `PUBLISH` and runs its lock script again. Target: the module's
//!   p99 under 1 ms.

use std::io;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::cpu;
use crate::info;
use crate::resp::{Conn, Reply};
use crate::results::{Better, Metric, Target};
use crate::server::{Launch, Server};
use crate::sides::Side;
use crate::stats::percentile;

/// Readers that hold the key throughout the throughput measurement.
const BACKGROUND_READERS: usize = 8;
const TTL: &str = "600000";

/// Redisson's `RedissonReadLock.tryLockInnerAsync`. KEYS: lock, timeout prefix of this
/// holder; ARGV: lease ms, holder name, the same holder's write-lock name.
const READ_LOCK: &str = "local mode = redis.call('hget', KEYS[1], 'mode'); \
if (mode == false) then \
redis.call('hset', KEYS[1], 'mode', 'read'); \
redis.call('hset', KEYS[1], ARGV[2], 1); \
redis.call('set', KEYS[2] .. ':1', 1); \
redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]); \
redis.call('pexpire', KEYS[1], ARGV[1]); \
return nil; end; \
if (mode == 'read') or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then \
local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1); \
local key = KEYS[2] .. ':' .. ind; \
redis.call('set', key, 1); \
redis.call('pexpire', key, ARGV[1]); \
local remainTime = redis.call('pttl', KEYS[1]); \
redis.call('pexpire', KEYS[1], math.max(remainTime, ARGV[1])); \
return nil; end; \
return redis.call('pttl', KEYS[1]);";

/// Redisson's `RedissonReadLock.unlockInnerAsync`. KEYS: lock, channel, timeout prefix
/// of this holder, key prefix; ARGV: unlock message, holder name, `PUBLISH`.
const READ_UNLOCK: &str = "local mode = redis.call('hget', KEYS[1], 'mode'); \
if (mode == false) then redis.call(ARGV[3], KEYS[2], ARGV[1]); return 1; end; \
local lockExists = redis.call('hexists', KEYS[1], ARGV[2]); \
if (lockExists == 0) then return nil; end; \
local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1); \
if (counter == 0) then redis.call('hdel', KEYS[1], ARGV[2]); end; \
redis.call('del', KEYS[3] .. ':' .. (counter+1)); \
if (redis.call('hlen', KEYS[1]) > 1) then \
local maxRemainTime = -3; \
local keys = redis.call('hkeys', KEYS[1]); \
for n, key in ipairs(keys) do \
counter = tonumber(redis.call('hget', KEYS[1], key)); \
if type(counter) == 'number' then \
for i=counter, 1, -1 do \
local remainTime = redis.call('pttl', KEYS[4] .. ':' .. key .. ':rwlock_timeout:' .. i); \
maxRemainTime = math.max(remainTime, maxRemainTime); \
end; end; end; \
if maxRemainTime > 0 then redis.call('pexpire', KEYS[1], maxRemainTime); return 0; end; \
if mode == 'write' then return 0; end; end; \
redis.call('del', KEYS[1]); \
redis.call(ARGV[3], KEYS[2], ARGV[1]); \
return 1;";

/// Redisson's `RedissonWriteLock.tryLockInnerAsync`. KEYS: lock; ARGV: lease ms, the
/// holder's write-lock name.
const WRITE_LOCK: &str = "local mode = redis.call('hget', KEYS[1], 'mode'); \
if (mode == false) then \
redis.call('hset', KEYS[1], 'mode', 'write'); \
redis.call('hset', KEYS[1], ARGV[2], 1); \
redis.call('pexpire', KEYS[1], ARGV[1]); \
return nil; end; \
if (mode == 'write') then \
if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then \
redis.call('hincrby', KEYS[1], ARGV[2], 1); \
local currentExpire = redis.call('pttl', KEYS[1]); \
redis.call('pexpire', KEYS[1], currentExpire + ARGV[1]); \
return nil; end; end; \
return redis.call('pttl', KEYS[1]);";

/// Redisson's `RedissonWriteLock.unlockInnerAsync`. KEYS: lock, channel; ARGV: unlock
/// message, lease ms, the holder's write-lock name, `PUBLISH`.
const WRITE_UNLOCK: &str = "local mode = redis.call('hget', KEYS[1], 'mode'); \
if (mode == false) then redis.call(ARGV[4], KEYS[2], ARGV[1]); return 1; end; \
if (mode == 'write') then \
local lockExists = redis.call('hexists', KEYS[1], ARGV[3]); \
if (lockExists == 0) then return nil; else \
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); \
if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; else \
redis.call('hdel', KEYS[1], ARGV[3]); \
if (redis.call('hlen', KEYS[1]) == 1) then \
redis.call('del', KEYS[1]); redis.call(ARGV[4], KEYS[2], ARGV[1]); \
else redis.call('hset', KEYS[1], 'mode', 'read'); end; \
return 1; end; end; end; \
return nil;";

/// The four scripts, loaded: their SHA1s.
#[derive(Clone)]
struct Scripts {
    read_lock: String,
    read_unlock: String,
    write_lock: String,
    write_unlock: String,
}

impl Scripts {
    fn load(conn: &mut Conn) -> io::Result<Scripts> {
        let mut load = |script: &str| conn.cmd(&["SCRIPT", "LOAD", script])?.text();
        Ok(Scripts {
            read_lock: load(READ_LOCK)?,
            read_unlock: load(READ_UNLOCK)?,
            write_lock: load(WRITE_LOCK)?,
            write_unlock: load(WRITE_UNLOCK)?,
        })
    }
}

/// A Redisson client's view of one lock: its name and the names it derives.
struct Redisson {
    lock: String,
    channel: String,
}

impl Redisson {
    fn new(lock: &str) -> Redisson {
        Redisson {
            lock: lock.into(),
            channel: format!("redisson_rwlock:{{{lock}}}"),
        }
    }

    fn timeout_prefix(&self, holder: &str) -> String {
        format!("{{{}}}:{holder}:rwlock_timeout", self.lock)
    }

    /// Queues the read lock for `holder`; the reply is nil when granted.
    fn queue_read_lock(&self, conn: &mut Conn, s: &Scripts, holder: &str) {
        let write_name = format!("{holder}:write");
        let prefix = self.timeout_prefix(holder);
        conn.queue(&[
            b"EVALSHA",
            s.read_lock.as_bytes(),
            b"2",
            self.lock.as_bytes(),
            prefix.as_bytes(),
            TTL.as_bytes(),
            holder.as_bytes(),
            write_name.as_bytes(),
        ]);
    }

    fn queue_read_unlock(&self, conn: &mut Conn, s: &Scripts, holder: &str) {
        let prefix = self.timeout_prefix(holder);
        let key_prefix = format!("{{{}}}", self.lock);
        conn.queue(&[
            b"EVALSHA",
            s.read_unlock.as_bytes(),
            b"4",
            self.lock.as_bytes(),
            self.channel.as_bytes(),
            prefix.as_bytes(),
            key_prefix.as_bytes(),
            b"0",
            holder.as_bytes(),
            b"PUBLISH",
        ]);
    }

    fn queue_write_lock(&self, conn: &mut Conn, s: &Scripts, holder: &str) {
        let write_name = format!("{holder}:write");
        conn.queue(&[
            b"EVALSHA",
            s.write_lock.as_bytes(),
            b"1",
            self.lock.as_bytes(),
            TTL.as_bytes(),
            write_name.as_bytes(),
        ]);
    }

    fn queue_write_unlock(&self, conn: &mut Conn, s: &Scripts, holder: &str) {
        let write_name = format!("{holder}:write");
        conn.queue(&[
            b"EVALSHA",
            s.write_unlock.as_bytes(),
            b"2",
            self.lock.as_bytes(),
            self.channel.as_bytes(),
            b"1",
            TTL.as_bytes(),
            write_name.as_bytes(),
            b"PUBLISH",
        ]);
    }
}

/// Reads `n` replies, failing on an error reply.
fn drain(conn: &mut Conn, n: usize) -> io::Result<Vec<Reply>> {
    conn.flush()?;
    (0..n).map(|_| conn.read()?.ok()).collect()
}

/// Server microseconds per shared acquire + release, `cycles` of them pipelined
/// `depth` at a time, with the background readers in place.
fn cycle_cost(
    admin: &mut Conn,
    conn: &mut Conn,
    side: Side,
    scripts: &Scripts,
    (cycles, depth): (usize, usize),
) -> io::Result<f64> {
    admin.cmd(&["CONFIG", "RESETSTAT"])?.ok()?;
    let redisson = Redisson::new("rw:recipe");
    let mut done = 0;
    while done < cycles {
        let batch = depth.min(cycles - done);
        let tokens: Vec<String> = (0..batch).map(|i| format!("c{:030}", done + i)).collect();
        for token in &tokens {
            match side {
                Side::Module => conn.queue(&[
                    b"LOCK.ACQUIRE",
                    b"rw:module",
                    TTL.as_bytes(),
                    b"SHARED",
                    b"TOKEN",
                    token.as_bytes(),
                ]),
                Side::Recipe => redisson.queue_read_lock(conn, scripts, token),
            }
        }
        for reply in drain(conn, batch)? {
            let granted = match side {
                Side::Module => matches!(reply, Reply::Array(_)),
                Side::Recipe => reply == Reply::Nil,
            };
            if !granted {
                return Err(crate::resp::unexpected("a shared grant", &reply));
            }
        }
        for token in &tokens {
            match side {
                Side::Module => conn.queue(&[b"LOCK.RELEASE", b"rw:module", token.as_bytes()]),
                Side::Recipe => redisson.queue_read_unlock(conn, scripts, token),
            }
        }
        drain(conn, batch)?;
        done += batch;
    }
    let stats = info::commandstats(admin)?;
    let usec = |name: &str| stats.get(name).map_or(0.0, |s| s.calls * s.usec_per_call);
    let total = match side {
        Side::Module => usec("lock.acquire") + usec("lock.release"),
        Side::Recipe => usec("evalsha"),
    };
    Ok(total / cycles as f64)
}

/// The background readers of both sides.
fn hold_background_readers(conn: &mut Conn, scripts: &Scripts) -> io::Result<()> {
    let redisson = Redisson::new("rw:recipe");
    for i in 0..BACKGROUND_READERS {
        let token = format!("background-{i}");
        conn.queue(&[
            b"LOCK.ACQUIRE",
            b"rw:module",
            TTL.as_bytes(),
            b"SHARED",
            b"TOKEN",
            token.as_bytes(),
        ]);
        redisson.queue_read_lock(conn, scripts, &token);
    }
    drain(conn, 2 * BACKGROUND_READERS)?;
    Ok(())
}

/// One handoff: `holder` holds the lock (a writer when `writer_holds`, else a reader),
/// a waiter of the other kind waits for it on its own connection and thread; the
/// holder's release is sent at `t0`, the waiter's grant arrives at `t1`. Returns
/// `t1 - t0` in µs.
fn handoff_once(
    server: &Server,
    side: Side,
    scripts: &Scripts,
    writer_holds: bool,
    n: usize,
) -> io::Result<f64> {
    let key = format!("handoff:{}", side.tag());
    let redisson = Redisson::new(&key);
    let (holder_token, waiter_token) = (format!("h{n}"), format!("w{n}"));
    let mut holder = server.conn()?;
    match (side, writer_holds) {
        (Side::Module, true) => holder.queue(&[
            b"LOCK.ACQUIRE",
            key.as_bytes(),
            TTL.as_bytes(),
            b"TOKEN",
            holder_token.as_bytes(),
        ]),
        (Side::Module, false) => holder.queue(&[
            b"LOCK.ACQUIRE",
            key.as_bytes(),
            TTL.as_bytes(),
            b"SHARED",
            b"TOKEN",
            holder_token.as_bytes(),
        ]),
        (Side::Recipe, true) => redisson.queue_write_lock(&mut holder, scripts, &holder_token),
        (Side::Recipe, false) => redisson.queue_read_lock(&mut holder, scripts, &holder_token),
    }
    drain(&mut holder, 1)?;
    let (ready_tx, ready_rx) = mpsc::channel();
    let mut waiter = server.conn()?;
    let mut listener = server.conn()?;
    let scripts_copy = scripts.clone();
    let waiter_thread = thread::spawn(move || -> io::Result<Instant> {
        let redisson = Redisson::new(&key);
        let s = &scripts_copy;
        let try_lock = |conn: &mut Conn| -> io::Result<bool> {
            if writer_holds {
                redisson.queue_read_lock(conn, s, &waiter_token);
            } else {
                redisson.queue_write_lock(conn, s, &waiter_token);
            }
            Ok(drain(conn, 1)?.pop() == Some(Reply::Nil))
        };
        match side {
            Side::Module => {
                let mut args: Vec<&[u8]> = vec![b"LOCK.ACQUIRE", key.as_bytes(), TTL.as_bytes()];
                if writer_holds {
                    args.push(b"SHARED");
                }
                args.extend_from_slice(&[b"TOKEN", waiter_token.as_bytes(), b"WAIT", b"0"]);
                waiter.queue(&args);
                waiter.flush()?;
                let _ = ready_tx.send(());
                match waiter.read()?.ok()? {
                    Reply::Array(_) => Ok(Instant::now()),
                    other => Err(crate::resp::unexpected("a grant", &other)),
                }
            }
            Side::Recipe => {
                // As Redisson: subscribe to the lock's channel, then try; on each
                // message try again.
                listener.call(&[b"SUBSCRIBE", redisson.channel.as_bytes()])?;
                if try_lock(&mut waiter)? {
                    return Err(io::Error::other("the recipe's waiter was granted at once"));
                }
                let _ = ready_tx.send(());
                loop {
                    listener.read()?;
                    if try_lock(&mut waiter)? {
                        return Ok(Instant::now());
                    }
                }
            }
        }
    });
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .map_err(|_| io::Error::other("the waiter never got ready"))?;
    // Let the waiter's blocking command reach the server and block.
    thread::sleep(Duration::from_millis(2));
    let t0 = Instant::now();
    match (side, writer_holds) {
        (Side::Module, _) => holder.queue(&[
            b"LOCK.RELEASE",
            key_of(side).as_bytes(),
            holder_token.as_bytes(),
        ]),
        (Side::Recipe, true) => {
            Redisson::new(&key_of(side)).queue_write_unlock(&mut holder, scripts, &holder_token)
        }
        (Side::Recipe, false) => {
            Redisson::new(&key_of(side)).queue_read_unlock(&mut holder, scripts, &holder_token)
        }
    }
    holder.flush()?;
    let t1 = waiter_thread
        .join()
        .map_err(|_| io::Error::other("the waiter thread panicked"))??;
    holder.read()?.ok()?;
    // Clean up: the key goes, whoever holds it now.
    holder.call(&[b"DEL", key_of(side).as_bytes()])?.ok()?;
    Ok(t1.saturating_duration_since(t0).as_secs_f64() * 1e6)
}

fn key_of(side: Side) -> String {
    format!("handoff:{}", side.tag())
}

/// Runs scenario 10.
pub fn run(cfg: &Config) -> io::Result<Vec<Metric>> {
    let mut cycle = Metric::new(
        "10. read/write locks",
        &format!(
            "server us per shared acquire+release, {BACKGROUND_READERS} other readers holding (INFO commandstats)"
        ),
        "us",
        "Redisson RReadWriteLock scripts (EVALSHA)",
        Better::Lower,
    )
    .target(Target::RatioAtMost(0.5));
    let mut handoff = Metric::new(
        "10. read/write locks",
        "p99 writer<->reader handoff, release sent to grant received",
        "us",
        "Redisson: SUBSCRIBE, PUBLISH on unlock, retry",
        Better::Lower,
    )
    .target(Target::ModuleBelow(1000.0));
    let server = Server::start(&Launch {
        module: Some(&cfg.module),
        extra: &[],
        callgrind: false,
    })?;
    let mut admin = server.conn()?;
    let scripts = Scripts::load(&mut admin)?;
    hold_background_readers(&mut admin, &scripts)?;
    let mut conn = server.conn()?;
    let cycles = (cfg.pipelined_cycles / 20).max(100);
    for round in 0..cfg.rounds * 4 {
        for side in Side::alternating(round) {
            let cost = cycle_cost(
                &mut admin,
                &mut conn,
                side,
                &scripts,
                (cycles, cfg.pipeline_depth),
            )?;
            cycle.push(side, cost, None);
        }
    }
    // The clients on one core and the server's main thread on the other, as in scenario
    // 9: a waiter woken on the core the server is busy on measures the scheduler.
    let pinned = cpu::cores() >= 2 && cpu::pin(server.pid(), 1) && cpu::pin(0, 0);
    let samples = (cfg.ops / 200).max(20);
    let measured = (|| {
        for round in 0..cfg.slow_rounds {
            for side in Side::alternating(round) {
                let mut times: Vec<u64> = Vec::with_capacity(samples);
                for n in 0..samples {
                    let us = handoff_once(&server, side, &scripts, n % 2 == 0, n)?;
                    times.push(us as u64);
                }
                times.sort_unstable();
                handoff.push(side, percentile(&times, 99.0), None);
            }
        }
        Ok::<(), io::Error>(())
    })();
    if pinned {
        cpu::unpin();
    }
    measured?;
    Ok(vec![cycle, handoff])
}
