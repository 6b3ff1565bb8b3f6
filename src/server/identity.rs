//! Which server the module runs in, and what that server can be trusted to do.
//!
//! The module is one binary for Redis 7.0 to 8.x and Valkey 7.2 to 9.x. Where they
//! differ in something the module relies on, the difference is decided here, once, at
//! load: from the server's own name and version (`INFO server`) where a behaviour has no
//! API to probe, and from the presence of an API function everywhere else.

use std::fmt;

/// The server's family: Valkey reports a Redis-compatible `redis_version` too, so the
/// family decides which version number means what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Redis (`redis_version`).
    Redis,
    /// Valkey (`server_name:valkey`, `valkey_version`).
    Valkey,
}

/// A server's name and version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Server {
    /// Redis or Valkey.
    pub family: Family,
    /// `(major, minor, patch)` of the family's own version.
    pub version: (u32, u32, u32),
}

/// The oldest server of each family the module supports.
const MINIMUM_REDIS: (u32, u32, u32) = (7, 0, 0);
const MINIMUM_VALKEY: (u32, u32, u32) = (7, 2, 0);

/// Parses `major.minor.patch` (a missing part is 0; trailing text such as `-rc1` on the
/// last part is ignored).
pub fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let mut parts = text.trim().split('.').map(|part| {
        let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<u32>().ok()
    });
    let major = parts.next()??;
    let minor = parts.next().unwrap_or(Some(0))?;
    let patch = parts.next().unwrap_or(Some(0))?;
    Some((major, minor, patch))
}

impl Server {
    /// Identifies the server from the fields of `INFO server`: `valkey_version` if
    /// present (Valkey), else `redis_version`.
    pub fn identify(redis_version: Option<&str>, valkey_version: Option<&str>) -> Option<Self> {
        match valkey_version {
            Some(valkey) => Some(Self {
                family: Family::Valkey,
                version: parse_version(valkey)?,
            }),
            None => Some(Self {
                family: Family::Redis,
                version: parse_version(redis_version?)?,
            }),
        }
    }

    /// Why the module cannot run on this server, if it cannot: the module API it needs
    /// (key specs, argument redaction, the type callbacks it registers) is 7.0's.
    pub fn unsupported(&self) -> Option<String> {
        let minimum = match self.family {
            Family::Redis => MINIMUM_REDIS,
            Family::Valkey => MINIMUM_VALKEY,
        };
        (self.version < minimum).then(|| {
            format!(
                "this server is {self}; the lock module needs Redis 7.0 or newer, or Valkey 7.2 or newer"
            )
        })
    }

    /// The oldest server of this one's family that can hold a reply until replicas have
    /// a grant (`REPLICAS n`), if this one cannot: asking replicas to acknowledge needs a
    /// `WAIT` the module may block and abandon (`RedisModule_Call` with `K`,
    /// `CallReplyPromiseAbort`), Redis 7.2's; on Redis 7.0 a `WAIT` from a module blocks a
    /// client the module cannot unblock.
    pub fn replica_wait_needs(&self) -> Option<&'static str> {
        match self.family {
            Family::Redis if self.version < (7, 2, 0) => Some("Redis 7.2"),
            _ => None,
        }
    }

    /// Whether a blocked client the module has already answered (`UnblockClient`) is
    /// left alone by the server's timeout and `CLIENT UNBLOCK` until the answer is sent.
    /// Older servers run the timeout path over it: Redis 7.0 then drops the answer (the
    /// client hangs), Redis 7.2 and Valkey 7.2 assert and crash (fixed by redis#13015 in
    /// Redis 7.4, and in Valkey 8.0). Only where it is safe does the module let
    /// `CLIENT UNBLOCK` end a wait; its own timeouts never go through the server.
    pub fn unblock_is_safe(&self) -> bool {
        match self.family {
            Family::Redis => self.version >= (7, 4, 0),
            Family::Valkey => self.version >= (8, 0, 0),
        }
    }
}

impl Server {
    /// Whether a module may subscribe to the generic keyspace events (`rename_to`,
    /// `move_to`) without harm. Valkey 8.1 runs a module's notification callback on the
    /// client that ran the command and selects the event's database on it without
    /// selecting the client's own back, so a mere subscription leaves every client that
    /// runs `MOVE` or `COPY ... DB` in the other database (valkey#4024, fixed in 9.1.2).
    pub fn key_moves_can_be_followed(&self) -> bool {
        match self.family {
            Family::Redis => true,
            Family::Valkey => !((8, 1, 0)..(9, 1, 2)).contains(&self.version),
        }
    }
}

impl Server {
    /// What the server leaves out of `MEMORY USAGE` for a key of a module type, beside
    /// what it counts for a string key: its object and the module-value cell (16 bytes
    /// each) on Redis 7 and Valkey 8.0; on Redis 8, which counts both, the 8 bytes by
    /// which it counts a string key's object above a module key's; the cell on Valkey
    /// 8.1 and 9, whose objects hold the key and its expiry. Measured, and
    /// checked by `tests/server/keyspace.rs` on Redis 7.0.15 and 8.2.3 and Valkey 8.1.8 and
    /// 9.1.2.
    pub fn memory_usage_leaves_out(&self) -> usize {
        match self.family {
            Family::Redis if self.version >= (8, 0, 0) => 8,
            Family::Redis => 32,
            Family::Valkey if self.version >= (8, 1, 0) => 16,
            Family::Valkey => 32,
        }
    }
}

