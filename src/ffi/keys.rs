//! Keys: opened, typed, read, written and expired here; nowhere else in the module
//! touches a raw key pointer, and no handle the server did not give is ever passed back to
//! it (a key that is not there is answered here, without a call). Their values are the
//! data type's, `LockValue`s (or cells that start with one, `cell.rs`), only.

use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::{Context, RedisString, raw};

use super::*;
use lock_core::error::Error;
use lock_core::value::LockValue;

/// The server's handle of the module's data type: every module key whose type is this
/// one holds a `LockValue` (boxed, or at the start of a cell).
static VALUE_TYPE: AtomicPtr<raw::RedisModuleType> = AtomicPtr::new(std::ptr::null_mut());

/// Registers the data type the server created (`handle`) as the one whose values are
/// `LockValue`s: the data type calls this once at load, before any key is opened, and
/// makes every value of its type (load, copy callbacks) one. False if the handle is NULL.
pub fn register_value_type(handle: *mut raw::RedisModuleType) -> bool {
    VALUE_TYPE.store(handle, Ordering::Release);
    !handle.is_null()
}

/// Refuses to touch a value before the type is registered.
fn check_value_type() -> Result<(), Error> {
    if VALUE_TYPE.load(Ordering::Acquire).is_null() {
        Err(Error::TypeNotRegistered)
    } else {
        Ok(())
    }
}

/// What an open key holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// No such key.
    Empty,
    /// A value of the module's data type.
    Module,
    /// A key of another type.
    Other,
}

/// An open key, closed on drop.
pub struct Key<'ctx> {
    ctx: &'ctx Context,
    name: &'ctx RedisString,
    key: *mut raw::RedisModuleKey,
}

impl<'ctx> Key<'ctx> {
    /// Opens `name` for reading and writing. A key whose TTL has passed is deleted here
    /// (the server's lazy expiry), which may fire the `expired` event.
    pub fn open_write(ctx: &'ctx Context, name: &'ctx RedisString) -> Self {
        Self::open(ctx, name, raw::KeyMode::READ | raw::KeyMode::WRITE)
    }

    /// Opens `name` for reading only.
    pub fn open_read(ctx: &'ctx Context, name: &'ctx RedisString) -> Self {
        Self::open(ctx, name, raw::KeyMode::READ)
    }

    fn open(ctx: &'ctx Context, name: &'ctx RedisString, mode: raw::KeyMode) -> Self {
        // SAFETY: ctx and name are live for 'ctx; the key handle is closed in Drop.
        let key = unsafe {
            raw::RedisModule_OpenKey.expect("RedisModule_OpenKey")(
                ctx.get_raw(),
                name.inner,
                mode.bits(),
            )
        };
        Self { ctx, name, key }
    }

