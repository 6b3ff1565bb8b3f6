//! The one real-server harness of the workspace, shared by the integration tests of
//! every crate (the module's `tests/`, the clients' `clients/rust/tests/`) and the
//! benchmark, which starts its servers with `launch.rs`. Each `TestServer` is a
//! `redis-server` process on a free loopback port, with its own directory, the freshly
//! built module loaded, and a guard that kills it (and removes its directory) when the
//! test ends, panics included. Also the generic helpers around it: polling to a deadline,
//! replicas, Sentinels, small clusters, and a few plain Redis reads.
//!
//! The module is the workspace's `target/<profile>/libredis_lock.so`, or the one `cargo
//! test` builds in `deps/` when that is newer; set `LOCK_MODULE` to test another build,
//! `REDIS_SERVER` to use another server binary (`make test` runs the suite once per server
//! it installs: Redis 7.0 and 8.2, Valkey 8.1 and 9.1).

mod cluster;
pub mod launch;
pub mod pages;
mod sentinel;
mod terminal;

pub use cluster::{MiniCluster, cluster_node};
pub use sentinel::Sentinel;
pub use terminal::Terminal;

use std::fs;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// How long a server may take to start answering before the test fails.
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(20);

/// An extra argument that stands for a free port, chosen at each start attempt (a
/// cluster node's bus port, say), so a port taken meanwhile is retried like the main one.
pub const FREE_PORT: &str = "{free-port}";

/// How many ports a server start tries: a port found free can be taken by another
/// process before the server binds it.
pub(crate) const START_ATTEMPTS: usize = 5;

/// The workspace root: the parent of this crate's directory, whichever crate's tests
/// use the harness.
fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit/ sits in the workspace root")
}

/// The module under test.
pub fn module_path() -> PathBuf {
    if let Ok(path) = std::env::var("LOCK_MODULE") {
        return PathBuf::from(path);
    }
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| workspace_root().join("target"));
    // `cargo build` puts the module in the profile's directory; `cargo test` builds it
    // (with the tests' dependency features) in `deps/` only. The newer is the one the
    // code under test made.
    let built = target.join(profile).join("libredis_lock.so");
    let tested = target.join(profile).join("deps").join("libredis_lock.so");
    let modified = |path: &Path| fs::metadata(path).and_then(|m| m.modified()).ok();
    match (modified(&built), modified(&tested)) {
        (Some(b), Some(t)) if t > b => tested,
        (None, Some(_)) => tested,
        _ => built,
    }
}

/// The tests' Python interpreter: `PYTHON` when set, else the pinned test virtualenv's
/// (`target/venv`, which `scripts/test-env.sh` makes from `scripts/pins.txt`; `make test`
/// and `make deps-test` run it), so every test runs on the same redis-py, pytest and mypy
/// whatever the machine's own python3 has.
pub fn python() -> String {
    venv_python("PYTHON", "venv")
}

/// The interpreter of the virtualenv with the oldest redis-py the Python package supports
/// (`target/venv-oldest`, the `oldest` pins): `OLDEST_PYTHON` when set.
pub fn oldest_python() -> String {
    venv_python("OLDEST_PYTHON", "venv-oldest")
}

fn venv_python(variable: &str, venv: &str) -> String {
    if let Ok(path) = std::env::var(variable) {
        return path;
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| workspace_root().join("target"));
    let interpreter = target.join(venv).join("bin").join("python");
    assert!(
        interpreter.exists(),
        "no {} (set {variable}, or make it with scripts/test-env.sh: `make deps-test`)",
        interpreter.display()
    );
    interpreter.display().to_string()
}

/// The version `scripts/pins.txt` pins for the package `name` of `kind` (`pip redis`,
/// `peer python-redis-lock`): a test that fetches a package fetches that one.
pub fn pinned(kind: &str, name: &str) -> String {
    let path = workspace_root().join("scripts/pins.txt");
    let text = fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()));
    text.lines()
        .map(str::split_whitespace)
        .find_map(|mut words| {
            (words.next() == Some(kind) && words.next() == Some(name))
                .then(|| words.next())
                .flatten()
        })
        .unwrap_or_else(|| panic!("no `{kind} {name}` line in {}", path.display()))
        .to_string()
}

/// The server binary under test: `REDIS_SERVER`, else `redis-server` on `PATH`.
pub fn server_binary() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_string())
}

