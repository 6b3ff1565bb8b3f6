//! CPU use of the load generator (this process) and of the server over a measurement,
//! in cores: 1.0 is one core busy all the time. A generator near 1.0 per thread it runs
//! on, or the two together near the machine's core count, means the figures measure the
//! machine, not the lock.

use std::io;
use std::time::Instant;

use crate::info;
use crate::resp::Conn;

/// CPU seconds this process has used (all threads, user plus system).
pub fn own_cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// Cores used over a measurement.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuUse {
    /// The load generator (this process).
    pub generator: f64,
    /// The server.
    pub server: f64,
}

/// Started before a measurement, read after it.
pub struct Meter {
    wall: Instant,
    own: f64,
    server: f64,
}

impl Meter {
    /// Starts measuring; `conn` is a connection to the server that is not timed.
    pub fn start(conn: &mut Conn) -> io::Result<Meter> {
        Ok(Meter {
            server: info::server_cpu(conn)?,
            own: own_cpu_seconds(),
            wall: Instant::now(),
        })
    }

    /// The cores each side used since `start`.
    pub fn stop(&self, conn: &mut Conn) -> io::Result<CpuUse> {
        let wall = self.wall.elapsed().as_secs_f64().max(1e-9);
        let own = own_cpu_seconds() - self.own;
        let server = info::server_cpu(conn)? - self.server;
        Ok(CpuUse {
            generator: own / wall,
            server: server / wall,
        })
    }
}

/// Keeps thread or process `pid` (0: the calling thread) on CPU `cpu`, where the machine
/// has it; false where it could not. A measurement of server time with the load generator
/// on one core and the server's main thread on another is not moved by the scheduler
/// putting both on one.
pub fn pin(pid: u32, cpu: usize) -> bool {
    // SAFETY: the set is zeroed and filled by the libc macros; sched_setaffinity only
    // reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(pid as libc::pid_t, std::mem::size_of_val(&set), &set) == 0
    }
}

/// Lets the calling thread run on every CPU again (after `pin`).
pub fn unpin() {
    // SAFETY: as in `pin`.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for cpu in 0..cores() {
            libc::CPU_SET(cpu, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
    }
}

/// How many CPUs this machine has online.
pub fn cores() -> usize {
    // SAFETY: sysconf reads a system value. (Not `available_parallelism`, which a pinned
    // thread sees as 1.)
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(online).unwrap_or(1).max(1)
}
