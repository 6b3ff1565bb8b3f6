//! The module's data type: how a lock is saved, loaded, rewritten into the AOF,
//! measured, digested, copied and freed.
//!
//! Encoding version 3 starts with the value's kind. An exclusive lock is then stored as
//! version 2 stored every lock: the token, the fence, the grant time and the session
//! binding (grace, connection id, and the id of the server process that wrote it, so
//! that only a `RESTORE` on that same running server keeps the connection). Shared
//! holders are stored as their limit, their count and each holder as an exclusive lock
//! followed by its own expiry. Version 4 adds, after an exclusive lock, its published
//! value (`VALUE v`): a flag, 1 with the value following, 0 without. Version 3 (before
//! values), version 2 (before shared holders) and version 1 (before sessions, the first
//! three fields) still load. The expiry is the key's
//! own and the server stores it. `rdb_load` refuses versions it does not know rather
//! than guess. The fencing clock's high-water mark travels as auxiliary data
//! before the keys, so that a restart or full sync never hands out a smaller fence.

use std::marker::PhantomData;

use redis_module::native_types::RedisType;

use crate::ffi::value_type::{self, AofOut, Digest, RdbIn, RdbOut, ValueType};
use crate::ffi::{self, Key, cell};
use lock_core::bindings;
use lock_core::error::Error;
use lock_core::fence;
use lock_core::footprint;
use lock_core::holders::{Holder, Holders};
use lock_core::key::KeyRef;
use lock_core::limits::{MAX_LIMIT, MAX_TTL_MS, MAX_VALUE_LEN};
use lock_core::lock::{self, BoundLock, LockState, Session};
use lock_core::stats;
use lock_core::value::LockValue;

/// The type's name as `TYPE` shows it (exactly nine characters).
pub const TYPE_NAME: &str = "redislock";
pub mod events;

pub use events::KeyEvents;

/// The current encoding version of a lock value and of the auxiliary data.
pub const ENCODING_VERSION: i32 = 4;

/// Version 3's first field: the value's kind.
const EXCLUSIVE: u64 = 0;
const SHARED: u64 = 1;
/// What version 3 stores for shared holders without a limit.
const NO_LIMIT: i64 = -1;

/// Version 4's flag after an exclusive lock: whether a published value follows.
const NO_VALUE: u64 = 0;
const HAS_VALUE: u64 = 1;

/// What a version 2 value stores for a lock that is not session-bound.
const NO_SESSION: i64 = -1;

/// The type to register, whose callbacks tell `E` what they learn of lock keys
/// (`lib.rs` names the keyspace's).
pub const fn lock_type<E: KeyEvents>() -> RedisType {
    RedisType::new(
        TYPE_NAME,
        ENCODING_VERSION,
        value_type::methods::<LockType<E>>(),
    )
}

/// Hands the registered type down to the FFI layer, whose keys then read and write its
/// values as `LockValue`s (at load, after the server created the type).
pub fn register(registered: &RedisType) -> bool {
    ffi::register_value_type(*registered.raw_type.borrow())
}

/// A key read and written as a lock: the data type's view of an `ffi::Key`.
pub trait LockKey {
    /// What the key holds: `None` if it does not exist, `WRONGTYPE` if it holds
    /// something else.
    fn lock(&self) -> Result<Option<&LockValue>, Error>;
    /// What the key holds, to change in place (the key must be open for writing).
    fn lock_mut(&mut self) -> Result<Option<&mut LockValue>, Error>;
    /// Replaces whatever the key holds with `value`, expiring at the absolute unix time
    /// `expire_at` (`None`: no expiry).
    fn set_lock(&self, value: LockValue, expire_at: Option<i64>) -> Result<(), Error>;
    /// As `set_lock`, for the lock a cell keeps (`ffi/cell.rs`), written straight into
    /// one: a `SESSION` grant's one allocation.
    fn set_bound_lock(&self, lock: BoundLock, expire_at: Option<i64>) -> Result<(), Error>;
}

