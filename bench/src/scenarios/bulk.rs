//! Loading many locks fast (pipelined batches) for the memory and expiry scenarios, and
//! moving all their deadlines at once.

use std::io;
use std::time::{Duration, Instant};

use crate::resp::Conn;
use crate::sides::{self, Side};

/// Commands per pipeline batch.
const BATCH: usize = 1000;

/// The key of lock `i`.
pub fn key(i: usize) -> Vec<u8> {
    format!("lock:{i}").into_bytes()
}

/// The 32-character token of lock `i` (made, not stored: a million of them).
pub fn token(salt: u64, i: usize) -> Vec<u8> {
    format!("{salt:016x}{i:016x}").into_bytes()
}

/// Acquires locks `0..count` with TTL `ttl_ms`; returns how long it took.
pub fn load(
    conn: &mut Conn,
    side: Side,
    salt: u64,
    count: usize,
    ttl_ms: u64,
) -> io::Result<Duration> {
    let start = Instant::now();
    let ttl = ttl_ms.to_string();
    for first in (0..count).step_by(BATCH) {
        let range = first..(first + BATCH).min(count);
        for i in range.clone() {
            sides::queue_acquire(conn, side, &key(i), ttl.as_bytes(), Some(&token(salt, i)));
        }
        conn.flush()?;
        for i in range {
            let t = token(salt, i);
            if sides::granted(conn.read()?, Some(&t))?.is_none() {
                return Err(io::Error::other(format!(
                    "lock:{i} not granted in bulk load"
                )));
            }
        }
    }
    Ok(start.elapsed())
}

/// Gives lock `i` of `0..count` the deadline `deadline(i)`, the way each side would
/// (the module's `LOCK.EXTEND`, the recipe's `PEXPIRE`). Fails if a deadline has
/// already passed when its command is sent.
pub fn set_deadlines(
    conn: &mut Conn,
    side: Side,
    salt: u64,
    count: usize,
    deadline: impl Fn(usize) -> Instant,
) -> io::Result<()> {
    for first in (0..count).step_by(BATCH) {
        let range = first..(first + BATCH).min(count);
        let now = Instant::now();
        for i in range.clone() {
            let ttl = deadline(i).saturating_duration_since(now).as_millis();
            if ttl == 0 {
                return Err(io::Error::other(
                    "loading was slower than the expiry margin",
                ));
            }
            let ttl = ttl.to_string();
            match side {
                Side::Module => {
                    conn.queue(&[b"LOCK.EXTEND", &key(i), &token(salt, i), ttl.as_bytes()])
                }
                Side::Recipe => conn.queue(&[b"PEXPIRE", &key(i), ttl.as_bytes()]),
            }
        }
        conn.flush()?;
        for i in range {
            if conn.read()?.ok()?.int()? != 1 {
                return Err(io::Error::other(format!(
                    "lock:{i} lost before its deadline was set"
                )));
            }
        }
    }
    Ok(())
}
