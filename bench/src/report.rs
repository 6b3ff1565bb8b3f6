//! The run's output: a Markdown table of ratios (printed and written to `results.md`)
//! and every raw figure (`results.json`).

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::config::Config;
use crate::cpu::CpuUse;
use crate::json::Json;
use crate::results::{Metric, Verdict};
use crate::scenarios::contention::{Point, Sample};
use crate::sides::Side;

/// Everything a run measured.
pub struct Report {
    pub config: Config,
    pub machine: String,
    pub metrics: Vec<Metric>,
    pub contention: Vec<Point>,
    pub notes: Vec<String>,
    pub elapsed: Duration,
}

/// A figure for a table: thousands separated, fewer decimals as it grows.
pub fn fmt(v: f64) -> String {
    if v.is_nan() {
        return "n/a".into();
    }
    if v.is_infinite() {
        return "inf".into();
    }
    if v.abs() >= 1000.0 {
        let digits = format!("{:.0}", v.abs());
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        return if v < 0.0 { format!("-{out}") } else { out };
    }
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn fmt_cpu(cpu: Option<CpuUse>) -> String {
    cpu.map_or_else(
        || "-".into(),
        |c| format!("{:.2}/{:.2}", c.generator, c.server),
    )
}

/// A one-line description of the machine: cores, CPU model, server version.
pub fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let server = Command::new(crate::server::binary())
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    format!("{cores} cores ({model}); {server}")
}

impl Report {
    /// Metrics whose target was missed.
    pub fn missed(&self) -> Vec<&Metric> {
        self.metrics
            .iter()
            .filter(|m| m.verdict(self.config.smoke) == Verdict::Missed)
            .collect()
    }

