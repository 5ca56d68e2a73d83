//! Barriers against a real server: a gate that holds waiters until it is removed, and a party
//! that enters together and leaves together, also across connection breaks and lost sessions.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use common::*;
use zk_recipes::barriers::{DistributedBarrier, DistributedDoubleBarrier, READY_NODE};
use zk_recipes::testing::FaultProxy;
use zk_recipes::{Client, ConnectionState};

fn client() -> Client {
    connect(&server().connect_string(), Duration::from_secs(10))
}

/// Children of `path` but the ready node, sorted (none if it does not exist).
fn members(c: &Client, path: &str) -> Vec<String> {
    let mut v: Vec<String> = c
        .children(path)
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n != READY_NODE)
        .collect();
    v.sort();
    v
}

#[test]
fn a_barrier_holds_its_waiters_until_it_is_removed_and_an_unset_one_holds_no_one() {
    let path = root("barrier-basic");
    let coordinator = client();
    let barrier = DistributedBarrier::new(&coordinator, &path).unwrap();
    assert!(barrier.wait_on_barrier(Duration::ZERO).unwrap(), "not set");
    barrier.set_barrier().unwrap();
    barrier.set_barrier().unwrap();
    assert!(barrier.is_set().unwrap());
    // Set: a waiter's deadline passes.
    assert!(!barrier.wait_on_barrier(Duration::from_millis(200)).unwrap());
    let clients: Vec<Client> = (0..3).map(|_| client()).collect();
    let waiters: Vec<_> = clients
        .iter()
        .map(|c| {
            let (path, c) = (path.clone(), c.clone());
            thread::spawn(move || {
                let b = DistributedBarrier::new(&c, &path).unwrap();
                let passed = b.wait_on_barrier(SOON).unwrap();
                (passed, c.testing_watch_count())
            })
        })
        .collect();
    // Every waiter watches the node before it goes: they pass on its deletion, not on a
    // first look.
    wait_for(SOON, || {
        clients
            .iter()
            .all(|c| c.testing_watch_count() == 1)
            .then_some(())
    })
    .expect("waiters never watched");
    barrier.remove_barrier().unwrap();
    barrier.remove_barrier().unwrap();
    for w in waiters {
        assert_eq!(w.join().unwrap(), (true, 0), "passed, no watcher left");
    }
    assert!(!barrier.is_set().unwrap());
}

/// A waiter whose link breaks, and one whose session is lost, while the barrier is removed,
/// still pass once their client is back: the node is looked at again.
#[test]
fn a_barrier_waiter_passes_after_a_broken_link_and_after_a_lost_session() {
    for lose_session in [false, true] {
        let path = root(&format!("barrier-faults-{lose_session}"));
        let coordinator = client();
        let barrier = DistributedBarrier::new(&coordinator, &path).unwrap();
        barrier.set_barrier().unwrap();
        let proxy = FaultProxy::start(server().addr()).unwrap();
        let waiter = connect(&proxy.connect_string(), Duration::from_millis(1500));
        let states = waiter.subscribe();
        let b = DistributedBarrier::new(&waiter, &path).unwrap();
        let waiting = thread::spawn(move || b.wait_on_barrier(SOON));
        // Its watch is set before the link goes.
        wait_for(SOON, || (waiter.testing_watch_count() == 1).then_some(()))
            .expect("the waiter never watched");
        if lose_session {
            proxy.blackhole();
            while states.recv_timeout(SOON).expect("no LOST").state != ConnectionState::Lost {}
        } else {
            proxy.refuse();
            next_state(&states, ConnectionState::Suspended);
        }
        barrier.remove_barrier().unwrap();
        proxy.heal();
        assert!(
            waiting.join().unwrap().unwrap(),
            "lose_session {lose_session}"
        );
    }
}

