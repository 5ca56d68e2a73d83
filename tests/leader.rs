//! Leader election against a real server.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::*;
use zk_recipes::leader::{
    LeaderLatch, LeaderSelector, LeadershipEvent, LeadershipPolicy, TermOutcome,
};
use zk_recipes::testing::TestingServer;
use zk_recipes::{Client, SessionId};

fn client() -> Client {
    connect(&server().connect_string(), Duration::from_secs(10))
}

/// Starts `latch` with a listener, waits until it leads, and hands back the events after
/// `Gained`, each with when it came.
fn leading(latch: &LeaderLatch) -> mpsc::Receiver<(LeadershipEvent, std::time::Instant)> {
    let (tx, rx) = mpsc::channel();
    latch.add_listener(move |e| {
        let _ = tx.send((e, std::time::Instant::now()));
    });
    latch.start().unwrap();
    assert!(latch.await_leadership(SOON).unwrap());
    assert_eq!(rx.recv().unwrap().0, LeadershipEvent::Gained);
    rx
}

/// A leadership event and the session it happened under.
type EventIn = (LeadershipEvent, Option<SessionId>);

/// Counts leaders from the listeners' point of view; remembers the most at once.
#[derive(Default)]
struct Checker {
    now_and_most: Mutex<(usize, usize)>,
}

impl Checker {
    fn event(&self, e: LeadershipEvent) {
        let mut s = self.now_and_most.lock().unwrap();
        match e {
            LeadershipEvent::Gained => s.0 += 1,
            LeadershipEvent::Lost => s.0 -= 1,
            other => panic!("unexpected {other:?}"),
        }
        s.1 = s.1.max(s.0);
    }
    fn most(&self) -> usize {
        self.now_and_most.lock().unwrap().1
    }
}

/// Latches started one by one (each in line before the next starts), with a shared checker.
fn latches_in_order(path: &str, n: usize, checker: &Arc<Checker>) -> Vec<(Client, LeaderLatch)> {
    let mut out: Vec<(Client, LeaderLatch)> = Vec::new();
    for i in 0..n {
        let c = client();
        let latch = LeaderLatch::new(&c, path, &format!("p{i}")).unwrap();
        let chk = checker.clone();
        latch.add_listener(move |e| chk.event(e));
        latch.start().unwrap();
        wait_for(SOON, || {
            (latch.participants().unwrap().len() == i + 1).then_some(())
        })
        .expect("participant never joined");
        out.push((c, latch));
    }
    out
}

#[test]
fn latches_lead_one_at_a_time_in_start_order_and_a_closing_middle_changes_nothing() {
    let path = root("latch-order");
    let checker = Arc::new(Checker::default());
    let mut latches = latches_in_order(&path, 5, &checker);
    assert!(latches[0].1.await_leadership(SOON).unwrap());
    assert_eq!(latches[0].1.leader().unwrap().unwrap().id, "p0");
    let leading: Vec<bool> = latches.iter().map(|(_, l)| l.has_leadership()).collect();
    assert_eq!(leading, [true, false, false, false, false]);

    // A middle participant leaves: the leader stays.
    let (_, middle) = latches.remove(2);
    middle.close();
    assert!(latches[0].1.has_leadership());
    assert_eq!(latches[0].1.participants().unwrap().len(), 4);

    // Each close of the leader hands over to the next in start order.
    for expected in ["p1", "p3", "p4"] {
        let (_, leader) = latches.remove(0);
        leader.close();
        assert!(!leader.has_leadership());
        assert!(latches[0].1.await_leadership(SOON).unwrap());
        assert_eq!(latches[0].1.id(), expected);
        assert_eq!(latches[0].1.leader().unwrap().unwrap().id, expected);
    }
    assert_eq!(checker.most(), 1, "two latches led at once");
}

