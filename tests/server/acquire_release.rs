//! LOCK.ACQUIRE, LOCK.RELEASE, LOCK.EXTEND and LOCK.INFO on a real server: tokens,
//! replies, ownership, TTLs, fences and the shape of LOCK.INFO (docs/commands.md).

use std::collections::HashSet;
use std::io::Write;
use std::time::{Duration, Instant};

use crate::common::*;
use redis::Value;

/// Fences stay below this so that clients with double-precision numbers read them exactly.
const TWO_TO_THE_53: i64 = 1 << 53;

fn is_lower_hex(token: &[u8]) -> bool {
    token
        .iter()
        .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}

/// Sends `commands` on a fresh socket and returns every reply byte, exactly as the server
/// wrote them. A final `ECHO` of a marker tells where the replies end.
fn raw_replies(port: u16, commands: &[Vec<&[u8]>]) -> Vec<u8> {
    const MARKER: &[u8] = b"end-of-raw-replies-5c1e";
    let mut request = Vec::new();
    let echo: Vec<&[u8]> = vec![b"ECHO", MARKER];
    for command in commands.iter().chain(std::iter::once(&echo)) {
        request.extend_from_slice(&resp(command));
    }
    let mut end = format!("${}\r\n", MARKER.len()).into_bytes();
    end.extend_from_slice(MARKER);
    end.extend_from_slice(b"\r\n");

    let mut stream = raw_connection(port);
    stream.write_all(&request).expect("send");
    let mut replies = Vec::new();
    read_until(&mut stream, &mut replies, |replies| replies.ends_with(&end));
    replies.truncate(replies.len() - end.len());
    replies
}

#[test]
fn the_module_registers_under_the_name_lock() {
    let server = TestServer::start();
    let mut con = server.connection();
    // Built-in modules (Redis 8's vectorset, Valkey 9's lua) are not ours to count.
    assert_eq!(loaded_modules(&mut con), vec!["lock".to_string()]);
}

#[test]
fn server_made_tokens_are_32_lowercase_hex_characters_and_differ_per_grant() {
    let server = TestServer::start();
    let mut con = server.connection();
    let mut seen = HashSet::new();
    for i in 0..20 {
        let key = format!("job:{i}");
        for _ in 0..3 {
            let (token, _) = acquire(&mut con, &key, 60_000, &[]).expect("granted");
            assert_eq!(token.len(), 32, "{token:?}");
            assert!(is_lower_hex(&token), "{token:?}");
            assert!(seen.insert(token.clone()), "token repeated: {token:?}");
            assert_eq!(release(&mut con, &key, &token), 1);
        }
    }
}

#[test]
fn a_caller_token_is_binary_safe() {
    let server = TestServer::start();
    let mut con = server.connection();
    let token: &[u8] = b"a\0b\r\nc\xff\xfe\0";
    let (granted, fence) = acquire_as(&mut con, "bin", 60_000, token).expect("granted");
    assert_eq!(granted, token);
    assert!(fence > 0);

    // Only the exact bytes hold the lock: a prefix, or the bytes cut at the NUL, do not.
    for near in [
        &b"a"[..],
        b"a\0b",
        b"a\0b\r\nc\xff\xfe",
        b"a\0b\r\nc\xff\xfe\0\0",
    ] {
        assert_eq!(release(&mut con, "bin", near), 0, "{near:?}");
        assert_eq!(extend(&mut con, "bin", near, 1_000), 0, "{near:?}");
        assert_eq!(acquire_as(&mut con, "bin", 1_000, near), None, "{near:?}");
    }
    assert_eq!(
        acquire_as(&mut con, "bin", 60_000, token),
        Some((token.to_vec(), fence))
    );
    assert_eq!(extend(&mut con, "bin", token, 60_000), 1);
    assert_eq!(release(&mut con, "bin", token), 1);
    assert!(!exists(&mut con, "bin"));
}

