//! Scenario 6, first half: bytes per held lock. A fresh server per measurement, then
//! `count` locks with 32-character tokens and a TTL (a lock always has one), and the
//! growth of `INFO memory` `used_memory` divided by `count`: key, value, expiry entry
//! and allocator rounding, everything the server holds for a lock.

use std::io;
use std::time::Duration;

use crate::info;
use crate::resp::Conn;
use crate::scenarios::bulk;
use crate::sides::Side;

/// TTL of the measured locks: they must all still be there when memory is read.
const TTL_MS: u64 = 3_600_000;

/// Loads `count` locks on an empty server; returns (bytes per lock, load time).
pub fn bytes_per_lock(
    admin: &mut Conn,
    conn: &mut Conn,
    side: Side,
    salt: u64,
    count: usize,
) -> io::Result<(f64, Duration)> {
    let before = info::used_memory(admin)?;
    let took = bulk::load(conn, side, salt, count, TTL_MS)?;
    let after = info::used_memory(admin)?;
    let keys = admin.cmd(&["DBSIZE"])?.int()?;
    if keys != count as i64 {
        return Err(io::Error::other(format!(
            "{keys} keys after loading {count} locks"
        )));
    }
    Ok(((after - before) / count as f64, took))
}
