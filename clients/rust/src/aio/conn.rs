//! The locker's connection: one multiplexed connection, opened lazily, shared by its
//! locks, and reopened after it breaks, with a generation number a session-bound lock
//! follows.
//!
//! Where an async locker's connections go: one server ([`redis::Client`], a
//! [`MultiplexedConnection`]), the master a Sentinel names (feature `sentinel`) or a Redis
//! Cluster ([`redis::cluster::ClusterClient`], the
//! `redis` crate's async cluster connection, which routes each command to the node of its
//! key and follows `MOVED`/`ASK`; feature `cluster-async`).

use super::within;
use redis::FromRedisValue;
use std::fmt;
#[cfg(feature = "sentinel")]
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisFuture, RedisResult, Value};

/// A server or a cluster, to open async connections to.
#[derive(Clone)]
pub(crate) enum AsyncSource {
    Server(redis::Client),
    /// Asked for the master at every connect, so a locker follows a failover.
    #[cfg(feature = "sentinel")]
    Sentinel(Arc<tokio::sync::Mutex<redis::sentinel::SentinelClient>>),
    #[cfg(feature = "cluster-async")]
    Cluster(Box<redis::cluster::ClusterClient>),
}

impl fmt::Debug for AsyncSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AsyncSource::Server(client) => client.fmt(f),
            #[cfg(feature = "sentinel")]
            AsyncSource::Sentinel(_) => f.write_str("Sentinel"),
            #[cfg(feature = "cluster-async")]
            AsyncSource::Cluster(_) => f.write_str("Cluster"),
        }
    }
}

/// How long a reply may take on a connection whose commands are bounded by their
/// callers (a wait may last as long as its caller asked, without limit for `0`).
#[cfg(feature = "cluster-async")]
const UNBOUNDED_REPLY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

impl AsyncSource {
    /// Whether this is a cluster (where a locker's shared connection is many, one per
    /// node, each reconnecting on its own).
    pub(crate) fn is_cluster(&self) -> bool {
        match self {
            #[cfg(feature = "cluster-async")]
            AsyncSource::Cluster(_) => true,
            _ => false,
        }
    }

    /// A new connection, connecting within `connect_timeout`, whose replies the callers
    /// bound themselves.
    pub(crate) async fn open(&self, connect_timeout: Duration) -> RedisResult<AsyncLink> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(None);
        match self {
            AsyncSource::Server(client) => {
                let con = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                Ok(AsyncLink::Server(con))
            }
            #[cfg(feature = "sentinel")]
            AsyncSource::Sentinel(client) => {
                let con = client
                    .lock()
                    .await
                    .get_async_connection_with_config(&config)
                    .await?;
                Ok(AsyncLink::Server(con))
            }
            #[cfg(feature = "cluster-async")]
            AsyncSource::Cluster(client) => {
                let config = redis::cluster::ClusterConfig::new()
                    .set_connection_timeout(connect_timeout)
                    .set_response_timeout(UNBOUNDED_REPLY);
                let con = client.get_async_connection_with_config(config).await?;
                Ok(AsyncLink::Cluster(con))
            }
        }
    }
}

/// An async connection to a server or a cluster. Cheap to clone: clones share it.
#[derive(Clone)]
pub(crate) enum AsyncLink {
    Server(MultiplexedConnection),
    #[cfg(feature = "cluster-async")]
    Cluster(redis::cluster_async::ClusterConnection),
}

impl AsyncLink {
    /// Sends `cmds` in one round trip (a pipeline; on a cluster, to the master of
    /// `key`'s slot): each reply, an error reply as its `Err`.
    pub(crate) async fn exchange(
        &mut self,
        key: &[u8],
        cmds: &[Cmd],
    ) -> RedisResult<Vec<RedisResult<Value>>> {
        match self {
            AsyncLink::Server(con) => {
                let _ = key;
                if let [cmd] = cmds {
                    // One command goes out as it is: the same bytes and reply, without a
                    // pipeline and a copy of the command to build (an acquire's usual
                    // case), as on the blocking face.
                    return Ok(vec![con.req_packed_command(cmd).await?.extract_error()]);
                }
                let replies: Vec<Value> = pipeline(false, cmds).query_async(con).await?;
                Ok(replies.into_iter().map(Value::extract_error).collect())
            }
            #[cfg(feature = "cluster-async")]
            AsyncLink::Cluster(con) => cluster_exchange(con, key, cmds).await,
        }
    }
}

/// `cmds` in one pipeline whose errors are replies, after `ASKING` when `asking`.
fn pipeline(asking: bool, cmds: &[Cmd]) -> Pipeline {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    if asking {
        pipe.cmd("ASKING");
    }
    for cmd in cmds {
        pipe.add_command(cmd.clone());
    }
    pipe
}

