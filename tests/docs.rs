//! The docs never drift: every `console` block of `README.md` and `docs/*.md` is run,
//! in order, against a real server with the module (one fresh server per page), with the
//! real `redis-cli`, and its output compared with what the page shows.
//!
//! A block is a shell transcript: `$ redis-cli ...` lines are run (any other `$` line
//! fails the test, so nothing unchecked hides there), the lines under one are its output,
//! `#` lines and text after two spaces and `#` are comments. A command ending in `&` runs
//! in the background while the rest of the block runs; its output lines are compared when
//! the block ends (a subscriber and the events it sees). What cannot be the same twice is
//! matched by its shape and remembered: a server-made token (32 hex characters) and a
//! fence (an integer from 2^50), which later commands of the page then use in place of the
//! page's values; a unix time in ms (within a day of now) and a `ttl` (within 10% and 2 s
//! of the page's).

use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis_lock_testkit::{self as testkit, TestServer};

/// One command of a transcript and the output the page shows for it.
#[derive(Debug)]
struct Step {
    line: usize,
    args: Vec<String>,
    background: bool,
    expected: Vec<String>,
}

fn pages() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|entry| entry.expect("docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// Splits a shell command line into words: single and double quotes, no expansions.
fn words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote = None;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.get_or_insert_with(String::new).push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (None, c) if c.is_whitespace() => words.extend(word.take()),
            (None, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    assert!(quote.is_none(), "unclosed quote in: {line}");
    words.extend(word);
    words
}

/// A line without its trailing comment (two spaces or more, then `#`).
fn uncommented(line: &str) -> &str {
    match line.find("  #") {
        Some(at) => line[..at].trim_end(),
        None => line.trim_end(),
    }
}

/// The `console` blocks of a page, as transcripts: (first line, steps).
fn transcripts(text: &str, page: &Path) -> Vec<Vec<Step>> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<Step>> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if let Some(steps) = current.as_mut() {
            if line.starts_with("```") {
                blocks.push(current.take().unwrap_or_default());
            } else if let Some(command) = line.strip_prefix("$ ") {
                let command = uncommented(command);
                let (command, background) = match command.strip_suffix('&') {
                    Some(rest) => (rest.trim_end(), true),
                    None => (command, false),
                };
                let args = words(command);
                assert_eq!(
                    args.first().map(String::as_str),
                    Some("redis-cli"),
                    "{}:{}: a console block runs redis-cli only: {raw}",
                    page.display(),
                    i + 1
                );
                steps.push(Step {
                    line: i + 1,
                    args: args[1..].to_vec(),
                    background,
                    expected: Vec::new(),
                });
            } else if !line.is_empty() && !line.starts_with('#') {
                let step = steps.last_mut().unwrap_or_else(|| {
                    panic!("{}:{}: output before any command", page.display(), i + 1)
                });
                step.expected.push(uncommented(line).to_string());
            }
        } else if line == "```console" {
            current = Some(Vec::new());
        }
    }
    assert!(
        current.is_none(),
        "{}: unclosed console block",
        page.display()
    );
    blocks
}

fn redis_cli() -> String {
    std::env::var("REDIS_CLI").unwrap_or_else(|_| "redis-cli".into())
}

/// The command line for the test server: the page's port replaced, formatted output.
fn cli_args(args: &[String], port: u16, known: &HashMap<String, String>) -> Vec<String> {
    let mut out = vec!["-p".to_string(), port.to_string(), "--no-raw".to_string()];
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == "-p" {
            rest.next();
            continue;
        }
        out.push(known.get(arg).cloned().unwrap_or_else(|| arg.clone()));
    }
    out
}

