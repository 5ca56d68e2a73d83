//! The lock core under faults: lost create answers, lost watches, the seed article's race, and
//! a holder whose session expires while it thinks it holds the lock.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use common::*;
use zk_recipes::lock::{FencingGate, InterProcessMutex, LockOptions};
use zk_recipes::{Client, ConnectionState, Error};

fn children(c: &Client, path: &str) -> Vec<String> {
    let mut v = c.children(path).unwrap_or_default();
    v.sort();
    v
}

#[test]
fn a_create_whose_answer_is_lost_is_adopted_not_repeated() {
    let f = Arc::new(faulty());
    let observer = connect(&f.server.connect_string(), Duration::from_secs(10));
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(10));
    let path = "/lost-answer";
    observer.ensure_path(path).unwrap();
    let creates = Arc::new(AtomicUsize::new(0));
    let (armed_tx, armed_rx) = mpsc::channel();
    let options = {
        let (f, creates) = (f.clone(), creates.clone());
        LockOptions::new().testing_before_create(move |_| {
            // The first create reaches the server, but its answer is held back.
            if creates.fetch_add(1, Ordering::SeqCst) == 0 {
                f.proxy.hold_replies();
                armed_tx.send(()).unwrap();
            }
        })
    };
    let mutex = InterProcessMutex::with_options(&client, path, options).unwrap();
    let cutter = {
        let f = f.clone();
        let observer = observer.clone();
        thread::spawn(move || {
            armed_rx.recv_timeout(SOON).unwrap();
            // Cut only once the server has made the node (so its answer is surely lost).
            wait_for(SOON, || {
                (children(&observer, path).len() == 1).then_some(())
            })
            .expect("the create never reached the server");
            f.proxy.cut();
            f.proxy.heal();
        })
    };
    let guard = mutex
        .try_acquire_for(SOON)
        .unwrap()
        .expect("acquired after the loss");
    cutter.join().unwrap();

    assert_eq!(
        creates.load(Ordering::SeqCst),
        1,
        "the create was repeated, not adopted"
    );
    let nodes = children(&observer, path);
    assert_eq!(nodes.len(), 1, "an orphan or a second node: {nodes:?}");
    assert!(guard.node_path().ends_with(&nodes[0]));
    assert!(guard.is_held());
    drop(guard);
    assert!(children(&observer, path).is_empty());
}

#[test]
fn a_waiter_whose_watch_is_lost_still_acquires_after_reconnecting() {
    let f = faulty();
    let holder_client = connect(&f.server.connect_string(), Duration::from_secs(10));
    let waiter_client = connect(&f.proxy.connect_string(), Duration::from_secs(10));
    let path = "/lost-watch";
    let holder = InterProcessMutex::new(&holder_client, path).unwrap();
    let guard = holder.acquire().unwrap();
    let (done_tx, done_rx) = mpsc::channel();
    let waiter = thread::spawn(move || {
        let mutex = InterProcessMutex::new(&waiter_client, path).unwrap();
        let g = mutex.try_acquire_for(SOON).unwrap();
        done_tx.send(g.is_some()).unwrap();
    });
    wait_for(SOON, || {
        (children(&holder_client, path).len() == 2).then_some(())
    })
    .unwrap();

    // The release's notification is held back, then dropped with the connection.
    f.proxy.blackhole();
    drop(guard);
    f.proxy.cut();
    f.proxy.heal();

    assert!(
        done_rx.recv_timeout(SOON).unwrap(),
        "the waiter never acquired"
    );
    waiter.join().unwrap();
    assert!(children(&holder_client, path).is_empty());
}

#[test]
fn the_seed_race_forced_a_predecessor_deleted_between_watch_and_wait_still_wakes_the_waiter() {
    let path = root("seed-race");
    let holder_client = connect(&server().connect_string(), Duration::from_secs(10));
    let holder = InterProcessMutex::new(&holder_client, &path).unwrap();
    let guard = holder.acquire().unwrap();
    let deleter = connect(&server().connect_string(), Duration::from_secs(10));
    let fired = Arc::new(AtomicBool::new(false));
    let options = {
        let fired = fired.clone();
        LockOptions::new().testing_after_watch_set(move |watched| {
            // Between "watch set" and "wait begins", the predecessor vanishes.
            if !fired.swap(true, Ordering::SeqCst) {
                deleter.delete(watched).unwrap();
            }
        })
    };
    let waiter_client = connect(&server().connect_string(), Duration::from_secs(10));
    let waiter = InterProcessMutex::with_options(&waiter_client, &path, options).unwrap();
    let got = waiter.try_acquire_for(SOON).unwrap();
    assert!(
        fired.load(Ordering::SeqCst),
        "the hook never ran: no wait happened"
    );
    assert!(got.is_some(), "the waiter missed its wake-up");
    drop(got);
    drop(guard); // its node is already gone: NoNode counts as released
}

