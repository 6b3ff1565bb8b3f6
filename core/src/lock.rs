//! The state of a lock (a lock kept in a cell is read through `cell_ref.rs`). Who may be
//! granted it is `rules.rs`.
//!
//! The key's expiry is the server's own; it is not stored here. What a key holds is the
//! token that proves ownership, the fence granted with it, when it was granted and, for a
//! session-bound lock, the connection it is bound to.

use crate::cell_ref::CellRef;
use crate::connections;
use crate::fence::{LOGICAL_BITS, MAX_FENCE};
use crate::limits::MAX_TOKEN_LEN;
use crate::token::{self, TokenText};

/// The value of a lock key: 24 bytes. The common lock (a server-made token, or any token
/// of 32 lowercase hexadecimal digits, not session-bound, granted in the millisecond its
/// fence names) is kept whole inside them: one allocation that glibc's malloc (the
/// Valkey builds) serves from its 32-byte chunks, where 32 bytes took 48, and jemalloc
/// from its 32-byte class. Any other lock keeps one allocation of its own beside them,
/// except the common session-bound lock in the keyspace, which shares one block with its
/// value (`ffi/cell.rs`).
///
/// A lock also names the connection it was granted to on this server (or that
/// re-acquired it last): its `CLIENT ID`, for `LOCK.HOLDERS`; 0 when it arrived from
/// elsewhere (loading, replication, `RESTORE`, a slot move) or was granted inside a
/// script. It means nothing to another server, so it is neither saved nor replicated,
/// and two locks that differ only in it are equal. A compact lock keeps a slot number for
/// it in its spare bits (`connections.rs`), a boxed one the id, a cell its binding's.
#[derive(Debug)]
pub struct LockState {
    /// The token (the secret that proves ownership; never shown to anyone but the
    /// holder), the grant's fence and time, the binding and the connection.
    store: Store,
}

/// How a lock is kept: exactly one form for each lock outside the keyspace. (In the
/// keyspace, a lock that `BoundLock::of` describes is kept in a cell; locks compare by
/// what they hold, whatever their form.)
#[derive(Debug)]
enum Store {
    /// The token's 16 bytes and the fence; the grant time is the fence's wall-clock part
    /// (`fence >> LOGICAL_BITS`). The slot naming the holder's connection is the mark's
    /// value times 8 plus the fence bytes' top 3 bits (a fence has 53). The mark's spare
    /// values are where the compiler keeps which form this is, and `LockValue`'s kind, so
    /// that neither grows.
    Compact {
        mark: Mark,
        fence: [u8; 7],
        bytes: [u8; 16],
    },
    /// Everything in one allocation: a header (flags, grant time, fence), the connection's
    /// id when it has one, the token (its 16 bytes when packed, else as given), then the
    /// binding when bound, and the value.
    Boxed(Box<[u8]>),
    /// A session-bound lock in the keyspace, kept beside its value in one block (a cell).
    /// Only a cell makes this form, and only a shared borrow reaches it: a copy of it is
    /// boxed.
    Cell(CellRef<BoundLock>),
}

/// The common session-bound lock, as a cell keeps it beside its value: a packed token,
/// a fence that names its grant time (as a compact lock's), and the binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BoundLock {
    /// The grant's fence; the grant time is `fence >> LOGICAL_BITS`.
    pub fence: u64,
    /// The 16 bytes the token's 32 hexadecimal digits spell.
    pub token: [u8; 16],
    /// The binding.
    pub session: Session,
}

impl BoundLock {
    /// The cell form of a lock granted to `token` with `fence` at `acquired_ms`, bound as
    /// `session`: `None` unless it is bound, its token packs and its fence names its
    /// grant time.
    pub fn of(
        token: &NewToken,
        fence: u64,
        acquired_ms: i64,
        session: Option<Session>,
    ) -> Option<Self> {
        let session = session?;
        let token = match token {
            NewToken::Made(bytes) => *bytes,
            NewToken::Given(text) => token::packed(text)?,
        };
        (fence <= MAX_FENCE && u64::try_from(acquired_ms) == Ok(fence >> LOGICAL_BITS)).then_some(
            BoundLock {
                fence,
                token,
                session,
            },
        )
    }
}

mod mark;
use mark::Mark;

/// The fence bits of a compact lock's seven fence bytes; the 3 above carry the low bits
/// of its connection's slot.
const FENCE_BITS: u64 = (1 << 53) - 1;