fn is_token(s: &str) -> bool {
    s.len() == 34
        && s.starts_with('"')
        && s.ends_with('"')
        && s[1..33]
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// `N) rest` -> (`N) `, rest); other lines have no prefix.
fn split_index(line: &str) -> (&str, &str) {
    match line.find(") ") {
        Some(at) if line[..at].bytes().all(|b| b.is_ascii_digit()) && at > 0 => {
            line.split_at(at + 2)
        }
        _ => ("", line),
    }
}

fn integer(s: &str) -> Option<i64> {
    s.strip_prefix("(integer) ")?.parse().ok()
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Whether `actual` is what the page shows as `expected` (after `previous`, the page's
/// line before it); learns the server-made values it stands for.
fn matches(
    expected: &str,
    actual: &str,
    previous: Option<&str>,
    known: &mut HashMap<String, String>,
) -> bool {
    let (expected_index, expected) = split_index(expected);
    let (actual_index, actual) = split_index(actual);
    if expected_index != actual_index {
        return false;
    }
    if expected == actual {
        return true;
    }
    if is_token(expected) && is_token(actual) {
        known.insert(expected[1..33].into(), actual[1..33].into());
        return true;
    }
    let (Some(page), Some(got)) = (integer(expected), integer(actual)) else {
        return false;
    };
    const FENCE_FROM: i64 = 1 << 50;
    const DAY_MS: i64 = 86_400_000;
    if page >= FENCE_FROM && (FENCE_FROM..1 << 53).contains(&got) {
        known.insert(page.to_string(), got.to_string());
        return true;
    }
    if (1_500_000_000_000..2_500_000_000_000).contains(&page) {
        return (got - now_ms()).abs() < DAY_MS;
    }
    let after_ttl = previous.is_some_and(|p| split_index(p).1 == "\"ttl\"");
    after_ttl && page > 0 && got > 0 && (got - page).abs() <= page / 10 + 2_000
}

/// Compares a command's output with the page's lines.
fn check(page: &Path, step: &Step, output: &str, known: &mut HashMap<String, String>) {
    let actual: Vec<&str> = output
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let fits = actual.len() == step.expected.len()
        && step
            .expected
            .iter()
            .zip(&actual)
            .enumerate()
            .all(|(i, (e, a))| {
                let previous = i.checked_sub(1).map(|p| step.expected[p].as_str());
                matches(e, a, previous, known)
            });
    assert!(
        fits,
        "{}:{}: redis-cli {}\n--- the page shows:\n{}\n--- the server answered:\n{}",
        page.display(),
        step.line,
        step.args.join(" "),
        step.expected.join("\n"),
        actual.join("\n")
    );
}

/// Reads a background command's output until it holds `lines` lines or 10 s pass.
fn collect(child: &mut Child, lines: usize) -> String {
    let mut stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while text.lines().filter(|l| !l.trim().is_empty()).count() < lines {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(bytes) => text.push_str(&String::from_utf8_lossy(&bytes)),
            Err(_) => break,
        }
    }
    text
}

fn run_page(page: &Path) -> usize {
    let text = fs::read_to_string(page).expect("page");
    let blocks = transcripts(&text, page);
    if blocks.is_empty() {
        return 0;
    }
    let server = TestServer::start();
    let mut known = HashMap::new();
    let mut run = 0;
    for steps in blocks {
        let mut background: Vec<(&Step, Child)> = Vec::new();
        for step in &steps {
            let args = cli_args(&step.args, server.port, &known);
            if step.background {
                let child = Command::new(redis_cli())
                    .args(&args)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("redis-cli");
                // A subscriber is listening once the server counts it.
                let mut con = server.connection();
                testkit::poll_until(Duration::from_secs(5), "the subscriber", || {
                    let n: i64 = redis::cmd("PUBSUB")
                        .arg("NUMPAT")
                        .query(&mut con)
                        .unwrap_or(0);
                    let channels: Vec<String> = redis::cmd("PUBSUB")
                        .arg("CHANNELS")
                        .query(&mut con)
                        .unwrap_or_default();
                    n > 0 || !channels.is_empty()
                });
                background.push((step, child));
            } else {
                let output = Command::new(redis_cli())
                    .args(&args)
                    .output()
                    .expect("redis-cli");
                check(
                    page,
                    step,
                    &String::from_utf8_lossy(&output.stdout),
                    &mut known,
                );
            }
            run += 1;
        }
        for (step, mut child) in background {
            let output = collect(&mut child, step.expected.len());
            let _ = child.kill();
            let _ = child.wait();
            check(page, step, &output, &mut known);
        }
    }
    run
}

#[test]
fn every_console_block_of_the_docs_runs_as_shown() {
    let mut total = 0;
    for page in pages() {
        total += run_page(&page);
    }
    assert!(total >= 15, "only {total} commands found in the docs");
}

#[test]
fn the_transcript_reader_splits_commands_outputs_and_comments() {
    let page = Path::new("inline");
    let blocks = transcripts(
        "x\n```console\n# a comment\n$ redis-cli -p 7379 SET 'a b' \"c\"  # why\nOK   # yes\n\
         $ redis-cli SUBSCRIBE ch &\n1) \"message\"\n```\n```sh\n$ ls\n```\n",
        page,
    );
    assert_eq!(blocks.len(), 1);
    let steps = &blocks[0];
    assert_eq!(steps[0].args, ["-p", "7379", "SET", "a b", "c"]);
    assert_eq!(steps[0].expected, ["OK"]);
    assert!(!steps[0].background && steps[1].background);
    assert_eq!(steps[1].expected, ["1) \"message\""]);
    let known = HashMap::from([("c".to_string(), "d".to_string())]);
    assert_eq!(
        cli_args(&steps[0].args, 9, &known),
        ["-p", "9", "--no-raw", "SET", "a b", "d"]
    );
}

#[test]
fn server_made_values_match_by_shape_and_are_remembered() {
    let mut known = HashMap::new();
    let page_token = "\"5f0c1e7d2b8a4c6e9d3f1a2b7c8d9e0f\"";
    let real_token = "\"0123456789abcdef0123456789abcdef\"";
    assert!(matches(
        &format!("1) {page_token}"),
        &format!("1) {real_token}"),
        None,
        &mut known
    ));
    assert_eq!(
        known["5f0c1e7d2b8a4c6e9d3f1a2b7c8d9e0f"],
        &real_token[1..33]
    );
    assert!(!matches(
        "1) \"worker-1\"",
        "1) \"worker-2\"",
        None,
        &mut known
    ));
    assert!(matches(
        "(integer) 1838378060227584",
        "(integer) 1838540630864896",
        None,
        &mut known
    ));
    assert!(!matches("(integer) 1", "(integer) 0", None, &mut known));
    assert!(matches(
        "2) (integer) 28113",
        "2) (integer) 29990",
        Some("1) \"ttl\""),
        &mut known
    ));
    assert!(!matches(
        "2) (integer) 28113",
        "2) (integer) 29990",
        Some("1) \"waiters\""),
        &mut known
    ));
    assert!(!matches("1) \"a\"", "2) \"a\"", None, &mut known));
}