impl LockKey for Key<'_> {
    fn lock(&self) -> Result<Option<&LockValue>, Error> {
        self.value()
    }

    fn lock_mut(&mut self) -> Result<Option<&mut LockValue>, Error> {
        self.lock_value_mut()
    }

    fn set_lock(&self, value: LockValue, expire_at: Option<i64>) -> Result<(), Error> {
        self.set_lock_value(cell::into_server(value), expire_at)
    }

    fn set_bound_lock(&self, lock: BoundLock, expire_at: Option<i64>) -> Result<(), Error> {
        self.set_lock_value(cell::place(lock), expire_at)
    }
}

/// Loads the fields every version has: token, fence, grant time.
fn load_v1(rdb: &mut RdbIn) -> Option<LockState> {
    let token = rdb.bytes()?;
    let fence = rdb.unsigned()?;
    let acquired_ms = rdb.signed()?;
    if !lock::in_contract(&token, fence, acquired_ms) {
        return None;
    }
    Some(LockState::new(&token, fence, acquired_ms, None))
}

/// Version 2: version 1's fields, then the grace (`NO_SESSION` for a plain lock) and,
/// for a session-bound lock, the connection id and the id of the server process that
/// wrote them. The connection is kept only by a `RESTORE` on that same running server
/// while the connection is open; loading a file, or another server, sees none.
fn load_v2(rdb: &mut RdbIn) -> Option<LockState> {
    let mut lock = load_v1(rdb)?;
    let grace_ms = rdb.signed()?;
    if grace_ms == NO_SESSION {
        return Some(lock);
    }
    if !(0..=MAX_TTL_MS).contains(&grace_ms) {
        return None;
    }
    let client = rdb.unsigned()?;
    let instance = rdb.unsigned()?;
    let same_server = instance == bindings::instance() && !ffi::is_loading();
    let client = if same_server && ffi::client_connected(client) {
        client
    } else {
        0
    };
    lock.set_session(Some(Session { grace_ms, client }));
    Some(lock)
}

/// Version 3: the kind, then an exclusive lock as version 2 stores it, or shared
/// holders: the limit (`NO_LIMIT` for none), the count, and each holder as version 2
/// stores a lock followed by its expiry. A value out of the contract (no holder, a
/// limit out of range, more holders than it, a token twice) is refused.
fn load_v3(rdb: &mut RdbIn) -> Option<LockValue> {
    load_kind(rdb, false)
}

/// Version 4: version 3, with an exclusive lock's published value after it.
fn load_v4(rdb: &mut RdbIn) -> Option<LockValue> {
    load_kind(rdb, true)
}

/// A value of version 3 or 4 (`valued`: an exclusive lock's value follows it).
fn load_kind(rdb: &mut RdbIn, valued: bool) -> Option<LockValue> {
    match rdb.unsigned()? {
        EXCLUSIVE => {
            let mut lock = load_v2(rdb)?;
            if valued {
                match rdb.unsigned()? {
                    NO_VALUE => {}
                    HAS_VALUE => {
                        let value = rdb.bytes()?;
                        if value.len() > MAX_VALUE_LEN {
                            return None;
                        }
                        lock.set_value(Some(&value));
                    }
                    _ => return None,
                }
            }
            Some(LockValue::Exclusive(lock))
        }
        SHARED => {
            let limit = match rdb.signed()? {
                NO_LIMIT => None,
                n => Some(
                    u32::try_from(n)
                        .ok()
                        .filter(|n| (1..=MAX_LIMIT).contains(n))?,
                ),
            };
            let count = rdb.unsigned()?;
            if count == 0 || limit.is_some_and(|limit| count > u64::from(limit)) {
                return None;
            }
            let mut holders = Holders::new(limit);
            for _ in 0..count {
                let lock = load_v2(rdb)?;
                let expire_at = rdb.signed()?;
                if expire_at < 0 {
                    return None;
                }
                holders.insert(Holder { lock, expire_at }).ok()?;
            }
            Some(LockValue::Shared(Box::new(holders)))
        }
        _ => None,
    }
}

