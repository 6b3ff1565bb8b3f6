//! `redis-lock run KEY -- COMMAND`: take the lock (waiting first come, first served, as
//! long as it takes unless `--no-wait` or `--wait`), run COMMAND under it, release it
//! when COMMAND exits, and exit with COMMAND's status.

use std::sync::mpsc::{Receiver, Sender};
use std::time::Duration;

use redis_lock_client::{Lock, LockOptions};

use crate::args::RunArgs;
use crate::child::{LockEnv, Outcome, supervise};
use crate::connect::{Connect, Target};
use crate::events::{Event, acquire_in_thread};
use crate::exit::{self, Failure};
use crate::waiting_line::WaitingLine;

/// The acquire's options: a watchdog always; bound to the connection unless
/// `--no-session`; the wait, mode and replicas asked for.
fn options(args: &RunArgs) -> LockOptions {
    let mut options = LockOptions::new(args.holding.ttl)
        .watchdog()
        .replicas(args.replicas)
        .fsync(args.fsync);
    if !args.no_session {
        options = options.session(args.holding.grace);
    }
    if let Some(timeout) = args.replicas_timeout {
        options = options.replicas_timeout(timeout);
    }
    options = match (args.no_wait, args.wait) {
        (true, _) => options,
        (false, Some(wait)) => options.wait(wait),
        (false, None) => options.wait(Duration::ZERO),
    };
    if let Some(limit) = args.limit {
        options.mode(redis_lock_client::Mode::Semaphore(limit))
    } else if args.shared {
        options.mode(redis_lock_client::Mode::Shared)
    } else {
        options
    }
}

/// Waits for the grant (or the signal that ends the wait), the waiting line drawn on a
/// terminal meanwhile. `Err` carries the exit code of a wait that ended without a lock.
pub fn await_grant<G>(
    rx: &Receiver<Event<G>>,
    line: Option<WaitingLine>,
    busy: impl Fn() -> Failure,
) -> Result<G, Failure> {
    let result = loop {
        match rx.recv() {
            Ok(Event::Signal(signal)) => {
                break Err(Failure::new(128 + signal as u8, String::new()));
            }
            Ok(Event::Granted(Ok(Some(guard)))) => break Ok(guard),
            Ok(Event::Granted(Ok(None))) => break Err(busy()),
            Ok(Event::Granted(Err(err))) => break Err(Failure::from(err)),
            Ok(Event::Ended) => {}
            Err(_) => {
                break Err(Failure::new(
                    exit::UNAVAILABLE,
                    "the acquire ended without a reply",
                ));
            }
        }
    };
    if let Some(line) = line {
        line.stop();
    }
    result
}

pub fn run(
    args: RunArgs,
    connect: &Connect,
    tx: &Sender<Event<Lock>>,
    rx: &Receiver<Event<Lock>>,
) -> Result<u8, Failure> {
    let target: Target = connect.target()?;
    let locker = target.locker(connect.timeout)?;
    let options = options(&args);
    let key = args.key.clone();
    acquire_in_thread(tx, move || locker.acquire(&key, &options));
    let line = if args.no_wait {
        None
    } else {
        WaitingLine::start(&target, connect.timeout, &args.key)
    };
    let lock = await_grant(rx, line, || match args.wait {
        None => Failure::new(args.conflict_exit_code, format!("{} is busy", args.key)),
        Some(wait) => Failure::new(
            exit::TIMED_OUT,
            format!(
                "{} was still busy after --wait {}",
                args.key,
                crate::duration::show(wait)
            ),
        ),
    })?;
    let env = LockEnv {
        key: args.key.clone(),
        fence: lock.fence(),
        token: lock.token().to_vec(),
    };
    let outcome = supervise(tx, rx, &args.holding, &env, &|| {
        lock.check().err().map(|lost| lost.to_string())
    });
    match outcome {
        Err(failure) => {
            let _ = lock.release();
            Err(failure)
        }
        Ok(Outcome::Lost(why)) => {
            drop(lock);
            Err(Failure::new(
                exit::LOST,
                format!("the command was stopped: {why}"),
            ))
        }
        Ok(Outcome::Exited(code)) => match lock.release() {
            Ok(true) => Ok(code),
            Ok(false) => Err(Failure::new(
                exit::LOST,
                format!(
                    "{}: the lock was no longer held when the command ended (it exited {code}): its work may have overlapped another holder's",
                    args.key
                ),
            )),
            Err(err) => {
                eprintln!(
                    "redis-lock: the command ended, but the release failed ({err}): the lock frees itself after its grace or TTL"
                );
                Ok(code)
            }
        },
    }
}
