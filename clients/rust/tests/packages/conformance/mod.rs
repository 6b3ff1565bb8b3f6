//! The conformance suite (docs/clients.md, "One behaviour in every package"): the
//! scenarios of `clients/conformance/scenarios.txt`, run by each package's driver (Rust
//! here, Python, Node and PHP as programs) against three real masters with the module
//! and a real replica of the first, faults included (a master or the replica stopped
//! with `SIGSTOP`). Each failing scenario is reported
//! by package and name.

mod rust_driver;
mod scenarios;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{TestServer, python::python, start_replica};

/// A driver program's report lines, killed if it runs past a deadline.
fn program(interpreter: &str, driver: &str, servers: &[TestServer]) -> (Vec<String>, String) {
    let join = |values: Vec<String>| values.join(",");
    let mut child = Command::new(interpreter)
        .arg(scenarios::dir().join(driver))
        .arg(scenarios::dir().join("scenarios.txt"))
        .env(
            "CONFORMANCE_PORTS",
            join(servers.iter().map(|s| s.port.to_string()).collect()),
        )
        .env(
            "CONFORMANCE_PIDS",
            join(
                servers
                    .iter()
                    .map(|s| s.pid().expect("running").to_string())
                    .collect(),
            ),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|err| {
            panic!("cannot run {interpreter} ({err}): `make deps-test` installs it")
        });
    let deadline = Instant::now() + Duration::from_secs(240);
    while child.try_wait().expect("wait for the driver").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().expect("the driver's output");
    let lines = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    (lines, String::from_utf8_lossy(&output.stderr).into_owned())
}

/// What is wrong with `package`'s report: a scenario that failed, was skipped (every
/// package has every feature a scenario needs), or was not reported.
fn problems(package: &str, lines: &[String], all: &[scenarios::Scenario]) -> Vec<String> {
    let mut found = Vec::new();
    for scenario in all {
        let line = lines.iter().find(|line| {
            line.split_once(' ').is_some_and(|(_, rest)| {
                rest == scenario.name || rest.starts_with(&format!("{}: ", scenario.name))
            })
        });
        match line {
            Some(line) if line.starts_with("ok ") => {}
            Some(line) => found.push(format!("{package}: {line}")),
            None => found.push(format!("{package}: {}: not reported", scenario.name)),
        }
    }
    found
}

/// Three fresh masters with the module and a real replica of the first (server 3), for
/// one package's run: each package runs on its own servers, so that the four run at
/// once (their scenarios mostly wait for TTLs and timeouts) and none meets another's
/// keys or connections.
fn servers() -> Vec<TestServer> {
    let mut servers: Vec<TestServer> = (0..3).map(|_| TestServer::start()).collect();
    let replica = start_replica(&servers[0], &[]);
    servers.push(replica);
    servers
}

/// Every scenario of scenarios.txt.
fn scenarios() -> Vec<scenarios::Scenario> {
    let text =
        std::fs::read_to_string(scenarios::dir().join("scenarios.txt")).expect("scenarios.txt");
    let all = scenarios::parse(&text);
    assert!(all.len() >= 15, "{} scenarios", all.len());
    all
}

/// Runs `driver` on `interpreter` over fresh servers: every scenario must pass.
fn passes(package: &str, interpreter: &str, driver: &str) {
    let servers = servers();
    let all = scenarios();
    let (lines, stderr) = program(interpreter, driver, &servers);
    let report = problems(package, &lines, &all);
    assert!(
        report.is_empty(),
        "conformance failures:\n{}\n{package} stderr:\n{stderr}",
        report.join("\n")
    );
}

#[test]
fn the_rust_package_behaves_as_the_conformance_scenarios_say() {
    let servers = servers();
    let all = scenarios();
    let lines: Vec<String> = all.iter().map(|s| rust_driver::run(s, &servers)).collect();
    let report = problems("rust", &lines, &all);
    assert!(
        report.is_empty(),
        "conformance failures:\n{}",
        report.join("\n")
    );
}

#[test]
fn the_python_package_behaves_as_the_conformance_scenarios_say() {
    passes("python", &python(), "driver.py");
}

#[test]
fn the_node_package_behaves_as_the_conformance_scenarios_say() {
    passes("node", "node", "driver.mjs");
}

#[test]
fn the_php_package_behaves_as_the_conformance_scenarios_say() {
    let php = std::env::var("PHP").unwrap_or_else(|_| "php".into());
    passes("php", &php, "driver.php");
}
