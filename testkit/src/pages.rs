//! The page reader the docs tests share (the module's `tests/docs`, the client's doc
//! snippets): the pages, their fenced blocks, shell words, and the matching of a server's
//! output against a page's (values the server makes anew each time, tokens and fences,
//! match by their shape and are remembered).

use std::collections::HashMap;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A fenced block of a page: its language, and its lines with their line numbers.
#[derive(Debug)]
pub struct Block {
    pub lang: String,
    /// The line of the opening fence, from 1.
    pub line: usize,
    pub lines: Vec<(usize, String)>,
}

/// The repository's root: the workspace this kit is a member of.
pub fn root() -> PathBuf {
    let kit = Path::new(env!("CARGO_MANIFEST_DIR"));
    kit.parent()
        .map_or_else(|| kit.join(".."), Path::to_path_buf)
}

/// The pages: `README.md`, then `docs/*.md` by name.
pub fn pages() -> Vec<PathBuf> {
    let root = root();
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

/// The fenced blocks of a page's text, in order.
pub fn blocks(text: &str, page: &Path) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut current: Option<Block> = None;
    for (i, raw) in text.lines().enumerate() {
        let fence = raw.trim_start().strip_prefix("```");
        match (current.as_mut(), fence) {
            (Some(_), Some(_)) => blocks.extend(current.take()),
            (Some(block), None) => block.lines.push((i + 1, raw.to_string())),
            (None, Some(lang)) => {
                current = Some(Block {
                    lang: lang.trim().to_string(),
                    line: i + 1,
                    lines: Vec::new(),
                })
            }
            (None, None) => {}
        }
    }
    assert!(
        current.is_none(),
        "{}: a fenced block is not closed",
        page.display()
    );
    blocks
}

/// The fenced blocks of every page, with the page.
pub fn all_blocks() -> Vec<(PathBuf, Block)> {
    pages()
        .into_iter()
        .flat_map(|page| {
            let text = fs::read_to_string(&page).expect("page");
            blocks(&text, &page)
                .into_iter()
                .map(move |block| (page.clone(), block))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Splits a shell command line into words: single and double quotes, no expansions.
pub fn words(line: &str) -> Vec<String> {
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
pub fn uncommented(line: &str) -> &str {
    match line.find("  #") {
        Some(at) => line[..at].trim_end(),
        None => line.trim_end(),
    }
}

/// The command line for the test server: the page's port replaced, formatted output.
pub fn cli_args(args: &[String], port: u16, known: &HashMap<String, String>) -> Vec<String> {
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

/// The `redis-cli` to run (`REDIS_CLI`, else the one on PATH).
pub fn redis_cli() -> String {
    std::env::var("REDIS_CLI").unwrap_or_else(|_| "redis-cli".into())
}

pub fn is_token(s: &str) -> bool {
    s.len() == 34
        && s.starts_with('"')
        && s.ends_with('"')
        && s[1..33]
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// `N) rest` -> (`N) `, rest), and `N) M) rest` (the first element of a nested array)
/// -> (`N) M) `, rest); other lines have no prefix.
pub fn split_index(line: &str) -> (&str, &str) {
    let mut end = 0;
    while let Some(at) = line[end..].find(") ") {
        let number = &line[end..end + at];
        if at == 0 || !number.bytes().all(|b| b.is_ascii_digit()) {
            break;
        }
        end += at + 2;
    }
    line.split_at(end)
}

pub fn integer(s: &str) -> Option<i64> {
    s.strip_prefix("(integer) ")?.parse().ok()
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Whether `actual` is what the page shows as `expected` (after `previous`, the page's
/// line before it); learns the server-made values it stands for.
pub fn matches(
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
    if expected.starts_with("id=") {
        return client_line_matches(expected, actual, known);
    }
    let (Some(page), Some(got)) = (integer(expected), integer(actual)) else {
        return false;
    };
    // A connection's `CLIENT ID` (`LOCK.HOLDERS`' `client`): remembered, as a token is.
    if previous.is_some_and(|p| split_index(p).1 == "\"client\"") && page > 0 && got > 0 {
        known.insert(page.to_string(), got.to_string());
        return true;
    }
    const FENCE_FROM: i64 = 1 << 50;
    const DAY_MS: i64 = 86_400_000;
    if page >= FENCE_FROM && (FENCE_FROM..1 << 53).contains(&got) {
        known.insert(page.to_string(), got.to_string());
        return true;
    }
    if (1_500_000_000_000..2_500_000_000_000).contains(&page) {
        return (got - now_ms()).abs() < DAY_MS;
    }
    // A time left (`ttl`), or gone by (`LOCK.CONTENDED`'s `waited` and `held`, which may
    // still be 0): within 10% and 2 s of the page's.
    let field = previous.map(|p| split_index(p).1);
    let least = match field {
        Some("\"ttl\"") => 1,
        Some("\"waited\"" | "\"held\"") => 0,
        _ => return false,
    };
    page > 0 && got >= least && (got - page).abs() <= page / 10 + 2_000
}

/// A `CLIENT LIST` line as a page shows it: `id=`, then `key=value` fields, `...` where it
/// leaves fields out. The connection's id (as remembered), `name`, `db`, `user` and `cmd`
/// must be the same; every other field the page shows must be there, with any value
/// (addresses, ages and buffers differ from run to run).
fn client_line_matches(expected: &str, actual: &str, known: &HashMap<String, String>) -> bool {
    let fields: HashMap<&str, &str> = actual
        .split_whitespace()
        .filter_map(|field| field.split_once('='))
        .collect();
    expected
        .split_whitespace()
        .filter(|&field| field != "...")
        .all(|field| {
            let Some((name, page)) = field.split_once('=') else {
                return false;
            };
            let Some(&got) = fields.get(name) else {
                return false;
            };
            match name {
                "id" => known.get(page).map_or(page, String::as_str) == got,
                "name" | "db" | "user" | "cmd" => page == got,
                _ => true,
            }
        })
}

/// A running `redis-cli` (or any command) whose output is read line by line as it comes,
/// and into which lines can be typed; killed on drop.
pub struct Interactive {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Interactive {
    pub fn spawn(command: &mut Command) -> Self {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-cli");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, lines }
    }

    /// Types `line` and Enter.
    pub fn type_line(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().expect("piped stdin");
        writeln!(stdin, "{line}").expect("type into redis-cli");
        stdin.flush().expect("type into redis-cli");
    }

    /// The next `n` lines that are not blank, or fewer if 10 s pass first.
    pub fn read(&mut self, n: usize) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut out = Vec::new();
        while out.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.trim().is_empty() => {}
                Ok(line) => out.push(line.trim().to_string()),
                Err(_) => break,
            }
        }
        out
    }

    /// SIGKILL, as `kill -9`.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Interactive {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether `actual` is what the page shows line by line (see `matches`).
pub fn fits(expected: &[String], actual: &[String], known: &mut HashMap<String, String>) -> bool {
    actual.len() == expected.len()
        && expected.iter().zip(actual).enumerate().all(|(i, (e, a))| {
            let previous = i.checked_sub(1).map(|p| expected[p].as_str());
            matches(e, a, previous, known)
        })
}

/// The command a line typed at a `redis-cli` prompt (`127.0.0.1:7379> ...`,
/// `127.0.0.1:7000(TX)> ...`), if it is one.
pub fn typed(line: &str) -> Option<&str> {
    let (prompt, command) = line.split_once("> ")?;
    let (host, port) = prompt.split_once(':')?;
    let port = port.strip_suffix("(TX)").unwrap_or(port);
    (!host.is_empty() && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
        .then_some(command)
}
