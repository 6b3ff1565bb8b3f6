//! Servers die with the benchmark, however it ends: on a normal exit or a panic their
//! guards' `Drop` kills them; on Ctrl-C, SIGTERM or SIGHUP a signal thread kills every
//! live server and removes its directory before exiting; if the benchmark is killed
//! outright, the kernel kills them (`PR_SET_PDEATHSIG`, set in `server.rs`).

use std::path::PathBuf;
use std::sync::Mutex;
use std::{fs, ptr, thread};

/// Every server started and not yet stopped: process id and directory.
static LIVE: Mutex<Vec<(u32, PathBuf)>> = Mutex::new(Vec::new());

/// Records a started server.
pub fn register(pid: u32, dir: PathBuf) {
    LIVE.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((pid, dir));
}

/// Forgets a server its guard has stopped.
pub fn unregister(pid: u32) {
    LIVE.lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|(p, _)| *p != pid);
}

fn kill_all() {
    let live = std::mem::take(&mut *LIVE.lock().unwrap_or_else(|e| e.into_inner()));
    for (pid, dir) in live {
        // SAFETY: plain system calls on a child process id this program started.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGKILL);
            libc::waitpid(pid as libc::pid_t, ptr::null_mut(), 0);
        }
        let _ = fs::remove_dir_all(dir);
    }
}

fn termination_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill a set owned by this frame.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, signal);
        }
        set
    }
}

/// Routes Ctrl-C, SIGTERM and SIGHUP to a thread that stops every server and exits.
/// Call it first thing in `main`, before any other thread starts: threads inherit the
/// blocked signal mask, so only the waiting thread ever receives these signals.
pub fn on_signal_stop_servers() {
    let set = termination_signals();
    // SAFETY: blocks the signals in the calling thread; `set` is initialised.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, ptr::null_mut());
    }
    thread::spawn(move || {
        let mut signal: libc::c_int = 0;
        // SAFETY: waits for one of the blocked signals; both pointers are valid.
        unsafe {
            libc::sigwait(&set, &mut signal);
        }
        eprintln!("\nredis-lock-bench: signal {signal}, stopping the servers");
        kill_all();
        std::process::exit(128 + signal);
    });
}
