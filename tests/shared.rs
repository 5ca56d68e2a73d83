//! Shared state on one node against a real ZooKeeper: `SharedValue`, `SharedCount` and
//! `DistributedAtomicLong` (issue 38).

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::Duration;

use common::*;
use zk_recipes::atomic::{DistributedAtomicLong, PromotedToLock};
use zk_recipes::shared::{SharedCount, SharedValue, VersionedValue};
use zk_recipes::{CreateMode, Error, RetryPolicy};

fn patient() -> RetryPolicy {
    RetryPolicy::exponential(Duration::from_millis(1), Duration::from_millis(20)).max_retries(50)
}

/// Two processes seed one count differently: the first seed is written, and both read it.
#[test]
fn the_first_seed_wins_and_both_sides_read_it() {
    let s = server();
    let path = format!("{}/count", root("seed"));
    let a = SharedCount::new(&connect(&s.connect_string(), SOON), &path, 10).unwrap();
    let b = SharedCount::new(&connect(&s.connect_string(), SOON), &path, 20).unwrap();
    a.start().unwrap();
    b.start().unwrap();
    assert_eq!(a.count().unwrap(), 10);
    assert_eq!(b.count().unwrap(), 10);
    assert!(a.wait_current(SOON) && b.wait_current(SOON));
}

/// A compare-and-set from a value someone has changed since fails, and leaves the newer value
/// read; from that one, it succeeds.
#[test]
fn a_compare_and_set_on_a_changed_value_fails_and_shows_the_newer_one() {
    let s = server();
    let path = format!("{}/count", root("cas"));
    let a = SharedCount::new(&connect(&s.connect_string(), SOON), &path, 0).unwrap();
    let b = SharedCount::new(&connect(&s.connect_string(), SOON), &path, 0).unwrap();
    a.start().unwrap();
    b.start().unwrap();
    let seen_by_a = a.versioned_count().unwrap();
    let seen_by_b = b.versioned_count().unwrap();
    assert!(b.try_set_count(&seen_by_b, 30).unwrap());
    assert!(!a.try_set_count(&seen_by_a, 40).unwrap());
    let now = a.versioned_count().unwrap();
    assert_eq!(now.value, 30, "the failed set read the newer value");
    assert!(a.try_set_count(&now, 40).unwrap());
    assert_eq!(a.count().unwrap(), 40);
    let b_sees = wait_for(SOON, || (b.count().ok()? == 40).then_some(()));
    assert!(b_sees.is_some(), "the other side never saw 40");
}

/// A value never read (version -1, which the server takes as "any version") cannot be the
/// base of a compare-and-set.
#[test]
fn a_value_never_read_is_no_base_for_a_compare_and_set() {
    let s = server();
    let v = SharedValue::new(&connect(&s.connect_string(), SOON), &root("unread"), b"x").unwrap();
    let never_read = v.versioned_value();
    assert_eq!(never_read.version, -1);
    assert!(matches!(
        v.try_set_value(&never_read, b"y"),
        Err(Error::IllegalState(_))
    ));
    let forged = VersionedValue {
        value: b"x".to_vec(),
        version: -1,
        zxid: i64::MAX,
    };
    assert!(matches!(
        v.try_set_value(&forged, b"y"),
        Err(Error::IllegalState(_))
    ));
}

/// Listeners hear each newer value in the order written and never an older one, on every
/// reader, and every reader ends on the last value.
#[test]
fn listeners_hear_newer_values_only_and_end_on_the_last() {
    let s = server();
    let path = format!("{}/count", root("listeners"));
    let writer = SharedCount::new(&connect(&s.connect_string(), SOON), &path, 0).unwrap();
    writer.start().unwrap();
    let mut readers = Vec::new();
    for _ in 0..3 {
        let r = SharedCount::new(&connect(&s.connect_string(), SOON), &path, 0).unwrap();
        let heard = Arc::new(Mutex::new(Vec::new()));
        let h = heard.clone();
        r.add_listener(move |v| h.lock().unwrap().push((v.value, v.zxid)));
        r.start().unwrap();
        readers.push((r, heard));
    }
    const LAST: i32 = 60;
    for n in 1..=LAST {
        writer.set_count(n).unwrap();
    }
    for (r, heard) in &readers {
        assert!(
            wait_for(SOON, || (r.count().ok()? == LAST).then_some(())).is_some(),
            "a reader never reached {LAST}"
        );
        let heard = heard.lock().unwrap().clone();
        assert!(!heard.is_empty());
        for pair in heard.windows(2) {
            assert!(
                pair[0].0 < pair[1].0 && pair[0].1 < pair[1].1,
                "a listener went back or heard a value twice: {heard:?}"
            );
        }
        assert_eq!(heard.last().map(|h| h.0), Some(LAST));
    }
}

