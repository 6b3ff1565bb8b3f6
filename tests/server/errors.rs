//! Bad input and keys of other types (docs/commands.md, "Errors"): every error names what was
//! wrong, starts with its code, and changes nothing — checked after every single case on
//! a held lock, an absent key and keys of other types.

use std::time::Duration;

use crate::common::*;

/// The lock every bad command is aimed at, with its holder's token: a command that
/// acted despite the error would renew, extend or release it visibly.
const HELD: &str = "held";
const HOLDER: &str = "holder-token";
const HELD_TTL_MS: i64 = 1_000_000;
/// A key that must stay absent.
const ABSENT: &str = "absent";
/// Keys of other types that must stay intact.
const STRING: &str = "plain-string";
const LIST: &str = "plain-list";
const HASH: &str = "plain-hash";

/// 2^53 - 1 ms, the largest `ttl-ms` and `timeout-ms`.
const MAX_MS: &str = "9007199254740991";
/// 2^53 ms, one too many.
const TOO_MANY_MS: &str = "9007199254740992";

/// The state every case must leave as it found it.
struct World {
    dump: Vec<u8>,
    fence: i64,
    acquired: i64,
    pttl: i64,
}

fn setup(con: &mut redis::Connection) -> World {
    let (token, fence) =
        acquire(con, HELD, HELD_TTL_MS as u64, &["TOKEN", HOLDER]).expect("granted");
    assert_eq!(token, HOLDER.as_bytes());
    let () = redis::cmd("SET")
        .arg(STRING)
        .arg("text")
        .query(con)
        .unwrap();
    let _: i64 = redis::cmd("RPUSH")
        .arg(LIST)
        .arg("a")
        .arg("b")
        .query(con)
        .unwrap();
    let _: i64 = redis::cmd("HSET")
        .arg(HASH)
        .arg("f")
        .arg("v")
        .query(con)
        .unwrap();
    World {
        dump: dump(con, HELD).expect("the held lock"),
        fence,
        acquired: info_field(con, HELD, "acquired").expect("info"),
        pttl: pttl(con, HELD),
    }
}

/// A fresh server with the keys `setup` makes, a connection to it, and their state.
fn start_world() -> (TestServer, redis::Connection, World) {
    let server = TestServer::start();
    let mut con = server.connection();
    let world = setup(&mut con);
    (server, con, world)
}

/// Fails unless every key is exactly as `setup` left it.
fn assert_unchanged(con: &mut redis::Connection, world: &World, case: &str) {
    assert_eq!(
        dump(con, HELD).as_ref(),
        Some(&world.dump),
        "{case}: the held lock's token/fence/grant time changed"
    );
    assert_eq!(
        info_field(con, HELD, "fence"),
        Some(world.fence),
        "{case}: fence"
    );
    assert_eq!(
        info_field(con, HELD, "acquired"),
        Some(world.acquired),
        "{case}: acquired"
    );
    // The TTL only counts down (generous margin for a loaded machine).
    let pttl = pttl(con, HELD);
    assert!(
        pttl <= world.pttl && pttl > world.pttl - 120_000,
        "{case}: PTTL of the held lock went from {} to {pttl}",
        world.pttl
    );
    assert!(!exists(con, ABSENT), "{case}: the absent key was created");
    let text: Option<String> = redis::cmd("GET").arg(STRING).query(con).unwrap();
    assert_eq!(text.as_deref(), Some("text"), "{case}: the string changed");
    let string_ttl: i64 = redis::cmd("PTTL").arg(STRING).query(con).unwrap();
    assert_eq!(string_ttl, -1, "{case}: the string got an expiry");
    let list: Vec<String> = redis::cmd("LRANGE")
        .arg(LIST)
        .arg(0)
        .arg(-1)
        .query(con)
        .unwrap();
    assert_eq!(list, ["a", "b"], "{case}: the list changed");
    let hash: Vec<String> = redis::cmd("HGETALL").arg(HASH).query(con).unwrap();
    assert_eq!(hash, ["f", "v"], "{case}: the hash changed");
    assert_eq!(dbsize(con), 4, "{case}: keys were added or removed");
}

