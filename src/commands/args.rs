//! Argument parsing: integers in range, tokens in size, options in any order, once each.
//!
//! Works on byte slices so that the rules are unit-tested without a server. Every
//! argument is checked here, before a command opens its key: bad input changes nothing.

use lock_core::error::Error;
use lock_core::limits::{MAX_KEYS, MAX_LIMIT, MAX_TOKEN_LEN, MAX_TTL_MS, MAX_VALUE_LEN};
use lock_core::replicas::{Asked, Setting};
use lock_core::rules::Kind;

/// The parsed options of `LOCK.ACQUIRE key ttl-ms [TOKEN token] [WAIT timeout-ms]
/// [SESSION grace-ms] [SHARED] [LIMIT n] [VALUE v]`.
#[derive(Debug, PartialEq, Eq)]
pub struct AcquireOptions<'a> {
    /// How long the lock lives once granted, in ms.
    pub ttl_ms: i64,
    /// The caller's own token, if it gave one.
    pub token: Option<&'a [u8]>,
    /// How long to wait for a busy lock (`0`: without limit), if `WAIT` was given.
    pub wait_ms: Option<i64>,
    /// How long the lock outlives its holder's connection, if `SESSION` was given.
    pub grace_ms: Option<i64>,
    /// Exclusive (the default), or shared (`SHARED`, `LIMIT n`, which implies it).
    pub kind: Kind,
    /// The public value to publish with the grant, if `VALUE` was given.
    pub value: Option<&'a [u8]>,
    /// `REPLICAS n` and `REPLTIMEOUT ms`, each if given.
    pub replicas: Asked,
}

/// Parses a decimal integer the way the server does (`string2ll`): an optional `-`,
/// digits only, no sign `+`, no spaces, no leading zero (`0` itself aside, and no
/// `-0`), no overflow.
pub fn integer(arg: &[u8]) -> Option<i64> {
    let (negative, digits) = match arg {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, arg),
    };
    match digits {
        [] => return None,
        [b'0'] => return (!negative).then_some(0),
        [b'0', ..] => return None,
        _ => {}
    }
    // Accumulated as a negative number, so that i64::MIN itself fits.
    let mut value: i64 = 0;
    for &digit in digits {
        if !digit.is_ascii_digit() {
            return None;
        }
        value = value
            .checked_mul(10)?
            .checked_sub(i64::from(digit - b'0'))?;
    }
    if negative {
        Some(value)
    } else {
        value.checked_neg()
    }
}

/// A duration in ms: an integer from `least` to [`MAX_TTL_MS`], else `invalid()`.
/// (The error is made only when it is the answer: one made and dropped costs a grant
/// a call.)
fn millis(arg: &[u8], least: i64, invalid: fn() -> Error) -> Result<i64, Error> {
    integer(arg)
        .filter(|ms| (least..=MAX_TTL_MS).contains(ms))
        .ok_or_else(invalid)
}

/// `ttl-ms`: an integer from 1 to [`MAX_TTL_MS`].
pub fn ttl(arg: &[u8]) -> Result<i64, Error> {
    millis(arg, 1, || Error::InvalidTtl)
}

/// `timeout-ms`: an integer from 0 to [`MAX_TTL_MS`].
pub fn timeout(arg: &[u8]) -> Result<i64, Error> {
    millis(arg, 0, || Error::InvalidTimeout)
}

/// `grace-ms`: an integer from 0 to [`MAX_TTL_MS`].
pub fn grace(arg: &[u8]) -> Result<i64, Error> {
    millis(arg, 0, || Error::InvalidGrace)
}

/// `fence` (of `LOCK.WATCH`): an integer from 0 (nobody holds the key) to 2^63 - 1.
pub fn fence(arg: &[u8]) -> Result<u64, Error> {
    integer(arg)
        .and_then(|n| u64::try_from(n).ok())
        .ok_or(Error::InvalidFence)
}

/// `LIMIT n`: an integer from 1 to [`MAX_LIMIT`].
pub fn limit(arg: &[u8]) -> Result<u32, Error> {
    integer(arg)
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| (1..=MAX_LIMIT).contains(n))
        .ok_or(Error::InvalidLimit)
}

/// A token: 1 to [`MAX_TOKEN_LEN`] bytes, any bytes.
pub fn token(arg: &[u8]) -> Result<&[u8], Error> {
    if (1..=MAX_TOKEN_LEN).contains(&arg.len()) {
        Ok(arg)
    } else {
        Err(Error::InvalidToken)
    }
}

