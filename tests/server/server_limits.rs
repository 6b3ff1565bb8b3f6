//! The server's own limits and safeguards around the module (docs/commands.md, "Errors",
//! and docs/guarantees.md on tokens): read-only replicas, maxmemory, eviction, a panicking command,
//! secrecy of tokens in SLOWLOG, MONITOR and the log, and the internal LOCK._SET.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::common::*;
use redis::Value;

fn contains_ignore_case(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

/// Every string inside a reply, concatenated: what a client could read from it.
fn all_bytes(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::BulkString(bytes) => out.extend_from_slice(bytes),
        Value::SimpleString(s) => out.extend_from_slice(s.as_bytes()),
        Value::Array(items) | Value::Set(items) => items.iter().for_each(|v| all_bytes(v, out)),
        Value::Map(pairs) => pairs.iter().for_each(|(k, v)| {
            all_bytes(k, out);
            all_bytes(v, out);
        }),
        Value::Int(i) => out.extend_from_slice(i.to_string().as_bytes()),
        _ => {}
    }
    out.push(b' ');
}

#[test]
fn a_read_only_replica_refuses_every_command_but_lock_info() {
    let master = TestServer::start();
    let replica = start_replica(&master, &[]);
    let mut on_master = master.connection();
    let (token, fence) = acquire(&mut on_master, "held", 60_000, &["TOKEN", "t"]).unwrap();
    sync_replicas(&mut on_master, 1);

    let mut con = replica.connection();
    assert_eq!(info_field(&mut con, "held", "fence"), Some(fence));
    assert_eq!(info(&mut con, "absent"), None);
    let before = dump(&mut con, "held");
    let cases: [&[&str]; 6] = [
        &["LOCK.ACQUIRE", "absent", "1000"],
        &["LOCK.ACQUIRE", "absent", "1000", "TOKEN", "x", "WAIT", "10"],
        &["LOCK.ACQUIRE", "held", "1000", "TOKEN", "t"],
        &["LOCK.ACQUIRE", "held", "1000"],
        &["LOCK.RELEASE", "held", "t"],
        &["LOCK.EXTEND", "held", "t", "1000"],
    ];
    for case in cases {
        let err = error_of_command(&mut con, case);
        assert!(err.starts_with("READONLY "), "{case:?}: {err}");
        assert_eq!(dump(&mut con, "held"), before, "{case:?}");
        assert!(!exists(&mut con, "absent"), "{case:?}");
    }
    let ttl = pttl(&mut con, "held");
    assert!(ttl > 0 && ttl <= 60_000, "PTTL {ttl}");
    assert_eq!(release(&mut on_master, "held", &token), 1);
}

#[test]
fn without_memory_acquire_is_refused_with_oom_while_release_extend_and_info_work() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (a, fence) = acquire(&mut con, "a", 60_000, &["TOKEN", "ta"]).unwrap();
    let (b, _) = acquire(&mut con, "b", 60_000, &["TOKEN", "tb"]).unwrap();
    config_set(&mut con, "maxmemory-policy", "noeviction");
    config_set(&mut con, "maxmemory", "1");

    let before = dump(&mut con, "a");
    let cases: [&[&str]; 3] = [
        &["LOCK.ACQUIRE", "new", "1000"],
        &["LOCK.ACQUIRE", "new", "1000", "TOKEN", "x", "WAIT", "0"],
        &["LOCK.ACQUIRE", "a", "600000", "TOKEN", "ta"],
    ];
    for case in cases {
        let err = error_of_command(&mut con, case);
        assert!(err.starts_with("OOM "), "{case:?}: {err}");
    }
    assert!(!exists(&mut con, "new"));
    assert_eq!(dump(&mut con, "a"), before);
    let ttl = pttl(&mut con, "a");
    assert!(
        ttl > 0 && ttl <= 60_000,
        "a refused renewal must not reset the TTL: {ttl}"
    );

    assert_eq!(info_field(&mut con, "a", "fence"), Some(fence));
    assert_eq!(extend(&mut con, "a", &a, 600_000), 1);
    let ttl = pttl(&mut con, "a");
    assert!(ttl > 500_000 && ttl <= 600_000, "PTTL {ttl}");
    assert_eq!(extend(&mut con, "a", b"wrong", 1_000), 0);
    assert_eq!(release(&mut con, "b", b"wrong"), 0);
    assert_eq!(release(&mut con, "b", &b), 1);
    assert_eq!(release(&mut con, "a", &a), 1);

    config_set(&mut con, "maxmemory", "0");
    assert!(acquire(&mut con, "new", 1_000, &[]).is_some());
}

