//! Instructions per call, counted by `valgrind --tool=callgrind` on a server: the
//! measuring itself, which the callgrind scenarios (`callgrind.rs`, `floor.rs`,
//! `fenced.rs`, `sessions.rs`) share. Unlike time, an instruction count does not change
//! when other jobs share the machine, so a ratio of two is repeatable anywhere.
//!
//! Before each batch of commands the server's counters are zeroed (`callgrind_control
//! -z`) and after it dumped (`-d`), so a dump holds exactly one batch. From a dump: the
//! inclusive cost of `processCommand` (lookup, checks and the command itself: what
//! `usec_per_call` times, without reading and writing the socket), and the whole
//! process's (the event loop and the socket too).

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::server::Server;

pub const TTL: &[u8] = b"600000";
/// Commands per pipeline batch: valgrind is slow enough without a round trip each.
pub const BATCH: usize = 100;

/// Whether valgrind and its callgrind tools are installed.
pub fn available() -> bool {
    ["valgrind", "callgrind_control", "callgrind_annotate"]
        .iter()
        .all(|tool| {
            Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
}

fn control(pid: u32, flag: &str) -> io::Result<()> {
    let out = Command::new("callgrind_control")
        .args([flag, &pid.to_string()])
        .output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "callgrind_control {flag} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

/// The newest dump (`cg.out.N` with the largest N).
fn newest_dump(dir: &Path) -> io::Result<PathBuf> {
    std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let n: u64 = name.strip_prefix("cg.out.")?.parse().ok()?;
            Some((n, e.path()))
        })
        .max_by_key(|(n, _)| *n)
        .map(|(_, p)| p)
        .ok_or_else(|| io::Error::other("callgrind wrote no dump"))
}

/// Instructions of a dump: (whole process, inclusive in `processCommand`).
fn costs(dump: &Path) -> io::Result<(f64, f64)> {
    let out = Command::new("callgrind_annotate")
        .args(["--inclusive=yes", "--threshold=100"])
        .arg(dump)
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut total = None;
    let mut process_command = None;
    for line in text.lines() {
        let line = line.trim();
        let Some((count, rest)) = line.split_once(' ') else {
            continue;
        };
        let Ok(count) = count.replace(',', "").parse::<f64>() else {
            continue;
        };
        let rest = rest.split_once(')').map_or(rest, |(_, r)| r).trim();
        if rest == "PROGRAM TOTALS" {
            total = Some(count);
        }
        let function = rest
            .split_once(':')
            .map(|(_, f)| f.split(" [").next().unwrap_or(f));
        if function == Some("processCommand") && process_command.is_none() {
            process_command = Some(count);
        }
    }
    match (total, process_command) {
        (Some(t), Some(p)) => Ok((t, p)),
        _ => Err(io::Error::other(format!(
            "no totals or processCommand in {}",
            dump.display()
        ))),
    }
}

/// Runs `send` (which sends `ops` commands) between a zero and a dump; returns
/// instructions per op (whole process, processCommand).
pub fn measured(
    server: &Server,
    ops: usize,
    send: impl FnOnce() -> io::Result<()>,
) -> io::Result<(f64, f64)> {
    control(server.pid(), "-z")?;
    send()?;
    control(server.pid(), "-d")?;
    let (total, in_command) = costs(&newest_dump(&server.dir)?)?;
    Ok((total / ops as f64, in_command / ops as f64))
}
