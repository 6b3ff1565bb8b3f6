//! `LOCK.DO` with random inner commands (docs/commands.md, `LOCK.DO`): every command the
//! server lists, in random case, and made-up names (empty, binary, huge), with random
//! arguments (none to a few, or thousands; binary; empty; up to 64 KB), under a token
//! that holds the lock or one that does not. Whatever comes in, the server answers
//! (a reply or an error) and never crashes; a token that does not hold the lock runs
//! nothing (the data's digest is unchanged). `LOCK_DO_FUZZ_CASES` sets the count (default
//! 2,000 per server), `LOCK_DO_FUZZ_SEED` replays a run; the seed is printed.
//!
//! Left out of the names: commands that reach other servers or run for long whatever
//! their arguments (`MIGRATE`, `PFSELFTEST`), and `DEBUG` and `SHUTDOWN` (refused inside
//! `LOCK.DO` anyway, as in a script).

use crate::common::*;

const LEFT_OUT: [&str; 4] = ["migrate", "pfselftest", "debug", "shutdown"];

fn pick(rng: &mut Rng, n: usize) -> usize {
    rng.below(n as u64) as usize
}

fn random_bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.next() as u8).collect()
}

/// An argument: a small word a command may know, a number, a key of the test, or bytes.
fn argument(rng: &mut Rng) -> Vec<u8> {
    const WORDS: [&str; 12] = [
        "k",
        "data",
        "0",
        "1",
        "-1",
        "10",
        "NX",
        "XX",
        "PX",
        "WITHSCORES",
        "*",
        "LIMIT",
    ];
    match pick(rng, 6) {
        0 | 1 => WORDS[pick(rng, WORDS.len())].as_bytes().to_vec(),
        2 => (rng.next() as i64 % 1000).to_string().into_bytes(),
        3 => {
            let len = pick(rng, 16);
            random_bytes(rng, len)
        }
        4 => format!("data:{}", pick(rng, 8)).into_bytes(),
        _ => {
            let len = if pick(rng, 20) == 0 {
                65_536
            } else {
                pick(rng, 64)
            };
            random_bytes(rng, len)
        }
    }
}

/// A command name: a real one in random case, or a made-up one.
fn name(rng: &mut Rng, known: &[String]) -> Vec<u8> {
    match pick(rng, 10) {
        0 => {
            let len = pick(rng, 12);
            random_bytes(rng, len)
        }
        1 => b"lock.do".to_vec(),
        2 if pick(rng, 4) == 0 => vec![b'x'; 100_000],
        _ => known[pick(rng, known.len())]
            .bytes()
            .map(|b| {
                if rng.next() & 1 == 0 {
                    b.to_ascii_uppercase()
                } else {
                    b
                }
            })
            .collect(),
    }
}

/// `k` held by the token `holder`, whatever the last case left there.
fn hold(con: &mut redis::Connection) {
    let acquire = redis::cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg(600_000)
        .arg("TOKEN")
        .arg("holder")
        .clone();
    let granted: redis::RedisResult<Option<(Vec<u8>, i64)>> = acquire.query(con);
    if !matches!(granted, Ok(Some(_))) {
        let _: i64 = redis::cmd("DEL").arg("k").query(con).unwrap();
        let granted: Option<(Vec<u8>, i64)> = acquire.query(con).unwrap();
        assert!(granted.is_some(), "k is held again");
    }
}

#[test]
fn random_inner_commands_never_crash_the_server_and_run_only_for_the_holder() {
    // Every command gets a reply: one that never comes fails the case (it hung the suite
    // once: a failed GETDEL lost its reply on Valkey 8.1 and later).
    let connect = |server: &TestServer| {
        let con = server.connection();
        con.set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .expect("read timeout");
        con
    };
    let cases: usize = std::env::var("LOCK_DO_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let seed: u64 = std::env::var("LOCK_DO_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| now_ms() as u64 | 1);
    println!("LOCK.DO fuzz: {cases} cases, LOCK_DO_FUZZ_SEED={seed}");
    let mut rng = Rng(seed);
    let server = TestServer::start();
    let mut con = connect(&server);
    let mut known: Vec<String> = redis::cmd("COMMAND")
        .arg("LIST")
        .query(&mut con)
        .expect("COMMAND LIST");
    known.retain(|name| !LEFT_OUT.contains(&name.to_ascii_lowercase().as_str()));
    // In a fixed order: the server lists its commands in its table's order, which
    // differs from one start to the next, and a seed must replay the same cases.
    known.sort();
    // Keys change only by what the cases run, not by the background expiry.
    let _: () = redis::cmd("DEBUG")
        .arg("SET-ACTIVE-EXPIRE")
        .arg(0)
        .query(&mut con)
        .expect("DEBUG SET-ACTIVE-EXPIRE");
    let mut refused_ran = 0;
    for case in 0..cases {
        // The lock may have been deleted, overwritten or renamed by the last case.
        hold(&mut con);
        let holds = pick(&mut rng, 4) != 0;
        let token: &[u8] = if holds { b"holder" } else { b"stranger" };
        let mut cmd = redis::cmd("LOCK.DO");
        cmd.arg("k").arg(token).arg(name(&mut rng, &known));
        let count = match pick(&mut rng, 30) {
            0 => 3_000,
            n => n % 6,
        };
        for _ in 0..count {
            cmd.arg(argument(&mut rng));
        }
        let before = if holds {
            None
        } else {
            let digest: String = redis::cmd("DEBUG").arg("DIGEST").query(&mut con).unwrap();
            Some(digest)
        };
        let reply: redis::RedisResult<redis::Value> = cmd.query(&mut con);
        if let Err(err) = &reply
            && err.is_timeout()
        {
            let sent = cmd.get_packed_command();
            let shown = String::from_utf8_lossy(&sent[..sent.len().min(200)]);
            panic!("seed {seed} case {case}: no reply to {shown:?}");
        }
        if let Err(err) = &reply
            && err.code().is_none()
        {
            // Not a server error the client could read (an error text with the bytes of a
            // made-up command name in it, which this client cannot parse): the server
            // must still be there; a new connection goes on.
            con = connect(&server);
            ping(&mut con);
        }
        if let Some(before) = before {
            let after: String = redis::cmd("DEBUG").arg("DIGEST").query(&mut con).unwrap();
            if after != before {
                refused_ran += 1;
            }
            let message = match &reply {
                // Unreadable, but the digest above proves nothing ran.
                Err(err) if err.code().is_none() => continue,
                _ => error_of(reply),
            };
            assert!(
                message.starts_with("NOTHELD")
                    || message.starts_with("ERR")
                    || message.starts_with("WRONGTYPE"),
                "seed {seed} case {case}: a stranger got {message}"
            );
        }
        // Back to database 0 and RESP2, whatever the command did to the connection.
        let _: redis::RedisResult<()> = redis::cmd("SELECT").arg(0).query(&mut con);
    }
    assert_eq!(
        refused_ran, 0,
        "seed {seed}: a token that did not hold the lock ran a command"
    );
    ping(&mut con);
    let modules = loaded_modules(&mut con);
    assert!(
        modules.iter().any(|m| m == "lock"),
        "the module is still loaded: {modules:?}"
    );
    hold(&mut con);
    let ok: String = redis::cmd("LOCK.DO")
        .arg("k")
        .arg("holder")
        .arg("SET")
        .arg("after")
        .arg("1")
        .query(&mut con)
        .unwrap();
    assert_eq!(ok, "OK");
}