#[test]
fn a_caller_token_may_be_one_to_256_bytes() {
    let server = TestServer::start();
    let mut con = server.connection();
    for len in [1usize, 2, 32, 255, 256] {
        let token: Vec<u8> = (0..len).map(|i| (i * 7 % 256) as u8).collect();
        let key = format!("len:{len}");
        let (granted, _) = acquire_as(&mut con, &key, 60_000, &token).expect("granted");
        assert_eq!(granted, token, "length {len}");
        assert_eq!(extend(&mut con, &key, &token, 60_000), 1, "length {len}");
        assert_eq!(release(&mut con, &key, &token), 1, "length {len}");
    }
}

#[test]
fn the_reply_is_the_token_and_a_positive_fence_below_two_to_the_53() {
    let server = TestServer::start();
    for mut con in [server.connection(), server.connection_resp3()] {
        for token in [None, Some("caller-token")] {
            let mut cmd = redis::cmd("LOCK.ACQUIRE");
            cmd.arg("shape").arg(60_000);
            if let Some(token) = token {
                cmd.arg("TOKEN").arg(token);
            }
            let reply: Value = cmd.query(&mut con).unwrap();
            let Value::Array(items) = reply else {
                panic!("expected an array, got {reply:?}");
            };
            let [Value::BulkString(granted), Value::Int(fence)] = items.as_slice() else {
                panic!("expected [bulk token, integer fence], got {items:?}");
            };
            if let Some(token) = token {
                assert_eq!(granted.as_slice(), token.as_bytes());
            }
            assert!(*fence > 0 && *fence < TWO_TO_THE_53, "fence {fence}");
            assert_eq!(release(&mut con, "shape", granted), 1);
        }
    }
}

#[test]
fn a_lock_held_by_another_token_answers_nil_and_stays_as_it_is() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (token, fence) = acquire(&mut con, "busy", 60_000, &[]).expect("granted");
    let before = dump(&mut con, "busy");
    let ttl_before = pttl(&mut con, "busy");

    assert_eq!(acquire(&mut con, "busy", 120_000, &[]), None);
    assert_eq!(acquire_as(&mut con, "busy", 120_000, b"someone-else"), None);
    let mut other = server.connection();
    assert_eq!(acquire(&mut other, "busy", 120_000, &[]), None);

    assert_eq!(dump(&mut con, "busy"), before);
    assert_eq!(info_field(&mut con, "busy", "fence"), Some(fence));
    let ttl_after = pttl(&mut con, "busy");
    assert!(ttl_after <= ttl_before && ttl_after > 0, "{ttl_after}");
    assert_eq!(release(&mut con, "busy", &token), 1);
}

#[test]
fn a_reacquire_by_the_holder_returns_the_same_token_and_fence_and_resets_the_ttl() {
    let server = TestServer::start();
    let mut con = server.connection();
    for caller_token in [None, Some(b"holder".to_vec())] {
        let (token, fence) = match &caller_token {
            Some(token) => acquire_as(&mut con, "again", 5_000, token),
            None => acquire(&mut con, "again", 5_000, &[]),
        }
        .expect("granted");
        let acquired = info_field(&mut con, "again", "acquired").expect("info");
        // Let the server's clock move on, so a reset `acquired` would show.
        poll_until(Duration::from_secs(5), "server clock moves on", || {
            server_now_ms(&mut con) > acquired + 20
        });

        // A longer TTL.
        assert_eq!(
            acquire_as(&mut con, "again", 600_000, &token),
            Some((token.clone(), fence))
        );
        let ttl = pttl(&mut con, "again");
        assert!(ttl > 500_000 && ttl <= 600_000, "PTTL {ttl}");

        // A shorter TTL: reset, not only raised.
        assert_eq!(
            acquire_as(&mut con, "again", 2_000, &token),
            Some((token.clone(), fence))
        );
        let ttl = pttl(&mut con, "again");
        assert!(ttl > 0 && ttl <= 2_000, "PTTL {ttl}");

        assert_eq!(info_field(&mut con, "again", "acquired"), Some(acquired));
        assert_eq!(info_field(&mut con, "again", "fence"), Some(fence));
        assert_eq!(release(&mut con, "again", &token), 1);
    }
}

