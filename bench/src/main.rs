//! `redis-lock-bench [--smoke] [--only a,b] [--out DIR] [--module PATH]`: runs the
//! benchmark, prints the table and writes `results.md`, `results.json` and (with
//! gnuplot) `contention.png` to DIR (default `target/bench`).

use std::path::PathBuf;
use std::process::ExitCode;

use redis_lock_bench::config::{self, Config, SCENARIOS};
use redis_lock_bench::{chart, cleanup};

const USAGE: &str =
    "usage: redis-lock-bench [--smoke] [--only SCENARIO,...] [--out DIR] [--module PATH]";

fn parse() -> Result<Config, String> {
    let mut smoke = false;
    let mut only: Option<Vec<String>> = None;
    let mut out = config::target_dir().join("bench");
    let mut module = config::default_module();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value\n{USAGE}"));
        match arg.as_str() {
            "--smoke" => smoke = true,
            "--only" => only = Some(value("--only")?.split(',').map(str::to_string).collect()),
            "--out" => out = PathBuf::from(value("--out")?),
            "--module" => module = PathBuf::from(value("--module")?),
            "-h" | "--help" => return Err(format!("{USAGE}\nscenarios: {}", SCENARIOS.join(","))),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    let mut cfg = if smoke {
        Config::smoke(module, out)
    } else {
        Config::full(module, out)
    };
    if let Some(only) = only {
        if let Some(bad) = only.iter().find(|s| !SCENARIOS.contains(&s.as_str())) {
            return Err(format!(
                "unknown scenario {bad}; known: {}",
                SCENARIOS.join(",")
            ));
        }
        cfg.only = only;
    }
    Ok(cfg)
}

fn main() -> ExitCode {
    cleanup::on_signal_stop_servers();
    let cfg = match parse() {
        Ok(cfg) => cfg,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let report = match redis_lock_bench::run(&cfg) {
        Ok(report) => report,
        Err(err) => {
            eprintln!("redis-lock-bench: {err}");
            return ExitCode::FAILURE;
        }
    };
    println!("{}", report.markdown());
    match report.write() {
        Ok(files) => {
            for file in files {
                eprintln!("wrote {}", file.display());
            }
        }
        Err(err) => {
            eprintln!("redis-lock-bench: cannot write results: {err}");
            return ExitCode::FAILURE;
        }
    }
    match chart::draw(&report.contention, &cfg.out_dir) {
        Ok(Some(png)) => eprintln!("wrote {}", png.display()),
        Ok(None) => eprintln!("no chart (gnuplot not installed or no contention data)"),
        Err(err) => eprintln!("chart failed: {err}"),
    }
    // Missed targets are reported in the table, not as a failure: the numbers of a
    // loaded machine must still be written.
    ExitCode::SUCCESS
}
