//! InterProcessMutex and the semaphores against a real server.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use rstest::rstest;
use zk_recipes::lock::{
    revoke, session_of, InterProcessMutex, InterProcessSemaphoreMutex, InterProcessSemaphoreV2,
    LockOptions,
};
use zk_recipes::Client;

fn client() -> Client {
    connect(&server().connect_string(), Duration::from_secs(10))
}

/// Children of `path`, sorted (none if it does not exist).
fn children(c: &Client, path: &str) -> Vec<String> {
    let mut v = c.children(path).unwrap_or_default();
    v.sort();
    v
}

#[rstest]
#[case::fast_handoff(true)]
#[case::always_relist(false)]
fn sixteen_clients_never_overlap_and_lose_no_update(#[case] fast_handoff: bool) {
    let path = root("mutex-exclusion");
    let counter = Arc::new(AtomicUsize::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let most_inside = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(16));
    let workers: Vec<_> = (0..16)
        .map(|_| {
            let (path, counter, inside, most_inside, start) = (
                path.clone(),
                counter.clone(),
                inside.clone(),
                most_inside.clone(),
                start.clone(),
            );
            thread::spawn(move || {
                let client = client();
                let options = LockOptions::new().fast_handoff(fast_handoff);
                let mutex = InterProcessMutex::with_options(&client, &path, options).unwrap();
                start.wait();
                for _ in 0..50 {
                    let _guard = mutex.acquire().unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most_inside.fetch_max(now, Ordering::SeqCst);
                    // Read, pause, write: a lost update shows if two are ever inside.
                    let seen = counter.load(Ordering::SeqCst);
                    thread::sleep(Duration::from_micros(200));
                    counter.store(seen + 1, Ordering::SeqCst);
                    inside.fetch_sub(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(counter.load(Ordering::SeqCst), 16 * 50);
    assert_eq!(most_inside.load(Ordering::SeqCst), 1);
    assert!(children(&client(), &path).is_empty());
}

/// The lock's create and its look at the line ask for no stat: `create` and `getChildren`,
/// not their `2` forms, whose answers carry a 68-byte stat the lock does not use. What the
/// server sends for an uncontended acquisition and its release is the answers' own bytes.
#[test]
fn an_acquisition_costs_the_server_no_stat_it_does_not_use() {
    if secure().is_some() || kerberos().is_some() {
        // Counted in the proxy's bytes: TLS records and SASL wrapping add their own.
        eprintln!("plaintext only: the proxy counts the protocol's bytes");
        return;
    }
    let proxy = zk_recipes::testing::FaultProxy::start(server().addr()).unwrap();
    let c = connect(&proxy.connect_string(), Duration::from_secs(30));
    let path = root("mutex-plain-answers");
    // The path made first, persistent (a container the lock made could be reaped, and made
    // again, between two cycles), and not through the lock's creates.
    c.create_with_parents(&path, b"", zk_recipes::CreateMode::Persistent)
        .unwrap();
    let mutex = InterProcessMutex::new(&c, &path).unwrap();
    const CYCLES: u64 = 20;
    let mut plain = 0u64;
    let before = proxy.replies_passed();
    for _ in 0..CYCLES {
        let held = mutex.acquire().unwrap();
        let node = held.node_path().to_owned();
        held.release().unwrap();
        let name = node.rsplit('/').next().unwrap();
        // Each answer: its length (4) and header (xid, zxid, error: 16); the create's, the
        // path made; the listing's, its one name; the delete's, nothing.
        plain += (4 + 16 + 4 + node.len() as u64) + (4 + 16 + 4 + 4 + name.len() as u64) + (4 + 16);
    }
    let sent = proxy.replies_passed() - before;
    // A keep-alive's answer (20 bytes) may fall in; a stat in each create's and listing's
    // answer would add 2 720.
    assert!(
        (plain..=plain + 40).contains(&sent),
        "the server sent {sent} bytes for {CYCLES} acquisitions and releases, whose plain \
         answers are {plain}"
    );
}

#[test]
fn contenders_acquire_in_the_order_they_queued() {
    let path = root("mutex-fifo");
    let holder_client = client();
    let holder = InterProcessMutex::new(&holder_client, &path).unwrap();
    let guard = holder.acquire().unwrap();
    let (order_tx, order_rx) = mpsc::channel();
    let mut waiters = Vec::new();
    for i in 0..5 {
        let (p, order_tx) = (path.clone(), order_tx.clone());
        waiters.push(thread::spawn(move || {
            let client = client();
            let mutex = InterProcessMutex::new(&client, &p).unwrap();
            let g = mutex.acquire().unwrap();
            order_tx.send(i).unwrap();
            drop(g);
        }));
        // The next contender starts only once this one is in line.
        let observer = holder_client.clone();
        wait_for(SOON, || {
            (children(&observer, &path).len() == i + 2).then_some(())
        })
        .expect("contender never queued");
    }
    drop(guard);
    let order: Vec<usize> = (0..5)
        .map(|_| order_rx.recv_timeout(SOON).unwrap())
        .collect();
    assert_eq!(order, [0, 1, 2, 3, 4]);
    for w in waiters {
        w.join().unwrap();
    }
}

#[test]
fn reentrant_holds_release_the_node_only_with_the_last_guard() {
    let path = root("mutex-reentrant");
    let c = client();
    let mutex = InterProcessMutex::new(&c, &path).unwrap();
    let g1 = mutex.acquire().unwrap();
    let g2 = mutex.acquire().unwrap();
    // Re-entry checks the hold on the server first, so it needs a round trip's time.
    let g3 = mutex.try_acquire_for(SOON).unwrap().unwrap();
    assert_eq!(
        children(&c, &path).len(),
        1,
        "re-entry must not create nodes"
    );
    assert_eq!(g1.node_path(), g3.node_path());
    drop(g3);
    drop(g1);
    assert_eq!(children(&c, &path).len(), 1);
    assert!(mutex.is_owned_by_current_thread());
    g2.release().unwrap();
    assert!(children(&c, &path).is_empty());
    assert!(!mutex.is_acquired_in_this_process());
}

#[test]
fn another_thread_neither_shares_nor_releases_a_hold() {
    let path = root("mutex-foreign");
    let c = client();
    let mutex = Arc::new(InterProcessMutex::new(&c, &path).unwrap());
    let guard = mutex.acquire().unwrap();
    let m = mutex.clone();
    // Release goes only through guards, and a guard stays on its thread: another thread can
    // only contend, and finds the lock busy.
    let other = thread::spawn(move || {
        (
            m.is_owned_by_current_thread(),
            m.try_acquire().unwrap().is_some(),
        )
    })
    .join()
    .unwrap();
    assert_eq!(other, (false, false));
    assert!(guard.is_held());
    assert_eq!(children(&c, &path).len(), 1);
    drop(guard);
    assert!(children(&c, &path).is_empty());
}

#[test]
fn holder_id_and_participants_are_readable_by_others() {
    let path = root("mutex-holder");
    let a = client();
    let mutex =
        InterProcessMutex::with_options(&a, &path, LockOptions::new().holder_id("job-42@host-a"))
            .unwrap();
    let guard = mutex.acquire().unwrap();
    let b = client();
    let other = InterProcessMutex::new(&b, &path).unwrap();
    assert_eq!(
        other.current_holder().unwrap().as_deref(),
        Some("job-42@host-a")
    );
    let nodes = other.participant_nodes().unwrap();
    assert_eq!(nodes, vec![guard.node_path().to_string()]);
    let name = nodes[0].rsplit('/').next().unwrap();
    assert!(name.starts_with("_c_") && name.contains("-lock-"), "{name}");
    assert_eq!(session_of(name), a.session_id());
}

#[test]
fn a_timed_out_attempt_leaves_no_node_and_the_lock_stays_usable() {
    let path = root("mutex-timeout");
    let c = client();
    let holder = InterProcessMutex::new(&c, &path).unwrap();
    let guard = holder.acquire().unwrap();
    let other_client = client();
    let other = InterProcessMutex::new(&other_client, &path).unwrap();
    assert!(other
        .try_acquire_for(Duration::from_millis(200))
        .unwrap()
        .is_none());
    assert!(other.try_acquire().unwrap().is_none());
    assert_eq!(
        children(&c, &path).len(),
        1,
        "only the holder's node remains"
    );
    assert_eq!(other.metrics().timeouts, 2);
    drop(guard);
    assert!(other.try_acquire().unwrap().is_some());
}

#[test]
fn a_waiter_that_gives_up_in_the_middle_does_not_break_the_order() {
    let path = root("mutex-middle");
    let c = client();
    let holder = InterProcessMutex::new(&c, &path).unwrap();
    let guard = holder.acquire().unwrap();
    let (order_tx, order_rx) = mpsc::channel();
    let spawn_waiter = |name: &'static str, patience: Option<Duration>| {
        let (path, order_tx) = (path.clone(), order_tx.clone());
        thread::spawn(move || {
            let client = client();
            let mutex = InterProcessMutex::new(&client, &path).unwrap();
            let got = match patience {
                Some(p) => mutex.try_acquire_for(p).unwrap(),
                None => Some(mutex.acquire().unwrap()),
            };
            order_tx.send((name, got.is_some())).unwrap();
        })
    };
    let first = spawn_waiter("first", None);
    wait_for(SOON, || (children(&c, &path).len() == 2).then_some(())).unwrap();
    let quitter = spawn_waiter("quitter", Some(Duration::from_millis(300)));
    wait_for(SOON, || (children(&c, &path).len() == 3).then_some(())).unwrap();
    let last = spawn_waiter("last", None);
    wait_for(SOON, || (children(&c, &path).len() == 4).then_some(())).unwrap();

    assert_eq!(order_rx.recv_timeout(SOON).unwrap(), ("quitter", false));
    drop(guard);
    assert_eq!(order_rx.recv_timeout(SOON).unwrap(), ("first", true));
    assert_eq!(order_rx.recv_timeout(SOON).unwrap(), ("last", true));
    for t in [first, quitter, last] {
        t.join().unwrap();
    }
    assert!(children(&c, &path).is_empty());
}

#[test]
fn the_lock_path_is_empty_after_all_guards_drop_and_clients_close() {
    let path = root("mutex-clean");
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let path = path.clone();
            thread::spawn(move || {
                let client = client();
                let mutex = InterProcessMutex::new(&client, &path).unwrap();
                for _ in 0..5 {
                    let _g = mutex.acquire().unwrap();
                }
                let _kept = mutex.acquire().unwrap();
                client.close();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(children(&client(), &path).is_empty());
}

#[test]
fn semaphore_mutex_is_not_reentrant_and_may_be_released_by_another_thread() {
    fn is_send<T: Send>() {}
    is_send::<zk_recipes::SemaphoreLease>();
    let path = root("semaphore-mutex");
    let c = client();
    let mutex = InterProcessSemaphoreMutex::new(&c, &path).unwrap();
    let lease = mutex.acquire().unwrap();
    assert!(
        mutex
            .try_acquire_for(Duration::from_millis(300))
            .unwrap()
            .is_none(),
        "the same thread must not get it twice"
    );
    thread::spawn(move || lease.release().unwrap())
        .join()
        .unwrap();
    let again = mutex.try_acquire_for(SOON).unwrap();
    assert!(again.is_some());
    drop(again);
    assert!(children(&c, &format!("{path}/leases")).is_empty());
    assert!(children(&c, &format!("{path}/locks")).is_empty());
}

#[test]
fn a_semaphore_with_three_leases_never_has_more_than_three_holders() {
    let path = root("semaphore-3");
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (path, inside, most) = (path.clone(), inside.clone(), most.clone());
            thread::spawn(move || {
                let client = client();
                let sem = InterProcessSemaphoreV2::new(&client, &path, 3).unwrap();
                for _ in 0..10 {
                    let _lease = sem.acquire().unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    thread::sleep(Duration::from_millis(2));
                    inside.fetch_sub(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 3, "{most} holders at once");
    assert!(children(&client(), &format!("{path}/leases")).is_empty());
}

#[test]
fn three_leases_are_held_at_once_and_a_fourth_waits_for_one_of_them() {
    let path = root("semaphore-share");
    let clients: Vec<Client> = (0..4).map(|_| client()).collect();
    let sems: Vec<_> = clients
        .iter()
        .map(|c| InterProcessSemaphoreV2::new(c, &path, 3).unwrap())
        .collect();
    let held: Vec<_> = sems[..3].iter().map(|s| s.acquire().unwrap()).collect();
    assert!(held.iter().all(|l| l.is_held()));
    assert!(
        sems[3].try_acquire().unwrap().is_none(),
        "a fourth lease out of three"
    );
    let (tx, rx) = mpsc::channel();
    let fourth = sems[3].clone();
    let waiter = thread::spawn(move || tx.send(fourth.acquire().unwrap().release()).unwrap());
    drop(held.into_iter().next());
    rx.recv_timeout(SOON)
        .expect("the fourth never got the freed lease")
        .unwrap();
    waiter.join().unwrap();
}

#[test]
fn revoke_calls_the_holders_listener() {
    let path = root("mutex-revoke");
    let c = client();
    let mutex = InterProcessMutex::new(&c, &path).unwrap();
    let (tx, rx) = mpsc::channel();
    mutex.make_revocable(move |node| tx.send(node.to_string()).unwrap());
    let guard = mutex.acquire().unwrap();
    let other = client();
    revoke(&other, guard.node_path()).unwrap();
    assert_eq!(rx.recv_timeout(SOON).unwrap(), guard.node_path());
    drop(guard);
    assert!(children(&c, &path).is_empty());
}

#[test]
fn a_revocation_listener_may_wait_for_the_release_it_asked_for() {
    let path = root("mutex-revoke-wait");
    let c = client();
    let mutex = InterProcessMutex::new(&c, &path).unwrap();
    let (ask_tx, ask_rx) = mpsc::channel::<mpsc::Sender<()>>();
    let (heard_tx, heard_rx) = mpsc::channel();
    // The listener asks the holder to let go and waits until it has.
    mutex.make_revocable(move |_node| {
        let (done_tx, done_rx) = mpsc::channel();
        ask_tx.send(done_tx).unwrap();
        done_rx.recv().unwrap();
        heard_tx.send(()).unwrap();
    });
    let guard = mutex.acquire().unwrap();
    let node = guard.node_path().to_string();
    revoke(&client(), &node).unwrap();
    let done = ask_rx.recv_timeout(SOON).expect("the listener never ran");
    drop(guard); // must not wait for the listener, which waits for this
    done.send(()).unwrap();
    heard_rx
        .recv_timeout(SOON)
        .expect("the listener never saw its release");
    assert!(children(&c, &path).is_empty());
    // The next hold is revocable too, by the same thread of the lock.
    let again = mutex.acquire().unwrap();
    revoke(&client(), again.node_path()).unwrap();
    let done = ask_rx
        .recv_timeout(SOON)
        .expect("the second revoke was not heard");
    drop(again);
    done.send(()).unwrap();
    heard_rx.recv_timeout(SOON).unwrap();
}

#[test]
fn metrics_count_acquisitions_waits_and_holds() {
    let path = root("mutex-metrics");
    let c = client();
    let mutex = InterProcessMutex::new(&c, &path).unwrap();
    for _ in 0..3 {
        let _g = mutex.acquire().unwrap();
        let _again = mutex.acquire().unwrap(); // re-entry is not an acquisition
    }
    let m = mutex.metrics();
    assert_eq!(m.acquisitions, 3);
    assert_eq!(m.wait.count, 3);
    assert_eq!(m.hold.count, 3);
    assert_eq!(m.timeouts, 0);
    assert_eq!(m.losses, 0);
}

/// The sends that must not wait (a hold's node watch set by its first check, the delete of a
/// timed-out waiter's node) go out on the caller's thread as one try that does not block, and
/// never cost the connection (reviewer's finding: over TLS each one tore it, so every check
/// and every timed-out acquire meant a reconnect).
#[test]
fn sends_that_must_not_wait_keep_the_connection() {
    let path = root("no-wait-sends");
    let c = client();
    let other = client();
    let mutex = InterProcessMutex::new(&c, &path).unwrap();
    let guard = mutex.acquire().unwrap();
    assert!(guard.is_held());
    guard.check().unwrap();
    drop(guard);
    let theirs = InterProcessMutex::new(&other, &path).unwrap();
    let held = theirs.acquire().unwrap();
    for _ in 0..3 {
        assert!(mutex
            .try_acquire_for(Duration::from_millis(50))
            .unwrap()
            .is_none());
    }
    drop(held);
    // A round trip after them all: the connection they went out on is still the first.
    assert!(c.exists(&path).unwrap().is_some());
    let m = c.metrics();
    assert_eq!((m.connections, m.suspensions), (1, 0), "{m:?}");
}

/// A semaphore's wait runs from the caller's call: the time in line for its internal mutex
/// counts (reviewer's finding: it was counted from the lease step, after the mutex).
#[test]
fn a_semaphore_s_wait_counts_its_time_in_line_for_the_internal_mutex() {
    let path = root("semaphore-wait-metrics");
    let c = client();
    let other = client();
    let semaphore = InterProcessSemaphoreMutex::new(&c, &path).unwrap();
    // Another process in line for the internal mutex first (the same protocol, on its path).
    let internal = InterProcessMutex::new(&other, &format!("{path}/locks")).unwrap();
    let blocker = internal.acquire().unwrap();
    thread::scope(|s| {
        let waiter = s.spawn(|| semaphore.acquire().map(drop));
        let queued = wait_for(SOON, || {
            (other.children(&format!("{path}/locks")).unwrap().len() == 2).then(Instant::now)
        })
        .expect("the acquire never queued");
        // The blocker holds for a while the waiter is known to be in line.
        const IN_LINE: Duration = Duration::from_millis(300);
        assert!(
            wait_for(IN_LINE, || waiter.is_finished().then_some(())).is_none(),
            "took the semaphore past the internal mutex"
        );
        let released = Instant::now();
        drop(blocker);
        waiter.join().unwrap().unwrap();
        let m = semaphore.metrics();
        assert_eq!(m.wait.count, 1);
        assert!(
            m.wait.total >= released - queued,
            "waited {:?}, in line at least {:?}",
            m.wait.total,
            released - queued
        );
    });
}

/// Without the fast handoff, a waiter lists again when the node ahead goes: the reader thread
/// sends that listing before the waiter's thread wakes. With it, a sole blocker's deletion
/// hands the lock over with no listing at all, and none is sent ahead.
#[rstest]
#[case::relisting(false, 5)]
#[case::fast_handoff(true, 4)]
fn the_listing_after_the_predecessor_goes_is_sent_before_the_waiter_wakes(
    #[case] fast_handoff: bool,
    #[case] requests: u64,
) {
    let path = root(&format!("mutex-prefetch-{fast_handoff}"));
    let (holder, waiter) = (client(), client());
    let first = InterProcessMutex::new(&holder, &path).unwrap();
    let held = first.acquire().unwrap();
    let (watching_tx, watching_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let go_rx = std::sync::Mutex::new(go_rx);
    let options = LockOptions::new()
        .fast_handoff(fast_handoff)
        .testing_after_watch_set(move |_| {
            // The waiter's thread stops here, before it waits, until told to go on.
            watching_tx.send(()).unwrap();
            go_rx.lock().unwrap().recv().unwrap();
        });
    let mutex = InterProcessMutex::with_options(&waiter, &path, options).unwrap();
    let before = waiter.metrics().requests;
    let t = thread::spawn(move || drop(mutex.acquire().unwrap()));
    watching_rx.recv_timeout(SOON).unwrap();
    // Create, listing, watch on the holder's node.
    assert_eq!(waiter.metrics().requests - before, 3);
    drop(held);
    if !fast_handoff {
        // The waiter's thread is still stopped, yet its listing goes out: the reader thread
        // sent it the moment the deletion was notified.
        wait_for(SOON, || {
            (waiter.metrics().requests - before == 4).then_some(())
        })
        .expect("no listing went out while the waiter's thread was stopped");
    }
    go_tx.send(()).unwrap();
    t.join().unwrap();
    // No other request before the hold (the waiter took the listing sent for it), then the
    // release.
    assert_eq!(waiter.metrics().requests - before, requests);
}

/// A waiter that watched one node, then (that one gone) the next ahead, and gives up at its
/// deadline, takes back its watch on each: the client is left holding no watcher of it.
#[test]
fn a_waiter_that_watched_two_nodes_in_turn_and_gives_up_leaves_no_watcher_behind() {
    let (first, second, third) = (client(), client(), client());
    let path = root("mutex-two-watches");
    let holding = InterProcessMutex::new(&first, &path).unwrap();
    let held = holding.acquire().unwrap();
    let queued = InterProcessMutex::new(&second, &path).unwrap();
    let second_in_line = thread::spawn(move || queued.acquire().map(drop));
    wait_for(SOON, || (children(&first, &path).len() == 2).then_some(()))
        .expect("the second never queued");
    let (watched_tx, watched_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (watched_tx, go_rx) = (
        std::sync::Mutex::new(watched_tx),
        std::sync::Mutex::new(go_rx),
    );
    let options = LockOptions::new().testing_after_watch_set(move |watched| {
        // The waiter's thread stops here after each watch it sets, until told to go on.
        watched_tx.lock().unwrap().send(watched.to_owned()).unwrap();
        let _ = go_rx.lock().unwrap().recv();
    });
    let mutex = InterProcessMutex::with_options(&third, &path, options).unwrap();
    let third_in_line = thread::spawn(move || {
        mutex
            .try_acquire_for(Duration::from_secs(10))
            .map(|g| g.is_some())
    });
    let on_second = watched_rx.recv_timeout(SOON).expect("no first watch");
    // The second leaves the line (its session closes) while the third watches it.
    second.close();
    assert!(second_in_line.join().unwrap().is_err());
    go_tx.send(()).unwrap();
    let on_first = watched_rx.recv_timeout(SOON).expect("no second watch");
    assert_ne!(on_second, on_first, "the third watched one node only");
    go_tx.send(()).unwrap();
    assert!(!third_in_line.join().unwrap().unwrap());
    assert_eq!(third.testing_watch_count(), 0, "watchers left behind");
    drop(held);
}

#[test]
fn a_waiter_that_times_out_two_hundred_times_leaves_no_watcher_behind() {
    let holder_client = client();
    let waiter = client();
    let path = root("timeouts");
    let holder = InterProcessMutex::new(&holder_client, &path).unwrap();
    let guard = holder.acquire().unwrap();
    let mutex = InterProcessMutex::new(&waiter, &path).unwrap();
    for _ in 0..200 {
        assert!(mutex
            .try_acquire_for(Duration::from_millis(10))
            .unwrap()
            .is_none());
    }
    assert_eq!(waiter.testing_watch_count(), 0, "watchers left behind");
    // Our nodes go too (some through the janitor, which finishes them in the background).
    wait_for(SOON, || (children(&waiter, &path).len() == 1).then_some(()))
        .expect("the timed-out attempts left nodes behind");
    let before = waiter.metrics().watch_events;
    drop(guard);
    let again = mutex.try_acquire_for(SOON).unwrap();
    assert!(again.is_some());
    assert!(
        waiter.metrics().watch_events - before <= 1,
        "the release woke the waiter {} times",
        waiter.metrics().watch_events - before
    );
}

/// A lease that must wait sets its watch on the line with the listing that came with its
/// create, and is woken by it: one listing more when a lease is freed, and nothing in between.
#[test]
fn a_waiting_semaphore_lease_is_woken_by_the_watch_its_first_listing_set() {
    let (holder, waiter) = (client(), client());
    let path = root("semaphore-wait-requests");
    let held = InterProcessSemaphoreV2::new(&holder, &path, 1).unwrap();
    let sem = InterProcessSemaphoreV2::new(&waiter, &path, 1).unwrap();
    drop(sem.acquire().unwrap()); // its paths exist from here on
    let lease = held.acquire().unwrap();
    let before = waiter.metrics().requests;
    let (tx, rx) = mpsc::channel();
    let acquiring = thread::spawn(move || tx.send(sem.acquire().map(|l| l.release())).unwrap());
    assert!(
        wait_for(SOON, || (held.participant_nodes().ok()?.len() == 2)
            .then_some(()))
        .is_some(),
        "the waiter never queued"
    );
    drop(lease);
    rx.recv_timeout(SOON)
        .expect("the waiter never got the freed lease")
        .unwrap()
        .unwrap();
    acquiring.join().unwrap();
    // The internal lock's create and listing, the lease's create and (watched) listing, the
    // listing once the watch fired, the internal lock's delete, and the lease's delete.
    assert_eq!(waiter.metrics().requests - before, 7);
}

#[test]
fn an_uncontended_semaphore_lease_sends_each_create_with_its_listing() {
    let c = client();
    let path = root("semaphore-requests");
    let sem = InterProcessSemaphoreV2::new(&c, &path, 2).unwrap();
    drop(sem.acquire().unwrap()); // its paths exist from here on
    let before = c.metrics().requests;
    let lease = sem.acquire().unwrap();
    // The internal lock's create and listing, the lease's create and (watched) listing, and
    // the internal lock's delete: two round trips to the lease, one to let the lock go.
    assert_eq!(c.metrics().requests - before, 5);
    drop(lease);
}
