//! Mutual exclusion under contention: many clients competing for a few locks never hold
//! one at the same time, no grant is lost, and fences grow in grant order.

use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;

const THREADS: usize = 16;
const KEYS: [&str; 3] = ["alpha", "beta", "gamma"];
/// Critical sections each thread must complete.
const SECTIONS_PER_THREAD: usize = 50;
/// The whole run must finish by then (the machine is shared and may be slow).
const TIME_LIMIT: Duration = Duration::from_secs(90);
/// Long enough that no lock expires inside a critical section, even on a loaded machine.
const TTL_MS: u64 = 5_000;

/// How contenders ask for a lock.
#[derive(Debug, Clone, Copy)]
enum Asking {
    /// Without options: retry after a tiny pause on nil.
    Retrying,
    /// With `WAIT`: the server queues the client; retry only on a timeout.
    Waiting,
    /// With the thread's own token (distinct per thread), retrying on nil.
    OwnToken,
}

impl Asking {
    fn args(self, thread_id: usize) -> Vec<String> {
        match self {
            Asking::Retrying => vec![],
            Asking::Waiting => vec!["WAIT".into(), "10000".into()],
            Asking::OwnToken => vec!["TOKEN".into(), format!("client-{thread_id}")],
        }
    }
}

/// One critical section as its thread saw it.
#[derive(Debug)]
struct Section {
    key: usize,
    /// What `INCR counter:<key>` returned inside the section: the grant's position.
    count: i64,
    fence: i64,
}

/// Acquires `key` with `acquire_args`, retrying after a tiny pause on nil.
fn acquire_retrying(
    con: &mut redis::Connection,
    key: &str,
    acquire_args: &[&str],
    deadline: Instant,
) -> (Vec<u8>, i64) {
    loop {
        if let Some(granted) = acquire(con, key, TTL_MS, acquire_args) {
            return granted;
        }
        assert!(Instant::now() < deadline, "no grant of {key} in time");
        thread::sleep(Duration::from_micros(500));
    }
}

/// One client: takes the keys in turn, and inside each grant checks that nobody else is
/// inside (a holder marker set with `SETNX`), counts the section and leaves.
fn contender(
    server: &TestServer,
    thread_id: usize,
    asking: Asking,
    deadline: Instant,
) -> Vec<Section> {
    let args = asking.args(thread_id);
    let acquire_args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut con = server.connection();
    let me = thread_id.to_string();
    let mut sections = Vec::with_capacity(SECTIONS_PER_THREAD);
    for round in 0..SECTIONS_PER_THREAD {
        let key_index = (thread_id + round) % KEYS.len();
        let key = KEYS[key_index];
        let marker = format!("marker:{key}");
        let (token, fence) = acquire_retrying(&mut con, key, &acquire_args, deadline);

        let entered: i64 = redis::cmd("SETNX")
            .arg(&marker)
            .arg(&me)
            .query(&mut con)
            .unwrap();
        if entered != 1 {
            let other: Option<String> = redis::cmd("GET").arg(&marker).query(&mut con).unwrap();
            panic!("thread {me} got {key} (fence {fence}) while thread {other:?} held it");
        }
        let count: i64 = redis::cmd("INCR")
            .arg(format!("counter:{key}"))
            .query(&mut con)
            .unwrap();
        let still_mine: Option<String> = redis::cmd("GET").arg(&marker).query(&mut con).unwrap();
        assert_eq!(still_mine.as_deref(), Some(me.as_str()), "{key} marker");
        let _: i64 = redis::cmd("DEL").arg(&marker).query(&mut con).unwrap();

        assert_eq!(
            release(&mut con, key, &token),
            1,
            "thread {me} lost {key} (fence {fence}) inside its critical section"
        );
        sections.push(Section {
            key: key_index,
            count,
            fence,
        });
    }
    sections
}

/// Runs `THREADS` contenders and checks the outcome: every section counted exactly
/// once, and per key the fences strictly increase in the order the sections ran.
fn assert_mutual_exclusion(asking: Asking) {
    let server = TestServer::start();
    let deadline = Instant::now() + TIME_LIMIT;
    let sections: Vec<Section> = thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|id| {
                let server = &server;
                scope.spawn(move || contender(server, id, asking, deadline))
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|handle| handle.join().expect("a contender failed"))
            .collect()
    });
    assert_eq!(sections.len(), THREADS * SECTIONS_PER_THREAD);

    let mut con = server.connection();
    for (index, key) in KEYS.iter().enumerate() {
        let mut of_key: Vec<&Section> = sections.iter().filter(|s| s.key == index).collect();
        let counter: i64 = redis::cmd("GET")
            .arg(format!("counter:{key}"))
            .query(&mut con)
            .unwrap();
        assert_eq!(
            counter,
            of_key.len() as i64,
            "{key}: sections lost or doubled"
        );
        of_key.sort_by_key(|s| s.count);
        let counts: Vec<i64> = of_key.iter().map(|s| s.count).collect();
        let expected: Vec<i64> = (1..=counter).collect();
        assert_eq!(counts, expected, "{key}: two sections saw the same count");
        let fences: Vec<i64> = of_key.iter().map(|s| s.fence).collect();
        assert!(
            fences.windows(2).all(|w| w[0] < w[1]),
            "{key}: fences not increasing in grant order: {fences:?}"
        );
        let left: i64 = redis::cmd("EXISTS")
            .arg(*key)
            .arg(format!("marker:{key}"))
            .query(&mut con)
            .unwrap();
        assert_eq!(left, 0, "{key}: lock or marker left behind");
    }

    let stats = server_info(&mut con, "lock");
    assert_eq!(
        info_int(&stats, "lock_grants"),
        sections.len() as i64,
        "every section is one grant"
    );
    // Without contention the run would prove nothing.
    assert!(info_int(&stats, "lock_contended") > 0, "{stats}");
    if let Asking::Waiting = asking {
        assert!(info_int(&stats, "lock_waits") > 0, "{stats}");
    }
}

#[test]
fn contending_clients_that_retry_never_hold_a_lock_at_the_same_time() {
    assert_mutual_exclusion(Asking::Retrying);
}

#[test]
fn contending_clients_that_wait_never_hold_a_lock_at_the_same_time() {
    assert_mutual_exclusion(Asking::Waiting);
}

#[test]
fn contending_clients_with_own_tokens_never_hold_a_lock_at_the_same_time() {
    assert_mutual_exclusion(Asking::OwnToken);
}