    /// The tables, in Markdown.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let kind = if self.config.smoke {
            "smoke run (tiny sizes, targets not checked)"
        } else {
            "full run"
        };
        let _ = writeln!(out, "redis-lock benchmark, {kind}: {}", self.machine);
        let _ = writeln!(
            out,
            "Medians of {} rounds ({} for contention, memory and expiry), sides alternating; \
             ratio = module / recipe; CPU = cores used by load generator / server.\n",
            self.config.rounds, self.config.slow_rounds
        );
        out.push_str("| scenario | measure | module | recipe | recipe value | ratio | target | verdict | CPU module | CPU recipe |\n");
        out.push_str("|---|---|---:|---|---:|---:|---|---|---:|---:|\n");
        for m in &self.metrics {
            let verdict = match m.verdict(self.config.smoke) {
                Verdict::Met => "met",
                Verdict::Missed => "**MISSED**",
                Verdict::NoTarget => "",
                Verdict::NotChecked => "not checked",
            };
            let target = m.target.map_or(String::new(), |t| t.describe(&m.unit));
            let _ = writeln!(
                out,
                "| {} | {} ({}) | {} | {} | {} | {} | {} | {} | {} | {} |",
                m.scenario,
                m.what,
                m.unit,
                fmt(m.module_median()),
                m.recipe_label,
                fmt(m.recipe_median()),
                if m.ratio().is_nan() {
                    "n/a".into()
                } else {
                    format!("{:.2}x", m.ratio())
                },
                target,
                verdict,
                fmt_cpu(m.cpu_median(Side::Module)),
                fmt_cpu(m.cpu_median(Side::Recipe)),
            );
        }
        if !self.contention.is_empty() {
            let _ = writeln!(
                out,
                "\nContention detail: one key, critical section {} us (a sleep), medians of {} rounds.\n",
                self.config.critical_section.as_micros(),
                self.config.slow_rounds
            );
            out.push_str("| clients | waiting | crit. sections/s | handoff p50 us | p99 us | max us | cmds/section | spread | starved | held us | CPU gen/server |\n");
            out.push_str("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
            for p in &self.contention {
                let cpu = CpuUse {
                    generator: p.median(|s| s.cpu.generator),
                    server: p.median(|s| s.cpu.server),
                };
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    p.clients,
                    p.waiting.label(),
                    fmt(p.median(|s| s.sections_per_s)),
                    fmt(p.median(|s| s.handoff_p50_us)),
                    fmt(p.median(|s| s.handoff_p99_us)),
                    fmt(p.median(|s| s.handoff_max_us)),
                    fmt(p.median(|s| s.commands_per_section)),
                    fmt(p.median(|s| s.spread)),
                    fmt(p.median(|s| s.starved as f64)),
                    fmt(p.median(|s| s.hold_us)),
                    fmt_cpu(Some(cpu)),
                );
            }
        }
        if !self.notes.is_empty() {
            out.push('\n');
            for note in &self.notes {
                let _ = writeln!(out, "- {note}");
            }
        }
        let _ = writeln!(out, "\nTotal time: {:.0} s.", self.elapsed.as_secs_f64());
        out
    }

    /// Every raw figure, per round.
    pub fn json(&self) -> Json {
        let cpu = |c: &CpuUse| {
            Json::obj([
                ("generator", Json::Num(c.generator)),
                ("server", Json::Num(c.server)),
            ])
        };
        let metrics = self.metrics.iter().map(|m| {
            Json::obj([
                ("scenario", Json::str(&m.scenario)),
                ("measure", Json::str(&m.what)),
                ("unit", Json::str(&m.unit)),
                ("recipe_label", Json::str(&m.recipe_label)),
                ("module", Json::nums(&m.module)),
                ("recipe", Json::nums(&m.recipe)),
                ("module_median", Json::Num(m.module_median())),
                ("recipe_median", Json::Num(m.recipe_median())),
                ("ratio", Json::Num(m.ratio())),
                (
                    "target",
                    m.target
                        .map_or(Json::Null, |t| Json::str(t.describe(&m.unit))),
                ),
                (
                    "verdict",
                    Json::str(format!("{:?}", m.verdict(self.config.smoke))),
                ),
                (
                    "module_cpu",
                    Json::Arr(m.module_cpu.iter().map(cpu).collect()),
                ),
                (
                    "recipe_cpu",
                    Json::Arr(m.recipe_cpu.iter().map(cpu).collect()),
                ),
            ])
        });
        let sample = |s: &Sample| {
            Json::obj([
                ("sections_per_s", Json::Num(s.sections_per_s)),
                ("handoff_p50_us", Json::Num(s.handoff_p50_us)),
                ("handoff_p99_us", Json::Num(s.handoff_p99_us)),
                ("handoff_max_us", Json::Num(s.handoff_max_us)),
                ("commands_per_section", Json::Num(s.commands_per_section)),
                ("spread", Json::Num(s.spread)),
                ("starved", Json::Num(s.starved as f64)),
                ("hold_us", Json::Num(s.hold_us)),
                ("overlaps", Json::Num(s.overlaps as f64)),
                ("wait_timeouts", Json::Num(s.wait_timeouts as f64)),
                ("cpu", cpu(&s.cpu)),
            ])
        };
        let contention = self.contention.iter().map(|p| {
            Json::obj([
                ("clients", Json::Num(p.clients as f64)),
                ("waiting", Json::str(p.waiting.label())),
                ("rounds", Json::Arr(p.samples.iter().map(sample).collect())),
            ])
        });
        let c = &self.config;
        Json::obj([
            ("machine", Json::str(&self.machine)),
            ("smoke", Json::Bool(c.smoke)),
            (
                "config",
                Json::obj([
                    ("rounds", Json::Num(c.rounds as f64)),
                    ("slow_rounds", Json::Num(c.slow_rounds as f64)),
                    ("ops", Json::Num(c.ops as f64)),
                    ("pipelined_cycles", Json::Num(c.pipelined_cycles as f64)),
                    ("pipeline_depth", Json::Num(c.pipeline_depth as f64)),
                    ("callgrind_ops", Json::Num(c.callgrind_ops as f64)),
                    (
                        "contention_seconds",
                        Json::Num(c.contention_time.as_secs_f64()),
                    ),
                    (
                        "critical_section_us",
                        Json::Num(c.critical_section.as_micros() as f64),
                    ),
                    ("locks", Json::Num(c.locks as f64)),
                    ("waiters", Json::Num(c.waiters as f64)),
                    (
                        "durability_acquires",
                        Json::Num(c.durability_acquires as f64),
                    ),
                ]),
            ),
            ("metrics", Json::Arr(metrics.collect())),
            ("contention", Json::Arr(contention.collect())),
            (
                "notes",
                Json::Arr(self.notes.iter().map(Json::str).collect()),
            ),
            ("elapsed_seconds", Json::Num(self.elapsed.as_secs_f64())),
        ])
    }

    /// Writes `results.md` and `results.json` into the output directory.
    pub fn write(&self) -> io::Result<Vec<PathBuf>> {
        fs::create_dir_all(&self.config.out_dir)?;
        let md = self.config.out_dir.join("results.md");
        let json = self.config.out_dir.join("results.json");
        fs::write(&md, self.markdown())?;
        fs::write(&json, format!("{}\n", self.json()))?;
        Ok(vec![md, json])
    }
}

#[cfg(test)]
mod tests {
    use super::fmt;

    #[test]
    fn figures_format_for_reading() {
        assert_eq!(fmt(1234567.4), "1,234,567");
        assert_eq!(fmt(123.4), "123");
        assert_eq!(fmt(12.34), "12.3");
        assert_eq!(fmt(1.234), "1.23");
        assert_eq!(fmt(f64::NAN), "n/a");
        assert_eq!(fmt(f64::INFINITY), "inf");
    }
}
