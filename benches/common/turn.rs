//! One turn of a throughput bench (the queue's, the counter's): how many per second, and the
//! client's CPU per one; the median over turns; and the runner that times threads started
//! together.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::process_cpu;

/// One turn's figures: how many per second, and the client's CPU per one (µs).
#[derive(Clone, Copy, Default)]
pub struct Turn {
    pub per_sec: f64,
    pub cpu_us: f64,
}

/// The median of each figure over the turns (zeros for none).
pub fn median_turn(turns: &[Turn]) -> Turn {
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    Turn {
        per_sec: median(turns.iter().map(|t| t.per_sec).collect()),
        cpu_us: median(turns.iter().map(|t| t.cpu_us).collect()),
    }
}

/// Starts `threads` (waiting at `start`), lets them run (until `run_for` from the start, which
/// they read from `until`, or until they end), and returns `count` per second of the whole and
/// the process's CPU per one.
pub fn timed(
    threads: Vec<JoinHandle<()>>,
    start: &Barrier,
    until: &OnceLock<Instant>,
    count: &AtomicU64,
    run_for: Duration,
) -> Turn {
    let cpu = process_cpu();
    let t0 = Instant::now();
    let _ = until.set(t0 + run_for);
    start.wait();
    for t in threads {
        t.join().expect("a bench thread");
    }
    let secs = t0.elapsed().as_secs_f64();
    let cpu = process_cpu().saturating_sub(cpu);
    let n = count.load(Ordering::Relaxed);
    Turn {
        per_sec: n as f64 / secs,
        cpu_us: if n == 0 {
            0.0
        } else {
            cpu.as_secs_f64() * 1e6 / n as f64
        },
    }
}
