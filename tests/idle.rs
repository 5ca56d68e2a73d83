//! No thread of the library wakes on a timer with nothing to do: while a client, a held lock
//! with a revocation listener, a leader latch and a waiting semaphore contender sit idle, their
//! threads sleep until real work comes (pings only, at the session's heartbeat).
//! Its own test binary, so no other test's threads are counted.

mod common;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use common::*;
use zk_recipes::{InterProcessMutex, InterProcessSemaphoreMutex, LeaderLatch, LockOptions};

/// Voluntary context switches (wake-ups after sleeping) of the library's threads, by thread id.
fn wakeups() -> HashMap<String, (String, u64)> {
    let mut out = HashMap::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let name = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let name = name.trim().to_string();
        if !name.starts_with("zk-") {
            continue;
        }
        let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        let switches = status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        out.insert(
            t.file_name().to_string_lossy().into_owned(),
            (name, switches),
        );
    }
    out
}

/// The tests that count wake-ups run one at a time: each would count the other's.
static ALONE: Mutex<()> = Mutex::new(());

#[test]
fn idle_library_threads_do_not_wake_up() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let s = server();
    // A 30 s session pings every 6.7 s: a 2 s window sees at most one ping per client.
    let client = connect(&s.connect_string(), Duration::from_secs(30));
    let other = connect(&s.connect_string(), Duration::from_secs(30));
    let path = root("idle");
    let mutex = InterProcessMutex::new(&client, &path).unwrap();
    mutex.make_revocable(|_| {});
    let _guard = mutex.acquire().unwrap();
    let latch = LeaderLatch::new(&client, &format!("{path}-leader"), "a").unwrap();
    latch.start().unwrap();
    assert!(latch.await_leadership(SOON).unwrap());
    let second = LeaderLatch::new(&other, &format!("{path}-leader"), "b").unwrap();
    second.start().unwrap();
    let sem = InterProcessSemaphoreMutex::new(&client, &format!("{path}-sem")).unwrap();
    let _lease = sem.acquire().unwrap();
    let waiting_sem = InterProcessSemaphoreMutex::new(&other, &format!("{path}-sem")).unwrap();
    let waiter = std::thread::spawn(move || waiting_sem.try_acquire_for(Duration::from_secs(4)));
    // Everything is in its wait once the second latch and the second lease are in line.
    wait_for(SOON, || {
        (second.participants().ok()?.len() == 2).then_some(())
    })
    .expect("the second latch never joined");
    let leases = format!("{path}-sem/leases");
    wait_for(SOON, || {
        (other.children(&leases).ok()?.len() == 2).then_some(())
    })
    .expect("the second lease never queued");
    // The issue-37 recipes' threads, settled: a kept node and a worker's share.
    let node = zk_recipes::nodes::PersistentNode::new(
        &client,
        &format!("{path}-node"),
        zk_recipes::nodes::NodeMode::Ephemeral,
        b"",
    )
    .unwrap();
    node.start().unwrap();
    assert!(node.wait_for_initial_create(SOON).unwrap());
    let share =
        zk_recipes::partition::Partitioner::new(&other, &format!("{path}-share"), "w", ["a", "b"])
            .unwrap();
    share.start().unwrap();
    assert!(share.wait_settled(SOON));

    let before = wakeups();
    // The measurement window (not a synchronisation): wake-ups are counted over it.
    let _ = crossbeam_channel::after(Duration::from_secs(2)).recv();
    let after = wakeups();
    let mut busy = Vec::new();
    for (tid, (name, n)) in &after {
        if let Some((_, m)) = before.get(tid) {
            // A ping costs the I/O thread a wake-up or two. Another thread may wake once
            // as the window opens (parking after it said it had settled, it may meet a lock
            // the test holds); a look or a pass more (an event and at least one reply) is
            // work the thread did not need: a recipe that settled on an event its own work
            // was still to cause.
            let allowed = if name == "zk-io" { 3 } else { 1 };
            if n - m > allowed {
                busy.push(format!("{name} ({tid}): {} wake-ups", n - m));
            }
        }
    }
    assert!(before.len() >= 8, "threads seen: {before:?}");
    assert!(busy.is_empty(), "threads woke while idle: {busy:?}");
    assert!(waiter.join().unwrap().unwrap().is_none());
}

/// The ids of the `zk-io` threads alive now.
fn io_threads() -> Vec<String> {
    let mut tids: Vec<String> = wakeups()
        .into_iter()
        .filter(|(_, (name, _))| name == "zk-io")
        .map(|(tid, _)| tid)
        .collect();
    tids.sort();
    tids
}