/// Members come one at a time, and go one at a time: while some have not entered, no one has
/// passed `enter`; while some have not called `leave`, no one has passed it.
#[test]
fn no_member_passes_enter_before_all_entered_nor_leave_before_all_left() {
    const N: usize = 4;
    let path = root("double-basic");
    let observer = client();
    let passed_enter = Arc::new(AtomicUsize::new(0));
    let passed_leave = Arc::new(AtomicUsize::new(0));
    let clients: Vec<Client> = (0..N).map(|_| client()).collect();
    let barriers: Vec<Arc<DistributedDoubleBarrier>> = clients
        .iter()
        .map(|c| Arc::new(DistributedDoubleBarrier::new(c, &path, N).unwrap()))
        .collect();
    let mut entering = Vec::new();
    for (k, b) in barriers.iter().enumerate() {
        assert_eq!(
            passed_enter.load(Ordering::SeqCst),
            0,
            "passed with {k} of {N} in"
        );
        let (b, passed) = (b.clone(), passed_enter.clone());
        entering.push(thread::spawn(move || {
            let entered = b.enter(SOON);
            passed.fetch_add(1, Ordering::SeqCst);
            entered
        }));
        wait_for(SOON, || {
            (members(&observer, &path).len() == k + 1).then_some(())
        })
        .expect("a member never entered");
    }
    for e in entering {
        assert!(e.join().unwrap().unwrap());
    }
    let mut leaving = Vec::new();
    for (k, (b, c)) in barriers.iter().zip(&clients).enumerate() {
        assert_eq!(
            passed_leave.load(Ordering::SeqCst),
            0,
            "passed with {k} of {N} leaving"
        );
        let node = b.node_path().unwrap();
        let (b, passed) = (b.clone(), passed_leave.clone());
        leaving.push(thread::spawn(move || {
            let left = b.leave(SOON);
            passed.fetch_add(1, Ordering::SeqCst);
            left
        }));
        if k + 1 < N {
            // It waits: its node is gone (it is not the lowest), or it watches the highest.
            wait_for(SOON, || {
                (observer.exists(&node).ok()?.is_none() || c.testing_watch_count() > 0)
                    .then_some(())
            })
            .expect("a member never began to leave");
        }
    }
    for l in leaving {
        assert!(l.join().unwrap().unwrap());
    }
    for (b, c) in barriers.iter().zip(&clients) {
        assert_eq!(b.node_path(), None);
        assert_eq!(c.testing_watch_count(), 0, "a watcher was left behind");
    }
    assert!(members(&observer, &path).is_empty());
    assert!(observer
        .exists(&format!("{path}/{READY_NODE}"))
        .unwrap()
        .is_none());
}

/// The party is a threshold, as Curator's: more members than asked for enter too.
#[test]
fn a_member_that_gives_up_entering_leaves_no_node_and_a_larger_party_still_passes() {
    let path = root("double-timeout");
    let observer = client();
    let lonely = DistributedDoubleBarrier::new(&observer, &path, 3).unwrap();
    assert!(!lonely.enter(Duration::from_millis(300)).unwrap());
    assert!(lonely.node_path().is_none());
    assert!(
        members(&observer, &path).is_empty(),
        "a node was left behind"
    );
    let start = Arc::new(Barrier::new(4));
    // No member leaves before all four have entered: a fourth whose create a loaded machine
    // delays until the other three have passed and left finds an empty barrier and waits for
    // a round of its own (Curator's rule too), which is not what this test is about.
    let all_in = Arc::new(Barrier::new(4));
    let party: Vec<_> = (0..4)
        .map(|_| {
            let (path, start, all_in) = (path.clone(), start.clone(), all_in.clone());
            thread::spawn(move || {
                let c = client();
                let b = DistributedDoubleBarrier::new(&c, &path, 3).unwrap();
                start.wait();
                let entered = b.enter(SOON).unwrap();
                all_in.wait();
                let left = b.leave(SOON).unwrap();
                (entered, left)
            })
        })
        .collect();
    for m in party {
        assert_eq!(m.join().unwrap(), (true, true));
    }
    assert!(DistributedDoubleBarrier::new(&observer, &path, 0).is_err());
}

/// A member whose session is lost while it waits to enter makes its node again on its new
/// session, and the party still meets.
#[test]
fn a_member_whose_session_is_lost_while_it_enters_enters_on_its_next_session() {
    let f = faulty();
    let path = "/double-session";
    let first = connect(&f.proxy.connect_string(), Duration::from_millis(1500));
    let second = connect(&f.server.connect_string(), Duration::from_secs(10));
    let a = Arc::new(DistributedDoubleBarrier::new(&first, path, 2).unwrap());
    let entering = {
        let a = a.clone();
        thread::spawn(move || a.enter(SOON))
    };
    // Its node is made once the member has the create's answer (the server may list it sooner).
    let before = wait_for(SOON, || a.node_path()).expect("the first member never entered");
    expire_and_renew(&f, &first);
    let b = DistributedDoubleBarrier::new(&second, path, 2).unwrap();
    assert!(b.enter(SOON).unwrap());
    assert!(entering.join().unwrap().unwrap());
    let after = a.node_path().unwrap();
    assert_ne!(before, after, "the member's node was not made again");
    assert_eq!(members(&second, path).len(), 2);
    let leaving = {
        let a = a.clone();
        thread::spawn(move || a.leave(SOON))
    };
    assert!(b.leave(SOON).unwrap());
    assert!(leaving.join().unwrap().unwrap());
    assert!(members(&second, path).is_empty());
}

