//! `redis-lock elect KEY --value V -- COMMAND`: run COMMAND only while this process
//! leads (the package's election: first come, first elected, the term is the fence);
//! on losing leadership COMMAND is stopped as on a lost lock and the runner stands again
//! (`--once`: exits). `redis-lock leader KEY [--follow]`: the leader, and each change.

use std::io::Write;
use std::sync::mpsc::{Receiver, Sender};

use redis_lock_client::{Election, Leadership};

use crate::args::{ElectArgs, LeaderArgs};
use crate::child::{LockEnv, Outcome, supervise};
use crate::connect::Connect;
use crate::events::{Event, acquire_in_thread};
use crate::exit::{self, Failure};
use crate::render::leader_line;
use crate::run::await_grant;

pub fn elect(
    args: ElectArgs,
    connect: &Connect,
    tx: &Sender<Event<Leadership>>,
    rx: &Receiver<Event<Leadership>>,
) -> Result<u8, Failure> {
    let locker = connect.target()?.locker(connect.timeout)?;
    let election = Election::new(locker, &args.key)
        .ttl(args.holding.ttl)
        .lock_delay(args.holding.grace);
    loop {
        let candidate = election.clone();
        let value = args.value.clone().into_bytes();
        acquire_in_thread(tx, move || candidate.campaign(&value).map(Some));
        let leadership = await_grant(rx, None, || {
            Failure::new(exit::UNAVAILABLE, "the campaign ended without a term")
        })?;
        let env = LockEnv {
            key: args.key.clone(),
            fence: leadership.term(),
            token: leadership.token().to_vec(),
        };
        let outcome = supervise(tx, rx, &args.holding, &env, &|| {
            leadership.check().err().map(|lost| lost.to_string())
        });
        match outcome {
            Err(failure) => {
                let _ = leadership.resign();
                return Err(failure);
            }
            Ok(Outcome::Exited(code)) => {
                let _ = leadership.resign();
                return Ok(code);
            }
            Ok(Outcome::Lost(why)) => {
                drop(leadership);
                if args.once {
                    return Err(Failure::new(
                        exit::LOST,
                        format!("leadership lost, the command was stopped: {why}"),
                    ));
                }
                eprintln!(
                    "redis-lock: leadership lost ({why}); the command was stopped; standing again"
                );
            }
        }
    }
}

pub fn leader(args: LeaderArgs, connect: &Connect) -> Result<u8, Failure> {
    let locker = connect.target()?.locker(connect.timeout)?;
    let election = Election::new(locker, &args.key);
    if !args.follow {
        let leader = election.leader()?;
        println!("{}", leader_line(leader.as_ref(), args.json));
        return Ok(if leader.is_some() { 0 } else { 1 });
    }
    let mut out = std::io::stdout().lock();
    for change in election.observe(0) {
        let leader = change?;
        if writeln!(out, "{}", leader_line(leader.as_ref(), args.json))
            .and_then(|()| out.flush())
            .is_err()
        {
            // The reader went away (a closed pipe): nothing more to say.
            return Ok(0);
        }
    }
    Ok(0)
}