/// A node deleted and made again starts its version at 0 again: the value made again is
/// still newer (by its zxid), and is shown (Curator 5.4 keeps the old value for ever).
#[test]
fn a_value_deleted_and_made_again_is_followed() {
    let s = server();
    let path = format!("{}/value", root("remade"));
    let admin = connect(&s.connect_string(), SOON);
    let v = SharedValue::new(&connect(&s.connect_string(), SOON), &path, b"seed").unwrap();
    v.start().unwrap();
    for n in 0..5u8 {
        v.set_value(&[n]).unwrap();
    }
    assert_eq!(v.versioned_value().version, 5);
    admin.delete(&path).unwrap();
    admin
        .create(&path, b"again", CreateMode::Persistent)
        .unwrap();
    let shown = wait_for(SOON, || {
        let now = v.versioned_value();
        (now.value == b"again").then_some(now)
    })
    .expect("the value made again was never shown");
    assert_eq!(shown.version, 0);
    assert!(v.try_set_value(&shown, b"after").unwrap());
}

/// After its session is lost, the value is read again on the next session: a change made
/// meanwhile is shown, and the value says it is not current while it is not read.
#[test]
fn after_a_session_loss_the_value_is_read_again() {
    let f = faulty();
    let path = "/shared-session/value";
    let other = connect(&f.server.connect_string(), SOON);
    let client = connect(&f.proxy.connect_string(), Duration::from_millis(1500));
    let v = SharedValue::new(&client, path, b"0").unwrap();
    v.start().unwrap();
    assert!(v.wait_current(SOON));
    let sub = client.subscribe();
    let (id, passwd) = client.testing_session_credentials().unwrap();
    f.proxy.blackhole();
    next_state(&sub, zk_recipes::ConnectionState::Suspended);
    assert!(!v.is_current(), "current while the connection is down");
    other.set_data(path, b"1", None).unwrap();
    assert!(expire(&f.server, id, &passwd));
    f.proxy.heal();
    let current = v.wait_current(SOON);
    assert!(current, "never current on the new session");
    assert_eq!(v.value(), b"1");
    assert_ne!(client.session_id(), Some(id));
}

/// A value of the wrong size for a count is reported, not misread.
#[test]
fn a_count_of_the_wrong_size_is_malformed() {
    let s = server();
    let path = root("short-count");
    let admin = connect(&s.connect_string(), SOON);
    admin.create(&path, b"abc", CreateMode::Persistent).unwrap();
    let c = SharedCount::new(&connect(&s.connect_string(), SOON), &path, 0).unwrap();
    c.start().unwrap();
    assert!(matches!(c.count(), Err(Error::Malformed { .. })));
    let long = DistributedAtomicLong::new(&admin, &path, RetryPolicy::never()).unwrap();
    assert!(matches!(long.get(), Err(Error::Malformed { .. })));
    assert!(matches!(long.increment(), Err(Error::Malformed { .. })));
    assert_eq!(admin.data(&path).unwrap().0, b"abc", "nothing was written");
}

