//! Lock health in Prometheus (docs/operations.md, "Prometheus"): Debian's
//! `prometheus-redis-exporter`, started as the page says with the script the project ships
//! (`monitoring/redis-lock.lua`), puts every figure of `INFO lock` on `/metrics` under a
//! stable name, beside what LOCK.CONTENDED tells; and the alert rules shipped with it pass
//! `promtool check rules` and their unit tests (`promtool test rules`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::*;

/// The project's `monitoring/` folder.
fn monitoring() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("monitoring")
}

/// A running `prometheus-redis-exporter` for one server; killed when dropped.
struct Exporter {
    child: Child,
    port: u16,
}

/// The line of `docs/operations.md` (an `sh` block) that starts with `program`, as words.
fn documented(program: &str) -> Vec<String> {
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md");
    let text = std::fs::read_to_string(&page).expect("docs/operations.md");
    redis_lock_testkit::pages::blocks(&text, &page)
        .into_iter()
        .filter(|block| block.lang == "sh")
        .flat_map(|block| block.lines)
        .map(|(_, line)| redis_lock_testkit::pages::words(&line))
        .find(|words| words.first().is_some_and(|first| first == program))
        .unwrap_or_else(|| panic!("no `{program}` line in docs/operations.md"))
}

impl Exporter {
    /// The exporter as `docs/operations.md` starts it, for `server`, listening on a port
    /// of its own.
    fn start(server: &TestServer) -> Self {
        let port = free_port();
        let mut args = documented("prometheus-redis-exporter");
        let program = args.remove(0);
        for at in 0..args.len() {
            match args[at].as_str() {
                "-redis.addr" => args[at + 1] = format!("redis://127.0.0.1:{}", server.port),
                "-web.listen-address" => args[at + 1] = format!("127.0.0.1:{port}"),
                _ => {}
            }
        }
        assert!(
            args.iter().any(|a| a == "monitoring/redis-lock.lua"),
            "{args:?}"
        );
        let child = Command::new(program)
            .args(&args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus-redis-exporter (installed by scripts/install-deps.sh --test)");
        let exporter = Exporter { child, port };
        poll_until(Duration::from_secs(10), "the exporter to listen", || {
            port_open(port)
        });
        exporter
    }

    /// The text of `/metrics`.
    fn scrape(&self) -> String {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).expect("the exporter");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        assert!(response.starts_with("HTTP/1.0 200"), "{response}");
        response
    }

