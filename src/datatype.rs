//! The module's data type: how a lock is saved, loaded, rewritten into the AOF,
//! measured, digested, copied and freed.
//!
//! Encoding version 3 starts with the value's kind. An exclusive lock is then stored as
//! version 2 stored every lock: the token, the fence, the grant time and the session
//! binding (grace, connection id, and the id of the server process that wrote it, so
//! that only a `RESTORE` on that same running server keeps the connection). Shared
//! holders are stored as their limit, their count and each holder as an exclusive lock
//! followed by its own expiry. Version 2 (before shared holders) and version 1 (before
//! sessions, the first three fields) still load. The expiry is the key's
//! own and the server stores it. `rdb_load` refuses versions it does not know rather
//! than guess. The fencing clock's high-water mark travels as auxiliary data
//! before the keys, so that a restart or full sync never hands out a smaller fence.

use std::os::raw::{c_int, c_void};
use std::ptr;

use redis_module::{RedisError, RedisString, native_types::RedisType, raw};

use crate::bindings;
use crate::events;
use crate::fence;
use crate::ffi::{self, Key, cell};
use crate::footprint;
use crate::guard;
use crate::holders::{Holder, Holders};
use crate::limits::{MAX_LIMIT, MAX_TTL_MS};
use crate::lock::{self, BoundLock, LockState, Session};
use crate::stats;
use crate::value::LockValue;

/// The type's name as `TYPE` shows it (exactly nine characters).
pub const TYPE_NAME: &str = "redislock";
/// The current encoding version of a lock value and of the auxiliary data.
pub const ENCODING_VERSION: i32 = 3;

/// Version 3's first field: the value's kind.
const EXCLUSIVE: u64 = 0;
const SHARED: u64 = 1;
/// What version 3 stores for shared holders without a limit.
const NO_LIMIT: i64 = -1;

/// What a version 2 value stores for a lock that is not session-bound.
const NO_SESSION: i64 = -1;

/// The registered type.
pub static LOCK_TYPE: RedisType = RedisType::new(
    TYPE_NAME,
    ENCODING_VERSION,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: Some(aux_load),
        aux_save: Some(aux_save),
        aux_save_triggers: raw::Aux::Before as c_int,
        free_effort: None,
        unlink: None,
        copy: None,
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: Some(unlink2),
        copy2: Some(copy2),
        aux_save2: None,
    },
);

/// Hands the registered type down to the FFI layer, whose keys then read and write its
/// values as `LockValue`s (at load, after the server created the type).
pub fn register() -> bool {
    ffi::register_value_type(*LOCK_TYPE.raw_type.borrow())
}

/// A key read and written as a lock: the data type's view of an `ffi::Key`.
pub trait LockKey {
    /// What the key holds: `None` if it does not exist, `WRONGTYPE` if it holds
    /// something else.
    fn lock(&self) -> Result<Option<&LockValue>, RedisError>;
    /// What the key holds, to change in place (the key must be open for writing).
    fn lock_mut(&mut self) -> Result<Option<&mut LockValue>, RedisError>;
    /// Replaces whatever the key holds with `value`, expiring at the absolute unix time
    /// `expire_at` (`None`: no expiry).
    fn set_lock(&self, value: LockValue, expire_at: Option<i64>) -> Result<(), RedisError>;
    /// As `set_lock`, for the lock a cell keeps (`ffi/cell.rs`), written straight into
    /// one: a `SESSION` grant's one allocation.
    fn set_bound_lock(&self, lock: BoundLock, expire_at: Option<i64>) -> Result<(), RedisError>;
}

impl LockKey for Key<'_> {
    fn lock(&self) -> Result<Option<&LockValue>, RedisError> {
        self.value()
    }

    fn lock_mut(&mut self) -> Result<Option<&mut LockValue>, RedisError> {
        self.lock_value_mut()
    }

    fn set_lock(&self, value: LockValue, expire_at: Option<i64>) -> Result<(), RedisError> {
        self.set_lock_value(cell::into_server(value), expire_at)
    }

    fn set_bound_lock(&self, lock: BoundLock, expire_at: Option<i64>) -> Result<(), RedisError> {
        self.set_lock_value(cell::place(lock), expire_at)
    }
}

