//! A `redis-server` with the module loaded, on a free loopback port, in its own
//! temporary directory, stopped (and its directory removed) when the guard drops. Started
//! with the workspace's one launcher (`redis_lock_testkit::launch`), as the tests' servers
//! are; what is the benchmark's own is callgrind, and dying with the benchmark.

use std::fs;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use redis_lock_testkit::launch;

use crate::cleanup;
use crate::resp::Conn;

/// How long a server (possibly under valgrind) may take to answer its first PING.
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// A running server, killed on drop.
pub struct Server {
    /// Its loopback port.
    pub port: u16,
    /// Its working directory (log, callgrind output).
    pub dir: PathBuf,
    child: Child,
}

/// How to start a server.
pub struct Launch<'a> {
    /// The module to load (`None`: the bare server, for a baseline).
    pub module: Option<&'a Path>,
    /// Extra `redis-server` arguments.
    pub extra: &'a [&'a str],
    /// Run it under `valgrind --tool=callgrind`, dumping into its directory.
    pub callgrind: bool,
}

/// A free TCP port on loopback, never 6379.
pub fn free_port() -> io::Result<u16> {
    Ok(redis_lock_testkit::free_port())
}

/// The server binary to benchmark: `REDIS_SERVER` (as for `make test`), else
/// `redis-server` on `PATH`.
pub fn binary() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_string())
}

impl Server {
    /// Starts a server and waits until it answers.
    pub fn start(launch: &Launch) -> io::Result<Server> {
        if let Some(module) = launch.module.filter(|m| !m.exists()) {
            return Err(io::Error::other(format!(
                "module not built at {} (run `cargo build --release`)",
                module.display()
            )));
        }
        let port = free_port()?;
        let dir = redis_lock_testkit::fresh_dir("bench");
        let args = launch::Launch {
            port,
            dir: &dir,
            module: launch.module,
        }
        .args();
        let mut command = if launch.callgrind {
            let mut c = Command::new("valgrind");
            c.arg("--tool=callgrind")
                .arg(format!(
                    "--callgrind-out-file={}",
                    dir.join("cg.out").display()
                ))
                .arg(binary());
            c
        } else {
            Command::new(binary())
        };
        command
            .args(&args)
            .args(launch.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group: a Ctrl-C reaches only the benchmark, which stops
            // the server itself after reporting.
            .process_group(0);
        // SAFETY: prctl is async-signal-safe; it runs in the child between fork and exec.
        unsafe {
            command.pre_exec(|| {
                // Die with the thread that started us (the benchmark's main thread).
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = command.spawn().map_err(|e| {
            io::Error::other(format!(
                "cannot start {}: {e}",
                if launch.callgrind {
                    "valgrind".to_string()
                } else {
                    binary()
                }
            ))
        })?;
        cleanup::register(child.id(), dir.clone());
        let mut server = Server { port, dir, child };
        server.wait_ready()?;
        Ok(server)
    }

    fn wait_ready(&mut self) -> io::Result<()> {
        launch::wait_ready(&mut self.child, self.port, &self.dir, START_TIMEOUT)
            .map_err(|reason| io::Error::other(format!("{}: {reason}", binary())))
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    /// A new connection.
    pub fn conn(&self) -> io::Result<Conn> {
        Conn::connect(self.port)
    }

    /// The process id (valgrind's, when under callgrind).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        cleanup::unregister(self.child.id());
        let _ = fs::remove_dir_all(&self.dir);
    }
}
