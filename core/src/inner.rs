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

/// The verdicts known so far, by command name (any case): a sorted list, searched without
/// an allocation or a hash of the name (a few hundred names at most, the server's).
#[derive(Debug, Default)]
pub struct Verdicts {
    names: Vec<(Box<[u8]>, Verdict)>,
    /// The last name found, as it was sent: a caller that runs one command over and over
    /// compares its bytes once (a byte compare, not a folded one).
    last: Option<Last>,
}

/// The longest name kept as sent in [`Last`]; a longer one is found by its folded form.
const LAST_LEN: usize = 24;

/// Where the last name found is in the list, and its bytes as sent.
#[derive(Debug, Clone, Copy)]
struct Last {
    index: usize,
    len: usize,
    sent: [u8; LAST_LEN],
}

impl Last {
    fn new(index: usize, name: &[u8]) -> Last {
        let mut sent = [0; LAST_LEN];
        let len = name.len().min(LAST_LEN);
        sent[..len].copy_from_slice(&name[..len]);
        Last { index, len, sent }
    }

    /// Whether `name` is the name kept, byte for byte.
    fn is(&self, name: &[u8]) -> bool {
        name.len() <= LAST_LEN && self.sent[..self.len] == *name
    }
}

/// Whether a command may run inside `LOCK.DO`, and if not, why.
pub type Verdict = Result<(), Refusal>;

fn folded(name: &[u8]) -> impl Iterator<Item = u8> + '_ {
    name.iter().map(u8::to_ascii_lowercase)
}

impl Verdicts {
    fn find(&self, name: &[u8]) -> Result<usize, usize> {
        self.names
            .binary_search_by(|(known, _)| folded(known).cmp(folded(name)))
    }

    /// The verdict on `name`, if known.
    pub fn get(&mut self, name: &[u8]) -> Option<Verdict> {
        if let Some(last) = self.last.filter(|last| last.is(name))
            && let Some((_, verdict)) = self.names.get(last.index)
        {
            return Some(*verdict);
        }
        let i = self.find(name).ok()?;
        self.last = Some(Last::new(i, name));
        Some(self.names[i].1)
    }

    /// Keeps the verdict on `name`.
    pub fn insert(&mut self, name: &[u8], verdict: Verdict) {
        match self.find(name) {
            Ok(i) => self.names[i].1 = verdict,
            Err(i) => {
                self.names.insert(i, (folded(name).collect(), verdict));
                self.last = None; // positions moved
            }
        }
    }
}

/// Whether the command `name` may run inside `LOCK.DO`, by its `COMMAND INFO` flags.
pub fn verdict(name: &[u8], flags: &[String]) -> Verdict {
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
    fn verdicts_are_found_in_any_case() {
        let mut v = Verdicts::default();
        v.insert(b"SET", Ok(()));
        v.insert(b"blpop", Err(Refusal::Blocking));
        v.insert(b"hset", Ok(()));
        assert_eq!(v.get(b"set"), Some(Ok(())));
        assert_eq!(v.get(b"BLPop"), Some(Err(Refusal::Blocking)));
        assert_eq!(v.get(b"get"), None);
        assert_eq!(
            v.get(b"BLPOP"),
            Some(Err(Refusal::Blocking)),
            "the last one, again"
        );
        v.insert(b"Set", Err(Refusal::NotInScript));
        assert_eq!(
            v.get(b"SET"),
            Some(Err(Refusal::NotInScript)),
            "replaced, not added"
        );
        assert_eq!(v.names.len(), 3);
    }

    #[test]
    fn the_last_name_is_matched_byte_for_byte_and_a_long_one_by_its_folded_form() {
        let mut v = Verdicts::default();
        let long = b"a-command-name-longer-than-what-is-kept-as-sent";
        v.insert(b"hincrby", Ok(()));
        v.insert(long, Err(Refusal::Blocking));
        assert_eq!(v.get(b"HINCRBY"), Some(Ok(())));
        assert_eq!(v.get(b"HINCRBY"), Some(Ok(())), "the last one, as sent");
        assert_eq!(
            v.get(b"hincrbyfloat"),
            None,
            "a longer name is another name"
        );
        assert_eq!(v.get(b"HINCRB"), None, "so is a shorter one");
        assert_eq!(v.get(long), Some(Err(Refusal::Blocking)));
        assert_eq!(
            v.get(long),
            Some(Err(Refusal::Blocking)),
            "again, not cut short"
        );
        let mut cut = long.to_vec();
        cut[LAST_LEN + 1] = b'x';
        assert_eq!(v.get(&cut), None, "a name that differs past what is kept");
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