// Every slot the table hands out has a mark: the slot is the mark's value times 8 plus
// 3 fence bits.
const _: () = assert!(connections::SLOTS as usize == mark::COUNT * 8);

/// A compact lock's mark and fence bytes for `fence` and connection slot `slot`.
fn compact_parts(fence: u64, slot: u16) -> (Mark, [u8; 7]) {
    let slot = usize::from(slot);
    // Slots stop below `mark::COUNT * 8` (asserted above).
    let mark = Mark::of(slot >> 3).unwrap_or(Mark::M0);
    let low = (slot & 7) as u64;
    (mark, seven((fence & FENCE_BITS) | (low << 53)))
}

/// The connection slot a compact lock keeps in its mark and fence bytes.
fn compact_slot(mark: Mark, fence: &[u8; 7]) -> u16 {
    ((mark.value() << 3) | (from_seven(fence) >> 53) as usize) as u16
}

/// Header of a boxed lock: flags (1 byte), grant time (7 bytes), fence (8 bytes).
const HEADER: usize = 16;
/// The token is kept as the 16 bytes its 32 hexadecimal digits spell.
const PACKED: u8 = 1;
/// A binding follows the token.
const BOUND: u8 = 2;
/// A published value (`VALUE v`) follows the binding, then its length in two bytes.
const VALUED: u8 = 4;
/// The `CLIENT ID` of the lock's connection follows the header (8 bytes).
const NAMED: u8 = 8;

/// Where a boxed lock's token starts: after the header and, if named, the connection.
fn token_start(flags: u8) -> usize {
    HEADER + if flags & NAMED != 0 { 8 } else { 0 }
}
/// Bytes of a binding after the token: the grace, then the connection id.
const SESSION_BYTES: usize = 16;

/// The binding's bytes: the grace, then the connection id.
fn binding_bytes(session: Session) -> [u8; SESSION_BYTES] {
    let mut bytes = [0u8; SESSION_BYTES];
    bytes[..8].copy_from_slice(&session.grace_ms.to_le_bytes());
    bytes[8..].copy_from_slice(&session.client.to_le_bytes());
    bytes
}

/// A lock's binding to its holder's connection: when that connection closes, the lock is
/// released `grace_ms` later unless its holder reclaims it first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Session {
    /// How long the lock outlives its connection, in ms (Chubby's lock-delay).
    pub grace_ms: i64,
    /// The server's id of the bound connection; 0 when the lock came from elsewhere (a
    /// restart, a master, another server) and so has no connection here.
    pub client: u64,
}

/// The low seven bytes of `n`, little-endian (fences and times stay below 2^53).
fn seven(n: u64) -> [u8; 7] {
    let mut kept = [0u8; 7];
    kept.copy_from_slice(&n.to_le_bytes()[..7]);
    kept
}

/// The number seven little-endian bytes spell.
fn from_seven(kept: &[u8]) -> u64 {
    let mut bytes = [0u8; 8];
    bytes[..7].copy_from_slice(&kept[..7]);
    u64::from_le_bytes(bytes)
}

impl Clone for LockState {
    /// A copy that owns what it keeps (a cell's lock is boxed), and names the same
    /// connection.
    fn clone(&self) -> Self {
        let store = match &self.store {
            Store::Compact { mark, fence, bytes } => {
                let slot = compact_slot(*mark, fence);
                if slot != 0 {
                    connections::retain(slot);
                }
                Store::Compact {
                    mark: *mark,
                    fence: *fence,
                    bytes: *bytes,
                }
            }
            Store::Boxed(data) => Store::Boxed(data.clone()),
            Store::Cell(_) => {
                return LockState::build(
                    &self.token(),
                    self.fence(),
                    self.acquired_ms(),
                    self.session(),
                    None,
                    self.client(),
                );
            }
        };
        LockState { store }
    }
}

impl Drop for LockState {
    /// A compact lock no longer names its connection's slot.
    fn drop(&mut self) {
        if let Store::Compact { mark, fence, .. } = &self.store {
            let slot = compact_slot(*mark, fence);
            if slot != 0 {
                connections::release(slot);
            }
        }
    }
}

impl PartialEq for LockState {
    /// Locks are equal when they hold the same: token, fence, grant time and binding.
    fn eq(&self, other: &Self) -> bool {
        *self.token() == *other.token()
            && self.fence() == other.fence()
            && self.acquired_ms() == other.acquired_ms()
            && self.session() == other.session()
            && self.value() == other.value()
    }
}

impl Eq for LockState {}

