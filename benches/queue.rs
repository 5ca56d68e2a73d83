//! Queues (issue 38): items per second put, and taken, ours (`queue::DistributedQueue`) beside
//! Curator 5.4's (`benches/CuratorQueueBench.java`, one long-lived JVM), on the same nodes.
//!
//! - **Put**: N producers, each its own session, thread and queue object, put one-item nodes
//!   for a while (Curator: `put` in the foreground). The wire floor: the same `create`, frames
//!   pre-encoded.
//! - **Take, at least once**: a queue filled beforehand with the same items (untimed, by us for
//!   both sides) is drained by N consumers, each its own session: Curator's safe mode (lock
//!   path: lock, read, delete the item, delete the lock, run by its consumer thread from a
//!   children cache) and our `take` + `Taken::done` (lock, read, one transaction deleting both)
//!   in a loop on N threads. Timed from the consumers' start to the last item.
//! - **Take, exactly once** (ours only: Curator has no such mode): `take_once` (read, one
//!   transaction making the lock and deleting the item at the version read).
//!
//! Fair means, as in `peers`: the server is warmed until its JIT is quiet; Curator is warmed
//! until its own JIT has been quiet for a second; ours gets untimed warm-up turns; then all run
//! on the same server in the same run, in alternated turns whose order rotates from block to
//! block, each turn on a queue of its own. Figures are given as ratios.
//!
//! `cargo bench -p zk-recipes-benches --bench queue [-- --quick]`. Skips Curator, saying why,
//! if it is missing.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::driver::Driver;
use common::figures::*;
use common::turn::{median_turn, timed, Turn};
use common::wire::queue as wire;
use common::*;
use zk_recipes::queue::DistributedQueue;
use zk_recipes::Client;

const ROOT: &str = "/bench/queue";
/// A work item of a few dozen bytes (a job id and its arguments), on every side.
const ITEM: &[u8] = b"a work item of a few dozen bytes, as a job id and its args";

fn main() {
    let args = args();
    let quick = args.quick;
    let server = server(&args);
    let connect = server.connect_string();
    let most = 8;
    let ours = clients(&connect, most);
    ours[0].ensure_path(ROOT).expect("path");
    let mut curator = Driver::curator_or_skip("queue", "CuratorQueueBench", &connect, most);

    let warm = warm_server(&server, &ours[..8], quick);
    println!("server warmed: {warm}");
    if let Some(c) = curator.as_mut() {
        c.warm_jit("queue", &format!("{ROOT}/curator-warm"), quick);
    }
    for i in 0..if quick { 1 } else { 3 } {
        let dir = format!("{ROOT}/warm-{i}");
        let _ = puts_ours(&ours[..1], &dir, Duration::from_millis(200));
        let _ = drain_ours(&ours[..1], &dir, Mode::AtLeastOnce, usize::MAX);
        let _ = puts_ours(&ours[..4], &dir, Duration::from_millis(200));
        let _ = drain_ours(&ours[..4], &dir, Mode::ExactlyOnce, usize::MAX);
    }

    let blocks = if quick { 1 } else { 5 };
    let run_for = Duration::from_millis(if quick { 200 } else { 2000 });
    let count = if quick { 100 } else { 2000 };
    header("puts (items/s)", true);
    for n in [1usize, 8] {
        let (mut mine, mut theirs, mut floor) = (Vec::new(), Vec::new(), Vec::new());
        for b in 0..blocks {
            for turn in 0..3 {
                let dir = format!("{ROOT}/put-n{n}-b{b}-t{turn}");
                ours[0].ensure_path(&dir).expect("the turn's queue");
                match (turn + b) % 3 {
                    0 => mine.push(puts_ours(&ours[..n], &dir, run_for)),
                    1 => {
                        if let Some(c) = curator.as_mut() {
                            theirs
                                .push(result(c, &format!("put {dir} {n} {}", run_for.as_millis())));
                        }
                    }
                    _ => {
                        let r = wire::puts(&connect, &dir, ITEM, n, run_for);
                        floor.push(Turn {
                            per_sec: r.per_second,
                            cpu_us: r.cpu_us_per_acq,
                        });
                    }
                }
            }
        }
        row("put", n, &mine, &theirs, Some(&floor));
    }
    header(&format!("takes of {count} queued items (items/s)"), false);
    for n in [1usize, 4] {
        let (mut mine, mut theirs, mut once) = (Vec::new(), Vec::new(), Vec::new());
        for b in 0..blocks {
            for turn in 0..3 {
                let dir = format!("{ROOT}/take-n{n}-b{b}-t{turn}");
                fill(&ours[0], &dir, count);
                match (turn + b) % 3 {
                    0 => mine.push(drain_ours(&ours[..n], &dir, Mode::AtLeastOnce, count)),
                    1 => {
                        if let Some(c) = curator.as_mut() {
                            theirs.push(result(c, &format!("drain {dir} {dir}-locks {n} {count}")));
                        }
                    }
                    _ => once.push(drain_ours(&ours[..n], &dir, Mode::ExactlyOnce, count)),
                }
            }
        }
        row("take, at least once", n, &mine, &theirs, None);
        row(
            "take_once (ours) ÷ Curator's safe mode",
            n,
            &once,
            &theirs,
            None,
        );
    }
    println!("(items/s: more is better, so a ratio over 1 is ours ahead; CPU per item)");
    if let Some(mut c) = curator {
        c.quit();
    }
}

