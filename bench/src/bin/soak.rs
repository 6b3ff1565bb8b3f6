//! `soak [--smoke] [--out DIR] [--module PATH]`: the soak (`make soak`): a million locks
//! and ten thousand waiters on one server, side by side with plain string keys; writes
//! `report.md`, `samples.csv` and (with gnuplot) `soak.png` to DIR (default
//! `target/soak`), and exits non-zero when a target is missed.

use std::path::PathBuf;
use std::process::{Command, ExitCode};

use redis_lock_bench::soak::{self, Config, Kind, report};
use redis_lock_bench::{cleanup, config, server};

const USAGE: &str = "usage: soak [--smoke] [--out DIR] [--module PATH]";

fn parse() -> Result<Config, String> {
    let mut smoke = false;
    let mut out = config::target_dir().join("soak");
    let mut module = config::default_module();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value\n{USAGE}"));
        match arg.as_str() {
            "--smoke" => smoke = true,
            "--out" => out = PathBuf::from(value("--out")?),
            "--module" => module = PathBuf::from(value("--module")?),
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    Ok(if smoke {
        Config::smoke(module, out)
    } else {
        Config::full(module, out)
    })
}

/// Ten thousand waiters need ten thousand sockets here and in the server: the soft limit
/// on open files goes up to the hard one (the servers inherit it).
fn raise_open_files() {
    // SAFETY: getrlimit and setrlimit only read and write the struct passed by pointer.
    unsafe {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

fn server_version() -> String {
    Command::new(server::binary())
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|_| server::binary())
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
    raise_open_files();
    let run = || -> std::io::Result<bool> {
        let locks = soak::run_side(&cfg, Kind::Locks)?;
        let strings = soak::run_side(&cfg, Kind::Strings)?;
        std::fs::create_dir_all(&cfg.out_dir)?;
        let text = report::markdown(&cfg, &server_version(), &locks, &strings);
        std::fs::write(cfg.out_dir.join("report.md"), &text)?;
        std::fs::write(
            cfg.out_dir.join("samples.csv"),
            report::csv(&[&locks, &strings]),
        )?;
        println!("{text}");
        println!("wrote {}", cfg.out_dir.join("report.md").display());
        match report::plot(&cfg.out_dir, &[&locks, &strings])? {
            Some(png) => println!("wrote {}", png.display()),
            None => println!("no plot: gnuplot is not installed (`make soak` installs it)"),
        }
        Ok(report::passed(&cfg, &locks, &strings))
    };
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("soak: a target was missed (see the report)");
            ExitCode::FAILURE
        }
        Err(err) => {
            eprintln!("soak: {err}");
            ExitCode::FAILURE
        }
    }
}
