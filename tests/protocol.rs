//! The native protocol client against a real server: every opcode the client offers, pipelined
//! requests from several threads, and watches the server restores after a reconnect.

mod common;

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use common::*;
use crossbeam_channel::unbounded;
use zk_recipes::acl::{self, Acl, Id, Permission};
use zk_recipes::testing::{ServerOptions, TestingServer};
use zk_recipes::{
    AddWatchMode, Client, ConnectionState::*, CreateMode, Error, Op, OpResult, WatchKind, ZkCode,
};

#[test]
fn creates_report_path_and_stat_and_sequential_and_ttl_modes_work() {
    init_logs();
    let server = TestingServer::with_options(ServerOptions {
        extended_types: true,
        ..Default::default()
    })
    .unwrap();
    let client = connect(&server.connect_string(), Duration::from_secs(10));
    let (path, stat) = client
        .create_with_acl("/p", b"abc", CreateMode::Persistent, &acl::open())
        .unwrap();
    assert_eq!(
        (path.as_str(), stat.data_length, stat.version),
        ("/p", 3, 0)
    );
    assert_eq!(stat, client.exists("/p").unwrap().unwrap());

    let a = client
        .create("/p/s-", b"", CreateMode::PersistentSequential)
        .unwrap();
    let b = client
        .create("/p/s-", b"", CreateMode::PersistentSequential)
        .unwrap();
    assert!(a < b && a.starts_with("/p/s-") && a.len() == "/p/s-".len() + 10);

    let ttl = client
        .create(
            "/p/ttl",
            b"",
            CreateMode::PersistentWithTtl(Duration::from_secs(60)),
        )
        .unwrap();
    assert!(client.exists(&ttl).unwrap().is_some());
    // On a server without extended types the same request is refused with a typed code.
    let plain = connect(
        &server_without_ttl().connect_string(),
        Duration::from_secs(10),
    );
    let refused = plain
        .create(
            "/ttl",
            b"",
            CreateMode::PersistentWithTtl(Duration::from_secs(60)),
        )
        .unwrap_err();
    assert!(
        refused.is_code(ZkCode::Unimplemented),
        "TTL without extended types: {refused:?}"
    );
}

fn server_without_ttl() -> &'static TestingServer {
    server()
}

#[test]
fn acls_are_read_and_replaced_with_version_checks() {
    let client = connect(&server().connect_string(), Duration::from_secs(10));
    let root = root("acl");
    client.create(&root, b"", CreateMode::Persistent).unwrap();
    let (got, stat) = client.acl(&root).unwrap();
    assert_eq!(got, acl::open());
    let stale = client
        .set_acl(&root, &acl::open(), Some(stat.aversion + 1))
        .unwrap_err();
    assert!(stale.is_code(ZkCode::BadVersion), "{stale:?}");
    let read_only = vec![Acl::new(Permission::READ, Id::new("world", "anyone"))];
    let stat2 = client
        .set_acl(&root, &read_only, Some(stat.aversion))
        .unwrap();
    assert_eq!(stat2.aversion, stat.aversion + 1);
    assert_eq!(client.acl(&root).unwrap().0, read_only);
    let denied = client.set_data(&root, b"x", None).unwrap_err();
    assert!(denied.is_code(ZkCode::NoAuth), "{denied:?}");
}

/// Issue 20 item 10: a create in a transaction reports the node's real stat, or none at all
/// (servers before 3.7.2 / 3.8.2, Debian's 3.8.0 among them, answer with the path alone),
/// never a zeroed stat that looks like one.
#[test]
fn a_created_stat_in_a_transaction_is_the_nodes_or_absent() {
    let client = connect(&server().connect_string(), Duration::from_secs(10));
    let root = root("multi-stat");
    client.create(&root, b"", CreateMode::Persistent).unwrap();
    let a = format!("{root}/a");
    let results = client
        .multi(&[Op::Create {
            path: a.clone(),
            data: b"1".to_vec(),
            mode: CreateMode::Persistent,
        }])
        .unwrap();
    let OpResult::Created { path, stat } = &results[0] else {
        panic!("{results:?}");
    };
    assert_eq!(*path, a);
    if let Some(stat) = stat {
        assert_eq!(Some(*stat), client.exists(&a).unwrap());
    }
}

