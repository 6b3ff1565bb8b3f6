//! A grant request: everything a grant is given, named. The module's `keyspace/store.rs`
//! writes it (fence, expiry, replication, events); a caller of `LOCK.ACQUIRE` and a
//! waiter at the head of a queue make one alike.

use crate::key::KeyRef;
use crate::lock::{NewToken, Session};
use crate::rules::Kind;

/// What a grant is for: which key, to which token, how it is held and for how long, for
/// which connection, bound how, publishing what.
#[derive(Debug, Clone)]
pub struct GrantRequest<'a> {
    /// The key granted.
    pub key: KeyRef<'a>,
    /// The token that will hold it: made by the server, or the caller's.
    pub token: NewToken<'a>,
    /// Exclusive, or shared (with the limit the holders agree on).
    pub kind: Kind,
    /// How long the grant lasts, in ms.
    pub ttl_ms: i64,
    /// The `CLIENT ID` of the connection it is granted to (0: none, inside a script),
    /// which `LOCK.HOLDERS` names.
    pub client: u64,
    /// The binding `SESSION` asks for.
    pub session: Option<Session>,
    /// The value `VALUE` publishes.
    pub value: Option<&'a [u8]>,
}
