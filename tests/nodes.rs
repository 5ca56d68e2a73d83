//! PersistentNode against a real server: a node kept present across deletions, connection
//! breaks and lost sessions, and removed on close.

mod common;

use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::*;
use zk_recipes::nodes::{NodeEvent, NodeMode, PersistentNode, TTL_TOUCH_NODE};
use zk_recipes::testing::{ServerOptions, TestingServer};
use zk_recipes::{Client, CreateMode, Error, WatchKind};

fn client() -> Client {
    connect(&server().connect_string(), Duration::from_secs(10))
}

/// The listener's events, on a channel.
fn events(node: &PersistentNode) -> mpsc::Receiver<NodeEvent> {
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    node.add_listener(move |e| {
        let _ = tx.lock().unwrap().send(e.clone());
    });
    rx
}

/// Waits (on a watch, not a timer) until `path` is gone; false after `SOON`.
fn gone(observer: &Client, path: &str) -> bool {
    let (tx, rx) = crossbeam_channel::unbounded();
    loop {
        match observer.exists_watch(path, &tx) {
            Ok(None) => return true,
            Ok(Some(_)) => {}
            Err(e) => panic!("{e}"),
        }
        match rx.recv_timeout(SOON) {
            Ok(_) => {}
            Err(_) => return false,
        }
    }
}

#[test]
fn an_ephemeral_node_is_made_again_after_a_deletion_and_goes_on_close() {
    let path = root("node-ephemeral");
    let (owner, observer) = (client(), client());
    let node = PersistentNode::new(&owner, &path, NodeMode::Ephemeral, b"one").unwrap();
    assert!(matches!(
        node.wait_for_initial_create(Duration::ZERO),
        Err(Error::IllegalState(_))
    ));
    let heard = events(&node);
    node.start().unwrap();
    assert!(node.start().is_err(), "started twice");
    assert!(node.wait_for_initial_create(SOON).unwrap());
    assert_eq!(
        heard.recv_timeout(SOON).unwrap(),
        NodeEvent::Created(path.clone())
    );
    assert_eq!(node.actual_path().as_deref(), Some(path.as_str()));
    let (data, stat) = observer.data(&path).unwrap();
    assert_eq!(data, b"one");
    assert_eq!(stat.ephemeral_owner, owner.session_id().unwrap().0);
    // Someone deletes it: made again, with the data it was last given.
    node.set_data(b"two").unwrap();
    observer.delete(&path).unwrap();
    assert_eq!(
        heard.recv_timeout(SOON).unwrap(),
        NodeEvent::Created(path.clone())
    );
    assert_eq!(observer.data(&path).unwrap().0, b"two");
    node.close();
    assert!(gone(&observer, &path), "the node stayed after close");
    assert_eq!(node.actual_path(), None);
    assert_eq!(owner.testing_watch_count(), 0, "watchers left behind");
}

#[test]
fn an_ephemeral_node_is_made_again_on_the_next_session_and_its_data_set_while_cut_off_lands() {
    let f = faulty();
    let path = "/node-session";
    let owner = connect(&f.proxy.connect_string(), Duration::from_millis(1500));
    let observer = connect(&f.server.connect_string(), Duration::from_secs(10));
    let node = PersistentNode::new(&owner, path, NodeMode::Ephemeral, b"first").unwrap();
    let heard = events(&node);
    node.start().unwrap();
    assert!(node.wait_for_initial_create(SOON).unwrap());
    heard.recv_timeout(SOON).unwrap();
    // Data set while the link is refused is written once it is back.
    f.proxy.refuse();
    node.set_data(b"while cut off").unwrap();
    f.proxy.heal();
    // (On this session or, if the reconnection outlasted the short session, the next.)
    let (tx, rx) = crossbeam_channel::unbounded();
    loop {
        match observer.data_watch(path, &tx) {
            Ok((data, _)) if data == b"while cut off" => break,
            Ok(_) => {}
            Err(e) if e.is_no_node() => {
                if observer.exists_watch(path, &tx).unwrap().is_some() {
                    continue;
                }
            }
            Err(e) => panic!("{e}"),
        }
        rx.recv_timeout(SOON)
            .expect("the data set while cut off never landed");
    }
    // The session expires: the node goes with it, and is made again on the next one.
    while heard.try_recv().is_ok() {}
    let before = observer.exists(path).unwrap().unwrap().ephemeral_owner;
    expire_and_renew(&f, &owner);
    // A creation heard late from before the expiry (the observer can see a node before its
    // maker's answer reaches the recipe) may come first: each is a creation, and one of
    // them is on the new session.
    let renewed = owner.session_id().unwrap().0;
    let after = loop {
        assert_eq!(
            heard
                .recv_timeout(SOON)
                .expect("not made again on the new session"),
            NodeEvent::Created(path.into())
        );
        match observer.exists(path).unwrap() {
            Some(stat) if stat.ephemeral_owner == renewed => break stat,
            _ => {}
        }
    };
    assert_ne!(after.ephemeral_owner, before);
    assert_eq!(observer.data(path).unwrap().0, b"while cut off");
}

