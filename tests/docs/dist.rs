//! `make dist` and the README's install steps, as an operator runs them: the tarball is
//! made, checked, unpacked in an empty directory and loaded into the server under test
//! with nothing but its `loadmodule` line, with no cargo on the `PATH`; a lock is then
//! taken and released. And the oldest glibc the README names is the one the module's
//! own symbol versions need.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{free_port, fresh_dir, server_binary};
use redis_lock_testkit::pages::root;
use redis_lock_testkit::poll_until;

fn readme() -> String {
    fs::read_to_string(root().join("README.md")).expect("README.md")
}

/// The release's name, as `scripts/dist.sh` makes it: from the crate's version and this
/// machine's architecture.
fn release_name() -> String {
    let arch = Command::new("uname").arg("-m").output().expect("uname");
    format!(
        "redis-lock-{}-{}-linux-gnu",
        env!("CARGO_PKG_VERSION"),
        String::from_utf8_lossy(&arch.stdout).trim()
    )
}

/// The lines of the README's `sh` block that installs a release, after `make dist`.
fn install_lines() -> Vec<String> {
    let text = readme();
    let block = text
        .split("```sh\n")
        .skip(1)
        .map(|rest| &rest[..rest.find("```").expect("a closed block")])
        .find(|block| block.contains("make dist"))
        .expect("the README's `make dist` block");
    block
        .lines()
        .map(|line| line.split("  #").next().unwrap_or(line).trim().to_string())
        .filter(|line| !line.is_empty() && !line.starts_with('#') && !line.starts_with("make "))
        .collect()
}

/// Runs `make dist DIST=<dir>/dist` and then the README's install lines in `dir` (its
/// `/opt` being `dir/opt`): the unpacked release's folder.
fn make_and_install(dir: &Path) -> PathBuf {
    let dist = dir.join("dist");
    let made = Command::new("make")
        .arg("dist")
        .arg(format!("DIST={}", dist.display()))
        .current_dir(root())
        .output()
        .expect("make dist");
    assert!(
        made.status.success(),
        "make dist: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    let name = release_name();
    assert!(
        dist.join(format!("{name}.tar.gz")).is_file(),
        "{name}.tar.gz"
    );
    let opt = dir.join("opt");
    fs::create_dir_all(&opt).unwrap();
    let script = install_lines()
        .iter()
        .map(|line| line.replace("/opt", &opt.display().to_string()))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(script.contains(&name), "the README names {name}: {script}");
    let installed = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(&dist)
        .output()
        .expect("bash");
    assert!(
        installed.status.success(),
        "the README's install lines:\n{script}\n{}{}",
        String::from_utf8_lossy(&installed.stdout),
        String::from_utf8_lossy(&installed.stderr)
    );
    opt.join(name)
}

#[test]
fn the_release_tarball_installs_and_loads_with_nothing_but_loadmodule() {
    let dir = fresh_dir("dist");
    let release = make_and_install(&dir);
    let mut files: Vec<String> = fs::read_dir(&release)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "LICENSE",
            "README.md",
            "SHA256SUMS",
            "libredis_lock.so",
            "libredis_lock.so.debug",
            "redis-lock",
            "redis-lock.conf"
        ]
    );
    // The command line runs from the unpacked folder (docs/cli.md).
    let cli = Command::new(release.join("redis-lock"))
        .arg("--version")
        .output()
        .expect("the release's redis-lock");
    assert!(cli.status.success());
    assert!(String::from_utf8_lossy(&cli.stdout).starts_with("redis-lock "));
    // Stripped, with its symbols apart and linked.
    let sections = Command::new("objdump")
        .args(["-h"])
        .arg(release.join("libredis_lock.so"))
        .output()
        .expect("objdump");
    let sections = String::from_utf8_lossy(&sections.stdout);
    assert!(!sections.contains(".debug_info"), "the module is stripped");
    assert!(
        sections.contains(".gnu_debuglink"),
        "it names its debug file"
    );

    // The server under test, with the snippet's path put where the tarball went, and a
    // PATH on which there is no cargo (nor anything of the build).
    let snippet = fs::read_to_string(release.join("redis-lock.conf")).unwrap();
    let name = release_name();
    let conf = snippet.replace(&format!("/opt/{name}"), &release.display().to_string());
    assert_ne!(
        conf, snippet,
        "the snippet names the unpacked folder: {snippet}"
    );
    let data = dir.join("data");
    fs::create_dir_all(&data).unwrap();
    let port = free_port();
    let conf_path = dir.join("server.conf");
    fs::write(
        &conf_path,
        format!(
            "{conf}\nport {port}\nbind 127.0.0.1\nsave \"\"\ndir {}\nlogfile {}/server.log\n",
            data.display(),
            data.display()
        ),
    )
    .unwrap();
    let binary = which(&server_binary());
    let mut server = Command::new(&binary)
        .arg(&conf_path)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the server");
    let guard = KillOnDrop(&mut server);
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let mut con = None;
    poll_until(Duration::from_secs(10), "the server to answer", || {
        con = client.get_connection().ok();
        con.is_some()
    });
    let mut con = con.unwrap();
    let (token, fence): (String, i64) = redis::cmd("LOCK.ACQUIRE")
        .arg("orders:1")
        .arg(30_000)
        .query(&mut con)
        .unwrap_or_else(|err| {
            panic!(
                "{err}: {}",
                fs::read_to_string(data.join("server.log")).unwrap_or_default()
            )
        });
    assert!(fence > 0);
    let released: i64 = redis::cmd("LOCK.RELEASE")
        .arg("orders:1")
        .arg(&token)
        .query(&mut con)
        .unwrap();
    assert_eq!(released, 1);
    drop(guard);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn the_readme_names_the_oldest_glibc_the_module_needs() {
    let module = crate::common::module_path();
    let symbols = Command::new("objdump")
        .arg("-T")
        .arg(&module)
        .output()
        .expect("objdump (binutils)");
    let symbols = String::from_utf8_lossy(&symbols.stdout);
    let newest = symbols
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .filter_map(|word| word.strip_prefix("GLIBC_"))
        .filter_map(|version| {
            let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
            Some((parts.next()??, parts.next().flatten().unwrap_or(0)))
        })
        .max()
        .expect("the module links against glibc");
    let named = format!("glibc {}.{} or later", newest.0, newest.1);
    assert!(
        readme().contains(&named),
        "the README should say the module needs {named}"
    );
}

/// `name` as a path: itself if it has a slash, else found on `PATH`.
fn which(name: &str) -> PathBuf {
    if name.contains('/') {
        return PathBuf::from(name);
    }
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .map(|dir| Path::new(dir).join(name))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| panic!("{name} is not on PATH"))
}

/// Kills and reaps the server when the test ends, passed or failed.
struct KillOnDrop<'a>(&'a mut std::process::Child);

impl Drop for KillOnDrop<'_> {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