/// An option's name, ASCII case folded, in one number: its bytes little-endian, each
/// with bit `0x20` set, which maps a letter of either case to its lowercase form and no
/// other byte to a letter. `None` for a name longer than any option's. One comparison per
/// option then, where comparing byte by byte cost an acquire with `SESSION` a hundred
/// instructions.
fn folded(name: &[u8]) -> Option<u64> {
    if name.is_empty() || name.len() > 8 {
        return None;
    }
    let mut bytes = [0u8; 8];
    bytes[..name.len()].copy_from_slice(name);
    let case = u64::MAX >> (8 * (8 - name.len()));
    Some(u64::from_le_bytes(bytes) | (0x2020_2020_2020_2020 & case))
}

/// `folded` of an option's name in lowercase letters, at compile time.
const fn word(name: &[u8]) -> u64 {
    let mut folded = 0u64;
    let mut i = name.len();
    while i > 0 {
        i -= 1;
        folded = (folded << 8) | (name[i] | 0x20) as u64;
    }
    folded
}

const TOKEN: u64 = word(b"token");
const WAIT: u64 = word(b"wait");
const SESSION: u64 = word(b"session");
const SHARED: u64 = word(b"shared");
const LIMIT: u64 = word(b"limit");
const VALUE: u64 = word(b"value");
const REPLICAS: u64 = word(b"replicas");
/// `REPLTIMEOUT`, longer than `folded` takes.
const REPLTIMEOUT: &[u8] = b"REPLTIMEOUT";

/// `REPLTIMEOUT ms`: an integer from 1 to [`MAX_TTL_MS`].
pub fn repl_timeout(arg: &[u8]) -> Result<i64, Error> {
    millis(arg, 1, || Error::InvalidReplTimeout)
}

/// The value of the option named at `options[i]`: the argument after it.
fn value_of<'a>(options: &[&'a [u8]], i: usize) -> Result<&'a [u8], Error> {
    options
        .get(i + 1)
        .copied()
        .ok_or_else(|| Error::MissingValue(options[i].to_vec()))
}

/// Reads the replica options at `options[i]` (`REPLICAS n`, `REPLTIMEOUT ms`) into
/// `asked`, `word` being the name's `folded`: whether it was one of them (its value is
/// then `options[i + 1]`).
fn replica_option(
    options: &[&[u8]],
    i: usize,
    word: Option<u64>,
    asked: &mut Asked,
) -> Result<bool, Error> {
    let name = options[i];
    // `REPLTIMEOUT` is the one name too long to fold.
    let timeout = word.is_none() && name.eq_ignore_ascii_case(REPLTIMEOUT);
    if !timeout && word != Some(REPLICAS) {
        return Ok(false);
    }
    let given = if timeout {
        asked.timeout_ms.is_some()
    } else {
        asked.replicas.is_some()
    };
    if given {
        return Err(Error::RepeatedOption(name.to_vec()));
    }
    let value = value_of(options, i)?;
    if timeout {
        asked.timeout_ms = Some(repl_timeout(value)?);
    } else {
        asked.replicas = Some(Setting::parse(value).ok_or(Error::InvalidReplicas)?);
    }
    Ok(true)
}

/// Parses `[REPLICAS n] [REPLTIMEOUT ms]`, the options of `LOCK.EXTEND` after its TTL.
pub fn extend(options: &[&[u8]]) -> Result<Asked, Error> {
    let mut asked = Asked::default();
    let mut i = 0;
    while i < options.len() {
        if !replica_option(options, i, folded(options[i]), &mut asked)? {
            return Err(Error::UnknownExtendOption(options[i].to_vec()));
        }
        i += 2;
    }
    Ok(asked)
}

/// `VALUE v`: 0 to [`MAX_VALUE_LEN`] bytes, binary-safe.
pub fn value(arg: &[u8]) -> Result<&[u8], Error> {
    if arg.len() > MAX_VALUE_LEN {
        return Err(Error::InvalidValue);
    }
    Ok(arg)
}

