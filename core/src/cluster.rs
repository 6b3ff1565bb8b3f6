//! Where a key lives in a Redis Cluster, for grants made outside a command: the hash
//! slot of a key, and the route of a slot read from the text of `CLUSTER NODES` (the
//! module's `keyspace/routing.rs` asks the server for it).
//!
//! The server redirects commands itself (`MOVED`, `ASK`), but a waiter's grant is made
//! long after its command passed the server's checks: when the lock is freed. When the
//! key has just left this node (`MIGRATE` during a reshard deletes it here), granting
//! here would create a second lock beside the migrated one. So in cluster mode the grant
//! first asks where the key's slot is served, and a waiter whose key moved is redirected
//! the way the server redirects any command: `ASK` while the slot migrates, `MOVED` once
//! it has.

/// Where the key of a waiter is served now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Here: grant it.
    Local,
    /// The slot is migrating to this node, where the key (absent here) now lives.
    Ask(u16, String),
    /// The slot is served by this other node.
    Moved(u16, String),
    /// Nobody serves the slot.
    Down(u16),
}

/// The hash slot of `key`, as every cluster node computes it: CRC16 (XMODEM) of the key,
/// or of its hash tag (the part between the first `{` and the next `}`, when not
/// empty), modulo 16384.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    crc16(hashed) & 0x3fff
}

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), the cluster's key hash.
fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &byte| {
        (0..8).fold(crc ^ (u16::from(byte) << 8), |crc, _| {
            if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            }
        })
    })
}

/// The route of `slot` given the text of `CLUSTER NODES`.
pub fn route_in(nodes: &str, slot: u16) -> Route {
    let nodes: Vec<Node> = nodes.lines().filter_map(Node::parse).collect();
    let address = |id: &str| {
        nodes
            .iter()
            .find(|node| node.id == id)
            .map(|node| node.addr.clone())
    };
    let Some(me) = nodes.iter().find(|node| node.myself) else {
        return Route::Local;
    };
    if me.serves(slot) {
        return match me.migrating.iter().find(|(s, _)| *s == slot) {
            Some((_, to)) => address(to).map_or(Route::Local, |addr| Route::Ask(slot, addr)),
            None => Route::Local,
        };
    }
    if me.importing.contains(&slot) {
        return Route::Local;
    }
    match nodes.iter().find(|node| node.serves(slot)) {
        Some(owner) => Route::Moved(slot, owner.addr.clone()),
        None => Route::Down(slot),
    }
}

/// One line of `CLUSTER NODES`.
#[derive(Debug)]
struct Node {
    id: String,
    addr: String,
    myself: bool,
    ranges: Vec<(u16, u16)>,
    migrating: Vec<(u16, String)>,
    importing: Vec<u16>,
}

impl Node {
    /// `<id> <ip:port@cport[,hostname]> <flags> <master> <ping> <pong> <epoch> <link> <slot>...`
    fn parse(line: &str) -> Option<Self> {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 8 {
            return None;
        }
        let addr = fields[1].split(['@', ',']).next()?.to_string();
        let mut node = Node {
            id: fields[0].to_string(),
            addr,
            myself: fields[2].split(',').any(|flag| flag == "myself"),
            ranges: Vec::new(),
            migrating: Vec::new(),
            importing: Vec::new(),
        };
        for slot in &fields[8..] {
            if let Some(inner) = slot.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
                if let Some((from, to)) = inner.split_once("->-") {
                    node.migrating.push((from.parse().ok()?, to.to_string()));
                } else if let Some((at, _)) = inner.split_once("-<-") {
                    node.importing.push(at.parse().ok()?);
                }
            } else if let Some((start, end)) = slot.split_once('-') {
                node.ranges.push((start.parse().ok()?, end.parse().ok()?));
            } else {
                let single = slot.parse().ok()?;
                node.ranges.push((single, single));
            }
        }
        Some(node)
    }

    fn serves(&self, slot: u16) -> bool {
        self.ranges
            .iter()
            .any(|&(start, end)| (start..=end).contains(&slot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_slots_are_the_clusters() {
        // The check value of CRC16/XMODEM, and slots `CLUSTER KEYSLOT` gives.
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b""), 0);
        // Hash tags: the first {...} with something inside decides.
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
    }

    const NODES: &str = "\
a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460 [100->-b2]
b2 127.0.0.1:7002@17002 master - 0 1700000000000 2 connected 5461-10922 [200-<-a1]
c3 127.0.0.1:7003@17003,host.example master - 0 1700000000000 3 connected 10923-16000 16383
d4 127.0.0.1:7004@17004 slave a1 0 1700000000000 1 connected
";

    #[test]
    fn own_slots_are_local() {
        assert_eq!(route_in(NODES, 0), Route::Local);
        assert_eq!(route_in(NODES, 5460), Route::Local);
    }

    #[test]
    fn a_migrating_slot_asks_the_target() {
        assert_eq!(
            route_in(NODES, 100),
            Route::Ask(100, "127.0.0.1:7002".into())
        );
        assert_eq!(
            route_in(NODES, 100).redirect().unwrap().to_string(),
            "ASK 100 127.0.0.1:7002"
        );
    }

    #[test]
    fn other_nodes_slots_are_moved() {
        assert_eq!(
            route_in(NODES, 6000),
            Route::Moved(6000, "127.0.0.1:7002".into())
        );
        assert_eq!(
            route_in(NODES, 16383),
            Route::Moved(16383, "127.0.0.1:7003".into())
        );
    }

    #[test]
    fn unserved_slots_are_down() {
        assert_eq!(route_in(NODES, 16100), Route::Down(16100));
        assert!(
            route_in(NODES, 16100)
                .redirect()
                .unwrap()
                .to_string()
                .starts_with("CLUSTERDOWN")
        );
    }

    #[test]
    fn without_myself_everything_is_local() {
        assert_eq!(route_in("", 5), Route::Local);
    }
}
