//! Leader election on one lock, as etcd's `Campaign` / `Proclaim` / `Resign` /
//! `Leader` / `Observe`: candidates queue for the lock (first come, first elected), the
//! leader publishes its address as the lock's value, the fence is the leader's term, and
//! followers learn of every new leader with `LOCK.WATCH`, without polling.

use std::time::Duration;

use redis::RedisError;

use crate::blocking::Locker;
use crate::options::LockOptions;

/// How long one `LOCK.WATCH` of an [`Observer`] waits before it asks again: the round
/// trip that finds a dead connection.
pub(crate) const OBSERVE_ROUND: Duration = Duration::from_secs(30);
/// The longest pause between two tries to reach the server again.
pub(crate) const MOST_BACKOFF: Duration = Duration::from_secs(2);

/// The error replies `observe` rides out by asking again: what a failover, a restart or
/// a slot move answers a watcher (docs/election.md). Every package rides out the same.
const RIDDEN_OUT: [&str; 8] = [
    "UNBLOCKED",
    "MOVED",
    "ASK",
    "READONLY",
    "LOADING",
    "MASTERDOWN",
    "TRYAGAIN",
    "CLUSTERDOWN",
];

/// Whether `observe` rides out `error` (asks again after a pause that doubles from
/// 100 ms to 2 s): a lost, refused or timed-out connection, or a reply of `RIDDEN_OUT`.
/// Any other error ends the observation.
pub(crate) fn ridden_out(error: &RedisError) -> bool {
    match error.code() {
        Some(code) => RIDDEN_OUT.contains(&code),
        None => {
            error.is_io_error()
                || error.is_connection_dropped()
                || error.is_connection_refusal()
                || error.is_timeout()
        }
    }
}

/// The pause before the next ask after a ridden-out error.
pub(crate) fn next_backoff(backoff: Duration) -> Duration {
    (backoff * 2).clamp(Duration::from_millis(100), MOST_BACKOFF)
}

/// A leader as followers see it: its term (the fence of its grant, greater than every
/// earlier term of this election) and the value it published.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// The leader's term: send it with every write made on the leader's behalf, and
    /// have the resource refuse terms lower than the highest it has seen.
    pub term: u64,
    /// What the leader published (its address, say); `None` if nothing.
    pub value: Option<Vec<u8>>,
}

/// One election: a key whose holder is the leader.
///
/// ```no_run
/// use std::time::Duration;
/// use redis_lock_client::{Election, Locker};
///
/// # fn main() -> redis::RedisResult<()> {
/// let election = Election::new(Locker::open("redis://127.0.0.1:7379/")?, "service:leader");
/// // A follower, in a thread of its own: every new leader, as it happens.
/// let observer = election.clone();
/// std::thread::spawn(move || {
///     for leader in observer.observe(0) {
///         println!("leader now: {leader:?}");
///     }
/// });
/// // A candidate: blocks until elected.
/// let leadership = election.campaign(b"10.0.0.7:8080")?;
/// // ... lead, sending leadership.term() with every write; check leadership.check() ...
/// leadership.resign()?;
/// # Ok(())
/// # }
/// ```
///
/// The same election on async connections is [`aio::Election`](crate::aio::Election),
/// this type on an [`aio::Locker`](crate::aio::Locker).
#[derive(Clone, Debug)]
pub struct Election<L = Locker> {
    pub(crate) locker: L,
    pub(crate) key: Vec<u8>,
    ttl: Duration,
    lock_delay: Duration,
}

impl<L> Election<L> {
    /// The election on `key`, on `locker` (a [`Locker`], or an
    /// [`aio::Locker`](crate::aio::Locker)): a leader's lock lives 30 s unless its
    /// watchdog extends it, and a leader whose connection closes is replaced 5 s later
    /// (its lock-delay).
    pub fn new(locker: L, key: impl AsRef<[u8]>) -> Self {
        Election {
            locker,
            key: key.as_ref().to_vec(),
            ttl: Duration::from_secs(30),
            lock_delay: Duration::from_secs(5),
        }
    }

    /// The leader's TTL: how long a leader that is alive but cannot reach the server
    /// keeps its term (its watchdog extends it every third of it).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The lock-delay: how long after a leader's connection closes the next candidate is
    /// elected (`SESSION grace-ms`). A leader cut off rather than dead may still act
    /// that long; nobody else leads meanwhile.
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = delay;
        self
    }

    /// What a campaign with `value` acquires: a wait without limit, bound to the
    /// connection with the lock-delay, extended by a watchdog, publishing `value`.
    pub(crate) fn campaign_options(&self, value: &[u8]) -> LockOptions {
        LockOptions::new(self.ttl)
            .wait(Duration::ZERO)
            .session(self.lock_delay)
            .watchdog()
            .value(value)
    }
}
