//! Safe with nothing but a `loadmodule` line (docs/commands.md, "Grants a replica has"):
//! `lock.replicas` is `auto` by default, so a master with a replica holds a plain
//! grant's reply until the replica has it; `REPLICAS AUTO` asks the same of one command
//! whatever the setting; and `auto` counts a replica still in its first sync, so a grant
//! waits for the sync (or falls short) instead of counting on a replica that lacks it.

use std::time::Duration;

use crate::common::*;

/// A stopped server (`SIGSTOP`), continued when dropped, even when a test fails.
struct Stopped<'a>(&'a TestServer);

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        signal(self.0, "CONT");
    }
}

fn not_replicated(text: &str) -> bool {
    let words: String = text.chars().filter(|c| *c != '"' && *c != ':').collect();
    words.contains("NOTREPLICATED acked 0 required 1")
}

#[test]
fn with_only_loadmodule_a_plain_acquire_waits_for_the_replica_and_falls_short_without_it() {
    // TestServer starts the server with --loadmodule and nothing of the module's.
    let master = TestServer::start();
    let mut m = master.connection();
    let setting: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("lock.replicas")
        .query(&mut m)
        .expect("CONFIG GET");
    assert_eq!(setting[1], "auto", "the default");
    let replica = start_replica(&master, &[]);
    sync_replicas(&mut m, 1);
    let mut r = replica.connection();
    let (_, fence) = acquire(&mut m, "plain", 10_000, &[]).expect("granted");
    if !server_kind().can_wait_for_replicas() {
        // Redis 7.0 cannot hold a reply: auto waits for nothing there.
        return;
    }
    // Read at once, with no WAIT of the test's own: the replica had it before the reply.
    assert_eq!(info_field(&mut r, "plain", "fence"), Some(fence));
    assert_eq!(lock_stat(&mut m, "lock_replica_waits"), 1);

    signal(&replica, "STOP");
    let _stopped = Stopped(&replica);
    let text = error_of_command(
        &mut m,
        &["LOCK.ACQUIRE", "stopped", "10000", "REPLTIMEOUT", "200"],
    );
    assert!(not_replicated(&text), "{text}");
    assert_eq!(info(&mut m, "stopped"), None, "the grant was undone");
}

#[test]
fn replicas_auto_on_a_command_is_the_auto_rule_whatever_the_setting() {
    let master = TestServer::start();
    let mut m = master.connection();
    config_set(&mut m, "lock.replicas", "0");
    if !server_kind().can_wait_for_replicas() {
        let text = error_of_command(&mut m, &["LOCK.ACQUIRE", "k", "1000", "REPLICAS", "AUTO"]);
        assert_eq!(
            text, "ERR REPLICAS needs Redis 7.2 or later",
            "a client learns it must wait itself"
        );
        assert_eq!(info(&mut m, "k"), None, "nothing granted");
        return;
    }
    // No replica: answered at once.
    acquire(&mut m, "alone", 10_000, &["REPLICAS", "auto"]).expect("granted");
    assert_eq!(lock_stat(&mut m, "lock_replica_waits"), 0, "nothing waited");
    let replica = start_replica(&master, &[]);
    sync_replicas(&mut m, 1);
    let mut r = replica.connection();
    let (token, fence) = acquire(&mut m, "k", 10_000, &["REPLICAS", "AUTO"]).expect("granted");
    assert_eq!(
        info_field(&mut r, "k", "fence"),
        Some(fence),
        "the replica had it first"
    );
    let (_, fences) = acquire_all(&mut m, &["x", "y"], 10_000, &["REPLICAS", "Auto"]).expect("all");
    assert_eq!(info_field(&mut r, "y", "fence"), Some(fences[1]));
    signal(&replica, "STOP");
    let _stopped = Stopped(&replica);
    let extend = error_of_command(
        &mut m,
        &[
            "LOCK.EXTEND",
            "k",
            &String::from_utf8_lossy(&token),
            "600000",
            "REPLICAS",
            "AUTO",
            "REPLTIMEOUT",
            "200",
        ],
    );
    assert!(not_replicated(&extend), "{extend}");
    assert!(
        info(&mut m, "k").is_some(),
        "an extend that falls short keeps the lock"
    );
    // The setting 0 alone does not wait.
    acquire(&mut m, "unwaited", 10_000, &[]).expect("granted at once");
    // Inside MULTI the reply cannot be held: refused, nothing granted.
    let replies: Vec<redis::Value> = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIRE")
        .arg("m")
        .arg(1000)
        .arg("REPLICAS")
        .arg("AUTO")
        .query(&mut m)
        .unwrap_or_else(|err| vec![redis::Value::SimpleString(err.to_string())]);
    let text = format!("{replies:?}");
    assert!(
        text.contains("REPLICAS cannot hold a reply inside MULTI/EXEC or a script"),
        "{text}"
    );
    assert_eq!(info(&mut m, "m"), None);
}

