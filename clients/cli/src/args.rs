//! The command line: `redis-lock [connection] run|elect|leader|status ...`.

use std::ffi::OsString;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand};
use redis_lock_client::Replicas;

use crate::connect::Connect;
use crate::duration;

/// Distributed locks for shell scripts and cron jobs, on a server with the redis-lock
/// module: run a command under a lock (first come, first served, fenced), run it only
/// while this process leads, see who holds what.
#[derive(Parser, Debug)]
#[command(
    name = "redis-lock",
    version,
    disable_help_flag = true,
    disable_help_subcommand = true
)]
pub struct Cli {
    #[command(flatten)]
    pub connect: Connect,
    /// Print help (-h is the host, as in redis-cli)
    #[arg(long, action = ArgAction::Help, global = true)]
    pub help: Option<bool>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Take the lock, run COMMAND under it, release it when COMMAND exits
    #[command(disable_help_flag = true)]
    Run(RunArgs),
    /// Run COMMAND only while this process leads the election on KEY
    #[command(disable_help_flag = true)]
    Elect(ElectArgs),
    /// Print the leader of the election on KEY (its value and fence)
    #[command(disable_help_flag = true)]
    Leader(LeaderArgs),
    /// Who holds what: holders, waiters, mode, limit; never a token
    #[command(disable_help_flag = true)]
    Status(StatusArgs),
}

/// What keeps the lock while COMMAND runs, for `run` and `elect`.
#[derive(Args, Debug, Clone)]
pub struct Holding {
    /// The lock's time to live; the watchdog renews it every third of it while COMMAND runs
    #[arg(long, default_value = "30s", value_parser = duration::positive)]
    pub ttl: Duration,
    /// How long after the runner's connection closes (the runner died) the lock is free:
    /// the lock is bound to the connection (SESSION), and a connection blip shorter than
    /// this is ridden out
    #[arg(long = "session", value_name = "GRACE", default_value = "5s", value_parser = duration::parse)]
    pub grace: Duration,
    /// When the lock is lost: how long COMMAND has after SIGTERM before SIGKILL
    #[arg(long, default_value = "10s", value_parser = duration::parse)]
    pub kill_after: Duration,
    /// The command and its arguments, after --
    #[arg(required = true, last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The lock's key
    pub key: String,
    /// Exit at once when the lock is busy (with --conflict-exit-code, 75 by default)
    #[arg(short = 'n', long, conflicts_with = "wait")]
    pub no_wait: bool,
    /// Wait at most this long for the lock (exit 124 after); without it, wait as long as
    /// it takes, first come, first served
    #[arg(short = 'w', long, value_parser = duration::positive)]
    pub wait: Option<Duration>,
    /// The exit code when the lock is busy and --no-wait is given
    #[arg(short = 'E', long, default_value_t = crate::exit::BUSY, value_parser = clap::value_parser!(u8).range(1..))]
    pub conflict_exit_code: u8,
    /// Hold the lock as a reader: beside other --shared runners, never beside an
    /// exclusive one
    #[arg(long)]
    pub shared: bool,
    /// At most N runners of KEY at once (a semaphore); every runner of KEY gives the same N
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: Option<u32>,
    /// Do not bind the lock to the runner's connection: a runner that dies keeps it
    /// until its TTL ends
    #[arg(long)]
    pub no_session: bool,
    /// How many replicas must have the grant and each renewal: auto (1 when the master
    /// has a replica online), or a number (0: none)
    #[arg(long, default_value = "auto", value_parser = parse_replicas)]
    pub replicas: Replicas,
    /// How long the replicas' acknowledgement is waited for (default: a tenth of the
    /// TTL, at most 1 s)
    #[arg(long, value_parser = duration::positive)]
    pub replicas_timeout: Option<Duration>,
    /// The grant counts once the master (and the replicas asked for) fsynced it
    /// (WAITAOF; Redis 7.2+ or Valkey 8+ with appendonly yes)
    #[arg(long)]
    pub fsync: bool,
    #[command(flatten)]
    pub holding: Holding,
}

#[derive(Args, Debug)]
pub struct ElectArgs {
    /// The election's key
    pub key: String,
    /// What this candidate publishes while it leads (its address, say): `leader` prints it
    #[arg(long)]
    pub value: String,
    /// Exit when leadership is lost, instead of standing again
    #[arg(long)]
    pub once: bool,
    #[command(flatten)]
    pub holding: Holding,
}

#[derive(Args, Debug)]
pub struct LeaderArgs {
    /// The election's key
    pub key: String,
    /// Print each change of leader as it happens (LOCK.WATCH), until interrupted
    #[arg(long)]
    pub follow: bool,
    /// One JSON object per line
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The locks to show (none: every lock of the database, by SCAN)
    pub keys: Vec<String>,
    /// The locks clients wait for now, the longest-waiting first
    #[arg(long, conflicts_with = "keys")]
    pub contended: bool,
    /// At most this many contended locks (1 to 1000)
    #[arg(long, default_value_t = 10, requires = "contended", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub count: u32,
    /// JSON for scripts instead of a table
    #[arg(long)]
    pub json: bool,
}

fn parse_replicas(text: &str) -> Result<Replicas, String> {
    if text.eq_ignore_ascii_case("auto") {
        return Ok(Replicas::Auto);
    }
    text.parse::<usize>()
        .ok()
        .filter(|n| *n <= 100)
        .map(Replicas::Exactly)
        .ok_or_else(|| format!("'{text}' is not auto or a number of replicas from 0 to 100"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_takes_its_command_after_the_double_dash() {
        let cli = Cli::try_parse_from([
            "redis-lock",
            "-p",
            "7000",
            "run",
            "jobs:nightly",
            "-n",
            "--ttl",
            "10s",
            "--",
            "backup",
            "--full",
        ])
        .expect("parses");
        assert_eq!(cli.connect.port, 7000);
        let Command::Run(run) = cli.command else {
            panic!("run")
        };
        assert!(run.no_wait);
        assert_eq!(run.holding.ttl, Duration::from_secs(10));
        assert_eq!(run.holding.grace, Duration::from_secs(5));
        assert_eq!(run.holding.command, ["backup", "--full"]);
        assert_eq!(run.replicas, Replicas::Auto);
    }

    #[test]
    fn no_wait_and_wait_exclude_each_other_and_a_command_is_required() {
        assert!(
            Cli::try_parse_from(["redis-lock", "run", "k", "-n", "-w", "5s", "--", "true"])
                .is_err()
        );
        assert!(Cli::try_parse_from(["redis-lock", "run", "k"]).is_err());
        assert!(
            Cli::try_parse_from(["redis-lock", "run", "k", "--replicas", "many", "--", "true"])
                .is_err()
        );
    }
}
