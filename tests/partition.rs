//! Partitioner against a real server: workers share a set of items, each item owned by at
//! most one worker at a time, moved only as far as a join or a leave requires.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::*;
use zk_recipes::partition::{owner_of, Partitioner};
use zk_recipes::Client;

fn client() -> Client {
    connect(&server().connect_string(), Duration::from_secs(10))
}

fn items() -> Vec<String> {
    (0..24).map(|i| format!("p{i:02}")).collect()
}

/// Who owns what, as the workers say (each item at most once, or the assertion fails).
fn ownership(workers: &[&Partitioner]) -> BTreeMap<String, String> {
    let mut owners = BTreeMap::new();
    for w in workers {
        for owned in w.owned() {
            if let Some(other) = owners.insert(owned.item().to_owned(), format!("{w:?}")) {
                panic!("{} owned by two workers: {other} and {w:?}", owned.item());
            }
        }
    }
    owners
}

/// Waits until every worker owns exactly its share.
fn settled(workers: &[&Partitioner]) {
    for w in workers {
        assert!(w.wait_settled(SOON), "{w:?} never settled");
    }
}

#[test]
fn workers_split_the_items_and_a_join_and_a_leave_move_only_what_they_must() {
    let path = root("partition-basic");
    let (ca, cb, cc) = (client(), client(), client());
    let a = Partitioner::new(&ca, &path, "a", items()).unwrap();
    let b = Partitioner::new(&cb, &path, "b", items()).unwrap();
    a.start().unwrap();
    b.start().unwrap();
    // Both see both before the split is final.
    wait_for(SOON, || {
        (a.members().len() == 2 && b.members().len() == 2).then_some(())
    })
    .expect("the workers never saw each other");
    settled(&[&a, &b]);
    let before = ownership(&[&a, &b]);
    assert_eq!(before.len(), 24, "every item is owned");
    let two = ["a".to_string(), "b".to_string()];
    for w in [&a, &b] {
        let share: BTreeSet<String> = w.owned().iter().map(|o| o.item().to_owned()).collect();
        let id = if std::ptr::eq(w, &a) { "a" } else { "b" };
        let expected: BTreeSet<String> = items()
            .into_iter()
            .filter(|i| owner_of(i, &two) == Some(id))
            .collect();
        assert_eq!(share, expected, "{id}'s share is not the rendezvous one");
    }
    let owned_by = |w: &Partitioner| -> BTreeSet<String> {
        w.owned().iter().map(|o| o.item().to_owned()).collect()
    };
    let (a_before, b_before) = (owned_by(&a), owned_by(&b));
    // A third joins: it takes only items it wins; nothing moves between a and b.
    let c = Partitioner::new(&cc, &path, "c", items()).unwrap();
    c.start().unwrap();
    wait_for(SOON, || {
        (a.members().len() == 3 && b.members().len() == 3).then_some(())
    })
    .expect("the join was not seen");
    settled(&[&a, &b, &c]);
    let all = ownership(&[&a, &b, &c]);
    assert_eq!(all.len(), 24);
    assert!(
        owned_by(&a).is_subset(&a_before),
        "a gained an item on c's join"
    );
    assert!(
        owned_by(&b).is_subset(&b_before),
        "b gained an item on c's join"
    );
    assert!(!owned_by(&c).is_empty());
    // Tokens: each item's token is its lock node's zxid; c's are newer than what it took over.
    for owned in c.owned() {
        assert!(owned.fencing_token().unwrap() > 0);
    }
    // b leaves: its items go to a and c; a and c keep theirs.
    let (a_mid, c_mid) = (owned_by(&a), owned_by(&c));
    b.close();
    assert!(b.owned().is_empty());
    wait_for(SOON, || {
        (a.members().len() == 2 && c.members().len() == 2).then_some(())
    })
    .expect("the leave was not seen");
    settled(&[&a, &c]);
    assert_eq!(ownership(&[&a, &c]).len(), 24);
    assert!(owned_by(&a).is_superset(&a_mid));
    assert!(owned_by(&c).is_superset(&c_mid));
    a.close();
    c.close();
}

/// A worker whose session is lost loses its items (its leases fail at once) and the others
/// take them; it takes its share again on its next session.
#[test]
fn a_worker_whose_session_is_lost_gives_its_items_up_and_takes_its_share_again() {
    let f = faulty();
    let path = "/partition-session";
    let lost_client = connect(&f.proxy.connect_string(), Duration::from_millis(1500));
    let other_client = connect(&f.server.connect_string(), Duration::from_secs(10));
    let lost = Partitioner::new(&lost_client, path, "lost", items()).unwrap();
    let other = Partitioner::new(&other_client, path, "other", items()).unwrap();
    lost.start().unwrap();
    other.start().unwrap();
    wait_for(SOON, || {
        (lost.members().len() == 2 && other.members().len() == 2).then_some(())
    })
    .expect("the workers never saw each other");
    settled(&[&lost, &other]);
    let held = lost.owned();
    assert!(!held.is_empty());
    f.proxy.blackhole();
    // The others take every item once the session is gone; the lost worker's leases say so.
    wait_for(SOON, || (other.owned().len() == 24).then_some(()))
        .expect("the lost worker's items were never taken over");
    assert!(
        held.iter().all(|o| o.check().is_err()),
        "a lease outlived its session"
    );
    assert!(lost.owned().is_empty());
    f.proxy.heal();
    wait_for(SOON, || (other.members().len() == 2).then_some(()))
        .expect("the lost worker never rejoined");
    settled(&[&lost, &other]);
    assert_eq!(ownership(&[&lost, &other]).len(), 24);
}