/// Each operation's values on a fresh counter, its parents made as it goes (Curator's
/// `testBasic`).
#[test]
fn a_counter_counts_from_a_missing_node() {
    let s = server();
    let path = format!("{}/a/b/counter", root("long-basic"));
    let c = DistributedAtomicLong::new(
        &connect(&s.connect_string(), SOON),
        &path,
        RetryPolicy::never(),
    )
    .unwrap();
    assert_eq!(c.get().unwrap().pre_value, 0);
    type Step<'a> = &'a dyn Fn() -> zk_recipes::Result<zk_recipes::atomic::AtomicValue>;
    let steps: [(Step<'_>, i64, i64); 4] = [
        (&|| c.increment(), 0, 1),
        (&|| c.decrement(), 1, 0),
        (&|| c.add(10), 0, 10),
        (&|| c.subtract(5), 10, 5),
    ];
    for (step, pre, post) in steps {
        let v = step().unwrap();
        assert!(v.succeeded);
        assert_eq!((v.pre_value, v.post_value), (pre, post));
        assert_eq!(v.stats.optimistic_tries, 1);
        assert_eq!(v.stats.promoted_lock_tries, 0);
    }
    assert_eq!(c.get().unwrap().post_value, 5);
}

/// `initialize` makes the node only if it is missing; `compare_and_set` takes a missing node
/// as 0, and fails on any other value.
#[test]
fn initialize_and_compare_and_set() {
    let s = server();
    let path = root("long-cas");
    let c = DistributedAtomicLong::new(
        &connect(&s.connect_string(), SOON),
        &path,
        RetryPolicy::never(),
    )
    .unwrap();
    let v = c.compare_and_set(0, 1).unwrap();
    assert!(v.succeeded, "a missing node holds 0");
    assert!(!c.initialize(7).unwrap(), "the node exists");
    assert!(!c.compare_and_set(0, 5).unwrap().succeeded);
    let v = c.compare_and_set(1, 5).unwrap();
    assert!(v.succeeded);
    assert_eq!((v.pre_value, v.post_value), (1, 5));
    c.force_set(-3).unwrap();
    assert_eq!(c.get().unwrap().pre_value, -3);
    let fresh = DistributedAtomicLong::new(
        &connect(&s.connect_string(), SOON),
        &format!("{path}-2"),
        RetryPolicy::never(),
    )
    .unwrap();
    assert!(fresh.initialize(7).unwrap());
    assert_eq!(fresh.get().unwrap().pre_value, 7);
}

/// Contended increments from many sessions, falling back on a lock: no two made increments
/// return the same value, and the count ends at the number made.
#[test]
fn contended_increments_are_each_counted_once() {
    let s = server();
    let path = root("long-contended");
    const THREADS: usize = 8;
    const EACH: usize = 40;
    let start = Arc::new(Barrier::new(THREADS));
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let client = connect(&s.connect_string(), SOON);
            let path = path.clone();
            let start = start.clone();
            thread::spawn(move || {
                let c = DistributedAtomicLong::new(&client, &path, RetryPolicy::never())
                    .unwrap()
                    .with_promotion(PromotedToLock::new(&format!("{path}-lock")).retry(patient()))
                    .unwrap();
                start.wait();
                let mut made = Vec::new();
                let mut promoted = 0;
                for _ in 0..EACH {
                    let v = c.increment().unwrap();
                    promoted += v.stats.promoted_lock_tries;
                    if v.succeeded {
                        assert_eq!(v.post_value, v.pre_value + 1);
                        made.push(v.post_value);
                    }
                }
                (made, promoted)
            })
        })
        .collect();
    let mut all = Vec::new();
    for w in workers {
        let (made, _) = w.join().unwrap();
        for pair in made.windows(2) {
            assert!(
                pair[0] < pair[1],
                "one session's values went back: {made:?}"
            );
        }
        all.extend(made);
    }
    let distinct: BTreeSet<i64> = all.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        all.len(),
        "two increments returned one value"
    );
    let c = DistributedAtomicLong::new(
        &connect(&s.connect_string(), SOON),
        &path,
        RetryPolicy::never(),
    )
    .unwrap();
    assert_eq!(c.get().unwrap().pre_value, all.len() as i64);
    assert!(!all.is_empty());
}