/// Parses `ttl-ms [TOKEN token] [WAIT timeout-ms] [SESSION grace-ms] [SHARED] [LIMIT n]
/// [VALUE v]`, the arguments after the key.
///
/// Returns, with the options, the index within `rest` of the token value (if any) so the
/// caller can redact it from `SLOWLOG` and `MONITOR`.
pub fn acquire<'a>(rest: &[&'a [u8]]) -> Result<(AcquireOptions<'a>, Option<usize>), Error> {
    parse_acquire(rest, false)
}

/// Parses `numkeys key [key ...] ttl-ms [TOKEN token] [WAIT timeout-ms] [SESSION
/// grace-ms] [SHARED]`, the arguments of `LOCK.ACQUIREALL`: `numkeys` from 1 to
/// `MAX_KEYS`, that many distinct keys, then the options of `LOCK.ACQUIRE` but `LIMIT`
/// and `VALUE`. Returns the keys, in order, and the options.
pub fn acquire_all<'s, 'a>(
    args: &'s [&'a [u8]],
) -> Result<(&'s [&'a [u8]], AcquireOptions<'a>), Error> {
    let (count, rest) = args.split_first().ok_or(Error::WrongArity)?;
    let count = integer(count)
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| (1..=MAX_KEYS).contains(n) && *n < rest.len())
        .ok_or(Error::InvalidNumkeys)?;
    let (keys, rest) = rest.split_at(count);
    for (i, key) in keys.iter().enumerate() {
        if keys[..i].contains(key) {
            return Err(Error::RepeatedKey(key.to_vec()));
        }
    }
    let (options, _) = parse_acquire(rest, true)?;
    Ok((keys, options))
}