#[test]
fn release_answers_1_only_for_the_token_that_holds_the_lock() {
    let server = TestServer::start();
    let mut con = server.connection();
    assert_eq!(release(&mut con, "rel", b"nobody"), 0);
    assert!(
        !exists(&mut con, "rel"),
        "a release must not create the key"
    );

    let (token, fence) = acquire(&mut con, "rel", 60_000, &[]).expect("granted");
    let before = dump(&mut con, "rel");
    assert_eq!(release(&mut con, "rel", b"wrong-token"), 0);
    let mut upper = token.clone();
    upper.make_ascii_uppercase();
    assert_eq!(release(&mut con, "rel", &upper), 0);
    assert_eq!(dump(&mut con, "rel"), before);
    assert_eq!(info_field(&mut con, "rel", "fence"), Some(fence));

    assert_eq!(release(&mut con, "rel", &token), 1);
    assert!(!exists(&mut con, "rel"));
    assert_eq!(release(&mut con, "rel", &token), 0);
}

#[test]
fn release_after_expiry_answers_0() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (token, _) = acquire(&mut con, "short", 50, &[]).expect("granted");
    poll_until(Duration::from_secs(10), "lock expires", || {
        pttl(&mut con, "short") == -2
    });
    assert_eq!(release(&mut con, "short", &token), 0);
    assert_eq!(extend(&mut con, "short", &token, 60_000), 0);
    assert!(!exists(&mut con, "short"), "nothing may revive the lock");
}

#[test]
fn extend_answers_1_for_the_holder_and_sets_the_remaining_time() {
    let server = TestServer::start();
    let mut con = server.connection();
    assert_eq!(extend(&mut con, "ext", b"nobody", 60_000), 0);
    assert!(
        !exists(&mut con, "ext"),
        "an extend must not create the key"
    );

    let (token, fence) = acquire(&mut con, "ext", 10_000, &[]).expect("granted");
    let acquired = info_field(&mut con, "ext", "acquired");

    assert_eq!(extend(&mut con, "ext", &token, 900_000), 1);
    let ttl = pttl(&mut con, "ext");
    assert!(ttl > 800_000 && ttl <= 900_000, "PTTL {ttl}");

    // Shorter than what is left: the TTL is set, not only raised.
    assert_eq!(extend(&mut con, "ext", &token, 3_000), 1);
    let ttl = pttl(&mut con, "ext");
    assert!(ttl > 0 && ttl <= 3_000, "PTTL {ttl}");

    // Another token changes nothing.
    assert_eq!(extend(&mut con, "ext", b"intruder", 900_000), 0);
    let ttl = pttl(&mut con, "ext");
    assert!(ttl > 0 && ttl <= 3_000, "PTTL {ttl}");

    // Extending is not a new grant.
    assert_eq!(info_field(&mut con, "ext", "fence"), Some(fence));
    assert_eq!(info_field(&mut con, "ext", "acquired"), acquired);
    assert_eq!(release(&mut con, "ext", &token), 1);
}

#[test]
fn after_a_release_the_next_grant_gets_a_larger_fence() {
    let server = TestServer::start();
    let mut con = server.connection();
    let mut last = 0;
    for round in 0..50 {
        let (token, fence) = if round % 2 == 0 {
            acquire(&mut con, "fenced", 60_000, &[])
        } else {
            acquire_as(&mut con, "fenced", 60_000, format!("t{round}").as_bytes())
        }
        .expect("granted");
        assert!(fence > last, "round {round}: fence {fence} after {last}");
        assert!(fence < TWO_TO_THE_53);
        last = fence;
        assert_eq!(release(&mut con, "fenced", &token), 1);
    }
}

