//! An election under churn (docs/election.md, "The guarantees"): candidates are real
//! `redis-cli` processes campaigning with `LOCK.ACQUIRE ... WAIT 0 SESSION ... VALUE`,
//! killed with `SIGKILL` or cut off with `CLIENT KILL` at random, and the master fails
//! over to its replica halfway (`FAILOVER`). Followers observe with `Election::observe`
//! on the master, on the replica, and across the failover. Every follower must see terms
//! strictly increase, and no two candidates may ever be told they lead the same term.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;
use redis_lock_client::{Election, Locker};

const KEY: &str = "churn:leader";
/// The candidates' lock-delay: short, so that the churn runs many terms.
const LOCK_DELAY_MS: u64 = 50;

/// A campaigning `redis-cli`, connected until it is killed; it reports its term on
/// `elected` if it is told it leads.
struct Candidate {
    name: String,
    child: Child,
    _stdin: ChildStdin,
}

impl Candidate {
    fn start(port: u16, n: usize, elected: mpsc::Sender<(String, u64)>) -> Self {
        let name = format!("cand-{n}");
        let mut child = Command::new(redis_cli())
            .args(["-p", &port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-cli");
        let mut stdin = child.stdin.take().expect("stdin");
        writeln!(stdin, "CLIENT SETNAME {name}").expect("send");
        writeln!(
            stdin,
            "LOCK.ACQUIRE {KEY} 60000 TOKEN {name} WAIT 0 SESSION {LOCK_DELAY_MS} VALUE {name}"
        )
        .expect("send");
        stdin.flush().expect("flush");
        let stdout = child.stdout.take().expect("stdout");
        let me = name.clone();
        thread::spawn(move || {
            // Raw output: `OK`, then the grant's token and fence on two lines.
            let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
            let _ok = lines.next();
            if let (Some(token), Some(fence)) = (lines.next(), lines.next())
                && token == me
                && let Ok(fence) = fence.trim().parse()
            {
                let _ = elected.send((me, fence));
            }
        });
        Candidate {
            name,
            child,
            _stdin: stdin,
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill(); // SIGKILL
        let _ = self.child.wait();
    }
}

fn redis_cli() -> String {
    std::env::var("REDIS_CLI").unwrap_or_else(|_| "redis-cli".into())
}

/// How many terms a run must tell for the churn to have tested anything.
const MIN_TERMS: usize = 5;

/// The terms told so far, by term, and who was told last: no term may be told twice.
struct Told {
    by_term: HashMap<u64, String>,
    last: Option<String>,
    seed: u64,
}

impl Told {
    fn new(seed: u64) -> Self {
        Told {
            by_term: HashMap::new(),
            last: None,
            seed,
        }
    }

    fn insert(&mut self, name: &str, term: u64) {
        if let Some(other) = self.by_term.insert(term, name.to_string()) {
            panic!(
                "term {term} told to {other} and {name} (CHURN_SEED={})",
                self.seed
            );
        }
        self.last = Some(name.to_string());
    }

    /// Takes in the terms told since the last call.
    fn take(&mut self, claims: &mpsc::Receiver<(String, u64)>) {
        while let Ok((name, term)) = claims.try_recv() {
            self.insert(&name, term);
        }
    }

    fn leader(&self) -> Option<&str> {
        self.last.as_deref()
    }

    fn len(&self) -> usize {
        self.by_term.len()
    }
}

/// A tiny deterministic generator, so a failing run can be replayed from its seed.
struct Dice(u64);

impl Dice {
    fn roll(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

/// Follows the election on the server at `port` with `Election::observe`, and sends
/// the terms it saw, in order (nobody leading is left out), once it has seen `until`
/// (0 until the test knows the last term).
fn follow(port: u16, until: Arc<AtomicU64>, done: mpsc::Sender<Vec<u64>>) {
    thread::spawn(move || {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
        let election = Election::new(Locker::new(client), KEY);
        let mut terms = Vec::new();
        for change in election.observe(0) {
            if let Ok(Some(leader)) = change {
                terms.push(leader.term);
            }
            let until = until.load(Ordering::Relaxed);
            if until != 0 && terms.last().is_some_and(|&t| t >= until) {
                break;
            }
        }
        let _ = done.send(terms);
    });
}

/// Which connections' names are those of candidates: `(id, name)`.
fn candidate_connections(con: &mut redis::Connection) -> Vec<(i64, String)> {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(con).unwrap();
    list.lines()
        .filter_map(|line| {
            let field = |name: &str| {
                line.split(' ')
                    .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            };
            let name = field("name")?;
            name.starts_with("cand-")
                .then(|| Some((field("id")?.parse().ok()?, name.to_string())))?
        })
        .collect()
}

#[test]
fn terms_only_grow_and_no_term_has_two_leaders_under_churn() {
    let seed = std::env::var("CHURN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    println!("election churn: CHURN_SEED={seed}");
    let mut dice = Dice(seed);
    let master = TestServer::start();
    let replica = start_replica(&master, &[]);
    let until = Arc::new(AtomicU64::new(0));
    let (followed, followers) = mpsc::channel();
    for port in [master.port, master.port, replica.port] {
        follow(port, until.clone(), followed.clone());
    }
    drop(followed);
    let (elected, claims) = mpsc::channel();
    let mut candidates: Vec<Candidate> = Vec::new();
    let mut serving = master.port;
    let mut n = 0;
    let started = Instant::now();
    let mut told = Told::new(seed);
    // At least 120 steps, a failover at step 60, and on until enough terms were told:
    // how many a random run tells depends on whom the dice kill, so the leader is
    // the one killed half the time, and the churn goes on until it has turned over.
    let mut step = 0;
    while step < 120 || (told.len() < MIN_TERMS && started.elapsed() < Duration::from_secs(60)) {
        told.take(&claims);
        if step == 60 {
            // Halfway: a coordinated failover; the candidates go to the new master.
            let mut con = master.connection();
            let _: () = redis::cmd("FAILOVER").query(&mut con).expect("FAILOVER");
            poll_until(
                Duration::from_secs(20),
                "the replica to be promoted",
                || {
                    let info: String = redis::cmd("INFO")
                        .arg("replication")
                        .query(&mut replica.connection())
                        .unwrap();
                    info.contains("role:master")
                },
            );
            serving = replica.port;
        }
        match dice.roll(4) {
            0 | 1 => {
                n += 1;
                candidates.push(Candidate::start(serving, n, elected.clone()));
            }
            2 if !candidates.is_empty() => {
                let leader = told
                    .leader()
                    .and_then(|name| candidates.iter().position(|c| c.name == name));
                let at = match leader {
                    Some(at) if dice.roll(2) == 0 => at,
                    _ => dice.roll(candidates.len()),
                };
                candidates.swap_remove(at).kill();
            }
            3 => {
                let mut con = redis::Client::open(format!("redis://127.0.0.1:{serving}/"))
                    .unwrap()
                    .get_connection()
                    .unwrap();
                let live = candidate_connections(&mut con);
                if !live.is_empty() {
                    let (id, _) = &live[dice.roll(live.len())];
                    let _: redis::RedisResult<()> = redis::cmd("CLIENT")
                        .arg("KILL")
                        .arg("ID")
                        .arg(*id)
                        .query(&mut con);
                }
            }
            _ => {}
        }
        thread::sleep(Duration::from_millis(
            dice.roll(3 * LOCK_DELAY_MS as usize) as u64
        ));
        step += 1;
    }
    // The last term: a fresh candidate after everyone else is gone.
    for candidate in &mut candidates {
        candidate.kill();
    }
    n += 1;
    let mut last = Candidate::start(serving, n, elected.clone());
    drop(elected);
    let mut last_term = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        match claims.recv_timeout(Duration::from_millis(100)) {
            Ok((name, term)) => {
                told.insert(&name, term);
                if name == last.name {
                    last_term = Some(term);
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let last_term = last_term.expect("the last candidate is elected");
    until.store(last_term, Ordering::Relaxed);
    // A follower that saw the last term already waits for the next change: the last
    // leader leaves, and its lock goes after the lock-delay.
    last.kill();
    let mut seen = Vec::new();
    for _ in 0..3 {
        let terms = followers
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("a follower never saw the last term (CHURN_SEED={seed})"));
        seen.push(terms);
    }
    println!(
        "election churn: {n} candidates, {} terms told, followers saw {:?} terms",
        told.len(),
        seen.iter().map(Vec::len).collect::<Vec<_>>()
    );
    assert!(
        told.len() >= MIN_TERMS,
        "only {} terms in {:?} (CHURN_SEED={seed})",
        told.len(),
        started.elapsed()
    );
    for (i, terms) in seen.iter().enumerate() {
        assert!(
            terms.windows(2).all(|w| w[0] < w[1]),
            "follower {i} saw terms go back: {terms:?} (CHURN_SEED={seed})"
        );
        assert!(
            terms.contains(&last_term),
            "follower {i} missed the last term {last_term}: {terms:?} (CHURN_SEED={seed})"
        );
    }
}
