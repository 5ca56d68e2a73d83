//! No thread of the library wakes on a timer with nothing to do: while a client, a held lock
//! with a revocation listener, a leader latch and a waiting semaphore contender sit idle, their
//! threads sleep until real work comes (pings only, at the session's heartbeat).
//! Its own test binary, so no other test's threads are counted.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use zk_recipes::{InterProcessMutex, InterProcessSemaphoreMutex, LeaderLatch};

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

#[test]
fn idle_library_threads_do_not_wake_up() {
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

    let before = wakeups();
    // The measurement window (not a synchronisation): wake-ups are counted over it.
    let _ = crossbeam_channel::after(Duration::from_secs(2)).recv();
    let after = wakeups();
    let mut busy = Vec::new();
    for (tid, (name, n)) in &after {
        if let Some((_, m)) = before.get(tid) {
            // A ping costs the I/O thread a wake-up or two; nothing else should wake.
            if n - m > 3 {
                busy.push(format!("{name} ({tid}): {} wake-ups", n - m));
            }
        }
    }
    assert!(before.len() >= 5, "threads seen: {before:?}");
    assert!(busy.is_empty(), "threads woke while idle: {busy:?}");
    assert!(waiter.join().unwrap().unwrap().is_none());
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
