//! `redis-lock`: locks for shell scripts and cron jobs, on a server with the redis-lock
//! module (docs/cli.md).

mod args;
mod child;
mod connect;
mod duration;
mod elect;
mod events;
mod exit;
mod inspect;
mod render;
mod run;
mod status;
mod sys;
mod waiting_line;

use std::process::ExitCode;

use clap::Parser;
use clap::error::ErrorKind;

use args::{Cli, Command};
use events::channel_with_signals;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            return ExitCode::from(match err.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => 0,
                _ => exit::USAGE,
            });
        }
    };
    let result = match cli.command {
        Command::Run(args) => {
            // Before any thread starts: the signals to pass on are taken by one thread.
            sys::block_forwarded();
            let (tx, rx) = channel_with_signals();
            run::run(args, &cli.connect, &tx, &rx)
        }
        Command::Elect(args) => {
            sys::block_forwarded();
            let (tx, rx) = channel_with_signals();
            elect::elect(args, &cli.connect, &tx, &rx)
        }
        Command::Leader(args) => elect::leader(args, &cli.connect),
        Command::Status(args) => inspect::status(args, &cli.connect),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            if !failure.message.is_empty() {
                eprintln!("redis-lock: {failure}");
            }
            ExitCode::from(failure.code)
        }
    }
}
