//! `status` for people (an aligned table) and for scripts (JSON), and the leader line.

use std::fmt::Write;
use std::time::Duration;

use crate::duration::show;
use crate::status::{Holder, LockStatus};

/// The table's columns, in order (docs/cli.md shows them).
pub const COLUMNS: [&str; 10] = [
    "KEY", "MODE", "LIMIT", "WAITERS", "FENCE", "TTL", "HELD", "CLIENT", "SESSION", "VALUE",
];

fn value_text(value: &Option<Vec<u8>>) -> String {
    match value {
        Some(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        None => "-".into(),
    }
}

fn session_text(holder: &Holder) -> String {
    match (holder.session_ms, holder.connected) {
        (ms, _) if ms < 0 => "-".into(),
        (ms, 1) => format!("{} open", show(Duration::from_millis(ms as u64))),
        (ms, _) => format!("{} grace", show(Duration::from_millis(ms as u64))),
    }
}

fn ttl_text(ms: i64) -> String {
    if ms < 0 {
        "none".into()
    } else {
        show(Duration::from_millis(ms as u64))
    }
}

/// The rows of one lock: one per holder, one saying `free` for a lock nobody holds.
fn rows(status: &LockStatus) -> Vec<Vec<String>> {
    let mode = status.mode.clone().unwrap_or_else(|| "free".into());
    let limit = if status.limit < 0 {
        "-".into()
    } else {
        status.limit.to_string()
    };
    let waiters = status.waiters.to_string();
    if status.holders.is_empty() {
        let mut row = vec![status.key.clone(), mode, limit, waiters];
        row.extend(std::iter::repeat_n("-".to_string(), 6));
        return vec![row];
    }
    status
        .holders
        .iter()
        .map(|holder| {
            vec![
                status.key.clone(),
                mode.clone(),
                limit.clone(),
                waiters.clone(),
                holder.fence.to_string(),
                ttl_text(holder.ttl_ms),
                show(holder.held_for()),
                if holder.client > 0 {
                    holder.client.to_string()
                } else {
                    "-".into()
                },
                session_text(holder),
                value_text(&holder.value),
            ]
        })
        .collect()
}

/// The aligned table of `statuses` (with a WAITED column for the contended locks).
pub fn table(statuses: &[LockStatus]) -> String {
    let contended = statuses.iter().any(|s| s.waited_ms.is_some());
    let mut header: Vec<String> = COLUMNS.iter().map(|c| c.to_string()).collect();
    if contended {
        header.insert(4, "WAITED".into());
    }
    let mut all = vec![header];
    for status in statuses {
        for mut row in rows(status) {
            if contended {
                let waited = status.waited_ms.map_or("-".into(), |ms| {
                    show(Duration::from_millis(ms.max(0) as u64))
                });
                row.insert(4, waited);
            }
            all.push(row);
        }
    }
    let widths: Vec<usize> = (0..all[0].len())
        .map(|i| {
            all.iter()
                .map(|row| row[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in &all {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ", width = widths[i]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `text` as a JSON string.
pub fn json_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_opt_bytes(value: &Option<Vec<u8>>) -> String {
    match value {
        Some(bytes) => json_string(&String::from_utf8_lossy(bytes)),
        None => "null".into(),
    }
}

fn json_holder(holder: &Holder) -> String {
    format!(
        "{{\"fence\":{},\"ttl_ms\":{},\"acquired_unix_ms\":{},\"client\":{},\"session_ms\":{},\"connected\":{},\"value\":{}}}",
        holder.fence,
        holder.ttl_ms,
        holder.acquired_ms,
        holder.client,
        holder.session_ms,
        holder.connected,
        json_opt_bytes(&holder.value)
    )
}

/// `statuses` as one JSON array (a line).
pub fn json(statuses: &[LockStatus]) -> String {
    let items: Vec<String> = statuses
        .iter()
        .map(|status| {
            let holders: Vec<String> = status.holders.iter().map(json_holder).collect();
            let mut item = format!(
                "{{\"key\":{},\"mode\":{},\"limit\":{},\"waiters\":{},\"holders\":[{}]",
                json_string(&status.key),
                status.mode.as_deref().map_or("null".into(), json_string),
                if status.limit < 0 {
                    "null".into()
                } else {
                    status.limit.to_string()
                },
                status.waiters,
                holders.join(",")
            );
            if let Some(waited) = status.waited_ms {
                let _ = write!(item, ",\"waited_ms\":{waited}");
            }
            item.push('}');
            item
        })
        .collect();
    format!("[{}]\n", items.join(","))
}

/// The leader as `leader` prints it: `VALUE<TAB>FENCE`, or `none`; with `json` an object.
pub fn leader_line(leader: Option<&redis_lock_client::Leader>, json: bool) -> String {
    match (leader, json) {
        (Some(leader), false) => format!("{}\t{}", value_text(&leader.value), leader.term),
        (None, false) => "none".into(),
        (Some(leader), true) => format!(
            "{{\"fence\":{},\"value\":{}}}",
            leader.term,
            json_opt_bytes(&leader.value)
        ),
        (None, true) => "{\"fence\":null,\"value\":null}".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held() -> LockStatus {
        LockStatus {
            key: "jobs:nightly".into(),
            mode: Some("exclusive".into()),
            limit: -1,
            waiters: 2,
            holders: vec![Holder {
                fence: 42,
                ttl_ms: 29_000,
                acquired_ms: 0,
                client: 7,
                session_ms: 5000,
                connected: 1,
                value: Some(b"host \"7\"".to_vec()),
            }],
            waited_ms: None,
        }
    }

    #[test]
    fn the_table_is_aligned_and_names_no_token() {
        let free = LockStatus {
            key: "k".into(),
            mode: None,
            limit: -1,
            waiters: 0,
            holders: vec![],
            waited_ms: None,
        };
        let text = table(&[held(), free]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("KEY           MODE       LIMIT  WAITERS  FENCE"));
        assert!(lines[1].starts_with("jobs:nightly  exclusive  -      2        42"));
        assert!(lines[1].contains("5.0s open"));
        assert!(lines[2].starts_with("k             free"));
        assert_eq!(lines[0].find("FENCE"), lines[1].find("42"));
    }

    #[test]
    fn json_escapes_and_uses_null() {
        let text = json(&[held()]);
        assert!(text.starts_with(
            "[{\"key\":\"jobs:nightly\",\"mode\":\"exclusive\",\"limit\":null,\"waiters\":2"
        ));
        assert!(text.contains("\"value\":\"host \\\"7\\\"\""));
        assert_eq!(json_string("a\u{1}\n"), "\"a\\u0001\\n\"");
    }
}
