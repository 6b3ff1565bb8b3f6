//! Leader election on async connections: [`crate::Election`]'s calls as futures, on an
//! [`aio::Locker`](crate::aio::Locker).

use std::time::Duration;

use redis::RedisResult;

use super::conn::AsyncLink;
use crate::aio::{Lock, Locker};
use crate::commands::watch_cmd;
use crate::election::{Leader, OBSERVE_ROUND, next_backoff, ridden_out};

/// One election on async connections: [`crate::Election`] on an [`aio::Locker`](Locker),
/// whose calls are futures. A campaign's lock is bound to the locker's shared
/// connection, so an async cluster locker cannot campaign (see [`Locker::acquire`]).
///
/// ```no_run
/// # async fn run() -> redis::RedisResult<()> {
/// use redis_lock_client::aio::{Election, Locker};
///
/// let election = Election::new(Locker::open("redis://127.0.0.1:7379/")?, "service:leader");
/// let mut observer = election.observe(0);
/// tokio::spawn(async move {
///     while let Ok(leader) = observer.next().await {
///         println!("leader now: {leader:?}");
///     }
/// });
/// let leadership = election.campaign(b"10.0.0.7:8080").await?;
/// leadership.resign().await?;
/// # Ok(())
/// # }
/// ```
pub type Election = crate::election::Election<Locker>;

impl Election {
    /// Campaigns with `value` published: resolves once elected (first come, first
    /// elected). Must run inside a tokio runtime (the watchdog is a task).
    pub async fn campaign(&self, value: &[u8]) -> RedisResult<Leadership> {
        let options = self.campaign_options(value);
        loop {
            if let Some(lock) = self.locker.acquire(&self.key, &options).await? {
                return Ok(Leadership { lock });
            }
        }
    }

    /// The leader now, `None` when nobody leads (`LOCK.INFO`).
    pub async fn leader(&self) -> RedisResult<Option<Leader>> {
        let info = self.locker.info(&self.key).await?;
        Ok(info.map(|info| Leader {
            term: info.fence,
            value: info.value,
        }))
    }

    /// Every change of leader after `term`, as [`crate::Election::observe`], one at a
    /// time from [`Observer::next`], on a connection of the observer's own.
    pub fn observe(&self, term: u64) -> Observer {
        Observer {
            election: self.clone(),
            last: term,
            link: None,
            backoff: Duration::ZERO,
        }
    }
}

/// The leadership an async campaign won. Dropping it resigns (from a task).
#[derive(Debug)]
pub struct Leadership {
    lock: Lock,
}

impl Leadership {
    /// The term: the fence of this leadership, to send with every write.
    pub fn term(&self) -> u64 {
        self.lock.fence()
    }

    /// The leadership's token (the lock's), for `LOCK.DO` on the leader's behalf from
    /// another process: a secret, as every token.
    pub fn token(&self) -> &[u8] {
        self.lock.token()
    }

    /// Publishes `value` in place of the last one, same term; `false` if lost.
    pub async fn proclaim(&self, value: &[u8]) -> RedisResult<bool> {
        self.lock.proclaim(value).await
    }

    /// `Err` once the leadership is known to be lost.
    pub fn check(&self) -> Result<(), crate::LockLost> {
        self.lock.check()
    }

    /// Resolves when the leadership is known to be lost; race it against the work.
    pub async fn lost(&self) -> crate::LockLost {
        self.lock.lost().await
    }

    /// Resigns: the next candidate is elected at once; `false` if already lost.
    pub async fn resign(self) -> RedisResult<bool> {
        self.lock.release().await
    }
}

/// The changes of leader, from [`Election::observe`].
pub struct Observer {
    election: Election,
    last: u64,
    link: Option<AsyncLink>,
    backoff: Duration,
}

impl Observer {
    /// The next change of leader: `Some(leader)`, or `None` when nobody leads. A lost
    /// connection or what a failover answers is ridden out as
    /// [`crate::Election::observe`] rides it out (reconnecting, pausing from 100 ms up to
    /// 2 s, asking again with the last term); any other error is returned, and ends the
    /// observation: stop calling.
    pub async fn next(&mut self) -> RedisResult<Option<Leader>> {
        loop {
            if !self.backoff.is_zero() {
                tokio::time::sleep(self.backoff).await;
            }
            match self.next_change().await {
                Ok(change) => {
                    self.backoff = Duration::ZERO;
                    return Ok(change);
                }
                Err(error) => {
                    self.link = None;
                    if !ridden_out(&error) {
                        return Err(error);
                    }
                    self.backoff = next_backoff(self.backoff);
                }
            }
        }
    }

    async fn next_change(&mut self) -> RedisResult<Option<Leader>> {
        let limit = OBSERVE_ROUND + self.election.locker.command_timeout();
        loop {
            let link = match self.link.as_mut() {
                Some(link) => link,
                None => {
                    let link = self.election.locker.open_link().await?;
                    self.link.insert(link)
                }
            };
            let cmd = watch_cmd(&self.election.key, self.last, OBSERVE_ROUND);
            let seen: Option<(u64, Option<Vec<u8>>)> =
                match tokio::time::timeout(limit, cmd.query_async(link)).await {
                    Ok(reply) => reply?,
                    Err(_) => {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "LOCK.WATCH timed out",
                        )
                        .into());
                    }
                };
            if let Some((term, value)) = seen {
                self.last = term;
                return Ok((term != 0).then_some(Leader { term, value }));
            }
        }
    }
}
