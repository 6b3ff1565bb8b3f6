//! The module's `INFO` section, `lock_stats` (`INFO lock`): the counters of `stats.rs`;
//! the gauges of what is there now (lock keys and their holders, which the values count
//! as they enter and leave the keyspace; clients waiting and watching, which the blocking
//! layer knows; session-bound locks in their grace, which the session registry lists);
//! the wait-time and hold-time distributions, as the server prints `INFO latencystats`;
//! and the bytes the module holds, which its allocator counts.
//!
//! `CONFIG RESETSTAT` zeroes the counters and the distributions. The server tells a module
//! nothing of it, so the module watches a figure the command zeroes,
//! `total_commands_processed`: once a second, and whenever the section is shown. When it
//! went down, the server's statistics were reset, and the module's are reset with them.

use std::cell::Cell;

use redis_module::{Context, InfoContext, RedisResult, raw};

use crate::ffi;
use crate::ffi::guard;
use crate::keyspace::session;
use crate::keyspace::waiting;
use crate::keyspace::watching;
use lock_core::histogram::latency_line;
use lock_core::stats;

/// How often the module looks for a `CONFIG RESETSTAT` when nobody reads the section.
const RESET_CHECK_MS: i64 = 1000;

thread_local! {
    /// The server's `total_commands_processed` when last looked at.
    static COMMANDS_SEEN: Cell<u64> = const { Cell::new(0) };
}

/// Adds section `lock_stats` to `INFO lock` / `INFO everything`.
pub extern "C" fn section(ctx: *mut raw::RedisModuleInfoCtx, for_crash_report: i32) {
    let _ = guard::callback(Ok(()), || -> RedisResult<()> {
        // A crash report reads what is there, and opens no key.
        let in_grace = if for_crash_report == 0 {
            let server = ffi::detached();
            follow_reset(&server);
            session::in_grace(&server) as u64
        } else {
            0
        };
        let info = InfoContext::new(ctx);
        let fields = [
            ("grants", stats::GRANTS.get()),
            ("contended", stats::CONTENDED.get()),
            ("releases", stats::RELEASES.get()),
            ("extends", stats::EXTENDS.get()),
            ("expired", stats::EXPIRED.get()),
            ("waits", stats::WAITS.get()),
            ("wait_timeouts", stats::WAIT_TIMEOUTS.get()),
            ("waiters", waiting::total() as u64),
            ("watchers", watching::total() as u64),
            ("watch_replies", stats::WATCH_REPLIES.get()),
            ("session_releases", stats::SESSION_RELEASES.get()),
            ("session_reclaims", stats::SESSION_RECLAIMS.get()),
            ("replica_waits", stats::REPLICA_WAITS.get()),
            ("replica_shortfalls", stats::REPLICA_SHORTFALLS.get()),
            ("replica_ack_requests", stats::REPLICA_ACK_REQUESTS.get()),
            ("keys", stats::KEYS.get()),
            ("holders", stats::HOLDERS.get()),
            ("sessions_in_grace", in_grace),
            ("allocated_bytes", ffi::alloc::held_bytes() as u64),
        ];
        let mut section = info.builder().add_section("stats");
        for (name, value) in fields {
            section = section.field(name, value)?;
        }
        section = section
            .field("wait_usec", latency_line(&stats::WAIT_USEC))?
            .field("hold_usec", latency_line(&stats::HOLD_USEC))?;
        section.build_section()?.build_info().map(|_| ())
    });
}

/// Starts looking for `CONFIG RESETSTAT` (once, at load).
pub fn follow_resets(ctx: &Context) {
    follow_reset(ctx);
    ffi::start_timer_with(ctx, RESET_CHECK_MS, on_reset_check, ());
}

fn on_reset_check(ctx: &Context, (): ()) {
    follow_reset(ctx);
    ffi::start_timer_with(ctx, RESET_CHECK_MS, on_reset_check, ());
}

/// Resets the module's counters and distributions if the server's were reset since the
/// last look (`total_commands_processed` went down).
fn follow_reset(ctx: &Context) {
    let Some(now) = ffi::commands_processed(ctx) else {
        return;
    };
    if now < COMMANDS_SEEN.with(|seen| seen.replace(now)) {
        stats::reset();
    }
}