#[test]
fn an_expired_holder_knows_from_check_before_events_and_its_token_is_fenced_off() {
    let f = faulty();
    let zombie_client = connect(&f.proxy.connect_string(), Duration::from_millis(1500));
    let path = "/zombie";
    let zombie_lock = InterProcessMutex::new(&zombie_client, path).unwrap();
    let zombie = zombie_lock.acquire().unwrap();
    let gate = FencingGate::new();
    let old_token = zombie.fencing_token().unwrap();
    gate.admit(old_token).unwrap();
    let lost = zombie.lost();

    // The zombie pauses: the network holds its every byte.
    f.proxy.blackhole();
    wait_for(SOON, || zombie.check().is_err().then_some(())).expect("check() never failed");
    assert!(
        zombie.is_held(),
        "check() must fail before the loss event arrives (the event is late by design)"
    );
    assert!(zombie.run(|| ()).is_err());

    let other_client = connect(&f.server.connect_string(), Duration::from_secs(10));
    let other_lock = InterProcessMutex::new(&other_client, path).unwrap();
    let other = other_lock
        .try_acquire_for(SOON)
        .unwrap()
        .expect("the lock was never freed");
    let new_token = other.fencing_token().unwrap();
    assert!(new_token > old_token);
    gate.admit(new_token).unwrap();
    let refused = gate.admit(old_token).unwrap_err();
    assert_eq!(refused.highest, new_token);

    assert!(matches!(
        lost.recv_timeout(SOON),
        Err(crossbeam_channel::RecvTimeoutError::Disconnected)
    ));
    assert!(!zombie.is_held());
    f.proxy.heal();
    assert!(matches!(zombie.release(), Err(Error::SessionLost { .. })));
    assert_eq!(
        children(&other_client, path).len(),
        1,
        "the zombie deleted another's node"
    );
}

/// `used_before`: the waiter's lock was taken and released twice first, so its wait listens on
/// the subscription and channel the lock kept from then (they must hear this wait's news).
#[rstest::rstest]
#[case::first_use(false)]
#[case::used_before(true)]
fn a_waiter_whose_session_is_lost_gets_an_error_and_leaves_no_node(#[case] used_before: bool) {
    let f = faulty();
    let path = if used_before {
        "/lost-waiter-used"
    } else {
        "/lost-waiter"
    };
    let holder_client = connect(&f.server.connect_string(), Duration::from_secs(10));
    let holder = InterProcessMutex::new(&holder_client, path).unwrap();
    let waiter_client = connect(&f.proxy.connect_string(), Duration::from_millis(1500));
    let sub = waiter_client.subscribe();
    let (tx, rx) = mpsc::channel();
    let (waiting_tx, waiting_rx) = mpsc::channel();
    // Cut only once the waiter waits (its create answered, its watch set): a cut before the
    // create's answer is another case (no session to look for the node in).
    let options = LockOptions::new().testing_after_watch_set(move |_| {
        let _ = waiting_tx.send(());
    });
    let mutex = InterProcessMutex::with_options(&waiter_client, path, options).unwrap();
    if used_before {
        // A lock keeps a kit from its second acquire on.
        for _ in 0..2 {
            drop(mutex.acquire().unwrap());
        }
    }
    let _guard = holder.acquire().unwrap();
    thread::spawn(move || {
        tx.send(mutex.acquire().map(|_| ())).unwrap();
    });
    waiting_rx
        .recv_timeout(SOON)
        .expect("the waiter never waited");
    f.proxy.blackhole();
    let result = rx.recv_timeout(SOON).expect("the waiter never returned");
    assert!(
        matches!(result, Err(Error::SessionLost { .. })),
        "{result:?}"
    );
    f.proxy.heal();
    while sub.recv_timeout(SOON).expect("no new session").state != ConnectionState::Connected {}
    wait_for(SOON, || {
        (children(&holder_client, path).len() == 1).then_some(())
    })
    .expect("the lost waiter's node stayed");
}

