//! An RDB of a newer encoding than a module knows is refused: the server logs why and
//! exits at start, as it does for any data it cannot load, instead of serving half of it
//! or crashing. Shown with the previous release given an RDB whose lock type says a
//! version after every one there is.

use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use redis_lock_testkit::launch::Launch;

use crate::common::*;
use crate::previous;

/// The server's id of the lock type `redislock` at `version` (the module API's
/// encoding: six bits per character of the name, then ten bits of version), as an RDB
/// writes it (a 64-bit length: 0x81, then big-endian).
fn type_id(version: u64) -> Vec<u8> {
    const CHARSET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut id: u64 = 0;
    for c in b"redislock" {
        let index = CHARSET
            .iter()
            .position(|x| x == c)
            .expect("a name character") as u64;
        id = (id << 6) | index;
    }
    id = (id << 10) | version;
    let mut bytes = vec![0x81];
    bytes.extend_from_slice(&id.to_be_bytes());
    bytes
}

#[test]
fn a_module_given_an_rdb_of_a_newer_encoding_refuses_it_and_exits_without_crashing() {
    let old = previous::module();
    // An RDB of the module under test, its lock type's version raised past every
    // version there is (the type's values and its auxiliary data alike).
    let mut server = TestServer::start();
    let mut con = server.connection();
    acquire(&mut con, "newer", 600_000, &[]).expect("granted");
    let () = redis::cmd("SAVE").query(&mut con).expect("SAVE");
    drop(con);
    server.stop();
    let path = server.dir.join("dump.rdb");
    let mut rdb = fs::read(&path).expect("the RDB");
    let (current, newer) = (type_id(4), type_id(5));
    let mut patched = 0;
    let mut i = 0;
    while i + current.len() <= rdb.len() {
        if rdb[i..i + current.len()] == current[..] {
            rdb[i..i + newer.len()].copy_from_slice(&newer);
            patched += 1;
            i += current.len();
        } else {
            i += 1;
        }
    }
    assert!(patched >= 1, "the RDB names the lock type");
    // A zero checksum is not checked (the server's "saved with checksum disabled").
    let len = rdb.len();
    rdb[len - 8..].fill(0);
    fs::write(&path, &rdb).expect("write the RDB");

    let launch = Launch {
        port: free_port(),
        dir: &server.dir,
        module: Some(std::path::Path::new(&old)),
    };
    let mut child = Command::new(server_binary())
        .args(launch.args())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the server");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the server loaded an RDB it cannot read; log:\n{}",
                server.log()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let log = server.log();
    // It exits (0 or 1, as the server's version has it), never killed by a signal.
    assert!(
        status.signal().is_none() && status.code().is_some(),
        "{status}; log:\n{log}"
    );
    assert!(
        log.contains("redislock") && log.contains("not able to load"),
        "the log says which data it could not load:\n{log}"
    );
    assert!(!log.contains("crashed by signal"), "{log}");
}
