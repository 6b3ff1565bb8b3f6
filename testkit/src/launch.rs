//! Starting a server process, for the tests (`TestServer`) and the benchmark alike: the
//! arguments every start shares, and waiting until the process started is the one that
//! answers. Plain TCP and RESP here, so a caller needs no client library to use it.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Child;
use std::thread;
use std::time::{Duration, Instant};

/// What a server is started with.
pub struct Launch<'a> {
    /// Its loopback port.
    pub port: u16,
    /// Its working directory, where it writes `redis.log`.
    pub dir: &'a Path,
    /// The module to load (`None`: the bare server).
    pub module: Option<&'a Path>,
}

impl Launch<'_> {
    /// The server's arguments: the port on loopback only, the directory and its log, in
    /// the foreground, without persistence (extra arguments after these may turn it on),
    /// the module.
    pub fn args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = [
            "--port",
            &self.port.to_string(),
            "--bind",
            "127.0.0.1",
            "--logfile",
            "redis.log",
            "--daemonize",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        args.push("--dir".into());
        args.push(self.dir.into());
        if let Some(module) = self.module {
            args.push("--loadmodule".into());
            args.push(module.into());
        }
        args
    }
}

/// Waits until the server `child` started on `port` answers `PING` (which it does once
/// its data is loaded) as itself: two starts may pick the same free port at once, and
/// the one whose server loses the race must not take the other's for its own. The
/// reason, with the log in `dir`, if it exits or does not answer within `timeout`.
pub fn wait_ready(
    child: &mut Child,
    port: u16,
    dir: &Path,
    timeout: Duration,
) -> Result<(), String> {
    let log = || std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default();
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("exited at start ({status})\n{}", log()));
        }
        if answers_as(port, child.id()) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("did not answer in time\n{}", log()));
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Whether the server on `port` answers `PING` and is process `pid`.
fn answers_as(port: u16, pid: u32) -> bool {
    let Ok(stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut reader = BufReader::new(match stream.try_clone() {
        Ok(s) => s,
        Err(_) => return false,
    });
    let mut writer = stream;
    let mut line = String::new();
    let ping = writer.write_all(b"*1\r\n$4\r\nPING\r\n").is_ok()
        && reader.read_line(&mut line).is_ok()
        && line.starts_with("+PONG");
    if !ping {
        return false;
    }
    if writer
        .write_all(b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")
        .is_err()
    {
        return false;
    }
    line.clear();
    // A bulk string: `$<length>`, then that many bytes of `field:value` lines.
    if reader.read_line(&mut line).is_err() {
        return false;
    }
    let Some(mut left) = line
        .trim_end()
        .strip_prefix('$')
        .and_then(|n| n.parse::<usize>().ok())
    else {
        return false;
    };
    let wanted = format!("process_id:{pid}");
    while left > 0 {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return false,
            Ok(n) => left = left.saturating_sub(n),
        }
        if line.trim_end() == wanted {
            return true;
        }
    }
    false
}
