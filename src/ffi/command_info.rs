//! What the server knows of each command beyond its flags: its arity, how it uses its
//! key (`COMMAND INFO`), and its documentation (`COMMAND DOCS`: summary, since,
//! complexity and every argument, which `redis-cli help` prints and the interactive cli
//! shows as hints while one types).
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

/// Where a command's keys are, and how it uses them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// No key.
    None,
    /// One key, at argument 1.
    One(KeyUse),
    /// `numkeys` at argument 1, then that many keys (`LOCK.ACQUIREALL`): the server finds
    /// them itself, for ACL key rights and for `CROSSSLOT` in a cluster.
    Counted(KeyUse),
}

impl Keys {
    /// First key, last key and key step, as `CreateCommand` takes them (all 0 where the key
    /// spec alone says where the keys are).
    pub fn legacy_range(self) -> (c_int, c_int, c_int) {
        match self {
            Keys::One(_) => (1, 1, 1),
            Keys::None | Keys::Counted(_) => (0, 0, 0),
        }
    }
}

/// What an argument is, as `COMMAND DOCS` names it.
#[derive(Debug, Clone, Copy)]
pub enum ArgKind {
    /// A key name (the command's key spec 0).
    Key,
    /// Any string.
    String,
    /// An integer.
    Integer,
    /// The token alone, with no value (`SHARED`).
    PureToken,
}

/// One argument of a command, as `COMMAND DOCS` shows it.
#[derive(Debug, Clone, Copy)]
pub struct Arg {
    /// Its name in the synopsis (`ttl-ms`).
    pub name: &'static CStr,
    /// What it is.
    pub kind: ArgKind,
    /// The word that introduces it (`TOKEN`), if any.
    pub token: Option<&'static CStr>,
    /// Whether it may be left out.
    pub optional: bool,
    /// Whether it may repeat (`arg [arg ...]`).
    pub multiple: bool,
}

impl Arg {
    /// A required argument of `kind`, with no token.
    pub const fn required(name: &'static CStr, kind: ArgKind) -> Self {
        Arg {
            name,
            kind,
            token: None,
            optional: false,
            multiple: false,
        }
    }

    /// An optional `TOKEN value` pair (`kind` is the value's; `PureToken`: the word alone).
    pub const fn option(name: &'static CStr, token: &'static CStr, kind: ArgKind) -> Self {
        Arg {
            name,
            kind,
            token: Some(token),
            optional: true,
            multiple: false,
        }
    }
}

/// A command's documentation, as `COMMAND DOCS` shows it.
#[derive(Debug, Clone, Copy)]
pub struct Doc {
    /// One line: what it does.
    pub summary: &'static CStr,
    /// The module version that added it.
    pub since: &'static CStr,
    /// Its time complexity.
    pub complexity: &'static CStr,
    /// Its arguments after the command name, in order.
    pub args: &'static [Arg],
}

/// The server's argument vector for `args`, ending with an all-zero entry.
fn build_args(args: &[Arg]) -> Vec<raw::RedisModuleCommandArg> {
    let mut built = Vec::with_capacity(args.len() + 1);
    for arg in args {
        let kind = match arg.kind {
            ArgKind::Key => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
            ArgKind::String => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
            ArgKind::Integer => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
            ArgKind::PureToken => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
        };
        let mut flags = raw::REDISMODULE_CMD_ARG_NONE;
        if arg.optional {
            flags |= raw::REDISMODULE_CMD_ARG_OPTIONAL;
        }
        if arg.multiple {
            flags |= raw::REDISMODULE_CMD_ARG_MULTIPLE;
        }
        built.push(raw::RedisModuleCommandArg {
            name: arg.name.as_ptr(),
            type_: kind,
            key_spec_index: if matches!(arg.kind, ArgKind::Key) {
                0
            } else {
                -1
            },
            token: arg.token.map_or(ptr::null(), CStr::as_ptr),
            summary: ptr::null(),
            since: ptr::null(),
            flags: flags as c_int,
            deprecated_since: ptr::null(),
            subargs: ptr::null_mut(),
            display_text: ptr::null(),
        });
    }
    // SAFETY: an argument is plain data (pointers and integers); all zeroes (a null name)
    // ends the list.
    built.push(unsafe { std::mem::zeroed() });
    built
}

/// The layout of the structures below, as this build of the binding sees them.
static VERSION: raw::RedisModuleCommandInfoVersion = raw::RedisModuleCommandInfoVersion {
    version: 1,
    sizeof_historyentry: size_of::<raw::RedisModuleCommandHistoryEntry>(),
    sizeof_keyspec: size_of::<raw::RedisModuleCommandKeySpec>(),
    sizeof_arg: size_of::<raw::RedisModuleCommandArg>(),
};

