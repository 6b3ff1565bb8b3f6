//! `Election` against a real server (docs/election.md): first come, first elected; the
//! value published and proclaimed; resigning and a dead leader's lock-delay hand the term
//! to the next candidate; observers see every new leader, terms strictly growing, and
//! find the leader again after the server restarts.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use crate::common::*;
use redis_lock_client::{Election, Leader, Locker};

const LIMIT: Duration = Duration::from_secs(10);

fn election(server: &TestServer) -> Election {
    Election::new(Locker::new(server.client()), "service:leader")
        .ttl(Duration::from_secs(10))
        .lock_delay(Duration::from_millis(200))
}

fn leader(term: u64, value: &str) -> Option<Leader> {
    Some(Leader {
        term,
        value: Some(value.as_bytes().to_vec()),
    })
}

#[test]
fn the_first_candidate_leads_the_next_waits_and_takes_over_when_it_resigns() {
    let server = TestServer::start();
    let election = election(&server);
    assert_eq!(election.leader().unwrap(), None);
    let first = election.campaign(b"node-a").unwrap();
    assert_eq!(election.leader().unwrap(), leader(first.term(), "node-a"));

    let (elected, second) = mpsc::channel();
    let candidate = election.clone();
    thread::spawn(move || {
        let leadership = candidate.campaign(b"node-b").unwrap();
        elected.send(leadership).unwrap();
    });
    poll_until(LIMIT, "the second candidate to queue", || {
        info_field(&mut server.connection(), "service:leader", "waiters") == Some(1)
    });
    assert!(second.try_recv().is_err(), "one leader at a time");
    assert!(first.proclaim(b"node-a2").unwrap(), "same term");
    assert_eq!(election.leader().unwrap(), leader(first.term(), "node-a2"));
    let first_term = first.term();
    assert!(first.resign().unwrap());
    let second = second.recv_timeout(LIMIT).expect("elected");
    assert!(second.term() > first_term);
    assert_eq!(election.leader().unwrap(), leader(second.term(), "node-b"));
    second.check().expect("leading");
}

#[test]
fn observers_see_each_new_leader_and_nobody_in_between_only_when_it_lasted() {
    let server = TestServer::start();
    let election = election(&server);
    let (seen, changes) = mpsc::channel();
    let follower = election.clone();
    thread::spawn(move || {
        for change in follower.observe(0) {
            // Errors once the test is over and its server gone: the thread ends.
            let Ok(change) = change else { return };
            if seen.send(change).is_err() {
                return;
            }
        }
    });
    // Nobody leads yet: nothing to report until someone does.
    assert!(changes.recv_timeout(Duration::from_millis(100)).is_err());
    let first = election.campaign(b"a").unwrap();
    assert_eq!(
        changes.recv_timeout(LIMIT).unwrap(),
        leader(first.term(), "a")
    );
    let term = first.term();
    drop(first); // resigns
    assert_eq!(changes.recv_timeout(LIMIT).unwrap(), None);
    let second = election.campaign(b"b").unwrap();
    let seen = changes.recv_timeout(LIMIT).unwrap().expect("a leader");
    assert!(seen.term > term, "terms only grow");
    assert_eq!(seen, leader(second.term(), "b").unwrap());
}

#[test]
fn a_leader_that_dies_is_replaced_after_its_lock_delay() {
    let server = TestServer::start();
    let election = election(&server);
    // The leader is a connection of its own, killed as a crashed process's would be.
    let mut leader_con = server.connection();
    let granted: Option<(Vec<u8>, u64)> = redis::cmd("LOCK.ACQUIRE")
        .arg("service:leader")
        .arg(10_000)
        .arg("SESSION")
        .arg(200)
        .arg("VALUE")
        .arg("dead")
        .query(&mut leader_con)
        .unwrap();
    let dead_term = granted.expect("elected").1;
    let id: i64 = redis::cmd("CLIENT")
        .arg("ID")
        .query(&mut leader_con)
        .unwrap();
    let mut observer = election.observe(dead_term);
    let (elected, next) = mpsc::channel();
    let candidate = election.clone();
    thread::spawn(move || elected.send(candidate.campaign(b"alive").unwrap()).unwrap());
    poll_until(LIMIT, "the candidate to queue", || {
        info_field(&mut server.connection(), "service:leader", "waiters") == Some(1)
    });
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(id)
        .query(&mut server.connection())
        .unwrap();
    let next = next
        .recv_timeout(LIMIT)
        .expect("elected after the lock-delay");
    assert!(next.term() > dead_term);
    // The handoff happens in the grace's end: the observer sees the new term, not nobody.
    let seen = observer.next().unwrap().unwrap();
    assert_eq!(seen, leader(next.term(), "alive"));
}

