//! Grants a replica has (`REPLICAS n [REPLTIMEOUT ms]`, the `lock.replicas` setting):
//! how many replicas a grant waits for, for how long, and whether enough of them have
//! acknowledged it. Pure: the module reads the server's replication state and decides
//! here.

use crate::limits::{MAX_DEFAULT_REPLTIMEOUT_MS, MAX_REPLICAS};

/// How many replicas a grant waits for: the `lock.replicas` setting, or a command's own
/// `REPLICAS n|AUTO`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Setting {
    /// `0`: answer at once.
    Off,
    /// Wait for this many replicas.
    Count(u32),
    /// Wait for one when the master has a replica attached (online, or in its first
    /// sync), else answer at once: the default.
    #[default]
    Auto,
}

impl Setting {
    /// Parses `0` to `MAX_REPLICAS` or `auto` (any case).
    pub fn parse(text: &[u8]) -> Option<Setting> {
        if text.eq_ignore_ascii_case(b"auto") {
            return Some(Setting::Auto);
        }
        match count(text)? {
            0 => Some(Setting::Off),
            n => Some(Setting::Count(n)),
        }
    }

    /// The setting as `CONFIG GET` shows it.
    pub fn text(self) -> String {
        match self {
            Setting::Off => "0".to_owned(),
            Setting::Count(n) => n.to_string(),
            Setting::Auto => "auto".to_owned(),
        }
    }

    /// Whether the setting can ask a grant to wait.
    pub fn waits(self) -> bool {
        self != Setting::Off
    }
}

/// `REPLICAS n`: an integer from 0 to `MAX_REPLICAS`, written as the server writes
/// integers (no sign, no leading zero).
pub fn count(text: &[u8]) -> Option<u32> {
    let digits = std::str::from_utf8(text).ok()?;
    if digits.is_empty()
        || !digits.bytes().all(|b| b.is_ascii_digit())
        || (digits.len() > 1 && digits.starts_with('0'))
    {
        return None;
    }
    digits.parse::<u32>().ok().filter(|n| *n <= MAX_REPLICAS)
}

/// What a command asked for: `REPLICAS n|AUTO` and `REPLTIMEOUT ms`, each if given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Asked {
    /// `REPLICAS n` or `REPLICAS AUTO`, if given.
    pub replicas: Option<Setting>,
    /// `REPLTIMEOUT ms`, if given.
    pub timeout_ms: Option<i64>,
}

/// A grant's replica wait: how many replicas must acknowledge it, and for how long the
/// reply may be held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    /// Replicas that must acknowledge the grant (at least 1).
    pub replicas: u32,
    /// How long the reply may be held, in ms.
    pub timeout_ms: i64,
}

/// The replica wait when a command gives no `REPLTIMEOUT`: a tenth of `ttl_ms`, at
/// least 1 ms and at most `MAX_DEFAULT_REPLTIMEOUT_MS`.
pub fn default_timeout(ttl_ms: i64) -> i64 {
    (ttl_ms / 10).clamp(1, MAX_DEFAULT_REPLTIMEOUT_MS)
}

impl Asked {
    /// Whether the command itself asked to wait for replicas (`REPLICAS n` with n > 0,
    /// or `REPLICAS AUTO`): refused where the server cannot hold a reply.
    pub fn explicit(self) -> bool {
        self.replicas.is_some_and(Setting::waits)
    }

    /// The rule of this command under `setting`: its own `REPLICAS` if given, else the
    /// setting.
    pub fn rule(self, setting: Setting) -> Setting {
        self.replicas.unwrap_or(setting)
    }

    /// The wait of a grant of `ttl_ms` under `setting`, on a master with `attached`
    /// replicas (what `auto` counts): the command's `REPLICAS` if given, else the
    /// setting's. `None`: answer at once.
    pub fn wait(self, setting: Setting, attached: usize, ttl_ms: i64) -> Option<Wait> {
        let replicas = match self.rule(setting) {
            Setting::Count(n) => n,
            Setting::Auto => u32::from(attached > 0),
            Setting::Off => 0,
        };
        (replicas > 0).then(|| Wait {
            replicas,
            timeout_ms: self.timeout_ms.unwrap_or_else(|| default_timeout(ttl_ms)),
        })
    }
}

