//! Where a blocking [`Locker`](crate::Locker) gets its connections: one server
//! ([`redis::Client`]), the master a Sentinel names (`redis::sentinel::SentinelClient`,
//! asked again for every new connection, so that a failover is followed), or a Redis
//! Cluster ([`redis::cluster::ClusterClient`], which routes each command to the node of
//! its key and follows `MOVED`/`ASK`), and the idle
//! connections it keeps for the next lock, so that taking a lock does not open a new
//! connection each time.

use std::cell::Cell;
use std::sync::Mutex;
use std::time::Duration;

use redis::{Connection, ConnectionLike, RedisResult, Value};

/// A blocking connection to `client` with connect, read and write timeouts.
pub(crate) fn connect(client: &redis::Client, timeout: Duration) -> RedisResult<Connection> {
    let con = client.get_connection_with_timeout(timeout)?;
    con.set_read_timeout(Some(timeout))?;
    con.set_write_timeout(Some(timeout))?;
    Ok(con)
}

/// The server, Sentinel-managed master or cluster a locker connects to.
#[derive(Clone)]
pub(crate) enum Source {
    Server(redis::Client),
    #[cfg(feature = "sentinel")]
    Sentinel(std::sync::Arc<Mutex<redis::sentinel::SentinelClient>>),
    #[cfg(feature = "cluster")]
    Cluster(Box<redis::cluster::ClusterClient>),
    #[cfg(feature = "r2d2")]
    Pool(r2d2::Pool<redis::Client>),
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Server(client) => write!(f, "Server({:?})", client.get_connection_info()),
            #[cfg(feature = "sentinel")]
            Source::Sentinel(_) => f.write_str("Sentinel"),
            #[cfg(feature = "cluster")]
            Source::Cluster(_) => f.write_str("Cluster"),
            #[cfg(feature = "r2d2")]
            Source::Pool(pool) => write!(f, "Pool({:?})", pool.state()),
        }
    }
}

impl Source {
    /// A new connection with connect, read and write timeouts.
    pub(crate) fn connect(&self, timeout: Duration) -> RedisResult<Link> {
        match self {
            Source::Server(client) => {
                Ok(Link::new(Conn::Server(connect(client, timeout)?), timeout))
            }
            #[cfg(feature = "sentinel")]
            Source::Sentinel(client) => {
                let con = client
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_connection()?;
                con.set_read_timeout(Some(timeout))?;
                con.set_write_timeout(Some(timeout))?;
                Ok(Link::new(Conn::Server(con), timeout))
            }
            #[cfg(feature = "cluster")]
            Source::Cluster(client) => {
                let con = client.get_connection()?;
                con.set_read_timeout(Some(timeout))?;
                con.set_write_timeout(Some(timeout))?;
                Ok(Link::new(Conn::Cluster(Box::new(con)), timeout))
            }
            #[cfg(feature = "r2d2")]
            Source::Pool(pool) => {
                let con = pool.get_timeout(timeout).map_err(|err| {
                    redis::RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no connection from the pool: {err}"),
                    ))
                })?;
                con.set_read_timeout(Some(timeout))?;
                con.set_write_timeout(Some(timeout))?;
                Ok(Link::new(Conn::Pooled(con), timeout))
            }
        }
    }
}

/// A connection to a server or to a cluster (boxed: a cluster connection is large, and a
/// guard keeps its link in a mutex for its whole life).
enum Conn {
    Server(Connection),
    #[cfg(feature = "cluster")]
    Cluster(Box<redis::cluster::ClusterConnection>),
    /// Borrowed from the program's pool: back to it when dropped.
    #[cfg(feature = "r2d2")]
    Pooled(r2d2::PooledConnection<redis::Client>),
}

/// A connection, and the read timeout it has.
pub(crate) struct Link {
    conn: Conn,
    /// The read timeout last set on the connection (every one is set through
    /// `set_read_timeout`), `None` when unknown (a setting that failed): setting the same
    /// one again, as each lock taken from the idle connections does, costs no system
    /// call.
    read_timeout: Cell<Option<Option<Duration>>>,
}

impl Link {
    /// `conn`, whose read timeout was just set to `timeout`.
    fn new(conn: Conn, timeout: Duration) -> Self {
        Link {
            conn,
            read_timeout: Cell::new(Some(Some(timeout))),
        }
    }

    /// Whether it is a cluster's: its exchanges may follow a `MOVED` to another node.
    pub(crate) fn on_cluster(&self) -> bool {
        #[cfg(feature = "cluster")]
        if matches!(self.conn, Conn::Cluster(_)) {
            return true;
        }
        false
    }

    pub(crate) fn set_read_timeout(&self, timeout: Option<Duration>) -> RedisResult<()> {
        if self.read_timeout.get() == Some(timeout) {
            return Ok(());
        }
        self.read_timeout.set(None);
        match &self.conn {
            Conn::Server(con) => con.set_read_timeout(timeout),
            #[cfg(feature = "cluster")]
            Conn::Cluster(con) => con.set_read_timeout(timeout),
            #[cfg(feature = "r2d2")]
            Conn::Pooled(con) => con.set_read_timeout(timeout),
        }?;
        self.read_timeout.set(Some(timeout));
        Ok(())
    }