/// Listeners are called in the order of the values, never an older after a newer, also when a
/// caller's own write and another process's race (review 38a, finding 1: a caller's thread
/// called them with its own value after the value's thread had called them with a newer one).
/// The race is forced, not timed: a listener called on the caller's thread is held until the
/// newer value has been heard; one on the value's own thread goes on at once.
#[test]
fn a_callers_own_write_is_not_heard_after_a_newer_one() {
    let s = server();
    let path = root("listener-order");
    let other = connect(&s.connect_string(), SOON);
    let v = SharedValue::new(&connect(&s.connect_string(), SOON), &path, b"seed").unwrap();
    let heard = Arc::new(Mutex::new(Vec::new()));
    let (entered_tx, entered) = crossbeam_channel::unbounded::<()>();
    let (release, released) = crossbeam_channel::unbounded::<()>();
    let h = heard.clone();
    // Held only from our own write on (not while `start` shows the first read).
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let arm = armed.clone();
    v.add_listener(move |value| {
        if arm.load(std::sync::atomic::Ordering::SeqCst)
            && thread::current().name() != Some("zk-shared-value")
        {
            let _ = entered_tx.send(());
            let _ = released.recv();
        }
        h.lock().unwrap().push(value.zxid);
    });
    v.start().unwrap();
    let seen = v.versioned_value();
    armed.store(true, std::sync::atomic::Ordering::SeqCst);
    let caller = {
        let v = Arc::new(v);
        let mine = v.clone();
        (v, thread::spawn(move || mine.try_set_value(&seen, b"mine")))
    };
    let (v, mine) = caller;
    // Our write is made and (on the caller's thread, if listeners ran there) being told, or
    // already returned: now a newer value comes.
    let (done_tx, done) = crossbeam_channel::bounded::<()>(1);
    let watcher = {
        let v = v.clone();
        thread::spawn(move || {
            let _ = wait_for(SOON, || (v.versioned_value().version >= 1).then_some(()));
            let _ = done_tx.send(());
        })
    };
    crossbeam_channel::select! {
        recv(entered) -> _ => {},
        recv(done) -> _ => {},
    }
    watcher.join().unwrap();
    other.set_data(&path, b"theirs", None).unwrap();
    let theirs = wait_for(SOON, || {
        let now = v.versioned_value();
        (now.value == b"theirs").then_some(now.zxid)
    })
    .expect("never saw the other write");
    // The newer value heard (on the value's thread), then the held listener let go.
    let _ = wait_for(SOON, || {
        heard.lock().unwrap().contains(&theirs).then_some(())
    });
    drop(release);
    assert!(mine.join().unwrap().unwrap());
    let heard = wait_for(SOON, || {
        let heard = heard.lock().unwrap().clone();
        (heard.len() >= 2).then_some(heard)
    })
    .expect("the listeners never heard both values");
    for pair in heard.windows(2) {
        assert!(pair[0] < pair[1], "heard out of order: {heard:?}");
    }
}

/// A value whose node is gone is not current (nothing shown was read from it), and is again
/// once the node is made again and read (review 38a, findings 3 and 4).
#[test]
fn a_value_whose_node_is_gone_is_not_current() {
    let s = server();
    let path = root("gone-not-current");
    let admin = connect(&s.connect_string(), SOON);
    let v = SharedValue::new(&connect(&s.connect_string(), SOON), &path, b"seed").unwrap();
    v.start().unwrap();
    assert!(v.wait_current(SOON));
    admin.delete(&path).unwrap();
    assert!(
        wait_for(SOON, || (!v.is_current()).then_some(())).is_some(),
        "current with its node gone"
    );
    admin
        .create(&path, b"back", CreateMode::Persistent)
        .unwrap();
    assert!(v.wait_current(SOON));
    assert_eq!(v.value(), b"back");
}

/// A compare-and-set whose write reached the server but whose answer was lost says its
/// outcome is unknown (it was applied, once: it is not sent again).
#[test]
fn a_compare_and_set_whose_answer_is_lost_says_its_outcome_is_unknown() {
    let f = faulty();
    let path = "/shared-lost-answer";
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(3));
    let v = SharedValue::new(&client, path, b"0").unwrap();
    v.start().unwrap();
    let seen = v.versioned_value();
    // The write goes through; its answer (and every other) is held until the connection is
    // given up.
    f.proxy.hold_replies();
    let done = v.try_set_value(&seen, b"1");
    f.proxy.heal();
    assert!(
        matches!(done, Err(Error::OutcomeUnknown { .. })),
        "{done:?}"
    );
    let other = connect(&f.server.connect_string(), SOON);
    let (data, stat) = other.data(path).unwrap();
    assert_eq!(
        (data.as_slice(), stat.version),
        (&b"1"[..], 1),
        "applied once"
    );
}

/// An increment whose read's answer is lost wrote nothing, and its error says so (it is not
/// `OutcomeUnknown`).
#[test]
fn an_increment_that_fails_before_its_write_changed_nothing() {
    let f = faulty();
    let path = "/long-lost-read";
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(3));
    let c = DistributedAtomicLong::new(&client, path, RetryPolicy::never()).unwrap();
    assert_eq!(c.increment().unwrap().post_value, 1);
    f.proxy.hold_replies();
    let done = c.increment();
    f.proxy.heal();
    assert!(done.is_err(), "{done:?}");
    assert!(
        !matches!(done, Err(Error::OutcomeUnknown { .. })),
        "{done:?}"
    );
    let other = connect(&f.server.connect_string(), SOON);
    assert_eq!(other.data(path).unwrap().0, 1i64.to_be_bytes());
}