#[test]
fn the_rule_follows_a_new_replica_and_a_setting_change_at_the_next_grant() {
    // What auto last found (a master without replicas) is not taken on trust when a
    // replica comes online or the setting changes: the next grant after either waits.
    let master = TestServer::start();
    let mut m = master.connection();
    acquire(&mut m, "before", 10_000, &[]).expect("granted at once: no replica");
    if !server_kind().can_wait_for_replicas() {
        return; // Redis 7.0 cannot hold a reply: nothing here waits
    }
    assert_eq!(lock_stat(&mut m, "lock_replica_waits"), 0);
    let replica = start_replica(&master, &[]);
    sync_replicas(&mut m, 1);
    let mut r = replica.connection();
    let (_, fence) = acquire(&mut m, "after", 10_000, &[]).expect("granted");
    assert_eq!(info_field(&mut r, "after", "fence"), Some(fence), "waited");
    assert_eq!(lock_stat(&mut m, "lock_replica_waits"), 1);

    config_set(&mut m, "lock.replicas", "0");
    acquire(&mut m, "off", 10_000, &[]).expect("granted");
    assert_eq!(
        lock_stat(&mut m, "lock_replica_waits"),
        1,
        "0 waits for nothing"
    );
    config_set(&mut m, "lock.replicas", "auto");
    let (_, fence) = acquire(&mut m, "on", 10_000, &[]).expect("granted");
    assert_eq!(
        info_field(&mut r, "on", "fence"),
        Some(fence),
        "waited again"
    );
    assert_eq!(lock_stat(&mut m, "lock_replica_waits"), 2);
}

#[test]
fn a_grant_waits_for_a_replica_still_in_its_first_sync() {
    grant_waits_for_a_replica_in_its_first_sync(&[]);
}

#[test]
fn a_grant_waits_for_a_replica_still_in_its_first_sync_over_two_channels() {
    // Valkey 8+ can send the snapshot over a connection of its own: the replica is then
    // attached by that one first.
    if !server_kind().has_dual_channel_replication() {
        eprintln!(
            "{}: no dual-channel replication; the one-channel test covers it",
            server_kind()
        );
        return;
    }
    grant_waits_for_a_replica_in_its_first_sync(&["--dual-channel-replication-enabled", "yes"]);
}

/// A grant under `auto` on a master whose only replica is attached and still in its
/// first sync (`both`: settings of master and replica).
fn grant_waits_for_a_replica_in_its_first_sync(both: &[&str]) {
    // The master starts a diskless full sync 10 s after a replica asks: the replica is
    // attached, not online, for that long.
    let mut master_args = vec![
        "--repl-diskless-sync",
        "yes",
        "--repl-diskless-sync-delay",
        "10",
    ];
    master_args.extend_from_slice(both);
    let master = TestServer::with_args(&master_args);
    let mut m = master.connection();
    let port = master.port.to_string();
    let mut replica_args = vec!["--replicaof", "127.0.0.1", &port];
    replica_args.extend_from_slice(both);
    let replica = TestServer::with_args(&replica_args);
    poll_until(
        Duration::from_secs(10),
        "the replica attached, in its sync",
        || {
            let text = server_info(&mut m, "replication");
            text.contains("slave0:") && !text.contains("state=online")
        },
    );
    if !server_kind().can_wait_for_replicas() {
        acquire(&mut m, "early", 10_000, &[]).expect("Redis 7.0: auto waits for nothing");
        return;
    }
    // The sync has seconds to go: a short wait falls short, and nothing stays granted.
    let text = error_of_command(
        &mut m,
        &["LOCK.ACQUIRE", "early", "10000", "REPLTIMEOUT", "100"],
    );
    assert!(not_replicated(&text), "{text}");
    assert_eq!(info(&mut m, "early"), None);
    // A wait longer than the sync: granted once the replica has it.
    let (_, fence) = acquire(&mut m, "patient", 60_000, &["REPLTIMEOUT", "30000"])
        .expect("granted after the sync");
    let mut r = replica.connection();
    assert_eq!(
        info_field(&mut r, "patient", "fence"),
        Some(fence),
        "the replica had it before the reply"
    );
}
