//! One configuration's figures for one client, and the pieces every peer bench measures ours
//! with: the server warmed until its JIT is quiet, uncontended and contended runs, alternated
//! blocks combined.

use std::process::Command;
use std::time::{Duration, Instant};

use zk_recipes::{Client, InterProcessMutex};

use super::target::Zk;
use super::{contend, cpu_of, pct, process_cpu, Kind};

/// One configuration's figures for one client.
#[derive(Clone, Copy, Default)]
pub struct Figures {
    pub per_second: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub cpu_us_per_acq: f64,
    /// How many acquisitions the figures are of.
    pub acquisitions: f64,
    /// The server's CPU per acquisition while this client ran (the same server for all).
    pub server_us_per_acq: f64,
    /// Ours only: watch notifications per release.
    pub notifications: f64,
    /// Requests per acquisition (ours and the wire floor's).
    pub requests_per_acq: f64,
    /// Uncontended only: the release's latency.
    pub release_p50_us: f64,
    pub release_p99_us: f64,
}

/// Runs one measurement and adds the server's CPU per acquisition during it.
/// (For an ensemble, its members' CPU summed.)
pub fn on_server(server: &impl Zk, run: impl FnOnce() -> Figures) -> Figures {
    let cpu = || -> Duration { server.pids().iter().map(|p| cpu_of(&p.to_string())).sum() };
    let before = cpu();
    let mut figures = run();
    let used = cpu().saturating_sub(before);
    figures.server_us_per_acq = used.as_secs_f64() * 1e6 / figures.acquisitions.max(1.0);
    figures
}

