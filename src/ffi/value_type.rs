//! The data type's raw callbacks: the server calls them with pointers; they hand the
//! methods of a `ValueType` (`datatype/`) safe views instead (the value as a `LockValue`,
//! the RDB stream, the AOF, the digest) and turn panics into the callback's failure
//! value (`guard`).

use std::ffi::CStr;
use std::os::raw::{c_int, c_void};
use std::ptr;

use redis_module::{RedisString, raw};

use super::{alloc, cell};
use crate::ffi::guard;
use lock_core::value::LockValue;

/// What the module's data type does with its values; `methods::<T>()` registers it.
pub trait ValueType {
    /// A value of encoding version `encver` from `rdb`; `None` refuses it (the load fails).
    fn load(rdb: &mut RdbIn, encver: i32) -> Option<LockValue>;
    /// Writes `value` to `rdb`.
    fn save(rdb: &mut RdbOut, value: &LockValue);
    /// The commands that rebuild `value` (`aof.emit`).
    fn rewrite(aof: &mut AofOut, value: &LockValue);
    /// The bytes `value` costs, given the size of its own block and of the block its lock
    /// keeps beside it (when the allocator tells them).
    fn mem_usage(value: &LockValue, own_block: Option<usize>, heap_block: Option<usize>) -> usize;
    /// Adds `value` to `digest` (`DEBUG DIGEST-VALUE`).
    fn digest(digest: &mut Digest, value: &LockValue);
    /// `value` arrived at key `to` of database `db`, as a copy (`COPY`).
    fn copied(value: &LockValue, db: i32, to: &[u8]);
    /// The server is removing key `key` of database `db`, which holds `value`.
    fn unlinked(db: i32, key: &[u8], value: &LockValue);
    /// Writes the auxiliary data (before the keys).
    fn aux_save(rdb: &mut RdbOut);
    /// Reads the auxiliary data of encoding version `encver`; false fails the load.
    fn aux_load(rdb: &mut RdbIn, encver: i32) -> bool;
}

/// The type's methods, for `RedisType::new`.
pub const fn methods<T: ValueType>() -> raw::RedisModuleTypeMethods {
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load::<T>),
        rdb_save: Some(rdb_save::<T>),
        aof_rewrite: Some(aof_rewrite::<T>),
        mem_usage: Some(mem_usage::<T>),
        digest: Some(digest::<T>),
        free: Some(free),
        aux_load: Some(aux_load::<T>),
        aux_save: Some(aux_save::<T>),
        aux_save_triggers: raw::Aux::Before as c_int,
        free_effort: None,
        unlink: None,
        copy: None,
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: Some(unlink2::<T>),
        copy2: Some(copy2::<T>),
        aux_save2: None,
    }
}

/// An RDB stream being read (a value, the auxiliary data).
pub struct RdbIn(*mut raw::RedisModuleIO);

impl RdbIn {
    /// The next string field.
    pub fn bytes(&mut self) -> Option<Vec<u8>> {
        Some(raw::load_string_buffer(self.0).ok()?.as_ref().to_vec())
    }

    /// The next unsigned field.
    pub fn unsigned(&mut self) -> Option<u64> {
        raw::load_unsigned(self.0).ok()
    }

    /// The next signed field.
    pub fn signed(&mut self) -> Option<i64> {
        raw::load_signed(self.0).ok()
    }

    /// The database and name of the key being loaded, when the server tells them.
    pub fn key(&self) -> Option<(i32, Vec<u8>)> {
        // SAFETY: the stream is the live I/O context of this load; the name, if any, is
        // the server's and is copied before the callback returns.
        unsafe {
            let name = raw::RedisModule_GetKeyNameFromIO?(self.0);
            let db = raw::RedisModule_GetDbIdFromIO?(self.0);
            if name.is_null() {
                return None;
            }
            Some((db, RedisString::string_as_slice(name.cast_mut()).to_vec()))
        }
    }
}

