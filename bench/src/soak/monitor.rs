//! What the soak watches while it runs: the server's memory, keys and waiters sampled
//! every 250 ms (and printed every 5 s, so a long run shows its progress), and a probe
//! that sends `PING` every millisecond: the longest round trip in each sample's interval
//! is the longest pause the server made its clients wait.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::info;
use crate::resp::Conn;

const EVERY: Duration = Duration::from_millis(250);
const PRINT_EVERY: Duration = Duration::from_secs(5);

/// One sample of the server.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// Seconds since the side started.
    pub t: f64,
    pub used_memory: f64,
    pub rss: f64,
    pub keys: i64,
    /// Clients blocked in `LOCK.ACQUIRE ... WAIT` (0 without the module).
    pub waiters: i64,
    /// The longest `PING` round trip since the sample before, in ms.
    pub probe_max_ms: f64,
}

/// The sampler and the probe of one side, until `stop`.
pub struct Monitor {
    stop: Arc<AtomicBool>,
    sampler: JoinHandle<io::Result<Vec<Sample>>>,
    prober: JoinHandle<io::Result<()>>,
}

fn keys_of(keyspace: &std::collections::HashMap<String, String>) -> i64 {
    keyspace
        .get("db0")
        .and_then(|v| v.split(',').next()?.strip_prefix("keys=")?.parse().ok())
        .unwrap_or(0)
}

impl Monitor {
    /// Starts both on `port`; `label` heads the progress lines.
    pub fn start(port: u16, label: &'static str, started: Instant) -> io::Result<Monitor> {
        let stop = Arc::new(AtomicBool::new(false));
        let worst = Arc::new(Mutex::new(0.0f64));
        let prober = {
            let (stop, worst) = (Arc::clone(&stop), Arc::clone(&worst));
            let mut conn = Conn::connect(port)?;
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let sent = Instant::now();
                    conn.call(&[b"PING"])?.ok()?;
                    let rtt = sent.elapsed().as_secs_f64() * 1e3;
                    let mut worst = worst.lock().map_err(|_| io::Error::other("poisoned"))?;
                    *worst = worst.max(rtt);
                    drop(worst);
                    thread::sleep(Duration::from_millis(1));
                }
                Ok(())
            })
        };
        let sampler = {
            let stop = Arc::clone(&stop);
            let mut conn = Conn::connect(port)?;
            thread::spawn(move || {
                let mut samples = Vec::new();
                let mut printed = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    let memory = info::info(&mut conn, "memory")?;
                    let number = |name: &str| -> f64 {
                        memory.get(name).and_then(|v| v.parse().ok()).unwrap_or(0.0)
                    };
                    let keys = keys_of(&info::info(&mut conn, "keyspace")?);
                    let waiters = info::info(&mut conn, "lock")?
                        .get("lock_waiters")
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    let probe_max_ms = std::mem::take(
                        &mut *worst.lock().map_err(|_| io::Error::other("poisoned"))?,
                    );
                    let sample = Sample {
                        t: started.elapsed().as_secs_f64(),
                        used_memory: number("used_memory"),
                        rss: number("used_memory_rss"),
                        keys,
                        waiters,
                        probe_max_ms,
                    };
                    if printed.elapsed() >= PRINT_EVERY {
                        printed = Instant::now();
                        eprintln!(
                            "soak: {label} t={:>5.1}s keys={:>8} waiters={:>6} used_memory={:>7.1} MB rss={:>7.1} MB worst ping={:.1} ms",
                            sample.t,
                            sample.keys,
                            sample.waiters,
                            sample.used_memory / 1e6,
                            sample.rss / 1e6,
                            samples
                                .iter()
                                .chain([&sample])
                                .map(|s: &Sample| s.probe_max_ms)
                                .fold(0.0, f64::max),
                        );
                    }
                    samples.push(sample);
                    thread::sleep(EVERY);
                }
                Ok(samples)
            })
        };
        Ok(Monitor {
            stop,
            sampler,
            prober,
        })
    }

    /// Stops both and returns the samples.
    pub fn finish(self) -> io::Result<Vec<Sample>> {
        self.stop.store(true, Ordering::Relaxed);
        self.prober
            .join()
            .map_err(|_| io::Error::other("the probe panicked"))??;
        self.sampler
            .join()
            .map_err(|_| io::Error::other("the sampler panicked"))?
    }
}
