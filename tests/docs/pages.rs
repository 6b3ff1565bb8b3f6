//! The docs never drift: every `console` block of `README.md` and `docs/*.md` is run,
//! in order, against a real server with the module (one fresh server per page, with one
//! replica), with the
//! real `redis-cli`, and its output compared with what the page shows.
//!
//! A block is a shell transcript: `$ redis-cli ...` lines are run (any other `$` line
//! fails the test, so nothing unchecked hides there), the lines under one are its output,
//! `#` lines and text after two spaces and `#` are comments. A command ending in `&` runs
//! in the background while the rest of the block runs, once the server counts it (a
//! subscriber, a blocked client); its output lines are compared when the block ends (the
//! events a subscriber sees, a blocked command's reply). A `redis-cli` with options only
//! is a prompt: the `127.0.0.1:7000> ...` lines after it are typed into it, one
//! connection, as a user would (a `MULTI` ... `EXEC`), and each one's output compared. What cannot be the same twice is
//! matched by its shape and remembered: a server-made token (32 hex characters) and a
//! fence (an integer from 2^50), which later commands of the page then use in place of the
//! page's values; a unix time in ms (within a day of now) and a `ttl` (within 10% and 2 s
//! of the page's).

use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use redis_lock_testkit::pages::{
    Interactive, cli_args, matches, pages, redis_cli, uncommented, words,
};
use redis_lock_testkit::{self as testkit, TestServer};

/// One command of a transcript and the output the page shows for it.
#[derive(Debug)]
struct Step {
    line: usize,
    args: Vec<String>,
    kind: Kind,
    expected: Vec<String>,
}

#[derive(Debug, PartialEq)]
enum Kind {
    /// `$ redis-cli ... command`: runs, and its output is compared.
    Run,
    /// `$ redis-cli ... command &`: runs while the rest of the block runs.
    Background,
    /// `$ redis-cli [options]`: a prompt that the next lines are typed into.
    Interactive,
    /// `127.0.0.1:7379> command`: typed at the last prompt (`args` is the line).
    Typed,
}

/// The `console` blocks of a page, as transcripts.
fn transcripts(text: &str, page: &Path) -> Vec<Vec<Step>> {
    redis_lock_testkit::pages::blocks(text, page)
        .into_iter()
        .filter(|block| block.lang == "console")
        .map(|block| {
            let mut steps: Vec<Step> = Vec::new();
            for (number, raw) in &block.lines {
                let line = raw.trim();
                if let Some(command) = redis_lock_testkit::pages::typed(line) {
                    steps.push(Step {
                        line: *number,
                        args: vec![uncommented(command).to_string()],
                        kind: Kind::Typed,
                        expected: Vec::new(),
                    });
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
                        "{}:{number}: a console block runs redis-cli only: {raw}",
                        page.display(),
                    );
                    // past the `-p port --no-raw` that cli_args puts first
                    let options_only = cli_args(&args[1..], 0, &HashMap::new())[3..]
                        .iter()
                        .all(|arg| arg.starts_with('-'));
                    let kind = match (background, options_only) {
                        (true, _) => Kind::Background,
                        (false, true) => Kind::Interactive,
                        (false, false) => Kind::Run,
                    };
                    steps.push(Step {
                        line: *number,
                        args: args[1..].to_vec(),
                        kind,
                        expected: Vec::new(),
                    });
                } else if !line.is_empty() && !line.starts_with('#') {
                    let step = steps.last_mut().unwrap_or_else(|| {
                        panic!("{}:{number}: output before any command", page.display())
                    });
                    step.expected.push(uncommented(line).to_string());
                }
            }
            steps
        })
        .collect()
}

/// Compares a command's output with the page's lines.
fn check(page: &Path, step: &Step, actual: &[String], known: &mut HashMap<String, String>) {
    assert!(
        redis_lock_testkit::pages::fits(&step.expected, actual, known),
        "{}:{}: redis-cli {}\n--- the page shows:\n{}\n--- the server answered:\n{}",
        page.display(),
        step.line,
        step.args.join(" "),
        step.expected.join("\n"),
        actual.join("\n")
    );
}

