//! Where the locks are, as redis-cli users say it: `-u/--url` (or `REDIS_URL`), else
//! `-h/-p`; a password from `-a`, `REDISCLI_AUTH` or the URL, never needed on the command
//! line; a Sentinel's master (`--sentinel host:port --master NAME`), or a Cluster
//! (`--cluster`, seeded by the URL or `-h/-p`).

use std::time::Duration;

use clap::Args;
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{ConnectionInfo, ConnectionLike, IntoConnectionInfo};
use redis_lock_client::Locker;

use crate::duration;
use crate::exit::{CONFIG, Failure};

/// How to reach the server: shared by every subcommand.
#[derive(Args, Debug, Clone)]
pub struct Connect {
    /// The server: redis://[user:password@]host:port/db (a Sentinel's master, or a
    /// Cluster node to start from, with --sentinel or --cluster)
    #[arg(
        short = 'u',
        long,
        env = "REDIS_URL",
        global = true,
        hide_env_values = true
    )]
    pub url: Option<String>,
    /// The server's host, when no URL is given
    #[arg(short = 'h', long, default_value = "127.0.0.1", global = true)]
    pub host: String,
    /// The server's port, when no URL is given
    #[arg(short = 'p', long, default_value_t = 6379, global = true)]
    pub port: u16,
    /// The ACL user (with the password below)
    #[arg(long, global = true)]
    pub user: Option<String>,
    /// The password; prefer the REDISCLI_AUTH environment variable, which no `ps` shows
    #[arg(
        short = 'a',
        long = "pass",
        env = "REDISCLI_AUTH",
        global = true,
        hide_env_values = true
    )]
    pub pass: Option<String>,
    /// A Sentinel to ask for the master (host:port; repeat for each Sentinel)
    #[arg(
        long = "sentinel",
        value_name = "HOST:PORT",
        global = true,
        requires = "master"
    )]
    pub sentinels: Vec<String>,
    /// The name of the master the Sentinels watch
    #[arg(long, global = true, requires = "sentinels")]
    pub master: Option<String>,
    /// The server is a node of a Redis Cluster: each key goes to its node
    #[arg(long, global = true, conflicts_with = "sentinels")]
    pub cluster: bool,
    /// How long connecting and each command may take (a wait for the lock aside)
    #[arg(long, default_value = "5s", value_parser = duration::positive, global = true)]
    pub timeout: Duration,
}

/// A reached or reachable deployment.
pub enum Target {
    Server(redis::Client),
    Sentinel {
        sentinels: Vec<ConnectionInfo>,
        master: String,
        node: ConnectionInfo,
    },
    Cluster {
        nodes: Vec<ConnectionInfo>,
        node: ConnectionInfo,
    },
}

impl Connect {
    /// The connection settings of the server (or the master's, or every node's): the
    /// URL's or `-h/-p`'s, with `--user` and the password applied.
    fn info(&self) -> Result<ConnectionInfo, Failure> {
        let info = match &self.url {
            Some(url) => url.as_str().into_connection_info(),
            None => (self.host.as_str(), self.port).into_connection_info(),
        }
        .map_err(|err| Failure::new(CONFIG, format!("bad server address: {err}")))?;
        let mut settings = info.redis_settings().clone();
        if let Some(user) = &self.user {
            settings = settings.set_username(user);
        }
        if let Some(pass) = &self.pass {
            settings = settings.set_password(pass);
        }
        Ok(info.set_redis_settings(settings))
    }

    /// Where these options point.
    pub fn target(&self) -> Result<Target, Failure> {
        let node = self.info()?;
        if !self.sentinels.is_empty() {
            let sentinels = self
                .sentinels
                .iter()
                .map(|address| {
                    format!("redis://{address}/")
                        .as_str()
                        .into_connection_info()
                        .map_err(|err| {
                            Failure::new(CONFIG, format!("bad --sentinel {address}: {err}"))
                        })
                })
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(Target::Sentinel {
                sentinels,
                master: self.master.clone().unwrap_or_default(),
                node,
            });
        }
        if self.cluster {
            return Ok(Target::Cluster {
                nodes: vec![node.clone()],
                node,
            });
        }
        redis::Client::open(node)
            .map(Target::Server)
            .map_err(|err| Failure::new(CONFIG, format!("bad server address: {err}")))
    }
}

impl Target {
    fn sentinel_client(
        sentinels: &[ConnectionInfo],
        master: &str,
        node: &ConnectionInfo,
    ) -> redis::RedisResult<SentinelClient> {
        SentinelClient::build(
            sentinels.to_vec(),
            master.to_owned(),
            Some(
                SentinelNodeConnectionInfo::default()
                    .set_redis_connection_info(node.redis_settings().clone()),
            ),
            SentinelServerType::Master,
        )
    }

