//! A PNG of the contention scenario (critical sections per second and handoff p99
//! against the number of clients), drawn by gnuplot when it is installed
//! (`make bench` installs it); without gnuplot the chart is skipped.

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::scenarios::contention::{Point, Waiting};

/// Whether gnuplot is installed (`make bench` and `make soak` install it).
pub fn gnuplot_installed() -> bool {
    Command::new("gnuplot")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Draws `contention.png` in `dir`; `None` when gnuplot is missing or there is no data.
pub fn draw(points: &[Point], dir: &Path) -> io::Result<Option<PathBuf>> {
    if points.is_empty() || !gnuplot_installed() {
        return Ok(None);
    }
    let mut variants: Vec<Waiting> = Vec::new();
    let mut clients: Vec<usize> = Vec::new();
    for p in points {
        if !variants.contains(&p.waiting) {
            variants.push(p.waiting);
        }
        if !clients.contains(&p.clients) {
            clients.push(p.clients);
        }
    }
    clients.sort_unstable();
    // One row per client count: sections/s of each variant, then p99 of each.
    let mut data = String::new();
    for n in &clients {
        let _ = write!(data, "{n}");
        for field in [0, 1] {
            for v in &variants {
                let value = points
                    .iter()
                    .find(|p| p.clients == *n && p.waiting == *v)
                    .map_or(f64::NAN, |p| {
                        if field == 0 {
                            p.median(|s| s.sections_per_s)
                        } else {
                            p.median(|s| s.handoff_p99_us)
                        }
                    });
                let _ = write!(
                    data,
                    " {}",
                    if value.is_finite() {
                        value.to_string()
                    } else {
                        "NaN".into()
                    }
                );
            }
        }
        data.push('\n');
    }
    fs::create_dir_all(dir)?;
    let data_path = dir.join("contention.dat");
    let png = dir.join("contention.png");
    fs::write(&data_path, data)?;
    let k = variants.len();
    let series = |offset: usize| {
        variants
            .iter()
            .enumerate()
            .map(|(i, v)| {
                format!(
                    "'{}' using 1:{} with linespoints lw 2 title '{}'",
                    data_path.display(),
                    2 + offset + i,
                    v.label()
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let script = format!(
        "set terminal pngcairo size 1200,480 font ',10'\n\
         set output '{png}'\n\
         set multiplot layout 1,2 title 'One contended key: module WAIT vs SET NX polling'\n\
         set logscale x 2\nset logscale y\nset grid\nset key bottom left\n\
         set xlabel 'clients'\n\
         set ylabel 'critical sections per second'\n\
         plot {}\n\
         set ylabel 'handoff p99 (us)'\nset key top left\n\
         plot {}\n\
         unset multiplot\n",
        series(0),
        series(k),
        png = png.display()
    );
    gnuplot(&dir.join("contention.gp"), &script)?;
    Ok(Some(png))
}

/// Writes `script` to `path` and runs gnuplot on it.
pub fn gnuplot(path: &Path, script: &str) -> io::Result<()> {
    fs::write(path, script)?;
    let out = Command::new("gnuplot").arg(path).output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "gnuplot failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(())
}