/// The key spec of `keys` (none for `Keys::None`), and the all-zero spec that ends the
/// list.
fn key_specs(keys: Keys) -> Option<[raw::RedisModuleCommandKeySpec; 2]> {
    // SAFETY: the key spec is plain data (integers, a null pointer, unions of integers);
    // all zeroes is the list's terminator.
    let end: raw::RedisModuleCommandKeySpec = unsafe { std::mem::zeroed() };
    let mut spec = end;
    spec.begin_search_type = raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
    spec.bs.index.pos = 1;
    match keys {
        Keys::None => return None,
        Keys::One(key_use) => {
            spec.flags = key_use.flags();
            spec.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
            spec.fk.range.lastkey = 0;
            spec.fk.range.keystep = 1;
            spec.fk.range.limit = 0;
        }
        Keys::Counted(key_use) => {
            // Argument 1 is the count; the keys follow it, one by one.
            spec.flags = key_use.flags();
            spec.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM;
            spec.fk.keynum.keynumidx = 0;
            spec.fk.keynum.firstkey = 1;
            spec.fk.keynum.keystep = 1;
        }
    }
    Some([spec, end])
}

/// Declares `name`'s arity (negative: at least that many, the name included), where its
/// keys are and how it uses them, and its documentation if it has one. Runs at
/// load, after the command is registered. On a server older than 7.0, which lacks the
/// call, it does nothing (the commands check their own arity too).
pub fn declare(ctx: &Context, name: &CStr, arity: c_int, keys: Keys, doc: Option<&Doc>) -> bool {
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
    let mut specs = key_specs(keys);
    let mut args = doc.map(|doc| build_args(doc.args));
    let text = |field: fn(&Doc) -> &'static CStr| doc.map_or(ptr::null(), |d| field(d).as_ptr());
    let info = raw::RedisModuleCommandInfo {
        version: &VERSION,
        summary: text(|d| d.summary),
        complexity: text(|d| d.complexity),
        since: text(|d| d.since),
        history: ptr::null_mut(),
        tips: ptr::null(),
        arity,
        key_specs: specs
            .as_mut()
            .map_or(ptr::null_mut(), |specs| specs.as_mut_ptr()),
        args: args
            .as_mut()
            .map_or(ptr::null_mut(), |args| args.as_mut_ptr()),
    };
    // SAFETY: command belongs to this module; info, the key specs and the arguments it
    // points to live until the call returns, and the server copies what it keeps.
    let status = unsafe { set_info(command, &info) };
    status == raw::REDISMODULE_OK as c_int
}

/// Adds the ACL category `name` (`ACL CAT`), where the server's module API can: Redis 7.4
/// and later, Valkey 8 and later. False where it lacks the call (the commands are then in
/// the categories their flags give, and no other), or refuses.
pub fn add_acl_category(ctx: &Context, name: &CStr) -> bool {
    // SAFETY: reading function pointers from the API table filled at load time.
    let api = unsafe {
        (
            raw::RedisModule_AddACLCategory,
            raw::RedisModule_SetCommandACLCategories,
        )
    };
    let (Some(add), Some(_)) = api else {
        return false;
    };
    // SAFETY: called from OnLoad with its context; the server copies the name.
    let status = unsafe { add(ctx.get_raw(), name.as_ptr()) };
    status == raw::REDISMODULE_OK as c_int
}

/// Puts command `name` in the ACL categories `categories` (space-separated, without `@`),
/// beside those its flags give. Only after `add_acl_category` succeeded.
pub fn set_acl_categories(ctx: &Context, name: &CStr, categories: &CStr) -> bool {
    // SAFETY: reading function pointers from the API table filled at load time.
    let api = unsafe {
        (
            raw::RedisModule_GetCommand,
            raw::RedisModule_SetCommandACLCategories,
        )
    };
    let (Some(get_command), Some(set)) = api else {
        return false;
    };
    // SAFETY: ctx is the load context and name a NUL-terminated command name.
    let command = unsafe { get_command(ctx.get_raw(), name.as_ptr()) };
    if command.is_null() {
        return false;
    }
    // SAFETY: command belongs to this module; the server parses the categories and keeps
    // nothing of the string.
    let status = unsafe { set(command, categories.as_ptr()) };
    status == raw::REDISMODULE_OK as c_int
}