/// Alternated blocks of one contended configuration as one: throughput over the blocks' total
/// time, CPU and notifications per acquisition over all of them, latencies the blocks' median.
pub fn combine(blocks: &[Figures]) -> Figures {
    let acquisitions: f64 = blocks.iter().map(|b| b.acquisitions).sum();
    if acquisitions <= 0.0 {
        return Figures::default();
    }
    let secs: f64 = blocks
        .iter()
        .filter(|b| b.per_second > 0.0)
        .map(|b| b.acquisitions / b.per_second)
        .sum();
    let per_acq = |f: fn(&Figures) -> f64| {
        blocks.iter().map(|b| f(b) * b.acquisitions).sum::<f64>() / acquisitions
    };
    let mid = |f: fn(&Figures) -> f64| {
        let mut v: Vec<f64> = blocks.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Figures {
        per_second: acquisitions / secs.max(f64::MIN_POSITIVE),
        p50_us: mid(|b| b.p50_us),
        p99_us: mid(|b| b.p99_us),
        cpu_us_per_acq: per_acq(|b| b.cpu_us_per_acq),
        acquisitions,
        server_us_per_acq: per_acq(|b| b.server_us_per_acq),
        notifications: per_acq(|b| b.notifications),
        requests_per_acq: per_acq(|b| b.requests_per_acq),
        release_p50_us: mid(|b| b.release_p50_us),
        release_p99_us: mid(|b| b.release_p99_us),
    }
}

/// Uncontended blocks as one: the block with the median acquire p50, with the release's
/// latencies the blocks' medians of their own.
pub fn median(v: &[Figures]) -> Figures {
    let mut v = v.to_vec();
    let mid = |v: &mut Vec<Figures>, f: fn(&Figures) -> f64| {
        v.sort_by(|a, b| f(a).total_cmp(&f(b)));
        v.get(v.len() / 2).map(f).unwrap_or_default()
    };
    let (release_p50_us, release_p99_us) = (
        mid(&mut v, |b| b.release_p50_us),
        mid(&mut v, |b| b.release_p99_us),
    );
    v.sort_by(|a, b| a.p50_us.total_cmp(&b.p50_us));
    let m = v.get(v.len() / 2).copied().unwrap_or_default();
    Figures {
        release_p50_us,
        release_p99_us,
        ..m
    }
}

/// Rounds of our contended loop until one adds less than 20 ms of JIT compile time on the
/// server (at most 30 rounds).
/// (For an ensemble, its members' JIT time summed.)
pub fn warm_server(server: &impl Zk, clients: &[Client], quick: bool) -> String {
    let pids = server.pids();
    if pids.is_empty() {
        return "no pid".into();
    }
    let compile_secs = || -> Option<f64> {
        let mut total = 0.0;
        for pid in &pids {
            let out = Command::new("jstat")
                .args(["-compiler", &pid.to_string()])
                .output()
                .ok()?;
            let text = String::from_utf8_lossy(&out.stdout);
            let line = text.lines().nth(1)?;
            total += line.split_whitespace().nth(3)?.parse::<f64>().ok()?;
        }
        Some(total)
    };
    let started = Instant::now();
    let mut last = compile_secs();
    for round in 1..=30 {
        let _ = contend(
            Kind::Mutex,
            clients,
            "/bench/peers/server-warm",
            Duration::ZERO,
            Duration::from_millis(if quick { 200 } else { 500 }),
        );
        let now = compile_secs();
        let added = match (last, now) {
            (Some(a), Some(b)) => b - a,
            _ => 0.0,
        };
        last = now;
        if added < 0.02 || (quick && round >= 2) {
            return format!(
                "{round} rounds, {:.1} s, last round added {:.0} ms of JIT",
                started.elapsed().as_secs_f64(),
                added * 1000.0
            );
        }
    }
    "30 rounds (JIT still busy)".into()
}

/// Uncontended rounds with our mutex: acquire and release (the guard's drop, which deletes the
/// node and waits for the answer), each timed.
pub fn uncontended_ours(client: &Client, path: &str, rounds: usize) -> Figures {
    let mutex = InterProcessMutex::new(client, path).expect("lock");
    let mut rounds_taken = Vec::with_capacity(rounds);
    let cpu = process_cpu();
    for _ in 0..rounds {
        let s = Instant::now();
        let g = mutex.acquire().expect("acquire");
        let held = Instant::now();
        drop(g);
        rounds_taken.push((held - s, held.elapsed()));
    }
    uncontended_figures(&rounds_taken, process_cpu() - cpu)
}

/// An uncontended block's figures: (acquire, release) latencies and the CPU the block used.
pub fn uncontended_figures(rounds: &[(Duration, Duration)], cpu: Duration) -> Figures {
    let (mut acquire, mut release): (Vec<Duration>, Vec<Duration>) = rounds.iter().copied().unzip();
    Figures {
        per_second: 0.0,
        p50_us: pct(&mut acquire, 0.5),
        p99_us: pct(&mut acquire, 0.99),
        release_p50_us: pct(&mut release, 0.5),
        release_p99_us: pct(&mut release, 0.99),
        cpu_us_per_acq: cpu.as_secs_f64() * 1e6 / rounds.len().max(1) as f64,
        acquisitions: rounds.len() as f64,
        ..Default::default()
    }
}

/// Our contenders' figures (see [`contend`]). The lock's path is made first, outside the
/// window, as the other clients' are: the window measures the line, not a path's first use
/// (which cost every contender that came before the path a failed create, its listing and the
/// path's making, about 4 requests each).
pub fn contend_ours(kind: Kind, clients: &[Client], path: &str, run_for: Duration) -> Figures {
    if let Some(first) = clients.first() {
        first.ensure_path(path).expect("the lock's path");
    }
    let cpu = process_cpu();
    let r = contend(kind, clients, path, Duration::ZERO, run_for);
    let cpu = process_cpu() - cpu;
    Figures {
        per_second: r.per_second,
        p50_us: r.handoff_p50_us,
        p99_us: r.handoff_p99_us,
        cpu_us_per_acq: cpu.as_secs_f64() * 1e6 / r.acquisitions.max(1) as f64,
        acquisitions: r.acquisitions as f64,
        notifications: r.notifications_per_release,
        requests_per_acq: r.requests_per_acquisition,
        ..Default::default()
    }
}
