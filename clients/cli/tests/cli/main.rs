//! The `redis-lock` binary against real servers, with real child processes: each test
//! starts its own server (the freshly built module loaded) on a free port, runs the
//! binary as a user would, and waits for what it checks to a deadline. Runners still
//! running when a test ends are killed (their commands die with them: the parent-death
//! signal), servers too.

mod deployments;
mod docs;
mod elect;
mod lost;
mod races;
mod signals;
mod status;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

pub use redis_lock_testkit::{TestServer, fresh_dir, poll_until};

/// How long a test waits for an event before it fails: long enough for a loaded machine.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// The binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_redis-lock")
}

/// `redis-lock -p <port> args...`, reading nothing, its output captured.
pub fn cli(server: &TestServer, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.arg("-p")
        .arg(server.port.to_string())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// A started runner, killed (with its command, by the parent-death signal) on drop.
pub struct Runner {
    pub child: Child,
    pub name: String,
}

impl Runner {
    pub fn start(server: &TestServer, name: &str, args: &[&str]) -> Runner {
        let child = cli(server, args).spawn().expect("start redis-lock");
        Runner {
            child,
            name: name.to_owned(),
        }
    }

    /// Waits for the runner to exit, to the deadline: its status and stderr.
    pub fn finish(&mut self, within: Duration) -> (ExitStatus, String) {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                let mut stderr = String::new();
                if let Some(mut err) = self.child.stderr.take() {
                    use std::io::Read;
                    let _ = err.read_to_string(&mut stderr);
                }
                return (status, stderr);
            }
            assert!(
                Instant::now() < deadline,
                "{} did not exit within {within:?}",
                self.name
            );
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Its stdout, once it has exited.
    pub fn stdout(&mut self) -> String {
        let mut out = String::new();
        if let Some(mut stdout) = self.child.stdout.take() {
            use std::io::Read;
            let _ = stdout.read_to_string(&mut out);
        }
        out
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A folder of the test's own (the commands' logs and go-files).
pub struct Scratch {
    pub dir: PathBuf,
}

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        Scratch {
            dir: fresh_dir(tag),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    pub fn text(&self, name: &str) -> String {
        fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    pub fn lines(&self, name: &str) -> Vec<String> {
        self.text(name).lines().map(str::to_owned).collect()
    }

    /// Creates `name` (a go-file a command waits for).
    pub fn touch(&self, name: &str) {
        fs::write(self.path(name), b"").expect("touch");
    }

    /// Waits until `name` exists and has `lines` lines at least.
    pub fn wait_lines(&self, name: &str, lines: usize) {
        poll_until(DEADLINE, &format!("{lines} lines in {name}"), || {
            self.lines(name).len() >= lines
        });
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A shell command line that waits (polling a file every 20 ms) until `file` exists.
pub fn until_exists(file: &Path) -> String {
    format!("while [ ! -e '{}' ]; do sleep 0.02; done", file.display())
}

/// `LOCK.INFO`'s `waiters` for `key` (0 when the key does not exist).
pub fn waiters(con: &mut redis::Connection, key: &str) -> i64 {
    let info: Option<std::collections::HashMap<String, redis::Value>> = redis::cmd("LOCK.INFO")
        .arg(key)
        .query(con)
        .expect("LOCK.INFO");
    match info.and_then(|info| info.get("waiters").cloned()) {
        Some(redis::Value::Int(n)) => n,
        _ => 0,
    }
}

/// Whether `key` exists on the server.
pub fn held(con: &mut redis::Connection, key: &str) -> bool {
    redis_lock_testkit::exists(con, key)
}

/// Whether a process `pid` is alive (not yet reaped counts as gone when it is a zombie).
pub fn alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// A server that asks for `password` (set once it runs: the harness's start checks a
/// server that answers without one).
pub fn with_password(password: &str) -> TestServer {
    let server = TestServer::start();
    let mut con = server.connection();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg(password)
        .query(&mut con)
        .expect("CONFIG SET requirepass");
    server
}

/// Sends signal `name` (`TERM`, `INT`, `STOP`, ...) to process `pid`, as `kill(1)` does.
pub fn send_signal(pid: u32, name: &str) {
    let sent = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .expect("kill");
    assert!(sent.success(), "kill -{name} {pid}");
}