#[test]
fn a_transaction_applies_all_or_nothing_and_names_the_failed_operation() {
    let client = connect(&server().connect_string(), Duration::from_secs(10));
    let root = root("multi");
    client.create(&root, b"", CreateMode::Persistent).unwrap();
    let a = format!("{root}/a");
    let results = client
        .multi(&[
            Op::Create {
                path: a.clone(),
                data: b"1".to_vec(),
                mode: CreateMode::Persistent,
            },
            Op::Check {
                path: a.clone(),
                version: Some(0),
            },
            Op::SetData {
                path: a.clone(),
                data: b"2".to_vec(),
                version: Some(0),
            },
        ])
        .unwrap();
    assert!(matches!(&results[0], OpResult::Created { path, .. } if *path == a));
    assert_eq!(results[1], OpResult::Checked);
    assert!(matches!(results[2], OpResult::DataSet(s) if s.version == 1));

    let b = format!("{root}/b");
    let failed = client
        .multi(&[
            Op::Create {
                path: b.clone(),
                data: vec![],
                mode: CreateMode::Persistent,
            },
            Op::Check {
                path: a.clone(),
                version: Some(0),
            },
        ])
        .unwrap_err();
    assert_eq!(
        failed,
        Error::ZooKeeper {
            code: ZkCode::BadVersion,
            path: a.clone()
        }
    );
    assert!(client.exists(&b).unwrap().is_none(), "nothing applied");
    assert!(matches!(
        client.multi(&[Op::Exists { path: a }]),
        Err(Error::BadArguments(_))
    ));
}

#[test]
fn sync_who_am_i_and_ephemerals_answer() {
    let client = Client::builder(&server().connect_string())
        .authorization("digest", b"alice:secret".to_vec())
        .connect()
        .unwrap();
    let root = root("misc");
    client.create(&root, b"", CreateMode::Persistent).unwrap();
    client.sync(&root).unwrap();
    let who = client.who_am_i().unwrap();
    assert!(
        who.iter()
            .any(|c| c.scheme == "digest" && c.user == "alice"),
        "{who:?}"
    );
    let e = client
        .create(&format!("{root}/e"), b"", CreateMode::Ephemeral)
        .unwrap();
    assert_eq!(client.ephemerals(&root).unwrap(), vec![e]);
}

#[test]
fn persistent_recursive_watches_report_every_change_below_until_removed() {
    let client = connect(&server().connect_string(), Duration::from_secs(10));
    let root = root("addwatch");
    client.create(&root, b"", CreateMode::Persistent).unwrap();
    let (tx, rx) = unbounded();
    client
        .add_watch(&root, AddWatchMode::PersistentRecursive, &tx)
        .unwrap();
    let child = format!("{root}/c");
    client.create(&child, b"", CreateMode::Persistent).unwrap();
    client.set_data(&child, b"x", None).unwrap();
    let got: Vec<_> = (0..2)
        .map(|_| rx.recv_timeout(SOON).expect("no event"))
        .map(|e| (e.kind, e.path))
        .collect();
    assert_eq!(
        got,
        vec![
            (WatchKind::Created, child.clone()),
            (WatchKind::DataChanged, child.clone())
        ]
    );
    client.remove_watch(&root, &tx).unwrap();
    client.delete(&child).unwrap();
    // A later one-shot watch's event comes after anything the removed watch could still send.
    let (probe, probe_rx) = unbounded();
    client.exists_watch(&child, &probe).unwrap();
    client.create(&child, b"", CreateMode::Persistent).unwrap();
    probe_rx.recv_timeout(SOON).expect("probe event");
    assert!(rx.try_recv().is_err(), "a removed watch still reported");
}

