//! The soak runs end to end in its smoke mode (twenty thousand locks over two seconds,
//! two hundred waiters), so that `make test` keeps it from rotting: the server stays up,
//! every lock expires, every waiter is answered as it asked, and the report is written.
//! Memory and pauses are judged by the full run (`make soak`) only.

use redis_lock_bench::soak::{self, Config, Kind, report};

#[test]
fn a_smoke_soak_expires_every_lock_and_answers_every_waiter() {
    let out = std::env::temp_dir().join(format!("redis-lock-soak-smoke-{}", std::process::id()));
    let cfg = Config::smoke(redis_lock_testkit::module_path(), out);
    let locks = soak::run_side(&cfg, Kind::Locks).expect("the soak's locks side");
    let strings = soak::run_side(&cfg, Kind::Strings).expect("the soak's strings side");

    assert!(
        locks.expired >= cfg.locks as i64,
        "lock_expired {}",
        locks.expired
    );
    assert_eq!(strings.expired, cfg.locks as i64, "expired_keys");
    let waiters = cfg.waiter_keys * cfg.waiters_per_key;
    assert_eq!(locks.waiters, waiters);
    assert_eq!(locks.answers.wrong, 0, "{:?}", locks.answers);
    assert_eq!(locks.answers.gave_up, waiters / 10, "{:?}", locks.answers);
    assert_eq!(
        locks.answers.granted,
        waiters - waiters / 10,
        "{:?}",
        locks.answers
    );
    assert!(!locks.samples.is_empty() && !strings.samples.is_empty());
    assert!(report::passed(&cfg, &locks, &strings));
    let text = report::markdown(&cfg, "the server under test", &locks, &strings);
    assert!(text.contains("| waiters answered (10 keys) |"), "{text}");
    assert!(report::csv(&[&locks, &strings]).lines().count() > 2);
}