fn header(what: &str, floor: bool) {
    println!(
        "\n{:<44}{:>10}{:>10}{:>8}{:>12} {:>14}{}",
        what,
        "ours",
        "Curator",
        "ours÷",
        "ours CPU µs",
        "Curator CPU µs",
        if floor { "     floor  ÷floor" } else { "" }
    );
}

/// Prints and records one row: the medians of each side's turns and their ratio.
fn row(what: &str, n: usize, mine: &[Turn], theirs: &[Turn], floor: Option<&[Turn]>) {
    let (o, t) = (median_turn(mine), median_turn(theirs));
    let ratio = if t.per_sec > 0.0 {
        o.per_sec / t.per_sec
    } else {
        f64::NAN
    };
    let fl = floor.map(median_turn);
    let over_floor = fl.map_or(f64::NAN, |fl| o.per_sec / fl.per_sec);
    println!(
        "{:<44}{:>10.0}{:>10.0}{:>8.2}{:>12.1} {:>14.1}{}",
        format!("{what}, {n} session(s)"),
        o.per_sec,
        t.per_sec,
        ratio,
        o.cpu_us,
        t.cpu_us,
        fl.map_or(String::new(), |fl| format!(
            "{:>10.0}{:>8.2}",
            fl.per_sec, over_floor
        ))
    );
    json(
        "queue",
        &[
            ("figure", s(what)),
            ("sessions", n.to_string()),
            ("ours", f(o.per_sec)),
            ("curator", f(t.per_sec)),
            ("ours_over_curator", f(ratio)),
            ("ours_cpu_us", f(o.cpu_us)),
            ("curator_cpu_us", f(t.cpu_us)),
            ("floor", f(fl.map_or(f64::NAN, |fl| fl.per_sec))),
            ("ours_over_floor", f(over_floor)),
        ],
    );
}

/// A Curator `RESULT <n> <per second> <failed> <cpu ns per one>` as a turn.
fn result(c: &mut Driver, command: &str) -> Turn {
    let r = c.numbers(command);
    Turn {
        per_sec: r.get(1).copied().unwrap_or(0.0),
        cpu_us: r.get(3).copied().unwrap_or(0.0) / 1000.0,
    }
}

/// `count` items in the queue at `dir`, put in batches (untimed).
fn fill(client: &Client, dir: &str, count: usize) {
    let q = DistributedQueue::new(client, dir).expect("queue");
    let batch = vec![ITEM; 100];
    let mut left = count;
    while left > 0 {
        let n = left.min(batch.len());
        q.put_all(&batch[..n]).expect("fill");
        left -= n;
    }
}

/// Our producers, one per client (each its own session, thread and queue object), put for
/// `run_for`.
fn puts_ours(clients: &[Client], dir: &str, run_for: Duration) -> Turn {
    let made = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(clients.len() + 1));
    let until = Arc::new(std::sync::OnceLock::new());
    let threads: Vec<_> = clients
        .iter()
        .map(|c| {
            let q = DistributedQueue::new(c, dir).expect("queue");
            let (made, start, until) = (made.clone(), start.clone(), until.clone());
            thread::spawn(move || {
                start.wait();
                let until: Instant = *until.get().expect("set before the start");
                while Instant::now() < until {
                    if q.put(ITEM).is_ok() {
                        made.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    timed(threads, &start, &until, &made, run_for)
}

#[derive(Clone, Copy)]
enum Mode {
    AtLeastOnce,
    ExactlyOnce,
}

/// Our consumers, one per client (each its own session, thread and queue object), take until
/// `count` items are taken (or the queue is empty).
fn drain_ours(clients: &[Client], dir: &str, mode: Mode, count: usize) -> Turn {
    let taken = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(clients.len() + 1));
    let until = Arc::new(std::sync::OnceLock::new());
    let threads: Vec<_> = clients
        .iter()
        .map(|c| {
            let q = DistributedQueue::new(c, dir).expect("queue");
            let (taken, start, until) = (taken.clone(), start.clone(), until.clone());
            thread::spawn(move || {
                start.wait();
                let _: &Instant = until.get().expect("set before the start");
                while (taken.load(Ordering::Relaxed) as usize) < count {
                    let got = match mode {
                        Mode::AtLeastOnce => match q.take(Duration::ZERO) {
                            Ok(Some(t)) => t.done().is_ok(),
                            _ => break,
                        },
                        Mode::ExactlyOnce => match q.take_once(Duration::ZERO) {
                            Ok(Some(_)) => true,
                            _ => break,
                        },
                    };
                    if got {
                        taken.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    timed(threads, &start, &until, &taken, Duration::ZERO)
}
