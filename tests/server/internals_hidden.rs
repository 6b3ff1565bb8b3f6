//! `SLOWLOG` and `MONITOR` show what clients sent and nothing of the module's own
//! machinery, on every server: no command nobody sent (the module once unblocked waiters
//! with its own `CLIENT UNBLOCK`), no entry with an empty argument list (a granted
//! waiter once left one on Redis 7.0), and every blocking `LOCK.ACQUIRE` exactly once.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::common::*;
use redis::Value;

/// Runs every kind of handoff a client can cause: a release, a `DEL` and an expiry with
/// a waiter, and a wait that times out. Returns how many `LOCK.ACQUIRE` were sent.
fn handoffs(server: &TestServer, con: &mut redis::Connection) -> usize {
    let (holder, _, mut a) = held_with_a_waiter(server, con, "job", 30_000, &["WAIT", "0"]);
    assert_eq!(release(con, "job", &holder), 1);
    a.granted_token();

    let mut b = Waiter::start(server, "job", 30_000, &["WAIT", "0"]);
    let _: i64 = redis::cmd("DEL").arg("job").query(con).unwrap();
    b.granted_token();

    let mut c = Waiter::start(server, "job", 30_000, &["WAIT", "0"]);
    let _: i64 = redis::cmd("PEXPIRE").arg("job").arg(30).query(con).unwrap();
    c.granted_token();

    let mut d = Waiter::start(server, "job", 30_000, &["WAIT", "30"]);
    assert_eq!(d.granted(), None);
    5
}

/// The arguments of every `SLOWLOG` entry.
fn slowlog_commands(con: &mut redis::Connection) -> Vec<Vec<Vec<u8>>> {
    let entries: Vec<Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(10_000)
        .query(con)
        .unwrap();
    entries
        .into_iter()
        .map(|entry| {
            let Value::Array(fields) = entry else {
                panic!("SLOWLOG entry: {entry:?}");
            };
            redis::from_redis_value(fields[3].clone()).expect("the entry's arguments")
        })
        .collect()
}

/// Fails if a command line (its arguments) is one the module made up.
fn assert_sent_by_a_client(source: &str, args: &[Vec<u8>]) {
    let name = args
        .first()
        .map(|a| a.to_ascii_lowercase())
        .unwrap_or_default();
    assert!(!name.is_empty(), "{source} shows an entry with no command");
    let sub = args
        .get(1)
        .map(|a| a.to_ascii_lowercase())
        .unwrap_or_default();
    let shown = || {
        args.iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(
        !(name == b"client" && sub == b"unblock"),
        "{source} shows a CLIENT UNBLOCK nobody sent: {}",
        shown()
    );
    assert!(
        name != b"lock._set" && name != b"cluster",
        "{source} shows the module's own {}",
        shown()
    );
}

fn count_acquires<'a>(commands: impl Iterator<Item = &'a Vec<Vec<u8>>>) -> usize {
    commands
        .filter(|args| args[0].eq_ignore_ascii_case(b"LOCK.ACQUIRE"))
        .count()
}

#[test]
fn slowlog_shows_every_acquire_once_and_nothing_the_module_did_itself() {
    let server = TestServer::start();
    let mut con = server.connection();
    config_set(&mut con, "slowlog-log-slower-than", "0");
    config_set(&mut con, "slowlog-max-len", "10000");
    let _: () = redis::cmd("SLOWLOG").arg("RESET").query(&mut con).unwrap();

    let sent = handoffs(&server, &mut con);

    let logged = slowlog_commands(&mut con);
    for args in &logged {
        assert_sent_by_a_client("SLOWLOG", args);
    }
    assert_eq!(count_acquires(logged.iter()), sent, "{logged:?}");
}

/// Parses `MONITOR` lines (`+<time> [<db> <addr>] "CMD" "arg" ...`) into their arguments.
fn monitor_commands(seen: &[u8]) -> Vec<Vec<Vec<u8>>> {
    String::from_utf8_lossy(seen)
        .lines()
        .filter_map(|line| line.split_once("] "))
        .map(|(_, args)| {
            args.split("\" \"")
                .map(|arg| arg.trim_matches('"').as_bytes().to_vec())
                .collect()
        })
        .collect()
}

#[test]
fn monitor_shows_every_acquire_once_and_nothing_the_module_did_itself() {
    const MARKER: &[u8] = b"monitor-end-marker-5a1c";
    let server = TestServer::start();
    let mut con = server.connection();
    let mut stream: TcpStream = raw_connection(server.port);
    stream.write_all(&resp(&[b"MONITOR"])).unwrap();
    let mut ok = [0u8; 5];
    stream.read_exact(&mut ok).unwrap();
    assert_eq!(&ok, b"+OK\r\n");

    let sent = handoffs(&server, &mut con);
    let _: Vec<u8> = redis::cmd("ECHO").arg(MARKER).query(&mut con).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut seen = Vec::new();
    read_until(&mut stream, &mut seen, |seen| contains(seen, MARKER));

    let shown = monitor_commands(&seen);
    for args in &shown {
        assert_sent_by_a_client("MONITOR", args);
    }
    assert_eq!(
        count_acquires(shown.iter()),
        sent,
        "{}",
        String::from_utf8_lossy(&seen)
    );
}