impl Server {
    /// Whether the server has atomic slot migration with a module opt-in (Valkey 9's
    /// `CLUSTER MIGRATESLOTS`, whose option bit no other server defines: Redis 8.4's own
    /// migration has no opt-in, and an unknown bit must not reach a server that may give
    /// it another meaning).
    pub fn has_atomic_slot_migration(&self) -> bool {
        self.family == Family::Valkey && self.version >= (9, 0, 0)
    }
}

impl fmt::Display for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.family {
            Family::Redis => "Redis",
            Family::Valkey => "Valkey",
        };
        let (major, minor, patch) = self.version;
        write!(f, "{name} {major}.{minor}.{patch}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redis(version: &str) -> Server {
        Server::identify(Some(version), None).unwrap()
    }

    fn valkey(version: &str) -> Server {
        Server::identify(Some("7.2.4"), Some(version)).unwrap()
    }

    #[test]
    fn key_moves_are_followed_except_where_a_subscription_breaks_move() {
        assert!(redis("7.0.15").key_moves_can_be_followed());
        assert!(redis("8.2.3").key_moves_can_be_followed());
        assert!(valkey("8.0.6").key_moves_can_be_followed());
        assert!(!valkey("8.1.0").key_moves_can_be_followed());
        assert!(!valkey("8.1.8").key_moves_can_be_followed());
        assert!(!valkey("9.0.3").key_moves_can_be_followed());
        assert!(valkey("9.1.2").key_moves_can_be_followed());
    }

    #[test]
    fn atomic_slot_migration_is_declared_on_valkey_9_only() {
        assert!(!redis("7.0.15").has_atomic_slot_migration());
        assert!(!redis("8.4.0").has_atomic_slot_migration());
        assert!(!valkey("8.1.8").has_atomic_slot_migration());
        assert!(valkey("9.0.0").has_atomic_slot_migration());
        assert!(valkey("9.1.2").has_atomic_slot_migration());
    }

    #[test]
    fn memory_usage_adds_what_each_server_leaves_out_of_a_module_key() {
        assert_eq!(redis("7.0.15").memory_usage_leaves_out(), 32);
        assert_eq!(redis("8.2.3").memory_usage_leaves_out(), 8);
        assert_eq!(valkey("8.0.6").memory_usage_leaves_out(), 32);
        assert_eq!(valkey("8.1.8").memory_usage_leaves_out(), 16);
        assert_eq!(valkey("9.1.2").memory_usage_leaves_out(), 16);
    }

    #[test]
    fn versions_parse_as_servers_write_them() {
        assert_eq!(parse_version("7.0.15"), Some((7, 0, 15)));
        assert_eq!(parse_version("8.2.3"), Some((8, 2, 3)));
        assert_eq!(parse_version("255.255.255"), Some((255, 255, 255)));
        assert_eq!(parse_version("8.0.0-rc1"), Some((8, 0, 0)));
        assert_eq!(parse_version("9"), Some((9, 0, 0)));
        assert_eq!(parse_version(""), None);
        assert_eq!(parse_version("x.1.2"), None);
    }

    #[test]
    fn valkey_is_known_by_its_own_version_not_the_compatible_one() {
        let server = valkey("9.1.2");
        assert_eq!(server.family, Family::Valkey);
        assert_eq!(server.version, (9, 1, 2));
        assert_eq!(server.to_string(), "Valkey 9.1.2");
        assert_eq!(redis("8.2.3").to_string(), "Redis 8.2.3");
        assert_eq!(Server::identify(None, None), None);
    }

    #[test]
    fn servers_older_than_the_minimum_are_refused_with_a_reason() {
        assert!(redis("7.0.0").unsupported().is_none());
        assert!(redis("8.2.3").unsupported().is_none());
        assert!(valkey("7.2.5").unsupported().is_none());
        let why = redis("6.2.14").unsupported().expect("refused");
        assert!(why.contains("Redis 6.2.14") && why.contains("7.0"), "{why}");
        assert!(valkey("7.0.0").unsupported().is_some());
    }

    #[test]
    fn client_unblock_is_trusted_from_redis_7_4_and_valkey_8() {
        assert!(!redis("7.0.15").unblock_is_safe());
        assert!(!redis("7.2.6").unblock_is_safe());
        assert!(redis("7.4.0").unblock_is_safe());
        assert!(redis("8.2.3").unblock_is_safe());
        assert!(!valkey("7.2.5").unblock_is_safe());
        assert!(valkey("8.0.0").unblock_is_safe());
        assert!(valkey("9.1.2").unblock_is_safe());
    }
}