/// The offset an online replica acknowledged, from its `slaveN` field of `INFO
/// replication` (`ip=...,port=...,state=online,offset=...,lag=...`); `None` for a
/// replica that is not online (still syncing) or a field that does not parse.
pub fn online_offset(field: &str) -> Option<i64> {
    let mut online = false;
    let mut offset = None;
    for part in field.split(',') {
        match part.split_once('=') {
            Some(("state", state)) => online = state == "online",
            Some(("offset", value)) => offset = value.parse::<i64>().ok(),
            _ => {}
        }
    }
    offset.filter(|_| online)
}

/// How many of the replicas' acknowledged offsets reached `target`.
pub fn acked(offsets: &[i64], target: i64) -> u32 {
    let reached = offsets.iter().filter(|&&offset| offset >= target).count();
    u32::try_from(reached).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_is_a_count_or_auto() {
        assert_eq!(Setting::parse(b"0"), Some(Setting::Off));
        assert_eq!(Setting::parse(b"2"), Some(Setting::Count(2)));
        assert_eq!(Setting::parse(b"100"), Some(Setting::Count(100)));
        assert_eq!(Setting::parse(b"AUTO"), Some(Setting::Auto));
        for bad in [&b"101"[..], b"-1", b"01", b"", b"one", b" 1", b"1.0"] {
            assert_eq!(Setting::parse(bad), None, "{bad:?}");
        }
        for setting in [Setting::Off, Setting::Count(3), Setting::Auto] {
            assert_eq!(Setting::parse(setting.text().as_bytes()), Some(setting));
        }
    }

    #[test]
    fn the_command_overrides_the_setting_and_auto_follows_the_replicas() {
        let none = Asked::default();
        assert_eq!(none.wait(Setting::Off, 3, 5000), None);
        assert_eq!(none.wait(Setting::Auto, 0, 5000), None);
        assert_eq!(
            none.wait(Setting::Auto, 2, 5000),
            Some(Wait {
                replicas: 1,
                timeout_ms: 500
            })
        );
        assert_eq!(
            none.wait(Setting::Count(2), 0, 5000),
            Some(Wait {
                replicas: 2,
                timeout_ms: 500
            })
        );
        let zero = Asked {
            replicas: Some(Setting::Off),
            timeout_ms: None,
        };
        assert_eq!(zero.wait(Setting::Count(2), 2, 5000), None);
        let two = Asked {
            replicas: Some(Setting::Count(2)),
            timeout_ms: Some(7),
        };
        assert_eq!(
            two.wait(Setting::Off, 0, 5000),
            Some(Wait {
                replicas: 2,
                timeout_ms: 7
            })
        );
        assert!(two.explicit() && !zero.explicit() && !none.explicit());
        let auto = Asked {
            replicas: Some(Setting::Auto),
            timeout_ms: None,
        };
        assert!(auto.explicit(), "REPLICAS AUTO is the command's own");
        assert_eq!(
            auto.wait(Setting::Off, 0, 5000),
            None,
            "no replica: at once"
        );
        assert_eq!(
            auto.wait(Setting::Off, 1, 5000),
            Some(Wait {
                replicas: 1,
                timeout_ms: 500
            }),
            "AUTO whatever the setting"
        );
        assert_eq!(Setting::default(), Setting::Auto);
    }

    #[test]
    fn the_default_timeout_is_a_tenth_of_the_ttl_at_most_a_second() {
        assert_eq!(default_timeout(1), 1);
        assert_eq!(default_timeout(300), 30);
        assert_eq!(default_timeout(10_000), 1000);
        assert_eq!(default_timeout(i64::MAX), 1000);
    }

    #[test]
    fn only_online_replicas_count_with_the_offset_they_acknowledged() {
        let online = "ip=127.0.0.1,port=7001,state=online,offset=1234,lag=0";
        assert_eq!(online_offset(online), Some(1234));
        let syncing = "ip=127.0.0.1,port=7002,state=wait_bgsave,offset=0,lag=0";
        assert_eq!(online_offset(syncing), None);
        assert_eq!(online_offset("garbage"), None);
        assert_eq!(acked(&[10, 20, 30], 20), 2);
        assert_eq!(acked(&[], 0), 0);
    }
}
