//! TEMPORARY
use redis_module::{Context, RedisResult, RedisString, RedisValue};
pub fn queued(_db: i32, _key: &[u8]) -> bool {
    false
}
pub fn count(_db: i32, _key: &[u8]) -> usize {
    0
}
pub fn wait(
    _ctx: &Context,
    _db: i32,
    _key: &RedisString,
    _token: Vec<u8>,
    _ttl: i64,
    _t: i64,
) -> RedisResult {
    Ok(RedisValue::Null)
}
pub fn lock_freed(_ctx: &Context, _db: i32, _key: &[u8]) {}