    /// The lock figures of a scrape: `redis_script_values{key="NAME"} VALUE` by name.
    fn lock_figures(&self) -> Vec<(String, f64)> {
        self.scrape()
            .lines()
            .filter_map(|line| line.strip_prefix("redis_script_values{key=\""))
            .filter_map(|rest| {
                let (name, value) = rest.split_once("\"} ")?;
                Some((name.to_string(), value.trim().parse().ok()?))
            })
            .collect()
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn figure(figures: &[(String, f64)], name: &str) -> f64 {
    figures
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("{name} on /metrics: {figures:?}"))
        .1
}

#[test]
fn the_exporter_with_the_shipped_script_exports_every_info_lock_figure() {
    let server = TestServer::start();
    let mut con = server.connection();
    // A hold that ended, a wait that ended, a lock that others wait for now, a shared
    // lock and a session-bound lock in its grace.
    let (token, _) = acquire(&mut con, "done", 30_000, &[]).expect("granted");
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(release(&mut con, "done", &token), 1);
    acquire(&mut con, "busy", 30_000, &[]).expect("granted");
    let mut timed_out = Waiter::start(&server, "busy", 30_000, &["WAIT", "20"]);
    assert_eq!(timed_out.granted(), None);
    let _waiting = Waiter::start(&server, "busy", 30_000, &["WAIT", "0"]);
    acquire(&mut con, "readers", 30_000, &["SHARED"]).expect("granted");
    {
        let mut gone = server.connection();
        session_lock(&mut gone, "session", "s", 60_000);
    }
    poll_until(Duration::from_secs(10), "the session lock in grace", || {
        lock_stat(&mut con, "lock_sessions_in_grace") == 1
    });

    let exporter = Exporter::start(&server);
    let figures = exporter.lock_figures();
    let info = server_info(&mut con, "lock");
    let mut expected = Vec::new();
    for line in info.lines().map(str::trim) {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        if !name.starts_with("lock_") {
            continue;
        }
        if name.ends_with("_usec") {
            // p50=..,p99=..,p99.9=.. as three figures.
            for part in value.split(',') {
                let (percentile, _) = part.split_once('=').expect("p=value");
                expected.push(format!("{name}_{}", percentile.replace('.', "_")));
            }
        } else {
            expected.push(name.to_string());
        }
    }
    assert!(expected.len() >= 22, "{info}");
    for name in &expected {
        figure(&figures, name);
    }
    // The gauges and counters as the server counts them now.
    for (name, value) in [
        ("lock_keys", 3.0),
        ("lock_holders", 3.0),
        ("lock_waiters", 1.0),
        ("lock_sessions_in_grace", 1.0),
        ("lock_wait_timeouts", 1.0),
        ("lock_releases", 1.0),
        ("lock_contended_keys", 1.0),
    ] {
        assert_eq!(figure(&figures, name), value, "{name}");
    }
    assert!(figure(&figures, "lock_hold_usec_p50") > 0.0);
    assert!(figure(&figures, "lock_wait_usec_p99_9") >= 15_000.0);
    assert!(figure(&figures, "lock_contended_longest_wait_ms") >= 0.0);
    assert!(
        figure(&figures, "lock_contended_longest_held_ms")
            >= figure(&figures, "lock_contended_longest_wait_ms")
    );
    assert!(figure(&figures, "lock_allocated_bytes") > 0.0);
}

#[test]
fn the_exporter_exports_no_lock_figures_from_a_server_without_the_module() {
    // The script needs the module: a plain server gives nothing to alert on but the
    // figures' absence (RedisLockMetricsMissing).
    let server = TestServer::without_module();
    let exporter = Exporter::start(&server);
    let metrics = exporter.scrape();
    assert!(
        metrics.contains(
            "redis_exporter_last_scrape_error{err=\"ERR redis-lock is not loaded on this server"
        ),
        "{metrics}"
    );
    assert!(exporter.lock_figures().is_empty());
}

/// Runs `promtool` with `args` in `monitoring/`; its output, which must say it passed.
fn promtool(args: &[&str]) -> String {
    let output = Command::new("promtool")
        .args(args)
        .current_dir(monitoring())
        .output()
        .expect("promtool (Debian's prometheus, installed by scripts/install-deps.sh --test)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "promtool {args:?}:\n{text}");
    text
}

#[test]
fn the_alert_rules_pass_promtool_check_and_their_unit_tests() {
    // The page's line: `cd monitoring && promtool check rules ... && promtool test rules ...`.
    let line = documented("cd");
    assert_eq!(line[1], "monitoring", "{line:?}");
    let runs: Vec<Vec<&str>> = line[3..]
        .split(|word| word == "&&")
        .map(|run| run.iter().map(String::as_str).collect())
        .collect();
    assert_eq!(runs.len(), 2, "{line:?}");
    assert_eq!(
        runs[0],
        ["promtool", "check", "rules", "redis-lock-alerts.yml"]
    );
    assert_eq!(
        runs[1],
        ["promtool", "test", "rules", "redis-lock-alerts.test.yml"]
    );
    let checked = promtool(&runs[0][1..]);
    assert!(checked.contains("SUCCESS: 5 rules found"), "{checked}");
    let tested = promtool(&runs[1][1..]);
    assert!(tested.contains("SUCCESS"), "{tested}");
}