/// An RDB stream being written.
pub struct RdbOut(*mut raw::RedisModuleIO);

impl RdbOut {
    /// Writes a string field.
    pub fn bytes(&mut self, bytes: &[u8]) {
        raw::save_slice(self.0, bytes);
    }

    /// Writes an unsigned field.
    pub fn unsigned(&mut self, n: u64) {
        raw::save_unsigned(self.0, n);
    }

    /// Writes a signed field.
    pub fn signed(&mut self, n: i64) {
        raw::save_signed(self.0, n);
    }
}

/// The AOF being rewritten, at one key.
pub struct AofOut {
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
}

impl AofOut {
    /// Appends `command key bytes numbers... [last]` (three to six numbers, then `last`
    /// when given).
    pub fn emit(&mut self, command: &CStr, bytes: &[u8], numbers: &[i64], last: Option<&[u8]>) {
        // SAFETY: reading a function pointer from the API table filled at load time.
        let emit = unsafe { raw::RedisModule_EmitAOF }.expect("RedisModule_EmitAOF");
        let (aof, key, b, len) = (self.aof, self.key, bytes.as_ptr(), bytes.len());
        let command = command.as_ptr();
        // SAFETY: each format matches its arguments: s = RedisModuleString*, b = pointer
        // and length, l = long long; aof and key are live for this callback, `last` is
        // only read during the call.
        unsafe {
            match (numbers, last) {
                (&[a, b2, c], None) => emit(aof, command, c"sblll".as_ptr(), key, b, len, a, b2, c),
                (&[a, b2, c, d], None) => {
                    emit(aof, command, c"sbllll".as_ptr(), key, b, len, a, b2, c, d)
                }
                (&[a, b2, c, d], Some(v)) => emit(
                    aof,
                    command,
                    c"sbllllb".as_ptr(),
                    key,
                    b,
                    len,
                    a,
                    b2,
                    c,
                    d,
                    v.as_ptr(),
                    v.len(),
                ),
                (&[a, b2, c, d, e], None) => emit(
                    aof,
                    command,
                    c"sblllll".as_ptr(),
                    key,
                    b,
                    len,
                    a,
                    b2,
                    c,
                    d,
                    e,
                ),
                _ => panic!("AofOut::emit: no format for {} numbers", numbers.len()),
            }
        }
    }
}

/// A value's digest being computed.
pub struct Digest(*mut raw::RedisModuleDigest);

impl Digest {
    /// Adds a string.
    pub fn bytes(&mut self, bytes: &[u8]) {
        // SAFETY: the digest is live for this callback; the bytes are only read during
        // the call.
        unsafe {
            raw::RedisModule_DigestAddStringBuffer.expect("DigestAddStringBuffer")(
                self.0,
                bytes.as_ptr().cast(),
                bytes.len(),
            )
        }
    }

    /// Adds a number.
    pub fn number(&mut self, n: i64) {
        // SAFETY: the digest is live for this callback.
        unsafe { raw::RedisModule_DigestAddLongLong.expect("DigestAddLongLong")(self.0, n) }
    }

    /// Ends the value's sequence.
    pub fn end(&mut self) {
        // SAFETY: the digest is live for this callback.
        unsafe { raw::RedisModule_DigestEndSequence.expect("DigestEndSequence")(self.0) }
    }
}

/// Borrows the value behind a pointer the server hands to a callback.
///
/// # Safety
/// `value` must be a pointer this module gave the server for a key of its type.
unsafe fn state<'a>(value: *const c_void) -> &'a LockValue {
    // SAFETY: every value of the type starts with a LockValue, boxed or in a cell (see
    // the function contract and cell.rs).
    unsafe { &*value.cast::<LockValue>() }
}

extern "C" fn rdb_load<T: ValueType>(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    guard::callback(ptr::null_mut(), || match T::load(&mut RdbIn(rdb), encver) {
        Some(value) => cell::into_server(value).into_raw(),
        None => ptr::null_mut(),
    })
}

