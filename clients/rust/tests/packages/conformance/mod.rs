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

#[test]
fn every_package_behaves_as_the_conformance_scenarios_say() {
    let mut servers: Vec<TestServer> = (0..3).map(|_| TestServer::start()).collect();
    let replica = start_replica(&servers[0], &[]);
    servers.push(replica);
    let text =
        std::fs::read_to_string(scenarios::dir().join("scenarios.txt")).expect("scenarios.txt");
    let all = scenarios::parse(&text);
    assert!(all.len() >= 15, "{} scenarios", all.len());

    let rust: Vec<String> = all.iter().map(|s| rust_driver::run(s, &servers)).collect();
    let mut report = problems("rust", &rust, &all);
    let mut errors = String::new();
    let php = std::env::var("PHP").unwrap_or_else(|_| "php".into());
    for (package, interpreter, driver) in [
        ("python", python(), "driver.py"),
        ("node", "node".to_string(), "driver.mjs"),
        ("php", php, "driver.php"),
    ] {
        let (lines, stderr) = program(&interpreter, driver, &servers);
        let found = problems(package, &lines, &all);
        if !found.is_empty() && !stderr.trim().is_empty() {
            errors.push_str(&format!("\n{package} stderr:\n{stderr}"));
        }
        report.extend(found);
    }
    assert!(
        report.is_empty(),
        "conformance failures:\n{}{errors}",
        report.join("\n")
    );
}
