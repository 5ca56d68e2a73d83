//! Read/write lock and semaphore under contention: read concurrency reached and throughput with
//! 10 % writers, and a semaphore of 4 leases shared by 16 contenders.
//!
//! `cargo bench --bench rwlock [-- --quick]`

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use zk_recipes::lock::{InterProcessReadWriteLock, InterProcessSemaphoreV2};
use zk_recipes::Client;

fn main() {
    let args = args();
    let server = server(&args);
    let run_for = Duration::from_millis(if args.quick { 1000 } else { 4000 });
    let all = clients(&server.connect_string(), 16);
    let hold = Duration::from_millis(1);

    let (rw, most_readers, writes) = rw_loop(&all[..8], hold, run_for);
    json(
        "rwlock",
        &[
            ("clients", "8".into()),
            ("write_share", f(0.1)),
            ("hold_ms", "1".into()),
            ("per_second", f(rw)),
            ("writes", writes.to_string()),
            ("most_readers_at_once", most_readers.to_string()),
        ],
    );
    let (sem, most_holders) = semaphore_loop(&all, 4, hold, run_for);
    json(
        "semaphore",
        &[
            ("contenders", "16".into()),
            ("leases", "4".into()),
            ("hold_ms", "1".into()),
            ("per_second", f(sem)),
            ("most_holders_at_once", most_holders.to_string()),
        ],
    );
    println!("\nread/write lock, 8 clients, 10 % writes, hold 1 ms: {rw:.0} acquisitions/s, up to {most_readers} readers at once, {writes} writes");
    println!("semaphore, 4 leases, 16 contenders, hold 1 ms: {sem:.0} leases/s, up to {most_holders} holders at once");
}

/// Returns (acquisitions per second, most readers at once, writes).
fn rw_loop(clients: &[Client], hold: Duration, run_for: Duration) -> (f64, usize, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let writes = Arc::new(AtomicU64::new(0));
    let readers = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(clients.len() + 1));
    let threads: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let lock = InterProcessReadWriteLock::new(c, "/bench/rwlock").expect("lock");
            let (stop, count, writes, readers, most, start) = (
                stop.clone(),
                count.clone(),
                writes.clone(),
                readers.clone(),
                most.clone(),
                start.clone(),
            );
            thread::spawn(move || {
                start.wait();
                let mut round = i;
                while !stop.load(Ordering::Relaxed) {
                    round += 1;
                    if round % 10 == 0 {
                        let _g = lock.write_lock().acquire().expect("write");
                        assert_eq!(readers.load(Ordering::SeqCst), 0, "a writer met a reader");
                        writes.fetch_add(1, Ordering::Relaxed);
                        thread::sleep(hold);
                    } else {
                        let _g = lock.read_lock().acquire().expect("read");
                        let k = readers.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(k, Ordering::SeqCst);
                        thread::sleep(hold);
                        readers.fetch_sub(1, Ordering::SeqCst);
                    }
                    count.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    start.wait();
    let began = Instant::now();
    thread::sleep(run_for);
    stop.store(true, Ordering::Relaxed);
    let n = count.load(Ordering::Relaxed);
    let secs = began.elapsed().as_secs_f64();
    for t in threads {
        t.join().expect("contender");
    }
    (
        n as f64 / secs,
        most.load(Ordering::SeqCst),
        writes.load(Ordering::Relaxed),
    )
}

/// Returns (leases per second, most holders at once).
fn semaphore_loop(
    clients: &[Client],
    leases: usize,
    hold: Duration,
    run_for: Duration,
) -> (f64, usize) {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(clients.len() + 1));
    let threads: Vec<_> = clients
        .iter()
        .map(|c| {
            let sem =
                InterProcessSemaphoreV2::new(c, "/bench/semaphore", leases).expect("semaphore");
            let (stop, count, inside, most, start) = (
                stop.clone(),
                count.clone(),
                inside.clone(),
                most.clone(),
                start.clone(),
            );
            thread::spawn(move || {
                start.wait();
                while !stop.load(Ordering::Relaxed) {
                    let _lease = sem.acquire().expect("lease");
                    let k = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(k, Ordering::SeqCst);
                    thread::sleep(hold);
                    inside.fetch_sub(1, Ordering::SeqCst);
                    count.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    start.wait();
    let began = Instant::now();
    thread::sleep(run_for);
    stop.store(true, Ordering::Relaxed);
    let n = count.load(Ordering::Relaxed);
    let secs = began.elapsed().as_secs_f64();
    for t in threads {
        t.join().expect("contender");
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= leases, "{most} holders of {leases} leases");
    (n as f64 / secs, most)
}
