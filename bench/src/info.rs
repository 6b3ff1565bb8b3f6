//! Reading the server's own figures: `INFO` fields and `INFO commandstats`.

use std::collections::HashMap;
use std::io;

use crate::resp::Conn;

/// The `field:value` lines of `INFO <section>`.
pub fn info(conn: &mut Conn, section: &str) -> io::Result<HashMap<String, String>> {
    let text = conn.cmd(&["INFO", section])?.text()?;
    Ok(text
        .lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect())
}

/// One numeric field of `INFO <section>`.
pub fn number(conn: &mut Conn, section: &str, field: &str) -> io::Result<f64> {
    info(conn, section)?
        .get(field)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| io::Error::other(format!("INFO {section} has no number {field}")))
}

/// `INFO memory` `used_memory`, in bytes.
pub fn used_memory(conn: &mut Conn) -> io::Result<f64> {
    number(conn, "memory", "used_memory")
}

/// CPU seconds the server has used, user plus system (`INFO cpu`).
pub fn server_cpu(conn: &mut Conn) -> io::Result<f64> {
    let cpu = info(conn, "cpu")?;
    let get = |name: &str| -> f64 { cpu.get(name).and_then(|v| v.parse().ok()).unwrap_or(0.0) };
    Ok(get("used_cpu_user") + get("used_cpu_sys"))
}

/// One command's line of `INFO commandstats`.
#[derive(Debug, Clone, Copy, Default)]
pub struct CommandStat {
    /// Calls since the last `CONFIG RESETSTAT`.
    pub calls: f64,
    /// Microseconds spent in the command per call, as the server measures it: its total
    /// `usec` over `calls`, which the server prints rounded to two decimals as
    /// `usec_per_call` (a step of more than 1% for a command under a microsecond).
    pub usec_per_call: f64,
}

/// `INFO commandstats`, keyed by lower-case command name (`set`, `lock.acquire`).
pub fn commandstats(conn: &mut Conn) -> io::Result<HashMap<String, CommandStat>> {
    let mut stats = HashMap::new();
    for (key, value) in info(conn, "commandstats")? {
        let Some(name) = key.strip_prefix("cmdstat_") else {
            continue;
        };
        let mut stat = CommandStat::default();
        let mut usec = None;
        for part in value.split(',') {
            match part.split_once('=') {
                Some(("calls", v)) => stat.calls = v.parse().unwrap_or(0.0),
                Some(("usec", v)) => usec = v.parse::<f64>().ok(),
                Some(("usec_per_call", v)) => stat.usec_per_call = v.parse().unwrap_or(f64::NAN),
                _ => {}
            }
        }
        if let Some(usec) = usec.filter(|_| stat.calls > 0.0) {
            stat.usec_per_call = usec / stat.calls;
        }
        stats.insert(name.to_string(), stat);
    }
    Ok(stats)
}

/// `usec_per_call` of one command (NaN if it was not called).
pub fn usec_per_call(conn: &mut Conn, command: &str) -> io::Result<f64> {
    Ok(commandstats(conn)?
        .get(command)
        .map_or(f64::NAN, |s| s.usec_per_call))
}