/// The lines of a command's output that are not blank.
fn output_lines(output: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(output)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

/// A typed line with the server-made values the page's stand for.
fn with_known(line: &str, known: &HashMap<String, String>) -> String {
    known.iter().fold(line.to_string(), |line, (page, real)| {
        line.replace(page, real)
    })
}

/// Returns once the server streams its writes to its replica: after a full sync, Redis
/// 7.0 holds them back until the replica's first `REPLCONF ACK` (up to a second later),
/// and a `WAIT 1 100` in that second answers 0.
fn streaming_to_replica(server: &TestServer) {
    let mut con = server.connection();
    let _: () = redis::pipe()
        .cmd("SET")
        .arg("docs:sync")
        .arg(1)
        .ignore()
        .cmd("DEL")
        .arg("docs:sync")
        .ignore()
        .query(&mut con)
        .expect("a write to replicate");
    testkit::sync_replicas(&mut con, 1);
}

/// Subscriptions (patterns and channels) and blocked clients the server counts: what a
/// background command of a page adds to.
fn listening(con: &mut redis::Connection) -> i64 {
    let patterns: i64 = redis::cmd("PUBSUB").arg("NUMPAT").query(con).unwrap_or(0);
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .query(con)
        .unwrap_or_default();
    let clients: String = redis::cmd("INFO")
        .arg("clients")
        .query(con)
        .unwrap_or_default();
    let blocked = clients
        .lines()
        .find_map(|line| line.strip_prefix("blocked_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    patterns + channels.len() as i64 + blocked
}

fn run_page(page: &Path) -> usize {
    let text = fs::read_to_string(page).expect("page");
    let blocks = transcripts(&text, page);
    if blocks.is_empty() {
        return 0;
    }
    let server = TestServer::start();
    // for the pages that show `WAIT 1` after a grant
    let _replica = testkit::start_replica(&server, &[]);
    streaming_to_replica(&server);
    let mut known = HashMap::new();
    let mut run = 0;
    for steps in blocks {
        let mut background: Vec<(&Step, Interactive)> = Vec::new();
        let mut prompt: Option<Interactive> = None;
        for step in &steps {
            let mut cli = Command::new(redis_cli());
            cli.args(cli_args(&step.args, server.port, &known));
            match step.kind {
                Kind::Background => {
                    // A subscriber is listening, or a blocking command blocked, once the
                    // server counts it.
                    let mut con = server.connection();
                    let before = listening(&mut con);
                    let child = Interactive::spawn(&mut cli);
                    testkit::poll_until(Duration::from_secs(5), "the background command", || {
                        listening(&mut con) > before
                    });
                    background.push((step, child));
                }
                Kind::Interactive => prompt = Some(Interactive::spawn(&mut cli)),
                Kind::Typed => {
                    let at = prompt.as_mut().unwrap_or_else(|| {
                        panic!(
                            "{}:{}: typed with no redis-cli prompt",
                            page.display(),
                            step.line
                        )
                    });
                    at.type_line(&with_known(&step.args[0], &known));
                    let actual = at.read(step.expected.len());
                    check(page, step, &actual, &mut known);
                }
                Kind::Run => {
                    let output = cli.output().expect("redis-cli");
                    check(page, step, &output_lines(&output.stdout), &mut known);
                }
            }
            run += 1;
        }
        for (step, mut child) in background {
            let actual = child.read(step.expected.len());
            check(page, step, &actual, &mut known);
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
         $ redis-cli SUBSCRIBE ch &\n1) \"message\"\n$ redis-cli -c -p 7000\n\
         127.0.0.1:7000(TX)> EXEC  # runs\n1) OK\n```\n```sh\n$ ls\n```\n",
        page,
    );
    assert_eq!(blocks.len(), 1);
    let steps = &blocks[0];
    assert_eq!(steps[0].args, ["-p", "7379", "SET", "a b", "c"]);
    assert_eq!(steps[0].expected, ["OK"]);
    assert_eq!(
        (&steps[0].kind, &steps[1].kind),
        (&Kind::Run, &Kind::Background)
    );
    assert_eq!(steps[1].expected, ["1) \"message\""]);
    assert_eq!(
        (&steps[2].kind, &steps[3].kind),
        (&Kind::Interactive, &Kind::Typed)
    );
    assert_eq!(
        (&steps[3].args[0], &steps[3].expected[0]),
        (&"EXEC".into(), &"1) OK".into())
    );
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