#[test]
fn a_release_that_cannot_delete_now_is_finished_by_the_janitor_while_the_session_lives() {
    let f = faulty();
    let observer = connect(&f.server.connect_string(), Duration::from_secs(10));
    // Gives up on the delete at once, so only the janitor can finish it.
    let client = builder(&f.proxy.connect_string())
        .session_timeout(Duration::from_secs(10))
        .tick_time(Duration::from_millis(100))
        .connection_timeout(Duration::from_millis(300))
        .retry_policy(zk_recipes::RetryPolicy::never())
        .connect()
        .unwrap();
    let sub = client.subscribe();
    let session = client.session_id();
    let mutex = InterProcessMutex::new(&client, "/janitor").unwrap();
    let guard = mutex.acquire().unwrap();
    let node = guard.node_path().to_string();

    f.proxy.refuse();
    assert_eq!(
        sub.recv_timeout(SOON).unwrap().state,
        ConnectionState::Suspended
    );
    guard.release().unwrap();
    assert!(
        observer.exists(&node).unwrap().is_some(),
        "nothing could delete it yet"
    );

    f.proxy.heal();
    assert_eq!(
        sub.recv_timeout(SOON).unwrap().state,
        ConnectionState::Reconnected
    );
    wait_for(SOON, || {
        observer.exists(&node).unwrap().is_none().then_some(())
    })
    .expect("the janitor never deleted the released node");
    // Same session throughout: the node went by the janitor's delete, not with its session.
    assert_eq!(client.session_id(), session);
}

#[test]
fn a_create_answered_after_the_deadline_is_removed_by_the_janitor() {
    let f = faulty();
    let observer = connect(&f.server.connect_string(), Duration::from_secs(10));
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(20));
    let path = "/late-create";
    observer.ensure_path(path).unwrap();
    let session = client.session_id();
    let mutex = InterProcessMutex::new(&client, path).unwrap();
    // The create reaches the server, but its answer comes only after the caller gave up.
    f.proxy.hold_replies();
    let got = mutex.try_acquire_for(Duration::from_millis(300)).unwrap();
    assert!(got.is_none(), "held without an answer?");
    assert!(
        wait_children(&observer, path, SOON, |c| c.len() == 1),
        "the create never reached the server"
    );
    f.proxy.heal();
    assert!(
        wait_children(&observer, path, SOON, <[String]>::is_empty),
        "the node of the late-answered create was never removed"
    );
    // Same session throughout: the janitor deleted it when the answer came.
    assert_eq!(client.session_id(), session);
    drop(
        mutex
            .try_acquire_for(SOON)
            .unwrap()
            .expect("the lock is usable"),
    );
}

#[test]
fn with_lost_on_suspend_a_broken_connection_ends_the_hold_at_once() {
    let f = faulty();
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(10));
    let strict = InterProcessMutex::with_options(
        &client,
        "/strict",
        LockOptions::new().lost_on_suspend(true),
    )
    .unwrap();
    let relaxed = InterProcessMutex::new(&client, "/relaxed").unwrap();
    let strict_guard = strict.acquire().unwrap();
    let relaxed_guard = relaxed.acquire().unwrap();
    let sub = client.subscribe();

    f.proxy.cut();
    assert_eq!(
        sub.recv_timeout(SOON).unwrap().state,
        ConnectionState::Suspended
    );
    assert!(
        !strict_guard.is_held(),
        "SUSPENDED counts as lost under this policy"
    );
    assert!(matches!(
        strict_guard.lost().try_recv(),
        Err(crossbeam_channel::TryRecvError::Disconnected)
    ));
    assert!(relaxed_guard.is_held(), "by default only LOST ends a hold");
    assert_eq!(
        sub.recv_timeout(SOON).unwrap().state,
        ConnectionState::Reconnected
    );
    assert!(relaxed_guard.is_held());
    assert!(matches!(
        strict_guard.release(),
        Err(Error::SessionLost { .. })
    ));
    relaxed_guard.release().unwrap();
}

