//! Is an `acquire_async()` worth adding? What an async caller pays today for the documented
//! pattern (the blocking acquire in tokio's `spawn_blocking`, the lease held across awaits,
//! the release in `spawn_blocking`) over the same calls on a plain thread, alternated on one
//! server: uncontended acquire+release latency, and the client CPU per cycle.
//!
//! `cargo bench --bench async_callers [-- --quick]`

mod common;

use std::time::{Duration, Instant};

use common::*;
use zk_recipes::lock::InterProcessSemaphoreMutex;

fn main() {
    let args = args();
    let server = server(&args);
    let client = clients(&server.connect_string(), 1).remove(0);
    let lock = std::sync::Arc::new(
        InterProcessSemaphoreMutex::new(&client, "/bench/async-callers").expect("lock"),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime");
    let (rounds, cycles) = if args.quick { (2, 100) } else { (8, 1000) };
    // Warm both paths (and the server) before measuring.
    direct(&lock, cycles);
    via_spawn_blocking(&runtime, &lock, cycles);
    let (mut plain, mut tokio_side) = (Vec::new(), Vec::new());
    let (mut plain_cpu, mut tokio_cpu) = (Duration::ZERO, Duration::ZERO);
    for round in 0..rounds {
        // Alternated, each first in turn.
        for turn in 0..2 {
            let cpu = process_cpu();
            if (round + turn) % 2 == 0 {
                plain.extend(direct(&lock, cycles));
                plain_cpu += process_cpu() - cpu;
            } else {
                tokio_side.extend(via_spawn_blocking(&runtime, &lock, cycles));
                tokio_cpu += process_cpu() - cpu;
            }
        }
    }
    let n = (rounds * cycles) as f64;
    let (p50, t50) = (pct(&mut plain, 0.5), pct(&mut tokio_side, 0.5));
    let (p99, t99) = (pct(&mut plain, 0.99), pct(&mut tokio_side, 0.99));
    let (pc, tc) = (
        plain_cpu.as_secs_f64() * 1e6 / n,
        tokio_cpu.as_secs_f64() * 1e6 / n,
    );
    json(
        "async_callers",
        &[
            ("cycles", f(n)),
            ("thread_p50_us", f(p50)),
            ("spawn_blocking_p50_us", f(t50)),
            ("thread_p99_us", f(p99)),
            ("spawn_blocking_p99_us", f(t99)),
            ("thread_cpu_us", f(pc)),
            ("spawn_blocking_cpu_us", f(tc)),
        ],
    );
    println!(
        "\nuncontended acquire+release, {n:.0} cycles each, alternated: on a thread p50 {p50:.0} µs \
         (p99 {p99:.0}, CPU {pc:.0} µs), through spawn_blocking p50 {t50:.0} µs (p99 {t99:.0}, CPU \
         {tc:.0} µs): {:.2}× the latency, {:+.0} µs",
        t50 / p50,
        t50 - p50
    );
    runtime.shutdown_timeout(Duration::from_secs(10));
}

/// `cycles` acquire+release cycles on this thread; each cycle's latency.
fn direct(lock: &InterProcessSemaphoreMutex, cycles: usize) -> Vec<Duration> {
    (0..cycles)
        .map(|_| {
            let started = Instant::now();
            let lease = lock.acquire().expect("acquire");
            lease.release().expect("release");
            started.elapsed()
        })
        .collect()
}

/// The same from a task on the runtime, as the README shows async callers.
fn via_spawn_blocking(
    runtime: &tokio::runtime::Runtime,
    lock: &std::sync::Arc<InterProcessSemaphoreMutex>,
    cycles: usize,
) -> Vec<Duration> {
    let lock = lock.clone();
    runtime.block_on(async move {
        let task = tokio::spawn(async move {
            let mut took = Vec::with_capacity(cycles);
            for _ in 0..cycles {
                let started = Instant::now();
                let l = lock.clone();
                let lease = tokio::task::spawn_blocking(move || l.acquire())
                    .await
                    .expect("join")
                    .expect("acquire");
                tokio::task::spawn_blocking(move || lease.release())
                    .await
                    .expect("join")
                    .expect("release");
                took.push(started.elapsed());
            }
            took
        });
        task.await.expect("task")
    })
}
