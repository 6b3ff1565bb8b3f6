//! A small Redis Cluster for the cluster tests: `masters` masters with one replica each,
//! every node a `TestServer` (its own port, cluster bus port and directory, the module
//! loaded), created with `redis-cli --cluster create` and killed, all of it, when the
//! `Cluster` guard drops (panics included).
//!
//! Test files use it with `mod common; mod cluster_common;`.

#![allow(dead_code)]

use std::process::Command;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::{TestServer, cluster_node, poll_until};

/// How long the cluster may take to form, or to heal after a change, before a test fails.
pub const HEAL_TIMEOUT: Duration = Duration::from_secs(30);

/// One node as `CLUSTER NODES` describes it.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    pub id: String,
    pub port: u16,
    pub master: bool,
    /// The id of the master this node replicates, for a replica.
    pub master_id: Option<String>,
    /// Flagged `fail` by the node that answered.
    pub failed: bool,
    /// Slot ranges served, inclusive.
    pub slots: Vec<(u16, u16)>,
}

impl NodeInfo {
    /// Whether this node serves `slot`.
    pub fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(lo, hi)| lo <= slot && slot <= hi)
    }

    /// How many slots this node serves.
    pub fn slot_count(&self) -> usize {
        self.slots
            .iter()
            .map(|&(lo, hi)| usize::from(hi - lo) + 1)
            .sum()
    }
}

/// Parses the text of `CLUSTER NODES`.
pub fn parse_nodes(text: &str) -> Vec<NodeInfo> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // <id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch> <link> <slot>...
            let port = fields[1]
                .split('@')
                .next()
                .and_then(|addr| addr.rsplit(':').next())
                .and_then(|port| port.parse().ok())
                .unwrap_or(0);
            let flags: Vec<&str> = fields[2].split(',').collect();
            let slots = fields[8..]
                .iter()
                .filter(|slot| !slot.starts_with('['))
                .map(|slot| match slot.split_once('-') {
                    Some((lo, hi)) => (lo.parse().unwrap(), hi.parse().unwrap()),
                    None => {
                        let one = slot.parse().unwrap();
                        (one, one)
                    }
                })
                .collect();
            NodeInfo {
                id: fields[0].to_string(),
                port,
                master: flags.contains(&"master"),
                master_id: (fields[3] != "-").then(|| fields[3].to_string()),
                failed: flags.contains(&"fail"),
                slots,
            }
        })
        .collect()
}

/// A running cluster; every node is killed when it drops.
pub struct Cluster {
    pub nodes: Vec<TestServer>,
}

impl Cluster {
    /// Starts `masters * 2` nodes with the module, creates the cluster with one replica per
    /// master, and returns once it is healthy (see `wait_healthy`).
    pub fn start(masters: usize) -> Self {
        let mut nodes = Vec::new();
        for _ in 0..masters * 2 {
            nodes.push(cluster_node(&[
                // Any replica may take over, however long it was cut off.
                "--cluster-replica-validity-factor",
                "0",
                // Replicas stay with the master the test gave them.
                "--cluster-allow-replica-migration",
                "no",
                // A replica's first sync starts at once, not after the default 5 s.
                "--repl-diskless-sync-delay",
                "0",
                "--notify-keyspace-events",
                "Kd",
            ]));
        }
        let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
        args.extend(nodes.iter().map(|node| format!("127.0.0.1:{}", node.port)));
        args.extend(["--cluster-replicas", "1", "--cluster-yes"].map(String::from));
        let cluster = Self::create(nodes, &args);
        let masters_seen = cluster.topology().iter().filter(|n| n.master).count();
        assert_eq!(masters_seen, masters, "masters after cluster create");
        cluster
    }