#[test]
fn a_lock_is_evicted_like_any_key_with_an_expiry() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (token, fence) = acquire(&mut con, "lk", 60_000, &[]).unwrap();
    let () = redis::cmd("SET")
        .arg("plain")
        .arg("v")
        .query(&mut con)
        .unwrap();
    // volatile-lru evicts keys that have an expiry: the lock, not the plain string.
    config_set(&mut con, "maxmemory-policy", "volatile-lru");
    config_set(&mut con, "maxmemory", "1");
    poll_until(Duration::from_secs(10), "the lock is evicted", || {
        ping(&mut con);
        dbsize(&mut con) == 1
    });
    config_set(&mut con, "maxmemory", "0");
    let info = server_info(&mut con, "stats");
    assert!(info.contains("evicted_keys:1"), "{info}");
    assert!(exists(&mut con, "plain"));
    assert!(!exists(&mut con, "lk"));
    assert_eq!(release(&mut con, "lk", &token), 0);
    let (_, next) = acquire(&mut con, "lk", 60_000, &[]).expect("free again");
    assert!(next > fence);
}

#[test]
fn a_panicking_command_answers_err_and_the_server_keeps_running() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (token, fence) = acquire(&mut con, "kept", 60_000, &["TOKEN", "t"]).unwrap();
    let before = dump(&mut con, "kept");
    for _ in 0..3 {
        let err = error_of(redis::cmd("LOCK.DEBUG").arg("PANIC").query(&mut con));
        assert!(err.starts_with("ERR "), "{err}");
        ping(&mut con);
    }
    let mut fresh = server.connection();
    ping(&mut fresh);
    assert_eq!(dump(&mut fresh, "kept"), before);
    assert_eq!(info_field(&mut fresh, "kept", "fence"), Some(fence));
    let (_, next) = acquire(&mut fresh, "other", 60_000, &[]).expect("still granting");
    assert!(next > fence);
    assert_eq!(release(&mut fresh, "kept", &token), 1);
    // The same process answers: it neither died nor was restarted.
    let about = server_info(&mut fresh, "server");
    let pid = server.pid().expect("running");
    assert!(about.contains(&format!("process_id:{pid}\r\n")), "{about}");
}

#[test]
fn lock_debug_is_refused_when_debug_commands_are_disabled() {
    let server = TestServer::with_args(&["--enable-debug-command", "no"]);
    let mut con = server.connection();
    let setting: (String, String) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("enable-debug-command")
        .query(&mut con)
        .unwrap();
    assert_eq!(setting.1, "no");
    let (token, _) = acquire(&mut con, "kept", 60_000, &[]).unwrap();
    let err = error_of(redis::cmd("LOCK.DEBUG").arg("PANIC").query(&mut con));
    assert!(err.starts_with("ERR "), "{err}");
    ping(&mut con);
    assert!(
        !server.log().contains("panicked"),
        "refused, yet it ran: {}",
        server.log()
    );
    assert_eq!(release(&mut con, "kept", &token), 1);
}

