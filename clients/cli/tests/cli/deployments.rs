//! The same binary on a Sentinel's master and on a Cluster: the connection options.

use std::process::Command;

use redis_lock_testkit::{MiniCluster, Sentinel};

use crate::*;

#[test]
fn a_sentinels_master_is_found_by_name() {
    let server = TestServer::start();
    let sentinel = Sentinel::watch(&server);
    let scratch = Scratch::new("sentinel");
    let out = Command::new(bin())
        .args([
            "--sentinel",
            &format!("127.0.0.1:{}", sentinel.port),
            "--master",
            Sentinel::MASTER_NAME,
        ])
        .args(["run", "jobs:sentinel", "--", "sh", "-c"])
        .arg(format!(
            "echo $REDIS_LOCK_FENCE > '{}'",
            scratch.path("fence").display()
        ))
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(scratch.lines("fence")[0].parse::<u64>().unwrap() > 0);
    let out = Command::new(bin())
        .args(["--master", "mymaster", "status"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(64), "--master needs --sentinel");
}

#[test]
fn on_a_cluster_each_key_goes_to_its_node_and_status_asks_every_master() {
    let cluster = MiniCluster::start(3);
    let seed = &cluster.nodes[0];
    let keys = ["{a}jobs", "{b}jobs", "{c}jobs"];
    let mut holders = Vec::new();
    for key in keys {
        let port = cluster.port_of(key);
        let mut con = cluster.node(port).connection();
        let (_, _): (String, u64) = redis::cmd("LOCK.ACQUIRE")
            .arg(key)
            .arg(60000)
            .query(&mut con)
            .expect("acquire");
        holders.push(con);
    }
    let out = cli(seed, &["--cluster", "status"])
        .output()
        .expect("status");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let listed: Vec<&str> = text
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(listed, keys, "the locks of every master:\n{text}");
    let out = cli(seed, &["--cluster", "run", "-n", "{a}jobs", "--", "true"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(75), "busy on its node");
    let out = cli(seed, &["--cluster", "run", "-n", "{d}jobs", "--", "true"])
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