impl LockState {
    /// The lock a cell keeps beside its value, in `cell` (see `ffi/cell.rs`).
    pub fn in_cell(cell: CellRef<BoundLock>) -> Self {
        LockState {
            store: Store::Cell(cell),
        }
    }

    /// The `CLIENT ID` of the connection granted the lock here (or that re-acquired it
    /// last); 0 when it came from elsewhere.
    pub fn client(&self) -> u64 {
        match &self.store {
            Store::Compact { mark, fence, .. } => match compact_slot(*mark, fence) {
                0 => 0,
                slot => connections::client_of(slot),
            },
            Store::Boxed(data) if data[0] & NAMED != 0 => {
                let mut id = [0u8; 8];
                id.copy_from_slice(&data[HEADER..HEADER + 8]);
                u64::from_le_bytes(id)
            }
            Store::Boxed(_) => 0,
            // A cell names its binding's connection.
            Store::Cell(cell) => cell.get().session.client,
        }
    }

    /// Records that the connection `client` holds the lock now (a re-acquire).
    pub fn set_client(&mut self, client: u64) {
        if self.client() == client {
            return;
        }
        let renamed = LockState::build(
            &self.token(),
            self.fence(),
            self.acquired_ms(),
            self.session(),
            self.value(),
            client,
        );
        *self = renamed;
    }

    /// Whether this lock is the one a cell keeps beside its value.
    pub fn is_in_cell(&self) -> bool {
        matches!(self.store, Store::Cell(_))
    }

    /// The cell form of this lock, if it has one (see `BoundLock::of`).
    #[inline]
    pub fn cell_form(&self) -> Option<BoundLock> {
        match &self.store {
            Store::Compact { .. } => None,
            Store::Cell(cell) => Some(*cell.get()),
            // A cell keeps no published value.
            Store::Boxed(_) if self.value().is_some() => None,
            // A cell names its bound connection as the lock's client.
            Store::Boxed(_) => BoundLock::of(
                &NewToken::Given(&self.token()),
                self.fence(),
                self.acquired_ms(),
                Some(self.session()?),
            )
            .filter(|bound| bound.session.client == self.client()),
        }
    }

    /// A lock held by `token`, granted with `fence` at `acquired_ms`, bound as `session`.
    pub fn new(token: &[u8], fence: u64, acquired_ms: i64, session: Option<Session>) -> Self {
        LockState::build(token, fence, acquired_ms, session, None, 0)
    }

    /// As `new`, publishing `value` (`VALUE v`; `None`: no value, which costs nothing).
    #[cfg(test)]
    pub fn with_value(
        token: &[u8],
        fence: u64,
        acquired_ms: i64,
        session: Option<Session>,
        value: Option<&[u8]>,
    ) -> Self {
        LockState::build(token, fence, acquired_ms, session, value, 0)
    }

    /// A lock as `new` makes it, publishing `value` (`VALUE v`; `None`: no value, which
    /// costs nothing) and naming the connection `client` (0: none), in the smallest form
    /// that keeps it all.
    fn build(
        token: &[u8],
        fence: u64,
        acquired_ms: i64,
        session: Option<Session>,
        value: Option<&[u8]>,
        client: u64,
    ) -> Self {
        match (token::packed(token), value) {
            (Some(bytes), None) => LockState::packed(bytes, fence, acquired_ms, session, client),
            (Some(bytes), Some(value)) => LockState::boxed(
                PACKED,
                &bytes,
                (fence, acquired_ms),
                session,
                Some(value),
                client,
            ),
            (None, value) => {
                LockState::boxed(0, token, (fence, acquired_ms), session, value, client)
            }
        }
    }

    /// A lock whose token is the 32 hexadecimal digits that `bytes` spell, naming the
    /// connection `client`: compact when it can be (a free slot for the connection).
    fn packed(
        bytes: [u8; 16],
        fence: u64,
        acquired_ms: i64,
        session: Option<Session>,
        client: u64,
    ) -> Self {
        let fence = fence.min(MAX_FENCE);
        if session.is_none() && u64::try_from(acquired_ms) == Ok(fence >> LOGICAL_BITS) {
            let slot = if client == 0 {
                Some(0)
            } else {
                connections::take(client)
            };
            if let Some(slot) = slot {
                let (mark, fence) = compact_parts(fence, slot);
                return LockState {
                    store: Store::Compact { mark, fence, bytes },
                };
            }
        }
        LockState::boxed(PACKED, &bytes, (fence, acquired_ms), session, None, client)
    }