/// Runs every kind of command that carries a token — well-formed, refused, wrong token,
/// server-made token — and returns the tokens used.
fn commands_with_tokens(con: &mut redis::Connection) -> Vec<Vec<u8>> {
    let given = b"SECRET-given-4f1d".to_vec();
    let lower = b"SECRET-lower-case-option-77ab".to_vec();
    let after_wait = b"SECRET-after-wait-0c3e".to_vec();
    let wrong = b"SECRET-wrong-token-b5e2".to_vec();
    let refused = b"SECRET-refused-acquire-91aa".to_vec();
    let refused_release = b"SECRET-refused-release-62f0".to_vec();
    let refused_extend = b"SECRET-refused-extend-d41c".to_vec();
    let internal = b"SECRET-internal-set-a7a7".to_vec();

    let (made, _) = acquire(con, "made", 60_000, &[]).unwrap();
    assert_eq!(extend(con, "made", &made, 60_000), 1);
    assert_eq!(release(con, "made", &made), 1);

    acquire(con, "given", 60_000, &["TOKEN", "SECRET-given-4f1d"]).unwrap();
    assert_eq!(
        acquire(con, "given", 60_000, &["TOKEN", "SECRET-given-4f1d"])
            .unwrap()
            .0,
        given
    );
    assert_eq!(
        acquire(con, "given", 60_000, &["TOKEN", "SECRET-wrong-token-b5e2"]),
        None
    );
    assert_eq!(extend(con, "given", &wrong, 60_000), 0);
    assert_eq!(release(con, "given", &wrong), 0);
    assert_eq!(extend(con, "given", &given, 60_000), 1);
    assert_eq!(release(con, "given", &given), 1);

    acquire(
        con,
        "lower",
        60_000,
        &["token", "SECRET-lower-case-option-77ab"],
    )
    .unwrap();
    acquire(
        con,
        "after-wait",
        60_000,
        &["WAIT", "10", "Token", "SECRET-after-wait-0c3e"],
    )
    .unwrap();

    // A fenced write, by the holder and by a token that does not hold the lock.
    let fenced = b"SECRET-fenced-write-3d9b".to_vec();
    acquire_as(con, "fenced", 60_000, &fenced).expect("granted");
    let ran: String = redis::cmd("LOCK.DO")
        .arg("fenced")
        .arg(&fenced)
        .arg("SET")
        .arg("fenced-data")
        .arg(1)
        .query(con)
        .unwrap();
    assert_eq!(ran, "OK");
    let not_held = error_of_command(
        con,
        &[
            &b"LOCK.DO"[..],
            b"fenced",
            &wrong,
            b"SET",
            b"fenced-data",
            b"2",
        ],
    );
    assert!(not_held.starts_with("NOTHELD"), "{not_held}");

    // Refused commands carry tokens too.
    let refusals: [Vec<&[u8]>; 8] = [
        vec![b"LOCK.ACQUIRE", b"r", b"0", b"TOKEN", &refused],
        vec![
            b"LOCK.ACQUIRE",
            b"r",
            b"1000",
            b"TOKEN",
            &refused,
            b"WAIT",
            b"-1",
        ],
        vec![
            b"LOCK.ACQUIRE",
            b"r",
            b"1000",
            b"TOKEN",
            &refused,
            b"TOKEN",
            &refused,
        ],
        vec![b"LOCK.RELEASE", b"r", &refused_release, b"extra"],
        vec![b"LOCK.EXTEND", b"r", &refused_extend],
        vec![b"LOCK.EXTEND", b"r", &refused_extend, b"abc"],
        vec![b"LOCK._SET", b"r", &internal, b"5", b"0", b"-1"],
        vec![b"LOCK.DO", b"fenced", &fenced, b"BLPOP", b"l", b"0"],
    ];
    for argv in refusals {
        let err = error_of_command(con, &argv);
        assert!(err.starts_with("ERR "), "{err}");
    }
    vec![
        fenced,
        made,
        given,
        lower,
        after_wait,
        wrong,
        refused,
        refused_release,
        refused_extend,
        internal,
    ]
}

fn slowlog_bytes(con: &mut redis::Connection) -> Vec<u8> {
    let entries: Value = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(10_000)
        .query(con)
        .unwrap();
    let mut bytes = Vec::new();
    all_bytes(&entries, &mut bytes);
    bytes
}

/// Opens a MONITOR session on a raw socket.
fn monitor(port: u16) -> TcpStream {
    let mut stream = raw_connection(port);
    stream.write_all(&resp(&[b"MONITOR"])).unwrap();
    let mut ok = [0u8; 5];
    stream.read_exact(&mut ok).unwrap();
    assert_eq!(&ok, b"+OK\r\n");
    stream
}

/// Everything MONITOR printed up to an `ECHO marker` sent on `con`.
fn monitor_until_marker(stream: &mut TcpStream, con: &mut redis::Connection) -> Vec<u8> {
    const MARKER: &[u8] = b"monitor-end-marker-e81f";
    let _: Vec<u8> = redis::cmd("ECHO").arg(MARKER).query(con).unwrap();
    let mut seen = Vec::new();
    read_until(stream, &mut seen, |seen| contains(seen, MARKER));
    seen
}

/// Fails unless `seen`, what `source` showed after `commands_with_tokens`, shows each of
/// `commands` and the server's `(redacted)` mark, and none of `tokens`.
fn assert_commands_shown_with_tokens_redacted(
    source: &str,
    seen: &[u8],
    commands: &[&str],
    tokens: &[Vec<u8>],
) {
    for command in commands {
        assert!(
            contains_ignore_case(seen, command.as_bytes()),
            "{source} did not show {command}: {}",
            String::from_utf8_lossy(seen)
        );
    }
    // The server's redaction API marks what it hid.
    assert!(
        contains(seen, b"(redacted)"),
        "{}",
        String::from_utf8_lossy(seen)
    );
    assert_no_token_in(source, seen, tokens);
}