/// A waiter's wake-up (the notification that its predecessor is gone) is read by the waiting
/// thread itself: the client's I/O thread is not woken to read it and hand it over. That hop
/// woke a second thread on every contended handoff, the gap to a client with no background
/// thread (issue 22). Over TLS the I/O thread reads everything (the TLS state buffers
/// plaintext that a poll of the socket cannot see), so there the hop stays, as documented:
/// asserted too, in the secure run.
#[test]
fn a_waiting_thread_reads_its_own_wake_up() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let s = server();
    // A 60 s session pings every 13 s: the handoffs below take far less.
    let holder = connect(&s.connect_string(), Duration::from_secs(60));
    let others = io_threads();
    let waiter = connect(&s.connect_string(), Duration::from_secs(60));
    let io: Vec<String> = io_threads()
        .into_iter()
        .filter(|t| !others.contains(t))
        .collect();
    assert_eq!(io.len(), 1, "the waiter's I/O thread: {io:?}");
    let io_wakeups = || wakeups().get(&io[0]).map_or(0, |(_, n)| *n);
    let path = root("own-wake-up");
    let held = InterProcessMutex::new(&holder, &path).unwrap();
    let waiting = InterProcessMutex::new(&waiter, &path).unwrap();
    const HANDOFFS: u64 = 10;
    let mut woke = 0;
    for _ in 0..HANDOFFS {
        let guard = held.acquire().unwrap();
        std::thread::scope(|scope| {
            let acquired = scope.spawn(|| waiting.acquire().map(drop));
            wait_for(SOON, || {
                (holder.children(&path).ok()?.len() == 2).then_some(())
            })
            .expect("the waiter never queued");
            let before = io_wakeups();
            drop(guard);
            acquired.join().unwrap().unwrap();
            woke += io_wakeups() - before;
        });
    }
    if secure().is_some() {
        // Through the I/O thread each handoff wakes it at least once.
        assert!(
            woke >= HANDOFFS,
            "over TLS the waiter's I/O thread woke only {woke} times over {HANDOFFS} handoffs"
        );
    } else {
        // The hop this rules out wakes the I/O thread on every handoff (10). What is counted
        // is voluntary context switches, which also count a block on a lock the waiter holds
        // (preempted there on a loaded machine): 3 was seen once in a full suite (its cause
        // not traced). Fewer than half the handoffs is no hop.
        assert!(
            woke < HANDOFFS / 2,
            "the waiter's I/O thread woke {woke} times over {HANDOFFS} handoffs"
        );
    }
}

/// A waiter that is not next in line when it queues watches its predecessor and, when that
/// goes, is sent the line's listing by whoever reads the notification. It reads that answer in
/// the same turn as its wake-up: it does not give the turn back and take it again as a caller
/// to read it. Each turn costs the I/O thread's registration a disarming and an arming (two
/// system calls per contended acquisition; issue 22).
///
/// Counted per acquisition of the third in line: its create and listing (a turn), its watch
/// (a turn) and its wait (a turn, in which the wake-up and the listing are read). The turn a
/// caller took to read the prefetched listing made it four. Over TLS nobody but the I/O
/// thread reads, and no turn is counted.
#[test]
fn a_waiter_reads_its_prefetched_listing_in_the_turn_of_its_wake_up() {
    let s = server();
    let session = Duration::from_secs(60);
    let (first, second, third) = (
        connect(&s.connect_string(), session),
        connect(&s.connect_string(), session),
        connect(&s.connect_string(), session),
    );
    let path = root("prefetch-turn");
    let a = InterProcessMutex::new(&first, &path).unwrap();
    let b = InterProcessMutex::new(&second, &path).unwrap();
    let (watching, watch_set) = std::sync::mpsc::channel();
    let watching = std::sync::Mutex::new(watching);
    let options = LockOptions::new().testing_after_watch_set(move |_| {
        let _ = watching.lock().unwrap().send(());
    });
    let c = InterProcessMutex::with_options(&third, &path, options).unwrap();
    const ROUNDS: u64 = 10;
    let before = third.testing_reader_turns();
    for _ in 0..ROUNDS {
        let held = a.acquire().unwrap();
        std::thread::scope(|scope| {
            let (release_b, b_released) = std::sync::mpsc::channel::<()>();
            let b = &b;
            let second_in_line = scope.spawn(move || {
                let guard = b.acquire()?;
                let _ = b_released.recv();
                drop(guard);
                Ok::<_, zk_recipes::Error>(())
            });
            wait_for(SOON, || {
                (first.children(&path).ok()?.len() == 2).then_some(())
            })
            .expect("the second never queued");
            let third_in_line = scope.spawn(|| c.acquire().map(drop));
            // Its watch on the second is set before the second goes.
            watch_set
                .recv_timeout(SOON)
                .expect("the third never watched");
            drop(held);
            release_b.send(()).unwrap();
            second_in_line.join().unwrap().unwrap();
            third_in_line.join().unwrap().unwrap();
        });
    }
    // Its releases took a turn each as well (a delete and its answer).
    let turns = third.testing_reader_turns() - before;
    assert!(
        turns <= ROUNDS * 4 + 2,
        "the third in line took {turns} turns over {ROUNDS} acquisitions and releases"
    );
}