#[test]
fn lock_info_in_resp2_is_a_flat_array_of_bulk_string_names_and_integers() {
    let server = TestServer::start();
    let mut con = server.connection();
    let before = server_now_ms(&mut con);
    let (token, fence) = acquire(&mut con, "inf", 60_000, &[]).expect("granted");
    let after = server_now_ms(&mut con);

    let reply: Value = redis::cmd("LOCK.INFO").arg("inf").query(&mut con).unwrap();
    let Value::Array(items) = reply else {
        panic!("expected a flat array in RESP2, got {reply:?}");
    };
    assert!(items.len() >= 8 && items.len() % 2 == 0, "{items:?}");
    let mut fields = Vec::new();
    for pair in items.chunks(2) {
        let [Value::BulkString(name), value] = pair else {
            panic!("field names must be bulk strings: {pair:?}");
        };
        fields.push((String::from_utf8(name.clone()).unwrap(), value.clone()));
    }
    let field = |name: &str| match fields.iter().find(|(n, _)| n == name) {
        Some((_, Value::Int(v))) => *v,
        other => panic!("field {name}: expected an integer, got {other:?}"),
    };
    let ttl = field("ttl");
    assert!(ttl > 0 && ttl <= 60_000, "ttl {ttl}");
    assert_eq!(field("fence"), fence);
    let acquired = field("acquired");
    assert!(
        acquired >= before && acquired <= after,
        "acquired {acquired} not in [{before}, {after}]"
    );
    assert_eq!(field("waiters"), 0);
    assert_eq!(release(&mut con, "inf", &token), 1);
}

#[test]
fn lock_info_in_resp3_is_a_map() {
    let server = TestServer::start();
    let mut con = server.connection_resp3();
    let (token, fence) = acquire(&mut con, "inf3", 60_000, &[]).expect("granted");
    let reply: Value = redis::cmd("LOCK.INFO").arg("inf3").query(&mut con).unwrap();
    let Value::Map(pairs) = reply else {
        panic!("expected a map in RESP3, got {reply:?}");
    };
    let mut names = Vec::new();
    for (name, value) in &pairs {
        let Value::BulkString(name) = name else {
            panic!("field names must be bulk strings: {name:?}");
        };
        let name = String::from_utf8(name.clone()).unwrap();
        if name == "mode" {
            assert_eq!(value, &Value::BulkString(b"exclusive".to_vec()));
            names.push(name);
            continue;
        }
        if name == "value" {
            assert_eq!(value, &Value::Nil, "no VALUE given");
            names.push(name);
            continue;
        }
        let Value::Int(value) = value else {
            panic!("field {name}: expected an integer, got {value:?}");
        };
        match name.as_str() {
            "ttl" => assert!(*value > 0 && *value <= 60_000, "ttl {value}"),
            "fence" => assert_eq!(*value, fence),
            "acquired" => assert!(*value > 0),
            "waiters" => assert_eq!(*value, 0),
            _ => {}
        }
        names.push(name);
    }
    for expected in [
        "ttl", "fence", "acquired", "waiters", "mode", "holders", "limit",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} in {names:?}"
        );
    }
    assert_eq!(release(&mut con, "inf3", &token), 1);
}

#[test]
fn lock_info_on_a_missing_key_is_nil() {
    let server = TestServer::start();
    for mut con in [server.connection(), server.connection_resp3()] {
        let reply: Value = redis::cmd("LOCK.INFO")
            .arg("nothing")
            .query(&mut con)
            .unwrap();
        assert_eq!(reply, Value::Nil);
        assert!(!exists(&mut con, "nothing"));
    }
}

#[test]
fn lock_info_never_contains_the_token() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (made, _) = acquire(&mut con, "secret:made", 60_000, &[]).expect("granted");
    let given = b"tok-\x00given-SECRET-7f3a".to_vec();
    acquire_as(&mut con, "secret:given", 60_000, &given).expect("granted");

    for (key, token) in [("secret:made", &made), ("secret:given", &given)] {
        let resp2 = raw_replies(server.port, &[vec![b"LOCK.INFO", key.as_bytes()]]);
        let resp3 = raw_replies(
            server.port,
            &[vec![b"HELLO", b"3"], vec![b"LOCK.INFO", key.as_bytes()]],
        );
        for (protocol, raw) in [("RESP2", resp2), ("RESP3", resp3)] {
            assert!(
                contains(&raw, b"fence"),
                "{protocol}: not a LOCK.INFO reply: {}",
                String::from_utf8_lossy(&raw)
            );
            assert_no_token_in(&format!("{protocol}: LOCK.INFO {key}"), &raw, &[token]);
        }
    }
}

