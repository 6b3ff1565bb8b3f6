//! Property tests of the argument parser, on generated inputs (proptest). No server:
//! they run with the unit tests (`cargo test --lib`, part of `make test`), 256 cases
//! each; `make fuzz` runs them with many more (`PROPTEST_CASES`). The core's own are in
//! `core/src/properties.rs`.

use proptest::prelude::*;

use crate::commands::args;
use lock_core::limits::{MAX_TOKEN_LEN, MAX_TTL_MS};

/// An argument as clients send them: mostly option names and numbers, any bytes too.
fn argument() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::sample::select(vec![
            "TOKEN",
            "token",
            "WAIT",
            "wait",
            "SESSION",
            "Session",
            "0",
            "1",
            "-1",
            "010",
            "9007199254740991",
            "9007199254740992",
            "",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        any::<i64>().prop_map(|n| n.to_string().into_bytes()),
        prop::collection::vec(any::<u8>(), 0..300),
    ]
}

/// Writes `name` in a random mix of upper and lower case.
fn any_case(name: &str, mask: u32) -> Vec<u8> {
    name.bytes()
        .enumerate()
        .map(|(i, b)| {
            if mask >> (i % 32) & 1 == 1 {
                b.to_ascii_lowercase()
            } else {
                b
            }
        })
        .collect()
}

proptest! {
    #[test]
    fn integers_parse_exactly_as_the_server_writes_them(n in any::<i64>(), junk in argument()) {
        // Every number, written the canonical way, reads back as itself...
        prop_assert_eq!(args::integer(n.to_string().as_bytes()), Some(n));
        // ...and any text reads as a number only if it is that number's canonical form.
        if let Some(read) = args::integer(&junk) {
            prop_assert_eq!(read.to_string().into_bytes(), junk);
        }
    }

    #[test]
    fn the_parser_never_panics_and_accepts_only_what_is_in_range(
        args in prop::collection::vec(argument(), 0..9)
    ) {
        let argv: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        if let Ok((options, token_at)) = args::acquire(&argv) {
            prop_assert!((1..=MAX_TTL_MS).contains(&options.ttl_ms));
            prop_assert!(options.wait_ms.is_none_or(|ms| (0..=MAX_TTL_MS).contains(&ms)));
            prop_assert!(options.grace_ms.is_none_or(|ms| (0..=MAX_TTL_MS).contains(&ms)));
            match (options.token, token_at) {
                (Some(token), Some(at)) => {
                    prop_assert!((1..=MAX_TOKEN_LEN).contains(&token.len()));
                    // The index returned is the token value's, within the arguments.
                    prop_assert_eq!(argv[at], token);
                }
                (None, None) => {}
                other => prop_assert!(false, "token and its index disagree: {:?}", other),
            }
        } else {
            let err = args::acquire(&argv).unwrap_err().to_string();
            prop_assert!(err.starts_with("ERR") || argv.is_empty(), "{}", err);
        }
    }

    #[test]
    fn every_well_formed_acquire_parses_in_any_order_and_case(
        ttl in 1..=MAX_TTL_MS,
        token in prop::option::of(prop::collection::vec(any::<u8>(), 1..=MAX_TOKEN_LEN)),
        wait in prop::option::of(0..=MAX_TTL_MS),
        grace in prop::option::of(0..=MAX_TTL_MS),
        order in Just([0usize, 1, 2]).prop_shuffle(),
        mask in any::<u32>(),
    ) {
        let mut argv: Vec<Vec<u8>> = vec![ttl.to_string().into_bytes()];
        for option in order {
            match option {
                0 => if let Some(token) = &token {
                    argv.push(any_case("TOKEN", mask));
                    argv.push(token.clone());
                },
                1 => if let Some(wait) = wait {
                    argv.push(any_case("WAIT", mask));
                    argv.push(wait.to_string().into_bytes());
                },
                _ => if let Some(grace) = grace {
                    argv.push(any_case("SESSION", mask));
                    argv.push(grace.to_string().into_bytes());
                },
            }
        }
        let argv: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        let (options, _) = args::acquire(&argv).expect("well formed");
        prop_assert_eq!(options.ttl_ms, ttl);
        prop_assert_eq!(options.token, token.as_deref());
        prop_assert_eq!(options.wait_ms, wait);
        prop_assert_eq!(options.grace_ms, grace);
    }

    #[test]
    fn an_out_of_range_value_names_its_argument(
        which in 0usize..3,
        bad in prop_oneof![Just(-1i64), (MAX_TTL_MS + 1)..i64::MAX],
    ) {
        let (name, expected) = [("WAIT", "timeout-ms"), ("SESSION", "grace-ms"), ("", "ttl-ms")][which];
        let bad = bad.to_string();
        let argv: Vec<&[u8]> = if name.is_empty() {
            vec![bad.as_bytes()]
        } else {
            vec![b"100", name.as_bytes(), bad.as_bytes()]
        };
        let err = args::acquire(&argv).unwrap_err().to_string();
        prop_assert!(err.contains(expected), "{}", err);
    }

}