    /// A lock in one allocation of its own: header, connection, `token` (as kept),
    /// binding, value and its length.
    fn boxed(
        flags: u8,
        token: &[u8],
        (fence, acquired_ms): (u64, i64),
        session: Option<Session>,
        value: Option<&[u8]>,
        client: u64,
    ) -> Self {
        let flags = flags
            | if session.is_some() { BOUND } else { 0 }
            | if value.is_some() { VALUED } else { 0 }
            | if client != 0 { NAMED } else { 0 };
        let mut header = [0u8; HEADER];
        header[0] = flags;
        header[1..8].copy_from_slice(&seven(acquired_ms.clamp(0, MAX_TIME_MS) as u64));
        header[8..].copy_from_slice(&fence.min(MAX_FENCE).to_le_bytes());
        let named = client.to_le_bytes();
        let named: &[u8] = if client != 0 { &named } else { &[] };
        let data: Box<[u8]> = match (session, <&[u8; 16]>::try_from(token), value) {
            // The common session-bound lock (a packed token), written whole in place:
            // one allocation of its exact size, with no length checked per piece.
            (Some(session), Ok(token), None) if client == 0 => {
                let mut data = [0u8; HEADER + 16 + SESSION_BYTES];
                data[..HEADER].copy_from_slice(&header);
                data[HEADER..HEADER + 16].copy_from_slice(token);
                data[HEADER + 16..].copy_from_slice(&binding_bytes(session));
                Box::new(data)
            }
            (_, _, None) => {
                let binding = session.map(binding_bytes);
                let binding: &[u8] = binding.as_ref().map_or(&[], |b| &b[..]);
                [&header[..], named, token, binding]
                    .concat()
                    .into_boxed_slice()
            }
            (_, _, Some(value)) => {
                let binding = session.map(binding_bytes);
                let binding: &[u8] = binding.as_ref().map_or(&[], |b| &b[..]);
                // At most 4096 bytes (the parser's and the loaders' limit).
                let len = u16::try_from(value.len()).unwrap_or(u16::MAX).to_le_bytes();
                [&header[..], named, token, binding, value, &len]
                    .concat()
                    .into_boxed_slice()
            }
        };
        LockState {
            store: Store::Boxed(data),
        }
    }

    /// Where a boxed lock's value starts (its end when it has none), and the value.
    fn value_split(data: &[u8]) -> (usize, Option<&[u8]>) {
        let n = data.len();
        if data[0] & VALUED == 0 {
            return (n, None);
        }
        let len = usize::from(u16::from_le_bytes([data[n - 2], data[n - 1]]));
        let start = n - 2 - len;
        (start, Some(&data[start..n - 2]))
    }

    /// The flags, and the kept token, of a boxed lock.
    fn boxed_parts(data: &[u8]) -> (u8, &[u8]) {
        let flags = data[0];
        let (end, _) = LockState::value_split(data);
        let end = end - if flags & BOUND != 0 { SESSION_BYTES } else { 0 };
        (flags, &data[token_start(flags)..end])
    }

    /// The published value (`VALUE v`), if the grant has one.
    pub fn value(&self) -> Option<&[u8]> {
        match &self.store {
            Store::Boxed(data) => LockState::value_split(data).1,
            Store::Compact { .. } | Store::Cell(_) => None,
        }
    }

    /// Publishes `value` (`None`: removes the published value).
    pub fn set_value(&mut self, value: Option<&[u8]>) {
        if self.value() == value {
            return;
        }
        *self = LockState::build(
            &self.token(),
            self.fence(),
            self.acquired_ms(),
            self.session(),
            value,
            self.client(),
        );
    }

