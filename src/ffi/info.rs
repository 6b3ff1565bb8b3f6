//! `INFO` sections, read through the module API without leaking: the binding's own
//! `ServerInfo::field` retains a string the server hands it already owned, so every
//! field it reads stays allocated (about 90 bytes a grant where `auto` reads the
//! replicas). Here the fields are C strings that stay the server's, copied out.

use redis_module::{Context, raw};

/// One section of `INFO`, as the module API collects it, freed when dropped; its fields
/// are read with `ServerInfoGetFieldC`.
pub struct InfoSection {
    ctx: *mut raw::RedisModuleCtx,
    data: *mut raw::RedisModuleServerInfoData,
}

impl InfoSection {
    pub fn read(ctx: &Context, section: &std::ffi::CStr) -> Option<InfoSection> {
        // SAFETY: ctx is a live module context and `section` a NUL-terminated string;
        // the data returned is freed exactly once, in Drop.
        let data = unsafe {
            raw::RedisModule_GetServerInfo.expect("GetServerInfo")(ctx.get_raw(), section.as_ptr())
        };
        (!data.is_null()).then_some(InfoSection {
            ctx: ctx.get_raw(),
            data,
        })
    }

    pub fn field(&self, name: &str) -> Option<String> {
        let name = std::ffi::CString::new(name).ok()?;
        // SAFETY: `data` is live until Drop; the returned C string belongs to it and is
        // copied out before anything else touches it.
        unsafe {
            let value = raw::RedisModule_ServerInfoGetFieldC.expect("ServerInfoGetFieldC")(
                self.data,
                name.as_ptr(),
            );
            (!value.is_null()).then(|| {
                std::ffi::CStr::from_ptr(value)
                    .to_string_lossy()
                    .into_owned()
            })
        }
    }
}

impl Drop for InfoSection {
    fn drop(&mut self) {
        // SAFETY: `data` came from GetServerInfo with this context and is freed once.
        unsafe { raw::RedisModule_FreeServerInfo.expect("FreeServerInfo")(self.ctx, self.data) };
    }
}