#[test]
fn five_selectors_take_turns_and_never_overlap() {
    let path = root("selector-turns");
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let terms = Arc::new(Mutex::new(Vec::new()));
    let mut selectors = Vec::new();
    for i in 0..5 {
        let c = client();
        let (inside, most, terms) = (inside.clone(), most.clone(), terms.clone());
        let id = format!("s{i}");
        let me = id.clone();
        let sel = LeaderSelector::new(&c, &path, &id, move |ctx| {
            let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            assert!(!ctx.is_cancelled());
            terms
                .lock()
                .unwrap()
                .push((me.clone(), ctx.lease().fencing_token().unwrap()));
            thread::sleep(Duration::from_millis(5));
            inside.fetch_sub(1, Ordering::SeqCst);
        })
        .unwrap()
        .auto_requeue();
        sel.start().unwrap();
        selectors.push((c, sel));
    }
    // Every participant finishes three terms.
    for (_, sel) in &selectors {
        for _ in 0..3 {
            assert_eq!(
                sel.outcomes().recv_timeout(SOON).unwrap(),
                TermOutcome::Completed
            );
        }
    }
    for (_, sel) in &selectors {
        sel.close();
    }
    assert_eq!(most.load(Ordering::SeqCst), 1, "two leaders ran at once");
    let terms = terms.lock().unwrap();
    let tokens: Vec<i64> = terms.iter().map(|t| t.1).collect();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens must grow: {tokens:?}"
    );
    for i in 0..5 {
        assert!(
            terms.iter().any(|t| t.0 == format!("s{i}")),
            "s{i} never led"
        );
    }
}

#[test]
fn a_black_holed_leader_loses_leadership_and_never_leads_again_on_that_session() {
    let f = faulty();
    let old_client = connect(&f.proxy.connect_string(), Duration::from_millis(1500));
    let old_session = old_client.session_id().unwrap();
    let led_in: Arc<Mutex<Vec<EventIn>>> = Arc::default();
    let old = LeaderLatch::new(&old_client, "/bh-latch", "old").unwrap();
    {
        let (led_in, c) = (led_in.clone(), old_client.clone());
        old.add_listener(move |e| led_in.lock().unwrap().push((e, c.session_id())));
    }
    old.start().unwrap();
    assert!(old.await_leadership(SOON).unwrap());

    // A selector's work on the same client is told to stop too.
    let (cancelled_tx, cancelled_rx) = mpsc::channel();
    let working = LeaderSelector::new(&old_client, "/bh-selector", "old-sel", move |ctx| {
        while !ctx.is_cancelled() {
            thread::sleep(Duration::from_millis(5));
        }
        cancelled_tx.send(()).unwrap();
    })
    .unwrap();
    working.start().unwrap();
    wait_for(SOON, || working.has_leadership().then_some(())).unwrap();

    let new_client = connect(&f.server.connect_string(), Duration::from_secs(10));
    let new = LeaderLatch::new(&new_client, "/bh-latch", "new").unwrap();
    new.start().unwrap();

    f.proxy.blackhole();
    cancelled_rx
        .recv_timeout(SOON)
        .expect("the selector's work was never told to stop");
    assert_eq!(
        working.outcomes().recv_timeout(SOON).unwrap(),
        TermOutcome::Cancelled
    );
    assert!(new.await_leadership(SOON).unwrap(), "nobody took over");
    assert!(!old.has_leadership());
    f.proxy.heal();
    wait_for(SOON, || {
        let p = new.participants().unwrap();
        (p.len() == 2 && p[1].id == "old").then_some(())
    })
    .expect("the old participant never came back in line, behind the new leader");
    assert!(new.has_leadership());
    let events = led_in.lock().unwrap().clone();
    assert_eq!(events[0], (LeadershipEvent::Gained, Some(old_session)));
    assert_eq!(events[1].0, LeadershipEvent::Lost);
    assert!(
        events[2..]
            .iter()
            .all(|(e, s)| *e == LeadershipEvent::Lost || *s != Some(old_session)),
        "led again on the lost session: {events:?}"
    );
    working.close();
}