fn show(argv: &[Vec<u8>]) -> String {
    argv.iter()
        .map(|a| {
            let text = String::from_utf8_lossy(a);
            if text.len() > 24 {
                format!("<{} bytes>", a.len())
            } else {
                format!("{text:?}")
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn argv(parts: &[&[u8]]) -> Vec<Vec<u8>> {
    parts.iter().map(|p| p.to_vec()).collect()
}

/// Runs `argv` and checks that it fails with an error starting with one of `codes`
/// (`"ERR "`, `"WRONGTYPE "`) and that nothing changed; returns the error text.
fn expect_error(
    con: &mut redis::Connection,
    world: &World,
    argv: &[Vec<u8>],
    codes: &[&str],
) -> String {
    let case = show(argv);
    let err = error_of_command(con, argv);
    assert!(
        codes.iter().any(|code| err.starts_with(code)),
        "{case}: expected {codes:?}, got {err}"
    );
    assert_unchanged(con, world, &case);
    err
}

/// Runs `argv` and checks that it fails with an `ERR` naming `names` (one of them, as a
/// substring, case-sensitive) and that nothing changed.
fn expect_err(
    con: &mut redis::Connection,
    world: &World,
    argv: &[Vec<u8>],
    names: &[&str],
) -> String {
    let err = expect_error(con, world, argv, &["ERR "]);
    assert!(
        names.iter().any(|name| err.contains(name)),
        "{}: the error should name {names:?}: {err}",
        show(argv)
    );
    err
}

/// Runs `argv` on a key of another type: an error (ERR for the bad argument, or
/// WRONGTYPE), and the key intact.
fn expect_err_on_other_type(con: &mut redis::Connection, world: &World, argv: &[Vec<u8>]) {
    expect_error(con, world, argv, &["ERR ", "WRONGTYPE "]);
}

/// For every value in `bads`: each of `cases(key, bad)` on the held lock and on the
/// absent key fails with an `ERR` naming `name`, each of `other_type_cases(key, bad)` on
/// the keys `other_types` fails too, and nothing changes.
fn expect_bad_values_refused(
    bads: &[&[u8]],
    name: &str,
    cases: impl Fn(&[u8], &[u8]) -> Vec<Vec<Vec<u8>>>,
    other_types: &[&str],
    other_type_cases: impl Fn(&[u8], &[u8]) -> Vec<Vec<Vec<u8>>>,
) {
    let (_server, mut con, world) = start_world();
    for bad in bads {
        for key in [HELD, ABSENT] {
            for case in cases(key.as_bytes(), bad) {
                expect_err(&mut con, &world, &case, &[name]);
            }
        }
        for key in other_types {
            for case in other_type_cases(key.as_bytes(), bad) {
                expect_err_on_other_type(&mut con, &world, &case);
            }
        }
    }
}

/// Each of `cases(key)`, on the held lock and on the absent key, fails with an `ERR`
/// naming one of the case's options quoted as given (`'Foo'`), and nothing changes.
fn expect_options_named_as_given<const N: usize>(
    cases: impl Fn(&[u8]) -> Vec<(Vec<Vec<u8>>, [&'static str; N])>,
) {
    let (_server, mut con, world) = start_world();
    for key in [HELD, ABSENT] {
        for (case, options) in cases(key.as_bytes()) {
            let quoted = options.map(|option| format!("'{option}'"));
            let names: Vec<&str> = quoted.iter().map(String::as_str).collect();
            expect_err(&mut con, &world, &case, &names);
        }
    }
}

/// The server's own arity error for `command`.
fn arity_error(command: &str) -> String {
    format!(
        "ERR wrong number of arguments for '{}' command",
        command.to_lowercase()
    )
}

#[test]
fn every_command_answers_the_servers_arity_error() {
    let (_server, mut con, world) = start_world();
    let h = HELD.as_bytes();
    let t = HOLDER.as_bytes();
    let cases: Vec<Vec<Vec<u8>>> = vec![
        argv(&[b"LOCK.ACQUIRE"]),
        argv(&[b"LOCK.ACQUIRE", h]),
        argv(&[b"LOCK.ACQUIRE", ABSENT.as_bytes()]),
        argv(&[b"LOCK.RELEASE"]),
        argv(&[b"LOCK.RELEASE", h]),
        argv(&[b"LOCK.RELEASE", h, t, b"extra"]),
        argv(&[b"LOCK.EXTEND"]),
        argv(&[b"LOCK.EXTEND", h]),
        argv(&[b"LOCK.EXTEND", h, t]),
        argv(&[b"LOCK.INFO"]),
        argv(&[b"LOCK.INFO", h, b"extra"]),
    ];
    for case in &cases {
        let command = std::str::from_utf8(&case[0]).unwrap();
        let err = expect_err(&mut con, &world, case, &["wrong number of arguments"]);
        assert_eq!(err, arity_error(command), "{}", show(case));
    }
}

/// Values that are not an integer from 1 to 2^53 - 1.
const BAD_TTLS: &[&str] = &[
    "0",
    "-1",
    "-5000",
    TOO_MANY_MS,
    "99999999999999999999",
    "abc",
    "+5",
    " 5",
    "5 ",
    "1.5",
    "1e3",
    "0x10",
    "",
];

#[test]
fn a_bad_ttl_is_an_error_naming_ttl_ms_in_acquire_and_extend() {
    let t = HOLDER.as_bytes();
    let bads: Vec<&[u8]> = BAD_TTLS.iter().map(|bad| bad.as_bytes()).collect();
    expect_bad_values_refused(
        &bads,
        "ttl-ms",
        |k, bad| {
            vec![
                argv(&[b"LOCK.ACQUIRE", k, bad]),
                argv(&[b"LOCK.ACQUIRE", k, bad, b"TOKEN", t]),
                argv(&[b"LOCK.ACQUIRE", k, bad, b"WAIT", b"10"]),
                argv(&[b"LOCK.EXTEND", k, t, bad]),
            ]
        },
        &[STRING, LIST],
        |k, bad| {
            vec![
                argv(&[b"LOCK.ACQUIRE", k, bad]),
                argv(&[b"LOCK.EXTEND", k, t, bad]),
            ]
        },
    );
}

#[test]
fn the_largest_ttl_two_to_the_53_minus_1_is_accepted() {
    let server = TestServer::start();
    let mut con = server.connection();
    let max: i64 = MAX_MS.parse().unwrap();
    let (token, _) = acquire(&mut con, "max", max as u64, &[]).expect("granted");
    let pttl_ms = pttl(&mut con, "max");
    assert!(pttl_ms > max - 600_000 && pttl_ms <= max, "PTTL {pttl_ms}");

    assert_eq!(extend(&mut con, "max", &token, 1_000), 1);
    assert_eq!(extend(&mut con, "max", &token, max), 1);
    let pttl_ms = pttl(&mut con, "max");
    assert!(pttl_ms > max - 600_000 && pttl_ms <= max, "PTTL {pttl_ms}");
    assert_eq!(release(&mut con, "max", &token), 1);
}

#[test]
fn the_smallest_ttl_1_is_accepted_and_the_lock_expires_1_ms_after_its_grant() {
    let server = TestServer::start();
    let mut con = server.connection();
    let mut observer = server.connection();
    // Inside EXEC the server reads the clock once, so the 1 ms lock cannot expire
    // between its grant and the reads of its state.
    type Granted = Option<(Vec<u8>, i64)>;
    type Info = Option<InfoFields>;
    let (granted, info, expire_at): (Granted, Info, i64) = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIRE")
        .arg("min")
        .arg(1)
        .arg("TOKEN")
        .arg("tiny")
        .cmd("LOCK.INFO")
        .arg("min")
        .cmd("PEXPIRETIME")
        .arg("min")
        .query(&mut con)
        .expect("MULTI LOCK.ACQUIRE min 1 ... EXEC");
    let acquired = info
        .expect("the lock exists right after its grant")
        .get("acquired")
        .expect("acquired");
    let (token, fence) = granted.expect("a ttl of 1 ms is accepted");
    assert_eq!(token, b"tiny");
    assert_eq!(expire_at, acquired + 1, "expires 1 ms after its grant");
    // LOCK.EXTEND takes the same smallest ttl.
    let (held, _) = acquire(&mut con, "extended", 60_000, &[]).expect("granted");
    assert_eq!(extend(&mut con, "extended", &held, 1), 1, "a ttl of 1 ms");

    // DBSIZE looks no key up: only the server's own expiry removes the locks.
    poll_until(Duration::from_secs(5), "the 1 ms locks expire", || {
        dbsize(&mut observer) == 0
    });
    assert_eq!(lock_stat(&mut observer, "lock_expired"), 2);
    assert_eq!(release(&mut con, "extended", &held), 0, "expired");
    assert_eq!(release(&mut con, "min", b"tiny"), 0, "expired");
    let (_, next) = acquire(&mut con, "min", 60_000, &["TOKEN", "next"]).expect("free again");
    assert!(next > fence, "{next} after {fence}");
}

#[test]
fn a_bad_timeout_is_an_error_naming_timeout_ms() {
    let t = HOLDER.as_bytes();
    let bads: Vec<&[u8]> = ["-1", "-100", TOO_MANY_MS, "abc", "+1", " 1", "1.5", ""]
        .iter()
        .map(|bad| bad.as_bytes())
        .collect();
    expect_bad_values_refused(
        &bads,
        "timeout-ms",
        |k, bad| {
            vec![
                argv(&[b"LOCK.ACQUIRE", k, b"1000", b"WAIT", bad]),
                argv(&[b"LOCK.ACQUIRE", k, b"1000", b"TOKEN", t, b"WAIT", bad]),
                argv(&[b"LOCK.ACQUIRE", k, b"1000", b"wait", bad, b"TOKEN", t]),
                argv(&[
                    b"LOCK.ACQUIRE",
                    k,
                    b"1000",
                    b"TOKEN",
                    b"other",
                    b"WAIT",
                    bad,
                ]),
            ]
        },
        &[STRING],
        |k, bad| vec![argv(&[b"LOCK.ACQUIRE", k, b"1000", b"WAIT", bad])],
    );
}

#[test]
fn a_timeout_of_0_and_of_two_to_the_53_minus_1_is_accepted() {
    let server = TestServer::start();
    let mut con = server.connection();
    for (key, timeout) in [("wait-zero", "0"), ("wait-max", MAX_MS)] {
        let (token, _) =
            acquire(&mut con, key, 60_000, &["WAIT", timeout]).expect("a free lock is granted");
        assert_eq!(release(&mut con, key, &token), 1);
    }
}

#[test]
fn an_empty_or_over_long_token_is_an_error_naming_token_in_every_command() {
    let long = vec![b'x'; 257];
    // The holder's token, lengthened past the limit: a module that cut it to 256 bytes
    // would be fooled by a caller sending exactly that.
    let mut long_holder = HOLDER.as_bytes().to_vec();
    long_holder.resize(257, b'!');
    expect_bad_values_refused(
        &[b"", &long, &long_holder],
        "token",
        |k, bad| {
            vec![
                argv(&[b"LOCK.ACQUIRE", k, b"1000", b"TOKEN", bad]),
                argv(&[b"LOCK.ACQUIRE", k, b"1000", b"WAIT", b"10", b"token", bad]),
                argv(&[b"LOCK.RELEASE", k, bad]),
                argv(&[b"LOCK.EXTEND", k, bad, b"1000"]),
            ]
        },
        &[STRING, LIST],
        |k, bad| {
            vec![
                argv(&[b"LOCK.ACQUIRE", k, b"1000", b"TOKEN", bad]),
                argv(&[b"LOCK.RELEASE", k, bad]),
                argv(&[b"LOCK.EXTEND", k, bad, b"1000"]),
            ]
        },
    );
}

#[test]
fn an_unknown_option_is_an_error_naming_it_as_given() {
    let t = HOLDER.as_bytes();
    expect_options_named_as_given(|k| {
        vec![
            (argv(&[b"LOCK.ACQUIRE", k, b"1000", b"NX"]), ["NX"]),
            (
                argv(&[b"LOCK.ACQUIRE", k, b"1000", b"Foo", b"bar"]),
                ["Foo"],
            ),
            (
                argv(&[b"LOCK.ACQUIRE", k, b"1000", b"TOKEN", t, b"px", b"5"]),
                ["px"],
            ),
            (
                argv(&[b"LOCK.ACQUIRE", k, b"1000", b"tokens", t]),
                ["tokens"],
            ),
            (
                argv(&[b"LOCK.ACQUIRE", k, b"1000", b"WAITING", b"5"]),
                ["WAITING"],
            ),
            (
                argv(&[b"LOCK.ACQUIRE", k, b"1000", b"WAIT", b"5", b"KeepTTL"]),
                ["KeepTTL"],
            ),
            (argv(&[b"LOCK.EXTEND", k, t, b"5000", b"extra"]), ["extra"]),
            (
                argv(&[b"LOCK.EXTEND", k, t, b"5000", b"REPLICAS", b"1", b"Wait"]),
                ["Wait"],
            ),
        ]
    });
}

#[test]
fn a_repeated_option_is_an_error_naming_it_as_given_in_any_case() {
    let t = HOLDER.as_bytes();
    expect_options_named_as_given(|k| {
        vec![
            (
                argv(&[b"LOCK.ACQUIRE", k, b"1000", b"TOKEN", t, b"TOKEN", t]),
                ["TOKEN", "TOKEN"],
            ),
            (
                argv(&[b"LOCK.ACQUIRE", k, b"1000", b"Token", t, b"tOKEN", b"other"]),
                ["Token", "tOKEN"],
            ),
            (
                argv(&[b"LOCK.ACQUIRE", k, b"1000", b"WAIT", b"1", b"WAIT", b"2"]),
                ["WAIT", "WAIT"],
            ),
            (
                argv(&[
                    b"LOCK.ACQUIRE",
                    k,
                    b"1000",
                    b"wait",
                    b"1",
                    b"TOKEN",
                    t,
                    b"Wait",
                    b"2",
                ]),
                ["wait", "Wait"],
            ),
        ]
    });
}

#[test]
fn an_option_without_its_value_is_an_error_naming_the_option() {
    let t = HOLDER.as_bytes();
    expect_options_named_as_given(|k| {
        vec![
            (argv(&[b"LOCK.ACQUIRE", k, b"1000", b"TOKEN"]), ["TOKEN"]),
            (argv(&[b"LOCK.ACQUIRE", k, b"1000", b"WAIT"]), ["WAIT"]),
            (
                argv(&[b"LOCK.ACQUIRE", k, b"1000", b"TOKEN", t, b"wait"]),
                ["wait"],
            ),
            (
                argv(&[b"LOCK.ACQUIRE", k, b"1000", b"WAIT", b"5", b"Token"]),
                ["Token"],
            ),
        ]
    });
}

#[test]
fn every_command_answers_wrongtype_on_a_key_of_another_type() {
    let (_server, mut con, world) = start_world();
    // WAIT must not block either: a wrong-typed key is an error, not a busy lock.
    con.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    for key in [STRING, LIST, HASH] {
        let k = key.as_bytes();
        for case in [
            argv(&[b"LOCK.ACQUIRE", k, b"1000"]),
            argv(&[b"LOCK.ACQUIRE", k, b"1000", b"TOKEN", b"t"]),
            argv(&[b"LOCK.ACQUIRE", k, b"1000", b"WAIT", b"0"]),
            argv(&[b"LOCK.RELEASE", k, b"t"]),
            argv(&[b"LOCK.EXTEND", k, b"t", b"1000"]),
            argv(&[b"LOCK.INFO", k]),
        ] {
            expect_error(&mut con, &world, &case, &["WRONGTYPE "]);
        }
    }
}