/// How many `MOVED`/`ASK` answers a cluster exchange follows before it gives the last one
/// back as its reply (as the blocking face and the other packages do).
#[cfg(feature = "cluster-async")]
const REDIRECTIONS: usize = 5;

/// `AsyncLink::exchange` on a cluster: to the master of `key`'s slot, following a
/// `MOVED` or `ASK` any reply carries to the node it names (the commands did not run
/// where they were refused). The cluster connection does not follow a redirection inside
/// a pipeline whose errors are replies; right after a slot moved, its map can still name
/// the old node.
#[cfg(feature = "cluster-async")]
async fn cluster_exchange(
    con: &mut redis::cluster_async::ClusterConnection,
    key: &[u8],
    cmds: &[Cmd],
) -> RedisResult<Vec<RedisResult<Value>>> {
    use redis::ErrorKind;
    use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
    let mut route = SingleNodeRoutingInfo::SpecificNode(Route::new(
        crate::replicas::slot(key),
        SlotAddr::Master,
    ));
    let mut asking = false;
    let mut redirections = 0;
    loop {
        let replies: Vec<Value> = con
            .route_pipeline(
                pipeline(asking, cmds),
                usize::from(asking),
                cmds.len(),
                route,
            )
            .await?;
        let replies: Vec<RedisResult<Value>> =
            replies.into_iter().map(Value::extract_error).collect();
        let redirect = replies.iter().find_map(|reply| {
            let err = reply.as_ref().err()?;
            let (address, _) = err.redirect_node()?;
            let (host, port) = address.rsplit_once(':')?;
            let ask = matches!(err.kind(), ErrorKind::Server(redis::ServerErrorKind::Ask));
            Some((host.to_string(), port.parse::<u16>().ok()?, ask))
        });
        match redirect {
            Some((host, port, ask)) if redirections < REDIRECTIONS => {
                redirections += 1;
                asking = ask;
                route = SingleNodeRoutingInfo::ByAddress { host, port };
            }
            _ => return Ok(replies),
        }
    }
}

impl ConnectionLike for AsyncLink {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            AsyncLink::Server(con) => con.req_packed_command(cmd),
            #[cfg(feature = "cluster-async")]
            AsyncLink::Cluster(con) => con.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            AsyncLink::Server(con) => con.req_packed_commands(pipeline, offset, count),
            #[cfg(feature = "cluster-async")]
            AsyncLink::Cluster(con) => con.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            AsyncLink::Server(con) => con.get_db(),
            #[cfg(feature = "cluster-async")]
            AsyncLink::Cluster(con) => con.get_db(),
        }
    }
}

/// A lazily opened, shared multiplexed connection that is reopened after it breaks.
pub(super) struct Conn {
    pub(super) source: AsyncSource,
    pub(super) connect_timeout: Duration,
    pub(super) slot: Mutex<Option<AsyncLink>>,
    /// How many connections the slot has held: session-bound locks know which one they
    /// are bound to.
    pub(super) generation: AtomicU64,
    /// Whether its servers hold a grant's reply for their replicas themselves.
    pub(super) server_waits: crate::replicas::ServerWaits,
    /// What was learned of the masters' replicas where they do not (Redis 7.0), per
    /// connection generation.
    pub(super) learned: crate::redis70::Learned,
}

impl Conn {
    pub(super) fn new(client: redis::Client, connect_timeout: Duration) -> Self {
        Self::on(AsyncSource::Server(client), connect_timeout)
    }

    pub(super) fn on(source: AsyncSource, connect_timeout: Duration) -> Self {
        Conn {
            source,
            connect_timeout,
            slot: Mutex::new(None),
            generation: AtomicU64::new(0),
            server_waits: crate::replicas::ServerWaits::default(),
            learned: crate::redis70::Learned::default(),
        }
    }

    /// A new connection without a response timeout: callers bound each command.
    pub(super) async fn open(&self) -> RedisResult<AsyncLink> {
        self.source.open(self.connect_timeout).await
    }

    pub(super) async fn get(&self) -> RedisResult<AsyncLink> {
        if let Some(con) = self.slot.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Ok(con);
        }
        let con = self.open().await?;
        *self.slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(con.clone());
        self.generation.fetch_add(1, Ordering::SeqCst);
        Ok(con)
    }

    pub(super) async fn query<T: FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        limit: Duration,
    ) -> RedisResult<T> {
        let result = within(Some(limit), async {
            let mut con = self.get().await?;
            cmd.query_async(&mut con).await
        })
        .await;
        if let Err(err) = &result
            && (err.is_connection_dropped() || err.is_unrecoverable_error())
        {
            *self.slot.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
        result
    }
}