    /// Makes a cluster of `nodes` with `redis-cli <args>` (a `--cluster create` line that
    /// names them) and returns once it is healthy (see `wait_healthy`).
    pub fn create(nodes: Vec<TestServer>, args: &[String]) -> Self {
        let cluster = Self { nodes };
        let out = redis_cli(args);
        assert!(
            out.status.success(),
            "redis-cli {} failed:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        cluster.wait_healthy("the new cluster");
        cluster
    }

    /// The ports of the nodes still running.
    pub fn live_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|node| node.pid().is_some())
            .map(|node| node.port)
            .collect()
    }

    /// The node on `port`.
    pub fn node(&self, port: u16) -> &TestServer {
        self.nodes
            .iter()
            .find(|node| node.port == port)
            .expect("a node of this cluster")
    }

    /// Kills the node on `port` at once (SIGKILL).
    pub fn kill(&mut self, port: u16) {
        self.nodes
            .iter_mut()
            .find(|node| node.port == port)
            .expect("a node of this cluster")
            .kill();
    }

    /// A plain (not cluster-aware) connection to the node on `port`.
    pub fn con(&self, port: u16) -> redis::Connection {
        self.node(port).connection()
    }

    /// The `redis` crate's cluster client, seeded with every live node.
    pub fn client(&self) -> redis::cluster::ClusterConnection {
        let urls: Vec<String> = self
            .live_ports()
            .iter()
            .map(|port| format!("redis://127.0.0.1:{port}/"))
            .collect();
        redis::cluster::ClusterClient::builder(urls)
            .response_timeout(Duration::from_secs(30))
            .build()
            .expect("cluster client")
            .get_connection()
            .expect("cluster connection")
    }

    /// The cluster as the first live node sees it.
    pub fn topology(&self) -> Vec<NodeInfo> {
        let port = self.live_ports()[0];
        topology_of(&mut self.con(port))
    }

    /// The live masters, by port order.
    pub fn masters(&self) -> Vec<NodeInfo> {
        let mut masters: Vec<NodeInfo> = self
            .topology()
            .into_iter()
            .filter(|n| n.master && !n.failed && !n.slots.is_empty())
            .collect();
        masters.sort_by_key(|n| n.port);
        masters
    }

    /// The master serving `slot`.
    pub fn owner_of(&self, slot: u16) -> NodeInfo {
        self.masters()
            .into_iter()
            .find(|n| n.serves(slot))
            .unwrap_or_else(|| panic!("no master serves slot {slot}"))
    }

    /// The live replica of the master `master_id`.
    pub fn replica_of(&self, master_id: &str) -> NodeInfo {
        let live = self.live_ports();
        self.topology()
            .into_iter()
            .find(|n| n.master_id.as_deref() == Some(master_id) && live.contains(&n.port))
            .unwrap_or_else(|| panic!("no live replica of {master_id}"))
    }

    /// Makes the replica on `port` the master of its master's slots now: `CLUSTER
    /// FAILOVER TAKEOVER`, no handshake with the master and no election. A plain `CLUSTER
    /// FAILOVER` is abandoned by the server itself when not done in 5 s (a fixed limit in
    /// Redis, and Valkey's default), which a loaded machine can miss, and then nothing
    /// promotes the replica. The module's part is the same either way: the replica holds
    /// what was acknowledged, and the old master, a replica once it hears of the new
    /// configuration, ends its waiters. (Writes held back by a pause have their own tests.)
    pub fn take_over(&self, port: u16) {
        let _: () = redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .arg("TAKEOVER")
            .query(&mut self.con(port))
            .expect("CLUSTER FAILOVER TAKEOVER");
    }

    /// The hash slot of `key` as the server computes it (`CLUSTER KEYSLOT`).
    pub fn keyslot(&self, key: &str) -> u16 {
        let port = self.live_ports()[0];
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.con(port))
            .expect("CLUSTER KEYSLOT")
    }

    /// `n` keys `<prefix><i>` whose slots `node` serves.
    pub fn keys_on(&self, node: &NodeInfo, prefix: &str, n: usize) -> Vec<String> {
        (0..)
            .map(|i| format!("{prefix}{i}"))
            .filter(|key| node.serves(key_slot(key.as_bytes())))
            .take(n)
            .collect()
    }

    /// Waits until every live node reports `cluster_state:ok`, all of them agree on which
    /// node serves each slot, every slot is served, no live node is a master without
    /// slots, and every live replica's link to its master is up.
    pub fn wait_healthy(&self, what: &str) {
        let deadline = Instant::now() + HEAL_TIMEOUT;
        loop {
            let Err(last) = self.health() else {
                return;
            };
            assert!(
                Instant::now() < deadline,
                "{what}: cluster not healthy after {HEAL_TIMEOUT:?}: {last}"
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    fn health(&self) -> Result<(), String> {
        let live = self.live_ports();
        let mut reference: Option<Vec<(u16, u16, u16)>> = None;
        for &port in &live {
            let mut con = self.con(port);
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut con)
                .map_err(|e| e.to_string())?;
            if !info.contains("cluster_state:ok") {
                return Err(format!("node {port} is not cluster_state:ok"));
            }
            let nodes = topology_of(&mut con);
            let mut owners: Vec<(u16, u16, u16)> = nodes
                .iter()
                .filter(|n| n.master && !n.failed && live.contains(&n.port))
                .flat_map(|n| n.slots.iter().map(move |&(lo, hi)| (lo, hi, n.port)))
                .collect();
            owners.sort();
            let covered: usize = owners
                .iter()
                .map(|&(lo, hi, _)| usize::from(hi - lo) + 1)
                .sum();
            if covered != 16384 {
                return Err(format!(
                    "node {port} sees {covered} slots served by live masters"
                ));
            }
            // In these tests every master serves slots: an empty one is a replica that
            // has not taken its role yet (right after `--cluster create`).
            if let Some(empty) = nodes
                .iter()
                .find(|n| n.master && n.slots.is_empty() && live.contains(&n.port))
            {
                return Err(format!(
                    "node {port} sees {} as a master with no slots",
                    empty.port
                ));
            }
            match &reference {
                None => reference = Some(owners),
                Some(first) if *first != owners => {
                    return Err(format!("node {port} disagrees on slot owners"));
                }
                Some(_) => {}
            }
            let me = nodes.iter().find(|n| n.port == port);
            if me.is_some_and(|n| !n.master) {
                let replication: String = redis::cmd("INFO")
                    .arg("replication")
                    .query(&mut con)
                    .map_err(|e| e.to_string())?;
                if !replication.contains("master_link_status:up") {
                    return Err(format!("replica {port} has no link to its master"));
                }
            }
        }
        Ok(())
    }
}

/// The hash slot of `key`, computed here as the cluster specification defines it (CRC16
/// of the key, or of its `{hash tag}`, modulo 16384) so tests can pick keys for a node
/// without asking a server for each candidate.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    let mut crc: u16 = 0;
    for &byte in hashed {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// `CLUSTER NODES` of the node behind `con`.
pub fn topology_of(con: &mut redis::Connection) -> Vec<NodeInfo> {
    let text: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query(con)
        .expect("CLUSTER NODES");
    parse_nodes(&text)
}

/// Runs `redis-cli` with `args`.
pub fn redis_cli<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> std::process::Output {
    Command::new("redis-cli")
        .args(args)
        .output()
        .expect("run redis-cli (installed with redis-server)")
}

/// What a blocked `LOCK.ACQUIRE ... WAIT` finally answered.
#[derive(Debug, PartialEq)]
pub enum Answer {
    /// `[token, fence]`.
    Granted(Vec<u8>, i64),
    /// `[token, [fence, ...]]`, for `LOCK.ACQUIREALL`.
    GrantedAll(Vec<u8>, Vec<i64>),
    /// nil: timed out or refused.
    Nil,
    /// An error reply (`MOVED`, `ASK`, `UNBLOCKED`, ...), as "CODE detail".
    Error(String),
    /// The connection broke (the server went away).
    Dropped(String),
}

/// A client blocked in `LOCK.ACQUIRE key ttl TOKEN token WAIT timeout` on one node, in
/// its own thread.
pub struct Waiter {
    pub token: String,
    answer: mpsc::Receiver<Answer>,
}

impl Waiter {
    /// Starts the waiter on `node`. Its connection gives up after `timeout` plus a
    /// margin, so a waiter the server never answers cannot hang the test run.
    pub fn start(node: &TestServer, key: &str, token: &str, ttl_ms: u64, timeout_ms: u64) -> Self {
        let mut cmd = redis::cmd("LOCK.ACQUIRE");
        cmd.arg(key)
            .arg(ttl_ms)
            .arg("TOKEN")
            .arg(token)
            .arg("WAIT")
            .arg(timeout_ms);
        Self::spawn(node, cmd, token, timeout_ms, |reply| {
            let granted: Option<(Vec<u8>, i64)> = redis::from_redis_value(reply).ok()?;
            Some(granted.map_or(Answer::Nil, |(token, fence)| Answer::Granted(token, fence)))
        })
    }

    /// Starts a waiter for every key of `keys` at once (`LOCK.ACQUIREALL ... WAIT`) on
    /// `node`.
    pub fn start_all(
        node: &TestServer,
        keys: &[&str],
        token: &str,
        ttl_ms: u64,
        timeout_ms: u64,
    ) -> Self {
        let mut cmd = redis::cmd("LOCK.ACQUIREALL");
        cmd.arg(keys.len())
            .arg(keys)
            .arg(ttl_ms)
            .arg("TOKEN")
            .arg(token)
            .arg("WAIT")
            .arg(timeout_ms);
        Self::spawn(node, cmd, token, timeout_ms, |reply| {
            let granted: Option<(Vec<u8>, Vec<i64>)> = redis::from_redis_value(reply).ok()?;
            Some(granted.map_or(Answer::Nil, |(token, fences)| {
                Answer::GrantedAll(token, fences)
            }))
        })
    }

    fn spawn(
        node: &TestServer,
        cmd: redis::Cmd,
        token: &str,
        timeout_ms: u64,
        read: fn(redis::Value) -> Option<Answer>,
    ) -> Self {
        let mut con = node.connection();
        con.set_read_timeout(Some(
            Duration::from_millis(timeout_ms) + Duration::from_secs(30),
        ))
        .expect("read timeout");
        let (tx, answer) = mpsc::channel();
        thread::spawn(move || {
            let reply: redis::RedisResult<redis::Value> = cmd.query(&mut con);
            let answer = match reply {
                Ok(value) => read(value.clone())
                    .unwrap_or_else(|| Answer::Dropped(format!("unexpected reply {value:?}"))),
                Err(err) => match err.code() {
                    Some(code) => Answer::Error(format!("{code} {}", err.detail().unwrap_or(""))),
                    None => Answer::Dropped(err.to_string()),
                },
            };
            let _ = tx.send(answer);
        });
        Self {
            token: token.to_string(),
            answer,
        }
    }

    /// The answer, or `None` if none came within `limit`.
    pub fn answer_within(&self, limit: Duration) -> Option<Answer> {
        self.answer.recv_timeout(limit).ok()
    }
}

/// Waits until `LOCK.INFO key` on `con` counts `n` waiters.
pub fn wait_for_waiters(con: &mut redis::Connection, key: &str, n: i64) {
    poll_until(
        Duration::from_secs(10),
        &format!("{n} waiters on {key}"),
        || crate::common::info_field(con, key, "waiters") == Some(n),
    );
}

/// `CLUSTER SETSLOT slot state node-id` on the node at `port`.
pub fn setslot(cluster: &Cluster, port: u16, slot: u16, state: &str, node_id: &str) {
    let _: () = redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg(state)
        .arg(node_id)
        .query(&mut cluster.con(port))
        .unwrap_or_else(|e| panic!("CLUSTER SETSLOT {slot} {state} on {port}: {e}"));
}
