//! Timers, post-notification jobs, the detached context, and tasks run after the
//! current command.
//!
//! One timer style for the layers above: `start_timer_with(ctx, delay, callback, data)`
//! with a typed `callback(&Context, data)`, stopped with `stop_timer_with::<T>`, which
//! hands `data` back. The raw calls are this file's own.

use std::os::raw::{c_int, c_void};

use redis_module::{Context, raw};

/// A module timer callback: the server's signature.
type TimerCallback = extern "C" fn(*mut raw::RedisModuleCtx, *mut c_void);

/// Starts a module timer that calls `callback` with `data` after `delay_ms` (at least 0).
/// `data` is opaque to the server (a pointer made with `Box::into_raw` and taken back in
/// the callback or from `stop_timer`). Returns the timer's id.
fn create_timer(ctx: &Context, delay_ms: i64, callback: TimerCallback, data: usize) -> u64 {
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
fn stop_timer(ctx: &Context, id: u64) -> Option<usize> {
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
    crate::ffi::guard::callback((), move || (boxed.callback)(&Context::new(ctx), boxed.data));
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

/// A task for `after_this_command`: it gets the timer's context, where keys may be
/// opened and written.
pub type Task = fn(&Context);

/// Runs `task` from a timer as soon as the current command or cycle is over.
pub fn after_this_command(task: Task) {
    start_timer_with(&detached(), 0, run_task, task);
}

fn run_task(ctx: &Context, task: Task) {
    task(ctx);
}