/// The server under test, as its binary names itself (`--version`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerKind {
    /// Valkey rather than Redis.
    pub valkey: bool,
    /// The server's own `(major, minor, patch)` (Valkey's, not its Redis-compatible one).
    pub version: (u32, u32, u32),
}

impl ServerKind {
    /// Parses `redis-server --version`: `Redis server v=8.2.3 sha=...` or
    /// `Valkey server v=9.1.2 ...`.
    pub fn parse(version_output: &str) -> Option<Self> {
        let valkey = version_output.starts_with("Valkey");
        let version = version_output
            .split_whitespace()
            .find_map(|word| word.strip_prefix("v="))?;
        let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
        let version = (parts.next()??, parts.next()??, parts.next()??);
        Some(Self { valkey, version })
    }

    /// Whether `CLIENT UNBLOCK` by an admin ends a lock wait on this server (Redis 7.4+,
    /// Valkey 8+; older servers race it against the module's own answer, see the
    /// docs/servers.md).
    pub fn admin_unblock_ends_a_wait(&self) -> bool {
        if self.valkey {
            self.version >= (8, 0, 0)
        } else {
            self.version >= (7, 4, 0)
        }
    }

    /// Whether the module follows a session-bound lock that `RENAME` or `MOVE` takes to
    /// another key: everywhere but Valkey 8.1 to 9.1.1, where subscribing to those
    /// notifications would leave `MOVE` callers in the wrong database (valkey#4024).
    pub fn follows_key_moves(&self) -> bool {
        !(self.valkey && ((8, 1, 0)..(9, 1, 2)).contains(&self.version))
    }

    /// Whether the server's module API lets a module add an ACL category
    /// (`RedisModule_AddACLCategory`: Redis 7.4+, Valkey 8+), so the commands are in
    /// `@lock`.
    pub fn has_module_acl_categories(&self) -> bool {
        if self.valkey {
            self.version >= (8, 0, 0)
        } else {
            self.version >= (7, 4, 0)
        }
    }

    /// Whether the module can hold a reply until replicas have a grant (`REPLICAS n`):
    /// Redis 7.2+ and every supported Valkey; Redis 7.0 answers `ERR REPLICAS needs Redis
    /// 7.2 or later`.
    pub fn can_wait_for_replicas(&self) -> bool {
        self.valkey || self.version >= (7, 2, 0)
    }

    /// Whether the server can sync a replica over two connections, the snapshot apart
    /// from the stream (`dual-channel-replication-enabled`: Valkey 8+).
    pub fn has_dual_channel_replication(&self) -> bool {
        self.valkey && self.version >= (8, 0, 0)
    }

    /// Whether the server runs post-notification jobs (Redis 7.2+, every Valkey), so
    /// that a lock removed by `DEL` or expiry is handed over inside that same event.
    pub fn has_post_jobs(&self) -> bool {
        self.valkey || self.version >= (7, 2, 0)
    }
}

impl std::fmt::Display for ServerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (major, minor, patch) = self.version;
        let name = if self.valkey { "Valkey" } else { "Redis" };
        write!(f, "{name} {major}.{minor}.{patch}")
    }
}

/// The server under test (asked once).
pub fn server_kind() -> ServerKind {
    static KIND: OnceLock<ServerKind> = OnceLock::new();
    *KIND.get_or_init(|| {
        let binary = server_binary();
        let output = Command::new(&binary)
            .arg("--version")
            .output()
            .unwrap_or_else(|err| panic!("cannot run {binary} --version: {err}"));
        let text = String::from_utf8_lossy(&output.stdout);
        ServerKind::parse(&text)
            .unwrap_or_else(|| panic!("cannot tell which server {binary} is: {text}"))
    })
}

/// Whether `bytes` begin like an RDB file (also an AOF base or a `DUMP`-less snapshot):
/// Redis writes `REDIS`, Valkey 9 `VALKEY`.
pub fn is_rdb(bytes: &[u8]) -> bool {
    bytes.starts_with(b"REDIS") || bytes.starts_with(b"VALKEY")
}

/// A free TCP port on loopback (never 6379: the OS picks from its ephemeral range).
pub fn free_port() -> u16 {
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .expect("bind 127.0.0.1:0")
            .local_addr()
            .expect("local addr")
            .port();
        if port != 6379 {
            return port;
        }
    }
}

