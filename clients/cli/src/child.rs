//! The command under the lock: started in a process group of its own, with the lock in
//! its environment, the runner's signals passed on to it, and stopped when the lock is
//! lost (SIGTERM to its group, SIGKILL after `--kill-after`).

use std::ffi::OsString;
use std::io;
use std::process::{Child, Command};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::{Duration, Instant};

use crate::args::Holding;
use crate::events::Event;
use crate::exit::{self, Failure};
use crate::sys;

/// How often the main thread looks at the lock's lost flag (set by the watchdog, in
/// memory) between events.
const LOOK: Duration = Duration::from_millis(100);

/// What the command may learn of the lock it runs under.
pub struct LockEnv {
    pub key: String,
    pub fence: u64,
    pub token: Vec<u8>,
}

/// How the command's run ended.
pub enum Outcome {
    /// It exited by itself (or by a signal the runner passed on): its exit code, or 128 +
    /// the signal.
    Exited(u8),
    /// The lock was lost: the command was stopped. Why the lock was lost.
    Lost(String),
}

/// Starts `command` with `lock` in its environment.
fn start(command: &[OsString], lock: &LockEnv) -> Result<Child, Failure> {
    use std::os::unix::ffi::OsStringExt;
    let (program, args) = command
        .split_first()
        .ok_or_else(|| Failure::new(exit::USAGE, "no command to run"))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("REDIS_LOCK_KEY", &lock.key)
        .env("REDIS_LOCK_FENCE", lock.fence.to_string())
        .env("REDIS_LOCK_TOKEN", OsString::from_vec(lock.token.clone()));
    sys::prepare_child(&mut cmd);
    cmd.spawn().map_err(|err| {
        // As shells say it: 127 for a command not found, 126 for one that cannot run.
        let code = if err.kind() == io::ErrorKind::NotFound {
            127
        } else {
            126
        };
        Failure::new(
            code,
            format!("cannot run {}: {err}", program.to_string_lossy()),
        )
    })
}

/// Runs `holding`'s command under the lock until it ends: signals of the runner go to its process
/// group; `lost` (polled between events) says when the lock is gone, and then the group
/// gets SIGTERM, and SIGKILL `--kill-after` later.
pub fn supervise<G: Send + 'static>(
    tx: &Sender<Event<G>>,
    rx: &Receiver<Event<G>>,
    holding: &Holding,
    lock: &LockEnv,
    lost: &dyn Fn() -> Option<String>,
) -> Result<Outcome, Failure> {
    let kill_after = holding.kill_after;
    let mut child = start(&holding.command, lock)?;
    let pid = child.id();
    let ended = tx.clone();
    thread::spawn(move || {
        let _ = sys::wait_ended(pid);
        let _ = ended.send(Event::Ended);
    });
    let mut lost_at: Option<(Instant, String)> = None;
    let mut killed = false;
    loop {
        match rx.recv_timeout(LOOK) {
            Ok(Event::Signal(signal)) => sys::signal_group(pid, signal),
            Ok(Event::Ended) | Err(RecvTimeoutError::Disconnected) => {
                let status = child.wait().map_err(|err| {
                    Failure::new(exit::LOST, format!("waiting for the command: {err}"))
                })?;
                return Ok(match lost_at {
                    Some((_, why)) => Outcome::Lost(why),
                    None => Outcome::Exited(exit::of_status(status)),
                });
            }
            Ok(Event::Granted(_)) | Err(RecvTimeoutError::Timeout) => {}
        }
        match &lost_at {
            None => {
                if let Some(why) = lost() {
                    eprintln!("redis-lock: {why}: stopping the command (SIGTERM)");
                    sys::signal_group(pid, libc::SIGTERM);
                    lost_at = Some((Instant::now(), why));
                }
            }
            Some((at, _)) if !killed && at.elapsed() >= kill_after => {
                eprintln!(
                    "redis-lock: the command outlived --kill-after {}: SIGKILL",
                    crate::duration::show(kill_after)
                );
                sys::signal_group(pid, libc::SIGKILL);
                killed = true;
            }
            Some(_) => {}
        }
    }
}
