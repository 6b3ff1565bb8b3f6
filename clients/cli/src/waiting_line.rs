//! While `run` waits on a terminal: one line on stderr, kept up to date, that says who
//! holds the lock, for how long, and how many wait; gone once the lock is taken. Nothing
//! of it when stderr is not a terminal (a cron job's mail, a log file).

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::connect::Target;
use crate::duration::show;
use crate::status::{self, LockStatus};
use crate::sys;

/// How often the line is drawn again (a look at the lock, on a connection of its own).
const REDRAW: Duration = Duration::from_millis(500);

/// The line's thread; [`WaitingLine::stop`] erases the line.
pub struct WaitingLine {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// What the line says of `status`.
pub fn describe(status: &LockStatus) -> String {
    let waiting = format!("{} waiting", status.waiters);
    let Some(mode) = &status.mode else {
        return format!("waiting for {}: being handed over, {waiting}", status.key);
    };
    match status.holders.as_slice() {
        [] => format!("waiting for {}: being handed over, {waiting}", status.key),
        [holder] if mode == "exclusive" => {
            let by = if holder.client > 0 {
                format!(" by client {}", holder.client)
            } else {
                String::new()
            };
            let value = holder
                .value
                .as_ref()
                .map(|v| format!(" ({})", String::from_utf8_lossy(v)))
                .unwrap_or_default();
            format!(
                "waiting for {}: held for {}{by}{value}, fence {}, {waiting}",
                status.key,
                show(holder.held_for()),
                holder.fence
            )
        }
        holders => {
            let oldest = holders
                .iter()
                .map(|h| h.held_for())
                .max()
                .unwrap_or_default();
            let limit = if status.limit > 0 {
                format!(" of {}", status.limit)
            } else {
                String::new()
            };
            format!(
                "waiting for {}: {} {mode} holders{limit}, the oldest for {}, {waiting}",
                status.key,
                holders.len(),
                show(oldest)
            )
        }
    }
}

impl WaitingLine {
    /// Starts the line for `key` when stderr is a terminal; `None` otherwise.
    pub fn start(target: &Target, timeout: Duration, key: &str) -> Option<WaitingLine> {
        if !sys::stderr_is_terminal() {
            return None;
        }
        let mut con = target.connection(timeout).ok()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let key = key.to_owned();
        let thread = thread::spawn(move || {
            while !stopped.load(Ordering::Acquire) {
                if let Ok(status) = status::fetch(con.as_mut(), &key) {
                    let mut line = format!("redis-lock: {}", describe(&status));
                    let width = sys::terminal_width().unwrap_or(80).saturating_sub(1);
                    if line.chars().count() > width {
                        line = line.chars().take(width).collect();
                    }
                    if !stopped.load(Ordering::Acquire) {
                        let mut err = std::io::stderr().lock();
                        let _ = write!(err, "\r\x1b[2K{line}");
                        let _ = err.flush();
                    }
                }
                thread::park_timeout(REDRAW);
            }
        });
        Some(WaitingLine {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops drawing and erases the line.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K");
        let _ = err.flush();
    }
}