/// A port where nothing listens, and where no test server will: a privileged one (below
/// 1024, which `free_port` never hands out), checked to refuse connections now. A port
/// from `free_port` may be taken by a server of a suite running beside this one.
pub fn dead_port() -> u16 {
    [1, 9, 13, 17, 19, 37, 79]
        .into_iter()
        .find(|port| {
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], *port));
            matches!(
                std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(200)),
                Err(err) if err.kind() == std::io::ErrorKind::ConnectionRefused
            )
        })
        .expect("a privileged port where nothing listens")
}

/// A new empty directory of its own for a server (`tag` in its name).
pub fn fresh_dir(tag: &str) -> PathBuf {
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "redis-lock-test-{}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed),
        tag
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("create test dir");
    dir
}

/// A running `redis-server`, killed on drop.
pub struct TestServer {
    pub port: u16,
    pub dir: PathBuf,
    extra: Vec<String>,
    child: Option<Child>,
    keep_dir: bool,
}

impl TestServer {
    /// A server with the module loaded, no persistence.
    pub fn start() -> Self {
        Self::with_args(&[])
    }

    /// A server with the module loaded and extra `redis-server` arguments
    /// (e.g. `["--appendonly", "yes"]`). Persistence is off unless the arguments set it.
    pub fn with_args(extra: &[&str]) -> Self {
        let dir = fresh_dir("srv");
        let mut server = Self {
            port: free_port(),
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            child: None,
            keep_dir: false,
        };
        server.spawn();
        server
    }

    /// A server without the module: to prove tests fail when it is missing.
    pub fn without_module() -> Self {
        let mut server = Self::with_args(&[]);
        server.stop();
        server.extra.push("--no-module".into());
        server.spawn();
        server
    }

    /// Starts the server; a start that fails because another process took the port in
    /// the meantime is retried on a new one.
    fn spawn(&mut self) {
        for attempt in 1..=START_ATTEMPTS {
            match self.try_spawn() {
                Ok(()) => return,
                Err(log) if attempt < START_ATTEMPTS && port_taken(&log) => {
                    self.port = free_port();
                }
                Err(log) => panic!(
                    "{} ({}) did not start on port {}; log:\n{log}",
                    server_kind(),
                    server_binary(),
                    self.port
                ),
            }
        }
    }