/// Voluntary context switches of the calling thread.
fn own_wakeups() -> u64 {
    std::fs::read_to_string("/proc/thread-self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

/// A waiter that reads its client's connection gives the turn to the first other thread of
/// the client that needs it, and is not woken again by that thread's traffic: the other
/// thread reads its own answers (a reviewer's finding: each of them went through the waiter,
/// a thread hop per call and a wake-up of the waiter for every answer).
#[test]
fn a_waiting_thread_is_not_woken_by_its_clients_other_calls() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let s = server();
    let holder = connect(&s.connect_string(), Duration::from_secs(60));
    let client = connect(&s.connect_string(), Duration::from_secs(60));
    let path = root("waiter-and-calls");
    let held = InterProcessMutex::new(&holder, &path).unwrap();
    let guard = held.acquire().unwrap();
    let waiting = InterProcessMutex::new(&client, &path).unwrap();
    std::thread::scope(|scope| {
        // A new thread: its count of wake-ups starts at its birth. It reports its own count
        // when its acquire returns: what woke it while it waited.
        let waiter = scope.spawn(|| {
            let acquired = waiting.acquire().map(drop);
            (acquired, own_wakeups())
        });
        wait_for(SOON, || {
            (holder.children(&path).ok()?.len() == 2).then_some(())
        })
        .expect("the waiter never queued");
        const CALLS: u64 = 200;
        for _ in 0..CALLS {
            client.exists("/").unwrap();
        }
        drop(guard);
        let (acquired, woke) = waiter.join().unwrap();
        acquired.unwrap();
        // Its own requests and its wake-up cost a handful.
        assert!(
            woke < CALLS / 4,
            "the waiter woke {woke} times while its client made {CALLS} calls"
        );
    });
}

/// The last client xid the server saw on the connection of session `id` (`cons`); pings carry
/// no xid of their own, so this moves only with requests.
fn last_cxid(s: &zk_recipes::testing::TestingServer, id: zk_recipes::SessionId) -> Option<u64> {
    let cons = s.four_letter("cons").ok()?;
    let line = cons
        .lines()
        .find(|l| l.contains(&format!("sid=0x{:x},", id.0)))?;
    let hex = line.split("lcxid=0x").nth(1)?.split([',', ')']).next()?;
    u64::from_str_radix(hex, 16).ok()
}

/// The lease heartbeat is a write through the leader: a client that holds nothing sends none
/// (the ensemble pays nothing for idle clients), one that holds a lock keeps sending them.
#[test]
fn only_a_client_that_holds_something_sends_lease_heartbeats() {
    let s = server();
    let session = Duration::from_secs(2);
    let idle = connect(&s.connect_string(), session);
    let holder = connect(&s.connect_string(), session);
    let mutex = InterProcessMutex::new(&holder, &root("heartbeats")).unwrap();
    let _guard = mutex.acquire().unwrap();
    let idle_id = idle.session_id().unwrap();
    let holder_id = holder.session_id().unwrap();
    let idle_before = last_cxid(s, idle_id).expect("the idle client's connection");
    let holder_before = last_cxid(s, holder_id).expect("the holder's connection");
    // Two heartbeats of the holder (one per half session at most) span the window.
    wait_for(Duration::from_secs(10), || {
        (last_cxid(s, holder_id)? >= holder_before + 2).then_some(())
    })
    .expect("the holder sent no heartbeats");
    assert_eq!(
        last_cxid(s, idle_id),
        Some(idle_before),
        "a client that holds nothing sent a request"
    );
}