#[test]
fn pipelined_requests_from_several_threads_are_all_sent_before_any_answer_and_answered_in_order() {
    let f = faulty();
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(20));
    let observer = connect(&f.server.connect_string(), Duration::from_secs(20));
    client.create("/q", b"", CreateMode::Persistent).unwrap();
    // The server applies what it gets, but no answer reaches the client until heal.
    f.proxy.hold_replies();
    let (tx, rx) = mpsc::channel();
    for t in 0..4 {
        let (client, tx) = (client.clone(), tx.clone());
        thread::spawn(move || {
            let ops: Vec<Op> = (0..25)
                .map(|i| Op::Create {
                    path: format!("/q/t{t}-"),
                    data: vec![i],
                    mode: CreateMode::PersistentSequential,
                })
                .collect();
            tx.send(client.pipeline(&ops)).unwrap();
        });
    }
    wait_for(SOON, || {
        (observer.children("/q").unwrap().len() == 100).then_some(())
    })
    .expect("all 100 requests were applied without a single answer");
    assert!(rx.try_recv().is_err(), "no call can have returned yet");
    f.proxy.heal();
    for _ in 0..4 {
        let results = rx
            .recv_timeout(SOON)
            .expect("pipeline never returned")
            .unwrap();
        let paths: Vec<String> = results
            .into_iter()
            .map(|r| match r.unwrap() {
                OpResult::Created { path, .. } => path,
                other => panic!("{other:?}"),
            })
            .collect();
        let mut sorted = paths.clone();
        sorted.sort_by_key(|p| p[p.len() - 10..].to_owned());
        assert_eq!(paths, sorted, "answers out of the order sent");
        for (i, p) in paths.iter().enumerate() {
            assert_eq!(observer.data(p).unwrap().0, vec![i as u8]);
        }
    }
}

#[test]
fn a_watch_set_before_a_disconnect_fires_on_changes_after_it_without_a_reread() {
    let f = faulty();
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(10));
    let other = connect(&f.server.connect_string(), Duration::from_secs(10));
    client.create("/w1", b"", CreateMode::Persistent).unwrap();
    client.create("/w2", b"", CreateMode::Persistent).unwrap();
    let (tx, rx) = unbounded();
    client.data_watch("/w1", &tx).unwrap();
    client.data_watch("/w2", &tx).unwrap();
    let sub = client.subscribe();

    // A change after the reconnect.
    f.proxy.cut();
    next_state(&sub, Suspended);
    next_state(&sub, Reconnected);
    other.set_data("/w1", b"after", None).unwrap();
    let e = rx
        .recv_timeout(SOON)
        .expect("the restored watch never fired");
    assert_eq!((e.kind, e.path.as_str()), (WatchKind::DataChanged, "/w1"));

    // A change made while the client was away fires as soon as it is back.
    f.proxy.refuse();
    next_state(&sub, Suspended);
    other.set_data("/w2", b"meanwhile", None).unwrap();
    f.proxy.heal();
    next_state(&sub, Reconnected);
    let e = rx
        .recv_timeout(SOON)
        .expect("the change made meanwhile was not reported");
    assert_eq!((e.kind, e.path.as_str()), (WatchKind::DataChanged, "/w2"));
    assert_eq!(client.testing_watch_count(), 0, "fired watches are gone");
}

/// Issue 20, item 1. An `exists` watch set on a node that exists is, on the server, a data
/// watch; restored after a reconnect as an exist watch, the server would wait for the node's
/// creation and never report its deletion during the cut (a hand-written lock would hang).
#[test]
fn an_exists_watch_on_a_present_node_reports_its_deletion_during_a_disconnect() {
    let f = faulty();
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(10));
    let other = connect(&f.server.connect_string(), Duration::from_secs(10));
    client
        .create("/present", b"", CreateMode::Persistent)
        .unwrap();
    let (tx, rx) = unbounded();
    assert!(client.exists_watch("/present", &tx).unwrap().is_some());
    let sub = client.subscribe();

    f.proxy.refuse();
    next_state(&sub, Suspended);
    other.delete("/present").unwrap();
    f.proxy.heal();
    next_state(&sub, Reconnected);
    let e = rx
        .recv_timeout(SOON)
        .expect("the deletion during the disconnect was never reported");
    assert_eq!((e.kind, e.path.as_str()), (WatchKind::Deleted, "/present"));
}

