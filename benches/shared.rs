//! Shared state (issue 38): counter increments per second at 1, 8 and 32 contending sessions,
//! ours (`atomic::DistributedAtomicLong`) beside Curator 5.4's (`benches/CuratorSharedBench.java`,
//! one long-lived JVM), on the same node layout.
//!
//! Both sides run the same loop: N contenders, each its own session and thread and its own
//! counter object on one path, increment for a while; an increment tries optimistically and,
//! when it meets a newer value, tries again at once, up to 1 000 times (Curator's
//! `RetryNTimes(1000, 0)`; ours `RetryPolicy` with a zero backoff). No lock promotion. The
//! figure is increments made per second, over all contenders, and the client's CPU per one.
//!
//! Fair means, as in `peers`: the server is warmed until its JIT is quiet; Curator is warmed
//! until its own JIT has been quiet for a second; ours gets untimed warm-up turns; then both
//! run on the same server in the same run, in alternated turns whose order flips from block to
//! block, each turn on a counter of its own. Figures are given as ratios.
//!
//! `cargo bench -p zk-recipes-benches --bench shared [-- --quick]`. Skips Curator, saying why,
//! if it is missing.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::driver::Driver;
use common::figures::*;
use common::turn::{median_turn, timed, Turn};
use common::wire::counter as wire;
use common::*;
use zk_recipes::atomic::DistributedAtomicLong;
use zk_recipes::{Client, CreateMode, RetryPolicy};

const ROOT: &str = "/bench/shared";

fn main() {
    let args = args();
    let quick = args.quick;
    let server = server(&args);
    let connect = server.connect_string();
    let sizes = [1usize, 8, 32];
    let most = 32;
    let ours = clients(&connect, most);
    ours[0].ensure_path(ROOT).expect("path");
    let mut curator = Driver::curator_or_skip("shared", "CuratorSharedBench", &connect, most);

    let warm = warm_server(&server, &ours[..8], quick);
    println!("server warmed: {warm}");
    if let Some(c) = curator.as_mut() {
        c.warm_jit("shared", &format!("{ROOT}/curator-warm"), quick);
    }
    for i in 0..if quick { 1 } else { 3 } {
        let warm = format!("{ROOT}/warm-{i}-floor");
        ours[0]
            .create_with_parents(&warm, &0i64.to_be_bytes(), CreateMode::Persistent)
            .expect("the floor's counter");
        let _ = wire::increments(&connect, &warm, 8, Duration::from_millis(200));
        let _ = increments_ours(
            &ours[..1],
            &format!("{ROOT}/warm-{i}-1"),
            Duration::from_millis(200),
        );
        let _ = increments_ours(
            &ours[..8],
            &format!("{ROOT}/warm-{i}-8"),
            Duration::from_millis(200),
        );
    }

    let blocks = if quick { 1 } else { 5 };
    let run_for = Duration::from_millis(if quick { 200 } else { 2000 });
    println!(
        "\n{:<34}{:>12}{:>12}{:>10}{:>14} {:>14}{:>10}{:>10}",
        "counter increments (made/s)",
        "ours",
        "Curator",
        "ours÷",
        "ours CPU µs",
        "Curator CPU µs",
        "floor",
        "÷floor"
    );
    for n in sizes {
        let (mut mine, mut theirs, mut floor) = (Vec::new(), Vec::new(), Vec::new());
        for b in 0..blocks {
            for turn in 0..3 {
                let path = format!("{ROOT}/n{n}-b{b}-t{turn}");
                // The order rotates from block to block: ours, Curator, the floor.
                let who = (turn + b) % 3;
                if who == 0 {
                    mine.push(increments_ours(&ours[..n], &path, run_for));
                } else if who == 2 {
                    ours[0]
                        .create_with_parents(&path, &0i64.to_be_bytes(), CreateMode::Persistent)
                        .expect("the floor's counter");
                    let r = wire::increments(&connect, &path, n, run_for);
                    floor.push(Turn {
                        per_sec: r.per_second,
                        cpu_us: r.cpu_us_per_acq,
                    });
                } else if let Some(c) = curator.as_mut() {
                    let r = c.numbers(&format!("incr {path} {n} {}", run_for.as_millis()));
                    theirs.push(Turn {
                        per_sec: r.get(1).copied().unwrap_or(0.0),
                        cpu_us: r.get(3).copied().unwrap_or(0.0) / 1000.0,
                    });
                }
            }
        }
        let (o, t, fl) = (
            median_turn(&mine),
            median_turn(&theirs),
            median_turn(&floor),
        );
        let ratio = if t.per_sec > 0.0 {
            o.per_sec / t.per_sec
        } else {
            f64::NAN
        };
        let over_floor = if fl.per_sec > 0.0 {
            o.per_sec / fl.per_sec
        } else {
            f64::NAN
        };
        println!(
            "{:<34}{:>12.0}{:>12.0}{:>10.2}{:>14.1} {:>14.1}{:>10.0}{:>10.2}",
            format!("{n} contending session(s)"),
            o.per_sec,
            t.per_sec,
            ratio,
            o.cpu_us,
            t.cpu_us,
            fl.per_sec,
            over_floor
        );
        json(
            "shared",
            &[
                ("figure", s("counter_increments_per_sec")),
                ("sessions", n.to_string()),
                ("ours", f(o.per_sec)),
                ("curator", f(t.per_sec)),
                ("ours_over_curator", f(ratio)),
                ("floor", f(fl.per_sec)),
                ("ours_over_floor", f(over_floor)),
                ("ours_cpu_us", f(o.cpu_us)),
                ("curator_cpu_us", f(t.cpu_us)),
            ],
        );
    }
    println!("(made/s: more is better, so a ratio over 1 is ours ahead; CPU per made increment)");
    if let Some(mut c) = curator {
        c.quit();
    }
}

/// Our contenders, one per client (each its own session and thread), increment the counter at
/// `path` for `run_for`.
fn increments_ours(clients: &[Client], path: &str, run_for: Duration) -> Turn {
    let made = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(clients.len() + 1));
    let retry = RetryPolicy::exponential(Duration::ZERO, Duration::ZERO).max_retries(1000);
    let until = Arc::new(std::sync::OnceLock::new());
    let threads: Vec<_> = clients
        .iter()
        .map(|c| {
            let counter = DistributedAtomicLong::new(c, path, retry.clone()).expect("counter");
            let (made, start, until) = (made.clone(), start.clone(), until.clone());
            thread::spawn(move || {
                start.wait();
                let until: Instant = *until.get().expect("set before the start");
                while Instant::now() < until {
                    if counter.increment().is_ok_and(|v| v.succeeded) {
                        made.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    timed(threads, &start, &until, &made, run_for)
}
