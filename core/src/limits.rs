//! The contract's limits on what a command may ask for: a leaf that the parser, the
//! error messages, the rules and the data type all read, and that imports nothing.

/// Largest `ttl-ms`, `timeout-ms` and `grace-ms`: 2^53 - 1 ms (about 285,000 years), the
/// largest integer a JavaScript number holds exactly, which `SET PX` accepts too: clients
/// pass it for "forever". The servers' timers (`now_us + ms * 1000`) still fit in 64 bits.
pub const MAX_TTL_MS: i64 = (1 << 53) - 1;
/// Largest token, in bytes.
pub const MAX_TOKEN_LEN: usize = 256;
/// Largest `VALUE v`, in bytes: a published value (a leader's address), no secret.
pub const MAX_VALUE_LEN: usize = 4096;
/// Largest `LIMIT n`: the most shared holders a semaphore may allow.
pub const MAX_LIMIT: u32 = 1_000_000;
/// The most keys one `LOCK.ACQUIREALL` takes.
pub const MAX_KEYS: usize = 64;
/// The most keys one `LOCK.CONTENDED` lists.
pub const MAX_CONTENDED: usize = 1000;
/// How many keys `LOCK.CONTENDED` lists without `COUNT`.
pub const DEFAULT_CONTENDED: usize = 10;
/// Largest `REPLICAS n`: the most replicas a grant may wait for.
pub const MAX_REPLICAS: u32 = 100;
/// The longest replica wait a command gets when it gives no `REPLTIMEOUT`: a tenth of
/// its TTL, at most this.
pub const MAX_DEFAULT_REPLTIMEOUT_MS: i64 = 1000;