#[test]
fn a_protected_node_carries_its_session_and_takes_a_new_name_on_a_new_session() {
    let f = faulty();
    let path = "/services/node-protected";
    let owner = connect(&f.proxy.connect_string(), Duration::from_millis(1500));
    let observer = connect(&f.server.connect_string(), Duration::from_secs(10));
    let node = PersistentNode::new(&owner, path, NodeMode::ProtectedEphemeral, b"x").unwrap();
    node.start().unwrap();
    assert!(node.wait_for_initial_create(SOON).unwrap());
    let first = node.actual_path().unwrap();
    let name = first.rsplit('/').next().unwrap();
    assert!(
        name.starts_with("_c_") && name.ends_with("-node-protected"),
        "{name}"
    );
    assert_eq!(
        zk_recipes::lock::session_of(name),
        owner.session_id(),
        "the name does not carry the session"
    );
    let heard = events(&node);
    expire_and_renew(&f, &owner);
    let NodeEvent::Created(second) = heard.recv_timeout(SOON).unwrap() else {
        panic!("not made again");
    };
    assert_ne!(first, second);
    assert_eq!(observer.children("/services").unwrap().len(), 1);
    node.close();
    assert!(gone(&observer, &second));
}

/// An ephemeral node at the path that another session owns is not taken over: ours is made
/// once it goes with its session.
#[test]
fn an_ephemeral_node_waits_out_another_session_s_node_at_its_path() {
    let path = root("node-taken");
    let (other, owner) = (client(), client());
    other
        .create_with_parents(&path, b"theirs", CreateMode::Ephemeral)
        .unwrap();
    let node = PersistentNode::new(&owner, &path, NodeMode::Ephemeral, b"ours").unwrap();
    node.start().unwrap();
    assert!(!node
        .wait_for_initial_create(Duration::from_millis(300))
        .unwrap());
    assert_eq!(owner.data(&path).unwrap().0, b"theirs");
    other.close();
    assert!(node.wait_for_initial_create(SOON).unwrap());
    let (data, stat) = owner.data(&path).unwrap();
    assert_eq!(
        (data.as_slice(), stat.ephemeral_owner),
        (&b"ours"[..], owner.session_id().unwrap().0)
    );
}

/// A persistent node found at the path is taken as ours (its data overwritten, as Curator
/// does), kept through a deletion, and deleted by close.
#[test]
fn a_persistent_node_takes_over_what_it_finds_and_is_deleted_on_close() {
    let path = root("node-persistent");
    let (owner, observer) = (client(), client());
    observer
        .create_with_parents(&path, b"old", CreateMode::Persistent)
        .unwrap();
    let node = PersistentNode::new(&owner, &path, NodeMode::Persistent, b"new").unwrap();
    node.start().unwrap();
    assert!(node.wait_for_initial_create(SOON).unwrap());
    assert_eq!(observer.data(&path).unwrap().0, b"new");
    let heard = events(&node);
    observer.delete(&path).unwrap();
    assert_eq!(
        heard.recv_timeout(SOON).unwrap(),
        NodeEvent::Created(path.clone())
    );
    node.close();
    assert!(gone(&observer, &path));
}

