//! A minimal RESP2 client: the load generator's only way to talk to a server.
//!
//! Hand-written rather than a full client library so that the generator's cost per
//! command stays small and known, pipelining is explicit (queue, flush, read), and every
//! command sent is counted: "commands per critical section" comes from `sent`.

use std::io::{self, BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Nil,
    Int(i64),
    Bulk(Vec<u8>),
    Status(String),
    Error(String),
    Array(Vec<Reply>),
}

impl Reply {
    /// The integer, or an error naming what came instead.
    pub fn int(&self) -> io::Result<i64> {
        match self {
            Reply::Int(n) => Ok(*n),
            other => Err(unexpected("an integer", other)),
        }
    }

    /// The text of a bulk or status reply.
    pub fn text(&self) -> io::Result<String> {
        match self {
            Reply::Bulk(b) => Ok(String::from_utf8_lossy(b).into_owned()),
            Reply::Status(s) => Ok(s.clone()),
            other => Err(unexpected("a string", other)),
        }
    }

    /// Fails on an error reply, so that a benchmark never counts an error as work done.
    pub fn ok(self) -> io::Result<Reply> {
        match self {
            Reply::Error(e) => Err(io::Error::other(format!("server error: {e}"))),
            other => Ok(other),
        }
    }
}

/// An error for a reply of the wrong shape.
pub fn unexpected(wanted: &str, got: &Reply) -> io::Error {
    io::Error::other(format!("expected {wanted}, got {got:?}"))
}

/// A connection with an output buffer: `queue` commands, `flush`, then `read` replies.
pub struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    out: Vec<u8>,
    /// Commands sent on this connection so far.
    pub sent: u64,
}

impl Conn {
    /// Connects to a server on loopback, with Nagle off and a generous read timeout
    /// (a lost reply fails the benchmark instead of hanging it).
    pub fn connect(port: u16) -> io::Result<Conn> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(120)))?;
        Ok(Conn {
            reader: BufReader::with_capacity(64 * 1024, stream.try_clone()?),
            writer: stream,
            out: Vec::with_capacity(64 * 1024),
            sent: 0,
        })
    }

    /// Appends a command to the output buffer.
    pub fn queue(&mut self, args: &[&[u8]]) {
        self.out.push(b'*');
        push_number(&mut self.out, args.len());
        for arg in args {
            self.out.push(b'$');
            push_number(&mut self.out, arg.len());
            self.out.extend_from_slice(arg);
            self.out.extend_from_slice(b"\r\n");
        }
        self.sent += 1;
    }

    /// Sends everything queued.
    pub fn flush(&mut self) -> io::Result<()> {
        self.writer.write_all(&self.out)?;
        self.out.clear();
        Ok(())
    }

    /// Reads one reply.
    pub fn read(&mut self) -> io::Result<Reply> {
        read_reply(&mut self.reader)
    }

    /// Sends one command and reads its reply.
    pub fn call(&mut self, args: &[&[u8]]) -> io::Result<Reply> {
        self.queue(args);
        self.flush()?;
        self.read()
    }

    /// `call` for commands given as text, for set-up and inspection commands.
    pub fn cmd(&mut self, args: &[&str]) -> io::Result<Reply> {
        let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.call(&bytes)?.ok()
    }
}

fn push_number(out: &mut Vec<u8>, n: usize) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut n = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
    out.extend_from_slice(b"\r\n");
}

fn read_line(reader: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut line = Vec::with_capacity(16);
    reader.read_until(b'\n', &mut line)?;
    if line.len() < 3 || !line.ends_with(b"\r\n") {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed mid-reply",
        ));
    }
    line.truncate(line.len() - 2);
    Ok(line)
}

fn parse_int(bytes: &[u8]) -> io::Result<i64> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::other("bad integer in reply"))
}

fn read_reply(reader: &mut impl BufRead) -> io::Result<Reply> {
    let line = read_line(reader)?;
    let body = &line[1..];
    match line[0] {
        b'+' => Ok(Reply::Status(String::from_utf8_lossy(body).into_owned())),
        b'-' => Ok(Reply::Error(String::from_utf8_lossy(body).into_owned())),
        b':' => Ok(Reply::Int(parse_int(body)?)),
        b'$' => {
            let len = parse_int(body)?;
            if len < 0 {
                return Ok(Reply::Nil);
            }
            let mut data = vec![0u8; len as usize + 2];
            reader.read_exact(&mut data)?;
            data.truncate(len as usize);
            Ok(Reply::Bulk(data))
        }
        b'*' => {
            let len = parse_int(body)?;
            if len < 0 {
                return Ok(Reply::Nil);
            }
            (0..len)
                .map(|_| read_reply(reader))
                .collect::<io::Result<Vec<_>>>()
                .map(Reply::Array)
        }
        other => Err(io::Error::other(format!(
            "unknown reply type byte {other:#x}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Reply {
        read_reply(&mut BufReader::new(bytes)).unwrap()
    }

    #[test]
    fn replies_of_every_kind_parse() {
        assert_eq!(parse(b"+OK\r\n"), Reply::Status("OK".into()));
        assert_eq!(parse(b":42\r\n"), Reply::Int(42));
        assert_eq!(parse(b"$-1\r\n"), Reply::Nil);
        assert_eq!(parse(b"*-1\r\n"), Reply::Nil);
        assert_eq!(parse(b"$3\r\na\r\n\r\n"), Reply::Bulk(b"a\r\n".to_vec()));
        assert_eq!(
            parse(b"*2\r\n$1\r\nt\r\n:7\r\n"),
            Reply::Array(vec![Reply::Bulk(b"t".to_vec()), Reply::Int(7)])
        );
        assert_eq!(parse(b"-ERR x\r\n"), Reply::Error("ERR x".into()));
    }

    #[test]
    fn numbers_encode_in_decimal() {
        let mut out = Vec::new();
        push_number(&mut out, 0);
        push_number(&mut out, 1234);
        assert_eq!(out, b"0\r\n1234\r\n");
    }
}