extern "C" fn rdb_save<T: ValueType>(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    // SAFETY: the server passes a value of the type.
    guard::callback((), || T::save(&mut RdbOut(rdb), unsafe { state(value) }))
}

extern "C" fn aof_rewrite<T: ValueType>(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    // SAFETY: the server passes a value of the type.
    guard::callback((), || {
        T::rewrite(&mut AofOut { aof, key }, unsafe { state(value) })
    })
}

extern "C" fn mem_usage<T: ValueType>(value: *const c_void) -> usize {
    guard::callback(0, || {
        // SAFETY: the server passes a value of the type.
        let lock_value = unsafe { state(value) };
        // SAFETY: every value of the type is the start of a live block of the module's
        // allocator (a Box<LockValue> or a cell, whose lock is in that block).
        let own = unsafe { alloc::block_size(value.cast()) };
        let heap = match lock_value {
            // SAFETY: `heap_start` is the start of the lock's own heap block, live while
            // the lock is borrowed.
            LockValue::Exclusive(lock) => lock
                .heap_start()
                .and_then(|start| unsafe { alloc::block_size(start) }),
            LockValue::Shared(_) => None,
        };
        T::mem_usage(lock_value, own, heap)
    })
}

extern "C" fn digest<T: ValueType>(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    // SAFETY: the server passes a value of the type and a live digest.
    guard::callback((), || T::digest(&mut Digest(md), unsafe { state(value) }))
}

extern "C" fn free(value: *mut c_void) {
    guard::callback((), || {
        // SAFETY: the server gives back a value it took from this module, exactly once.
        unsafe { cell::free_counted(value, super::now_us()) };
    })
}

/// `COPY`: the copy is the same lock, told where it arrived.
extern "C" fn copy2<T: ValueType>(
    ctx: *mut raw::RedisModuleKeyOptCtx,
    value: *const c_void,
) -> *mut c_void {
    guard::callback(ptr::null_mut(), || {
        // SAFETY: the server passes a value of the type.
        let value = unsafe { state(value) };
        // SAFETY: ctx is the live key context of this callback; the name is the server's
        // and is only read here.
        let (db, to) = unsafe {
            (
                raw::RedisModule_GetToDbIdFromOptCtx.expect("GetToDbIdFromOptCtx")(ctx),
                RedisString::string_as_slice(raw::RedisModule_GetToKeyNameFromOptCtx
                    .expect("GetToKeyNameFromOptCtx")(
                    ctx
                )),
            )
        };
        T::copied(value, db, to);
        cell::into_server(value.clone()).into_raw()
    })
}

/// The server is removing a key of the type from its keyspace, for whatever reason.
extern "C" fn unlink2<T: ValueType>(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    guard::callback((), || {
        // SAFETY: ctx is the live key context of this callback; the name it returns is
        // the server's and is only read here.
        let (db, name) = unsafe {
            (
                raw::RedisModule_GetDbIdFromOptCtx.expect("GetDbIdFromOptCtx")(ctx),
                raw::RedisModule_GetKeyNameFromOptCtx.expect("GetKeyNameFromOptCtx")(ctx),
            )
        };
        // SAFETY: the server passes the value of the key being removed.
        T::unlinked(db, RedisString::string_as_slice(name), unsafe {
            state(value)
        });
    })
}

extern "C" fn aux_save<T: ValueType>(rdb: *mut raw::RedisModuleIO, _when: c_int) {
    guard::callback((), || T::aux_save(&mut RdbOut(rdb)))
}

extern "C" fn aux_load<T: ValueType>(
    rdb: *mut raw::RedisModuleIO,
    encver: c_int,
    _when: c_int,
) -> c_int {
    let failed = raw::REDISMODULE_ERR as c_int;
    guard::callback(failed, || {
        if T::aux_load(&mut RdbIn(rdb), encver) {
            raw::REDISMODULE_OK as c_int
        } else {
            failed
        }
    })
}
