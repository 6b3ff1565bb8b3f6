//! docs/cli.md as a user reads it: its crontab line and its systemd unit run against a
//! real server (the page's port and programs replaced by the test's), and its status
//! table names the columns the binary prints.

use std::path::Path;
use std::process::Command;

use redis_lock_testkit::pages::{Block, blocks};

use crate::*;

fn page_blocks(lang: &str) -> Vec<Block> {
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/cli.md");
    let text = std::fs::read_to_string(&page).expect("docs/cli.md");
    blocks(&text, &page)
        .into_iter()
        .filter(|block| block.lang == lang)
        .collect()
}

fn block_text(block: &Block) -> Vec<String> {
    block.lines.iter().map(|(_, line)| line.clone()).collect()
}

#[test]
fn the_crontab_line_runs_once_and_exits_75_on_a_busy_lock() {
    let crontab = page_blocks("crontab");
    assert_eq!(crontab.len(), 1, "one crontab block");
    let line = block_text(&crontab[0]).join("\n");
    let fields: Vec<&str> = line.split_whitespace().collect();
    // Five schedule fields, then the shell line cron runs.
    let command = fields[5..].join(" ");
    let server = TestServer::start();
    let scratch = Scratch::new("crontab");
    let ran = scratch.path("ran");
    let command = command
        .replacen("redis-lock", bin(), 1)
        .replace("6379", &server.port.to_string())
        .replace(
            "/usr/local/bin/report",
            &format!("touch '{}'", ran.display()),
        );
    assert!(
        command.contains("--no-wait"),
        "the page's line waits for nothing: {command}"
    );
    let status = Command::new("sh")
        .args(["-c", &command])
        .status()
        .expect("sh");
    assert_eq!(status.code(), Some(0));
    assert!(ran.exists(), "the report ran");
    let key = fields
        .iter()
        .skip_while(|w| **w != "--no-wait")
        .nth(1)
        .expect("the key");
    let mut con = server.connection();
    let _: (String, u64) = redis::cmd("LOCK.ACQUIRE")
        .arg(*key)
        .arg(60000)
        .query(&mut con)
        .expect("acquire");
    std::fs::remove_file(&ran).expect("rm");
    let status = Command::new("sh")
        .args(["-c", &command])
        .status()
        .expect("sh");
    assert_eq!(status.code(), Some(75), "another server's run holds it");
    assert!(!ran.exists(), "not run twice");
}

#[test]
fn the_systemd_units_scheduler_leads_and_stops_as_systemd_stops_it() {
    let ini = page_blocks("ini");
    assert_eq!(ini.len(), 1, "one unit");
    let unit = block_text(&ini[0]);
    let value = |name: &str| {
        unit.iter()
            .find_map(|line| line.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("the unit has no {name}="))
            .to_owned()
    };
    assert_eq!(
        value("KillMode"),
        "mixed",
        "SIGTERM to the runner only, which passes it on"
    );
    let password = value("Environment")
        .strip_prefix("REDISCLI_AUTH=")
        .expect("the password in the environment")
        .to_owned();
    let server = with_password(&password);
    let exec = value("ExecStart")
        .replace("/usr/local/bin/redis-lock", bin())
        .replace("6379", &server.port.to_string())
        .replace("%H", "host-a")
        .replace("/usr/local/bin/scheduler", "sleep 600");
    let words: Vec<&str> = exec.split_whitespace().collect();
    let mut runner = Runner {
        child: Command::new(words[0])
            .args(&words[1..])
            .env("REDISCLI_AUTH", &password)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("ExecStart"),
        name: "the unit".into(),
    };
    let key = words
        .iter()
        .skip_while(|w| **w != "elect")
        .nth(1)
        .expect("the key")
        .to_string();
    let leader = || {
        let out = Command::new(bin())
            .args(["-p", &server.port.to_string(), "leader", &key])
            .env("REDISCLI_AUTH", &password)
            .output()
            .expect("leader");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    poll_until(DEADLINE, "the unit leads", || {
        leader().starts_with("host-a\t")
    });
    // systemctl stop, with KillMode=mixed: SIGTERM to the main process.
    send_signal(runner.pid(), "TERM");
    let (status, stderr) = runner.finish(DEADLINE);
    assert_eq!(
        status.code(),
        Some(143),
        "the scheduler died of the SIGTERM: {stderr}"
    );
    assert_eq!(leader(), "none\n", "resigned");
}

#[test]
fn the_pages_status_table_has_the_columns_the_binary_prints() {
    let server = TestServer::start();
    let out = cli(&server, &["status", "any"]).output().expect("status");
    let printed = String::from_utf8_lossy(&out.stdout);
    let header: Vec<&str> = printed
        .lines()
        .next()
        .expect("a header")
        .split_whitespace()
        .collect();
    let texts = page_blocks("text");
    let table = texts
        .iter()
        .map(block_text)
        .find(|lines| lines.first().is_some_and(|l| l.starts_with("KEY")))
        .expect("the page shows a status table");
    assert_eq!(table[0].split_whitespace().collect::<Vec<_>>(), header);
    let line = texts
        .iter()
        .map(block_text)
        .find(|lines| {
            lines
                .first()
                .is_some_and(|l| l.starts_with("redis-lock: waiting"))
        })
        .expect("the page shows the waiting line");
    for part in ["held for", "by client", "fence", "waiting"] {
        assert!(
            line[0].contains(part),
            "the page's waiting line says {part}"
        );
    }
}