#[test]
fn options_come_in_any_order_and_their_names_are_case_insensitive() {
    let server = TestServer::start();
    let mut con = server.connection();
    let cases: [&[&str]; 6] = [
        &["token", "t-1"],
        &["ToKeN", "t-2", "WAIT", "100"],
        &["WAIT", "100", "TOKEN", "t-3"],
        &["wait", "0", "tOKEN", "t-4"],
        &["Wait", "100"],
        &["TOKEN", "t-6", "wait", "5"],
    ];
    for (i, options) in cases.iter().enumerate() {
        let key = format!("opts:{i}");
        let (token, fence) = acquire(&mut con, &key, 60_000, options)
            .unwrap_or_else(|| panic!("{options:?} should grant a free lock"));
        let given = options
            .iter()
            .position(|o| o.eq_ignore_ascii_case("token"))
            .map(|at| options[at + 1]);
        match given {
            Some(given) => assert_eq!(token, given.as_bytes(), "{options:?}"),
            None => assert!(token.len() == 32 && is_lower_hex(&token), "{options:?}"),
        }
        let ttl = pttl(&mut con, &key);
        assert!(ttl > 0 && ttl <= 60_000, "{options:?}: PTTL {ttl}");
        // The holder renews, whatever the spelling.
        let token_text = String::from_utf8(token.clone()).unwrap();
        assert_eq!(
            acquire(&mut con, &key, 60_000, &["tokeN", &token_text]),
            Some((token, fence)),
            "{options:?}"
        );
    }
    // The command name itself is case-insensitive, as for any command.
    let reply: Option<(Vec<u8>, i64)> = redis::cmd("lock.Acquire")
        .arg("opts:lower")
        .arg(1_000)
        .query(&mut con)
        .unwrap();
    assert!(reply.is_some());
}

#[test]
fn wait_inside_multi_exec_answers_nil_at_once_when_the_lock_is_busy() {
    let server = TestServer::start();
    let mut holder = server.connection();
    let (token, fence) = acquire(&mut holder, "tx", 60_000, &[]).expect("granted");

    let mut con = server.connection();
    // If WAIT blocked inside EXEC, WAIT 0 would never answer: the read timeout fails the test.
    con.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let started = Instant::now();
    let replies: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIRE")
        .arg("tx")
        .arg(1_000)
        .arg("TOKEN")
        .arg("other")
        .arg("WAIT")
        .arg(0)
        .cmd("LOCK.ACQUIRE")
        .arg("tx")
        .arg(1_000)
        .arg("WAIT")
        .arg(60_000)
        .cmd("LOCK.ACQUIRE")
        .arg("tx:free")
        .arg(60_000)
        .arg("WAIT")
        .arg(0)
        .query(&mut con)
        .expect("EXEC answers");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(replies[0], Value::Nil);
    assert_eq!(replies[1], Value::Nil);
    assert!(
        matches!(&replies[2], Value::Array(items) if items.len() == 2),
        "a free lock is granted inside EXEC: {:?}",
        replies[2]
    );
    assert_eq!(info_field(&mut con, "tx", "fence"), Some(fence));
    assert_eq!(release(&mut holder, "tx", &token), 1);
}

#[test]
fn wait_inside_a_script_answers_nil_at_once_when_the_lock_is_busy() {
    let server = TestServer::start();
    let mut holder = server.connection();
    let (token, fence) = acquire(&mut holder, "lua", 60_000, &[]).expect("granted");

    let mut con = server.connection();
    con.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let script =
        "return redis.call('LOCK.ACQUIRE', KEYS[1], ARGV[1], 'TOKEN', ARGV[2], 'WAIT', ARGV[3])";
    let started = Instant::now();
    let busy: Value = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("lua")
        .arg(1_000)
        .arg("other")
        .arg(0)
        .query(&mut con)
        .expect("EVAL answers");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(busy, Value::Nil);
    assert_eq!(info_field(&mut con, "lua", "fence"), Some(fence));

    let free: Value = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("lua:free")
        .arg(60_000)
        .arg("mine")
        .arg(0)
        .query(&mut con)
        .expect("EVAL answers");
    let Value::Array(items) = free else {
        panic!("a free lock is granted inside a script: {free:?}");
    };
    assert_eq!(items[0], Value::BulkString(b"mine".to_vec()));
    assert_eq!(release(&mut holder, "lua", &token), 1);
}
