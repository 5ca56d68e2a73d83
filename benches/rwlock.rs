//! Read/write lock and semaphore under contention: read concurrency reached and throughput with
//! 10 % writers, and a semaphore of 4 leases shared by 16 contenders.
//!
//! `cargo bench --bench rwlock [-- --quick]`

mod common;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

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
    let writes = Arc::new(AtomicU64::new(0));
    let readers = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let lock = InterProcessReadWriteLock::new(c, "/bench/rwlock").expect("lock");
            (lock, AtomicUsize::new(i))
        })
        .collect();
    let (w, r, m) = (writes.clone(), readers.clone(), most.clone());
    let rate = timed(workers, run_for, move |(lock, round)| {
        if round.fetch_add(1, Ordering::Relaxed) % 10 == 0 {
            let _g = lock.write_lock().acquire().expect("write");
            assert_eq!(r.load(Ordering::SeqCst), 0, "a writer met a reader");
            w.fetch_add(1, Ordering::Relaxed);
            thread::sleep(hold);
        } else {
            let _g = lock.read_lock().acquire().expect("read");
            m.fetch_max(r.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
            thread::sleep(hold);
            r.fetch_sub(1, Ordering::SeqCst);
        }
    });
    (
        rate,
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
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = clients
        .iter()
        .map(|c| InterProcessSemaphoreV2::new(c, "/bench/semaphore", leases).expect("semaphore"))
        .collect();
    let (i, m) = (inside.clone(), most.clone());
    let rate = timed(workers, run_for, move |sem| {
        let _lease = sem.acquire().expect("lease");
        m.fetch_max(i.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
        thread::sleep(hold);
        i.fetch_sub(1, Ordering::SeqCst);
    });
    let most = most.load(Ordering::SeqCst);
    assert!(most <= leases, "{most} holders of {leases} leases");
    (rate, most)
}
