//! The module's settings: `lock.replicas` (how many replicas a grant waits for when its
//! command names none), set in `redis.conf` (`lock.replicas auto`), with `CONFIG SET`, or
//! as a `loadmodule` argument (`loadmodule .../liblock.so REPLICAS auto`).

use redis_module::{Context, RedisString};

use crate::ffi::config::{self, StringSetting};
use crate::keyspace::waiting::held;
use lock_core::replicas::Setting;

/// `lock.replicas`.
static REPLICAS: StringSetting = StringSetting {
    name: c"replicas",
    get: replicas,
    set: set_replicas,
};

fn replicas() -> String {
    held::setting().text()
}

fn set_replicas(value: &[u8]) -> Result<(), String> {
    let setting = Setting::parse(value).ok_or_else(|| {
        format!(
            "invalid lock.replicas '{}': expected an integer from 0 to {} or auto",
            String::from_utf8_lossy(value).escape_default(),
            lock_core::limits::MAX_REPLICAS
        )
    })?;
    held::set_setting(setting).map_err(|err| {
        let text = err.to_string();
        text.strip_prefix("ERR ").unwrap_or(&text).to_owned()
    })
}

/// The value of `lock.replicas` that the `loadmodule` arguments give (`REPLICAS v`, the
/// only argument the module takes), if any; why not, for any other argument.
fn from_args(args: &[&[u8]]) -> Result<Option<Vec<u8>>, String> {
    match args {
        [] => Ok(None),
        [name, value] if name.eq_ignore_ascii_case(b"replicas") => Ok(Some(value.to_vec())),
        _ => Err(format!(
            "unknown module arguments '{}': the module takes REPLICAS <0..{}|auto>",
            args.iter()
                .map(|arg| String::from_utf8_lossy(arg).escape_default().to_string())
                .collect::<Vec<_>>()
                .join(" "),
            lock_core::limits::MAX_REPLICAS
        )),
    }
}

/// Registers the settings with the server, with the `loadmodule` arguments as their
/// defaults (`redis.conf` and `MODULE LOADEX ... CONFIG` come after them); why not.
pub fn register(ctx: &Context, args: &[RedisString]) -> Result<(), String> {
    let args: Vec<&[u8]> = args.iter().map(RedisString::as_slice).collect();
    let default = from_args(&args)?.unwrap_or_else(|| b"auto".to_vec());
    set_replicas(&default)?;
    let default = String::from_utf8_lossy(&default).into_owned();
    if !config::register_string(ctx, &REPLICAS, &default) {
        return Err("the server did not register lock.replicas".to_owned());
    }
    if !config::load(ctx) {
        return Err("the server refused the configured lock.replicas".to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_only_module_argument_is_replicas() {
        assert_eq!(from_args(&[]), Ok(None));
        assert_eq!(
            from_args(&[b"replicas", b"auto"]),
            Ok(Some(b"auto".to_vec()))
        );
        assert!(
            from_args(&[b"REPLICAS"])
                .unwrap_err()
                .contains("REPLICAS <0..100|auto>")
        );
        assert!(from_args(&[b"x", b"1"]).unwrap_err().contains("'x 1'"));
    }

    #[test]
    fn a_bad_setting_says_what_it_takes() {
        let why = set_replicas(b"many").unwrap_err();
        assert!(
            why.contains("expected an integer from 0 to 100 or auto"),
            "{why}"
        );
    }
}
