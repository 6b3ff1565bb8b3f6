//! The docs never drift, beyond the `redis-cli` transcripts that `tests/docs/pages.rs` runs:
//! every other block of `README.md` and `docs/*.md` that shows something to run is run
//! here, against real servers, as the page shows it (the page's ports replaced by free
//! ones, `/path/to/libredis_lock.so` by the freshly built module):
//!
//! - `sh` blocks: each `make` line. `make run` really runs (it builds, then serves the
//!   module: a lock is taken from it), `make help` too (it lists every target the docs
//!   name); the long ones (`make test`, `make bench`, `make chaos`, `make fuzz`, `make
//!   lint`, ...) as `make --dry-run` with the page's variables, which fails on a target or
//!   a file that is not there, and `make test` is what `.ci/run` runs for real. The
//!   `redis-cli --cluster create` line makes a real six-node cluster, of nodes started
//!   with the page's `conf` block, that then grants a lock.
//! - `conf` blocks: the README's `loadmodule` line loads the module.
//! - the `text` block of `docs/sessions.md`: the two-terminal demo, with an interactive
//!   `redis-cli` killed with SIGKILL, and the waiter granted the grace later; the one of
//!   `docs/operations.md`: the fields of `INFO lock`, in the server's order.
//! - `crontab`, `ini` and `text` blocks of `docs/cli.md`: run and checked by the command
//!   line's own tests (clients/cli/tests/cli/docs.rs).
//! - `sql` blocks: the fenced write, on SQLite (Python's `sqlite3`): it refuses a lower
//!   fence and takes the same one again.
//!
//! A block in a language that no test runs fails `every_block_is_run_by_a_test`.

use std::collections::HashMap;
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cluster_common::Cluster;
use crate::common::{FREE_PORT, TestServer, free_port, loaded_modules, module_path, poll_until};
use redis_lock_testkit::pages::{
    Block, Interactive, all_blocks, cli_args, fits, redis_cli, typed, uncommented, words,
};

const PAGE_MODULE: &str = "/path/to/libredis_lock.so";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn page_name(page: &Path) -> String {
    page.strip_prefix(root())
        .unwrap_or(page)
        .display()
        .to_string()
}

#[test]
fn every_block_is_run_by_a_test() {
    for (page, block) in all_blocks() {
        let name = page_name(&page);
        let at = format!("{name}:{}", block.line);
        match block.lang.as_str() {
            // tests/docs/pages.rs
            "console" => {}
            // this file
            "sh" | "conf" => {}
            // the sessions demo, and the INFO listing checked against the server's; the
            // command line's synopses, status table and waiting line
            // (clients/cli/tests/cli/docs.rs checks the table's columns and the line)
            "text" => assert!(
                ["docs/sessions.md", "docs/operations.md", "docs/cli.md"].contains(&name.as_str()),
                "{at}: a text block that no test runs"
            ),
            // clients/cli/tests/cli/docs.rs runs the crontab line and the systemd unit
            "crontab" | "ini" => assert_eq!(
                name, "docs/cli.md",
                "{at}: clients/cli/tests/cli/docs.rs runs the crontab and unit of docs/cli.md only"
            ),
            // run on SQLite
            "sql" => {}
            // clients/rust/tests/packages/docs_snippets.rs
            "rust" | "python" | "php" | "js" => assert_eq!(
                name, "docs/clients.md",
                "{at}: clients/rust/tests/packages/docs_snippets.rs runs the snippets of docs/clients.md only"
            ),
            // no toolchain here, as the page says
            "go" | "java" => {
                let text = fs::read_to_string(&page).expect("page");
                assert!(
                    text.contains("Go and Java stay snippets"),
                    "{at}: a {} snippet that no test runs, and the page does not say why",
                    block.lang
                );
            }
            other => panic!("{at}: a ```{other} block that no test runs"),
        }
    }
}

/// The lines of the `sh` blocks, with continuation lines joined and comments dropped.
fn shell_lines() -> Vec<(String, Vec<String>)> {
    let mut lines = Vec::new();
    for (page, block) in all_blocks() {
        if block.lang != "sh" {
            continue;
        }
        let mut joined = String::new();
        for (number, raw) in &block.lines {
            let line = uncommented(raw.trim());
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            match line.strip_suffix('\\') {
                Some(head) => joined.push_str(head),
                None => {
                    joined.push_str(line);
                    let at = format!("{}:{number}", page_name(&page));
                    lines.push((at, words(&joined)));
                    joined.clear();
                }
            }
        }
    }
    lines
}