#[test]
fn slowlog_never_shows_a_token() {
    let server = TestServer::start();
    let mut con = server.connection();
    config_set(&mut con, "slowlog-log-slower-than", "0");
    config_set(&mut con, "slowlog-max-len", "10000");
    let tokens = commands_with_tokens(&mut con);
    let log = slowlog_bytes(&mut con);
    assert_commands_shown_with_tokens_redacted(
        "SLOWLOG",
        &log,
        &[
            "lock.acquire",
            "lock.release",
            "lock.extend",
            "lock._set",
            "lock.do",
        ],
        &tokens,
    );
}

#[test]
fn monitor_never_shows_a_token() {
    let server = TestServer::start();
    let mut con = server.connection();
    let mut stream = monitor(server.port);
    let tokens = commands_with_tokens(&mut con);
    let seen = monitor_until_marker(&mut stream, &mut con);
    assert_commands_shown_with_tokens_redacted(
        "MONITOR",
        &seen,
        &["lock.acquire", "lock.release", "lock.extend", "lock.do"],
        &tokens,
    );
}

/// A replica runs the `LOCK._SET` its master sends for every grant, token included: it
/// must hide that token from its own `SLOWLOG` and `MONITOR` as the master does.
#[test]
fn a_replica_shows_replicated_tokens_neither_in_slowlog_nor_in_monitor() {
    let master = TestServer::start();
    let replica = start_replica(&master, &[]);
    let mut r = replica.connection();
    config_set(&mut r, "slowlog-log-slower-than", "0");
    config_set(&mut r, "slowlog-max-len", "10000");
    let mut stream = monitor(replica.port);
    let mut m = master.connection();

    let given = b"SECRET-replicated-given-7c1d".to_vec();
    acquire_as(&mut m, "given", 600_000, &given).expect("granted");
    let (made, _) = acquire(&mut m, "made", 600_000, &[]).expect("granted");
    assert_eq!(extend(&mut m, "made", &made, 900_000), 1);
    // A grant to a waiter, made when the holder releases.
    let waited = "SECRET-replicated-waiter-2f4e";
    let mut waiter = Waiter::start(&master, "given", 600_000, &["WAIT", "0", "TOKEN", waited]);
    assert_eq!(release(&mut m, "given", &given), 1);
    assert_eq!(waiter.granted_token(), waited.as_bytes());
    sync_replicas(&mut m, 1);
    assert_eq!(dbsize(&mut r), 2, "the replica got the locks");

    // The replica has run everything the master sent: a command sent to it now comes
    // after all of it in its MONITOR stream.
    let seen = monitor_until_marker(&mut stream, &mut r);
    let log = slowlog_bytes(&mut r);
    let tokens = [given, made, waited.as_bytes().to_vec()];
    assert_commands_shown_with_tokens_redacted("replica SLOWLOG", &log, &["lock._set"], &tokens);
    assert_commands_shown_with_tokens_redacted("replica MONITOR", &seen, &["lock._set"], &tokens);

    // One LOCK._SET per grant (given, made, the waiter's), each with its token argument
    // replaced by the mark.
    let entries: Vec<Vec<Value>> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(10_000)
        .query(&mut r)
        .unwrap();
    let mut set_keys: Vec<Vec<u8>> = entries
        .into_iter()
        .map(|entry| redis::from_redis_value::<Vec<Vec<u8>>>(entry[3].clone()).expect("argv"))
        .filter(|argv| argv[0].eq_ignore_ascii_case(b"LOCK._SET"))
        .map(|argv| {
            assert_eq!(argv.len(), 6, "{argv:?}");
            assert_eq!(argv[2], b"(redacted)", "{argv:?}");
            argv[1].clone()
        })
        .collect();
    set_keys.sort();
    assert_eq!(set_keys, [&b"given"[..], b"given", b"made"]);
    let monitored: Vec<&[u8]> = seen
        .split(|&b| b == b'\n')
        .filter(|line| contains(line, b"\"LOCK._SET\""))
        .collect();
    assert_eq!(monitored.len(), 3, "{}", String::from_utf8_lossy(&seen));
    for line in monitored {
        assert!(
            contains(line, b"\" \"(redacted)\" \""),
            "{}",
            String::from_utf8_lossy(line)
        );
    }
}

