//! What the server knows of each command beyond its flags: its arity and how it uses its
//! key (`COMMAND INFO`).
//!
//! The binding registers commands with arity -1 and a key spec derived from first/last/
//! step, which the server marks read-write for every command. Declaring the real arity
//! lets the server refuse a wrong number of arguments itself, as for its own commands
//! (inside `MULTI` that aborts the transaction at `EXEC`); declaring `LOCK.INFO`'s key
//! read-only lets an ACL user with `%R~` key rights call it.

use std::ffi::CStr;
use std::os::raw::c_int;
use std::ptr;

use redis_module::{Context, raw};

/// How a command uses its one key, as the server's key-spec flags say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyUse {
    /// Reads it and returns what it holds (`LOCK.INFO`).
    Read,
    /// Reads and writes it, perhaps adding it (`LOCK.ACQUIRE`, `LOCK.EXTEND`).
    Update,
    /// Reads it and may delete it (`LOCK.RELEASE`).
    Delete,
    /// Overwrites it whatever it held (`LOCK._SET`).
    Overwrite,
    /// Reads it, and other keys follow that the command declares itself when the server
    /// asks (`LOCK.DO`: the spec is incomplete, so the server asks).
    ReadThenMore,
}

impl KeyUse {
    fn flags(self) -> u64 {
        u64::from(match self {
            Self::Read => raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
            Self::Update => raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_UPDATE,
            Self::Delete => raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_DELETE,
            Self::Overwrite => raw::REDISMODULE_CMD_KEY_OW | raw::REDISMODULE_CMD_KEY_UPDATE,
            Self::ReadThenMore => {
                raw::REDISMODULE_CMD_KEY_RO
                    | raw::REDISMODULE_CMD_KEY_ACCESS
                    | raw::REDISMODULE_CMD_KEY_INCOMPLETE
            }
        })
    }
}

/// The layout of the structures below, as this build of the binding sees them.
static VERSION: raw::RedisModuleCommandInfoVersion = raw::RedisModuleCommandInfoVersion {
    version: 1,
    sizeof_historyentry: size_of::<raw::RedisModuleCommandHistoryEntry>(),
    sizeof_keyspec: size_of::<raw::RedisModuleCommandKeySpec>(),
    sizeof_arg: size_of::<raw::RedisModuleCommandArg>(),
};

/// A key spec for a key at argument 1, and the all-zero spec that ends the list.
fn key_at_first_argument(key_use: KeyUse) -> [raw::RedisModuleCommandKeySpec; 2] {
    // SAFETY: the key spec is plain data (integers, a null pointer, unions of integers);
    // all zeroes is the list's terminator.
    let end: raw::RedisModuleCommandKeySpec = unsafe { std::mem::zeroed() };
    let mut spec = end;
    spec.flags = key_use.flags();
    spec.begin_search_type = raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
    spec.bs.index.pos = 1;
    spec.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
    spec.fk.range.lastkey = 0;
    spec.fk.range.keystep = 1;
    spec.fk.range.limit = 0;
    [spec, end]
}

/// Declares `name`'s arity (negative: at least that many, the name included) and, if it
/// has a key at argument 1, how it uses it. Runs at load, after the command is
/// registered. On a server older than 7.0, which lacks the call, it does nothing (the
/// commands check their own arity too).
pub fn declare(ctx: &Context, name: &CStr, arity: c_int, key_use: Option<KeyUse>) -> bool {
    // SAFETY: reading function pointers from the API table filled at load time.
    let api = unsafe { (raw::RedisModule_GetCommand, raw::RedisModule_SetCommandInfo) };
    let (Some(get_command), Some(set_info)) = api else {
        return true;
    };
    // SAFETY: ctx is the load context and name a NUL-terminated command name.
    let command = unsafe { get_command(ctx.get_raw(), name.as_ptr()) };
    if command.is_null() {
        return false;
    }
    let mut specs = key_use.map(key_at_first_argument);
    let info = raw::RedisModuleCommandInfo {
        version: &VERSION,
        summary: ptr::null(),
        complexity: ptr::null(),
        since: ptr::null(),
        history: ptr::null_mut(),
        tips: ptr::null(),
        arity,
        key_specs: specs
            .as_mut()
            .map_or(ptr::null_mut(), |specs| specs.as_mut_ptr()),
        args: ptr::null_mut(),
    };
    // SAFETY: command belongs to this module; info and the key specs it points to live
    // until the call returns, and the server copies what it keeps.
    let status = unsafe { set_info(command, &info) };
    status == raw::REDISMODULE_OK as c_int
}
