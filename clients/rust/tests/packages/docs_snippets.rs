//! The code snippets of `docs/clients.md` run against a real server, as the page shows
//! them, with the page's port (7379) replaced by the test server's:
//!
//! - Python, PHP and JavaScript: each snippet is cut from the page and run as it is, by
//!   python3 (the package from `clients/python/src`), php (with phpredis) and node (with
//!   ioredis from `clients/node/node_modules`), after a few lines that define what the
//!   snippet leaves to the reader (`pay_order` records the fence it is given). The test
//!   then checks what the snippet did: the order paid with a fence, the lock released.
//! - Rust: a snippet cannot be compiled from the page in a test, so it is written out
//!   below, in the functions that run it, and `the_rust_snippets_are_the_ones_run_here`
//!   checks that every line of every Rust snippet of the page is in this file, in order.
//!   Only the lines that name servers (`redis://...`) differ: here they name the test's.
//!
//! Go and Java are not run: this machine has neither toolchain (the page says so).

use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use redis_lock_client::{LockOptions, Locker};
use redis_lock_testkit::TestServer;
use redis_lock_testkit::pages::{Block, all_blocks, root};

const PAGE: &str = "docs/clients.md";
const PAGE_PORT: &str = "7379";

type Res<T = ()> = Result<T, Box<dyn Error>>;

fn snippets(lang: &str) -> Vec<Block> {
    all_blocks()
        .into_iter()
        .filter(|(page, block)| page.ends_with(PAGE) && block.lang == lang)
        .map(|(_, block)| block)
        .collect()
}

/// The one snippet of the page in `lang`, on the test server's port.
fn snippet(lang: &str, server: &TestServer) -> String {
    assert_eq!(snippets(lang).len(), 1, "{PAGE}: one {lang} snippet");
    nth_snippet(lang, 0, server)
}

/// The page's `n`th snippet in `lang`, on the test server's port.
fn nth_snippet(lang: &str, n: usize, server: &TestServer) -> String {
    let blocks = snippets(lang);
    let text: Vec<&str> = blocks[n].lines.iter().map(|(_, l)| l.as_str()).collect();
    let text = text.join("\n");
    assert!(
        text.contains(PAGE_PORT),
        "{PAGE}: the {lang} snippet names port {PAGE_PORT}"
    );
    text.replace(PAGE_PORT, &server.port.to_string())
}