#[test]
fn try_acquire_for_returns_by_its_deadline_while_connections_are_refused() {
    let f = faulty();
    let holder_client = connect(&f.server.connect_string(), Duration::from_secs(10));
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(10));
    let path = "/refused";
    let holder = InterProcessMutex::new(&holder_client, path).unwrap();
    let _guard = holder.acquire().unwrap();
    let mutex = InterProcessMutex::new(&client, path).unwrap();
    let wait = Duration::from_secs(2);
    // Queued behind the holder when the connection goes: leaving must not wait for it.
    let (tx, rx) = mpsc::channel();
    let m = InterProcessMutex::new(&client, path).unwrap();
    thread::spawn(move || {
        let started = std::time::Instant::now();
        let r = m.try_acquire_for(wait).map(|g| g.is_some());
        tx.send((r, started.elapsed())).unwrap();
    });
    wait_for(SOON, || {
        (children(&holder_client, path).len() == 2).then_some(())
    })
    .expect("the waiter never queued");
    f.proxy.refuse();
    let (r, took) = rx.recv_timeout(SOON).unwrap();
    assert!(matches!(r, Ok(false) | Err(Error::Timeout { .. })), "{r:?}");
    let slack = Duration::from_millis(500);
    assert!(took <= wait + slack, "queued attempt took {took:?}");
    // Starting while refused.
    let started = std::time::Instant::now();
    let r = mutex.try_acquire_for(wait).map(|g| g.is_some());
    let took = started.elapsed();
    assert!(matches!(r, Ok(false) | Err(Error::Timeout { .. })), "{r:?}");
    assert!(took <= wait + slack, "attempt while refused took {took:?}");
}

#[test]
fn a_reentrant_acquire_after_the_hold_was_lost_fails_and_drops_the_dead_hold() {
    let f = faulty();
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(4));
    let other = connect(&f.server.connect_string(), Duration::from_secs(10));
    let path = "/reentry-after-loss";
    let mutex = InterProcessMutex::new(&client, path).unwrap();
    let old = mutex.acquire().unwrap();
    expire_and_renew(&f, &client);
    let theirs = InterProcessMutex::new(&other, path).unwrap();
    let their_guard = theirs
        .try_acquire_for(SOON)
        .unwrap()
        .expect("lock never freed");

    let again = mutex.try_acquire_for(Duration::from_secs(1));
    assert!(
        matches!(again, Err(Error::SessionLost { .. })),
        "a dead hold was re-entered: {again:?}"
    );
    assert!(!mutex.is_owned_by_current_thread(), "the dead hold stays");
    // The old guard, released after the dead hold was dropped, takes nothing with it.
    assert!(matches!(old.release(), Err(Error::SessionLost { .. })));
    assert!(their_guard.check().is_ok());
    assert_eq!(children(&other, path).len(), 1);
}

#[test]
fn an_old_guard_released_late_never_deletes_the_node_of_a_newer_hold() {
    let f = faulty();
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(4));
    let path = "/late-guard";
    let mutex = InterProcessMutex::new(&client, path).unwrap();
    let g1 = mutex.acquire().unwrap();
    expire_and_renew(&f, &client);
    // The dead hold is dropped, and a new one taken under the new session.
    assert!(matches!(mutex.acquire(), Err(Error::SessionLost { .. })));
    let g2 = mutex.acquire().unwrap();
    assert_ne!(g1.node_path(), g2.node_path());
    drop(g1);
    assert!(g2.check().is_ok());
    let stat = client.exists(g2.node_path()).unwrap();
    assert!(stat.is_some(), "the old guard deleted the new hold's node");
    assert!(mutex.try_acquire().unwrap().is_some(), "still re-entrant");
}

/// The server's count of packets received, from `mntr`.
fn packets_received(server: &zk_recipes::testing::TestingServer) -> u64 {
    server
        .four_letter("mntr")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("zk_packets_received"))
        .and_then(|v| v.trim().parse().ok())
        .expect("mntr reports packets received")
}

