//! `read_lock`, `write_lock` and `semaphore` of the sync and async lockers against a
//! real server: the same guards as the mutex, in the modes of
//! docs/shared.md.

use std::time::Duration;

use crate::common::*;
use redis_lock_client::{LockOptions, Locker, Mode, aio};

fn ttl(ms: u64) -> LockOptions {
    LockOptions::new(Duration::from_millis(ms))
}

#[test]
fn readers_share_a_writer_waits_and_the_guards_release() {
    let server = TestServer::start();
    let locker = Locker::new(server.client());
    let first = locker
        .read_lock("doc", &ttl(30_000))
        .unwrap()
        .expect("reader");
    let second = locker
        .read_lock("doc", &ttl(30_000))
        .unwrap()
        .expect("reader");
    assert!(second.fence() > first.fence());
    let info = first.info().unwrap().expect("info");
    assert!(info.shared);
    assert_eq!((info.holders, info.limit), (2, None));
    assert!(locker.write_lock("doc", &ttl(30_000)).unwrap().is_none());
    assert!(first.release().unwrap());
    drop(second);
    let writer = locker
        .write_lock("doc", &ttl(30_000).wait(Duration::from_secs(5)))
        .unwrap()
        .expect("the writer once the readers are gone");
    let info = writer.info().unwrap().expect("info");
    assert!(!info.shared);
    assert_eq!(info.holders, 1);
    assert!(locker.read_lock("doc", &ttl(30_000)).unwrap().is_none());
}

#[test]
fn a_semaphore_gives_out_its_permits_and_a_watchdog_keeps_each_alive() {
    let server = TestServer::start();
    let locker = Locker::new(server.client());
    let options = ttl(300).watchdog();
    let permits: Vec<_> = (0..3)
        .map(|_| {
            locker
                .semaphore("api", 3, &options)
                .unwrap()
                .expect("a permit")
        })
        .collect();
    assert!(locker.semaphore("api", 3, &options).unwrap().is_none());
    // Twice the TTL later, every permit is still held.
    std::thread::sleep(Duration::from_millis(600));
    for permit in &permits {
        assert!(!permit.is_lost());
        assert_eq!(permit.info().unwrap().unwrap().limit, Some(3));
    }
    let err = locker.semaphore("api", 4, &options).unwrap_err();
    assert!(err.to_string().contains("LIMIT"), "{err}");
    drop(permits);
    let mut con = server.connection();
    poll_until(Duration::from_secs(5), "the permits released", || {
        !exists(&mut con, "api")
    });
}

#[test]
fn options_carry_the_mode_into_any_acquire() {
    let server = TestServer::start();
    let locker = Locker::new(server.client());
    let a = locker
        .acquire("m", &ttl(30_000).mode(Mode::Shared))
        .unwrap()
        .unwrap();
    let b = locker.read_lock("m", &ttl(30_000)).unwrap().unwrap();
    assert_eq!(a.info().unwrap().unwrap().holders, 2);
    drop((a, b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_locker_takes_read_write_and_semaphore_guards() {
    let server = TestServer::start();
    let locker = aio::Locker::new(server.client());
    let reader = locker
        .read_lock("adoc", &ttl(30_000))
        .await
        .unwrap()
        .unwrap();
    let other = locker
        .read_lock("adoc", &ttl(30_000).session(Duration::from_secs(1)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reader.info().await.unwrap().unwrap().holders, 2);
    assert!(
        locker
            .write_lock("adoc", &ttl(30_000))
            .await
            .unwrap()
            .is_none()
    );
    assert!(reader.release().await.unwrap());
    assert!(other.release().await.unwrap());
    let permit = locker
        .semaphore("asem", 1, &ttl(30_000))
        .await
        .unwrap()
        .unwrap();
    assert!(
        locker
            .semaphore("asem", 1, &ttl(30_000))
            .await
            .unwrap()
            .is_none()
    );
    assert!(permit.release().await.unwrap());
}
