//! A rolling upgrade: a replica of the new version follows a master of the previous one
//! (a full sync, then the live stream of grants, extends and releases) and, promoted,
//! has every lock; and the reverse, an old replica of a new master.

use std::thread;

use crate::common::*;
use crate::locks::{self, Held, check, make_every_kind, release_and_go_on};
use crate::previous;

/// Grants, extends and releases on `master` while a replica follows: 300 of each, on
/// keys of their own, the last grant of each key left held. Returns what is held.
fn traffic(master: &TestServer) -> Vec<Held> {
    let port = master.port;
    thread::spawn(move || {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("client");
        let mut con = client.get_connection().expect("connect");
        let mut held = Vec::new();
        for i in 0..300 {
            let key = format!("live:{}", i % 7);
            let token = format!("live-{i}");
            let (token, fence) =
                acquire(&mut con, &key, 600_000, &["TOKEN", &token, "WAIT", "10000"])
                    .expect("granted");
            assert_eq!(extend(&mut con, &key, &token, 600_000), 1);
            if i < 293 {
                assert_eq!(release(&mut con, &key, &token), 1);
            } else {
                held.push(Held {
                    key,
                    token,
                    fence,
                    value: None,
                    session: -1,
                });
            }
        }
        held
    })
    .join()
    .expect("the traffic ran")
}

/// Every lock `made` on the master is on the replica, in the same state.
fn follows(master: &TestServer, replica: &TestServer, made: &[Held], what: &str) {
    // `WAIT` counts this connection's writes: one write after everything else, waited for.
    let mut con = master.connection();
    let () = redis::cmd("SET")
        .arg("upgrade:synced")
        .arg(1)
        .query(&mut con)
        .expect("SET");
    sync_replicas(&mut con, 1);
    check(
        &mut master.connection(),
        made,
        &format!("{what}: the master"),
    );
    check(
        &mut replica.connection(),
        made,
        &format!("{what}: the replica"),
    );
}

fn promote(replica: &TestServer) {
    let () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut replica.connection())
        .expect("REPLICAOF NO ONE");
}

#[test]
fn a_new_replica_follows_an_old_master_under_traffic_and_is_promoted_with_every_lock() {
    let old = previous::module();
    let master = locks::server_with(&old, &[]);
    let (mut made, _waiter) = make_every_kind(&master);
    // The module under test, in a full sync from the old master.
    let replica = start_replica(&master, &[]);
    made.extend(traffic(&master));
    follows(&master, &replica, &made, "old master, new replica");
    promote(&replica);
    let mut con = replica.connection();
    check(&mut con, &made, "the promoted new replica");
    release_and_go_on(&mut con, &made, "the promoted new replica");
}

#[test]
fn an_old_replica_follows_a_new_master_under_traffic_and_is_promoted_with_every_lock() {
    let old = previous::module();
    let module = module_path();
    let master = locks::server_with(module.to_str().expect("a UTF-8 path"), &[]);
    let (mut made, _waiter) = make_every_kind(&master);
    let replica = start_replica(&master, &["--no-module", "--loadmodule", &old]);
    made.extend(traffic(&master));
    follows(&master, &replica, &made, "new master, old replica");
    promote(&replica);
    let mut con = replica.connection();
    check(&mut con, &made, "the promoted old replica");
    release_and_go_on(&mut con, &made, "the promoted old replica");
}
