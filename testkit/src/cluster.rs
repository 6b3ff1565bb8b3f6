//! Small real clusters for tests: nodes with the module in cluster mode, and a cluster
//! of them with its slots assigned.

use std::process::Command;
use std::time::Duration;

use crate::{FREE_PORT, TestServer, poll_until};

/// A server with the module, ready to join a cluster: cluster mode, its own bus port (the
/// default, port + 10000, may be taken or above 65535; a free one, picked again if a start
/// finds it taken), a node timeout of 2 s; then `extra` arguments.
pub fn cluster_node(extra: &[&str]) -> TestServer {
    let mut args = vec![
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-port",
        FREE_PORT,
        "--cluster-node-timeout",
        "2000",
    ];
    args.extend_from_slice(extra);
    TestServer::with_args(&args)
}

/// A small Redis Cluster of masters only (no replicas), each a `TestServer` with the
/// module, made with `redis-cli --cluster create`; every node is killed on drop. For
/// client tests that need a cluster client to route and follow redirections (the
/// module's own cluster tests use a fuller harness with replicas and failovers).
pub struct MiniCluster {
    pub nodes: Vec<TestServer>,
}

impl MiniCluster {
    /// Starts `masters` nodes, makes them a cluster, and returns once every node reports
    /// `cluster_state:ok` with all slots served and every node known.
    pub fn start(masters: usize) -> Self {
        let nodes: Vec<TestServer> = (0..masters).map(|_| cluster_node(&[])).collect();
        let mut args = vec!["--cluster".to_string(), "create".to_string()];
        args.extend(nodes.iter().map(|node| format!("127.0.0.1:{}", node.port)));
        args.push("--cluster-yes".to_string());
        let out = Command::new("redis-cli")
            .args(&args)
            .output()
            .expect("run redis-cli (installed with redis-server)");
        assert!(
            out.status.success(),
            "redis-cli {} failed:\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = Self { nodes };
        for node in &cluster.nodes {
            let mut con = node.connection();
            poll_until(Duration::from_secs(30), "the cluster to form", || {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut con)
                    .unwrap_or_default();
                let field = |name: &str| info_field(&info, name);
                field("cluster_state") == Some("ok")
                    && field("cluster_slots_ok") == Some("16384")
                    && field("cluster_known_nodes") == Some(masters.to_string().as_str())
            });
        }
        cluster
    }