/// A member whose session is lost while it waits to leave has left: the others go on.
#[test]
fn a_member_whose_session_is_lost_while_it_leaves_has_left() {
    let f = faulty();
    let path = "/double-leave-session";
    let lost = connect(&f.proxy.connect_string(), Duration::from_millis(1500));
    let others: Vec<Client> = (0..2)
        .map(|_| connect(&f.server.connect_string(), Duration::from_secs(10)))
        .collect();
    let barriers: Vec<Arc<DistributedDoubleBarrier>> = std::iter::once(&lost)
        .chain(&others)
        .map(|c| Arc::new(DistributedDoubleBarrier::new(c, path, 3).unwrap()))
        .collect();
    let entered: Vec<_> = barriers
        .iter()
        .map(|b| {
            let b = b.clone();
            thread::spawn(move || b.enter(SOON))
        })
        .collect();
    for e in entered {
        assert!(e.join().unwrap().unwrap());
    }
    // The member on the proxy is made the lowest by name only by chance: whichever it is,
    // its session's end removes its node, and the others' leave ends.
    let lost_leaving = {
        let b = barriers[0].clone();
        thread::spawn(move || b.leave(SOON))
    };
    f.proxy.blackhole();
    let states = lost.subscribe();
    let others_leaving: Vec<_> = barriers[1..]
        .iter()
        .map(|b| {
            let b = b.clone();
            thread::spawn(move || b.leave(SOON))
        })
        .collect();
    while states.recv_timeout(SOON).expect("no LOST").state != ConnectionState::Lost {}
    f.proxy.heal();
    for l in others_leaving {
        assert!(l.join().unwrap().unwrap());
    }
    assert!(lost_leaving.join().unwrap().unwrap());
    assert!(members(&others[0], path).is_empty());
}

/// A double barrier used round after round: a member whose leave is slow to hear that the
/// round is over (its answers held back) must not take the next round's first node for one
/// of its own round's, or both rounds wait for each other until their deadlines.
#[test]
fn a_late_leaver_does_not_wait_for_the_next_round() {
    let path = root("double-rounds");
    let observer = client();
    // Sessions made later have larger ids, and a member's name begins with its session's: the
    // early member's name is the lower, so it is the one that leaves last.
    let early_client = client();
    let proxy = FaultProxy::start(server().addr()).unwrap();
    let late_client = connect(&proxy.connect_string(), Duration::from_secs(10));
    let late = Arc::new(DistributedDoubleBarrier::new(&late_client, &path, 2).unwrap());
    let early = Arc::new(DistributedDoubleBarrier::new(&early_client, &path, 2).unwrap());
    let entering = {
        let late = late.clone();
        thread::spawn(move || late.enter(SOON))
    };
    assert!(early.enter(SOON).unwrap());
    assert!(entering.join().unwrap().unwrap());
    assert!(
        early.node_path() < late.node_path(),
        "the early member is not the lowest"
    );
    let late_leaving = {
        let late = late.clone();
        thread::spawn(move || late.leave(SOON))
    };
    // The late member has deleted its node and waits for the lowest; its answers are then
    // held back.
    let late_node = late.node_path();
    wait_for(SOON, || {
        (late.node_path().is_none() && late_client.testing_watch_count() > 0).then_some(())
    })
    .unwrap_or_else(|| panic!("the late member never began to leave ({late_node:?})"));
    proxy.hold_replies();
    assert!(early.leave(SOON).unwrap());
    // The next round begins: the early member's new node is alone in line.
    let next_round = {
        let early = early.clone();
        thread::spawn(move || early.enter(SOON))
    };
    wait_for(SOON, || {
        (members(&observer, &path).len() == 1).then_some(())
    })
    .expect("the next round never began");
    proxy.heal();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let _ = done_tx.send(late_leaving.join().unwrap());
    });
    let left = done_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the late member's leave waited for the next round");
    assert!(left.unwrap());
    assert!(late.enter(SOON).unwrap());
    assert!(next_round.join().unwrap().unwrap());
}

