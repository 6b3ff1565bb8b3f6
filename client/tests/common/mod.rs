//! The client tests' real-server harness (the root crate's `tests/common` is not
//! reachable from this crate): a `redis-server` on a free loopback port with the lock
//! module loaded and a directory of its own, killed (and its directory removed) on drop,
//! panics included.
//!
//! The module is `target/release/libredis_lock.so` of the workspace (`cargo build
//! --release`); set `LOCK_MODULE` to test another build, `REDIS_SERVER` for another server.

#![allow(dead_code)]

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The module under test.
pub fn module_path() -> PathBuf {
    if let Ok(path) = std::env::var("LOCK_MODULE") {
        return PathBuf::from(path);
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("release").join("libredis_lock.so")
}

fn free_port() -> u16 {
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .expect("bind 127.0.0.1:0")
            .local_addr()
            .expect("local addr")
            .port();
        if port != 6379 {
            return port;
        }
    }
}

fn fresh_dir() -> PathBuf {
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "redis-lock-client-test-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("create test dir");
    dir
}

/// A running `redis-server` with the module, killed on drop.
pub struct TestServer {
    pub port: u16,
    pub dir: PathBuf,
    child: Option<Child>,
}

impl TestServer {
    /// A server with the module loaded and no persistence.
    pub fn start() -> Self {
        Self::spawn(true)
    }

    /// A server without the module: to prove the tests fail when it is missing.
    pub fn without_module() -> Self {
        Self::spawn(false)
    }

    fn spawn(with_module: bool) -> Self {
        let port = free_port();
        let dir = fresh_dir();
        let mut args: Vec<String> = [
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--dir",
            &dir.display().to_string(),
            "--logfile",
            "redis.log",
            "--daemonize",
            "no",
            "--enable-debug-command",
            "yes",
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if with_module {
            let module = module_path();
            assert!(
                module.exists(),
                "module not built at {} (run `cargo build --release`)",
                module.display()
            );
            args.push("--loadmodule".into());
            args.push(module.display().to_string());
        }
        let child = Command::new(std::env::var("REDIS_SERVER").unwrap_or("redis-server".into()))
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server (is it installed? `make deps` installs it)");
        let mut server = TestServer {
            port,
            dir,
            child: Some(child),
        };
        server.wait_ready();
        server
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "redis-server exited at start ({status}); log:\n{}",
                    self.log()
                );
            }
            let ping = self
                .client()
                .get_connection_with_timeout(Duration::from_secs(2))
                .and_then(|mut con| redis::cmd("PING").query::<String>(&mut con));
            if ping.is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server did not answer in time; log:\n{}",
                self.log()
            );
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    /// The server's URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A `redis::Client` for the server.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("client")
    }

    /// A new blocking connection.
    pub fn connection(&self) -> redis::Connection {
        self.client()
            .get_connection_with_timeout(Duration::from_secs(5))
            .expect("connect to test server")
    }

    /// Whether the server is running (not killed).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Stops the server at once (SIGKILL): from now on, connections are refused.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill();
        if !thread::panicking() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// Polls `check` every few ms until it holds, failing the test after `limit`.
pub fn poll_until(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        thread::sleep(Duration::from_millis(5));
    }
}

/// Whether `key` exists on the server behind `con`.
pub fn exists(con: &mut redis::Connection, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query::<i64>(con)
        .expect("EXISTS")
        == 1
}

/// The key's remaining time in ms (`PTTL`): -2 when absent.
pub fn pttl(con: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(con).expect("PTTL")
}
