//! The thin layer of POSIX and Linux calls std does not offer: the signals the runner
//! takes and passes on, the child's process group and parent-death signal, a wait that
//! leaves the child's exit to be reaped, and the terminal. Every `unsafe` block of the
//! crate is here.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The signals the runner passes on to its command: an interrupt from the terminal, a
/// request to stop from an init system or `kill`, a hang-up, a quit.
pub const FORWARDED: [i32; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

fn signal_set(signals: &[i32]) -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initializes it before any use, and
    // sigaddset only writes into it (the signals are valid numbers).
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &signal in signals {
            libc::sigaddset(&mut set, signal);
        }
        set
    }
}

/// Blocks [`FORWARDED`] in the calling thread, and so in every thread it starts after:
/// call it first in `main`, then take them with [`next_signal`] in one thread.
pub fn block_forwarded() {
    let set = signal_set(&FORWARDED);
    // SAFETY: `set` is an initialized signal set; a null old set is allowed.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Waits for one of [`FORWARDED`] (blocked by [`block_forwarded`]) and returns it.
pub fn next_signal() -> i32 {
    let set = signal_set(&FORWARDED);
    let mut signal: libc::c_int = 0;
    loop {
        // SAFETY: `set` is an initialized signal set and `signal` a valid place to write.
        let rc = unsafe { libc::sigwait(&set, &mut signal) };
        if rc == 0 {
            return signal;
        }
    }
}

/// Makes `command`'s child the leader of a process group of its own (so that a lost lock
/// stops it and everything it started), sends it SIGKILL when the runner dies (Linux
/// `PR_SET_PDEATHSIG`; a runner that died before that, it notices and exits), and lets
/// it take the signals the runner blocks.
pub fn prepare_child(command: &mut Command) {
    // SAFETY: getpid is async-signal-safe and has no preconditions.
    let runner = unsafe { libc::getpid() };
    let empty = signal_set(&[]);
    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe functions (setpgid, prctl, getppid, sigprocmask, _exit) on
    // values made before the fork; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if libc::setpgid(0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The runner died between the fork and the prctl: the signal will not come.
            if libc::getppid() != runner {
                libc::_exit(137);
            }
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            Ok(())
        });
    }
}

/// Sends `signal` to the process group `group` (the child's: its pid).
pub fn signal_group(group: u32, signal: i32) {
    // SAFETY: kill has no memory preconditions; a group that is gone gives ESRCH.
    unsafe {
        libc::kill(-(group as libc::pid_t), signal);
    }
}

/// Waits until the child `pid` has ended, without reaping it: its pid (and group) stay
/// its own until `Child::wait` reaps it, so a signal sent meanwhile reaches no stranger.
pub fn wait_ended(pid: u32) -> io::Result<()> {
    loop {
        // SAFETY: siginfo_t is plain data that waitid fills; the pid is our own child's.
        let rc = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Whether stderr is a terminal (the waiting line is drawn only there).
pub fn stderr_is_terminal() -> bool {
    // SAFETY: isatty only reads the descriptor's state.
    unsafe { libc::isatty(libc::STDERR_FILENO) == 1 }
}

/// The terminal's width in columns, when stderr is one that says.
pub fn terminal_width() -> Option<usize> {
    // SAFETY: winsize is plain data that TIOCGWINSZ fills on success.
    unsafe {
        let mut size: libc::winsize = std::mem::zeroed();
        if libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut size) == 0 && size.ws_col > 0 {
            Some(usize::from(size.ws_col))
        } else {
            None
        }
    }
}