#[test]
fn an_uncontended_acquire_is_one_round_trip_of_two_pipelined_requests() {
    let f = faulty();
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(20));
    let mutex = InterProcessMutex::new(&client, "/one-trip").unwrap();
    drop(mutex.acquire().unwrap()); // the lock path exists from here on
    let requests = client.metrics().requests;
    let packets = packets_received(&f.server);
    // No answer reaches the client until heal: both requests must go out without one.
    f.proxy.hold_replies();
    let (tx, rx) = mpsc::channel();
    let m = InterProcessMutex::new(&client, "/one-trip").unwrap();
    let c = client.clone();
    thread::spawn(move || {
        let guard = m.acquire();
        let sent = c.metrics().requests; // before the release adds its delete
        tx.send((guard.map(|g| g.node_path().to_string()), sent))
            .unwrap()
    });
    wait_for(SOON, || {
        (packets_received(&f.server) >= packets + 2).then_some(())
    })
    .expect("the create and the listing never both reached the server");
    assert!(rx.try_recv().is_err(), "held without an answer?");
    f.proxy.heal();
    let (node, sent) = rx.recv_timeout(SOON).unwrap();
    assert!(node.unwrap().starts_with("/one-trip/"));
    // The create and the listing, pipelined. (The watch on our own node goes out when the
    // hold is first looked at: `is_held`, `check`, `lost`, ...)
    assert_eq!(
        sent - requests,
        2,
        "an uncontended acquire sends its create and its listing only"
    );
}

/// Issue 19's third hole: with `lost_on_suspend`, a break in the connection while *waiting*
/// must not poison the hold granted after it (the hold's token is made at grant time).
#[test]
fn a_blip_while_waiting_does_not_poison_the_hold_granted_after_it() {
    let f = faulty();
    let holder_client = connect(&f.server.connect_string(), Duration::from_secs(10));
    let waiter_client = connect(&f.proxy.connect_string(), Duration::from_secs(10));
    let path = root("blip-while-waiting");
    let options = || LockOptions::new().lost_on_suspend(true);
    let holder = InterProcessMutex::with_options(&holder_client, &path, options()).unwrap();
    let held = holder.acquire().unwrap();
    let states = waiter_client.subscribe();
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            let mutex = InterProcessMutex::with_options(&waiter_client, &path, options()).unwrap();
            let guard = mutex.acquire().unwrap();
            (guard.is_held(), guard.check().is_ok())
        });
        assert!(wait_children(&holder_client, &path, SOON, |c| c.len() == 2));
        f.proxy.cut();
        next_state(&states, ConnectionState::Suspended);
        next_state(&states, ConnectionState::Reconnected);
        drop(held);
        let (is_held, checked) = waiter.join().unwrap();
        assert!(is_held, "the hold granted after the blip is born lost");
        assert!(checked);
    });
}

/// Issue 19's seventh hole: closing the client ends every hold, also when the connection is
/// down at close, and also for a `lost()` channel first asked for after the close.
#[rstest::rstest]
#[case::connected(false)]
#[case::connection_down(true)]
fn closing_the_client_marks_every_hold_lost(#[case] down: bool) {
    let f = faulty();
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(10));
    let path = root("close-ends-holds");
    let first = InterProcessMutex::new(&client, &path).unwrap();
    let second = InterProcessMutex::new(&client, &format!("{path}-2")).unwrap();
    let watched = first.acquire().unwrap();
    let unwatched = second.acquire().unwrap();
    let lost = watched.lost();
    if down {
        let states = client.subscribe();
        f.proxy.refuse();
        next_state(&states, ConnectionState::Suspended);
    }
    client.close();
    assert!(
        lost.try_recv() == Err(crossbeam_channel::TryRecvError::Disconnected),
        "lost() did not fire on close"
    );
    assert!(
        unwatched.lost().try_recv() == Err(crossbeam_channel::TryRecvError::Disconnected),
        "lost() asked for after close did not fire"
    );
    assert!(!watched.is_held() && !unwatched.is_held());
    assert!(watched.check().is_err());
    f.proxy.heal();
}

/// The lease heartbeat goes out when it is due, also while answers keep arriving: a client
/// whose other threads read without pause must not let its holds lapse (reads never move the
/// bound; only the heartbeat does).
#[test]
fn a_hold_stays_valid_while_the_client_reads_without_pause() {
    let session = Duration::from_secs(2);
    let client = connect(&server().connect_string(), session);
    let path = root("busy-reader");
    let mutex = InterProcessMutex::new(&client, &path).unwrap();
    let guard = mutex.acquire().unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let lapsed = std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = client.exists("/");
                }
            });
        }
        // Three session timeouts of continuous reading; the hold must vouch throughout.
        let until = std::time::Instant::now() + session * 3;
        let mut lapsed = None;
        while std::time::Instant::now() < until {
            if let Err(e) = guard.check() {
                lapsed = Some(e);
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        lapsed
    });
    assert!(lapsed.is_none(), "the hold lapsed: {lapsed:?}");
}