    fn cluster_client(
        nodes: &[ConnectionInfo],
        node: &ConnectionInfo,
    ) -> redis::RedisResult<redis::cluster::ClusterClient> {
        let settings = node.redis_settings();
        let mut builder = redis::cluster::ClusterClientBuilder::new(nodes.to_vec());
        if let Some(user) = settings.username() {
            builder = builder.username(user);
        }
        if let Some(pass) = settings.password() {
            builder = builder.password(pass);
        }
        builder.build()
    }

    /// A locker on the deployment, whose commands may take `timeout` each.
    pub fn locker(&self, timeout: Duration) -> Result<Locker, Failure> {
        let locker = match self {
            Target::Server(client) => Locker::new(client.clone()),
            Target::Sentinel {
                sentinels,
                master,
                node,
            } => Locker::sentinel(Self::sentinel_client(sentinels, master, node)?),
            Target::Cluster { nodes, node } => Locker::cluster(Self::cluster_client(nodes, node)?),
        };
        Ok(locker.with_command_timeout(timeout))
    }

    /// A connection that sends each keyed command to its key's server.
    pub fn connection(&self, timeout: Duration) -> Result<Box<dyn ConnectionLike + Send>, Failure> {
        Ok(match self {
            Target::Server(client) => Box::new(plain(client, timeout)?),
            Target::Sentinel { .. } => Box::new(plain(&self.sentinels_master()?, timeout)?),
            Target::Cluster { nodes, node } => {
                let con = Self::cluster_client(nodes, node)?.get_connection()?;
                con.set_read_timeout(Some(timeout))?;
                con.set_write_timeout(Some(timeout))?;
                Box::new(con)
            }
        })
    }

    /// A connection to each master, for the commands that name no key (`SCAN`,
    /// `LOCK.CONTENDED`): the server, the Sentinels' master, or every master of a
    /// Cluster (from `CLUSTER NODES`).
    pub fn masters(&self, timeout: Duration) -> Result<Vec<redis::Connection>, Failure> {
        match self {
            Target::Cluster { node, .. } => {
                let mut seed = plain(&redis::Client::open(node.clone())?, timeout)?;
                let nodes: String = redis::cmd("CLUSTER").arg("NODES").query(&mut seed)?;
                masters_of(&nodes)
                    .into_iter()
                    .map(|(host, port)| {
                        let info = (host.as_str(), port)
                            .into_connection_info()?
                            .set_redis_settings(node.redis_settings().clone());
                        Ok(plain(&redis::Client::open(info)?, timeout)?)
                    })
                    .collect()
            }
            Target::Server(client) => Ok(vec![plain(client, timeout)?]),
            Target::Sentinel { .. } => Ok(vec![plain(&self.sentinels_master()?, timeout)?]),
        }
    }

    /// A client of the master the Sentinels name now (a Sentinel target only).
    fn sentinels_master(&self) -> Result<redis::Client, Failure> {
        match self {
            Target::Sentinel {
                sentinels,
                master,
                node,
            } => Ok(Self::sentinel_client(sentinels, master, node)?.get_client()?),
            _ => Err(Failure::new(CONFIG, "no Sentinel was given")),
        }
    }
}

fn plain(client: &redis::Client, timeout: Duration) -> redis::RedisResult<redis::Connection> {
    let con = client.get_connection_with_timeout(timeout)?;
    con.set_read_timeout(Some(timeout))?;
    con.set_write_timeout(Some(timeout))?;
    Ok(con)
}

/// The masters a `CLUSTER NODES` reply lists that are not failing: (host, port).
fn masters_of(nodes: &str) -> Vec<(String, u16)> {
    nodes
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags = fields.get(2)?;
            if !flags.split(',').any(|f| f == "master") || flags.contains("fail") {
                return None;
            }
            let address = fields.get(1)?.split('@').next()?;
            let (host, port) = address.rsplit_once(':')?;
            Some((host.to_owned(), port.parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_masters_are_read_from_cluster_nodes() {
        let nodes = "a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460\n\
                     b2 127.0.0.1:7001@17001 slave a1 0 0 1 connected\n\
                     c3 127.0.0.1:7002@17002 master,fail - 0 0 2 disconnected\n\
                     d4 10.0.0.9:7003@17003 master - 0 0 3 connected 5461-16383\n";
        assert_eq!(
            masters_of(nodes),
            [
                ("127.0.0.1".to_owned(), 7000),
                ("10.0.0.9".to_owned(), 7003)
            ]
        );
    }
}