/// Runs `program` with `script` on its standard input; fails the test with its output.
fn run_script(mut program: Command, script: &str, what: &str) {
    use std::io::Write;
    let mut child = program
        .current_dir(root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|err| panic!("cannot run {what} ({err}): `make deps-test` installs it"));
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(script.as_bytes())
        .expect("write the script");
    let out = child.wait_with_output().expect("wait for the script");
    assert!(
        out.status.success(),
        "the {what} snippet of {PAGE} failed:\n{script}\n--- stdout:\n{}\n--- stderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What the snippet did: `paid:<order>` holds the fence it was given, `lock` is free.
fn assert_paid_and_released(server: &TestServer, order: u32, lock: &str) {
    let mut con = server.connection();
    let fence: Option<u64> = redis::cmd("GET")
        .arg(format!("paid:{order}"))
        .query(&mut con)
        .expect("GET");
    assert!(
        fence.is_some_and(|f| f >= 1 << 50),
        "order {order} was not paid with a fence: {fence:?}"
    );
    let held: bool = redis::cmd("EXISTS")
        .arg(lock)
        .query(&mut con)
        .expect("EXISTS");
    assert!(!held, "{lock} is still held after the snippet");
}

#[test]
fn the_python_snippet_runs() {
    let server = TestServer::start();
    let prelude = format!(
        "import redis\n\
         def pay_order(order, fence):\n    \
         redis.Redis(port={}).set(f'paid:{{order}}', fence)\n",
        server.port
    );
    let mut python = Command::new(crate::common::python::python());
    python
        .arg("-")
        .env("PYTHONPATH", root().join("clients/python/src"))
        .env("PYTHONDONTWRITEBYTECODE", "1");
    run_script(
        python,
        &format!("{prelude}{}", snippet("python", &server)),
        "Python",
    );
    assert_paid_and_released(&server, 42, "orders:42");
}

#[test]
fn the_php_snippet_runs() {
    let server = TestServer::start();
    // after the snippet: PHP declares a file's functions before it runs it
    let postlude = format!(
        "function payOrder($order, $fence) {{\n\
         $r = new Redis(); $r->connect('127.0.0.1', {}); $r->set(\"paid:$order\", $fence);\n}}\n",
        server.port
    );
    let php = Command::new(std::env::var("PHP").unwrap_or_else(|_| "php".into()));
    run_script(
        php,
        &format!("<?php\n{}\n{postlude}", nth_snippet("php", 0, &server)),
        "PHP",
    );
    assert_paid_and_released(&server, 42, "Lock:order:42");
}

/// The watchdog snippet: three rows of half a second each under a lock of 1 s, every
/// one written while the lock is still there, with the fence of the one grant.
#[test]
fn the_php_watchdog_snippet_runs() {
    // Three rows of 1.5 s each outlast the snippet's 3 s TTL: the watchdog must keep it.
    assert_eq!(snippets("php").len(), 2, "{PAGE}: two PHP snippets");
    let server = TestServer::start();
    let postlude = format!(
        "function reportRows() {{ return [1, 2, 3]; }}\n\
         function writeRow($row, $fence) {{\n\
         usleep(1500000);\n\
         $r = new Redis(); $r->connect('127.0.0.1', {});\n\
         $r->rPush('rows', \"$row:$fence:\" . $r->exists('Lock:report'));\n}}\n",
        server.port
    );
    let php = Command::new(std::env::var("PHP").unwrap_or_else(|_| "php".into()));
    run_script(
        php,
        &format!("<?php\n{}\n{postlude}", nth_snippet("php", 1, &server)),
        "PHP",
    );
    let mut con = server.connection();
    let rows: Vec<String> = redis::cmd("LRANGE")
        .arg("rows")
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .unwrap();
    let fence = rows
        .first()
        .and_then(|row| row.split(':').nth(1))
        .unwrap_or("");
    let expected: Vec<String> = (1..=3).map(|row| format!("{row}:{fence}:1")).collect();
    assert!(
        !fence.is_empty() && rows == expected,
        "rows as written: {rows:?}"
    );
    let exists: i64 = redis::cmd("EXISTS")
        .arg("Lock:report")
        .query(&mut con)
        .unwrap();
    assert_eq!(exists, 0, "released at the end");
}

#[test]
fn the_javascript_snippet_runs() {
    let server = TestServer::start();
    let node_modules = root().join("clients/node/node_modules");
    assert!(
        node_modules.join("ioredis").is_dir(),
        "clients/node/node_modules lacks ioredis: run `make deps-test`"
    );
    // `require("redis-lock-module")` and `require("ioredis")` from a directory of its own
    let dir = scratch_dir();
    std::fs::create_dir_all(dir.join("node_modules")).expect("node_modules");
    symlink(
        &root().join("clients/node"),
        &dir.join("node_modules/redis-lock-module"),
    );
    symlink(
        &node_modules.join("ioredis"),
        &dir.join("node_modules/ioredis"),
    );
    let script = format!(
        "async function payOrder(order, fence) {{\n\
         const c = new (require(\"ioredis\"))({port});\n\
         await c.set(`paid:${{order}}`, fence);\n\
         c.disconnect();\n}}\n\
         (async () => {{\n{snippet}\n}})().then(() => process.exit(0), (e) => {{\n\
         console.error(e);\nprocess.exit(1);\n}});\n",
        port = server.port,
        snippet = snippet("js", &server)
    );
    std::fs::write(dir.join("snippet.cjs"), &script).expect("write the script");
    let out = Command::new("node")
        .arg(dir.join("snippet.cjs"))
        .output()
        .expect("node (`make deps-test` installs it)");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "the JavaScript snippet of {PAGE} failed:\n{script}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_paid_and_released(&server, 42, "orders:42");
    let mut con = server.connection();
    let held: bool = redis::cmd("EXISTS")
        .arg("report:daily")
        .query(&mut con)
        .unwrap();
    assert!(!held, "using() left report:daily held");
}

fn scratch_dir() -> PathBuf {
    std::env::temp_dir().join(format!(
        "redis-lock-snippet-{}-{}",
        std::process::id(),
        redis_lock_testkit::free_port()
    ))
}

fn symlink(target: &Path, link: &Path) {
    std::os::unix::fs::symlink(target, link).expect("symlink");
}

// ---- the Rust snippets, as the page shows them ----

/// What the snippets leave to the reader: an order paid with the fence.
struct Orders {
    url: String,
}

impl Orders {
    fn pay(&self, order: u32, fence: u64) -> Res {
        let mut con = redis::Client::open(self.url.as_str())?.get_connection()?;
        redis::cmd("SET")
            .arg(format!("paid:{order}"))
            .arg(fence)
            .query::<()>(&mut con)?;
        Ok(())
    }
}

#[rustfmt::skip]
#[test]
fn the_rust_guard_watchdog_and_session_snippets_run() -> Res {
    let server = TestServer::start();
    let url = server.url();
    let orders = Orders { url: url.clone() };
    let pay_order = |order, fence| orders.pay(order, fence);

    use std::time::Duration;
    use redis_lock_client::{LockOptions, Locker};

    let locker = Locker::open(&url)?;
    let options = LockOptions::new(Duration::from_secs(10))
        .wait(Duration::from_secs(5)) // LOCK.ACQUIRE ... WAIT 5000, on the guard's own connection
        .token("worker-7:job-42");    // optional: your own token (default: 128 random bits)
    if let Some(lock) = locker.acquire("orders:42", &options)? {
        pay_order(42, lock.fence())?;
        if !lock.release()? {
            // the lock expired or was taken over while we worked
        }
    } // a guard that is dropped instead is released all the same
    assert_paid_and_released(&server, 42, "orders:42");

    struct Step(u32);
    impl Step {
        fn run(&self, fence: u64) -> Res {
            assert!(fence > 0, "step {}", self.0);
            Ok(())
        }
    }
    let steps = [Step(1), Step(2)];
    let lock = locker
        .acquire("orders:42", &LockOptions::new(Duration::from_secs(3)).watchdog())?
        .expect("free");
    for step in steps {
        lock.check()?;                      // Err(LockLost) once the lock is gone
        step.run(lock.fence())?;
    }
    // or, in a supervising thread: lock.wait_lost(timeout) -> Option<LockLost>
    assert!(lock.release()?);

    // a report that may take 8 minutes; a crashed worker blocks the next one for 5 s
    let options = LockOptions::new(Duration::from_secs(600)).session(Duration::from_secs(5));
    let lock = locker.acquire("report:daily", &options)?.expect("free");
    let info: std::collections::HashMap<String, redis::Value> = redis::cmd("LOCK.INFO")
        .arg("report:daily")
        .query(&mut server.connection())?;
    assert_eq!(info.get("session"), Some(&redis::Value::Int(5000)), "{info:?}");
    assert!(lock.release()?);
    Ok(())
}

#[derive(Debug)]
struct Stale;

impl std::fmt::Display for Stale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a write with a stale fence")
    }
}

