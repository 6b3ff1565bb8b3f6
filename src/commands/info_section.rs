//! The module's `INFO` section, `lock_stats` (`INFO lock`): the counters of `stats.rs`,
//! the number of clients waiting now, which the blocking layer knows, and the bytes the
//! module holds, which its allocator counts.

use redis_module::{InfoContext, RedisResult, raw};

use crate::ffi;
use crate::ffi::guard;
use crate::keyspace::waiting;
use crate::keyspace::watching;
use crate::state::stats;

/// Adds section `lock_stats` to `INFO lock` / `INFO everything`.
pub extern "C" fn section(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: i32) {
    let _ = guard::callback(Ok(()), || -> RedisResult<()> {
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
            ("allocated_bytes", ffi::alloc::held_bytes() as u64),
        ];
        let mut section = info.builder().add_section("stats");
        for (name, value) in fields {
            section = section.field(name, value)?;
        }
        section.build_section()?.build_info().map(|_| ())
    });
}
