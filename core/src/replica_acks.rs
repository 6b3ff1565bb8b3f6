//! The acknowledgements a master heard from its replicas (`REPLCONF ACK <offset>`), per
//! replica connection, so that a held grant's reply is counted from what arrived
//! without reading `INFO replication` again. A connection is counted only once the
//! module has checked it is a replica's (any client with the rights may send
//! `REPLCONF ACK`; the server ignores it from a non-replica, and so does this).
//!
//! A connection that closed keeps its last offset here: harmless, because a grant's
//! target is the master's offset after the grant was replicated, above any offset
//! acknowledged before it. The record is emptied when the server's role changes (its
//! offsets may then start from another history) and when it grows past `MAX_CONNECTIONS`.

use std::collections::HashMap;

/// How many replica connections are remembered before the record starts over.
pub const MAX_CONNECTIONS: usize = 256;

/// What a connection is, as far as acknowledgements go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A replica's connection, with the highest offset it acknowledged.
    Replica(i64),
    /// Not a replica's: its `REPLCONF ACK`s count for nothing.
    Other,
}

/// The acknowledged offset of each replica connection heard from.
#[derive(Debug, Default)]
pub struct ReplicaAcks {
    connections: HashMap<u64, Kind>,
}

impl ReplicaAcks {
    /// Whether connection `client` still has to be checked before its acknowledgements
    /// count.
    pub fn unknown(&self, client: u64) -> bool {
        !self.connections.contains_key(&client)
    }

    /// Records what the check of connection `client` found.
    pub fn checked(&mut self, client: u64, replica: bool) {
        if self.connections.len() >= MAX_CONNECTIONS {
            self.connections.clear();
        }
        self.connections.entry(client).or_insert(if replica {
            Kind::Replica(0)
        } else {
            Kind::Other
        });
    }

    /// Records that connection `client` acknowledged `offset` (ignored for a connection
    /// not checked yet, or not a replica's; offsets only grow).
    pub fn acknowledged(&mut self, client: u64, offset: i64) {
        if let Some(Kind::Replica(last)) = self.connections.get_mut(&client) {
            *last = (*last).max(offset);
        }
    }

    /// How many replica connections acknowledged `target` or beyond.
    pub fn reaching(&self, target: i64) -> u32 {
        let reached = self
            .connections
            .values()
            .filter(|kind| matches!(kind, Kind::Replica(offset) if *offset >= target))
            .count();
        u32::try_from(reached).unwrap_or(u32::MAX)
    }

    /// Forgets every connection (the server's role changed).
    pub fn clear(&mut self) {
        self.connections.clear();
    }
}

/// The offset of a `REPLCONF ACK <offset> ...` command's arguments, `None` for any other
/// command (or an offset that does not parse).
pub fn ack_offset(args: &[&[u8]]) -> Option<i64> {
    match args {
        [command, sub, offset, ..]
            if command.eq_ignore_ascii_case(b"REPLCONF") && sub.eq_ignore_ascii_case(b"ACK") =>
        {
            std::str::from_utf8(offset).ok()?.parse().ok()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_checked_replica_connections_count_with_their_highest_offset() {
        let mut acks = ReplicaAcks::default();
        acks.acknowledged(1, 500);
        assert_eq!(acks.reaching(100), 0, "not checked yet");
        assert!(acks.unknown(1));
        acks.checked(1, true);
        acks.checked(2, false);
        acks.checked(3, true);
        acks.acknowledged(1, 500);
        acks.acknowledged(2, 900);
        acks.acknowledged(3, 400);
        acks.acknowledged(3, 300);
        assert!(!acks.unknown(2));
        assert_eq!(acks.reaching(400), 2);
        assert_eq!(acks.reaching(401), 1);
        assert_eq!(
            acks.reaching(501),
            0,
            "a non-replica's 900 counts for nothing"
        );
        acks.clear();
        assert_eq!(acks.reaching(0), 0);
        assert!(acks.unknown(1));
    }

    #[test]
    fn the_record_starts_over_when_it_grows_too_large() {
        let mut acks = ReplicaAcks::default();
        for client in 0..MAX_CONNECTIONS as u64 {
            acks.checked(client, true);
        }
        acks.checked(10_000, true);
        assert!(acks.unknown(0));
        assert!(!acks.unknown(10_000));
    }

    #[test]
    fn the_offset_comes_from_replconf_ack_only() {
        assert_eq!(ack_offset(&[b"REPLCONF", b"ACK", b"1234"]), Some(1234));
        assert_eq!(
            ack_offset(&[b"replconf", b"ack", b"77", b"FACK", b"70"]),
            Some(77)
        );
        assert_eq!(ack_offset(&[b"REPLCONF", b"GETACK", b"*"]), None);
        assert_eq!(ack_offset(&[b"REPLCONF", b"ACK"]), None);
        assert_eq!(ack_offset(&[b"REPLCONF", b"ACK", b"x"]), None);
        assert_eq!(ack_offset(&[b"SET", b"k", b"v"]), None);
    }
}
