//! The two things compared: the module's commands, and the recipe they replace
//! (`SET key token NX PX ttl` to acquire, a compare-and-delete Lua script to release).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::resp::{Conn, Reply};

/// The release script of the recipe, as found in the wild (and in Redis's docs).
pub const RELEASE_SCRIPT: &str = "if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end";

/// Which side of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Module,
    Recipe,
}

impl Side {
    /// Both sides, module first on even rounds and recipe first on odd ones, so that a
    /// drift of the machine (another job starting) does not always favour one side.
    pub fn alternating(round: usize) -> [Side; 2] {
        if round.is_multiple_of(2) {
            [Side::Module, Side::Recipe]
        } else {
            [Side::Recipe, Side::Module]
        }
    }

    /// A short name for keys and logs.
    pub fn tag(self) -> &'static str {
        match self {
            Side::Module => "module",
            Side::Recipe => "recipe",
        }
    }
}

/// Loads the release script, returning its SHA1 for `EVALSHA`.
pub fn load_script(conn: &mut Conn) -> io::Result<String> {
    conn.cmd(&["SCRIPT", "LOAD", RELEASE_SCRIPT])?.text()
}

/// Queues an acquire of `key` for `ttl` ms. The module makes its own token when `token`
/// is `None`; the recipe always needs one from the client.
pub fn queue_acquire(conn: &mut Conn, side: Side, key: &[u8], ttl: &[u8], token: Option<&[u8]>) {
    match (side, token) {
        (Side::Module, None) => conn.queue(&[b"LOCK.ACQUIRE", key, ttl]),
        (Side::Module, Some(t)) => conn.queue(&[b"LOCK.ACQUIRE", key, ttl, b"TOKEN", t]),
        (Side::Recipe, t) => {
            let t = t.expect("the recipe needs a client-made token");
            conn.queue(&[b"SET", key, t, b"NX", b"PX", ttl]);
        }
    }
}

/// Queues a release of `key` held with `token`.
pub fn queue_release(conn: &mut Conn, side: Side, sha: &[u8], key: &[u8], token: &[u8]) {
    match side {
        Side::Module => conn.queue(&[b"LOCK.RELEASE", key, token]),
        Side::Recipe => conn.queue(&[b"EVALSHA", sha, b"1", key, token]),
    }
}

/// The token of a granted acquire (the module's `[token, fence]`, the recipe's `OK`
/// with the token the client sent), `None` if the lock was busy.
pub fn granted(reply: Reply, sent_token: Option<&[u8]>) -> io::Result<Option<Vec<u8>>> {
    match reply.ok()? {
        Reply::Nil => Ok(None),
        Reply::Status(s) if s == "OK" => Ok(sent_token.map(<[u8]>::to_vec)),
        Reply::Array(mut parts) if parts.len() == 2 => match parts.swap_remove(0) {
            Reply::Bulk(token) => Ok(Some(token)),
            other => Err(crate::resp::unexpected("a token", &other)),
        },
        other => Err(crate::resp::unexpected("a grant or nil", &other)),
    }
}

/// Whether a release reply says the lock was released (`1`).
pub fn released(reply: Reply) -> io::Result<bool> {
    Ok(reply.ok()?.int()? == 1)
}

/// 32 lowercase hex characters, unique within the run, as a careful client would make
/// (the same shape as the module's own tokens). Not cryptographic: only the server's
/// cost is compared, and token making is never inside a timed loop.
pub fn token() -> Vec<u8> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut x = seed ^ SEQ.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
    let mut out = Vec::with_capacity(32);
    for _ in 0..2 {
        // splitmix64: a well-mixed 64-bit value per step.
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        out.extend_from_slice(format!("{z:016x}").as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_32_hex_characters_and_differ() {
        let a = token();
        let b = token();
        assert_eq!(a.len(), 32);
        assert!(
            a.iter()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_ne!(a, b);
    }

    #[test]
    fn rounds_alternate_which_side_goes_first() {
        assert_eq!(Side::alternating(0)[0], Side::Module);
        assert_eq!(Side::alternating(1)[0], Side::Recipe);
    }
}
