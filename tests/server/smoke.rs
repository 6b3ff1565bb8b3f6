//! The module loads and answers; without it, the same calls fail.

use crate::common::*;

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