#[test]
fn a_short_server_restart_keeps_session_leadership_and_standard_leadership_is_won_back() {
    init_logs();
    let server = TestingServer::with_options(server_options()).unwrap();
    let c = connect(&server.connect_string(), Duration::from_secs(10));
    let events = |latch: &LeaderLatch| {
        let log: Arc<Mutex<Vec<LeadershipEvent>>> = Arc::default();
        let l = log.clone();
        latch.add_listener(move |e| l.lock().unwrap().push(e));
        log
    };
    let session = LeaderLatch::with_policy(&c, "/session", "s", LeadershipPolicy::Session).unwrap();
    let standard = LeaderLatch::new(&c, "/standard", "t").unwrap();
    let (session_log, standard_log) = (events(&session), events(&standard));
    session.start().unwrap();
    standard.start().unwrap();
    assert!(session.await_leadership(SOON).unwrap());
    assert!(standard.await_leadership(SOON).unwrap());
    let sub = c.subscribe();

    server.restart().unwrap();
    while sub.recv_timeout(SOON).expect("no reconnect").state
        != zk_recipes::ConnectionState::Reconnected
    {}

    assert!(
        standard.await_leadership(SOON).unwrap(),
        "standard leadership not won back"
    );
    wait_for(SOON, || {
        (standard_log.lock().unwrap().len() == 3).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "the listener was not told of the regained leadership: {:?}",
            standard_log.lock().unwrap()
        )
    });
    assert!(session.has_leadership());
    assert_eq!(
        *session_log.lock().unwrap(),
        [LeadershipEvent::Gained],
        "session policy must ride it out"
    );
    assert_eq!(
        *standard_log.lock().unwrap(),
        [
            LeadershipEvent::Gained,
            LeadershipEvent::Lost,
            LeadershipEvent::Gained
        ]
    );
}

/// Issue 19's fourth hole. A latch under the Session policy rides out connection breaks, but
/// its listeners must hear `Lost` no later than the lease's bound runs out: a silent server
/// sends no event, and the client declares LOST only two thirds of a session after the
/// silence began, by which time another latch may lead.
#[test]
fn a_session_latch_hears_lost_by_its_lease_bound_on_a_silent_connection() {
    let f = faulty();
    let session = Duration::from_secs(3);
    let held = connect(&f.proxy.connect_string(), session);
    let other = connect(&f.server.connect_string(), session);
    let latch =
        LeaderLatch::with_policy(&held, "/silent-session", "a", LeadershipPolicy::Session).unwrap();
    let rx = leading(&latch);
    let second = LeaderLatch::new(&other, "/silent-session", "b").unwrap();
    second.start().unwrap();

    f.proxy.blackhole();
    // Nothing is answered from here on: the bound no longer moves.
    let bound = held.session_valid_until().expect("a lease bound");
    let (event, lost_at) = rx.recv_timeout(SOON).expect("no Lost event");
    assert_eq!(event, LeadershipEvent::Lost);
    assert!(
        lost_at <= bound + Duration::from_millis(100),
        "Lost came {:?} after the lease bound",
        lost_at - bound
    );
    // No event says the hold is gone (nothing passes), but the bound ran out: no leadership.
    assert!(
        !latch.has_leadership(),
        "the latch still leads past its bound on a silent connection"
    );
    assert!(second.await_leadership(SOON).unwrap());
    f.proxy.heal();
}

/// While the connection is broken and the lease bound still holds, a Session latch leads on
/// and a Standard one does not.
#[test]
fn while_suspended_a_session_latch_leads_on_and_a_standard_one_does_not() {
    let f = faulty();
    let c = connect(&f.proxy.connect_string(), Duration::from_secs(10));
    let session = LeaderLatch::with_policy(
        &c,
        &root("suspended-session"),
        "s",
        LeadershipPolicy::Session,
    )
    .unwrap();
    let standard = LeaderLatch::new(&c, &root("suspended-standard"), "t").unwrap();
    session.start().unwrap();
    standard.start().unwrap();
    assert!(session.await_leadership(SOON).unwrap());
    assert!(standard.await_leadership(SOON).unwrap());
    let sub = c.subscribe();
    f.proxy.refuse();
    next_state(&sub, zk_recipes::ConnectionState::Suspended);
    let bound = session
        .lease()
        .and_then(|l| l.valid_until())
        .expect("a session latch's lease keeps its bound while suspended");
    assert!(
        !standard.has_leadership(),
        "a standard latch leads without a connection"
    );
    let leads = session.has_leadership();
    assert!(
        leads || std::time::Instant::now() >= bound,
        "a session latch gave up leadership while its bound held"
    );
    f.proxy.heal();
}

