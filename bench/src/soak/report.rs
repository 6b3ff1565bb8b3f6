//! The soak's report: a table of each target with both sides' figures and a verdict,
//! the samples as CSV, and (with gnuplot) a plot of memory and pauses over time.

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::{Config, MEMORY_MARGIN, PAUSE_MARGIN_MS, SideRun};
use crate::chart;

/// One line of the report.
struct Row {
    measure: String,
    locks: String,
    strings: String,
    target: String,
    /// `None`: not judged (a smoke run's memory).
    met: Option<bool>,
}

fn mb(bytes: f64) -> String {
    format!("{:.1} MB", bytes / 1e6)
}

fn rows(cfg: &Config, locks: &SideRun, strings: &SideRun) -> Vec<Row> {
    let memory = |run: &SideRun| {
        let peak = run.peak();
        format!(
            "{} -> peak {} -> {} ({})",
            mb(run.start.used),
            mb(peak.used),
            mb(run.end.used),
            run.memory_back_after_s
                .map_or("not back".into(), |s| format!("back after {s:.1} s"))
        )
    };
    let rss = |run: &SideRun| {
        format!(
            "{} -> peak {} -> {}",
            mb(run.start.rss),
            mb(run.peak().rss),
            mb(run.end.rss)
        )
    };
    let back = |run: &SideRun| run.memory_back_after_s.is_some();
    let judged = |met: bool| (!cfg.smoke).then_some(met);
    let a = locks.answers;
    vec![
        Row {
            measure: "the server stays up".into(),
            locks: "yes".into(),
            strings: "yes".into(),
            target: "no crash".into(),
            met: Some(true),
        },
        Row {
            measure: "keys counted as expired".into(),
            locks: format!("{} (lock_expired)", locks.expired),
            strings: format!("{} (expired_keys)", strings.expired),
            target: format!("every one of the {} locks", cfg.locks),
            met: Some(locks.expired >= cfg.locks as i64),
        },
        Row {
            measure: "all keys gone after the last deadline".into(),
            locks: format!("{:.2} s", locks.reaped_after_s),
            strings: format!("{:.2} s", strings.reaped_after_s),
            target: "-".into(),
            met: None,
        },
        Row {
            measure: format!("waiters answered ({} keys)", cfg.waiter_keys),
            locks: format!(
                "{} granted, {} gave up (nil), {} wrong, of {}",
                a.granted, a.gave_up, a.wrong, locks.waiters
            ),
            strings: "-".into(),
            target: "every waiter, as it asked".into(),
            met: Some(a.wrong == 0 && a.granted + a.gave_up == locks.waiters),
        },
        Row {
            measure: "used_memory: start -> peak -> end".into(),
            locks: memory(locks),
            strings: memory(strings),
            target: format!("end within {:.0}% of start", MEMORY_MARGIN * 100.0),
            met: judged(back(locks)),
        },
        Row {
            measure: "of used_memory, the module's own (lock_allocated_bytes): start -> end".into(),
            locks: format!(
                "{:.1} KB -> {:.1} KB",
                locks.start.module / 1e3,
                locks.end.module / 1e3
            ),
            strings: "-".into(),
            target: "-".into(),
            met: None,
        },
        Row {
            measure: "RSS: start -> peak -> end (after MEMORY PURGE)".into(),
            locks: rss(locks),
            strings: rss(strings),
            target: format!("end within {:.0}% of start", MEMORY_MARGIN * 100.0),
            met: judged(back(locks)),
        },
        Row {
            measure: "longest expiry pause (latency monitor, expire-cycle)".into(),
            locks: format!("{:.0} ms", locks.expire_cycle_max_ms),
            strings: format!("{:.0} ms", strings.expire_cycle_max_ms),
            target: format!("at most {PAUSE_MARGIN_MS:.0} ms over the strings'"),
            met: judged(locks.expire_cycle_max_ms <= strings.expire_cycle_max_ms + PAUSE_MARGIN_MS),
        },
        Row {
            measure: "longest PING round trip while the keys expire (a probe every ms)".into(),
            locks: format!("{:.1} ms", locks.probe_max_ms),
            strings: format!("{:.1} ms", strings.probe_max_ms),
            target: format!("at most {PAUSE_MARGIN_MS:.0} ms over the strings'"),
            met: judged(locks.probe_max_ms <= strings.probe_max_ms + PAUSE_MARGIN_MS),
        },
    ]
}

