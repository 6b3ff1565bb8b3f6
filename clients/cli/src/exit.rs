//! The runner's own exit codes (docs/cli.md, "Exit codes"). When the command ran to its
//! end, the runner exits with the command's status instead (128 + the signal that killed
//! it, as shells do).

use std::fmt;

/// Bad usage: an unknown option, a missing command (`EX_USAGE`).
pub const USAGE: u8 = 64;
/// The server cannot be reached, or the replicas a grant needs are not there
/// (`EX_UNAVAILABLE`).
pub const UNAVAILABLE: u8 = 69;
/// The lock is busy and `--no-wait` was given (`EX_TEMPFAIL`; `--conflict-exit-code`).
pub const BUSY: u8 = 75;
/// The configuration is wrong: a bad URL, a refused password or command, a server
/// without the module (`EX_CONFIG`).
pub const CONFIG: u8 = 78;
/// The lock was lost while the command ran (the command was stopped): the first code
/// after the sysexits range.
pub const LOST: u8 = 79;
/// `--wait` ran out before the lock was free (as `timeout(1)` says a timeout).
pub const TIMED_OUT: u8 = 124;

/// Why the runner stops before (or instead of) the command's own status.
#[derive(Debug)]
pub struct Failure {
    /// The exit code.
    pub code: u8,
    /// What stderr says.
    pub message: String,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<redis::RedisError> for Failure {
    fn from(err: redis::RedisError) -> Self {
        Failure::new(code_of(&err), describe(&err))
    }
}

/// The exit code of a failed exchange with the server: unreachable (or too few
/// replicas) is 69, anything the server refused is 78.
pub fn code_of(err: &redis::RedisError) -> u8 {
    let unreachable = err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_timeout()
        || redis_lock_client::is_not_replicated(err)
        || matches!(
            err.code(),
            Some("LOADING" | "MASTERDOWN" | "CLUSTERDOWN" | "TRYAGAIN")
        );
    if unreachable { UNAVAILABLE } else { CONFIG }
}

/// What stderr says of `err`, with the likely cause of the usual configuration errors.
pub fn describe(err: &redis::RedisError) -> String {
    let text = err.to_string();
    if text.contains("unknown command") && text.to_ascii_uppercase().contains("LOCK.") {
        return format!("{text} (is the redis-lock module loaded on this server?)");
    }
    text
}

/// The exit code of a command's wait status: its exit code, or 128 + the signal that
/// killed it.
pub fn of_status(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => (128 + signal) as u8,
        (None, None) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_codes_are_distinct() {
        let mut codes = vec![USAGE, UNAVAILABLE, BUSY, CONFIG, LOST, TIMED_OUT];
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), 6);
    }

    #[test]
    fn a_refused_connection_is_unavailable_and_a_refused_command_is_configuration() {
        let refused =
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(code_of(&refused), UNAVAILABLE);
        let noperm = redis::RedisError::from((
            redis::ErrorKind::Extension,
            "NOPERM",
            "this user has no permissions".to_string(),
        ));
        assert_eq!(code_of(&noperm), CONFIG);
    }
}