    /// A new node made a replica of the master on `master_port`; returns once that master
    /// lists it online.
    pub fn add_replica(&self, master_port: u16) -> TestServer {
        let replica = cluster_node(&[]);
        let mut master = self.node(master_port).connection();
        let id: String = redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut master)
            .expect("MYID");
        // the nodes' bus ports are their own, not port + 10000
        let bus: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("cluster-port")
            .query(&mut master)
            .expect("CONFIG GET cluster-port");
        let mut con = replica.connection();
        let _: () = redis::cmd("CLUSTER")
            .arg("MEET")
            .arg("127.0.0.1")
            .arg(master_port)
            .arg(&bus[1])
            .query(&mut con)
            .expect("CLUSTER MEET");
        poll_until(
            Duration::from_secs(30),
            "the replica to know its master",
            || {
                redis::cmd("CLUSTER")
                    .arg("REPLICATE")
                    .arg(&id)
                    .query::<()>(&mut con)
                    .is_ok()
            },
        );
        poll_until(Duration::from_secs(30), "the replica online", || {
            let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut master).unwrap_or_default();
            matches!(role.get(2), Some(redis::Value::Array(replicas)) if !replicas.is_empty())
        });
        replica
    }

    /// The port of the node that serves `key`'s slot now (as the first node sees it).
    pub fn port_of(&self, key: &str) -> u16 {
        self.port_seen_by(&self.nodes[0], key)
    }

    /// The port of the node that serves `key`'s slot, as `node` sees it.
    fn port_seen_by(&self, node: &TestServer, key: &str) -> u16 {
        let mut con = node.connection();
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut con)
            .expect("CLUSTER KEYSLOT");
        let slots: Vec<redis::Value> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut con)
            .expect("CLUSTER SLOTS");
        for range in slots {
            // [start, end, [ip, port, id, ...], replicas...]
            let Ok(fields) = redis::from_redis_value::<Vec<redis::Value>>(range) else {
                continue;
            };
            let int = |value: &redis::Value| redis::from_redis_value::<i64>(value.clone()).ok();
            let (Some(lo), Some(hi)) = (fields.first().and_then(int), fields.get(1).and_then(int))
            else {
                continue;
            };
            if !(lo..=hi).contains(&i64::from(slot)) {
                continue;
            }
            let master = fields
                .get(2)
                .and_then(|m| redis::from_redis_value::<Vec<redis::Value>>(m.clone()).ok())
                .unwrap_or_default();
            if let Some(port) = master.get(1).and_then(int) {
                return u16::try_from(port).expect("a port");
            }
        }
        panic!("no node serves slot {slot}")
    }

    /// Moves `key`'s slot, which must hold no key, from the master on `from` to the one
    /// on `to` (a resharding: `IMPORTING`, `MIGRATING`, then `NODE` on every master);
    /// returns once the cluster names `to` for it.
    pub fn move_slot(&self, key: &str, from: u16, to: u16) {
        let id_of = |port: u16| -> String {
            let mut con = self.node(port).connection();
            redis::cmd("CLUSTER")
                .arg("MYID")
                .query(&mut con)
                .expect("MYID")
        };
        let (from_id, to_id) = (id_of(from), id_of(to));
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.node(from).connection())
            .expect("CLUSTER KEYSLOT");
        let setslot = |port: u16, args: &[&str]| {
            let () = redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg(args)
                .query(&mut self.node(port).connection())
                .unwrap_or_else(|err| panic!("CLUSTER SETSLOT {slot} {args:?} on {port}: {err}"));
        };
        setslot(to, &["IMPORTING", &from_id]);
        setslot(from, &["MIGRATING", &to_id]);
        // The new owner takes the slot with a config epoch of its own above every one it
        // knows (it imports the slot); until it has heard of the latest one (the last
        // move's, on the old owner), it may not bump, and the old owner's claim, still
        // in flight, then wins on the nodes that hear it after the move, for good: each
        // names the other (MOVED both ways), which a loaded machine met.
        let highest = self
            .nodes
            .iter()
            .map(|node| epoch(node, "cluster_my_epoch"))
            .max()
            .unwrap_or(0);
        poll_until(
            Duration::from_secs(10),
            "the new node to know the highest config epoch",
            || epoch(self.node(to), "cluster_current_epoch") >= highest,
        );
        let mut order = vec![to, from];
        order.extend(
            self.nodes
                .iter()
                .map(|n| n.port)
                .filter(|p| *p != to && *p != from),
        );
        for port in order {
            setslot(port, &["NODE", &to_id]);
        }
        // Every node, not one: until they all agree, the old owner's gossip can still
        // give the slot back to it on a node that had taken the move (each then answers
        // MOVED to the other), which a loaded machine's run met twice.
        poll_until(
            Duration::from_secs(10),
            "every node to name the new node",
            || {
                self.nodes
                    .iter()
                    .all(|node| self.port_seen_by(node, key) == to)
            },
        );
    }

    /// The node listening on `port`.
    pub fn node(&self, port: u16) -> &TestServer {
        self.nodes
            .iter()
            .find(|node| node.port == port)
            .expect("a node of the cluster")
    }
}

/// A `CLUSTER INFO` epoch of `node`: `cluster_my_epoch` (its config epoch) or
/// `cluster_current_epoch` (the highest it has heard of).
fn epoch(node: &TestServer, field: &str) -> u64 {
    let info: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query(&mut node.connection())
        .expect("CLUSTER INFO");
    info_field(&info, field)
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("CLUSTER INFO has no {field}: {info}"))
}

/// The value of `name` in a `CLUSTER INFO` reply (`name:value` lines).
fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}