/// Saves `lock` as version 2 saved a lock (version 3's exclusive body and holders).
fn save_lock(rdb: &mut RdbOut, lock: &LockState) {
    rdb.bytes(&lock.token());
    rdb.unsigned(lock.fence());
    rdb.signed(lock.acquired_ms());
    match lock.session() {
        None => rdb.signed(NO_SESSION),
        Some(session) => {
            rdb.signed(session.grace_ms);
            rdb.unsigned(session.client);
            rdb.unsigned(bindings::instance());
        }
    }
}

/// A lock value arrived at a key (loaded, restored, copied): its watchers look again, its
/// session-bound holders are watched from now on, and shared holders get their expiry
/// timer.
fn arrived<E: KeyEvents>(value: &LockValue, db: i32, key: &[u8]) {
    E::changed(KeyRef::new(db, key));
    for session in value.sessions() {
        E::session_arrived(KeyRef::new(db, key), session);
    }
    if matches!(value, LockValue::Shared(_)) {
        E::shared_arrived(KeyRef::new(db, key));
    }
}

/// The lock type's methods (`ffi/value_type.rs` calls them from the server's callbacks),
/// telling `E` what they learn.
struct LockType<E>(PhantomData<E>);

impl<E: KeyEvents> ValueType for LockType<E> {
    fn load(rdb: &mut RdbIn, encver: i32) -> Option<LockValue> {
        let loaded = match encver {
            1 => load_v1(rdb).map(LockValue::Exclusive),
            2 => load_v2(rdb).map(LockValue::Exclusive),
            3 => load_v3(rdb),
            4 => load_v4(rdb),
            _ => {
                ffi::log_warning(&format!(
                    "lock: cannot load a lock of encoding version {encver}: this module knows 1 to {ENCODING_VERSION}"
                ));
                None
            }
        }?;
        fence::clock().observe(loaded.newest_fence());
        if let Some((db, key)) = rdb.key() {
            arrived::<E>(&loaded, db, &key);
        }
        Some(loaded)
    }

    fn save(rdb: &mut RdbOut, value: &LockValue) {
        match value {
            LockValue::Exclusive(lock) => {
                rdb.unsigned(EXCLUSIVE);
                save_lock(rdb, lock);
                match lock.value() {
                    None => rdb.unsigned(NO_VALUE),
                    Some(value) => {
                        rdb.unsigned(HAS_VALUE);
                        rdb.bytes(value);
                    }
                }
            }
            LockValue::Shared(holders) => {
                rdb.unsigned(SHARED);
                rdb.signed(holders.limit().map_or(NO_LIMIT, i64::from));
                rdb.unsigned(holders.len() as u64);
                for holder in holders.iter() {
                    save_lock(rdb, &holder.lock);
                    rdb.signed(holder.expire_at);
                }
            }
        }
    }

    fn rewrite(aof: &mut AofOut, value: &LockValue) {
        match value {
            LockValue::Exclusive(lock) => {
                // The expiry is left out (-1): the server appends PEXPIREAT for the key
                // itself. A session-bound lock adds its grace; for a plain one the
                // command stops before it, unless a published value follows (grace -1).
                let mut numbers = vec![lock.fence() as i64, lock.acquired_ms(), -1];
                match lock.value() {
                    None => {
                        numbers.extend(lock.grace_ms());
                        aof.emit(c"LOCK._SET", &lock.token(), &numbers, None);
                    }
                    Some(value) => {
                        numbers.push(lock.grace_ms().unwrap_or(NO_SESSION));
                        aof.emit(c"LOCK._SET", &lock.token(), &numbers, Some(value));
                    }
                }
            }
            LockValue::Shared(holders) => {
                let limit = holders.limit().map_or(NO_LIMIT, i64::from);
                for holder in holders.iter() {
                    let lock = &holder.lock;
                    aof.emit(
                        c"LOCK._HOLD",
                        &lock.token(),
                        &[
                            lock.fence() as i64,
                            lock.acquired_ms(),
                            holder.expire_at,
                            limit,
                            lock.grace_ms().unwrap_or(NO_SESSION),
                        ],
                        None,
                    );
                }
            }
        }
    }

