//! A Sentinel watching one test master, for clients that find their master through
//! Sentinel; killed (and its directory removed) on drop.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::{
    START_ATTEMPTS, START_TIMEOUT, TestServer, free_port, fresh_dir, port_taken, server_binary,
};

/// A Sentinel (the server binary in `--sentinel` mode, no module) watching one master
/// under the name `mymaster`, killed on drop: for clients that find their master through
/// Sentinel.
pub struct Sentinel {
    pub port: u16,
    dir: PathBuf,
    child: Child,
}

impl Sentinel {
    /// The name the master is watched under.
    pub const MASTER_NAME: &'static str = "mymaster";

    /// Starts a Sentinel watching `master`; returns once it answers with the master's
    /// address. A start that fails because another process took the port in the
    /// meantime is retried on a new one, as a server's is.
    pub fn watch(master: &TestServer) -> Self {
        let dir = fresh_dir("sentinel");
        for attempt in 1..=START_ATTEMPTS {
            let port = free_port();
            let mut child = Self::spawn(&dir, port, master.port);
            match Self::wait_for_master(&mut child, &dir, port, master.port) {
                Ok(()) => return Self { port, dir, child },
                Err(log) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    if attempt == START_ATTEMPTS || !port_taken(&log) {
                        panic!(
                            "the sentinel did not come to know its master on port {port}; log:\n{log}"
                        );
                    }
                }
            }
        }
        unreachable!("every attempt returns or panics")
    }

    /// Starts the sentinel process on `port`, watching the master on `master_port`.
    fn spawn(dir: &Path, port: u16, master_port: u16) -> Child {
        let config = dir.join("sentinel.conf");
        let _ = fs::remove_file(dir.join("sentinel.log"));
        fs::write(
            &config,
            format!(
                "port {port}\ndir {}\nlogfile sentinel.log\n\
                 sentinel monitor {} 127.0.0.1 {master_port} 1\n",
                dir.display(),
                Self::MASTER_NAME,
            ),
        )
        .expect("write sentinel.conf");
        Command::new(server_binary())
            .arg(&config)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start {} --sentinel: {err}", server_binary()))
    }

    /// Waits until the sentinel on `port` names the master on `master_port`; `Err` with
    /// its log (in `dir`) if it exits first or `START_TIMEOUT` passes.
    fn wait_for_master(
        child: &mut Child,
        dir: &Path,
        port: u16,
        master_port: u16,
    ) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let named = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                .and_then(|client| client.get_connection())
                .and_then(|mut con| {
                    redis::cmd("SENTINEL")
                        .arg("get-master-addr-by-name")
                        .arg(Self::MASTER_NAME)
                        .query::<Option<(String, u16)>>(&mut con)
                });
            if matches!(named, Ok(Some((_, p))) if p == master_port) {
                return Ok(());
            }
            if matches!(child.try_wait(), Ok(Some(_))) || Instant::now() > deadline {
                return Err(fs::read_to_string(dir.join("sentinel.log")).unwrap_or_default());
            }
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !thread::panicking() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}