/// Where the node cannot be made (no right to create under its parent), the listeners hear
/// why, and the first creation does not come.
#[test]
fn a_node_that_may_not_be_made_tells_its_listeners_why() {
    let path = root("node-no-auth");
    let observer = client();
    observer
        .create_with_acl(
            &path,
            b"",
            CreateMode::Persistent,
            &zk_recipes::acl::read_only(),
        )
        .unwrap();
    let node = PersistentNode::new(
        &observer,
        &format!("{path}/child"),
        NodeMode::Ephemeral,
        b"",
    )
    .unwrap();
    let heard = events(&node);
    node.start().unwrap();
    match heard.recv_timeout(SOON).unwrap() {
        NodeEvent::Failed(e) => assert!(e.is_code(zk_recipes::ZkCode::NoAuth), "{e}"),
        other => panic!("heard {other:?}"),
    }
    assert!(!node.wait_for_initial_create(Duration::ZERO).unwrap());
}

/// A TTL node outlives its TTL while the recipe touches its child, and expires once closed.
#[test]
fn a_ttl_node_lives_past_its_ttl_while_kept_and_expires_once_closed() {
    let server = TestingServer::with_options(ServerOptions {
        extended_types: true,
        container_check_interval: Some(Duration::from_millis(100)),
        ..server_options()
    })
    .unwrap();
    let owner = connect(&server.connect_string(), Duration::from_secs(10));
    let path = "/node-ttl";
    let ttl = Duration::from_millis(600);
    let node = Arc::new(
        PersistentNode::new(&owner, path, NodeMode::PersistentWithTtl(ttl), b"kept").unwrap(),
    );
    node.start().unwrap();
    assert!(node.wait_for_initial_create(SOON).unwrap());
    // Six touches of the child, each a data change we hear: well past the TTL, which the node
    // would not have outlived untouched (the server checks every 100 ms).
    let touch = format!("{path}/{TTL_TOUCH_NODE}");
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut touches = 0;
    while touches < 6 {
        match owner.exists_watch(&touch, &tx).unwrap() {
            Some(_) => match rx.recv_timeout(SOON).expect("no touch").kind {
                WatchKind::DataChanged => touches += 1,
                WatchKind::Deleted => panic!("the touch node expired"),
                _ => {}
            },
            None => {
                rx.recv_timeout(SOON).expect("the touch node never came");
            }
        }
    }
    assert!(
        owner.exists(path).unwrap().is_some(),
        "the node expired while kept"
    );
    node.close();
    assert!(gone(&owner, path), "the node did not expire once closed");
}

#[test]
fn members_see_each_other_join_change_and_leave() {
    use zk_recipes::nodes::GroupMember;
    let path = root("group-basic");
    let (first, second) = (client(), client());
    let a = GroupMember::new(&first, &path, "a", b"pa").unwrap();
    // Before joining, a member lists itself.
    assert_eq!(
        a.current_members().unwrap().into_iter().collect::<Vec<_>>(),
        [("a".to_string(), b"pa".to_vec())]
    );
    a.start().unwrap();
    assert!(a.wait_joined(SOON).unwrap());
    let (tx, rx) = crossbeam_channel::unbounded();
    assert_eq!(a.watch_members(&tx).unwrap().len(), 1);
    let b = GroupMember::new(&second, &path, "b", b"pb").unwrap();
    b.start().unwrap();
    assert!(b.wait_joined(SOON).unwrap());
    rx.recv_timeout(SOON).expect("no news of the join");
    let seen = a.watch_members(&tx).unwrap();
    assert_eq!(seen.get("b").map(Vec::as_slice), Some(&b"pb"[..]));
    assert_eq!(b.current_members().unwrap(), seen);
    b.set_this_data(b"pb2").unwrap();
    assert_eq!(a.current_members().unwrap()["b"], b"pb2");
    b.close();
    rx.recv_timeout(SOON).expect("no news of the leave");
    assert_eq!(
        a.current_members().unwrap().keys().collect::<Vec<_>>(),
        ["a"]
    );
    assert!(GroupMember::new(&first, &path, "x/y", b"").is_err());
}

