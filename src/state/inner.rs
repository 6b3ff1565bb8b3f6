//! Which commands `LOCK.DO` may run: pure Rust, no FFI.
//!
//! What a script may not run may not run inside `LOCK.DO` either: commands that may block
//! (they could not wait inside another command), the ones flagged `noscript` (`MULTI`,
//! `EXEC`, `WATCH`, `SUBSCRIBE` and the other pub/sub subscriptions, `WAIT`...), and the
//! module's own `LOCK.*` (a lock command inside a fenced write has no meaning the
//! contract gives). The server's `COMMAND INFO` flags decide; the verdict is kept per
//! command name.

/// Why a command may not run inside `LOCK.DO`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// One of the module's own commands.
    LockCommand,
    /// It may block (`blocking`).
    Blocking,
    /// Not in a script (`noscript`): transactions, subscriptions and the like.
    NotInScript,
}

impl Refusal {
    /// The reason, as the error names it.
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::LockCommand => "a LOCK command cannot run inside LOCK.DO",
            Refusal::Blocking => "it may block",
            Refusal::NotInScript => "it may not run inside a script",
        }
    }
}

/// Whether the command `name` may run inside `LOCK.DO`, by its `COMMAND INFO` flags.
pub fn verdict(name: &[u8], flags: &[String]) -> Result<(), Refusal> {
    if name.len() >= 5 && name[..5].eq_ignore_ascii_case(b"lock.") {
        return Err(Refusal::LockCommand);
    }
    if flags.iter().any(|f| f == "blocking") {
        return Err(Refusal::Blocking);
    }
    if flags.iter().any(|f| f == "noscript") {
        return Err(Refusal::NotInScript);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(list: &[&str]) -> Vec<String> {
        list.iter().map(|f| f.to_string()).collect()
    }

    #[test]
    fn scripts_rules_and_lock_commands_decide() {
        assert_eq!(
            verdict(b"hset", &flags(&["write", "denyoom", "fast"])),
            Ok(())
        );
        assert_eq!(verdict(b"publish", &flags(&["pubsub", "fast"])), Ok(()));
        assert_eq!(
            verdict(b"BLPOP", &flags(&["write", "blocking"])),
            Err(Refusal::Blocking)
        );
        assert_eq!(
            verdict(b"multi", &flags(&["noscript", "fast"])),
            Err(Refusal::NotInScript)
        );
        assert_eq!(
            verdict(b"Lock.Release", &flags(&["write"])),
            Err(Refusal::LockCommand)
        );
        assert_eq!(verdict(b"lock", &flags(&[])), Ok(()));
    }
}