/// Issue 20, item 4: a watch dies with its session, and whoever waits on it must hear so
/// (as Java's watchers get `Expired` and `Closed`), not wait for ever.
#[test]
fn watchers_hear_when_the_session_ends_or_the_client_closes() {
    let f = faulty();
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(10));
    client
        .create("/doomed", b"", CreateMode::Persistent)
        .unwrap();
    let (tx, rx) = unbounded();
    client.data_watch("/doomed", &tx).unwrap();
    let (bounded_tx, bounded_rx) = crossbeam_channel::bounded(1);
    client.children_watch("/doomed", &bounded_tx).unwrap();
    expire_and_renew(&f, &client);
    let e = rx
        .recv_timeout(SOON)
        .expect("the watcher never heard that its session ended");
    assert_eq!(
        (e.kind, e.path.as_str()),
        (WatchKind::SessionLost, "/doomed")
    );
    let e = bounded_rx
        .recv_timeout(SOON)
        .expect("nor did the bounded one");
    assert_eq!(e.kind, WatchKind::SessionLost);

    client.data_watch("/doomed", &tx).unwrap();
    client.close();
    let e = rx
        .recv_timeout(SOON)
        .expect("the watcher never heard that the client closed");
    assert_eq!((e.kind, e.path.as_str()), (WatchKind::Closed, "/doomed"));
}

/// Issue 20, item 5: removing one channel's watch must not take away a server watch another
/// channel still needs. On 3.6–3.8 servers, removing a data or child watch also strips a
/// persistent watch at the path.
#[test]
fn removing_one_channel_s_watch_leaves_another_channel_s_persistent_watch() {
    let client = connect(&server().connect_string(), Duration::from_secs(10));
    let other = connect(&server().connect_string(), Duration::from_secs(10));
    let path = root("shared-watch");
    client.create(&path, b"", CreateMode::Persistent).unwrap();
    let (persistent, events) = unbounded();
    client
        .add_watch(&path, zk_recipes::AddWatchMode::Persistent, &persistent)
        .unwrap();
    let (data_tx, _data_rx) = unbounded();
    client.data_watch(&path, &data_tx).unwrap();
    let (child_tx, _child_rx) = unbounded();
    client.children_watch(&path, &child_tx).unwrap();
    client.remove_watch(&path, &data_tx).unwrap();
    client.remove_watch(&path, &child_tx).unwrap();

    other.set_data(&path, b"changed", None).unwrap();
    let e = events
        .recv_timeout(SOON)
        .expect("the persistent watch was stripped with the others");
    assert_eq!(
        (e.kind, e.path.as_str()),
        (WatchKind::DataChanged, path.as_str())
    );
}

/// Issue 20, item 10: a watch request that gives up (its deadline passed before the answer)
/// must not take away the same channel's earlier watch on the same node, which the server set.
#[test]
fn a_watch_that_gives_up_leaves_the_channel_s_earlier_watch() {
    let f = faulty();
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(10));
    let other = connect(&f.server.connect_string(), Duration::from_secs(10));
    client
        .create("/twice", b"", CreateMode::Persistent)
        .unwrap();
    let (tx, rx) = unbounded();
    client.data_watch("/twice", &tx).unwrap();
    // The second request's answer is held past its deadline.
    f.proxy.hold_replies();
    let gave_up = client
        .with_timeout(Duration::from_millis(200))
        .data_watch("/twice", &tx);
    assert!(matches!(gave_up, Err(Error::Timeout { .. })), "{gave_up:?}");
    f.proxy.heal();
    other.set_data("/twice", b"changed", None).unwrap();
    let e = rx
        .recv_timeout(SOON)
        .expect("the earlier watch was taken away with the one that gave up");
    assert_eq!(
        (e.kind, e.path.as_str()),
        (WatchKind::DataChanged, "/twice")
    );
}
