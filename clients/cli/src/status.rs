//! What a lock is now, from `LOCK.INFO`, `LOCK.HOLDERS` and `LOCK.CONTENDED`: its mode,
//! limit, waiters and holders (fence, TTL, client, session, value). Never a token: the
//! server never shows one.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::{ConnectionLike, RedisResult, Value};

/// One holder of a lock.
#[derive(Debug, Clone, PartialEq)]
pub struct Holder {
    pub fence: u64,
    /// Milliseconds left; -1 when the key has no expiry.
    pub ttl_ms: i64,
    /// Unix time in ms of the grant.
    pub acquired_ms: i64,
    /// The `CLIENT ID` granted it on this server; 0 when not known.
    pub client: i64,
    /// The grace in ms of a session-bound holder; -1 when not bound.
    pub session_ms: i64,
    /// 1 while the bound connection is open, 0 while the grace runs, -1 when not bound.
    pub connected: i64,
    pub value: Option<Vec<u8>>,
}

impl Holder {
    /// How long it has held the lock.
    pub fn held_for(&self) -> Duration {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        Duration::from_millis(now.saturating_sub(self.acquired_ms).max(0) as u64)
    }
}

/// One lock's state.
#[derive(Debug, Clone, PartialEq)]
pub struct LockStatus {
    pub key: String,
    /// `None` when the key does not exist (the lock is free).
    pub mode: Option<String>,
    /// The shared holders' `LIMIT`; -1 when none.
    pub limit: i64,
    pub waiters: i64,
    pub holders: Vec<Holder>,
    /// How long the oldest waiter has waited, in ms (for the contended locks).
    pub waited_ms: Option<i64>,
}

/// The fields of a RESP2 flat field/value array or a RESP3 map.
fn fields(value: Value) -> HashMap<String, Value> {
    let pairs: Vec<(Value, Value)> = match value {
        Value::Map(pairs) => pairs,
        Value::Array(items) => {
            let mut items = items.into_iter();
            let mut pairs = Vec::new();
            while let (Some(name), Some(value)) = (items.next(), items.next()) {
                pairs.push((name, value));
            }
            pairs
        }
        _ => Vec::new(),
    };
    pairs
        .into_iter()
        .filter_map(|(name, value)| match name {
            Value::BulkString(bytes) => Some((String::from_utf8_lossy(&bytes).into_owned(), value)),
            Value::SimpleString(text) => Some((text, value)),
            _ => None,
        })
        .collect()
}

fn int(fields: &HashMap<String, Value>, name: &str) -> i64 {
    match fields.get(name) {
        Some(Value::Int(n)) => *n,
        _ => -1,
    }
}

fn bytes(fields: &HashMap<String, Value>, name: &str) -> Option<Vec<u8>> {
    match fields.get(name) {
        Some(Value::BulkString(bytes)) => Some(bytes.clone()),
        Some(Value::SimpleString(text)) => Some(text.clone().into_bytes()),
        Some(Value::VerbatimString { text, .. }) => Some(text.clone().into_bytes()),
        _ => None,
    }
}

/// `key`'s state (`LOCK.INFO`, then `LOCK.HOLDERS`).
pub fn fetch(con: &mut dyn ConnectionLike, key: &str) -> RedisResult<LockStatus> {
    let info: Value = redis::cmd("LOCK.INFO").arg(key).query(con)?;
    let mut status = LockStatus {
        key: key.to_owned(),
        mode: None,
        limit: -1,
        waiters: 0,
        holders: Vec::new(),
        waited_ms: None,
    };
    if info == Value::Nil {
        return Ok(status);
    }
    let info = fields(info);
    status.mode = bytes(&info, "mode").map(|m| String::from_utf8_lossy(&m).into_owned());
    status.limit = int(&info, "limit");
    status.waiters = int(&info, "waiters").max(0);
    let holders: Value = redis::cmd("LOCK.HOLDERS").arg(key).query(con)?;
    if let Value::Array(holders) = holders {
        status.holders = holders
            .into_iter()
            .map(|holder| {
                let holder = fields(holder);
                Holder {
                    fence: int(&holder, "fence").max(0) as u64,
                    ttl_ms: int(&holder, "ttl"),
                    acquired_ms: int(&holder, "acquired"),
                    client: int(&holder, "client").max(0),
                    session_ms: int(&holder, "session"),
                    connected: int(&holder, "connected"),
                    value: bytes(&holder, "value"),
                }
            })
            .collect();
    }
    Ok(status)
}

/// The contended locks of one server (`LOCK.CONTENDED COUNT n`): key and how long its
/// oldest waiter has waited, in ms.
pub fn contended(con: &mut redis::Connection, count: u32) -> RedisResult<Vec<(String, i64)>> {
    let reply: Value = redis::cmd("LOCK.CONTENDED")
        .arg("COUNT")
        .arg(count)
        .query(con)?;
    let Value::Array(entries) = reply else {
        return Ok(Vec::new());
    };
    Ok(entries
        .into_iter()
        .filter_map(|entry| {
            let entry = fields(entry);
            let key = bytes(&entry, "key")?;
            Some((
                String::from_utf8_lossy(&key).into_owned(),
                int(&entry, "waited"),
            ))
        })
        .collect())
}

/// The locks of one server's current database (`SCAN ... TYPE redislock`).
pub fn all_locks(con: &mut redis::Connection) -> RedisResult<Vec<String>> {
    let mut keys = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("TYPE")
            .arg("redislock")
            .arg("COUNT")
            .arg(1000)
            .query(con)?;
        keys.extend(
            batch
                .iter()
                .map(|k| String::from_utf8_lossy(k).into_owned()),
        );
        if next == 0 {
            return Ok(keys);
        }
        cursor = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_read_both_protocols() {
        let resp2 = Value::Array(vec![
            Value::BulkString(b"fence".to_vec()),
            Value::Int(7),
            Value::BulkString(b"value".to_vec()),
            Value::Nil,
        ]);
        let resp3 = Value::Map(vec![
            (Value::BulkString(b"fence".to_vec()), Value::Int(7)),
            (Value::SimpleString("value".into()), Value::Nil),
        ]);
        for value in [resp2, resp3] {
            let f = fields(value);
            assert_eq!(int(&f, "fence"), 7);
            assert_eq!(bytes(&f, "value"), None);
            assert_eq!(int(&f, "missing"), -1);
        }
    }
}
