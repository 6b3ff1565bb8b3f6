//! A `redis-server` with the module loaded, on a free loopback port, in its own
//! temporary directory, stopped (and its directory removed) when the guard drops.

use std::fs;
use std::io;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::cleanup;
use crate::resp::{Conn, Reply};

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
    loop {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if port != 6379 {
            return Ok(port);
        }
    }
}

fn fresh_dir() -> io::Result<PathBuf> {
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "redis-lock-bench-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir)?;
    Ok(dir)
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
        let dir = fresh_dir()?;
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
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&dir)
            .args(["--logfile", "redis.log", "--daemonize", "no"])
            .args(["--save", "", "--appendonly", "no"])
            .args(
                launch
                    .module
                    .map(|m| ["--loadmodule".as_ref(), m.as_os_str()])
                    .into_iter()
                    .flatten(),
            )
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
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Err(io::Error::other(format!(
                    "{} exited at start ({status}); log:\n{}",
                    binary(),
                    self.log()
                )));
            }
            if let Ok(mut conn) = self.conn()
                && let Ok(Reply::Status(_)) = conn.call(&[b"PING"])
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(io::Error::other(format!(
                    "{} did not answer in time; log:\n{}",
                    binary(),
                    self.log()
                )));
            }
            thread::sleep(Duration::from_millis(20));
        }
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
