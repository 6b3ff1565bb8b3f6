//! The thin unsafe layer: server calls the binding has no safe wrapper for.
//!
//! Keys are opened, typed, read, written and expired here; nowhere else in the module
//! touches a raw key pointer, and no handle the server did not give is ever passed back
//! to it (a key that is not there is answered here, without a call). Timers, post-
//! notification jobs and the detached context are here too; the server events in
//! `server_events.rs`, the commands' declarations in `command_info.rs`. (The type's
//! callbacks still live in `datatype.rs`, the blocked-client calls in `blocking.rs`.) The data type hands the
//! handle the server made for it down at load (`register_value_type`); keys read and
//! write its values, `LockValue`s (or cells that start with one, `cell.rs`), only.

use std::ffi::CStr;
use std::os::raw::{c_int, c_long, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, Ordering};

use redis_module::{Context, RedisError, RedisString, raw};

pub mod alloc;
pub mod cell;
pub mod command;
pub mod command_info;
pub mod main_thread;
pub mod server_events;

use crate::decimal::Decimal;
use crate::error;
use crate::value::LockValue;

/// Unix time in ms as the server sees it: the clock its expiry machinery uses.
pub fn now_ms() -> i64 {
    // SAFETY: RedisModule_Milliseconds takes no arguments and only reads the clock; the
    // API table is filled by RedisModule_Init before any command can run.
    unsafe { raw::RedisModule_Milliseconds.expect("RedisModule_Milliseconds")() }
}

/// Whether the server holds writes back now (`CLIENT PAUSE`, a failover under way).
/// Then a key past its deadline counts as expired but is not deleted, so nothing may be
/// written in its place.
pub fn writes_paused() -> bool {
    // SAFETY: takes no arguments and only reads the server's pause state; the API table
    // is filled by RedisModule_Init before any callback can run.
    unsafe { raw::RedisModule_AvoidReplicaTraffic.expect("RedisModule_AvoidReplicaTraffic")() != 0 }
}

/// The id of the client of `ctx` (the one that sent the command, or ran `EXEC`); 0 when
/// the context has none.
pub fn client_id(ctx: &Context) -> u64 {
    // SAFETY: ctx is the live context of the current command or callback.
    unsafe { raw::RedisModule_GetClientId.expect("RedisModule_GetClientId")(ctx.get_raw()) }
}

/// Whether a client with this id is connected now (0 never is). Ids are never reused
/// while the server runs.
pub fn client_connected(id: u64) -> bool {
    if id == 0 {
        return false;
    }
    // SAFETY: a NULL info asks only whether the client exists; nothing is written.
    let found = unsafe {
        raw::RedisModule_GetClientInfoById.expect("RedisModule_GetClientInfoById")(
            std::ptr::null_mut(),
            id,
        )
    };
    found == raw::REDISMODULE_OK as c_int
}

/// Whether the server is loading its data now (an RDB file, the AOF, a full sync).
pub fn is_loading() -> bool {
    // SAFETY: a NULL context asks for the server-wide flags only.
    let flags =
        unsafe { raw::RedisModule_GetContextFlags.expect("GetContextFlags")(std::ptr::null_mut()) };
    flags & raw::REDISMODULE_CTX_FLAGS_LOADING as c_int != 0
}

/// Whether the client of `ctx` is connected through a unix socket or from the loopback
/// address, as the server decides for `enable-debug-command local`.
pub fn client_is_local(ctx: &Context) -> bool {
    // SAFETY: ctx is the live context of the current command.
    let id =
        unsafe { raw::RedisModule_GetClientId.expect("RedisModule_GetClientId")(ctx.get_raw()) };
    // SAFETY: the client info is plain data; all zeroes with its version set is what the
    // server expects to fill.
    let mut info: raw::RedisModuleClientInfo = unsafe { std::mem::zeroed() };
    info.version = raw::REDISMODULE_CLIENTINFO_VERSION.into();
    // SAFETY: info is a valid, writable client info of the version it names.
    let found = unsafe {
        raw::RedisModule_GetClientInfoById.expect("RedisModule_GetClientInfoById")(
            (&raw mut info).cast::<c_void>(),
            id,
        )
    };
    if found != raw::REDISMODULE_OK as c_int {
        return false;
    }
    if info.flags & u64::from(raw::REDISMODULE_CLIENTINFO_FLAG_UNIXSOCKET) != 0 {
        return true;
    }
    let addr: Vec<u8> = info
        .addr
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    addr == b"127.0.0.1" || addr == b"::1"
}

