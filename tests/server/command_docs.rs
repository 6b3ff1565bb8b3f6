//! What an operator meets in `redis-cli`: `COMMAND DOCS` for every public command, the
//! synopsis `redis-cli help` prints from it, and the hints the interactive cli shows
//! while one types (a real `redis-cli`/`valkey-cli` in tmux).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use redis::Value;

use crate::common::{Terminal, TestServer, poll_until, server_binary};

/// The public commands and their synopsis, as `COMMAND DOCS` must give it.
const SYNOPSES: [(&str, &str); 9] = [
    (
        "LOCK.ACQUIRE",
        "key ttl-ms [TOKEN token] [WAIT timeout-ms] [SESSION grace-ms] [SHARED] [LIMIT n] [VALUE value] [REPLICAS n|AUTO] [REPLTIMEOUT ms]",
    ),
    (
        "LOCK.ACQUIREALL",
        "numkeys key [key ...] ttl-ms [TOKEN token] [WAIT timeout-ms] [SESSION grace-ms] [SHARED] [REPLICAS n|AUTO] [REPLTIMEOUT ms]",
    ),
    ("LOCK.RELEASE", "key token"),
    (
        "LOCK.EXTEND",
        "key token ttl-ms [REPLICAS n|AUTO] [REPLTIMEOUT ms]",
    ),
    ("LOCK.INFO", "key"),
    ("LOCK.HOLDERS", "key"),
    ("LOCK.CONTENDED", "[COUNT n]"),
    ("LOCK.WATCH", "key fence timeout-ms"),
    ("LOCK.DO", "key token command [arg [arg ...]]"),
];

/// A RESP2 field/value array (or a RESP3 map) as (name, value) pairs.
fn fields(value: &Value) -> Vec<(String, Value)> {
    match value {
        Value::Array(items) => items
            .chunks(2)
            .map(|pair| {
                (
                    redis::from_redis_value(pair[0].clone()).unwrap(),
                    pair[1].clone(),
                )
            })
            .collect(),
        Value::Map(pairs) => pairs
            .iter()
            .map(|(k, v)| (redis::from_redis_value(k.clone()).unwrap(), v.clone()))
            .collect(),
        other => panic!("not a map: {other:?}"),
    }
}

fn field<'a>(fields: &'a [(String, Value)], name: &str) -> Option<&'a Value> {
    fields.iter().find(|(n, _)| n == name).map(|(_, v)| v)
}

fn text(value: Option<&Value>) -> String {
    redis::from_redis_value(value.expect("a field").clone()).unwrap()
}

/// `COMMAND DOCS name`: the command's fields.
fn docs(con: &mut redis::Connection, name: &str) -> Vec<(String, Value)> {
    let reply: Value = redis::cmd("COMMAND")
        .arg("DOCS")
        .arg(name)
        .query(con)
        .unwrap();
    let all = fields(&reply);
    assert_eq!(all.len(), 1, "{name}: {reply:?}");
    assert_eq!(all[0].0, name.to_lowercase());
    fields(&all[0].1)
}

/// The synopsis an argument list spells, as the server's own docs do (`[TOKEN name]`
/// for an optional one, `name [name ...]` for a repeated one).
fn synopsis(args: &Value) -> String {
    let Value::Array(args) = args else {
        panic!("arguments: {args:?}");
    };
    let mut words = Vec::new();
    for arg in args {
        let arg = fields(arg);
        let name = text(field(&arg, "name"));
        let kind = text(field(&arg, "type"));
        let flags: Vec<String> = field(&arg, "flags")
            .map(|f| redis::from_redis_value(f.clone()).unwrap())
            .unwrap_or_default();
        if kind == "key" {
            assert_eq!(
                field(&arg, "key_spec_index"),
                Some(&Value::Int(0)),
                "{name}: a key names its key spec"
            );
        }
        let mut word = match (field(&arg, "token").map(|t| text(Some(t))), kind.as_str()) {
            (Some(token), "pure-token") => token,
            (Some(token), _) => format!("{token} {name}"),
            (None, _) => name.clone(),
        };
        if flags.iter().any(|f| f == "multiple") {
            word = format!("{word} [{word} ...]");
        }
        if flags.iter().any(|f| f == "optional") {
            word = format!("[{word}]");
        }
        words.push(word);
    }
    words.join(" ")
}

