//! A client connection the fuzzer holds by its socket: a command's reply can wait there
//! (a blocked `LOCK.ACQUIRE ... WAIT`), the fuzzer can tell whether anything arrived
//! without reading it, and dropping the connection closes it.

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use redis::Value;

use crate::common::{raw_connection, resp};

pub struct Conn {
    stream: TcpStream,
    parser: redis::Parser,
    /// The connection's `CLIENT ID`.
    pub id: i64,
}

/// How long a reply that must come may take (a grant made by a timer or a poll of the
/// module's comes within 100 ms; a loaded machine may need more).
pub const REPLY_LIMIT: Duration = Duration::from_secs(5);

impl Conn {
    pub fn open(port: u16) -> Self {
        let mut conn = Conn {
            stream: raw_connection(port),
            parser: redis::Parser::new(),
            id: 0,
        };
        let id = conn.query(&[b"CLIENT".to_vec(), b"ID".to_vec()]);
        conn.id = match id {
            Ok(Value::Int(id)) => id,
            other => panic!("CLIENT ID answered {other:?}"),
        };
        conn
    }

    /// Sends one command without reading its reply.
    pub fn send(&mut self, argv: &[Vec<u8>]) -> Result<(), String> {
        let argv: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        self.stream
            .write_all(&resp(&argv))
            .map_err(|err| format!("send: {err}"))
    }

    /// The next reply (an error reply is `Ok(Value::ServerError)`); `Err` when none comes
    /// within `limit` or the connection closed.
    pub fn read(&mut self, limit: Duration) -> Result<Value, String> {
        self.stream
            .set_read_timeout(Some(limit))
            .map_err(|err| err.to_string())?;
        self.parser
            .parse_value(&mut self.stream)
            .map_err(|err| format!("no reply within {limit:?}: {err}"))
    }

    /// Sends one command and reads its reply.
    pub fn query(&mut self, argv: &[Vec<u8>]) -> Result<Value, String> {
        self.send(argv)?;
        self.read(REPLY_LIMIT)
    }

    /// Whether a reply (or the close of the connection) is waiting to be read.
    pub fn has_input(&self) -> bool {
        let _ = self.stream.set_nonblocking(true);
        let peeked = self.stream.peek(&mut [0u8; 1]);
        let _ = self.stream.set_nonblocking(false);
        !matches!(peeked, Err(err) if err.kind() == std::io::ErrorKind::WouldBlock)
    }

    /// `ip:port` of this end, as `CLIENT KILL ADDR` names it.
    pub fn addr(&self) -> String {
        self.stream
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default()
    }
}

/// The text of an error reply, `None` for any other reply.
pub fn error_text(value: &Value) -> Option<String> {
    match value {
        Value::ServerError(err) => Some(format!("{} {}", err.code(), err.details().unwrap_or(""))),
        _ => None,
    }
}

/// A `[token, fence]` reply.
pub fn grant_of(value: &Value) -> Option<(Vec<u8>, i64)> {
    match value {
        Value::Array(items) => match items.as_slice() {
            [Value::BulkString(token), Value::Int(fence)] => Some((token.clone(), *fence)),
            _ => None,
        },
        _ => None,
    }
}

/// A `[token, [fence, ...]]` reply (`LOCK.ACQUIREALL`).
pub fn grant_all_of(value: &Value) -> Option<(Vec<u8>, Vec<i64>)> {
    let Value::Array(items) = value else {
        return None;
    };
    let [Value::BulkString(token), Value::Array(fences)] = items.as_slice() else {
        return None;
    };
    let fences = fences
        .iter()
        .map(|f| match f {
            Value::Int(fence) => Some(*fence),
            _ => None,
        })
        .collect::<Option<Vec<i64>>>()?;
    Some((token.clone(), fences))
}
