//! The module's data type: how a lock is saved, loaded, rewritten into the AOF,
//! measured, digested, copied and freed.
//!
//! Encoding version 1 stores the token, the fence and the grant time; the expiry is the
//! key's own and the server stores it. `rdb_load` refuses versions it does not know
//! rather than guess. The fencing clock's high-water mark travels as auxiliary data
//! before the keys, so that a restart or full sync never hands out a smaller fence.

use std::ffi::CString;
use std::os::raw::{c_int, c_void};
use std::ptr;

use redis_module::{RedisString, native_types::RedisType, raw};

use crate::events;
use crate::fence;
use crate::ffi;
use crate::guard;
use crate::lock::LockState;
use crate::stats;

/// The type's name as `TYPE` shows it (exactly nine characters).
pub const TYPE_NAME: &str = "redislock";
/// The current encoding version of a lock value and of the auxiliary data.
pub const ENCODING_VERSION: i32 = 1;

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
        copy: Some(copy),
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: Some(unlink2),
        copy2: None,
        aux_save2: None,
    },
);

/// Borrows the lock behind a value pointer the server hands to a callback.
///
/// # Safety
/// `value` must be a pointer this module gave the server for a key of `LOCK_TYPE`.
unsafe fn state<'a>(value: *mut c_void) -> &'a LockState {
    // SAFETY: every value of LOCK_TYPE is a Box<LockState> (see the function contract).
    unsafe { &*value.cast::<LockState>() }
}

fn load_v1(rdb: *mut raw::RedisModuleIO) -> Option<LockState> {
    let token: Box<[u8]> = raw::load_string_buffer(rdb).ok()?.as_ref().into();
    let fence = raw::load_unsigned(rdb).ok()?;
    let acquired_ms = raw::load_signed(rdb).ok()?;
    if token.is_empty() || fence == 0 || fence > fence::MAX_FENCE {
        return None;
    }
    Some(LockState {
        token,
        fence,
        acquired_ms,
    })
}

extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    guard::callback(ptr::null_mut(), || {
        let loaded = match encver {
            1 => load_v1(rdb),
            _ => {
                raw::redis_log(
                    ptr::null_mut(),
                    &format!(
                        "lock: cannot load a lock of encoding version {encver}: this module knows 1"
                    ),
                );
                None
            }
        };
        match loaded {
            Some(lock) => {
                fence::clock().observe(lock.fence);
                Box::into_raw(Box::new(lock)).cast()
            }
            None => ptr::null_mut(),
        }
    })
}

extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    guard::callback((), || {
        // SAFETY: the server passes a value of LOCK_TYPE.
        let lock = unsafe { state(value) };
        raw::save_slice(rdb, &lock.token);
        raw::save_unsigned(rdb, lock.fence);
        raw::save_signed(rdb, lock.acquired_ms);
    })
}

extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    guard::callback((), || {
        // SAFETY: the server passes a value of LOCK_TYPE.
        let lock = unsafe { state(value) };
        let command = CString::new("LOCK._SET").expect("no NUL");
        let format = CString::new("sblll").expect("no NUL");
        // The expiry is left out (-1): the server appends PEXPIREAT for the key itself.
        // SAFETY: the format matches the arguments: s = RedisModuleString*, b = pointer
        // and length, l = long long; aof and key are live for this callback.
        unsafe {
            raw::RedisModule_EmitAOF.expect("RedisModule_EmitAOF")(
                aof,
                command.as_ptr(),
                format.as_ptr(),
                key,
                lock.token.as_ptr(),
                lock.token.len(),
                lock.fence as i64,
                lock.acquired_ms,
                -1i64,
            );
        }
    })
}

extern "C" fn mem_usage(value: *const c_void) -> usize {
    guard::callback(0, || {
        // SAFETY: the server passes a value of LOCK_TYPE.
        let lock = unsafe { state(value.cast_mut()) };
        std::mem::size_of::<LockState>() + lock.token.len()
    })
}

extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    guard::callback((), || {
        // SAFETY: the server passes a value of LOCK_TYPE and a live digest.
        unsafe {
            let lock = state(value);
            raw::RedisModule_DigestAddStringBuffer.expect("DigestAddStringBuffer")(
                md,
                lock.token.as_ptr().cast(),
                lock.token.len(),
            );
            raw::RedisModule_DigestAddLongLong.expect("DigestAddLongLong")(md, lock.fence as i64);
            raw::RedisModule_DigestAddLongLong.expect("DigestAddLongLong")(md, lock.acquired_ms);
            raw::RedisModule_DigestEndSequence.expect("DigestEndSequence")(md);
        }
    })
}

extern "C" fn free(value: *mut c_void) {
    guard::callback((), || {
        // SAFETY: the server gives back a value it took from this module, exactly once.
        drop(unsafe { Box::from_raw(value.cast::<LockState>()) });
    })
}

extern "C" fn copy(
    _from: *mut raw::RedisModuleString,
    _to: *mut raw::RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    guard::callback(ptr::null_mut(), || {
        // SAFETY: the server passes a value of LOCK_TYPE.
        let lock = unsafe { state(value.cast_mut()) };
        Box::into_raw(Box::new(lock.clone())).cast()
    })
}

/// The server is removing a lock key from its keyspace, for whatever reason (release,
/// `DEL`, expiry, eviction, `RENAME`/`MOVE` away, overwrite). Called for lock keys only,
/// so the module hears of freed locks without listening to every key's events.
extern "C" fn unlink2(ctx: *mut raw::RedisModuleKeyOptCtx, _value: *const c_void) {
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
        // A release's own deletion is never an expiry, and the release hands the lock
        // over itself: no note, no news.
        if events::is_releasing() {
            return;
        }
        if stats::note_unlinked_lock(key) {
            ffi::after_this_command(stats::forget_unlinked_lock);
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
        if encver != ENCODING_VERSION {
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
