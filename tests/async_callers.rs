//! The pattern for async callers (tokio): a blocking acquire in `spawn_blocking`, a `Send`
//! lease held across `.await`s, checked without blocking, released in `spawn_blocking`.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use zk_recipes::lock::InterProcessSemaphoreMutex;

/// Tasks on a multi-threaded runtime take turns on one lock: each acquires on the blocking
/// pool, holds its lease across awaits (on whatever worker thread the task resumes), checks
/// it there (`check()` reads the client's state, no I/O), and releases on the blocking pool.
/// No two are inside at once, and every task gets its turns.
#[test]
fn tasks_share_a_lock_through_spawn_blocking() {
    let client = connect(&server().connect_string(), Duration::from_secs(10));
    let lock = Arc::new(InterProcessSemaphoreMutex::new(&client, &root("async-callers")).unwrap());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let turns = runtime.block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let (lock, inside, overlaps) = (lock.clone(), inside.clone(), overlaps.clone());
            tasks.push(tokio::spawn(async move {
                let mut turns = 0;
                for _ in 0..5 {
                    let l = lock.clone();
                    // Blocking: never on a runtime thread.
                    let lease = tokio::task::spawn_blocking(move || l.acquire())
                        .await
                        .unwrap()
                        .unwrap();
                    if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    // Held across awaits; the task may resume on another worker.
                    for _ in 0..3 {
                        tokio::task::yield_now().await;
                        assert!(lease.check().is_ok());
                    }
                    inside.fetch_sub(1, Ordering::SeqCst);
                    tokio::task::spawn_blocking(move || lease.release())
                        .await
                        .unwrap()
                        .unwrap();
                    turns += 1;
                }
                turns
            }));
        }
        let mut turns = 0;
        for t in tasks {
            turns += t.await.unwrap();
        }
        turns
    });
    runtime.shutdown_timeout(Duration::from_secs(10));
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    assert_eq!(turns, 20);
}