    /// The key's name.
    pub fn name(&self) -> &'ctx RedisString {
        self.name
    }

    /// What the key holds. The module type is asked first: it is `NULL` for an empty key
    /// and a key of another kind, so the common case, a lock, costs one call.
    pub fn kind(&self) -> KeyKind {
        if self.key.is_null() {
            return KeyKind::Empty;
        }
        // SAFETY: self.key is an open, non-null key handle; the call answers NULL for a
        // key that is empty or not a module key.
        let module_type = unsafe {
            raw::RedisModule_ModuleTypeGetType.expect("RedisModule_ModuleTypeGetType")(self.key)
        };
        if !module_type.is_null() {
            return if module_type == VALUE_TYPE.load(Ordering::Acquire) {
                KeyKind::Module
            } else {
                KeyKind::Other
            };
        }
        // SAFETY: as above.
        let key_type = unsafe { raw::RedisModule_KeyType.expect("RedisModule_KeyType")(self.key) };
        if key_type == raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
            KeyKind::Empty
        } else {
            KeyKind::Other
        }
    }

    /// The value the key holds: `None` if it does not exist, `WRONGTYPE` if it holds
    /// something else.
    pub fn value(&self) -> Result<Option<&LockValue>, Error> {
        // SAFETY: a value of the registered type always starts with a LockValue (a Box,
        // or a cell: register_value_type and cell.rs); the borrow ends before the key
        // handle is closed.
        Ok(self
            .raw_value()?
            .and_then(|value| unsafe { value.as_ref() }))
    }

    /// The value the key holds, to change in place (the key must be open for writing):
    /// as `value`, without replacing it (a replacement would look like a removal). Only
    /// through `lock_value_mut`, which never lets a cell's lock be reached this way.
    fn value_mut(&mut self) -> Result<Option<&mut LockValue>, Error> {
        // SAFETY: as in `value`; the borrow is exclusive through &mut self, and the server
        // does not touch the value while a command runs.
        Ok(self
            .raw_value()?
            .and_then(|value| unsafe { value.as_mut() }))
    }

    /// The pointer to the value of a key of the module's type.
    fn raw_value(&self) -> Result<Option<*mut LockValue>, Error> {
        check_value_type()?;
        match self.kind() {
            KeyKind::Empty => Ok(None),
            KeyKind::Other => Err(Error::WrongType),
            // SAFETY: self.key is an open, non-null key handle of a module key.
            KeyKind::Module => Ok(Some(unsafe {
                raw::RedisModule_ModuleTypeGetValue.expect("RedisModule_ModuleTypeGetValue")(
                    self.key,
                )
                .cast::<LockValue>()
            })),
        }
    }

    /// What the key holds, to change in place (the key must be open for writing): as
    /// `value`, without replacing it (a replacement would look like a removal). A lock
    /// kept in a cell is first moved into a value of its own (`cell.rs`), which takes the
    /// cell's place with the key's expiry unchanged.
    pub fn lock_value_mut(&mut self) -> Result<Option<&mut LockValue>, Error> {
        let Some(value) = self.raw_value()? else {
            return Ok(None);
        };
        // SAFETY: as in `value`.
        if cell::in_cell(unsafe { &*value }) {
            // SAFETY: as above; the copy owns what it keeps.
            let own = cell::ServerValue::boxed(unsafe { &*value }.clone());
            let mut old: *mut c_void = std::ptr::null_mut();
            // SAFETY: self.key is open for writing and holds a value of the registered
            // type (raw_value checked); the server takes `own` and hands back the cell,
            // which is now ours, and calls no callback.
            let status = unsafe {
                raw::RedisModule_ModuleTypeReplaceValue.expect("RedisModule_ModuleTypeReplaceValue")(
                    self.key,
                    VALUE_TYPE.load(Ordering::Acquire),
                    own.as_ptr(),
                    &mut old,
                )
            };
            if status != raw::REDISMODULE_OK as c_int {
                // Refused: `own` is still ours, and dropping it frees it.
                return Err(Error::KeyNotWritten);
            }
            // The server holds it now, in the cell's place: the same lock, so the gauges
            // stay as they are.
            own.replacing();
            // SAFETY: the cell the key held, given back to us once; no borrow of it is
            // left (this borrow of the key is exclusive).
            unsafe { cell::free(old) };
        }
        self.value_mut()
    }

    /// Replaces whatever the key holds with `value`, expiring at the absolute unix time
    /// `expire_at` (`None`: no expiry). One write, so the key is signalled once.
    pub fn set_lock_value(
        &self,
        value: cell::ServerValue,
        expire_at: Option<i64>,
    ) -> Result<(), Error> {
        check_value_type()?;
        if self.key.is_null() {
            return Err(Error::KeyNotOpen);
        }
        // SAFETY: self.key is a non-null key open for writing; the type handle is the
        // registered one, whose values cell.rs makes; on success the server takes
        // ownership of value and frees it through the type's free callback.
        let status = unsafe {
            raw::RedisModule_ModuleTypeSetValue.expect("RedisModule_ModuleTypeSetValue")(
                self.key,
                VALUE_TYPE.load(Ordering::Acquire),
                value.as_ptr(),
            )
        };
        if status != raw::REDISMODULE_OK as c_int {
            // Refused: `value` is still ours, and dropping it frees it.
            return Err(Error::KeyNotWritten);
        }
        // The server holds it now.
        value.into_raw();
        let expired = self.write_expire(expire_at);
        self.modified();
        expired
    }

    /// Sets the key's expiry to the absolute unix time `at_ms` (`None`: no expiry).
    pub fn set_expire_at(&self, at_ms: Option<i64>) -> Result<(), Error> {
        let written = self.write_expire(at_ms);
        if written.is_ok() {
            self.modified();
        }
        written
    }

    /// Writes the key's expiry without signalling the change (the callers do, once).
    fn write_expire(&self, at_ms: Option<i64>) -> Result<(), Error> {
        if self.key.is_null() {
            return Err(Error::KeyNotOpen);
        }
        // SAFETY: self.key is an open, non-null key handle; the server checks the mode.
        let status = unsafe {
            match at_ms {
                Some(expire_at) => {
                    raw::RedisModule_SetAbsExpire.expect("RedisModule_SetAbsExpire")(
                        self.key, expire_at,
                    )
                }
                None => raw::RedisModule_SetExpire.expect("RedisModule_SetExpire")(
                    self.key,
                    raw::REDISMODULE_NO_EXPIRE.into(),
                ),
            }
        };
        if status == raw::REDISMODULE_OK as c_int {
            Ok(())
        } else {
            Err(Error::ExpiryNotSet)
        }
    }

    /// The key's expiry as absolute unix time in ms, `None` if it has none or does not
    /// exist (Redis 8.2 reads the value's expiry without checking that there is one).
    pub fn expire_at(&self) -> Option<i64> {
        if self.kind() == KeyKind::Empty {
            return None;
        }
        // SAFETY: self.key is an open, non-null handle of a key that exists.
        let expire_at =
            unsafe { raw::RedisModule_GetAbsExpire.expect("RedisModule_GetAbsExpire")(self.key) };
        (expire_at != raw::REDISMODULE_NO_EXPIRE.into()).then_some(expire_at)
    }

    /// Deletes the key (nothing to do if it is not there).
    pub fn delete(&self) {
        if self.key.is_null() {
            return;
        }
        // SAFETY: self.key is an open, non-null key handle opened for writing.
        unsafe { raw::RedisModule_DeleteKey.expect("RedisModule_DeleteKey")(self.key) };
        self.modified();
    }

    /// Tells the server the key changed (invalidates `WATCH`, client-side caches).
    /// The module turns the implicit signal on close off, so that a busy acquire or a
    /// release by the wrong token does not disturb a `WATCH` on the key.
    fn modified(&self) {
        // SAFETY: ctx and name are live for 'ctx.
        unsafe {
            raw::RedisModule_SignalModifiedKey.expect("RedisModule_SignalModifiedKey")(
                self.ctx.get_raw(),
                self.name.inner,
            )
        };
    }
}

impl Drop for Key<'_> {
    fn drop(&mut self) {
        if !self.key.is_null() {
            // SAFETY: self.key was opened by RedisModule_OpenKey and is closed once.
            unsafe { raw::RedisModule_CloseKey.expect("RedisModule_CloseKey")(self.key) };
        }
    }
}
