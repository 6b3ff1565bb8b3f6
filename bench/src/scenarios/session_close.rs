//! Scenario 9, a holder that dies with many locks: a connection holding `count`
//! session-bound locks (`SESSION 0`) closes, against the recipe's way a dead holder's
//! locks go, `count` `SET PX` keys that reach their deadline at one instant. A probe
//! sends `PING` every millisecond; the figures are the longest round trip from the close
//! (the deadline) until `DBSIZE` is 0, and how long that took.

use std::io;
use std::thread;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::info;
use crate::resp::{Conn, Reply};
use crate::results::{Better, Metric};
use crate::scenarios::bulk;
use crate::scenarios::expiry::{Probe, until_empty};
use crate::server::Server;
use crate::sides::Side;

/// Commands per pipeline batch.
const BATCH: usize = 1000;
/// How long the probe runs before the close, and may take to see everything gone.
const LEAD: Duration = Duration::from_millis(200);
const LIMIT: Duration = Duration::from_secs(60);

/// What one side's run found.
struct Gone {
    probe_max_ms: f64,
    after_ms: f64,
}

/// Starts the probe, waits until `at`, runs `trigger`, then polls `DBSIZE` until it is 0.
fn watch(
    server: &Server,
    admin: &mut Conn,
    at: Instant,
    trigger: impl FnOnce(),
) -> io::Result<Gone> {
    let probe = Probe::start(server.port);
    thread::sleep(at.saturating_duration_since(Instant::now()));
    let from = Instant::now();
    trigger();
    let gone = until_empty(admin, Duration::from_millis(1), from + LIMIT)?;
    let probe_max_ms = probe.longest(from - LEAD, gone)?;
    Ok(Gone {
        probe_max_ms,
        after_ms: gone.saturating_duration_since(from).as_secs_f64() * 1e3,
    })
}

/// The module's side: `count` locks bound to one connection, which then closes.
fn close_holder(server: &Server, count: usize) -> io::Result<Gone> {
    let mut admin = server.conn()?;
    admin.cmd(&["FLUSHALL"])?.ok()?;
    let mut holder = server.conn()?;
    for first in (0..count).step_by(BATCH) {
        let range = first..(first + BATCH).min(count);
        for i in range.clone() {
            holder.queue(&[b"LOCK.ACQUIRE", &bulk::key(i), b"600000", b"SESSION", b"0"]);
        }
        holder.flush()?;
        for _ in range {
            match holder.read()?.ok()? {
                Reply::Array(_) => {}
                other => return Err(crate::resp::unexpected("a grant", &other)),
            }
        }
    }
    let before = info::number(&mut admin, "lock", "lock_session_releases")?;
    let gone = watch(server, &mut admin, Instant::now() + LEAD, move || {
        drop(holder)
    })?;
    let released = info::number(&mut admin, "lock", "lock_session_releases")? - before;
    if released != count as f64 {
        return Err(io::Error::other(format!(
            "{released} session releases, not {count}"
        )));
    }
    Ok(gone)
}

/// The recipe's side: `count` string keys whose deadline is one instant.
fn expire_together(server: &Server, count: usize) -> io::Result<Gone> {
    let mut admin = server.conn()?;
    admin.cmd(&["FLUSHALL"])?.ok()?;
    let mut conn = server.conn()?;
    let took = bulk::load(&mut conn, Side::Recipe, 1, count, 600_000)?;
    let at = Instant::now() + took.mul_f64(2.0) + LEAD;
    bulk::set_deadlines(&mut conn, Side::Recipe, 1, count, |_| at)?;
    watch(server, &mut admin, at, || {})
}

/// Measures both sides `cfg.slow_rounds` times: `with_module` for the module's, `bare`
/// (the same binary without it) for the recipe's.
pub fn run(cfg: &Config, with_module: &Server, bare: &Server) -> io::Result<Vec<Metric>> {
    let count = cfg.locks / 10;
    let recipe = format!("{count} SET PX keys expiring at one instant");
    let mut pause = Metric::new(
        "9. session-bound locks",
        &format!("PING round trip max while a closed connection's {count} locks (SESSION 0) go"),
        "ms",
        &recipe,
        Better::Lower,
    );
    let mut after = Metric::new(
        "9. session-bound locks",
        "all gone: time from the close (the deadline) until DBSIZE is 0",
        "ms",
        &recipe,
        Better::Lower,
    );
    for round in 0..cfg.slow_rounds {
        for side in Side::alternating(round) {
            let gone = match side {
                Side::Module => close_holder(with_module, count)?,
                Side::Recipe => expire_together(bare, count)?,
            };
            pause.push(side, gone.probe_max_ms, None);
            after.push(side, gone.after_ms, None);
        }
    }
    Ok(vec![pause, after])
}