/// Borrows the value behind a pointer the server hands to a callback.
///
/// # Safety
/// `value` must be a pointer this module gave the server for a key of `LOCK_TYPE`.
unsafe fn state<'a>(value: *mut c_void) -> &'a LockValue {
    // SAFETY: every value of LOCK_TYPE starts with a LockValue, boxed or in a cell (see
    // the function contract and ffi/cell.rs).
    unsafe { &*value.cast::<LockValue>() }
}

/// Loads the fields every version has: token, fence, grant time.
fn load_v1(rdb: *mut raw::RedisModuleIO) -> Option<LockState> {
    let token = raw::load_string_buffer(rdb).ok()?.as_ref().to_vec();
    let fence = raw::load_unsigned(rdb).ok()?;
    let acquired_ms = raw::load_signed(rdb).ok()?;
    if !lock::in_contract(&token, fence, acquired_ms) {
        return None;
    }
    Some(LockState::new(&token, fence, acquired_ms, None))
}

/// Version 2: version 1's fields, then the grace (`NO_SESSION` for a plain lock) and,
/// for a session-bound lock, the connection id and the id of the server process that
/// wrote them. The connection is kept only by a `RESTORE` on that same running server
/// while the connection is open; loading a file, or another server, sees none.
fn load_v2(rdb: *mut raw::RedisModuleIO) -> Option<LockState> {
    let mut lock = load_v1(rdb)?;
    let grace_ms = raw::load_signed(rdb).ok()?;
    if grace_ms == NO_SESSION {
        return Some(lock);
    }
    if !(0..=MAX_TTL_MS).contains(&grace_ms) {
        return None;
    }
    let client = raw::load_unsigned(rdb).ok()?;
    let instance = raw::load_unsigned(rdb).ok()?;
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
fn load_v3(rdb: *mut raw::RedisModuleIO) -> Option<LockValue> {
    match raw::load_unsigned(rdb).ok()? {
        EXCLUSIVE => load_v2(rdb).map(LockValue::Exclusive),
        SHARED => {
            let limit = match raw::load_signed(rdb).ok()? {
                NO_LIMIT => None,
                n => Some(
                    u32::try_from(n)
                        .ok()
                        .filter(|n| (1..=MAX_LIMIT).contains(n))?,
                ),
            };
            let count = raw::load_unsigned(rdb).ok()?;
            if count == 0 || limit.is_some_and(|limit| count > u64::from(limit)) {
                return None;
            }
            let mut holders = Holders::new(limit);
            for _ in 0..count {
                let lock = load_v2(rdb)?;
                let expire_at = raw::load_signed(rdb).ok()?;
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
fn save_lock(rdb: *mut raw::RedisModuleIO, lock: &LockState) {
    raw::save_slice(rdb, &lock.token());
    raw::save_unsigned(rdb, lock.fence());
    raw::save_signed(rdb, lock.acquired_ms());
    match lock.session() {
        None => raw::save_signed(rdb, NO_SESSION),
        Some(session) => {
            raw::save_signed(rdb, session.grace_ms);
            raw::save_unsigned(rdb, session.client);
            raw::save_unsigned(rdb, bindings::instance());
        }
    }
}

/// The database and name of the key being loaded, when the server tells them.
fn loading_key(rdb: *mut raw::RedisModuleIO) -> Option<(i32, Vec<u8>)> {
    // SAFETY: rdb is the live I/O context of this load; the name, if any, is the server's
    // and is copied before the callback returns.
    unsafe {
        let name = raw::RedisModule_GetKeyNameFromIO?(rdb);
        let db = raw::RedisModule_GetDbIdFromIO?(rdb);
        if name.is_null() {
            return None;
        }
        Some((db, RedisString::string_as_slice(name.cast_mut()).to_vec()))
    }
}

extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    guard::callback(ptr::null_mut(), || {
        let loaded = match encver {
            1 => load_v1(rdb).map(LockValue::Exclusive),
            2 => load_v2(rdb).map(LockValue::Exclusive),
            3 => load_v3(rdb),
            _ => {
                raw::redis_log(
                    ptr::null_mut(),
                    &format!(
                        "lock: cannot load a lock of encoding version {encver}: this module knows 1 to {ENCODING_VERSION}"
                    ),
                );
                None
            }
        };
        match loaded {
            Some(value) => {
                fence::clock().observe(value.newest_fence());
                arrived(&value, loading_key(rdb));
                cell::into_server(value).into_raw().cast()
            }
            None => ptr::null_mut(),
        }
    })
}

extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    guard::callback((), || {
        // SAFETY: the server passes a value of LOCK_TYPE.
        match unsafe { state(value) } {
            LockValue::Exclusive(lock) => {
                raw::save_unsigned(rdb, EXCLUSIVE);
                save_lock(rdb, lock);
            }
            LockValue::Shared(holders) => {
                raw::save_unsigned(rdb, SHARED);
                raw::save_signed(rdb, holders.limit().map_or(NO_LIMIT, i64::from));
                raw::save_unsigned(rdb, holders.len() as u64);
                for holder in holders.iter() {
                    save_lock(rdb, &holder.lock);
                    raw::save_signed(rdb, holder.expire_at);
                }
            }
        }
    })
}

extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    guard::callback((), || {
        // SAFETY: reading a function pointer from the API table filled at load time.
        let emit = unsafe { raw::RedisModule_EmitAOF }.expect("RedisModule_EmitAOF");
        // SAFETY: the server passes a value of LOCK_TYPE.
        match unsafe { state(value) } {
            LockValue::Exclusive(lock) => {
                // The expiry is left out (-1): the server appends PEXPIREAT for the key
                // itself. A session-bound lock adds its grace; for a plain one the format
                // stops before it, and the server reads no further argument.
                let (format, grace_ms) = match lock.grace_ms() {
                    None => (c"sblll", 0),
                    Some(grace_ms) => (c"sbllll", grace_ms),
                };
                // SAFETY: the format matches the arguments: s = RedisModuleString*, b =
                // pointer and length, l = long long; aof and key are live for this call.
                unsafe {
                    emit(
                        aof,
                        c"LOCK._SET".as_ptr(),
                        format.as_ptr(),
                        key,
                        lock.token().as_ptr(),
                        lock.token().len(),
                        lock.fence() as i64,
                        lock.acquired_ms(),
                        -1i64,
                        grace_ms,
                    );
                }
            }
            LockValue::Shared(holders) => {
                let limit = holders.limit().map_or(NO_LIMIT, i64::from);
                for holder in holders.iter() {
                    let lock = &holder.lock;
                    // SAFETY: as above, format `sblllll`.
                    unsafe {
                        emit(
                            aof,
                            c"LOCK._HOLD".as_ptr(),
                            c"sblllll".as_ptr(),
                            key,
                            lock.token().as_ptr(),
                            lock.token().len(),
                            lock.fence() as i64,
                            lock.acquired_ms(),
                            holder.expire_at,
                            limit,
                            lock.grace_ms().unwrap_or(NO_SESSION),
                        );
                    }
                }
            }
        }
    })
}

extern "C" fn mem_usage(value: *const c_void) -> usize {
    guard::callback(0, || {
        // SAFETY: the server passes a value of LOCK_TYPE.
        let lock_value = unsafe { state(value.cast_mut()) };
        // SAFETY: every value of LOCK_TYPE is the start of a live block of the module's
        // allocator (a Box<LockValue> or a cell, whose lock is in that block).
        let own = footprint::block(
            unsafe { ffi::alloc::block_size(value.cast()) }
                .unwrap_or(std::mem::size_of::<LockValue>()),
        );
        // An exclusive lock keeps at most one allocation beside its value (a token of
        // another form, a binding, a grant time its fence does not name), measured as
        // the allocator keeps it; shared holders' maps are an estimate already.
        let heap = match lock_value {
            LockValue::Exclusive(lock) => match lock.heap_start() {
                // SAFETY: `heap_start` is the start of the lock's own heap block, live
                // while the lock is borrowed.
                Some(start) => footprint::block(
                    unsafe { ffi::alloc::block_size(start) }.unwrap_or(lock.heap_bytes()),
                ),
                None => 0,
            },
            LockValue::Shared(_) => lock_value.heap_bytes(),
        };
        footprint::server_cells() + own + heap
    })
}

extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    guard::callback((), || {
        // SAFETY: reading function pointers from the API table filled at load time.
        let (add_buffer, add_number, end) = unsafe {
            (
                raw::RedisModule_DigestAddStringBuffer.expect("DigestAddStringBuffer"),
                raw::RedisModule_DigestAddLongLong.expect("DigestAddLongLong"),
                raw::RedisModule_DigestEndSequence.expect("DigestEndSequence"),
            )
        };
        // SAFETY: the server passes a value of LOCK_TYPE and a live digest; the token is
        // only read during the call.
        let add_lock = |lock: &LockState| unsafe {
            add_buffer(md, lock.token().as_ptr().cast(), lock.token().len());
            add_number(md, lock.fence() as i64);
            add_number(md, lock.acquired_ms());
            // The grace, not the connection: a replica's copy has none.
            if let Some(grace_ms) = lock.grace_ms() {
                add_number(md, grace_ms);
            }
        };
        // SAFETY: as above.
        match unsafe { state(value) } {
            LockValue::Exclusive(lock) => add_lock(lock),
            LockValue::Shared(holders) => {
                // In token order, so that equal sets digest alike whatever their slots.
                let mut all: Vec<&Holder> = holders.iter().collect();
                all.sort_unstable_by(|a, b| a.lock.token().cmp(&b.lock.token()));
                // SAFETY: as above.
                unsafe { add_number(md, holders.limit().map_or(NO_LIMIT, i64::from)) };
                for holder in all {
                    add_lock(&holder.lock);
                    // SAFETY: as above.
                    unsafe { add_number(md, holder.expire_at) };
                }
            }
        }
        // SAFETY: as above.
        unsafe { end(md) };
    })
}

extern "C" fn free(value: *mut c_void) {
    guard::callback((), || {
        // SAFETY: the server gives back a value it took from this module, exactly once.
        unsafe { cell::free(value) };
    })
}

/// A lock value arrived at a key (loaded, restored, copied): its session-bound holders
/// are watched from now on, and shared holders get their expiry timer.
fn arrived(value: &LockValue, at: Option<(i32, Vec<u8>)>) {
    let Some((db, key)) = at else {
        return;
    };
    for session in value.sessions() {
        events::session_arrived(db, &key, session);
    }
    if matches!(value, LockValue::Shared(_)) {
        events::shared_arrived(db, &key);
    }
}

/// `COPY`: the copy is the same lock, bound to the same connections if it is bound.
extern "C" fn copy2(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) -> *mut c_void {
    guard::callback(ptr::null_mut(), || {
        // SAFETY: the server passes a value of LOCK_TYPE.
        let value = unsafe { state(value.cast_mut()) };
        // SAFETY: ctx is the live key context of this callback; the name is the
        // server's and is copied here.
        let to = unsafe {
            (
                raw::RedisModule_GetToDbIdFromOptCtx.expect("GetToDbIdFromOptCtx")(ctx),
                RedisString::string_as_slice(raw::RedisModule_GetToKeyNameFromOptCtx
                    .expect("GetToKeyNameFromOptCtx")(
                    ctx
                ))
                .to_vec(),
            )
        };
        arrived(value, Some(to));
        cell::into_server(value.clone()).into_raw().cast()
    })
}

/// The server is removing a lock key from its keyspace, for whatever reason (release,
/// `DEL`, expiry, eviction, `RENAME`/`MOVE` away, overwrite). Called for lock keys only,
/// so the module hears of freed locks without listening to every key's events.
extern "C" fn unlink2(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    guard::callback((), || {
        // SAFETY: ctx is the live key context of this callback; the name it returns is
        // the server's and is only read here.
        let (db, name) = unsafe {
            (
                raw::RedisModule_GetDbIdFromOptCtx.expect("GetDbIdFromOptCtx")(ctx),
                raw::RedisModule_GetKeyNameFromOptCtx.expect("GetKeyNameFromOptCtx")(ctx),
            )
        };
        let key = RedisString::string_as_slice(name);
        // SAFETY: the server passes the value of the lock key being removed.
        let value = unsafe { state(value.cast_mut()) };
        let sessions = value.sessions();
        for session in &sessions {
            events::session_gone(db, key, *session);
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
        events::lock_gone(db, key);
    })
}

extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, _when: c_int) {
    guard::callback((), || {
        raw::save_unsigned(rdb, fence::clock().high_water());
    })
}

extern "C" fn aux_load(rdb: *mut raw::RedisModuleIO, encver: c_int, _when: c_int) -> c_int {
    let failed = raw::REDISMODULE_ERR as c_int;
    guard::callback(failed, || {
        // The auxiliary data (the fencing clock) is the same in every version.
        if !(1..=ENCODING_VERSION).contains(&encver) {
            return failed;
        }
        match raw::load_unsigned(rdb) {
            Ok(high_water) => {
                fence::clock().observe(high_water.min(fence::MAX_FENCE));
                raw::REDISMODULE_OK as c_int
            }
            Err(_) => failed,
        }
    })
}