    fn try_spawn(&mut self) -> Result<(), String> {
        let _ = fs::remove_file(self.dir.join("redis.log"));
        let with_module = !self.extra.iter().any(|arg| arg == "--no-module");
        let module = module_path();
        if with_module {
            assert!(
                module.exists(),
                "module not built at {} (run `cargo build --release`)",
                module.display()
            );
        }
        let launch = launch::Launch {
            port: self.port,
            dir: &self.dir,
            module: with_module.then_some(module.as_path()),
        };
        let mut args = launch.args();
        args.extend(
            [
                "--enable-debug-command",
                "yes",
                // A full sync to a new replica starts at once instead of after 5 s.
                "--repl-diskless-sync-delay",
                "0",
            ]
            .map(Into::into),
        );
        for arg in self.extra.iter().filter(|arg| *arg != "--no-module") {
            if arg == FREE_PORT {
                // Picked anew at every attempt, like the server's own port.
                args.push(free_port().to_string().into());
            } else {
                args.push(arg.into());
            }
        }
        let mut child = Command::new(server_binary())
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| {
                panic!(
                    "cannot start {} ({err}; is it installed? `make test` installs it)",
                    server_binary()
                )
            });
        match launch::wait_ready(&mut child, self.port, &self.dir, START_TIMEOUT) {
            Ok(()) => {
                self.child = Some(child);
                Ok(())
            }
            Err(reason) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(reason)
            }
        }
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    /// The server's URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A `redis::Client` for the server.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("client")
    }

    fn try_connection(&self) -> redis::RedisResult<redis::Connection> {
        let client = redis::Client::open(self.url())?;
        client.get_connection_with_timeout(Duration::from_secs(2))
    }

    /// A new RESP2 connection.
    pub fn connection(&self) -> redis::Connection {
        self.try_connection().expect("connect to test server")
    }

    /// A new RESP3 connection.
    pub fn connection_resp3(&self) -> redis::Connection {
        let client = redis::Client::open(format!("{}?protocol=resp3", self.url())).expect("client");
        client.get_connection().expect("connect (RESP3)")
    }

    /// Stops the server at once (SIGKILL), keeping its directory (for restarts).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server cleanly (`SHUTDOWN`, which saves if persistence is on).
    pub fn stop(&mut self) {
        if let Ok(mut con) = self.try_connection() {
            let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").query(&mut con);
        }
        if let Some(mut child) = self.child.take() {
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and directory, with the same arguments
    /// (after `stop` or `kill`).
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// Starts the server again with other extra arguments.
    pub fn restart_with(&mut self, extra: &[&str]) {
        self.stop();
        self.extra = extra.iter().map(|s| s.to_string()).collect();
        self.spawn();
    }

    /// Whether the server is running (not stopped or killed).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The process id, for signals.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Leaves the directory in place after the test (for debugging).
    pub fn keep_dir(&mut self) {
        self.keep_dir = true;
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill();
        if !self.keep_dir && !thread::panicking() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// Whether a server's start-up log says its port was taken.
pub(crate) fn port_taken(log: &str) -> bool {
    log.contains("Address already in use")
}

/// The names of the modules loaded into the server (`MODULE LIST`), leaving out the
/// ones built into it (Redis 8's `vectorset`, Valkey 9's `lua`: no path, or a path
/// equal to the name).
pub fn loaded_modules(con: &mut redis::Connection) -> Vec<String> {
    let modules: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("MODULE")
        .arg("LIST")
        .query(con)
        .expect("MODULE LIST");
    let text = |module: &std::collections::HashMap<String, redis::Value>, field: &str| {
        module
            .get(field)
            .and_then(|value| redis::from_redis_value::<String>(value.clone()).ok())
            .unwrap_or_default()
    };
    modules
        .iter()
        .filter(|module| {
            let path = text(module, "path");
            !path.is_empty() && path != text(module, "name")
        })
        .map(|module| text(module, "name"))
        .collect()
}

/// A replica of `master`, started with `replicaof`, returned once the initial sync is
/// done (`master_link_status:up`) and the master has heard it acknowledge a write made
/// after it (so a grant that waits for the replicas, as `lock.replicas auto` makes every
/// grant do by default, is not made in the moment between the two). The write is a key
/// set and deleted in database 15: nothing of it stays.
pub fn start_replica(master: &TestServer, extra: &[&str]) -> TestServer {
    let port = master.port.to_string();
    let mut args = vec!["--replicaof", "127.0.0.1", port.as_str()];
    args.extend_from_slice(extra);
    let replica = TestServer::with_args(&args);
    let mut con = replica.connection();
    poll_until(Duration::from_secs(20), "replica link up", || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut con)
            .unwrap();
        info.contains("master_link_status:up")
    });
    let mut m = master.connection();
    let info: String = redis::cmd("INFO").arg("replication").query(&mut m).unwrap();
    let replicas: i64 = info
        .lines()
        .find_map(|line| line.strip_prefix("connected_slaves:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(1);
    let () = redis::cmd("SELECT").arg(15).query(&mut m).unwrap();
    let () = redis::cmd("SET")
        .arg("testkit:attached")
        .arg(1)
        .query(&mut m)
        .unwrap();
    let _: i64 = redis::cmd("DEL")
        .arg("testkit:attached")
        .query(&mut m)
        .unwrap();
    let acked: i64 = redis::cmd("WAIT")
        .arg(replicas)
        .arg(20_000)
        .query(&mut m)
        .unwrap();
    assert!(
        acked >= replicas,
        "the replicas did not acknowledge in 20 s"
    );
    replica
}

/// Waits until `master`'s replicas have acknowledged everything it has sent
/// (`WAIT numreplicas timeout`).
pub fn sync_replicas(master: &mut redis::Connection, replicas: usize) {
    let acked: usize = redis::cmd("WAIT")
        .arg(replicas)
        .arg(10_000)
        .query(master)
        .expect("WAIT");
    assert_eq!(acked, replicas, "replicas did not acknowledge in 10 s");
}

/// Polls `check` every few ms until it holds, failing the test after `limit`.
pub fn poll_until(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        thread::sleep(Duration::from_millis(5));
    }
}

/// Whether something is listening on the port (for checks that a server went away).
pub fn port_open(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// `PTTL key`: ms left, -1 without an expiry, -2 for a missing key.
pub fn pttl(con: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(con).expect("PTTL")
}

/// Whether `key` exists (`EXISTS`, a lookup: a key past its expiry does not).
pub fn exists(con: &mut redis::Connection, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query::<i64>(con)
        .expect("EXISTS")
        == 1
}