fn make(args: &[String]) -> std::process::Output {
    Command::new("make")
        .args(args)
        .current_dir(root())
        .output()
        .expect("run make")
}

#[test]
fn every_make_line_of_the_docs_runs() {
    let lines: Vec<(String, Vec<String>)> = shell_lines()
        .into_iter()
        .filter(|(_, words)| words[0] == "make")
        .collect();
    let targets: Vec<&str> = lines.iter().map(|(_, w)| w[1].as_str()).collect();
    for wanted in ["run", "test", "bench", "bench-smoke"] {
        assert!(targets.contains(&wanted), "no `make {wanted}` in the docs");
    }

    let help = make(&["help".into()]);
    assert!(help.status.success(), "make help failed");
    let help = String::from_utf8_lossy(&help.stdout);
    for (at, words) in &lines {
        assert!(
            help.contains(&format!("make {} ", words[1])),
            "{at}: `make help` does not list `{}`:\n{help}",
            words[1]
        );
        for var in words[2..].iter().filter_map(|w| w.split_once('=')) {
            if var.0 == "REDIS_SERVER" && var.1.starts_with("target/servers/") {
                // where `make servers` puts it, once it has run
                if root().join("target/servers").is_dir() {
                    assert!(root().join(var.1).is_file(), "{at}: no server at {}", var.1);
                }
            }
        }
        match words[1].as_str() {
            "run" => make_run_serves_the_module(&words[2..]),
            "help" => {}
            _ => {
                let mut args = vec!["--dry-run".to_string()];
                args.extend(words[1..].iter().cloned());
                let out = make(&args);
                assert!(
                    out.status.success(),
                    "{at}: make {} --dry-run failed:\n{}",
                    words[1..].join(" "),
                    String::from_utf8_lossy(&out.stderr)
                );
                if let Some(extra) = words[2..]
                    .iter()
                    .find_map(|w| w.strip_prefix("BENCH_ARGS="))
                {
                    assert!(
                        String::from_utf8_lossy(&out.stdout).contains(&format!("-- {extra}")),
                        "{at}: BENCH_ARGS does not reach the benchmark"
                    );
                }
            }
        }
    }
    let ci = fs::read_to_string(root().join(".ci/run")).expect(".ci/run");
    assert!(
        ci.lines().any(|line| line.trim() == "make test"),
        ".ci/run does not run the README's test command"
    );
}

/// `make run` and the processes it starts, killed together (SIGKILL to the group) on drop.
struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .status();
        let _ = self.0.wait();
    }
}

/// Whether the server on `con` was started with the repository's `redis.conf`.
fn runs_from_the_repositorys_conf(con: &mut redis::Connection) -> bool {
    let conf = fs::canonicalize(root().join("redis.conf")).ok();
    let info: redis::RedisResult<String> = redis::cmd("INFO").arg("server").query(con);
    info.is_ok_and(|info| {
        info.lines()
            .filter_map(|line| line.strip_prefix("config_file:"))
            .any(|file| fs::canonicalize(file.trim()).ok() == conf)
    })
}

