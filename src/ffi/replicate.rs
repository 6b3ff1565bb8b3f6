//! What the module writes to replicas and the AOF (the effects of its commands), and
//! the keyspace events it fires.

use std::ffi::CStr;
use std::sync::atomic::{AtomicI64, AtomicPtr, Ordering};

use redis_module::{Context, RedisString, raw};

use lock_core::decimal::Decimal;

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
    /// The published value (`VALUE v`), if any (`LOCK._SET` only).
    pub value: Option<&'a [u8]>,
}

/// Replicates a grant as `LOCK._SET key token fence acquired-ms expire-at-ms [grace-ms
/// [value]]` (the grace for a session-bound lock; with a published value, the grace -1
/// for a plain lock, then the value).
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
    // A session-bound lock adds its grace, a published value adds the grace (-1 for a
    // plain lock) and the value; otherwise the format stops before them, and the server
    // reads no further argument.
    let (format, grace) = match (lock.grace_ms, lock.value) {
        (None, None) => (c"sbbbb", std::ptr::null_mut()),
        (Some(grace_ms), None) => (c"sbbbbs", grace_string(grace_ms)),
        (grace_ms, Some(_)) => (c"sbbbbsb", grace_string(grace_ms.unwrap_or(-1))),
    };
    let value = lock.value.unwrap_or_default();
    // SAFETY: format `sbbbb[s[b]]`: s = RedisModuleString*, b = pointer and length; every
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
            value.as_ptr(),
            value.len(),
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
    let at_ms = Decimal::new(at_ms);
    let at_ms = at_ms.digits();
    // SAFETY: format `sb`: the key string and a buffer, both live for the call.
    unsafe {
        raw::RedisModule_Replicate.expect("RedisModule_Replicate")(
            ctx.get_raw(),
            c"PEXPIREAT".as_ptr(),
            c"sb".as_ptr(),
            key.inner,
            at_ms.as_ptr(),
            at_ms.len(),
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
