//! A command's entry from the server: its arguments read in place, its handler run
//! through the panic guard, its reply sent.
//!
//! The binding's own command wrapper retains every argument (`RedisModule_RetainString`),
//! collects them into a `Vec` and frees them again afterwards: about a hundred and fifty
//! instructions per argument, a tenth of an acquire. The server keeps `argv` alive for
//! the whole call, so a command here reads it where it is, and slices of up to
//! [`INLINE`] arguments live on the stack.

use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::os::raw::c_int;

use redis_module::{Context, RedisString, raw};

use crate::ffi::reply::{Reply, error_reply};

use crate::ffi::guard;

/// How many arguments are read without a heap allocation (a valid `LOCK.ACQUIRE` has
/// at most nine).
const INLINE: usize = 10;

/// The arguments of the command being run, borrowed from the server for the call.
pub struct Args<'a> {
    ctx: *mut raw::RedisModuleCtx,
    argv: &'a [*mut raw::RedisModuleString],
    inline: [&'a [u8]; INLINE],
    spilled: Vec<&'a [u8]>,
}

impl<'a> Args<'a> {
    /// How many arguments, the command's name included.
    pub fn len(&self) -> usize {
        self.argv.len()
    }

    /// Every argument's bytes, the command's name first.
    pub fn bytes(&self) -> &[&'a [u8]] {
        if self.argv.len() <= INLINE {
            &self.inline[..self.argv.len()]
        } else {
            &self.spilled
        }
    }

    /// Argument `i`'s bytes (empty past the end: callers check the count first).
    pub fn get(&self, i: usize) -> &'a [u8] {
        self.bytes().get(i).copied().unwrap_or_default()
    }

    /// The server's argument strings themselves, for `call.rs` to pass on.
    pub(crate) fn raw(&self) -> &'a [*mut raw::RedisModuleString] {
        self.argv
    }

    /// Argument `i` as the server's string (for a key name), without retaining it.
    /// `None` past the end.
    pub fn string(&self, i: usize) -> Option<Borrowed<'a>> {
        let inner = *self.argv.get(i)?;
        Some(Borrowed {
            string: ManuallyDrop::new(RedisString::from_redis_module_string(self.ctx, inner)),
            _argv: std::marker::PhantomData,
        })
    }
}

/// One of the command's own arguments as a [`RedisString`]: never freed, since the
/// module holds no reference of its own to it.
pub struct Borrowed<'a> {
    string: ManuallyDrop<RedisString>,
    _argv: std::marker::PhantomData<&'a ()>,
}

impl Deref for Borrowed<'_> {
    type Target = RedisString;

    fn deref(&self) -> &RedisString {
        &self.string
    }
}

/// A command handler as the module registers it.
pub type Handler = fn(&Context, &Args) -> Reply;

/// Runs `handler` on the command the server dispatched, through the panic guard, and
/// sends its reply. What every command's `extern "C"` entry calls.
///
/// # Safety
///
/// `ctx`, `argv` and `argc` are what the server passed to the command's entry, and this
/// runs within that call.
pub unsafe fn dispatch(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    handler: Handler,
) -> c_int {
    let context = Context::new(ctx);
    let argv: &[*mut raw::RedisModuleString] = match usize::try_from(argc) {
        // SAFETY: the server passes its argument vector of `argc` live strings, which
        // it keeps (and does not change) until the command returns; this borrow ends
        // with this function.
        Ok(len) if len > 0 && !argv.is_null() => unsafe { std::slice::from_raw_parts(argv, len) },
        _ => &[],
    };
    let mut args = Args {
        ctx,
        argv,
        inline: [&[]; INLINE],
        spilled: Vec::new(),
    };
    let read = |&arg: &*mut raw::RedisModuleString| -> &[u8] {
        let mut len = 0;
        // SAFETY: `arg` is one of the server's live argument strings; the pointer it
        // returns stays valid, unchanged, for `len` bytes until the command returns.
        unsafe {
            let ptr =
                raw::RedisModule_StringPtrLen.expect("RedisModule_StringPtrLen")(arg, &mut len);
            if ptr.is_null() {
                &[]
            } else {
                std::slice::from_raw_parts(ptr.cast::<u8>(), len)
            }
        }
    };
    if argv.len() <= INLINE {
        for (slot, arg) in args.inline.iter_mut().zip(argv) {
            *slot = read(arg);
        }
    } else {
        args.spilled = argv.iter().map(read).collect();
    }
    let reply = guard::command(&context, &args, handler);
    context.reply(reply.map_err(error_reply)) as c_int
}

/// An `extern "C"` entry for the server that runs `handler` (a path to a [`Handler`]).
#[macro_export]
macro_rules! command_entry {
    ($handler:path) => {{
        // The unsafe call is this layer's, written here; the entry is expanded where the
        // command is registered, outside `ffi/`.
        #[allow(unsafe_code)]
        extern "C" fn entry(
            ctx: *mut redis_module::raw::RedisModuleCtx,
            argv: *mut *mut redis_module::raw::RedisModuleString,
            argc: std::os::raw::c_int,
        ) -> std::os::raw::c_int {
            // SAFETY: the server calls this entry with the command's own context and
            // arguments, and dispatch returns before the entry does.
            unsafe { $crate::ffi::command::dispatch(ctx, argv, argc, $handler) }
        }
        entry as $crate::ffi::command::Entry
    }};
}

/// A command's entry as the server calls it.
pub type Entry = unsafe extern "C" fn(
    *mut raw::RedisModuleCtx,
    *mut *mut raw::RedisModuleString,
    c_int,
) -> c_int;

/// Registers `name` with the server (`RedisModule_CreateCommand`): its entry, flags and
/// key positions. False when the server refuses.
pub fn create(
    ctx: &Context,
    name: &std::ffi::CStr,
    entry: Entry,
    flags: &std::ffi::CStr,
    keys: (c_int, c_int, c_int),
) -> bool {
    // SAFETY: called from OnLoad with its context; the name and flags are C strings the
    // server copies; the entry is a plain function that lives as long as the module.
    let status = unsafe {
        raw::RedisModule_CreateCommand.expect("RedisModule_CreateCommand")(
            ctx.get_raw(),
            name.as_ptr(),
            Some(entry),
            flags.as_ptr(),
            keys.0,
            keys.1,
            keys.2,
        )
    };
    status == raw::Status::Ok as c_int
}