/// A `ready` node an earlier round left behind (its leavers' deletes were not answered, as
/// when every member's session went at once: the harness found it so) lets no member of the
/// next round through before the party is whole; the member that completes the party
/// replaces it, and everyone passes.
#[test]
fn a_ready_node_left_by_an_earlier_round_lets_no_member_through_alone() {
    let path = root("barrier-stale-ready");
    let (a, b) = (client(), client());
    a.ensure_path(&format!("{path}/{READY_NODE}")).unwrap();
    let first = DistributedDoubleBarrier::new(&a, &path, 2).unwrap();
    assert!(
        !first.enter(Duration::from_millis(300)).unwrap(),
        "passed alone on an earlier round's ready node"
    );
    assert!(
        members(&a, &path).is_empty(),
        "a member that gave up left its node"
    );
    let entering = {
        let path = path.clone();
        thread::spawn(move || {
            let second = DistributedDoubleBarrier::new(&b, &path, 2).unwrap();
            second.enter(SOON).unwrap()
        })
    };
    assert!(first.enter(SOON).unwrap(), "the whole party did not pass");
    assert!(entering.join().unwrap(), "the whole party did not pass");
}

/// Members that share one client (one session) are each counted: a party of two on one
/// client passes (the second review's finding: the count left out every node of our session
/// but our own).
#[test]
fn members_that_share_a_client_are_each_counted() {
    let path = root("barrier-shared-client");
    let c = client();
    let entering: Vec<_> = (0..2)
        .map(|_| {
            let (c, path) = (c.clone(), path.clone());
            thread::spawn(move || {
                let b = DistributedDoubleBarrier::new(&c, &path, 2).unwrap();
                let entered = b.enter(SOON).unwrap();
                // Kept until both have looked: dropping it takes its node away.
                (entered, b)
            })
        })
        .collect();
    let passed: Vec<bool> = entering.into_iter().map(|t| t.join().unwrap().0).collect();
    assert_eq!(passed, [true, true], "a party on one client did not pass");
}

/// A member that completes the party without renewing an old `ready` (a Curator member, which
/// passes on any `ready`) still lets ours through: ours, finding an old `ready`, watch the
/// members too, count again when one comes, and renew it (the second review's finding: they
/// watched only `ready` and waited until their deadline).
#[test]
fn members_waiting_on_an_old_ready_count_again_when_a_member_comes() {
    let path = root("barrier-old-ready-newcomer");
    let (a, b, raw) = (client(), client(), client());
    raw.ensure_path(&format!("{path}/{READY_NODE}")).unwrap();
    let entering: Vec<_> = [a, b]
        .into_iter()
        .map(|c| {
            let path = path.clone();
            thread::spawn(move || {
                let m = DistributedDoubleBarrier::new(&c, &path, 3).unwrap();
                m.enter(SOON).unwrap()
            })
        })
        .collect();
    wait_for(SOON, || (members(&raw, &path).len() == 2).then_some(())).unwrap();
    // As Curator's member enters: its node, then it passes on the `ready` it finds.
    raw.create(
        &format!("{path}/9b3c1f0e-5d2a-4c55-a0c2-8d0f6b1e2a33"),
        &[],
        zk_recipes::CreateMode::Ephemeral,
    )
    .unwrap();
    let passed: Vec<bool> = entering.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(
        passed,
        [true, true],
        "ours waited out their deadline beside a whole party"
    );
}

/// A member whose first `faulted` creates run `fault` before they go out; the paths its
/// creates went out under.
fn member_with_faulted_creates(
    client: &Client,
    path: &str,
    party: usize,
    faulted: usize,
    fault: impl Fn() + Send + Sync + 'static,
) -> (
    DistributedDoubleBarrier,
    Arc<parking_lot::Mutex<Vec<String>>>,
) {
    let names = Arc::new(parking_lot::Mutex::new(Vec::<String>::new()));
    let options = {
        let names = names.clone();
        zk_recipes::LockOptions::new().testing_before_create(move |p| {
            let faulty = {
                let mut seen = names.lock();
                seen.push(p.to_owned());
                seen.len() <= faulted
            };
            if faulty {
                fault();
            }
        })
    };
    let member =
        DistributedDoubleBarrier::testing_with_options(client, path, party, options).unwrap();
    (member, names)
}