#[test]
fn an_observer_finds_the_leader_again_after_the_server_restarts() {
    let mut server = TestServer::with_args(&["--appendonly", "yes", "--appendfsync", "always"]);
    let election = election(&server);
    let mut con = server.connection();
    let granted: Option<(Vec<u8>, u64)> = redis::cmd("LOCK.ACQUIRE")
        .arg("service:leader")
        .arg(60_000)
        .arg("TOKEN")
        .arg("t1")
        .arg("VALUE")
        .arg("one")
        .query(&mut con)
        .unwrap();
    let term = granted.unwrap().1;
    let mut observer = election.observe(0);
    assert_eq!(observer.next().unwrap().unwrap(), leader(term, "one"));
    server.restart();
    // A new term is taken while the observer is cut off; it reconnects and sees it.
    let mut con = server.connection();
    let _: i64 = redis::cmd("LOCK.RELEASE")
        .arg("service:leader")
        .arg("t1")
        .query(&mut con)
        .unwrap();
    let granted: Option<(Vec<u8>, u64)> = redis::cmd("LOCK.ACQUIRE")
        .arg("service:leader")
        .arg(60_000)
        .arg("VALUE")
        .arg("two")
        .query(&mut con)
        .unwrap();
    let second = granted.unwrap().1;
    let seen = observer
        .by_ref()
        .find_map(Result::ok)
        .expect("the observer reconnects");
    assert_eq!(seen, leader(second, "two"));
}

#[test]
fn an_observer_ends_with_an_error_it_does_not_ride_out() {
    let server = TestServer::start();
    let election = election(&server);
    let mut con = server.connection();
    let _: () = redis::cmd("SET")
        .arg("service:leader")
        .arg("not a lock")
        .query(&mut con)
        .unwrap();
    let mut observer = election.observe(0);
    let error = observer.next().expect("an item").expect_err("WRONGTYPE");
    assert_eq!(error.code(), Some("WRONGTYPE"));
    assert!(observer.next().is_none(), "the observation ended");
}

#[test]
fn a_lost_leadership_refuses_to_proclaim_and_takes_nothing() {
    let server = TestServer::start();
    let election = election(&server);
    let leadership = election.campaign(b"a").unwrap();
    let _: i64 = redis::cmd("DEL")
        .arg("service:leader")
        .query(&mut server.connection())
        .unwrap();
    assert!(!leadership.proclaim(b"b").unwrap());
    assert!(leadership.check().is_err());
    assert_eq!(election.leader().unwrap(), None, "the free key stays free");
    assert!(!leadership.resign().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_election_campaigns_proclaims_resigns_and_observes() {
    use redis_lock_client::aio;

    let server = TestServer::start();
    let election = aio::Election::new(aio::Locker::new(server.client()), "service:leader")
        .ttl(Duration::from_secs(10))
        .lock_delay(Duration::from_millis(200));
    assert_eq!(election.leader().await.unwrap(), None);
    let mut observer = election.observe(0);
    let first = election.campaign(b"a").await.unwrap();
    assert_eq!(observer.next().await.unwrap(), leader(first.term(), "a"));
    assert!(first.proclaim(b"a2").await.unwrap());
    assert_eq!(election.leader().await.unwrap(), leader(first.term(), "a2"));

    let candidate = election.clone();
    let second = tokio::spawn(async move { candidate.campaign(b"b").await.unwrap() });
    let mut con = server.connection();
    poll_until(LIMIT, "the second candidate to queue", || {
        info_field(&mut con, "service:leader", "waiters") == Some(1)
    });
    let first_term = first.term();
    assert!(first.resign().await.unwrap());
    let second = second.await.unwrap();
    assert!(second.term() > first_term);
    // Elected in the resignation itself: the observer sees the new term, never nobody.
    assert_eq!(observer.next().await.unwrap(), leader(second.term(), "b"));
    let _: i64 = redis::cmd("DEL")
        .arg("service:leader")
        .query(&mut con)
        .unwrap();
    assert_eq!(observer.next().await.unwrap(), None);
    assert!(!second.proclaim(b"b2").await.unwrap(), "lost");
    assert!(second.check().is_err());
    assert_eq!(
        election.leader().await.unwrap(),
        None,
        "a lost proclaim takes nothing"
    );
}