/// A waiter whose look at the line breaks on a lost connection while its session lives on is
/// told `ConnectionLoss`, not `SessionLost`: nothing of the session was lost, and a caller
/// that took `SessionLost` at its word would give up holds that are still good. Its client
/// retries nothing, and the connection stays down past the connection timeout, so the look's
/// `ConnectionLoss` reaches the waiter (classified by `while_waiting`).
#[test]
fn a_waiter_whose_look_at_the_line_breaks_while_its_session_lives_is_told_connection_loss() {
    let proxy = Arc::new(zk_recipes::testing::FaultProxy::start(server().addr()).unwrap());
    let holder = connect(&server().connect_string(), Duration::from_secs(10));
    let waiter = builder(&proxy.connect_string())
        .session_timeout(Duration::from_secs(20))
        .connection_timeout(Duration::from_secs(1))
        .retry_policy(zk_recipes::RetryPolicy::never())
        .connect()
        .unwrap();
    let session = waiter.session_id().unwrap();
    let path = root("waiter-connection-loss");
    let holding = InterProcessMutex::new(&holder, &path).unwrap();
    let held = holding.acquire().unwrap();
    let (watching_tx, watching_rx) = mpsc::channel();
    let watching_tx = std::sync::Mutex::new(watching_tx);
    // Without the fast handoff, the holder's deletion makes the waiter list the line again.
    let options = LockOptions::new()
        .fast_handoff(false)
        .testing_after_watch_set(move |_| {
            let _ = watching_tx.lock().unwrap().send(());
        });
    let mutex = InterProcessMutex::with_options(&waiter, &path, options).unwrap();
    // Bounded, so that a regression fails the test rather than hanging it.
    let waiting = thread::spawn(move || mutex.try_acquire_for(SOON).map(|g| g.is_some()));
    watching_rx
        .recv_timeout(SOON)
        .expect("the waiter never watched the holder");
    // The holder goes; the listing the waiter's client sends on the news is held on its way,
    // then the connection breaks under it and no new one is let in for a while.
    proxy.hold_requests();
    drop(held);
    // The holder's deletion was heard (the watch fired, and with it went the listing), and
    // the listing is held: a ping alone would not do.
    wait_for(SOON, || {
        (waiter.testing_watch_count() == 0 && proxy.held_requests() > 0).then_some(())
    })
    .expect("no listing went out on the holder's deletion");
    proxy.refuse();
    let told = waiting.join().unwrap();
    assert!(
        matches!(told, Err(Error::ConnectionLoss { .. })),
        "a waiter whose session lives was told {told:?}"
    );
    proxy.heal();
    wait_for(SOON, || waiter.is_connected().then_some(())).expect("never reconnected");
    assert_eq!(waiter.session_id(), Some(session), "the session was lost");
    assert_eq!(waiter.metrics().session_losses, 0);
    wait_for(SOON, || children(&holder, &path).is_empty().then_some(()))
        .expect("the waiter's node stayed");
}