/// Whether every judged target is met.
pub fn passed(cfg: &Config, locks: &SideRun, strings: &SideRun) -> bool {
    rows(cfg, locks, strings)
        .iter()
        .all(|r| r.met != Some(false))
}

/// The report as markdown.
pub fn markdown(cfg: &Config, server: &str, locks: &SideRun, strings: &SideRun) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Soak: {} locks over {} s, {} waiters on {} keys\n\n\
         Server: {server}. Locks on the module, side by side with the same number of plain \
         string keys (`SET PX`, same 32-byte values and deadlines) on a bare server of the \
         same binary. Memory is read after `MEMORY PURGE`.\n",
        cfg.locks,
        cfg.window.as_secs(),
        cfg.waiter_keys * cfg.waiters_per_key,
        cfg.waiter_keys
    );
    let _ = writeln!(out, "| measure | locks | strings | target | verdict |");
    let _ = writeln!(out, "|---|---|---|---|---|");
    for row in rows(cfg, locks, strings) {
        let verdict = match row.met {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "-",
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {verdict} |",
            row.measure, row.locks, row.strings, row.target
        );
    }
    out
}

/// Every sample of both sides, one line each.
pub fn csv(runs: &[&SideRun]) -> String {
    let mut out = String::from("side,t_s,used_memory,rss,keys,waiters,probe_max_ms\n");
    for run in runs {
        for s in &run.samples {
            let _ = writeln!(
                out,
                "{},{:.3},{},{},{},{},{:.3}",
                run.kind.label(),
                s.t,
                s.used_memory,
                s.rss,
                s.keys,
                s.waiters,
                s.probe_max_ms
            );
        }
    }
    out
}

/// `soak.png`: memory and the longest round trip over time, both sides; `None` without
/// gnuplot.
pub fn plot(dir: &Path, runs: &[&SideRun]) -> io::Result<Option<PathBuf>> {
    if !chart::gnuplot_installed() {
        return Ok(None);
    }
    let mut series = Vec::new();
    for run in runs {
        let path = dir.join(format!("{}.dat", run.kind.label()));
        let mut data = String::new();
        for s in &run.samples {
            let _ = writeln!(
                data,
                "{:.3} {:.3} {:.3} {:.3}",
                s.t,
                s.used_memory / 1e6,
                s.rss / 1e6,
                s.probe_max_ms
            );
        }
        fs::write(&path, data)?;
        series.push((run.kind.label(), path));
    }
    let plots = |columns: &[(usize, &str)]| {
        series
            .iter()
            .flat_map(|(label, path)| {
                columns.iter().map(move |(col, what)| {
                    format!(
                        "'{}' using 1:{col} with lines lw 2 title '{label} {what}'",
                        path.display()
                    )
                })
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let png = dir.join("soak.png");
    let script = format!(
        "set terminal pngcairo size 1200,800 font ',10'\nset termoption noenhanced\n\
         set output '{}'\n\
         set multiplot layout 2,1 title 'Soak: memory and pauses over time'\nset grid\n\
         set xlabel 'seconds'\nset ylabel 'MB'\nplot {}\n\
         set ylabel 'longest PING round trip per 250 ms (ms)'\nplot {}\nunset multiplot\n",
        png.display(),
        plots(&[(2, "used_memory"), (3, "RSS")]),
        plots(&[(4, "")]),
    );
    chart::gnuplot(&dir.join("soak.gp"), &script)?;
    Ok(Some(png))
}
