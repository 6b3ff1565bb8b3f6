//! `RESTORE` of mutated lock payloads with valid checksums: whatever the bytes, the
//! server never crashes, and a payload the module accepts holds a lock within the
//! contract (fence 1..2^53, grant time >= 0, a token, a grace in range or none).
//!
//! Only the module's part of a payload is mutated (after the type and module id, before
//! the RDB version and checksum): the server's own types have their own sanitizer
//! (`sanitize-dump-payload`), which is not this module's to test. The payloads come from
//! real `DUMP`s of a plain and a session-bound lock and of shared holders; each case flips, overwrites, drops or
//! inserts a few bytes, or changes the encoding version. `RESTORE_FUZZ_CASES` sets the
//! count (default 1,500 per server), `RESTORE_FUZZ_SEED` replays a run; the seed is
//! printed.

use crate::common::*;

/// The fields of `LOCK.INFO` that loaded data decides, with their allowed range.
const RANGES: [(&str, i64, i64); 5] = [
    ("fence", 1, (1 << 53) - 1),
    ("acquired", 0, (1 << 53) - 1),
    ("session", -1, (1 << 53) - 1),
    ("holders", 1, 1_000_000),
    ("limit", -1, 1_000_000),
];

/// `LOCK.INFO` as field/value pairs.
type Fields = InfoFields;

/// A number below `n`.
fn pick(rng: &mut Rng, n: usize) -> usize {
    rng.below(n as u64) as usize
}

/// `payload` with its module part mutated by `rng`, and a valid checksum.
fn mutate(payload: &[u8], rng: &mut Rng) -> Vec<u8> {
    const HEADER: usize = 10;
    let trailer = payload.len() - 10;
    let (head, tail) = (&payload[..HEADER], &payload[trailer..trailer + 2]);
    let mut body = payload[HEADER..trailer].to_vec();
    let mut head = head.to_vec();
    for _ in 0..1 + pick(rng, 3) {
        match pick(rng, 6) {
            0 if !body.is_empty() => {
                let at = pick(rng, body.len());
                body[at] ^= 1 << pick(rng, 8);
            }
            1 if !body.is_empty() => {
                let at = pick(rng, body.len());
                body[at] = rng.next() as u8;
            }
            2 if !body.is_empty() => {
                body.remove(pick(rng, body.len()));
            }
            3 => {
                let at = pick(rng, body.len() + 1);
                body.insert(at, rng.next() as u8);
            }
            4 => {
                // The encoding version: the low 10 bits of the module id.
                head[9] = (head[9] & !3) | (pick(rng, 4) as u8);
            }
            _ => {
                let keep = pick(rng, body.len() + 1);
                body.truncate(keep);
            }
        }
    }
    let mut out = [head.as_slice(), &body, tail].concat();
    let crc = crc64(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

#[test]
fn mutated_payloads_never_crash_the_server_and_never_load_out_of_range() {
    let cases: usize = std::env::var("RESTORE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_500);
    let seed: u64 = std::env::var("RESTORE_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| now_ms() as u64 | 1);
    println!("restore fuzz: {cases} cases, RESTORE_FUZZ_SEED={seed}");
    let mut rng = Rng(seed);

    let server = TestServer::start();
    let mut con = server.connection();
    acquire(&mut con, "plain", 60_000, &["TOKEN", "a-token"]).expect("granted");
    acquire(
        &mut con,
        "bound",
        60_000,
        &["TOKEN", "b-token", "SESSION", "250"],
    )
    .expect("granted");
    for (token, extra) in [("r-1", "250"), ("r-2", "-")] {
        let mut args = vec!["LIMIT", "3", "TOKEN", token];
        if extra != "-" {
            args.extend(["SESSION", extra]);
        }
        acquire(&mut con, "shared", 60_000, &args).expect("granted");
    }
    let templates = [
        dump(&mut con, "plain").expect("DUMP"),
        dump(&mut con, "bound").expect("DUMP"),
        dump(&mut con, "shared").expect("DUMP"),
    ];
    let mut loaded = 0;
    for case in 0..cases {
        let payload = mutate(&templates[case % templates.len()], &mut rng);
        let key = format!("case:{case}");
        // RESTORE and LOCK.INFO in one transaction: a session-bound lock restored with a
        // short grace may rightly be released by the next turn of the event loop.
        let restored: redis::RedisResult<((), Option<Fields>)> = redis::pipe()
            .atomic()
            .cmd("RESTORE")
            .arg(&key)
            .arg(60_000)
            .arg(&payload)
            .cmd("LOCK.INFO")
            .arg(&key)
            .query(&mut con);
        let fields = match restored {
            Err(_) => {
                assert!(
                    !exists(&mut con, &key),
                    "seed {seed} case {case}: refused yet created"
                );
                continue;
            }
            Ok((_, fields)) => fields.unwrap_or_else(|| {
                panic!("seed {seed} case {case}: a restored lock that LOCK.INFO cannot read")
            }),
        };
        loaded += 1;
        for (name, low, high) in RANGES {
            let value = fields
                .get(name)
                .unwrap_or_else(|| panic!("seed {seed} case {case}: no {name}"));
            assert!(
                (low..=high).contains(&value),
                "seed {seed} case {case}: {name} {value} loaded from {payload:?}"
            );
        }
        let _: i64 = redis::cmd("DEL").arg(&key).query(&mut con).unwrap();
    }
    // Alive, and still granting fences below 2^53.
    ping(&mut con);
    let (_, fence) = acquire(&mut con, "after", 1000, &[]).expect("granted");
    assert!(fence < 1 << 53);
    println!("restore fuzz: {loaded} of {cases} mutated payloads loaded, all in range");
}
