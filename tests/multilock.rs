//! InterProcessMultiLock against a real server: all or none, in one global order.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use common::*;
use zk_recipes::lock::{InterProcessMultiLock, InterProcessMutex, LockSpec};
use zk_recipes::Client;

fn client() -> Client {
    connect(&server().connect_string(), Duration::from_secs(10))
}

/// True if `path` has no children (or is gone: lock paths are containers the server reaps).
fn empty(c: &Client, path: &str) -> bool {
    match c.children(path) {
        Ok(children) => children.is_empty(),
        Err(e) => e.is_no_node(),
    }
}

/// Two multi-locks over the same two paths, given in opposite orders, taken 40 times each by
/// their own threads: with the locks taken in the given order they could each hold one and
/// wait for the other for ever; in the global order they never do, and never hold at once.
#[test]
fn two_multi_locks_over_the_same_paths_in_opposite_orders_never_deadlock_nor_overlap() {
    let (a, b) = (root("multi-deadlock-a"), root("multi-deadlock-b"));
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let (done_tx, done_rx) = mpsc::channel();
    for order in [[a.clone(), b.clone()], [b.clone(), a.clone()]] {
        let (inside, most, done_tx) = (inside.clone(), most.clone(), done_tx.clone());
        thread::spawn(move || {
            let c = client();
            let paths: Vec<&str> = order.iter().map(String::as_str).collect();
            let multi = InterProcessMultiLock::new(&c, &paths).unwrap();
            for _ in 0..40 {
                let guard = multi.acquire().unwrap();
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                guard.check().unwrap();
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().unwrap();
            }
            done_tx.send(()).unwrap();
        });
    }
    for _ in 0..2 {
        done_rx
            .recv_timeout(SOON)
            .expect("a multi-lock never finished: a deadlock");
    }
    assert_eq!(most.load(Ordering::SeqCst), 1);
}

/// A set whose second lock is held elsewhere is not taken by its deadline, and its first lock
/// is let go again: another process takes it at once.
#[test]
fn a_set_that_cannot_be_had_by_its_deadline_leaves_nothing_held() {
    let (a, b) = (root("multi-none-a"), root("multi-none-b"));
    let (ours, other) = (client(), client());
    let blocker = InterProcessMutex::new(&other, &b).unwrap();
    let held = blocker.acquire().unwrap();
    let multi = InterProcessMultiLock::new(&ours, &[&a, &b]).unwrap();
    assert!(multi
        .try_acquire_for(Duration::from_millis(300))
        .unwrap()
        .is_none());
    wait_for(SOON, || empty(&ours, &a).then_some(())).expect("the first lock's node stayed");
    let first = InterProcessMutex::new(&other, &a).unwrap();
    assert!(
        first.try_acquire().unwrap().is_some(),
        "the first lock is still held"
    );
    drop(held);
}