#[test]
fn command_docs_describe_every_public_command_with_every_field() {
    let server = TestServer::start();
    for resp3 in [false, true] {
        let mut con = if resp3 {
            server.connection_resp3()
        } else {
            server.connection()
        };
        for (name, expected) in SYNOPSES {
            let doc = docs(&mut con, name);
            let summary = text(field(&doc, "summary"));
            assert!(summary.len() > 20, "{name}: summary {summary:?}");
            // The module version that added it.
            let since = match name {
                "LOCK.ACQUIREALL" => "0.2.0",
                "LOCK.CONTENDED" => "0.3.0",
                _ => "0.1.0",
            };
            assert_eq!(text(field(&doc, "since")), since, "{name}");
            assert_eq!(text(field(&doc, "group")), "module", "{name}");
            assert_eq!(text(field(&doc, "module")), "lock", "{name}");
            assert!(text(field(&doc, "complexity")).starts_with("O("), "{name}");
            let args = field(&doc, "arguments").expect("arguments");
            assert_eq!(synopsis(args), expected, "{name}");
        }
    }
}

#[test]
fn the_internal_commands_have_no_docs_to_show() {
    let server = TestServer::start();
    let mut con = server.connection();
    for name in ["LOCK._SET", "LOCK._HOLD", "LOCK._DROP"] {
        let doc = docs(&mut con, name);
        assert!(field(&doc, "summary").is_none(), "{name}: {doc:?}");
        assert!(field(&doc, "arguments").is_none(), "{name}: {doc:?}");
    }
}

/// Every cli this machine has for the servers under test: Debian's `redis-cli`, and the
/// one beside the server binary if it has one (`valkey-cli` of Valkey 8.1.8), each once.
fn clis() -> Vec<PathBuf> {
    let mut found = vec![PathBuf::from("/usr/bin/redis-cli")];
    let server = PathBuf::from(server_binary());
    if let Some(dir) = server.parent() {
        for name in ["valkey-cli", "redis-cli"] {
            let beside = dir.join(name);
            if beside.is_file() && !found.contains(&beside) {
                found.push(beside);
            }
        }
    }
    found
}

/// `text` without the terminal's colour sequences (`ESC [ ... m`), which the cli prints
/// even to a pipe.
fn without_colours(text: &str) -> String {
    let mut plain = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            chars.by_ref().find(|&c| c == 'm');
        } else {
            plain.push(c);
        }
    }
    plain
}

#[test]
fn cli_help_prints_the_synopsis_and_summary_of_each_command() {
    let server = TestServer::start();
    let mut con = server.connection();
    for cli in clis() {
        for (name, expected) in SYNOPSES {
            let output = Command::new(&cli)
                .args(["-p", &server.port.to_string(), "help", name])
                .output()
                .unwrap_or_else(|err| panic!("{}: {err}", cli.display()));
            let shown = without_colours(&String::from_utf8_lossy(&output.stdout));
            assert!(
                shown.contains(&format!("{name} {expected}")),
                "{} help {name}: {shown}",
                cli.display()
            );
            let summary = text(field(&docs(&mut con, name), "summary"));
            assert!(shown.contains(&format!("summary: {summary}")), "{shown}");
            assert!(
                !shown.contains("(null)"),
                "{} help {name}: {shown}",
                cli.display()
            );
        }
    }
}

#[test]
fn the_interactive_cli_hints_the_remaining_arguments_while_one_types() {
    let server = TestServer::start();
    for cli in clis() {
        let terminal = Terminal::run(&format!("{} -p {}", cli.display(), server.port), 220, 20);
        let prompt = format!("127.0.0.1:{}>", server.port);
        poll_until(Duration::from_secs(10), "the cli's prompt", || {
            terminal.screen().contains(&prompt)
        });
        terminal.type_text("LOCK.ACQUIRE orders:1 ");
        // What was typed, then the hint after the cursor (the cli hints while one types,
        // so the whole line is waited for).
        let hinted = "LOCK.ACQUIRE orders:1 ttl-ms [TOKEN token] [WAIT timeout-ms] \
                      [SESSION grace-ms] [SHARED] [LIMIT n] [VALUE value]";
        poll_until(Duration::from_secs(10), "the argument hint", || {
            terminal.screen().contains(hinted)
        });
        terminal.type_text("30000 ");
        poll_until(Duration::from_secs(10), "the hint after ttl-ms", || {
            let line = terminal.screen();
            line.contains("LOCK.ACQUIRE orders:1 30000 [TOKEN token]")
                && !line.contains("30000 ttl-ms")
        });
        drop(terminal);
    }
}