    /// Sends `cmds` in one round trip (a pipeline; on a cluster, each to the master of
    /// `key`'s slot, one after another on that node's connection): each reply, an error
    /// reply as its `Err`.
    pub(crate) fn exchange(
        &mut self,
        key: &[u8],
        cmds: &[redis::Cmd],
    ) -> RedisResult<Vec<RedisResult<Value>>> {
        #[cfg(feature = "cluster")]
        if let Conn::Cluster(con) = &mut self.conn {
            use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
            let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(
                crate::replicas::slot(key),
                SlotAddr::Master,
            )));
            let mut replies = Vec::with_capacity(cmds.len());
            for cmd in cmds {
                match con.route_command(cmd, route.clone()) {
                    Err(err) if err.code().is_none() => return Err(err),
                    reply => replies.push(reply),
                }
            }
            return Ok(replies);
        }
        let _ = key;
        exchange(self, cmds)
    }

    fn inner(&mut self) -> &mut dyn ConnectionLike {
        match &mut self.conn {
            Conn::Server(con) => con,
            #[cfg(feature = "cluster")]
            Conn::Cluster(con) => con.as_mut(),
            #[cfg(feature = "r2d2")]
            Conn::Pooled(con) => &mut **con,
        }
    }
}

impl ConnectionLike for Link {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.inner().req_packed_command(cmd)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.inner().req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        match &self.conn {
            Conn::Server(con) => con.get_db(),
            #[cfg(feature = "cluster")]
            Conn::Cluster(con) => con.get_db(),
            #[cfg(feature = "r2d2")]
            Conn::Pooled(con) => con.get_db(),
        }
    }

    fn check_connection(&mut self) -> bool {
        self.inner().check_connection()
    }

    fn is_open(&self) -> bool {
        match &self.conn {
            Conn::Server(con) => con.is_open(),
            #[cfg(feature = "cluster")]
            Conn::Cluster(con) => con.is_open(),
            #[cfg(feature = "r2d2")]
            Conn::Pooled(con) => con.is_open(),
        }
    }
}

/// How many idle connections a locker keeps for its next locks.
const MAX_IDLE: usize = 16;

/// A locker's source, the connections it keeps idle between locks, and what it learned
/// of its masters' replicas (forgotten when a new connection is made: a failover's new
/// master, a reconnect).
#[derive(Debug)]
pub(crate) struct Links {
    pub(crate) source: Source,
    idle: Mutex<Vec<Link>>,
    /// Whether its servers hold a grant's reply for their replicas themselves.
    pub(crate) server_waits: crate::replicas::ServerWaits,
    /// What it learned of them where they do not (Redis 7.0).
    pub(crate) learned: crate::redis70::Learned,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.conn {
            Conn::Server(_) => "Link::Server",
            #[cfg(feature = "cluster")]
            Conn::Cluster(_) => "Link::Cluster",
            #[cfg(feature = "r2d2")]
            Conn::Pooled(_) => "Link::Pooled",
        })
    }
}

impl Links {
    pub(crate) fn new(source: Source) -> Self {
        Links {
            source,
            idle: Mutex::new(Vec::new()),
            server_waits: crate::replicas::ServerWaits::default(),
            learned: crate::redis70::Learned::default(),
        }
    }

    /// An idle connection (its read timeout set to `timeout` again), or a new one.
    pub(crate) fn take(&self, timeout: Duration) -> RedisResult<Link> {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match idle {
            Some(link) if link.is_open() && link.set_read_timeout(Some(timeout)).is_ok() => {
                Ok(link)
            }
            _ => self.fresh(timeout),
        }
    }

    /// A new connection, never an idle one (for a release after a lost reply).
    pub(crate) fn fresh(&self, timeout: Duration) -> RedisResult<Link> {
        let link = self.source.connect(timeout)?;
        self.learned.clear();
        Ok(link)
    }

    /// Keeps `link`, whose last command answered in full, for a later lock (a pooled
    /// one goes back to its pool).
    pub(crate) fn give_back(&self, link: Link) {
        #[cfg(feature = "r2d2")]
        if matches!(link.conn, Conn::Pooled(_)) {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE && link.is_open() {
            idle.push(link);
        }
    }
}

/// Sends `cmds` on `con` in one round trip (a pipeline): each reply, an error reply as
/// its `Err`.
pub(crate) fn exchange(
    con: &mut dyn ConnectionLike,
    cmds: &[redis::Cmd],
) -> RedisResult<Vec<RedisResult<Value>>> {
    if let [cmd] = cmds {
        // One command goes out as it is: the same bytes and reply, without a pipeline
        // and a copy of the command to build (an acquire's usual case).
        return Ok(vec![con.req_command(cmd)?.extract_error()]);
    }
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for cmd in cmds {
        pipe.add_command(cmd.clone());
    }
    let replies: Vec<Value> = pipe.query(con)?;
    Ok(replies.into_iter().map(Value::extract_error).collect())
}