/// `LeaderLatch::lease()` hands out the hold of one term. When the term ends (here by
/// `close()`, and another latch leads), a lease the caller kept must stop vouching: it never
/// again says yes, whatever the session's bound does.
#[test]
fn a_latch_s_lease_kept_past_its_term_stops_vouching() {
    let path = root("latch-lease-term");
    let (ca, cb) = (client(), client());
    let a = LeaderLatch::new(&ca, &path, "a").unwrap();
    a.start().unwrap();
    assert!(a.await_leadership(SOON).unwrap());
    let kept = a.lease().expect("a lease while leading");
    kept.check().expect("valid while leading");
    let token = kept.fencing_token().unwrap();
    let b = LeaderLatch::new(&cb, &path, "b").unwrap();
    b.start().unwrap();
    a.close();
    assert!(b.await_leadership(SOON).unwrap());
    assert!(
        kept.check().is_err(),
        "a closed latch's lease still vouches"
    );
    assert!(!kept.is_held());
    let next = b.lease().expect("b leads").fencing_token().unwrap();
    assert!(
        next > token,
        "the next term's token {next} is not above {token}"
    );
    b.close();
}

/// On a slow link every answer waits too long to vouch for a touch at the leader, so the
/// bound stops moving while the connection lives on and no event comes: the latch thread
/// itself must end leadership at the bound (the listeners hear `Lost` then). First in line on
/// its live session, it then looks again on its own (no event will come) and leads again once
/// answers come fast.
#[test]
fn a_latch_on_a_slow_link_hears_lost_at_its_bound_and_leads_again_when_answers_come_fast() {
    let f = faulty();
    let held = connect(&f.proxy.connect_string(), Duration::from_secs(3));
    let latch = LeaderLatch::new(&held, &root("slow-link"), "a").unwrap();
    let rx = leading(&latch);
    let sub = held.subscribe();

    // Four ticks each way: the link stays up (the connection hears something every round
    // trip), but no answer vouches.
    f.proxy.delay(Duration::from_millis(400));
    let (event, lost_at) = rx.recv_timeout(SOON).expect("no Lost event");
    assert_eq!(event, LeadershipEvent::Lost);
    let bound = held
        .session_valid_until()
        .expect("a bound while the connection lives");
    assert!(
        lost_at <= bound + Duration::from_millis(100),
        "Lost came {:?} after the lease bound",
        lost_at - bound
    );
    assert!(!latch.has_leadership());
    assert!(
        sub.receiver().try_recv().is_err(),
        "the connection did not stay up: the test proves nothing"
    );

    f.proxy.heal();
    assert!(
        latch.await_leadership(SOON).unwrap(),
        "first in line on a live session, answers vouching again, yet not leading"
    );
    assert_eq!(rx.recv_timeout(SOON).unwrap().0, LeadershipEvent::Gained);
}

/// A node another session put at exactly our node's path (an operator's mistake, a hostile
/// client) looks like ours in the listing, but the claim looks at its owner: the latch does
/// not lead on it, and leads again on a node of its own once that one is gone.
#[test]
fn a_latch_never_leads_on_a_node_another_session_put_at_its_path() {
    let path = root("latch-imposter");
    let (ca, cb, admin) = (client(), client(), client());
    let first = LeaderLatch::new(&cb, &path, "first").unwrap();
    first.start().unwrap();
    assert!(first.await_leadership(SOON).unwrap());
    let latch = LeaderLatch::new(&ca, &path, "a").unwrap();
    let (tx, rx) = mpsc::channel();
    latch.add_listener(move |e| {
        let _ = tx.send(e);
    });
    latch.start().unwrap();
    let ours = wait_for(SOON, || {
        latch
            .participants()
            .ok()?
            .into_iter()
            .find(|p| p.id == "a")
            .map(|p| p.node)
    })
    .expect("our node in line");

    // Our node is replaced by a persistent one at the same path, owned by no session.
    admin.delete(&ours).unwrap();
    admin
        .create(&ours, b"imposter", zk_recipes::CreateMode::Persistent)
        .unwrap();
    first.close();

    // The latch is first now (as the names say) and watches that node once its claim is done.
    let session = format!("0x{:x}", ca.session_id().expect("a session").0);
    let watched = wait_for(SOON, || {
        let watches = server().four_letter("wchc").ok()?;
        let mut current = "";
        for line in watches.lines() {
            if line.starts_with("0x") {
                current = line.trim();
            } else if current == session && line.trim() == ours {
                return Some(());
            }
        }
        None
    });
    assert!(watched.is_some(), "the latch never looked at the node");
    assert!(
        !latch.has_leadership(),
        "the latch leads on a node its session does not own"
    );
    assert!(
        rx.try_recv().is_err(),
        "the latch announced leadership on a node its session does not own"
    );

    admin.delete(&ours).unwrap();
    assert!(
        latch.await_leadership(SOON).unwrap(),
        "never leading on a node of its own"
    );
    assert_eq!(rx.recv_timeout(SOON).unwrap(), LeadershipEvent::Gained);
    latch.close();
    let _ = admin.delete(&path);
}