/// `make run` (with the page's other words) on a free port: it answers with the module
/// loaded and grants a lock. A start that finds the port taken is retried on another.
fn make_run_serves_the_module(vars: &[String]) {
    let log = std::env::temp_dir().join(format!("redis-lock-make-run-{}", std::process::id()));
    for _attempt in 0..5 {
        let port = free_port();
        let mut group = Group(
            Command::new("make")
                .arg("run")
                .args(vars)
                .arg(format!("PORT={port}"))
                // The module the suite built is served as it is: with sources newer than
                // it (an edit since), make run would rebuild it under the other tests,
                // which load it meanwhile.
                .arg("MODULE_SOURCES=")
                .current_dir(root())
                .stdin(Stdio::null())
                .stdout(fs::File::create(&log).expect("log file"))
                .stderr(Stdio::from(
                    fs::File::options().append(true).open(&log).expect("log"),
                ))
                .process_group(0)
                .spawn()
                .expect("run make run"),
        );
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut con = loop {
            // Another test's server may hold the port when make run's could not bind it:
            // only the server started from the repository's redis.conf is make run's.
            if let Ok(mut con) = client.get_connection()
                && redis::cmd("PING").query::<String>(&mut con).is_ok()
                && runs_from_the_repositorys_conf(&mut con)
            {
                break Some(con);
            }
            if group.0.try_wait().ok().flatten().is_some() || Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let output = fs::read_to_string(&log).unwrap_or_default();
        let Some(con) = con.as_mut() else {
            if output.contains("Address already in use") {
                continue;
            }
            panic!("make run did not serve on port {port}:\n{output}");
        };
        let _ = fs::remove_file(&log);
        assert_eq!(loaded_modules(con), ["lock"], "make run: MODULE LIST");
        let granted: Option<(String, i64)> = redis::cmd("LOCK.ACQUIRE")
            .arg("orders:42")
            .arg(30_000)
            .query(con)
            .expect("LOCK.ACQUIRE on make run's server");
        let (token, fence) = granted.expect("a free lock is granted");
        assert_eq!(token.len(), 32);
        assert!(fence > 0);
        drop(group);
        return;
    }
    panic!("make run: every port tried was taken");
}

/// A `conf` block as `redis-server` arguments (`--directive value...` is the same as the
/// line in a file), with the module's real path.
fn conf_args(block: &Block) -> Vec<String> {
    let mut args = Vec::new();
    for (_, raw) in &block.lines {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = words(line);
        words[0] = format!("--{}", words[0]);
        for word in &mut words {
            if word == PAGE_MODULE {
                *word = module_path().display().to_string();
            }
        }
        args.extend(words);
    }
    args
}

/// The first block of `page` in `lang` that has a line containing `containing`.
fn block(page: &str, lang: &str, containing: &str) -> Block {
    all_blocks()
        .into_iter()
        .find(|(p, block)| {
            page_name(p) == page
                && block.lang == lang
                && block.lines.iter().any(|(_, l)| l.contains(containing))
        })
        .map(|(_, block)| block)
        .unwrap_or_else(|| panic!("{page}: no {lang} block with {containing:?}"))
}

fn server_from(args: &[String]) -> TestServer {
    let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
    all.push("--no-module"); // the page's own loadmodule line loads it
    TestServer::with_args(&all)
}

#[test]
fn the_readmes_loadmodule_line_loads_the_module() {
    let block = block("README.md", "conf", "loadmodule");
    let server = server_from(&conf_args(&block));
    assert_eq!(loaded_modules(&mut server.connection()), ["lock"]);

    // `MODULE LOAD` at run time, as the README says too, allowed from the same host
    let server = TestServer::with_args(&["--no-module", "--enable-module-command", "local"]);
    let mut con = server.connection();
    let _: () = redis::cmd("MODULE")
        .arg("LOAD")
        .arg(module_path().display().to_string())
        .query(&mut con)
        .expect("MODULE LOAD");
    assert_eq!(loaded_modules(&mut con), ["lock"]);
}

#[test]
fn the_cluster_of_the_docs_is_made_as_shown_and_grants_locks() {
    let page = "docs/cluster-and-durability.md";
    let mut node_args = conf_args(&block(page, "conf", "cluster-enabled"));
    // Each node's bus port is picked free: the default (port + 10000) may be taken.
    node_args.extend(["--cluster-port".into(), FREE_PORT.into()]);
    let (at, line) = shell_lines()
        .into_iter()
        .find(|(_, w)| w.len() > 2 && w[0] == "redis-cli" && w[1] == "--cluster")
        .expect("the page's redis-cli --cluster create line");
    assert!(at.starts_with(page), "{at}");
    let addresses: Vec<&String> = line
        .iter()
        .filter(|w| w.starts_with("127.0.0.1:"))
        .collect();
    assert_eq!(addresses.len(), 6, "{at}: six nodes");
    let nodes: Vec<TestServer> = addresses.iter().map(|_| server_from(&node_args)).collect();
    let ports: HashMap<&String, u16> = addresses
        .iter()
        .copied()
        .zip(nodes.iter().map(|n| n.port))
        .collect();
    let args: Vec<String> = line[1..]
        .iter()
        .map(|w| match ports.get(w) {
            Some(port) => format!("127.0.0.1:{port}"),
            None => w.clone(),
        })
        .collect();
    let cluster = Cluster::create(nodes, &args);
    assert_eq!(cluster.masters().len(), 3, "{at}: three masters");
    let mut con = cluster.client();
    let granted: Option<(String, i64)> = redis::cmd("LOCK.ACQUIRE")
        .arg("orders:42")
        .arg(30_000)
        .query(&mut con)
        .expect("LOCK.ACQUIRE through the cluster client");
    assert!(granted.is_some(), "the lock is granted");
}

#[test]
fn the_sessions_demo_runs_as_shown() {
    let block = block("docs/sessions.md", "text", "");
    let server = TestServer::start();
    let mut watch = server.connection();
    let mut terminals: HashMap<u32, Interactive> = HashMap::new();
    let mut current = 0;
    let mut known = HashMap::new();
    let mut grace: Option<Duration> = None;
    let mut killed_at: Option<Instant> = None;
    // the output the page shows next in the current terminal
    let mut pending: Vec<String> = Vec::new();
    let mut compare = |terminal: Option<&mut Interactive>, pending: &mut Vec<String>| {
        if let Some(terminal) = terminal.filter(|_| !pending.is_empty()) {
            let actual = terminal.read(pending.len());
            assert!(
                fits(pending, &actual, &mut known),
                "docs/sessions.md: the page shows\n{pending:?}\nredis-cli answered\n{actual:?}"
            );
            pending.clear();
        }
    };

    for (number, raw) in &block.lines {
        let line = raw.trim();
        let at = format!("docs/sessions.md:{number}");
        if let Some(comment) = line.strip_prefix('#') {
            compare(terminals.get_mut(&current), &mut pending);
            let Some(rest) = comment.trim().strip_prefix("terminal ") else {
                continue;
            };
            current = rest
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{at}: which terminal?"));
            if rest.contains("kill") {
                // the waiter is blocked before its holder dies
                poll_until(Duration::from_secs(5), "the waiter to block", || {
                    let info: String = redis::cmd("INFO").arg("clients").query(&mut watch).unwrap();
                    info.contains("blocked_clients:1")
                });
                // Taken before the kill: the server may see the connection close
                // before the kill returns (it waits for the process to exit).
                killed_at = Some(Instant::now());
                terminals
                    .get_mut(&current)
                    .expect("a terminal to kill")
                    .kill();
            }
        } else if let Some(command) = line.strip_prefix("$ ") {
            let args = words(command);
            assert_eq!(args[0], "redis-cli", "{at}");
            let mut cli = Command::new(redis_cli());
            cli.args(cli_args(&args[1..], server.port, &HashMap::new()));
            terminals.insert(current, Interactive::spawn(&mut cli));
        } else if let Some(command) = typed(line) {
            let words = words(command);
            if let Some(i) = words.iter().position(|w| w == "SESSION") {
                grace = Some(Duration::from_millis(
                    words[i + 1].parse().expect("grace-ms"),
                ));
            }
            let terminal = terminals.get_mut(&current).expect("a redis-cli prompt");
            terminal.type_line(command);
        } else if !line.is_empty() {
            pending.push(line.to_string());
        }
    }
    compare(terminals.get_mut(&current), &mut pending);
    let waited = killed_at.expect("the demo kills the holder").elapsed();
    let grace = grace.expect("the demo's SESSION grace");
    assert!(
        waited >= grace && waited < grace + Duration::from_secs(3),
        "the waiter was granted {waited:?} after the kill, the grace is {grace:?}"
    );
}

#[test]
fn the_info_listing_names_the_servers_fields_in_order() {
    let block = block("docs/operations.md", "text", "lock_stats");
    let listed: Vec<String> = block
        .lines
        .iter()
        .map(|(_, line)| line.split(':').next().unwrap_or("").trim().to_string())
        .collect();
    let server = TestServer::start();
    let info: String = redis::cmd("INFO")
        .arg("lock")
        .query(&mut server.connection())
        .expect("INFO lock");
    let fields: Vec<String> = info
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| line.split(':').next().unwrap_or("").trim().to_string())
        .collect();
    assert_eq!(listed, fields, "docs/operations.md:{}", block.line);
}