#[test]
fn a_member_whose_session_is_lost_joins_again() {
    use zk_recipes::nodes::GroupMember;
    let f = faulty();
    let member_client = connect(&f.proxy.connect_string(), Duration::from_millis(1500));
    let observer = connect(&f.server.connect_string(), Duration::from_secs(10));
    let me = GroupMember::new(&member_client, "/group-session", "me", b"x").unwrap();
    me.start().unwrap();
    assert!(me.wait_joined(SOON).unwrap());
    let (tx, rx) = crossbeam_channel::unbounded();
    expire_and_renew(&f, &member_client);
    // Gone with the session, then back on the next.
    loop {
        match observer.exists_watch("/group-session/me", &tx).unwrap() {
            Some(stat) if stat.ephemeral_owner == member_client.session_id().unwrap().0 => break,
            _ => {
                rx.recv_timeout(SOON)
                    .expect("the member never joined again");
            }
        }
    }
}

/// Watching a group that does not exist yet hears the first member join.
#[test]
fn watching_a_group_not_made_yet_hears_the_first_join() {
    use zk_recipes::nodes::GroupMember;
    let path = root("group-empty");
    let (first, second) = (client(), client());
    let watcher = GroupMember::new(&first, &path, "watcher", b"").unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    assert_eq!(watcher.watch_members(&tx).unwrap().len(), 1);
    let joining = GroupMember::new(&second, &path, "joining", b"j").unwrap();
    joining.start().unwrap();
    rx.recv_timeout(SOON).expect("no news of the first join");
    loop {
        if watcher.watch_members(&tx).unwrap().contains_key("joining") {
            break;
        }
        rx.recv_timeout(SOON).expect("the member never showed");
    }
}

/// `close()` returns within `nodes::CLOSE_WAIT` also while the node's thread is in the middle
/// of a look that cannot be answered (its link refused; the data just set).
#[test]
fn closing_a_node_whose_link_is_refused_returns_within_its_bound() {
    let path = root("node-close-refused");
    let proxy = zk_recipes::testing::FaultProxy::start(server().addr()).unwrap();
    let owner = connect(&proxy.connect_string(), Duration::from_secs(10));
    let node = PersistentNode::new(&owner, &path, NodeMode::Ephemeral, b"x").unwrap();
    node.start().unwrap();
    assert!(node.wait_for_initial_create(SOON).unwrap());
    let states = owner.subscribe();
    proxy.refuse();
    next_state(&states, zk_recipes::ConnectionState::Suspended);
    // Not connected: the thread is woken to write it, and looks while the link is refused.
    node.set_data(b"y").unwrap();
    let started = std::time::Instant::now();
    node.close();
    let took = started.elapsed();
    assert!(
        took <= zk_recipes::nodes::CLOSE_WAIT + Duration::from_millis(500),
        "close() returned after {took:?}"
    );
    proxy.heal();
}

/// A look that starts on one session and finds the node gone with it makes the node on the
/// next session: that node is ours, not another session's (review 38a, finding 2: the look
/// compared the owner with the session it started on, and slept with no node of its own).
#[test]
fn a_node_made_on_the_session_after_the_one_a_look_began_on_is_taken_as_ours() {
    let f = faulty();
    let path = "/node-look-spans-sessions";
    let owner = connect(&f.proxy.connect_string(), Duration::from_secs(4));
    let observer = connect(&f.server.connect_string(), Duration::from_secs(10));
    let node = PersistentNode::new(&owner, path, NodeMode::Ephemeral, b"a").unwrap();
    node.start().unwrap();
    assert!(node.wait_for_initial_create(SOON).unwrap());
    let sub = owner.subscribe();
    let (id, passwd) = owner.testing_session_credentials().unwrap();
    f.proxy.blackhole();
    next_state(&sub, zk_recipes::ConnectionState::Suspended);
    assert!(expire(&f.server, id, &passwd));
    // A look begins (the data changed) while the client still has its first session.
    node.set_data(b"b").unwrap();
    f.proxy.heal();
    let made = wait_for(SOON, || {
        let stat = observer.exists(path).ok()??;
        (stat.ephemeral_owner == owner.session_id()?.0).then_some(())
    });
    assert!(made.is_some(), "the node was never made on the new session");
    let actual = wait_for(SOON, || node.actual_path());
    assert_eq!(
        actual.as_deref(),
        Some(path),
        "the node made is not taken as ours"
    );
}

