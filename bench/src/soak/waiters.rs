//! A crowd of blocked clients: `keys` keys, each held, and `per_key` clients on each
//! blocked in `LOCK.ACQUIRE ... WAIT`, one connection each. One waiter in ten gives up
//! (`WAIT 500`) while the keys are still held and must be answered nil; then the holders
//! release, and each grant holds for a few ms, so every queue drains in turn.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::resp::Conn;

/// The TTL of each key's first holder, which releases it long before.
const HOLD_MS: &str = "600000";
/// How long each waiter holds its grant.
const GRANT_TTL_MS: &str = "10";
/// The `WAIT` of a waiter that gives up before its turn.
const GIVE_UP_MS: &str = "500";

/// The blocked clients, still waiting.
pub struct Crowd {
    waiters: Vec<(TcpStream, bool)>,
    /// Each key and its first holder's token.
    holders: Vec<(String, Vec<u8>)>,
}

/// How the crowd was answered.
#[derive(Debug, Clone, Copy, Default)]
pub struct Answers {
    pub granted: usize,
    pub gave_up: usize,
    /// Replies that were neither what the waiter asked for nor nil in time.
    pub wrong: usize,
}

fn command(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len());
    for a in args {
        out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    out.into_bytes()
}

/// Holds `keys` keys and blocks `per_key` clients on each.
pub fn gather(admin: &mut Conn, port: u16, keys: usize, per_key: usize) -> io::Result<Crowd> {
    let mut holders = Vec::with_capacity(keys);
    for k in 0..keys {
        let key = format!("wq:{k}");
        let token = format!("holder-{k}");
        admin.cmd(&["LOCK.ACQUIRE", &key, HOLD_MS, "TOKEN", &token])?;
        holders.push((key, token.into_bytes()));
    }
    let mut waiters = Vec::with_capacity(keys * per_key);
    for i in 0..per_key {
        for k in 0..keys {
            let gives_up = i % 10 == 9;
            let wait = if gives_up { GIVE_UP_MS } else { "0" };
            let key = format!("wq:{k}");
            let mut stream = TcpStream::connect(("127.0.0.1", port))?;
            stream.write_all(&command(&[
                "LOCK.ACQUIRE",
                &key,
                GRANT_TTL_MS,
                "WAIT",
                wait,
            ]))?;
            waiters.push((stream, gives_up));
        }
    }
    Ok(Crowd { waiters, holders })
}

/// Reads one whole reply: nil, an error, or `[token, fence]`.
fn read_reply(stream: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut reply = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        match stream.read(&mut byte) {
            Ok(0) => return Err(io::Error::other("connection closed before the reply")),
            Ok(_) => {}
            // A signal came while the read waited (the process stopped and continued,
            // say): the read itself failed nothing; read again.
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        }
        reply.push(byte[0]);
        let lines = reply.windows(2).filter(|w| w == b"\r\n").count();
        let done = match reply[0] {
            b'*' if reply.starts_with(b"*2\r\n") => lines == 4,
            _ => lines == 1,
        };
        if done {
            return Ok(reply);
        }
    }
}

impl Crowd {
    /// How many wait until the holders release (those that do not give up).
    pub fn staying(&self) -> usize {
        self.waiters
            .iter()
            .filter(|(_, gives_up)| !gives_up)
            .count()
    }

    /// The first holders release their keys: the queues start to drain.
    pub fn release_holders(&self, admin: &mut Conn) -> io::Result<()> {
        for (key, token) in &self.holders {
            let released = admin
                .call(&[b"LOCK.RELEASE", key.as_bytes(), token])?
                .int()?;
            if released != 1 {
                return Err(io::Error::other(format!(
                    "{key} was not held by its holder"
                )));
            }
        }
        Ok(())
    }

    /// How many clients wait (or waited).
    pub fn len(&self) -> usize {
        self.waiters.len()
    }

    /// Whether there is nobody.
    pub fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }

    /// Reads every waiter's reply (each within `limit`), then closes the connections.
    pub fn answers(self, limit: Duration) -> io::Result<Answers> {
        let mut answers = Answers::default();
        for (mut stream, gives_up) in self.waiters {
            stream.set_read_timeout(Some(limit))?;
            let reply = read_reply(&mut stream)?;
            match (reply.starts_with(b"*2\r\n"), reply.as_slice(), gives_up) {
                (true, _, false) => answers.granted += 1,
                (false, b"*-1\r\n" | b"$-1\r\n", true) => answers.gave_up += 1,
                _ => answers.wrong += 1,
            }
        }
        Ok(answers)
    }
}