    fn mem_usage(value: &LockValue, own_block: Option<usize>, heap_block: Option<usize>) -> usize {
        let own = footprint::block(own_block.unwrap_or(std::mem::size_of::<LockValue>()));
        // An exclusive lock keeps at most one allocation beside its value (a token of
        // another form, a binding, a grant time its fence does not name), measured as
        // the allocator keeps it; shared holders' maps are an estimate already.
        let heap = match value {
            LockValue::Exclusive(lock) => match lock.heap_start() {
                Some(_) => footprint::block(heap_block.unwrap_or(lock.heap_bytes())),
                None => 0,
            },
            LockValue::Shared(_) => value.heap_bytes(),
        };
        footprint::server_cells() + own + heap
    }

    fn digest(digest: &mut Digest, value: &LockValue) {
        let add_lock = |digest: &mut Digest, lock: &LockState| {
            digest.bytes(&lock.token());
            digest.number(lock.fence() as i64);
            digest.number(lock.acquired_ms());
            // The grace, not the connection: a replica's copy has none.
            if let Some(grace_ms) = lock.grace_ms() {
                digest.number(grace_ms);
            }
            if let Some(value) = lock.value() {
                digest.bytes(value);
            }
        };
        match value {
            LockValue::Exclusive(lock) => add_lock(digest, lock),
            LockValue::Shared(holders) => {
                // In token order, so that equal sets digest alike whatever their slots.
                let mut all: Vec<&Holder> = holders.iter().collect();
                all.sort_unstable_by(|a, b| a.lock.token().cmp(&b.lock.token()));
                digest.number(holders.limit().map_or(NO_LIMIT, i64::from));
                for holder in all {
                    add_lock(digest, &holder.lock);
                    digest.number(holder.expire_at);
                }
            }
        }
        digest.end();
    }

    /// `COPY`: the copy is the same lock, bound to the same connections if it is bound.
    fn copied(value: &LockValue, db: i32, to: &[u8]) {
        arrived::<E>(value, db, to);
    }

    /// The server is removing a lock key from its keyspace, for whatever reason (release,
    /// `DEL`, expiry, eviction, `RENAME`/`MOVE` away, overwrite). Called for lock keys
    /// only, so the module hears of freed locks without listening to every key's events.
    fn unlinked(db: i32, key: &[u8], value: &LockValue) {
        E::changed(KeyRef::new(db, key));
        let sessions = value.sessions();
        for session in &sessions {
            E::session_gone(KeyRef::new(db, key), *session);
        }
        if !events::is_releasing()
            && (!sessions.is_empty() || matches!(value, LockValue::Shared(_)))
        {
            // A RENAME or MOVE may be taking it to another key.
            events::session_in_flight();
        }
        // A release's own deletion is never an expiry, and the release hands the lock
        // over itself: no note, no news.
        if events::is_releasing() {
            return;
        }
        if stats::note_unlinked_lock(key) {
            ffi::after_this_command(|_| stats::forget_unlinked_lock());
        }
        E::gone(KeyRef::new(db, key));
    }

    fn aux_save(rdb: &mut RdbOut) {
        rdb.unsigned(fence::clock().high_water());
    }

    fn aux_load(rdb: &mut RdbIn, encver: i32) -> bool {
        // The auxiliary data (the fencing clock) is the same in every version.
        if !(1..=ENCODING_VERSION).contains(&encver) {
            return false;
        }
        match rdb.unsigned() {
            Some(high_water) => {
                fence::clock().observe(high_water.min(fence::MAX_FENCE));
                true
            }
            None => false,
        }
    }
}