/// A protected node whose creates run `fault` before the first goes out; the paths its creates
/// went out under.
fn protected_with_first_create(
    client: &Client,
    path: &str,
    fault: impl Fn() + Send + Sync + 'static,
) -> (PersistentNode, Arc<parking_lot::Mutex<Vec<String>>>) {
    let names = Arc::new(parking_lot::Mutex::new(Vec::<String>::new()));
    let options = {
        let names = names.clone();
        zk_recipes::LockOptions::new().testing_before_create(move |p| {
            let first = {
                let mut seen = names.lock();
                seen.push(p.to_owned());
                seen.len() == 1
            };
            if first {
                fault();
            }
        })
    };
    let node = PersistentNode::testing_with_options(
        client,
        path,
        NodeMode::ProtectedEphemeral,
        b"p",
        options,
    )
    .unwrap();
    (node, names)
}

/// A protected node's create whose answer was lost can land after `close()` deleted the node
/// (a follower that held the forwarded request delivers it once the session is attached there
/// again: the client's janitor notes). The landing is made here by the test, on the node's own
/// session under the lost create's name, after the close.
#[test]
fn a_protected_nodes_create_that_lands_after_close_is_removed() {
    let f = Arc::new(faulty());
    let parent = "/protected-lands-late";
    let observer = connect(&f.server.connect_string(), Duration::from_secs(10));
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(10));
    observer.ensure_path(parent).unwrap();
    let session = client.session_id();
    let (held_tx, held_rx) = mpsc::channel();
    let (node, names) = {
        let f = f.clone();
        protected_with_first_create(&client, &format!("{parent}/worker"), move || {
            // The first create never reaches the server: held, then the connection cut.
            f.proxy.hold_requests();
            held_tx.send(()).unwrap();
        })
    };
    let cutter = {
        let f = f.clone();
        std::thread::spawn(move || {
            held_rx.recv_timeout(SOON).unwrap();
            // More than a ping's 12 bytes: the create is held.
            wait_for(SOON, || (f.proxy.held_requests() > 12).then_some(()))
                .expect("the create never left the client");
            f.proxy.cut();
            f.proxy.heal();
        })
    };
    node.start().unwrap();
    assert!(node.wait_for_initial_create(SOON).unwrap());
    cutter.join().unwrap();
    node.close();
    janitor_caught_up(&client, "/protected-lands-late-scratch");
    let names = names.lock().clone();
    assert!(names.len() >= 2, "{names:?}");
    assert!(
        names.iter().all(|n| n == &names[0]),
        "a retry went out under another name: {names:?}"
    );
    // The lost create lands now, on the same session.
    client
        .create(&names[0], b"", CreateMode::Ephemeral)
        .unwrap();
    assert!(
        wait_children(&observer, parent, SOON, |c| c.is_empty()),
        "the late node stayed: {:?}",
        observer.children(parent)
    );
    assert_eq!(client.session_id(), session, "it went with its session");
}

/// A protected name carries the session it was chosen for. If the session changes before its
/// create goes out, the create must not go out on the new one: a node made there whose answer
/// was lost names the old session, and the next look makes the node again under the new
/// session's name, leaving the first behind for the new session's life.
#[test]
fn a_protected_name_chosen_for_a_lost_session_is_never_created_under_the_next() {
    let f = Arc::new(faulty());
    let parent = "/protected-name-for-a-lost-session";
    let observer = connect(&f.server.connect_string(), Duration::from_secs(10));
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(10));
    observer.ensure_path(parent).unwrap();
    let first = client.session_id();
    let (node, names) = {
        let (f, renewed) = (f.clone(), client.clone());
        protected_with_first_create(&client, &format!("{parent}/worker"), move || {
            // The session ends between the name and its create; then the answers are held.
            expire_and_renew(&f, &renewed);
            f.proxy.hold_replies();
        })
    };
    let cutter = lose_a_create_made_under_the_old_name(&f, &names);
    node.start().unwrap();
    assert!(node.wait_for_initial_create(SOON).unwrap());
    cutter.join().unwrap();
    assert_ne!(client.session_id(), first);
    let actual = node.actual_path().unwrap();
    assert_ne!(actual, names.lock()[0], "made under the old session's name");
    let children = observer.children(parent).unwrap();
    assert_eq!(children.len(), 1, "a node was left behind: {children:?}");
    node.close();
    assert!(wait_children(&observer, parent, SOON, |c| c.is_empty()));
}