/// An item the partitioner lets go stops vouching in every copy a caller kept: its lease
/// fails its check and its `lost()` channel closes, before another worker takes the item.
/// And the new owner's fencing token is larger than the old one's.
#[test]
fn an_item_let_go_stops_vouching_in_every_copy_kept() {
    let path = root("partition-copies");
    let (ca, cb) = (client(), client());
    let a = Partitioner::new(&ca, &path, "a", items()).unwrap();
    a.start().unwrap();
    settled(&[&a]);
    let kept = a.owned();
    assert_eq!(kept.len(), 24);
    let tokens: BTreeMap<String, i64> = kept
        .iter()
        .map(|o| (o.item().to_owned(), o.fencing_token().unwrap()))
        .collect();
    let b = Partitioner::new(&cb, &path, "b", items()).unwrap();
    b.start().unwrap();
    wait_for(SOON, || (a.members().len() == 2).then_some(())).expect("a never saw b");
    settled(&[&a, &b]);
    let moved: Vec<String> = b.owned().iter().map(|o| o.item().to_owned()).collect();
    assert!(!moved.is_empty());
    for copy in kept.iter().filter(|o| moved.iter().any(|m| m == o.item())) {
        assert!(
            copy.check().is_err(),
            "{} still vouches after it moved",
            copy.item()
        );
        assert!(copy.run(|| ()).is_err());
        assert!(
            copy.lost().recv_timeout(Duration::from_secs(1)).is_err(),
            "its lost() never closed"
        );
    }
    for owned in b.owned() {
        assert!(
            owned.fencing_token().unwrap() > tokens[owned.item()],
            "{}'s token did not grow with its new owner",
            owned.item()
        );
    }
}

/// `close()` returns within `partition::CLOSE_WAIT` also with the worker's link silent.
#[test]
fn closing_a_worker_whose_link_is_silent_returns_within_its_bound() {
    let path = root("partition-close-silent");
    let proxy = zk_recipes::testing::FaultProxy::start(server().addr()).unwrap();
    let worker_client = connect(&proxy.connect_string(), Duration::from_secs(10));
    let w = Partitioner::new(&worker_client, &path, "w", items()).unwrap();
    w.start().unwrap();
    settled(&[&w]);
    let states = worker_client.subscribe();
    proxy.blackhole();
    next_state(&states, zk_recipes::ConnectionState::Suspended);
    let started = std::time::Instant::now();
    w.close();
    let took = started.elapsed();
    assert!(
        took <= zk_recipes::partition::CLOSE_WAIT + Duration::from_millis(500),
        "close() returned after {took:?}"
    );
    assert!(w.owned().is_empty());
    assert!(!w.wait_settled(Duration::from_secs(2)));
    proxy.heal();
}

/// An item whose take fails for good (its lock path is another session's ephemeral node, which
/// can have no children) costs only that item: the others are owned, and once the path is
/// free the item is too.
#[test]
fn an_item_that_cannot_be_taken_does_not_keep_the_others_from_their_owner() {
    let path = root("partition-bad-item");
    let (cw, blocker) = (client(), client());
    blocker
        .create_with_parents(
            &format!("{path}/items/p05"),
            b"",
            zk_recipes::CreateMode::Ephemeral,
        )
        .unwrap();
    let w = Partitioner::new(&cw, &path, "w", items()).unwrap();
    w.start().unwrap();
    wait_for(SOON, || (w.owned().len() == 23).then_some(()))
        .expect("the other items were not all owned");
    blocker.close();
    settled(&[&w]);
    assert_eq!(w.owned().len(), 24);
    w.close();
    assert!(cw
        .children(&format!("{path}/items/p00"))
        .unwrap_or_default()
        .is_empty());
}

/// A node left at this worker's member name by another session (a crashed run of the same
/// worker, say) is not this worker's join: the worker is not settled until its own node is
/// listed (review 38a, finding 5).
#[test]
fn a_member_node_of_another_session_at_our_name_is_not_our_join() {
    let s = server();
    let path = root("foreign-member");
    let ghost = connect(&s.connect_string(), SOON);
    ghost
        .create_with_parents(
            &format!("{path}/members/w1"),
            b"",
            zk_recipes::CreateMode::Ephemeral,
        )
        .unwrap();
    let ours = connect(&s.connect_string(), SOON);
    let share = Partitioner::new(&ours, &path, "w1", ["a", "b"]).unwrap();
    share.start().unwrap();
    // A pass has run (it found the group), with the ghost's node at our name.
    assert!(wait_for(SOON, || (!share.assigned().is_empty()).then_some(())).is_some());
    assert!(!share.is_settled(), "settled on another session's node");
    ghost.close();
    assert!(
        share.wait_settled(SOON),
        "never settled once the ghost went"
    );
}
