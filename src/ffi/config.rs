//! The module's settings, as the server's own configuration (`CONFIG GET/SET
//! lock.<name>`, a `lock.<name> value` line in `redis.conf`, `MODULE LOADEX ... CONFIG`).

use std::cell::Cell;
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_void};
use std::ptr;

use redis_module::{Context, raw};

/// A string setting: its name under the module's (`replicas` for `lock.replicas`), how
/// to read it, and how to set it (refused with a message).
pub struct StringSetting {
    /// Its name, under the module's.
    pub name: &'static CStr,
    /// Its value now, as `CONFIG GET` shows it.
    pub get: fn() -> String,
    /// Sets it from what the user gave, or says why not.
    pub set: fn(&[u8]) -> Result<(), String>,
}

thread_local! {
    /// The string last handed to the server by `get_string` (the server copies it):
    /// freed at the next call.
    static LAST: Cell<*mut raw::RedisModuleString> = const { Cell::new(ptr::null_mut()) };
}

/// Registers `setting` with the value `default` (what the server sets when no
/// configuration names it); false if the server refused.
pub fn register_string(ctx: &Context, setting: &'static StringSetting, default: &str) -> bool {
    let Ok(default) = CString::new(default) else {
        return false;
    };
    // SAFETY: ctx is the load context; the name and default are NUL-terminated (the
    // server copies them); the callbacks have the server's signatures and, like the
    // setting they are handed, live as long as the module.
    let status = unsafe {
        raw::RedisModule_RegisterStringConfig.expect("RegisterStringConfig")(
            ctx.get_raw(),
            setting.name.as_ptr(),
            default.as_ptr(),
            raw::REDISMODULE_CONFIG_DEFAULT,
            Some(get_string),
            Some(set_string),
            None,
            ptr::from_ref(setting).cast_mut().cast::<c_void>(),
        )
    };
    status == raw::REDISMODULE_OK as c_int
}

/// Applies the configuration's values (or the defaults) to the registered settings;
/// false if one was refused.
pub fn load(ctx: &Context) -> bool {
    // SAFETY: ctx is the load context, after every setting was registered.
    let status = unsafe { raw::RedisModule_LoadConfigs.expect("LoadConfigs")(ctx.get_raw()) };
    status == raw::REDISMODULE_OK as c_int
}

/// The setting a callback is about.
///
/// SAFETY (caller): `privdata` is the `&'static StringSetting` registered with it.
unsafe fn setting_of(privdata: *mut c_void) -> &'static StringSetting {
    // SAFETY: the caller's promise.
    unsafe { &*privdata.cast::<StringSetting>() }
}

/// A module string the server owns once handed over (an error) or copies (a value).
fn module_string(text: &str) -> *mut raw::RedisModuleString {
    // SAFETY: a NULL context makes a string no context frees; the bytes are copied.
    unsafe {
        raw::RedisModule_CreateString.expect("CreateString")(
            ptr::null_mut(),
            text.as_ptr().cast::<c_char>(),
            text.len(),
        )
    }
}

extern "C" fn get_string(
    _name: *const c_char,
    privdata: *mut c_void,
) -> *mut raw::RedisModuleString {
    crate::ffi::guard::callback(ptr::null_mut(), || {
        // SAFETY: privdata is what register_string handed the server.
        let value = (unsafe { setting_of(privdata) }.get)();
        let made = module_string(&value);
        let last = LAST.with(|last| last.replace(made));
        if !last.is_null() {
            // SAFETY: last is the string handed over at the previous call, which the
            // server copied then and no longer reads.
            unsafe { raw::RedisModule_FreeString.expect("FreeString")(ptr::null_mut(), last) };
        }
        made
    })
}

extern "C" fn set_string(
    _name: *const c_char,
    value: *mut raw::RedisModuleString,
    privdata: *mut c_void,
    err: *mut *mut raw::RedisModuleString,
) -> c_int {
    crate::ffi::guard::callback(raw::REDISMODULE_ERR as c_int, || {
        // SAFETY: value is the server's string, live for this call; privdata is what
        // register_string handed the server.
        let (value, setting) = unsafe {
            (
                redis_module::RedisString::string_as_slice(value),
                setting_of(privdata),
            )
        };
        match (setting.set)(value) {
            Ok(()) => raw::REDISMODULE_OK as c_int,
            Err(why) => {
                if !err.is_null() {
                    // SAFETY: err is the server's out-parameter; it frees the string.
                    unsafe { *err = module_string(&why) };
                }
                raw::REDISMODULE_ERR as c_int
            }
        }
    })
}