/// The database the client of `ctx` has selected.
pub fn selected_db(ctx: &Context) -> i32 {
    // SAFETY: ctx is the live context of the current command or callback.
    unsafe { raw::RedisModule_GetSelectedDb.expect("RedisModule_GetSelectedDb")(ctx.get_raw()) }
}

/// Selects database `db` for the keys `ctx` opens next (timer callbacks). False if the
/// database does not exist.
pub fn select_db(ctx: &Context, db: i32) -> bool {
    // SAFETY: ctx is a live context with a client (a timer's temporary client).
    let status =
        unsafe { raw::RedisModule_SelectDb.expect("RedisModule_SelectDb")(ctx.get_raw(), db) };
    status == raw::REDISMODULE_OK as c_int
}

/// Hides argument `index` of the current command from `SLOWLOG` and `MONITOR`.
pub fn redact(ctx: &Context, index: usize) {
    // The function exists from 7.0 on; on an older server there is nothing to call.
    if let (Some(redact), Ok(pos)) = (
        // SAFETY: reading a function pointer from the API table filled at load time.
        unsafe { raw::RedisModule_RedactClientCommandArgument },
        c_int::try_from(index),
    ) {
        // SAFETY: ctx is the live context of the current command and pos < argc.
        unsafe { redact(ctx.get_raw(), pos) };
    }
}

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
fn check_value_type() -> Result<(), RedisError> {
    if VALUE_TYPE.load(Ordering::Acquire).is_null() {
        Err(error::type_not_registered())
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
    pub fn value(&self) -> Result<Option<&LockValue>, RedisError> {
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
    fn value_mut(&mut self) -> Result<Option<&mut LockValue>, RedisError> {
        // SAFETY: as in `value`; the borrow is exclusive through &mut self, and the server
        // does not touch the value while a command runs.
        Ok(self
            .raw_value()?
            .and_then(|value| unsafe { value.as_mut() }))
    }

    /// The pointer to the value of a key of the module's type.
    fn raw_value(&self) -> Result<Option<*mut LockValue>, RedisError> {
        check_value_type()?;
        match self.kind() {
            KeyKind::Empty => Ok(None),
            KeyKind::Other => Err(error::wrong_type()),
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
    pub fn lock_value_mut(&mut self) -> Result<Option<&mut LockValue>, RedisError> {
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
                return Err(error::key_not_written());
            }
            // The server holds it now.
            own.into_raw();
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
    ) -> Result<(), RedisError> {
        check_value_type()?;
        if self.key.is_null() {
            return Err(error::key_not_open());
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
            return Err(error::key_not_written());
        }
        // The server holds it now.
        value.into_raw();
        let expired = self.write_expire(expire_at);
        self.modified();
        expired
    }

    /// Sets the key's expiry to the absolute unix time `at_ms` (`None`: no expiry).
    pub fn set_expire_at(&self, at_ms: Option<i64>) -> Result<(), RedisError> {
        let written = self.write_expire(at_ms);
        if written.is_ok() {
            self.modified();
        }
        written
    }

    /// Writes the key's expiry without signalling the change (the callers do, once).
    fn write_expire(&self, at_ms: Option<i64>) -> Result<(), RedisError> {
        if self.key.is_null() {
            return Err(error::key_not_open());
        }
        // SAFETY: self.key is an open, non-null key handle; the server checks the mode.
        let status = unsafe {
            match at_ms {
                Some(at) => {
                    raw::RedisModule_SetAbsExpire.expect("RedisModule_SetAbsExpire")(self.key, at)
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
            Err(error::expiry_not_set())
        }
    }

    /// The key's expiry as absolute unix time in ms, `None` if it has none or does not
    /// exist (Redis 8.2 reads the value's expiry without checking that there is one).
    pub fn expire_at(&self) -> Option<i64> {
        if self.kind() == KeyKind::Empty {
            return None;
        }
        // SAFETY: self.key is an open, non-null handle of a key that exists.
        let at =
            unsafe { raw::RedisModule_GetAbsExpire.expect("RedisModule_GetAbsExpire")(self.key) };
        (at != raw::REDISMODULE_NO_EXPIRE.into()).then_some(at)
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

/// A lock's state as `LOCK._SET` carries it.
pub struct LockSet<'a> {
    /// The holder's token.
    pub token: &'a [u8],
    /// The fence of the grant.
    pub fence: u64,
    /// Unix time in ms of the grant.
    pub acquired_ms: i64,
    /// Absolute unix time in ms of the key's expiry.
    pub expire_at: i64,
    /// The grace of a session-bound lock, `None` for a plain one.
    pub grace_ms: Option<i64>,
}

/// Replicates a grant as `LOCK._SET key token fence acquired-ms expire-at-ms [grace-ms]`
/// (the grace for a session-bound lock).
///
/// Raw `RedisModule_Replicate` with a typed format: the key goes as the string the
/// server already has and the token as a buffer. The numbers are written as decimal
/// here, on the stack, and passed as buffers too: the server's own `l` conversion makes
/// two allocations per number (an object and its string), a buffer makes one (the
/// profile put replication at more than a third of an acquire's cost).
pub fn replicate_lock_set(ctx: &Context, key: &RedisString, lock: &LockSet) {
    let (fence, acquired, expire) = (
        Decimal::new(lock.fence as i64),
        Decimal::new(lock.acquired_ms),
        Decimal::new(lock.expire_at),
    );
    let (fence, acquired, expire) = (fence.digits(), acquired.digits(), expire.digits());
    // A session-bound lock adds its grace; for a plain one the format stops before it,
    // and the server reads no further argument.
    let (format, grace) = match lock.grace_ms {
        None => (c"sbbbb", std::ptr::null_mut()),
        Some(grace_ms) => (c"sbbbbs", grace_string(grace_ms)),
    };
    // SAFETY: format `sbbbb[s]`: s = RedisModuleString*, b = pointer and length; every
    // argument is live for the call, which copies or takes a reference to what it keeps.
    unsafe {
        raw::RedisModule_Replicate.expect("RedisModule_Replicate")(
            ctx.get_raw(),
            c"LOCK._SET".as_ptr(),
            format.as_ptr(),
            key.inner,
            lock.token.as_ptr(),
            lock.token.len(),
            fence.as_ptr(),
            fence.len(),
            acquired.as_ptr(),
            acquired.len(),
            expire.as_ptr(),
            expire.len(),
            grace,
        );
    }
}

/// Replicates one shared holder as `LOCK._HOLD key token fence acquired-ms expire-at-ms
/// limit grace-ms` (`limit` -1 for none, `grace-ms` -1 for a plain holder): the holder is
/// added, or replaced if its token holds the key already.
pub fn replicate_hold(ctx: &Context, key: &RedisString, lock: &LockSet, limit: Option<u32>) {
    let numbers = [
        Decimal::new(lock.fence as i64),
        Decimal::new(lock.acquired_ms),
        Decimal::new(lock.expire_at),
        Decimal::new(limit.map_or(-1, i64::from)),
        Decimal::new(lock.grace_ms.unwrap_or(-1)),
    ];
    let [fence, acquired, expire, limit, grace] = numbers.each_ref().map(Decimal::digits);
    // SAFETY: format `sbbbbbb`: s = RedisModuleString*, b = pointer and length; every
    // argument is live for the call, which copies what it keeps.
    unsafe {
        raw::RedisModule_Replicate.expect("RedisModule_Replicate")(
            ctx.get_raw(),
            c"LOCK._HOLD".as_ptr(),
            c"sbbbbbb".as_ptr(),
            key.inner,
            lock.token.as_ptr(),
            lock.token.len(),
            fence.as_ptr(),
            fence.len(),
            acquired.as_ptr(),
            acquired.len(),
            expire.as_ptr(),
            expire.len(),
            limit.as_ptr(),
            limit.len(),
            grace.as_ptr(),
            grace.len(),
        );
    }
}

/// Replicates the removal of one shared holder as `LOCK._DROP key token`.
pub fn replicate_drop(ctx: &Context, key: &RedisString, token: &[u8]) {
    // SAFETY: format `sb`: the key string and a buffer, both live for the call.
    unsafe {
        raw::RedisModule_Replicate.expect("RedisModule_Replicate")(
            ctx.get_raw(),
            c"LOCK._DROP".as_ptr(),
            c"sb".as_ptr(),
            key.inner,
            token.as_ptr(),
            token.len(),
        );
    }
}

/// The grace last replicated, and the server string that holds it in decimal. Plain
/// statics, not thread-locals: the server calls the module on its main thread only, and
/// a thread-local costs a call in a loaded library.
static GRACE_MS: AtomicI64 = AtomicI64::new(0);
static GRACE: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(std::ptr::null_mut());

/// `grace_ms` as a server string for `LOCK._SET`. Locks mostly share one grace, so the
/// last one is kept: replicating it then costs a reference, where a new string costs an
/// allocation and a free.
fn grace_string(grace_ms: i64) -> *mut raw::RedisModuleString {
    let last = GRACE.load(Ordering::Relaxed);
    if !last.is_null() && GRACE_MS.load(Ordering::Relaxed) == grace_ms {
        return last;
    }
    let digits = Decimal::new(grace_ms);
    let digits = digits.digits();
    // SAFETY: a NULL context makes a string the module owns (no automatic memory); the
    // bytes are copied. The string it replaces is freed once: the server keeps its own
    // reference to any it still propagates.
    let string = unsafe {
        if !last.is_null() {
            raw::RedisModule_FreeString.expect("RedisModule_FreeString")(
                std::ptr::null_mut(),
                last,
            );
        }
        raw::RedisModule_CreateString.expect("RedisModule_CreateString")(
            std::ptr::null_mut(),
            digits.as_ptr().cast(),
            digits.len(),
        )
    };
    GRACE.store(string, Ordering::Relaxed);
    GRACE_MS.store(grace_ms, Ordering::Relaxed);
    string
}

/// Replicates a new absolute expiry as `PEXPIREAT key at-ms`.
pub fn replicate_pexpireat(ctx: &Context, key: &RedisString, at_ms: i64) {
    let at = Decimal::new(at_ms);
    let at = at.digits();
    // SAFETY: format `sb`: the key string and a buffer, both live for the call.
    unsafe {
        raw::RedisModule_Replicate.expect("RedisModule_Replicate")(
            ctx.get_raw(),
            c"PEXPIREAT".as_ptr(),
            c"sb".as_ptr(),
            key.inner,
            at.as_ptr(),
            at.len(),
        );
    }
}

/// Replicates a release as `DEL key`.
pub fn replicate_del(ctx: &Context, key: &RedisString) {
    // SAFETY: format `s`: the key string, live for the call.
    unsafe {
        raw::RedisModule_Replicate.expect("RedisModule_Replicate")(
            ctx.get_raw(),
            c"DEL".as_ptr(),
            c"s".as_ptr(),
            key.inner,
        );
    }
}

/// Fires keyspace event `event` (module class) on `key`.
pub fn notify(ctx: &Context, event: &CStr, key: &RedisString) {
    // SAFETY: ctx, event and key are live for the call.
    unsafe {
        raw::RedisModule_NotifyKeyspaceEvent.expect("RedisModule_NotifyKeyspaceEvent")(
            ctx.get_raw(),
            raw::REDISMODULE_NOTIFY_MODULE,
            event.as_ptr(),
            key.inner,
        );
    }
}

/// Replies `[token, fence]`, the answer to a granted acquire.
pub fn reply_granted(ctx: &Context, token: &[u8], fence: u64) {
    let ctx = ctx.get_raw();
    raw::reply_with_array(ctx, 2);
    raw::reply_with_string_buffer(ctx, token.as_ptr().cast(), token.len());
    raw::reply_with_long_long(ctx, fence as i64);
}

/// A field's value in a map reply.
#[derive(Debug, Clone, Copy)]
pub enum Field {
    /// An integer.
    Integer(i64),
    /// A word, sent as a bulk string.
    Word(&'static str),
}

/// Replies with a map of fields: a map in RESP3, a flat field/value array in RESP2.
/// Field names are bulk strings, as in `XINFO`.
pub fn reply_map(ctx: &Context, fields: &[(&str, Field)]) {
    let ctx = ctx.get_raw();
    raw::reply_with_map(ctx, fields.len() as c_long);
    for (name, value) in fields {
        raw::reply_with_string_buffer(ctx, name.as_ptr().cast(), name.len());
        match value {
            Field::Integer(n) => raw::reply_with_long_long(ctx, *n),
            Field::Word(word) => {
                raw::reply_with_string_buffer(ctx, word.as_ptr().cast(), word.len())
            }
        };
    }
}

/// A module timer callback: the server's signature.
pub type TimerCallback = extern "C" fn(*mut raw::RedisModuleCtx, *mut c_void);

/// Starts a module timer that calls `callback` with `data` after `delay_ms` (at least 0).
/// `data` is opaque to the server (an id, or a pointer the caller made with
/// `Box::into_raw` and takes back in the callback or from `stop_timer`). Returns the
/// timer's id.
pub fn create_timer(ctx: &Context, delay_ms: i64, callback: TimerCallback, data: usize) -> u64 {
    // SAFETY: ctx is a live context; the callback has the server's signature and lives as
    // long as the module; the server only hands `data` back, never reads it.
    unsafe {
        raw::RedisModule_CreateTimer.expect("RedisModule_CreateTimer")(
            ctx.get_raw(),
            delay_ms.max(0),
            Some(callback),
            data as *mut c_void,
        )
    }
}

/// Stops timer `id`: its data if it had not fired yet (the caller owns it again),
/// `None` if it had fired or never existed.
pub fn stop_timer(ctx: &Context, id: u64) -> Option<usize> {
    let mut data: *mut c_void = std::ptr::null_mut();
    // SAFETY: ctx is live; a timer that already fired is reported as an error and leaves
    // data untouched.
    let stopped = unsafe {
        raw::RedisModule_StopTimer.expect("RedisModule_StopTimer")(ctx.get_raw(), id, &mut data)
    };
    (stopped == raw::REDISMODULE_OK as c_int).then_some(data as usize)
}

/// A callback with the data it is called with, boxed for the server to hand back.
struct Boxed<T> {
    callback: fn(&Context, T),
    data: T,
}

extern "C" fn run_boxed<T>(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    // SAFETY: data is the Box<Boxed<T>> that start_timer_with or post_job_with made for
    // this very T; the server hands it back once (a timer fires once, a job runs once),
    // and a stopped timer's data is taken back by stop_timer_with instead.
    let boxed = unsafe { Box::from_raw(data.cast::<Boxed<T>>()) };
    crate::guard::callback((), move || (boxed.callback)(&Context::new(ctx), boxed.data));
}

/// Starts a module timer that calls `callback(ctx, data)` after `delay_ms`; its id.
/// Stop it with `stop_timer_with::<T>` to get `data` back.
pub fn start_timer_with<T: 'static>(
    ctx: &Context,
    delay_ms: i64,
    callback: fn(&Context, T),
    data: T,
) -> u64 {
    let boxed = Box::into_raw(Box::new(Boxed { callback, data }));
    create_timer(ctx, delay_ms, run_boxed::<T>, boxed as usize)
}

/// Stops timer `id`, started by `start_timer_with` with data of type `T`: the data if it
/// had not fired yet.
pub fn stop_timer_with<T>(ctx: &Context, id: u64) -> Option<T> {
    stop_timer(ctx, id).map(|data| {
        // SAFETY: the timer was started by start_timer_with::<T>, whose data is a
        // Box<Boxed<T>>, and a stopped timer hands it back once.
        unsafe { Box::from_raw(data as *mut Boxed<T>) }.data
    })
}

/// Runs `callback(ctx, data)` as a post-notification job (see `add_post_job`); the data
/// back when the server runs no such job.
pub fn post_job_with<T: 'static>(
    ctx: &Context,
    callback: fn(&Context, T),
    data: T,
) -> Result<(), T> {
    let boxed = Box::into_raw(Box::new(Boxed { callback, data }));
    if add_post_job(ctx, run_boxed::<T>, boxed as usize) {
        return Ok(());
    }
    // SAFETY: the server refused the job, so the box made above is still ours.
    Err(unsafe { Box::from_raw(boxed) }.data)
}

/// A post-notification job: the server's signature.
pub type JobCallback = extern "C" fn(*mut raw::RedisModuleCtx, *mut c_void);

/// Whether the server runs post-notification jobs (Redis 7.2+, Valkey): work a module
/// asks for from a callback where writes are forbidden, run as soon as writes are safe,
/// atomically with the operation that triggered it (the end of the command, of the
/// expiry or eviction of a key, of a timer).
pub fn has_post_jobs() -> bool {
    // SAFETY: reading a function pointer from the API table filled at load time.
    unsafe { raw::RedisModule_AddPostNotificationJob }.is_some()
}

/// Asks for `callback(data)` as a post-notification job (`data` is opaque, as for
/// `create_timer`). False when the server has no such jobs, or refuses them now
/// (loading, a read-only replica): then `data` is still the caller's.
pub fn add_post_job(ctx: &Context, callback: JobCallback, data: usize) -> bool {
    // SAFETY: reading a function pointer from the API table filled at load time.
    let Some(add) = (unsafe { raw::RedisModule_AddPostNotificationJob }) else {
        return false;
    };
    // SAFETY: ctx is live and has a client (a command's, or the detached context's); the
    // callback lives as long as the module and takes ownership of data when it runs.
    let status = unsafe { add(ctx.get_raw(), Some(callback), data as *mut c_void, None) };
    status == raw::REDISMODULE_OK as c_int
}

thread_local! {
    /// A context that outlives every callback (the module's detached context), for
    /// timers and jobs asked for where the server gives no context (type callbacks).
    static DETACHED: std::cell::Cell<*mut raw::RedisModuleCtx> =
        const { std::cell::Cell::new(std::ptr::null_mut()) };
}

/// Keeps a detached context for the life of the module (called once, at load).
pub fn init_detached(ctx: &Context) -> bool {
    // SAFETY: ctx is the load context; the detached context lives until the server exits
    // and is only used on the main thread.
    let detached = unsafe {
        raw::RedisModule_GetDetachedThreadSafeContext.expect("GetDetachedThreadSafeContext")(
            ctx.get_raw(),
        )
    };
    DETACHED.with(|d| d.set(detached));
    !detached.is_null()
}

/// The module's detached context (see `init_detached`).
pub fn detached() -> Context {
    Context::new(DETACHED.with(std::cell::Cell::get))
}

/// The callback for the client-change event (set once, at load).
static CLIENT_CHANGE: OnceLock<raw::RedisModuleEventCallback> = OnceLock::new();
/// Whether that callback is subscribed now. (A plain static, not a thread-local: the
/// server calls the module on its main thread only, and this is read on every
/// session-bound acquire, where a thread-local costs a call in a loaded library.)
static WATCHING: AtomicBool = AtomicBool::new(false);

/// Sets the callback that `watch_connections` subscribes to the client-change event.
pub fn on_client_change(callback: raw::RedisModuleEventCallback) {
    if CLIENT_CHANGE.set(callback).is_err() {
        detached().log_warning("lock: the client-change callback was set twice");
    }
}

/// Subscribes the client-change callback (`on`) or unsubscribes it. The server builds a
/// client's whole description, address text included, for every subscriber on every
/// connect and close: a third more work for a short connection, so the module listens
/// only while it has something to hear. Never to be turned off from inside that event's
/// own callback (the server would free the listener it is running). A refusal is
/// logged: session-bound locks then last until their TTL.
pub fn watch_connections(on: bool) {
    if WATCHING.load(Ordering::Relaxed) == on {
        return;
    }
    let Some(&callback) = CLIENT_CHANGE.get() else {
        return;
    };
    // SAFETY: the detached context belongs to this module; the callback is a plain
    // function that lives as long as the module; None unsubscribes.
    let status = unsafe {
        raw::RedisModule_SubscribeToServerEvent.expect("SubscribeToServerEvent")(
            detached().get_raw(),
            raw::RedisModuleEvent {
                id: raw::REDISMODULE_EVENT_CLIENT_CHANGE,
                dataver: 1,
            },
            if on { callback } else { None },
        )
    };
    if status == raw::REDISMODULE_OK as c_int {
        WATCHING.store(on, Ordering::Relaxed);
    } else {
        detached().log_warning(
            "lock: the server refused the client-change event; a session-bound lock \
             lasts until its TTL",
        );
    }
}

/// A task for `after_this_command`: it gets the timer's context, where keys may be
/// opened and written.
pub type Task = fn(&Context);

/// Runs `task` from a timer as soon as the current command or cycle is over.
pub fn after_this_command(task: Task) {
    create_timer(&detached(), 0, run_task, task as usize);
}

extern "C" fn run_task(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    // SAFETY: data is the `Task` that after_this_command passed.
    let task: Task = unsafe { std::mem::transmute::<*mut c_void, Task>(data) };
    crate::guard::callback((), || task(&Context::new(ctx)));
}

/// Valkey 9's `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION` (its `valkeymodule.h`),
/// which the binding's header predates.
pub const OPTION_HANDLE_ATOMIC_SLOT_MIGRATION: c_int = 1 << 5;

/// Declares the module's options: what it handles itself (`ModuleOptions` bits, and
/// the server-specific ones above where the server defines them).
pub fn set_module_options(ctx: &Context, options: c_int) {
    // SAFETY: ctx is the load context; the call only records the bits.
    unsafe { raw::RedisModule_SetModuleOptions.expect("SetModuleOptions")(ctx.get_raw(), options) };
}

/// Whether the server is a replica now: it follows its master, and grants nothing itself.
pub fn is_replica(ctx: &Context) -> bool {
    ctx.get_flags().contains(redis_module::ContextFlags::SLAVE)
}

/// The fields `redis_version` and `valkey_version` of `INFO server` (the second only on
/// Valkey).
pub fn server_versions(ctx: &Context) -> (Option<String>, Option<String>) {
    let info = ctx.server_info("server");
    let field = |name: &str| info.field(name).map(|value| value.to_string());
    (field("redis_version"), field("valkey_version"))
}

/// The field `mem_allocator` of `INFO memory` (`jemalloc-5.3.0`, `libc`), empty if absent.
pub fn server_allocator(ctx: &Context) -> String {
    let info = ctx.server_info("memory");
    info.field("mem_allocator")
        .map(|value| value.to_string())
        .unwrap_or_default()
}