/// Acquires whose options are malformed still carry the caller's token right after the
/// word `TOKEN`: a rejected command must not leak it either.
#[test]
fn a_malformed_acquire_shows_its_token_neither_in_slowlog_nor_in_monitor() {
    let server = TestServer::start();
    let mut con = server.connection();
    config_set(&mut con, "slowlog-log-slower-than", "0");
    let mut stream = monitor(server.port);
    let misplaced = b"SECRET-after-unknown-option-3b9d".to_vec();
    let no_ttl = b"SECRET-without-ttl-5e0a".to_vec();
    let cases: [Vec<&[u8]>; 3] = [
        // An unknown option without a value shifts TOKEN to an even position.
        vec![b"LOCK.ACQUIRE", b"k", b"1000", b"NX", b"TOKEN", &misplaced],
        vec![
            b"LOCK.ACQUIRE",
            b"k",
            b"1000",
            b"WAIT",
            b"10",
            b"NX",
            b"TOKEN",
            &misplaced,
        ],
        // The ttl forgotten: TOKEN comes where the ttl belongs.
        vec![b"LOCK.ACQUIRE", b"k", b"TOKEN", &no_ttl],
    ];
    for argv in cases {
        let err = error_of_command(&mut con, &argv);
        assert!(err.starts_with("ERR "), "{err}");
    }
    let seen = monitor_until_marker(&mut stream, &mut con);
    let log = slowlog_bytes(&mut con);
    let tokens = [&misplaced, &no_ttl];
    assert_no_token_in("SLOWLOG", &log, &tokens);
    assert_no_token_in("MONITOR", &seen, &tokens);
}

#[test]
fn the_server_log_never_contains_a_token() {
    let server = TestServer::with_args(&["--loglevel", "debug"]);
    let mut con = server.connection();
    config_set(&mut con, "slowlog-log-slower-than", "0");
    let mut tokens = commands_with_tokens(&mut con);
    // A panic, a reload (save and load of the locks), and a refused payload log things.
    let (held, _) = acquire(&mut con, "through-reload", 60_000, &[]).unwrap();
    tokens.push(held.clone());
    let _ = error_of(redis::cmd("LOCK.DEBUG").arg("PANIC").query(&mut con));
    let () = redis::cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    assert_eq!(release(&mut con, "through-reload", &held), 1);
    let log = server.log();
    assert!(log.contains("Module 'lock' loaded"), "{log}");
    assert_no_token_in("the log", log.as_bytes(), &tokens);
}

#[test]
fn lock_set_from_a_normal_client_is_refused_and_changes_nothing() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (token, fence) = acquire(&mut con, "held", 60_000, &["TOKEN", "t"]).unwrap();
    let before = dump(&mut con, "held");
    // A fence far above anything the clock would grant: if the server took it, the
    // next grant would have to exceed it.
    let huge = ((1i64 << 53) - 10).to_string();
    let cases: [&[&str]; 5] = [
        &["LOCK._SET", "absent", "mine", "5", "0", "-1"],
        &["LOCK._SET", "absent", "mine", &huge, "0", "-1"],
        &["LOCK._SET", "held", "mine", "5", "0", "-1"],
        &["LOCK._SET", "held", "t", &huge, "0", "-1"],
        &["LOCK._SET", "held"],
    ];
    for case in cases {
        let err = error_of_command(&mut con, case);
        assert!(err.starts_with("ERR "), "{case:?}: {err}");
    }
    // Nor from a transaction or a script.
    let replies: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("LOCK._SET")
        .arg(&["absent", "mine", &huge, "0", "-1"])
        .query(&mut con)
        .unwrap_or_default();
    assert!(
        !replies.iter().any(|r| matches!(r, Value::Okay)),
        "{replies:?}"
    );
    let scripted: Value = redis::cmd("EVAL")
        .arg("return redis.pcall('LOCK._SET', KEYS[1], 'mine', ARGV[1], '0', '-1')")
        .arg(1)
        .arg("absent")
        .arg(&huge)
        .query(&mut con)
        .unwrap_or(Value::Nil);
    assert_ne!(scripted, Value::Okay);

    assert!(!exists(&mut con, "absent"));
    assert_eq!(dump(&mut con, "held"), before);
    let ttl = pttl(&mut con, "held");
    assert!(ttl > 0 && ttl <= 60_000, "PTTL {ttl}");
    let (_, next) = acquire(&mut con, "fresh", 60_000, &[]).unwrap();
    assert!(
        next > fence && next < (1i64 << 53) - 10,
        "the refused fence moved the clock: {next}"
    );
    assert_eq!(release(&mut con, "held", &token), 1);
}