/// The participant right behind the leader, whose listing showed the leader first, leads once
/// the leader's node is deleted without listing the line again: no node can join ahead of it
/// later (a new node's sequence is above every node's before it), so one round trip after the
/// deletion (the check that its own node is its live session's) it leads. Shown by taking away
/// the line's READ once it waits: it may no longer list the line, and leads anyway (before,
/// it listed, was refused, and never led).
#[test]
fn the_participant_behind_a_leader_it_saw_first_leads_without_listing_the_line_again() {
    let path = root("latch-after-the-head");
    let (admin, a, b) = (client(), client(), client());
    let first = LeaderLatch::new(&a, &path, "a").unwrap();
    let _a_events = leading(&first);
    let second = LeaderLatch::new(&b, &path, "b").unwrap();
    second.start().unwrap();
    // Waiting: in line, and watching the leader's node (the server says so; the refused
    // listing below also goes over b's session, behind its watch).
    let leader_node = first.participants().unwrap()[0].node.clone();
    let b_session = format!("0x{:x}", b.session_id().unwrap().0);
    wait_for(SOON, || {
        watchers_of(&leader_node).contains(&b_session).then_some(())
    })
    .expect("the second never watched the first");
    let no_read = [zk_recipes::acl::Acl::new(
        zk_recipes::acl::Permission::CREATE
            | zk_recipes::acl::Permission::DELETE
            | zk_recipes::acl::Permission::WRITE
            | zk_recipes::acl::Permission::ADMIN,
        zk_recipes::acl::Id::new("world", "anyone"),
    )];
    admin.set_acl(&path, &no_read, None).unwrap();
    assert!(
        b.children(&path)
            .unwrap_err()
            .is_code(zk_recipes::ZkCode::NoAuth),
        "the line may still be listed"
    );
    first.close();
    let led = second.await_leadership(Duration::from_secs(10)).unwrap();
    admin
        .set_acl(&path, &zk_recipes::acl::open(), None)
        .unwrap();
    assert!(led, "the second did not lead without a listing");
    assert!(second.lease().unwrap().check().is_ok());
}

/// Only the participant right behind the first skips its listing: one whose watched node left
/// from the middle of the line (it was not first) lists the line again, watches the leader,
/// and does not lead; it leads once the leader goes.
#[test]
fn a_participant_whose_watched_node_left_the_middle_of_the_line_lists_again_and_waits() {
    let path = root("latch-middle-leaves");
    let (a, m, b) = (client(), client(), client());
    let first = LeaderLatch::new(&a, &path, "a").unwrap();
    let _a_events = leading(&first);
    let middle = LeaderLatch::new(&m, &path, "m").unwrap();
    middle.start().unwrap();
    let nodes = || -> Vec<String> {
        first
            .participants()
            .unwrap()
            .into_iter()
            .map(|p| p.node)
            .collect()
    };
    wait_for(SOON, || (nodes().len() == 2).then_some(())).expect("the middle never joined");
    let third = LeaderLatch::new(&b, &path, "b").unwrap();
    third.start().unwrap();
    let b_session = format!("0x{:x}", b.session_id().unwrap().0);
    let watched_by_b = |node: &str| watchers_of(node).contains(&b_session);
    let line = wait_for(SOON, || {
        let line = nodes();
        (line.len() == 3 && watched_by_b(&line[1])).then_some(line)
    })
    .expect("the third never watched the middle");
    middle.close();
    wait_for(SOON, || watched_by_b(&line[0]).then_some(()))
        .expect("the third never came to watch the leader");
    assert!(!third.has_leadership(), "the third leads behind the leader");
    assert_eq!(third.leader().unwrap().unwrap().id, "a");
    first.close();
    assert!(third.await_leadership(SOON).unwrap());
}