#[test]
fn the_fenced_write_in_sql_refuses_a_lower_fence() {
    let (page, block) = all_blocks()
        .into_iter()
        .find(|(_, block)| block.lang == "sql")
        .expect("an sql block");
    let statement = block
        .lines
        .iter()
        .map(|(_, l)| l.trim())
        .collect::<Vec<_>>()
        .join(" ");
    // each update: (state, fence, id) -> rows changed
    let script = format!(
        r#"
import sqlite3, sys
db = sqlite3.connect(":memory:")
db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, state TEXT, fence INTEGER)")
db.execute("INSERT INTO orders VALUES (42, 'new', 0)")
update = {statement:?}
for state, fence, want in [("paid", 7, 1), ("late", 5, 0), ("shipped", 7, 1), ("next", 9, 1), ("stale", 7, 0)]:
    got = db.execute(update, (state, fence, 42)).rowcount
    if got != want:
        sys.exit(f"fence {{fence}}: {{got}} rows changed, want {{want}}")
print(db.execute("SELECT state, fence FROM orders").fetchone())
"#
    );
    let out = Command::new(redis_lock_testkit::python())
        .args(["-c", &script])
        .output()
        .expect("python3 (make deps-test installs it)");
    assert!(
        out.status.success(),
        "{}:{}: {}",
        page_name(&page),
        block.line,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "('next', 9)");
}