impl Error for Stale {}

/// The resource of the fence snippet.
#[derive(Default)]
struct Resource {
    highest_fence: u64,
    saved: Vec<(String, String)>,
}

impl Resource {
    fn save(&mut self, order: &str, state: &str) -> Result<(), Stale> {
        self.saved.push((order.into(), state.into()));
        Ok(())
    }

    #[rustfmt::skip]
    fn write(&mut self, fence: u64, order: &str, state: &str) -> Result<(), Stale> {
        if fence < self.highest_fence { return Err(Stale); }
        self.highest_fence = fence;
        self.save(order, state)
    }
    // in SQL: UPDATE orders SET state = $1, fence = $2 WHERE id = $3 AND fence <= $2
}

#[test]
fn the_rust_fence_snippet_refuses_a_late_writer() -> Res {
    let server = TestServer::start();
    let locker = Locker::open(&server.url())?;
    let ttl = LockOptions::new(Duration::from_millis(200));
    let first = locker.acquire("orders:42", &ttl)?.expect("free");
    let late = first.fence();
    std::thread::sleep(Duration::from_millis(300)); // paused past its TTL
    let second = locker
        .acquire("orders:42", &ttl)?
        .expect("expired, so free");
    let mut resource = Resource::default();
    resource.write(second.fence(), "42", "shipped")?;
    resource.write(second.fence(), "42", "delivered")?;
    assert!(
        resource.write(late, "42", "paid").is_err(),
        "the late writer"
    );
    assert_eq!(resource.saved.len(), 2);
    Ok(())
}

