//! The module loads and answers; without it, the same calls fail.

mod common;

use common::*;

#[test]
fn module_registers_as_lock_and_grants_a_lock() {
    let server = TestServer::start();
    let mut con = server.connection();
    assert_eq!(loaded_modules(&mut con), vec!["lock".to_string()]);
    let (token, fence) = acquire(&mut con, "orders:42", 30_000, &[]).expect("granted");
    assert_eq!(token.len(), 32);
    assert!(fence > 0);
}

#[test]
fn without_the_module_the_commands_are_unknown() {
    let server = TestServer::without_module();
    let mut con = server.connection();
    let err = error_of(redis::cmd("LOCK.ACQUIRE").arg("k").arg(100).query(&mut con));
    assert!(err.contains("unknown command"), "{err}");
}

/// The server under test started from the repository's own `redis.conf`, killed on drop.
struct DemoServer(std::process::Child);

impl Drop for DemoServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_repositorys_redis_conf_loads_the_module_as_make_run_does() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::create_dir_all(root.join("target/run")).unwrap();
    let port = free_port();
    let _server = DemoServer(
        std::process::Command::new(server_binary())
            .current_dir(root)
            .args(["redis.conf", "--port", &port.to_string(), "--save", ""])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the server"),
    );
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let mut con = None;
    poll_until(
        std::time::Duration::from_secs(20),
        "the demo server",
        || {
            con = client.get_connection().ok();
            con.is_some()
        },
    );
    let mut con = con.unwrap();
    let (token, fence) = acquire(&mut con, "orders:42", 30_000, &[]).expect("granted");
    assert_eq!(token.len(), 32);
    assert!(fence > 0);
}
