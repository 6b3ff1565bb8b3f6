//! `LOCK.ACQUIREALL` replicates, persists and reloads as the same grants made one by one,
//! in one atomic unit (docs/commands.md, "LOCK.ACQUIREALL"; docs/guarantees.md): the AOF
//! holds each key's `LOCK._SET` inside one `MULTI`/`EXEC`, whether the caller was granted
//! at once or as a waiter (on a release, a `DEL` or an expiry); a replica, an AOF replay
//! and an RDB reload end with the same locks, fences and expiries.

use crate::common::*;

/// The commands of an AOF (or a replication stream): each as its arguments.
fn commands(mut aof: &[u8]) -> Vec<Vec<Vec<u8>>> {
    fn line<'a>(rest: &mut &'a [u8]) -> &'a [u8] {
        let end = rest.windows(2).position(|w| w == b"\r\n").expect("a line");
        let text = &rest[..end];
        *rest = &rest[end + 2..];
        text
    }
    let number = |text: &[u8]| -> usize { std::str::from_utf8(text).unwrap().parse().unwrap() };
    let mut found = Vec::new();
    while !aof.is_empty() {
        let header = line(&mut aof);
        if header.first() != Some(&b'*') {
            continue; // an RDB preamble or annotation line: not a command
        }
        let count = number(&header[1..]);
        let mut command = Vec::with_capacity(count);
        for _ in 0..count {
            let len = number(&line(&mut aof)[1..]);
            command.push(aof[..len].to_vec());
            aof = &aof[len + 2..];
        }
        found.push(command);
    }
    found
}

/// Asserts that the `LOCK._SET` of every key of `keys` (for `token`) sits inside one
/// `MULTI`/`EXEC` block of `stream`.
fn assert_set_in_one_transaction(stream: &[Vec<Vec<u8>>], keys: &[&str], token: &[u8]) {
    let is = |c: &Vec<Vec<u8>>, name: &str| c[0].eq_ignore_ascii_case(name.as_bytes());
    let mut block: Option<Vec<&Vec<Vec<u8>>>> = None;
    for command in stream {
        if is(command, "MULTI") {
            block = Some(Vec::new());
        } else if is(command, "EXEC") {
            let inside = block.take().unwrap_or_default();
            let sets = |key: &str| {
                inside
                    .iter()
                    .any(|c| is(c, "LOCK._SET") && c[1] == key.as_bytes() && c[2] == token)
            };
            if keys.iter().all(|key| sets(key)) {
                return;
            }
        } else if let Some(inside) = block.as_mut() {
            inside.push(command);
        }
    }
    panic!("no MULTI/EXEC holds the LOCK._SET of every key of {keys:?}");
}

/// Frees a waiter's last key, given a connection, the holder's token and the key.
type Free = fn(&mut redis::Connection, &[u8], &str);

/// Grants every way a request for several keys can be granted: at once, and as a waiter
/// when its last key is released, deleted or expires. Returns each grant's keys and
/// token.
fn grant_every_way(server: &TestServer) -> Vec<(Vec<&'static str>, Vec<u8>)> {
    let mut con = server.connection();
    let mut grants = Vec::new();
    let (token, _) =
        acquire_all(&mut con, &["now:a", "now:b", "now:c"], 600_000, &[]).expect("at once");
    grants.push((vec!["now:a", "now:b", "now:c"], token));
    let frees: [(&'static str, u64, Free); 3] = [
        ("released", 600_000, |con, token, key| {
            assert_eq!(release(con, key, token), 1);
        }),
        ("deleted", 600_000, |con, _, key| {
            let n: i64 = redis::cmd("DEL").arg(key).query(con).unwrap();
            assert_eq!(n, 1);
        }),
        ("expired", 300, |_, _, _| {}),
    ];
    for (how, ttl, free) in frees {
        let keys: Vec<&'static str> = match how {
            "released" => vec!["released:a", "released:b"],
            "deleted" => vec!["deleted:a", "deleted:b"],
            _ => vec!["expired:a", "expired:b"],
        };
        let (holder, _) = acquire(&mut con, keys[1], ttl, &[]).expect("held");
        let mut waiter =
            Waiter::start_all(server, &keys, 600_000, &["WAIT", "20000", "TOKEN", how]);
        free(&mut con, &holder, keys[1]);
        let (token, _) = waiter.granted_all().expect("the waiter is granted");
        grants.push((keys, token));
    }
    grants
}

#[test]
fn grants_of_several_keys_are_one_transaction_in_the_aof_and_survive_a_replay() {
    let mut server = TestServer::with_args(&AOF_ALWAYS);
    let grants = grant_every_way(&server);
    let stream = commands(&aof_files(&server, "type i"));
    let mut con = server.connection();
    let mut before = Vec::new();
    for (keys, token) in &grants {
        assert_set_in_one_transaction(&stream, keys, token);
        for key in keys {
            before.push((key.to_string(), snapshot(&mut con, key)));
        }
    }
    drop(con);
    server.kill();
    server.restart();
    let mut con = server.connection();
    for (key, snapshot_before) in &before {
        assert_eq!(
            &snapshot(&mut con, key),
            snapshot_before,
            "{key} after the replay"
        );
    }
    for (keys, token) in &grants {
        for key in keys {
            assert_eq!(release(&mut con, key, token), 1, "{key}");
        }
    }
}

#[test]
fn a_replica_and_an_rdb_reload_end_with_the_same_locks() {
    let master = TestServer::start();
    let replica = start_replica(&master, &[]);
    let grants = grant_every_way(&master);
    let mut con = master.connection();
    // WAIT covers this connection's own writes: one after every grant (some were made
    // by a timer, on no connection's behalf).
    redis::cmd("SET")
        .arg("synced")
        .arg(1)
        .query::<()>(&mut con)
        .unwrap();
    sync_replicas(&mut con, 1);
    let mut on_replica = replica.connection();
    let keys: Vec<&str> = grants.iter().flat_map(|(keys, _)| keys.clone()).collect();
    let before: Vec<Snapshot> = keys.iter().map(|key| snapshot(&mut con, key)).collect();
    for (key, snapshot_before) in keys.iter().zip(&before) {
        assert_eq!(
            &snapshot(&mut on_replica, key),
            snapshot_before,
            "{key} on the replica"
        );
    }
    redis::cmd("DEBUG")
        .arg("RELOAD")
        .query::<()>(&mut con)
        .unwrap();
    for (key, snapshot_before) in keys.iter().zip(&before) {
        assert_eq!(
            &snapshot(&mut con, key),
            snapshot_before,
            "{key} after DEBUG RELOAD"
        );
    }
}