    /// The token that holds the lock.
    pub fn token(&self) -> TokenText<'_> {
        match &self.store {
            Store::Compact { bytes, .. } => TokenText::Spelled(token::spelled(bytes)),
            Store::Boxed(data) => match LockState::boxed_parts(data) {
                (flags, kept) if flags & PACKED != 0 => {
                    let mut bytes = [0u8; 16];
                    bytes.copy_from_slice(kept);
                    TokenText::Spelled(token::spelled(&bytes))
                }
                (_, kept) => TokenText::Kept(kept),
            },
            Store::Cell(cell) => TokenText::Spelled(token::spelled(&cell.get().token)),
        }
    }

    /// Whether `token` is the one that holds the lock.
    pub fn holds(&self, token: &[u8]) -> bool {
        match &self.store {
            Store::Compact { bytes, .. } => {
                token::packed(token).is_some_and(|given| given == *bytes)
            }
            Store::Boxed(data) => match LockState::boxed_parts(data) {
                (flags, kept) if flags & PACKED != 0 => {
                    token::packed(token).is_some_and(|given| given[..] == *kept)
                }
                (_, kept) => kept == token,
            },
            Store::Cell(cell) => {
                token::packed(token).is_some_and(|given| given == cell.get().token)
            }
        }
    }

    /// The fence of this grant.
    pub fn fence(&self) -> u64 {
        match &self.store {
            Store::Compact { fence, .. } => from_seven(fence) & FENCE_BITS,
            Store::Boxed(data) => {
                let mut bytes = [0u8; 8];
                bytes.copy_from_slice(&data[8..HEADER]);
                u64::from_le_bytes(bytes)
            }
            Store::Cell(cell) => cell.get().fence,
        }
    }

    /// Unix time in ms when the lock was granted.
    pub fn acquired_ms(&self) -> i64 {
        let ms = match &self.store {
            Store::Compact { fence, .. } => (from_seven(fence) & FENCE_BITS) >> LOGICAL_BITS,
            Store::Boxed(data) => from_seven(&data[1..8]),
            Store::Cell(cell) => cell.get().fence >> LOGICAL_BITS,
        };
        // Below 2^53 either way.
        ms as i64
    }

    /// The connection the lock is bound to (`SESSION grace-ms`), if any.
    pub fn session(&self) -> Option<Session> {
        let data = match &self.store {
            Store::Boxed(data) => data,
            Store::Cell(cell) => return Some(cell.get().session),
            Store::Compact { .. } => return None,
        };
        if data[0] & BOUND == 0 {
            return None;
        }
        let (end, _) = LockState::value_split(data);
        let binding = &data[end - SESSION_BYTES..end];
        let (grace, client) = binding.split_at(8);
        Some(Session {
            grace_ms: i64::from_le_bytes(grace.try_into().ok()?),
            client: u64::from_le_bytes(client.try_into().ok()?),
        })
    }

    /// The grace of a session-bound lock, `None` for a plain one.
    pub fn grace_ms(&self) -> Option<i64> {
        self.session().map(|s| s.grace_ms)
    }

    /// Binds the lock as `session`, or unbinds it (`None`).
    pub fn set_session(&mut self, session: Option<Session>) {
        if session.is_none() && self.session().is_none() {
            // A plain lock stays as it is: no allocation on the common path.
            return;
        }
        let value = self.value().map(<[u8]>::to_vec);
        let rebound = LockState::build(
            &self.token(),
            self.fence(),
            self.acquired_ms(),
            session,
            value.as_deref(),
            self.client(),
        );
        *self = rebound;
    }

    /// The bytes the lock keeps on the heap beside its value: none for a compact lock.
    pub fn heap_bytes(&self) -> usize {
        match &self.store {
            // A cell's lock is in its value's own block.
            Store::Compact { .. } | Store::Cell(_) => 0,
            Store::Boxed(data) => data.len(),
        }
    }

    /// The start of the allocation the lock keeps on the heap (see `heap_bytes`), if it
    /// keeps one: what the allocator really set aside for it is asked of the allocator.
    pub fn heap_start(&self) -> Option<*const u8> {
        match &self.store {
            Store::Compact { .. } | Store::Cell(_) => None,
            // Never empty: the header alone is 16 bytes.
            Store::Boxed(data) => Some(data.as_ptr()),
        }
    }
}

/// The latest grant time a lock may carry: 2^53 - 1 ms, as fences (about 285,000 years).
pub const MAX_TIME_MS: i64 = (1 << 53) - 1;

/// Whether a token, fence and grant time that come from outside (a `RESTORE` payload, an
/// RDB file, `LOCK._SET`) are within the contract: a token of 1 to 256 bytes, a fence from
/// 1 to 2^53 - 1, a grant time from 0 to `MAX_TIME_MS`. Anything else is refused, not
/// loaded.
pub fn in_contract(token: &[u8], fence: u64, acquired_ms: i64) -> bool {
    (1..=MAX_TOKEN_LEN).contains(&token.len())
        && (1..=MAX_FENCE).contains(&fence)
        && (0..=MAX_TIME_MS).contains(&acquired_ms)
}

mod new_token;
pub use new_token::{NewToken, token_buffer};
#[cfg(test)]
pub use new_token::{is_held_by, new_token};

#[cfg(test)]
mod tests;