/// While a set is held, none of its locks can be had by another process; the guard's bound is
/// the earliest of its holds', and its check fails once any hold is lost.
#[test]
fn a_held_set_excludes_each_of_its_locks_and_is_lost_with_any_of_them() {
    let (a, b, c) = (
        root("multi-held-a"),
        root("multi-held-b"),
        root("multi-held-c"),
    );
    let (ours, other) = (client(), client());
    let multi = InterProcessMultiLock::with_locks(
        &ours,
        vec![
            LockSpec::Write(c.clone()),
            LockSpec::Mutex(a.clone()),
            LockSpec::Semaphore {
                path: b.clone(),
                leases: 1,
            },
        ],
    )
    .unwrap();
    let order: Vec<&str> = multi.locks().map(LockSpec::path).collect();
    assert_eq!(order, [a.as_str(), b.as_str(), c.as_str()]);
    let guard = multi.try_acquire_for(SOON).unwrap().unwrap();
    assert!(guard.is_held());
    guard.check().unwrap();
    // The set's bound is its earliest lease's. Each reading may differ from the last by an
    // answer (later) or the clock's reading noise (earlier, nanoseconds), so the set's is read
    // between two readings of its leases and compared against both.
    let earliest = |g: &zk_recipes::lock::MultiLockGuard<'_>| {
        g.leases().map(|l| l.valid_until().unwrap()).min().unwrap()
    };
    let before = earliest(&guard);
    let set = guard.valid_until().unwrap();
    let after = earliest(&guard);
    let noise = Duration::from_millis(1);
    assert!(
        before - noise <= set && set <= after + noise,
        "the set's bound {set:?} is not its earliest lease's ({before:?} .. {after:?})"
    );
    let tokens = guard.fencing_tokens().unwrap();
    assert_eq!(tokens.len(), 3);
    let theirs = InterProcessMutex::new(&other, &a).unwrap();
    assert!(theirs.try_acquire().unwrap().is_none());
    let their_semaphore = zk_recipes::lock::InterProcessSemaphoreV2::new(&other, &b, 1).unwrap();
    assert!(their_semaphore.try_acquire().unwrap().is_none());
    let their_rw = zk_recipes::lock::InterProcessReadWriteLock::new(&other, &c).unwrap();
    assert!(their_rw.read_lock().try_acquire().unwrap().is_none());
    // One of its nodes deleted by someone else: the set is no longer held.
    let (node, _) = &tokens[1];
    other.delete(node).unwrap();
    wait_for(SOON, || (!guard.is_held()).then_some(())).expect("the loss was not seen");
    assert!(guard.check().is_err());
    assert!(guard.valid_until().is_none());
    assert!(
        guard.release().is_err(),
        "a release of a lost set reports the loss"
    );
    // Every node of the set goes (the semaphore's leases sit under its `leases` child).
    for line in [a.clone(), format!("{b}/leases"), c.clone()] {
        wait_for(SOON, || empty(&other, &line).then_some(()))
            .unwrap_or_else(|| panic!("a node of the set stayed in {line}"));
    }
    assert!(InterProcessMultiLock::new(&ours, &[]).is_err());
    assert!(InterProcessMultiLock::new(&ours, &[&a, &a]).is_err());
}

/// A timed acquire of a set returns by its deadline (plus `MIN_ATTEMPT` and a scheduling
/// allowance) also when the link goes silent while it waits for its second lock: what it took
/// is given back without waiting for the silent server (the janitor finishes).
#[test]
fn a_timed_set_acquire_returns_by_its_deadline_when_its_link_goes_silent() {
    let (a, b) = (root("multi-silent-a"), root("multi-silent-b"));
    let other = client();
    let blocker = InterProcessMutex::new(&other, &b).unwrap();
    let held = blocker.acquire().unwrap();
    let proxy = zk_recipes::testing::FaultProxy::start(server().addr()).unwrap();
    let ours = connect(&proxy.connect_string(), Duration::from_secs(10));
    let multi = InterProcessMultiLock::new(&ours, &[&a, &b]).unwrap();
    let (done_tx, done_rx) = mpsc::channel();
    let timeout = Duration::from_millis(1500);
    let started = std::time::Instant::now();
    thread::spawn(move || {
        let taken = multi.try_acquire_for(timeout).map(|g| g.is_some());
        let _ = done_tx.send((taken, started.elapsed()));
    });
    // The first lock is ours and the set waits for the second; then the link goes silent.
    wait_for(SOON, || (other.children(&a).ok()?.len() == 1).then_some(()))
        .expect("the first lock was never taken");
    proxy.blackhole();
    let (taken, took) = done_rx
        .recv_timeout(SOON)
        .expect("the acquire never returned");
    assert!(!taken.unwrap_or(false));
    assert!(
        took <= timeout + zk_recipes::lock::MIN_ATTEMPT + Duration::from_millis(500),
        "returned after {took:?}"
    );
    proxy.heal();
    drop(held);
}