/// A waiter whose connection broke and came back (same session) before it began to wait
/// looks at the line again once it waits, rather than trusting the watch the client restored:
/// it sets its watch a second time while the holder still holds.
#[test]
fn a_waiter_whose_connection_came_back_before_it_waited_looks_at_the_line_again() {
    let proxy = Arc::new(zk_recipes::testing::FaultProxy::start(server().addr()).unwrap());
    let holder = connect(&server().connect_string(), Duration::from_secs(10));
    let waiter = connect(&proxy.connect_string(), Duration::from_secs(10));
    let path = root("waiter-recheck");
    let holding = InterProcessMutex::new(&holder, &path).unwrap();
    let held = holding.acquire().unwrap();
    let (watching_tx, watching_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (watching_tx, go_rx) = (
        std::sync::Mutex::new(watching_tx),
        std::sync::Mutex::new(go_rx),
    );
    let sets = Arc::new(AtomicUsize::new(0));
    let options = {
        let sets = sets.clone();
        LockOptions::new().testing_after_watch_set(move |_| {
            let _ = watching_tx.lock().unwrap().send(());
            // The first time, the waiter's thread stops here, before it waits.
            if sets.fetch_add(1, Ordering::SeqCst) == 0 {
                let _ = go_rx.lock().unwrap().recv();
            }
        })
    };
    let mutex = InterProcessMutex::with_options(&waiter, &path, options).unwrap();
    // Bounded, so that a regression fails the test rather than hanging it.
    let waiting = thread::spawn(move || mutex.try_acquire_for(SOON).map(|g| g.is_some()));
    watching_rx
        .recv_timeout(SOON)
        .expect("the waiter never watched the holder");
    // The connection breaks and comes back on the same session while the waiter is stopped:
    // both changes wait in its subscription when it begins to wait.
    let states = waiter.subscribe();
    proxy.cut();
    next_state(&states, ConnectionState::Suspended);
    next_state(&states, ConnectionState::Reconnected);
    go_tx.send(()).unwrap();
    watching_rx
        .recv_timeout(SOON)
        .expect("the waiter did not look at the line again after its connection came back");
    drop(held);
    assert!(
        waiting.join().unwrap().unwrap(),
        "the waiter did not take the lock"
    );
    assert_eq!(sets.load(Ordering::SeqCst), 2);
}

/// A create whose answer was lost, and which a synced look did not find, can still land later:
/// a follower whose link to the leader held it delivers it once the session is attached to that
/// follower again (seen in a harness run, where such a node then blocked a semaphore's lock line
/// for good). The retry must take a name of its own, and a node that turns up later under the
/// lost create's name must go while the session lives. The landing is made here by the test on
/// the client's own session, after the search came up empty.
#[test]
fn a_lost_create_not_found_is_retried_under_a_new_name_and_removed_if_it_lands_later() {
    let f = Arc::new(faulty());
    let observer = connect(&f.server.connect_string(), Duration::from_secs(10));
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(10));
    let path = "/lands-late";
    observer.ensure_path(path).unwrap();
    let prefixes = Arc::new(parking_lot::Mutex::new(Vec::<String>::new()));
    let (armed_tx, armed_rx) = mpsc::channel();
    let options = {
        let (f, prefixes) = (f.clone(), prefixes.clone());
        LockOptions::new().testing_before_create(move |prefix| {
            let mut seen = prefixes.lock();
            seen.push(prefix.to_owned());
            // The first create never reaches the server: its request is held, then the
            // connection cut, so that no answer comes and the search finds nothing.
            if seen.len() == 1 {
                f.proxy.hold_requests();
                armed_tx.send(()).unwrap();
            }
        })
    };
    let mutex = InterProcessMutex::with_options(&client, path, options).unwrap();
    let session = client.session_id();
    let cutter = {
        let f = f.clone();
        thread::spawn(move || {
            armed_rx.recv_timeout(SOON).unwrap();
            wait_for(SOON, || (f.proxy.held_requests() > 0).then_some(()))
                .expect("the create never left the client");
            f.proxy.cut();
            f.proxy.heal();
        })
    };
    let guard = mutex
        .try_acquire_for(SOON)
        .unwrap()
        .expect("acquired after the loss");
    cutter.join().unwrap();
    let prefixes = prefixes.lock().clone();
    assert_eq!(prefixes.len(), 2, "{prefixes:?}");
    assert_ne!(
        prefixes[0], prefixes[1],
        "the retry went out under the lost create's name"
    );
    // The lost create lands now, on the same session.
    let late = client
        .create(
            &prefixes[0],
            b"",
            zk_recipes::CreateMode::EphemeralSequential,
        )
        .unwrap();
    assert!(
        wait_children(&observer, path, SOON, |c| c.len() == 1),
        "the late node stayed: {:?}",
        children(&observer, path)
    );
    assert!(observer.exists(&late).unwrap().is_none());
    assert!(guard.is_held(), "the retry's hold went with the late node");
    assert_eq!(client.session_id(), session);
}

