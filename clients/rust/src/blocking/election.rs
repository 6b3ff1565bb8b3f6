//! Leader election on blocking connections: campaign, the leader now, and an iterator of
//! every new leader (`LOCK.WATCH`).

use std::time::Duration;

use super::lock::Lock;
use super::locker::Locker;
use crate::blocking::Link;
use crate::commands::LockInfo;
use crate::commands::info_cmd;
use crate::commands::watch_cmd;
use crate::election::Election;
use crate::election::Leader;
use crate::election::OBSERVE_ROUND;
use crate::election::next_backoff;
use crate::election::ridden_out;
use redis::RedisResult;

impl Election<Locker> {
    /// Campaigns with `value` published: blocks until elected (first come, first
    /// elected), then holds the term while the returned [`Leadership`] lives, bound to
    /// its connection, extended by a watchdog.
    pub fn campaign(&self, value: &[u8]) -> RedisResult<Leadership> {
        let options = self.campaign_options(value);
        loop {
            // A wait without limit answers only with the grant; nil cannot come, but is
            // waited out again rather than trusted.
            if let Some(lock) = self.locker.acquire(&self.key, &options)? {
                return Ok(Leadership { lock });
            }
        }
    }

    /// The leader now, `None` when nobody leads (`LOCK.INFO`).
    pub fn leader(&self) -> RedisResult<Option<Leader>> {
        let mut link = self.locker.link()?;
        let info: Option<LockInfo> = info_cmd(&self.key).query(&mut link)?;
        self.locker.give_back(link);
        Ok(info.map(|info| Leader {
            term: info.fence,
            value: info.value,
        }))
    }

    /// Every change of leader after `term` (`0`: nobody; so the first item is the leader
    /// now, if there is one), as it happens: `Some(leader)`, or `None` when nobody leads. Terms only grow. It asks
    /// `LOCK.WATCH` with the last term seen, so no change that lasted is missed. A lost
    /// connection or what a failover answers (`UNBLOCKED`, `MOVED`, `READONLY`,
    /// `LOADING`, ...) is ridden out: it reconnects, pausing from 100 ms up to 2 s between
    /// tries, and asks again. Any other error (`WRONGTYPE`, `NOPERM`) is the last item.
    pub fn observe(&self, term: u64) -> Observer {
        Observer {
            election: self.clone(),
            last: term,
            link: None,
            backoff: Duration::ZERO,
            ended: false,
        }
    }
}

/// The leadership a [`campaign`](Election::campaign) won. Dropping it resigns.
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

    /// Publishes `value` in place of the last one, same term. `false` means the
    /// leadership is lost.
    pub fn proclaim(&self, value: &[u8]) -> RedisResult<bool> {
        self.lock.proclaim(value)
    }

    /// `Err` once the leadership is known to be lost (its lock expired or was taken):
    /// stop acting as the leader.
    pub fn check(&self) -> Result<(), crate::LockLost> {
        self.lock.check()
    }

    /// Blocks until the leadership is known to be lost, or `timeout` passes (`None`).
    pub fn wait_lost(&self, timeout: Duration) -> Option<crate::LockLost> {
        self.lock.wait_lost(timeout)
    }

    /// Resigns: the next candidate is elected at once. `false` if the leadership was
    /// already lost.
    pub fn resign(self) -> RedisResult<bool> {
        self.lock.release()
    }
}

/// The changes of leader, from [`Election::observe`].
pub struct Observer {
    election: Election<Locker>,
    last: u64,
    link: Option<Link>,
    backoff: Duration,
    /// An error that is not ridden out ended it.
    ended: bool,
}

impl Observer {
    fn next_change(&mut self) -> RedisResult<Option<Leader>> {
        loop {
            let link = match self.link.as_mut() {
                Some(link) => link,
                None => {
                    let link = self.election.locker.fresh_link()?;
                    self.link.insert(link)
                }
            };
            link.set_read_timeout(Some(OBSERVE_ROUND + self.election.locker.command_timeout()))?;
            let seen: Option<(u64, Option<Vec<u8>>)> =
                watch_cmd(&self.election.key, self.last, OBSERVE_ROUND).query(link)?;
            // None: the round passed with no change; ask again.
            if let Some((term, value)) = seen {
                self.last = term;
                return Ok((term != 0).then_some(Leader { term, value }));
            }
        }
    }
}

impl Iterator for Observer {
    type Item = RedisResult<Option<Leader>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.ended {
            return None;
        }
        loop {
            if !self.backoff.is_zero() {
                std::thread::sleep(self.backoff);
            }
            match self.next_change() {
                Ok(change) => {
                    self.backoff = Duration::ZERO;
                    return Some(Ok(change));
                }
                Err(error) => {
                    // Never reused after an error: a late reply would answer the next ask.
                    self.link = None;
                    if !ridden_out(&error) {
                        self.ended = true;
                        return Some(Err(error));
                    }
                    self.backoff = next_backoff(self.backoff);
                }
            }
        }
    }
}