#[rustfmt::skip]
#[tokio::test]
async fn the_rust_async_snippet_runs() -> Res {
    let server = TestServer::start();
    let url = server.url();
    let orders = Orders { url: url.clone() };
    let pay_order = |order, fence| std::future::ready(orders.pay(order, fence));
    let options = LockOptions::new(Duration::from_secs(10));
    let run = async {
        let locker = redis_lock_client::aio::Locker::open(&url)?;
        if let Some(lock) = locker.acquire("orders:42", &options.watchdog()).await? {
            tokio::select! {
                lost = lock.lost() => return Err(lost.into()),
                done = pay_order(42, lock.fence()) => done?,
            }
            lock.release().await?;
        }
        Res::Ok(())
    };
    run.await?;
    assert_paid_and_released(&server, 42, "orders:42");
    Ok(())
}

#[rustfmt::skip]
#[test]
fn the_rust_redlock_snippet_runs() -> Res {
    let servers: Vec<TestServer> = (0..5).map(|_| TestServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(TestServer::url).collect();
    let masters: Vec<&str> = urls.iter().map(String::as_str).collect();

    use redis_lock_client::{Redlock, RedlockOptions};

    let redlock = Redlock::open(&masters)?;
    let guard = redlock.lock("reports:daily", &RedlockOptions::new(Duration::from_secs(10)))?;
    if guard.is_valid() { /* work that fits in guard.remaining() */ }
    guard.release();                       // also on drop; returns how many masters confirmed
    for server in &servers {
        let held: bool = redis::cmd("EXISTS")
            .arg("reports:daily")
            .query(&mut server.connection())?;
        assert!(!held, "reports:daily still held on a master");
    }
    Ok(())
}

/// Every line of every Rust snippet of the page, but those naming servers, is in this
/// file, in the page's order, apart from this file's own lines that name the test's
/// servers (`url`, `masters`) in their place.
#[test]
fn the_rust_snippets_are_the_ones_run_here() {
    let here: Vec<String> = include_str!("docs_snippets.rs")
        .lines()
        .map(|l| l.trim().to_string())
        .collect();
    let blocks = snippets("rust");
    assert!(blocks.len() >= 6, "{PAGE}: the Rust snippets");
    for block in blocks {
        let lines: Vec<&str> = block
            .lines
            .iter()
            .map(|(_, l)| l.trim())
            .filter(|l| !l.is_empty() && !l.contains("redis://"))
            .collect();
        let found = (0..here.len()).any(|start| {
            let mut at = start;
            lines.iter().all(|line| {
                while at < here.len() && *line != here[at] && names_servers(&here[at]) {
                    at += 1;
                }
                let same = at < here.len() && *line == here[at];
                at += 1;
                same
            })
        });
        assert!(
            found,
            "{PAGE}:{}: this Rust snippet is not the one clients/rust/tests/packages/docs_snippets.rs runs",
            block.line
        );
    }
}

fn names_servers(line: &str) -> bool {
    line.contains("url") || line.contains("masters") || line.is_empty()
}