fn parse_acquire<'a>(
    rest: &[&'a [u8]],
    all_keys: bool,
) -> Result<(AcquireOptions<'a>, Option<usize>), Error> {
    let Some((ttl_arg, options)) = rest.split_first() else {
        return Err(Error::WrongArity);
    };
    let ttl_ms = ttl(ttl_arg)?;
    let mut parsed = AcquireOptions {
        ttl_ms,
        token: None,
        wait_ms: None,
        grace_ms: None,
        kind: Kind::Exclusive,
        value: None,
        replicas: Asked::default(),
    };
    let (mut shared, mut limit_given) = (false, None);
    let mut token_at = None;
    let mut i = 0;
    while i < options.len() {
        let name = options[i];
        let word = folded(name);
        // The name is folded once; only a name too long to fold or `REPLICAS` can be a
        // replica option.
        if matches!(word, None | Some(REPLICAS))
            && replica_option(options, i, word, &mut parsed.replicas)?
        {
            i += 2;
            continue;
        }
        let option = word.ok_or_else(|| Error::UnknownOption(name.to_vec()))?;
        if option == SHARED {
            if shared {
                return Err(Error::RepeatedOption(name.to_vec()));
            }
            shared = true;
            i += 1;
            continue;
        }
        if ![TOKEN, WAIT, SESSION, LIMIT, VALUE].contains(&option) {
            return Err(Error::UnknownOption(name.to_vec()));
        }
        if all_keys && [LIMIT, VALUE].contains(&option) {
            return Err(Error::NotForAllKeys(name.to_vec()));
        }
        let given = match option {
            TOKEN => parsed.token.is_some(),
            WAIT => parsed.wait_ms.is_some(),
            SESSION => parsed.grace_ms.is_some(),
            VALUE => parsed.value.is_some(),
            _ => limit_given.is_some(),
        };
        if given {
            return Err(Error::RepeatedOption(name.to_vec()));
        }
        let value = value_of(options, i)?;
        match option {
            TOKEN => {
                parsed.token = Some(token(value)?);
                token_at = Some(i + 2);
            }
            WAIT => parsed.wait_ms = Some(timeout(value)?),
            SESSION => parsed.grace_ms = Some(grace(value)?),
            VALUE => parsed.value = Some(self::value(value)?),
            _ => limit_given = Some(limit(value)?),
        }
        i += 2;
    }
    if shared || limit_given.is_some() {
        if parsed.value.is_some() {
            return Err(Error::ValueWithShared);
        }
        parsed.kind = Kind::Shared { limit: limit_given };
    }
    Ok((parsed, token_at))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(result: Result<impl std::fmt::Debug, Error>) -> String {
        result.unwrap_err().to_string()
    }

    #[test]
    fn replicas_and_their_timeout_are_options_of_acquire_and_extend() {
        let (opts, _) = acquire(&[b"100", b"replicas", b"2", b"REPLTIMEOUT", b"50"]).unwrap();
        assert_eq!(
            opts.replicas,
            Asked {
                replicas: Some(Setting::Count(2)),
                timeout_ms: Some(50)
            }
        );
        let (opts, _) = acquire(&[b"100", b"ReplTimeout", b"9", b"WAIT", b"0"]).unwrap();
        assert_eq!(opts.replicas.timeout_ms, Some(9));
        assert_eq!(opts.replicas.replicas, None);
        assert!(msg(acquire(&[b"100", b"REPLICAS", b"101"])).contains("REPLICAS"));
        assert!(msg(acquire(&[b"100", b"REPLICAS", b"-1"])).contains("REPLICAS"));
        assert!(msg(acquire(&[b"100", b"REPLICAS"])).contains("REPLICAS"));
        assert!(msg(acquire(&[b"100", b"REPLTIMEOUT", b"0"])).contains("REPLTIMEOUT"));
        assert!(msg(acquire(&[b"100", b"REPLICAS", b"1", b"replicas", b"1"])).contains("replicas"));
        let (_, opts) = acquire_all(&[b"1", b"k", b"100", b"REPLICAS", b"1"]).unwrap();
        assert_eq!(opts.replicas.replicas, Some(Setting::Count(1)));
        let (opts, _) = acquire(&[b"100", b"REPLICAS", b"auto"]).unwrap();
        assert_eq!(opts.replicas.replicas, Some(Setting::Auto));
        assert_eq!(
            extend(&[b"REPLICAS", b"AUTO"]).unwrap().replicas,
            Some(Setting::Auto)
        );
        assert_eq!(extend(&[]).unwrap(), Asked::default());
        assert_eq!(
            extend(&[b"REPLICAS", b"0", b"REPLTIMEOUT", b"3"]).unwrap(),
            Asked {
                replicas: Some(Setting::Off),
                timeout_ms: Some(3)
            }
        );
        assert!(msg(extend(&[b"WAIT", b"1"])).contains("expected REPLICAS or REPLTIMEOUT"));
        assert!(msg(extend(&[b"REPLICAS"])).contains("REPLICAS"));
    }

    #[test]
    fn ttl_accepts_its_whole_range_only() {
        assert_eq!(ttl(b"1").unwrap(), 1);
        assert_eq!(ttl(b"9007199254740991").unwrap(), MAX_TTL_MS);
        for bad in [
            &b"0"[..],
            b"-1",
            b"9007199254740992",
            b"99999999999999999999999",
            b"",
            b"+5",
            b" 5",
            b"5 ",
            b"1.5",
            b"abc",
            b"-",
            b"010",
            b"00",
        ] {
            assert!(msg(ttl(bad)).contains("ttl-ms"), "{bad:?}");
        }
    }

    #[test]
    fn integers_are_written_as_the_server_writes_them() {
        assert_eq!(integer(b"0"), Some(0));
        assert_eq!(integer(b"10"), Some(10));
        assert_eq!(integer(b"-10"), Some(-10));
        assert_eq!(integer(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(integer(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b"010"[..],
            b"00",
            b"-0",
            b"-01",
            b"+1",
            b"1_0",
            b"",
            b"-",
            b"--1",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"1 ",
        ] {
            assert_eq!(integer(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn timeout_accepts_zero() {
        assert_eq!(timeout(b"0").unwrap(), 0);
        assert_eq!(timeout(b"9007199254740991").unwrap(), MAX_TTL_MS);
        assert!(msg(timeout(b"-1")).contains("timeout-ms"));
        assert!(msg(timeout(b"010")).contains("timeout-ms"));
        assert!(msg(timeout(b"9007199254740992")).contains("timeout-ms"));
    }

    #[test]
    fn token_is_binary_safe_and_bounded() {
        assert_eq!(token(b"\0\xff\r\n").unwrap(), b"\0\xff\r\n");
        assert_eq!(token(&[7; 256]).unwrap().len(), 256);
        assert!(msg(token(b"")).contains("token"));
        assert!(msg(token(&[7; 257])).contains("token"));
    }

    #[test]
    fn value_is_binary_safe_up_to_4096_bytes_and_only_for_an_exclusive_lock() {
        let (opts, _) = acquire(&[b"100", b"VALUE", b""]).unwrap();
        assert_eq!(opts.value, Some(&b""[..]));
        let long = vec![0u8; 4096];
        let (opts, _) = acquire(&[b"100", b"value", &long, b"TOKEN", b"t"]).unwrap();
        assert_eq!(opts.value, Some(&long[..]));
        let over = vec![b'x'; 4097];
        assert!(msg(acquire(&[b"100", b"VALUE", &over])).contains("VALUE"));
        assert!(msg(acquire(&[b"100", b"VALUE", b"a", b"VALUE", b"b"])).contains("VALUE"));
        assert!(msg(acquire(&[b"100", b"VALUE"])).contains("VALUE"));
        let shared: [&[&[u8]]; 2] = [&[b"SHARED"], &[b"LIMIT", b"2"]];
        for shared in shared {
            let mut argv: Vec<&[u8]> = vec![b"100", b"VALUE", b"v"];
            argv.extend_from_slice(shared);
            assert!(msg(acquire(&argv)).contains("VALUE"), "{shared:?}");
        }
    }

    #[test]
    fn options_come_in_any_order_and_any_case() {
        let (opts, at) = acquire(&[b"100", b"wait", b"5", b"Token", b"t"]).unwrap();
        assert_eq!(
            opts,
            AcquireOptions {
                ttl_ms: 100,
                token: Some(b"t"),
                wait_ms: Some(5),
                grace_ms: None,
                kind: Kind::Exclusive,
                value: None,
                replicas: Asked::default(),
            }
        );
        assert_eq!(at, Some(4));
        let (opts, at) = acquire(&[b"100"]).unwrap();
        assert_eq!((opts.token, opts.wait_ms, at), (None, None, None));
        let (opts, _) = acquire(&[b"100", b"session", b"0", b"WAIT", b"1"]).unwrap();
        assert_eq!((opts.grace_ms, opts.wait_ms), (Some(0), Some(1)));
    }

    #[test]
    fn shared_is_a_flag_and_limit_implies_it() {
        let kind = |rest: &[&[u8]]| acquire(rest).map(|(o, _)| o.kind).unwrap();
        assert_eq!(kind(&[b"100"]), Kind::Exclusive);
        assert_eq!(kind(&[b"100", b"shared"]), Kind::READER);
        assert_eq!(
            kind(&[b"100", b"LIMIT", b"3"]),
            Kind::Shared { limit: Some(3) }
        );
        assert_eq!(
            kind(&[b"100", b"Limit", b"1000000", b"SHARED", b"WAIT", b"5"]),
            Kind::Shared {
                limit: Some(1_000_000)
            }
        );
        let (opts, at) = acquire(&[b"100", b"SHARED", b"TOKEN", b"t"]).unwrap();
        assert_eq!((opts.token, at), (Some(&b"t"[..]), Some(3)));
    }

    #[test]
    fn bad_limits_and_repeated_flags_name_themselves() {
        for bad in [
            &b"0"[..],
            b"-1",
            b"1000001",
            b"4294967297",
            b"x",
            b"",
            b"01",
        ] {
            assert!(
                msg(acquire(&[b"100", b"LIMIT", bad])).contains("LIMIT"),
                "{bad:?}"
            );
        }
        assert!(msg(acquire(&[b"100", b"LIMIT"])).contains("'LIMIT'"));
        assert!(msg(acquire(&[b"100", b"LIMIT", b"2", b"limit", b"2"])).contains("'limit'"));
        assert!(msg(acquire(&[b"100", b"SHARED", b"shared"])).contains("'shared'"));
    }

    #[test]
    fn grace_accepts_its_whole_range_only() {
        assert_eq!(grace(b"0").unwrap(), 0);
        assert_eq!(grace(b"9007199254740991").unwrap(), MAX_TTL_MS);
        for bad in [&b"-1"[..], b"9007199254740992", b"", b"x", b"1.5", b"01"] {
            assert!(msg(grace(bad)).contains("grace-ms"), "{bad:?}");
        }
    }

    #[test]
    fn bad_sessions_name_grace_ms_or_session() {
        assert!(msg(acquire(&[b"100", b"SESSION"])).contains("'SESSION'"));
        assert!(msg(acquire(&[b"100", b"SESSION", b"-5"])).contains("grace-ms"));
        assert!(msg(acquire(&[b"100", b"SESSION", b"1", b"session", b"2"])).contains("'session'"));
    }

    #[test]
    fn option_names_match_in_any_case_and_nothing_else() {
        for (name, word) in [
            (&b"TOKEN"[..], TOKEN),
            (b"token", TOKEN),
            (b"tOkEn", TOKEN),
            (b"WAIT", WAIT),
            (b"Session", SESSION),
            (b"sHARED", SHARED),
            (b"LIMIT", LIMIT),
        ] {
            assert_eq!(folded(name), Some(word), "{name:?}");
        }
        // A byte in place of a letter that folds to no letter ('@' folds to '`'), a
        // prefix, a longer word, trailing NULs and the empty name match nothing.
        for name in [
            &b"TOKE\x0e"[..],
            b"TOKE",
            b"TOKENS",
            b"TOKEN\0",
            b"WAIT\0\0\0\0",
            b"SESSIONS",
            b"SESSIONSX",
            b"S@SSION",
            b"",
            b"\x14oken",
        ] {
            let option = folded(name);
            assert!(
                option.is_none_or(|o| ![TOKEN, WAIT, SESSION, SHARED, LIMIT].contains(&o)),
                "{name:?}"
            );
        }
    }

    #[test]
    fn bad_options_name_themselves() {
        assert!(msg(acquire(&[b"100", b"TOKEN", b"a", b"token", b"b"])).contains("'token'"));
        assert!(msg(acquire(&[b"100", b"WAIT", b"1", b"WAIT", b"1"])).contains("'WAIT'"));
        assert!(msg(acquire(&[b"100", b"NX"])).contains("'NX'"));
        assert!(msg(acquire(&[b"100", b"WAIT"])).contains("'WAIT'"));
        assert!(msg(acquire(&[b"100", b"WAIT", b"x"])).contains("timeout-ms"));
        assert!(msg(acquire(&[b"100", b"TOKEN", b""])).contains("token"));
        assert!(msg(acquire(&[b"0"])).contains("ttl-ms"));
        assert!(msg(acquire(&[b"100", b"TOKEN\0", b"a"])).contains("unknown option"));
        assert!(msg(acquire(&[b"100", b"SESSIONS", b"1"])).contains("unknown option"));
        assert!(msg(acquire(&[b"100", b""])).contains("unknown option"));
    }

    #[test]
    fn acquire_all_takes_numkeys_distinct_keys_then_the_options() {
        let (keys, options) = acquire_all(&[
            b"2", b"a", b"b", b"100", b"TOKEN", b"t", b"WAIT", b"0", b"SHARED",
        ])
        .unwrap();
        assert_eq!(keys, [&b"a"[..], b"b"]);
        assert_eq!(options.ttl_ms, 100);
        assert_eq!(options.token, Some(&b"t"[..]));
        assert_eq!(options.wait_ms, Some(0));
        assert_eq!(options.kind, Kind::READER);
        let most: Vec<Vec<u8>> = (0..MAX_KEYS)
            .map(|i| format!("k{i}").into_bytes())
            .collect();
        let count = MAX_KEYS.to_string();
        let mut argv: Vec<&[u8]> = vec![count.as_bytes()];
        argv.extend(most.iter().map(Vec::as_slice));
        argv.push(b"1");
        assert_eq!(acquire_all(&argv).unwrap().0.len(), MAX_KEYS);
    }

    #[test]
    fn acquire_all_refuses_bad_counts_repeats_and_options_of_one_key() {
        for bad in [
            &[&b"0"[..], b"a", b"100"][..],
            &[b"65", b"a", b"100"],
            &[b"-1", b"a", b"100"],
            &[b"x", b"a", b"100"],
            &[b"2", b"a", b"100"],
            &[b"3", b"a", b"b", b"100"],
        ] {
            assert!(msg(acquire_all(bad)).contains("numkeys"), "{bad:?}");
        }
        assert!(
            msg(acquire_all(&[b"3", b"a", b"b", b"a", b"100"]))
                .contains("key 'a' is given more than once")
        );
        for option in [&b"LIMIT"[..], b"value"] {
            let err = msg(acquire_all(&[b"1", b"a", b"100", option, b"2"]));
            assert!(err.starts_with("ERR "), "{err}");
            assert!(err.contains(std::str::from_utf8(option).unwrap()), "{err}");
        }
        assert!(msg(acquire_all(&[b"1", b"a", b"0"])).contains("ttl"));
        assert!(msg(acquire_all(&[b"1", b"a", b"100", b"LIMITS"])).contains("unknown option"));
    }
}