/// A search for a lost create stays armed for its session's life, not for one look: a node
/// that turns up under its name after the look is removed, on a change to its parent soon
/// after the create was given up on, and on the next reconnect long after.
#[rstest::rstest]
#[case::soon_after(Duration::ZERO, false)]
#[case::long_after_on_a_reconnect(Duration::from_secs(61), true)]
fn a_node_that_turns_up_under_a_lost_creates_name_after_the_search_looked_is_removed(
    #[case] given_up_ago: Duration,
    #[case] reconnect: bool,
) {
    let f = faulty();
    let observer = connect(&f.server.connect_string(), Duration::from_secs(10));
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(10));
    let path = if reconnect {
        "/turns-up-late"
    } else {
        "/turns-up-soon"
    };
    observer.ensure_path(path).unwrap();
    let session = client.session_id();
    client.testing_remove_marked_later(path, "0123-lost", given_up_ago);
    // The janitor has looked, and found nothing: soon after the create was given up on, it
    // watches the parent; long after, it does not.
    janitor_caught_up(&client, &format!("{path}-scratch"));
    assert_eq!(client.testing_watch_count(), usize::from(!reconnect));
    let late = client
        .create(
            &format!("{path}/_c_0123-lost-lock-"),
            b"",
            zk_recipes::CreateMode::EphemeralSequential,
        )
        .unwrap();
    if reconnect {
        f.proxy.cut();
        f.proxy.heal();
    }
    assert!(
        wait_children(&observer, path, SOON, <[String]>::is_empty),
        "{late} stayed"
    );
    assert_eq!(client.session_id(), session, "it went with its session");
}

/// A server behind a proxy, an observer straight to it, a client through the proxy, and
/// `path` made: the setting of the janitor's search tests.
fn searching_at(path: &str) -> (Faulty, Client, Client) {
    let f = faulty();
    let observer = connect(&f.server.connect_string(), Duration::from_secs(10));
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(10));
    observer.ensure_path(path).unwrap();
    (f, observer, client)
}

/// A node carrying `marker` lands under `path` on `client`'s session, as a lost create would
/// late; the janitor must remove it.
fn lands_and_is_removed(client: &Client, observer: &Client, path: &str, marker: &str, why: &str) {
    let late = client
        .create(
            &format!("{path}/_c_{marker}-lock-"),
            b"",
            zk_recipes::CreateMode::EphemeralSequential,
        )
        .unwrap();
    assert!(
        wait_children(observer, path, SOON, <[String]>::is_empty),
        "{late} stayed: {why}"
    );
}

/// A search whose parent is gone (a container reaped, a barrier's path gone with its last
/// member) watches for the parent's return while the create is recent: a node that lands under
/// it once it is made again (a barrier's next round) is removed without waiting for a
/// reconnect, which may be far off.
#[test]
fn a_search_whose_parent_went_is_woken_when_the_parent_is_made_again() {
    let path = "/search-parent-back";
    let (_f, observer, client) = searching_at(path);
    let session = client.session_id();
    client.testing_remove_marked_later(path, "0123-lost", Duration::ZERO);
    janitor_caught_up(&client, "/search-parent-back-scratch");
    observer.delete(path).unwrap();
    // The search has looked again on its parent's deletion, and found no parent.
    janitor_caught_up(&client, "/search-parent-back-scratch");
    observer
        .create(path, b"", zk_recipes::CreateMode::Persistent)
        .unwrap();
    lands_and_is_removed(
        &client,
        &observer,
        path,
        "0123-lost",
        "no watch on the parent",
    );
    assert_eq!(client.session_id(), session, "no reconnect woke the search");
}

/// Past the most searches the janitor keeps armed (1 024), the oldest are dropped: a create
/// given up on long ago is the least likely to land. A reconnect put the searches handed over
/// while the client was cut off first in the list, so the newest were dropped instead.
#[test]
fn past_the_most_armed_searches_the_oldest_are_dropped_not_the_newest() {
    let path = "/too-many-searches";
    let (f, observer, client) = searching_at(path);
    for i in 0..1024 {
        client.testing_remove_marked_later(path, &format!("old-{i:04}-lost"), SOON * 4);
    }
    janitor_caught_up(&client, "/too-many-searches-scratch");
    let sub = client.subscribe();
    f.proxy.refuse();
    next_state(&sub, zk_recipes::ConnectionState::Suspended);
    client.testing_remove_marked_later(path, "new-0000-lost", Duration::ZERO);
    f.proxy.heal();
    next_state(&sub, zk_recipes::ConnectionState::Reconnected);
    janitor_caught_up(&client, "/too-many-searches-scratch");
    lands_and_is_removed(
        &client,
        &observer,
        path,
        "new-0000-lost",
        "the newest search was dropped",
    );
}