/// A member's create whose answer was lost can land after the member dropped its node: a
/// follower that held the forwarded request delivers it once the session is attached there
/// again (the client's janitor notes; seen with the locks in a harness run). The others would
/// count that node as a member for the rest of the session. The landings are made here by the
/// test, on the member's own session under the lost creates' name, after the member gave up:
/// having made its node on a retry (after one lost create, and after two: both land), or
/// never.
#[rstest::rstest]
#[case::made_on_a_retry(1, true)]
#[case::made_after_two_lost(2, true)]
#[case::never_made(1, false)]
fn a_members_create_that_lands_after_it_gave_up_is_removed(
    #[case] lost: usize,
    #[case] made_on_a_retry: bool,
) {
    let f = Arc::new(faulty());
    let path = format!("/lands-late-{lost}-{made_on_a_retry}");
    let observer = connect(&f.server.connect_string(), Duration::from_secs(10));
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(10));
    observer.ensure_path(&path).unwrap();
    let session = client.session_id();
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (member, names) = {
        let f = f.clone();
        member_with_faulted_creates(&client, &path, 2, lost, move || {
            // The create never reaches the server: held, then the connection cut.
            f.proxy.hold_requests();
            held_tx.send(()).unwrap();
        })
    };
    let cutter = {
        let f = f.clone();
        thread::spawn(move || {
            for _ in 0..lost {
                held_rx.recv_timeout(SOON).unwrap();
                // More than a ping's 12 bytes: the create is held.
                wait_for(SOON, || (f.proxy.held_requests() > 12).then_some(()))
                    .expect("the create never left the client");
                f.proxy.cut();
                if made_on_a_retry {
                    f.proxy.heal();
                }
            }
        })
    };
    // A party of two with one member: it gives up at its deadline.
    assert!(!member.enter(Duration::from_secs(3)).unwrap());
    cutter.join().unwrap();
    f.proxy.heal();
    // The janitor has done what it was handed on giving up (the delete of the member's node
    // included), so the landings below come after it.
    janitor_caught_up(&client, &format!("{path}-scratch"));
    let names = names.lock().clone();
    assert_eq!(
        names.len(),
        lost + usize::from(made_on_a_retry),
        "{names:?}"
    );
    assert!(
        names.iter().all(|n| n == &names[0]),
        "a retry went out under another name: {names:?}"
    );
    // The lost creates land now, one after the other, on the same session.
    for landing in 0..lost {
        client
            .create(&names[0], b"", zk_recipes::CreateMode::Ephemeral)
            .unwrap();
        assert!(
            wait_children(&observer, &path, SOON, |c| c.is_empty()),
            "late member node {landing} stayed: {:?}",
            members(&observer, &path)
        );
    }
    assert_eq!(client.session_id(), session, "it went with its session");
}

/// A member's name carries the session it was chosen for. If the session changes before the
/// create goes out, the create must not go out on the new one: a node made there whose answer
/// is lost is owned by a session that does not know the name, and the member's next look
/// makes a second node under the new session's name, so one member counts as two (a party of
/// two with one member passed alone).
#[test]
fn a_member_name_chosen_for_a_lost_session_is_never_created_under_the_next() {
    let f = Arc::new(faulty());
    let path = "/name-for-a-lost-session";
    let observer = connect(&f.server.connect_string(), Duration::from_secs(10));
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(10));
    let first = client.session_id();
    let (member, names) = {
        let (f, renewed) = (f.clone(), client.clone());
        member_with_faulted_creates(&client, path, 2, 1, move || {
            // The session ends between the name and its create; then the answers are held.
            expire_and_renew(&f, &renewed);
            f.proxy.hold_replies();
        })
    };
    let cutter = lose_a_create_made_under_the_old_name(&f, &names);
    let entered = member.enter(Duration::from_secs(4)).unwrap();
    assert!(
        !entered,
        "a party of two passed with one member: {:?}",
        members(&observer, path)
    );
    cutter.join().unwrap();
    assert_ne!(client.session_id(), first);
    assert!(names.lock().len() >= 2, "{:?}", names.lock());
    assert!(
        wait_children(&observer, path, SOON, |c| c.is_empty()),
        "left behind: {:?}",
        members(&observer, path)
    );
}
