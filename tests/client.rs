//! The framework client against a real server: sessions, operations, watches, errors.

mod common;

use std::time::Duration;

use common::*;
use crossbeam_channel::unbounded;
use rstest::rstest;
use zk_recipes::testing::{ServerOptions, TestingServer};
use zk_recipes::{Client, CreateMode, Error, WatchKind, ZkCode};

#[test]
fn connect_waits_for_a_session_and_knows_its_id_and_timeout() {
    let client = connect(&server().connect_string(), Duration::from_secs(10));
    let id = client.session_id().expect("a session after connect");
    assert!(client.is_connected());
    let root = root("session-id");
    client.ensure_path(&root).unwrap();
    let node = client
        .create(&format!("{root}/e"), b"", CreateMode::Ephemeral)
        .unwrap();
    let (_, stat) = client.data(&node).unwrap();
    assert_eq!(stat.ephemeral_owner, id.0);
    assert_eq!(client.session_timeout(), Duration::from_secs(10));
    assert!(client.session_valid_until().unwrap() > std::time::Instant::now());
}

#[test]
fn the_server_clamps_the_session_timeout_and_the_client_reports_the_granted_one() {
    // The harness's server grants at most 60 s.
    let client = connect(&server().connect_string(), Duration::from_secs(600));
    assert_eq!(client.session_timeout(), Duration::from_secs(60));
}

#[test]
fn connect_times_out_when_nothing_listens() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = Client::builder(&format!("127.0.0.1:{port}"))
        .connection_timeout(Duration::from_millis(500))
        .connect()
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    // What the last attempt met is named: here a refusal; in a process out of descriptors,
    // "Too many open files", which no server could mend.
    assert!(
        err.to_string()
            .contains(&format!("last attempt: 127.0.0.1:{port}: ")),
        "{err}"
    );
    assert!(err.to_string().contains("refused"), "{err}");
}

#[rstest]
#[case("")]
#[case("127.0.0.1")]
#[case("127.0.0.1:0")]
#[case("127.0.0.1:99999")]
#[case("127.0.0.1:2181,")]
#[case("127.0.0.1:2181/trailing/")]
#[case("bad host:2181")]
fn bad_connect_strings_are_refused_before_connecting(#[case] s: &str) {
    assert!(
        matches!(Client::connect(s), Err(Error::BadArguments(_))),
        "{s:?}"
    );
}

#[rstest]
#[case("relative")]
#[case("/trailing/")]
#[case("/a//b")]
#[case("/a/../b")]
#[case("/a/./b")]
#[case("/nul\0")]
#[case("/ctl\u{1}")]
fn invalid_paths_are_refused_before_anything_is_sent(#[case] path: &str) {
    let client = connect(&server().connect_string(), Duration::from_secs(10));
    assert!(matches!(
        client.exists(path),
        Err(Error::InvalidPath { .. })
    ));
    assert!(matches!(
        client.create(path, b"", CreateMode::Persistent),
        Err(Error::InvalidPath { .. })
    ));
    assert!(matches!(
        client.delete(path),
        Err(Error::InvalidPath { .. })
    ));
}

#[test]
fn data_over_the_limit_is_refused_before_anything_is_sent() {
    let client = connect(&server().connect_string(), Duration::from_secs(10));
    let big = vec![0u8; zk_recipes::client::MAX_DATA_LEN + 1];
    let root = root("big");
    assert!(matches!(
        client.create(&root, &big, CreateMode::Persistent),
        Err(Error::BadArguments(_))
    ));
    assert!(client.exists(&root).unwrap().is_none());
}

#[test]
fn node_operations_work_and_report_typed_errors() {
    let client = connect(&server().connect_string(), Duration::from_secs(10));
    let root = root("ops");
    client.ensure_path(&format!("{root}/a/b")).unwrap();
    client.ensure_path(&format!("{root}/a/b")).unwrap(); // idempotent
    let n = format!("{root}/a/b/n");
    assert_eq!(
        client.create(&n, b"one", CreateMode::Persistent).unwrap(),
        n
    );
    let err = client.create(&n, b"", CreateMode::Persistent).unwrap_err();
    assert!(err.is_node_exists(), "{err:?}");

    let (data, stat) = client.data(&n).unwrap();
    assert_eq!(data, b"one");
    let stat2 = client.set_data(&n, b"two", Some(stat.version)).unwrap();
    assert_eq!(stat2.version, stat.version + 1);
    let stale = client
        .set_data(&n, b"three", Some(stat.version))
        .unwrap_err();
    assert!(stale.is_code(ZkCode::BadVersion), "{stale:?}");

    let s1 = client
        .create(
            &format!("{root}/a/b/s-"),
            b"",
            CreateMode::PersistentSequential,
        )
        .unwrap();
    let s2 = client
        .create(
            &format!("{root}/a/b/s-"),
            b"",
            CreateMode::PersistentSequential,
        )
        .unwrap();
    assert!(s1 < s2 && s1.len() == format!("{root}/a/b/s-").len() + 10);
    let mut kids = client.children(&format!("{root}/a/b")).unwrap();
    kids.sort();
    assert_eq!(kids.len(), 3);

    let not_empty = client.delete(&format!("{root}/a/b")).unwrap_err();
    assert!(not_empty.is_code(ZkCode::NotEmpty), "{not_empty:?}");
    client.delete(&n).unwrap();
    client.delete(&n).unwrap(); // gone already: counts as deleted
    assert!(client.delete_version(&n, 0).unwrap_err().is_no_node());
    assert!(client.data(&n).unwrap_err().is_no_node());

    let deep = format!("{root}/x/y/z");
    client
        .create_with_parents(&deep, b"", CreateMode::Persistent)
        .unwrap();
    assert!(client.exists(&deep).unwrap().is_some());
}

#[test]
fn watches_report_into_a_channel_that_exists_before_they_are_set() {
    let client = connect(&server().connect_string(), Duration::from_secs(10));
    let other = connect(&server().connect_string(), Duration::from_secs(10));
    let root = root("watch");
    client.ensure_path(&root).unwrap();
    let node = format!("{root}/n");
    client.create(&node, b"", CreateMode::Persistent).unwrap();
    let (tx, rx) = unbounded();

    client.data_watch(&node, &tx).unwrap();
    client.children_watch(&root, &tx).unwrap();
    assert!(client
        .exists_watch(&format!("{root}/later"), &tx)
        .unwrap()
        .is_none());

    other.set_data(&node, b"x", None).unwrap();
    let e = rx.recv_timeout(SOON).unwrap();
    assert_eq!(
        (e.kind, e.path.as_str()),
        (WatchKind::DataChanged, node.as_str())
    );

    other
        .create(&format!("{root}/later"), b"", CreateMode::Persistent)
        .unwrap();
    let mut got = [
        rx.recv_timeout(SOON).unwrap(),
        rx.recv_timeout(SOON).unwrap(),
    ];
    got.sort_by_key(|e| e.path.clone());
    assert_eq!(got[0].kind, WatchKind::ChildrenChanged);
    assert_eq!(got[0].path, root);
    assert_eq!(got[1].kind, WatchKind::Created);
}

#[test]
fn namespace_and_chroot_scope_every_path() {
    let root = root("ns");
    let base = connect(&server().connect_string(), Duration::from_secs(10));
    base.ensure_path(&root).unwrap();
    let chrooted = Client::builder(&format!("{}{root}", server().connect_string()))
        .namespace("app/locks")
        .connect()
        .unwrap();
    let created = chrooted.create("/n", b"v", CreateMode::Persistent).unwrap();
    assert_eq!(created, "/n");
    assert_eq!(base.data(&format!("{root}/app/locks/n")).unwrap().0, b"v");
    assert_eq!(chrooted.children("/").unwrap(), vec!["n".to_string()]);
    let (tx, rx) = unbounded();
    chrooted.data_watch("/n", &tx).unwrap();
    base.delete(&format!("{root}/app/locks/n")).unwrap();
    let e = rx.recv_timeout(SOON).unwrap();
    assert_eq!((e.kind, e.path.as_str()), (WatchKind::Deleted, "/n"));
}

#[test]
fn close_removes_ephemeral_nodes_at_once_and_later_calls_fail_with_closed() {
    let observer = connect(&server().connect_string(), Duration::from_secs(10));
    let client = connect(&server().connect_string(), Duration::from_secs(60));
    let root = root("close");
    client.ensure_path(&root).unwrap();
    let node = client
        .create(&format!("{root}/e"), b"", CreateMode::Ephemeral)
        .unwrap();
    let clone = client.clone();
    client.close();
    // With a 60 s session, only an explicit close removes the node this soon.
    assert!(observer.exists(&node).unwrap().is_none());
    assert!(matches!(clone.exists("/"), Err(Error::Closed)));
    assert!(!clone.is_connected());
}

#[test]
fn every_subscriber_sees_the_same_events_in_order() {
    let f = faulty();
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(10));
    let (a, b) = (client.subscribe(), client.subscribe());
    let id = client.session_id().unwrap();
    f.proxy.cut();
    for sub in [&a, &b] {
        assert_eq!(
            next_state(sub, zk_recipes::ConnectionState::Suspended).session_id,
            id
        );
        assert_eq!(
            next_state(sub, zk_recipes::ConnectionState::Reconnected).session_id,
            id
        );
    }
}

/// Containers go out with their own opcode, so the server makes a real container and reaps
/// it once its last child is gone. (The server shows a container's owner as 0, like a
/// persistent node's, so only the reaping tells them apart.)
#[test]
fn container_mode_makes_a_container_the_server_reaps() {
    init_logs();
    let server = TestingServer::with_options(ServerOptions {
        container_check_interval: Some(Duration::from_millis(100)),
        ..Default::default()
    })
    .unwrap();
    let client = connect(&server.connect_string(), Duration::from_secs(10));
    let created = client.create("/c", b"", CreateMode::Container).unwrap();
    let child = client.create("/c/x", b"", CreateMode::Ephemeral).unwrap();
    client.delete(&child).unwrap();
    wait_for(SOON, || {
        client.exists(&created).unwrap().is_none().then_some(())
    })
    .expect("the server never reaped the empty container");
}

/// Issue 20, item 3: a watch channel that is bounded and full must never stall the client.
/// The events wait for room, in order, while the client's own work (a hold's loss, closing)
/// goes on.
#[test]
fn a_full_bounded_watch_channel_stalls_nothing() {
    let client = connect(&server().connect_string(), Duration::from_secs(10));
    let other = connect(&server().connect_string(), Duration::from_secs(10));
    let root = root("full-channel");
    client.create(&root, b"", CreateMode::Persistent).unwrap();
    let (tx, rx) = crossbeam_channel::bounded(1);
    for name in ["a", "b", "c"] {
        let path = format!("{root}/{name}");
        client.create(&path, b"", CreateMode::Persistent).unwrap();
        client.data_watch(&path, &tx).unwrap();
    }
    let mutex = zk_recipes::InterProcessMutex::new(&client, &format!("{root}/lock")).unwrap();
    let guard = mutex.acquire().unwrap();
    let lost = guard.lost();
    for name in ["a", "b", "c"] {
        other
            .set_data(&format!("{root}/{name}"), b"x", None)
            .unwrap();
    }
    // The channel holds one event; two wait. Someone deletes the hold's node: the client must
    // still notice.
    other.delete(guard.node_path()).unwrap();
    assert!(
        lost.recv_timeout(SOON).is_err(),
        "the hold's loss went unnoticed behind a full channel"
    );
    drop(guard);
    // Every event comes, in order, once there is room.
    let got: Vec<String> = (0..3)
        .map(|_| rx.recv_timeout(SOON).expect("an event was lost").path)
        .collect();
    let want: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|n| format!("{root}/{n}"))
        .collect();
    assert_eq!(got, want);
    // And closing does not wait for the channel.
    let (tx2, rx2) = crossbeam_channel::bounded(1);
    client.data_watch(&format!("{root}/a"), &tx2).unwrap();
    client.data_watch(&format!("{root}/b"), &tx2).unwrap();
    other.set_data(&format!("{root}/a"), b"y", None).unwrap();
    other.set_data(&format!("{root}/b"), b"y", None).unwrap();
    let (done_tx, done) = crossbeam_channel::bounded(1);
    let c = client.clone();
    std::thread::spawn(move || {
        c.close();
        let _ = done_tx.send(());
    });
    assert!(
        done.recv_timeout(SOON).is_ok(),
        "close() hung on a full channel"
    );
    drop(rx2);
}

/// Issue 20, item 7: a request over the server's frame limit (`jute.maxbuffer`, 0xfffff
/// bytes by default) makes the server drop the connection, which suspends every user of the
/// client. It fails alone, with a typed error, before anything is sent.
#[test]
fn a_request_over_the_frame_limit_fails_alone_before_it_is_sent() {
    let client = connect(&server().connect_string(), Duration::from_secs(10));
    let path = root("too-large");
    client.create(&path, b"", CreateMode::Persistent).unwrap();
    let sub = client.subscribe();
    let big = vec![7u8; 1024 * 1024];
    let result = client.set_data(&path, &big, None);
    assert!(
        matches!(result, Err(Error::RequestTooLarge { .. })),
        "{result:?}"
    );
    let ops: Vec<zk_recipes::Op> = (0..20)
        .map(|i| zk_recipes::Op::Create {
            path: format!("{path}/n{i}"),
            data: vec![1; 60_000],
            mode: CreateMode::Persistent,
        })
        .collect();
    let result = client.multi(&ops);
    assert!(
        matches!(result, Err(Error::RequestTooLarge { .. })),
        "{result:?}"
    );
    // The connection never broke.
    assert!(client.exists(&path).unwrap().is_some());
    assert!(sub.try_recv().is_none(), "the client was suspended");
}

/// Issue 20: the calls a user of the Java client reaches for. A listing with the parent's stat,
/// the number of all descendants, and reads of several nodes at one point in time.
#[test]
fn children_with_stat_all_children_number_and_multi_read() {
    let client = connect(&server().connect_string(), Duration::from_secs(10));
    let base = root("reads");
    client
        .create(&base, b"top", CreateMode::Persistent)
        .unwrap();
    for name in ["a", "b"] {
        let p = format!("{base}/{name}");
        client
            .create(&p, name.as_bytes(), CreateMode::Persistent)
            .unwrap();
        client
            .create(&format!("{p}/x"), b"", CreateMode::Persistent)
            .unwrap();
    }
    let (mut kids, stat) = client.children_stat(&base).unwrap();
    kids.sort();
    assert_eq!(kids, ["a", "b"]);
    assert_eq!(stat.num_children, 2);
    assert_eq!(client.all_children_number(&base).unwrap(), 4);

    let results = client
        .multi_read(&[
            zk_recipes::Op::GetData {
                path: format!("{base}/a"),
            },
            zk_recipes::Op::GetChildren {
                path: format!("{base}/b"),
            },
            zk_recipes::Op::GetData {
                path: format!("{base}/missing"),
            },
        ])
        .unwrap();
    assert!(matches!(&results[0], Ok(zk_recipes::OpResult::Data(d, _)) if d == b"a"));
    assert!(matches!(&results[1], Ok(zk_recipes::OpResult::Children(c)) if c == &["x"]));
    assert!(
        matches!(&results[2], Err(e) if e.is_no_node()),
        "{:?}",
        results[2]
    );
    // Writes are refused before anything is sent.
    assert!(matches!(
        client.multi_read(&[zk_recipes::Op::Delete {
            path: base.clone(),
            version: None
        }]),
        Err(Error::BadArguments(_))
    ));
}

/// Issue 20: re-attaching to a session from its id and password (handed over from another
/// process, as Java's `ZooKeeper(..., sessionId, sessionPasswd)`), and a clear error when it
/// has expired.
#[test]
fn a_client_reattaches_to_a_live_session_and_refuses_an_expired_one() {
    // The first process: it stops reaching the server (as if it died) without closing the
    // session, so it does not take the session back.
    let proxy = zk_recipes::testing::FaultProxy::start(server().addr()).unwrap();
    let first = connect(&proxy.connect_string(), Duration::from_secs(10));
    let path = root("reattach");
    let node = first.create(&path, b"", CreateMode::Ephemeral).unwrap();
    let (id, passwd) = first.testing_session_credentials().unwrap();
    proxy.refuse();
    let second = Client::builder(&server().connect_string())
        .session_timeout(Duration::from_secs(10))
        .session(id, passwd.clone())
        .connect()
        .unwrap();
    assert_eq!(second.session_id(), Some(id));
    assert_eq!(
        second.exists(&node).unwrap().unwrap().ephemeral_owner,
        id.0,
        "the node of the session it took over"
    );
    // Closing the session ends it on the server; re-attaching then fails.
    second.close();
    let again = Client::builder(&server().connect_string())
        .session(id, passwd)
        .connect();
    assert!(
        matches!(again, Err(Error::SessionLost { session_id }) if session_id == id),
        "{again:?}"
    );
}

/// `io_thread_reads_all`: a client holds one descriptor, its socket, where a default one holds
/// an epoll instance beside it (and an event descriptor once a thread of it has waited for a
/// watch). Counted in a child process that runs only `descriptors_of_a_client_counted_alone`,
/// so that no other test's clients open descriptors meanwhile.
#[test]
fn a_client_that_leaves_every_read_to_its_io_thread_holds_one_descriptor() {
    run_alone(
        "descriptors_of_a_client_counted_alone",
        "ZKR_DESCRIPTORS_ALONE",
    );
}

#[test]
#[ignore = "run alone, in a child process, by a_client_that_leaves_every_read_to_its_io_thread_holds_one_descriptor"]
fn descriptors_of_a_client_counted_alone() {
    if std::env::var_os("ZKR_DESCRIPTORS_ALONE").is_none() {
        return;
    }
    use zk_recipes::lock::InterProcessMutex;
    let connect_string = server().connect_string();
    let holder = connect(&connect_string, Duration::from_secs(10));
    let path = root("descriptors");
    let mutex = InterProcessMutex::new(&holder, &path).unwrap();
    let held = mutex.acquire().unwrap();
    // What a client holds once connected and after one of its threads waited for a watch
    // (a lock's waiter, timed out while the holder holds).
    let held_by = |reads_all: bool| {
        let before = open_descriptors();
        let c = builder(&connect_string)
            .session_timeout(Duration::from_secs(10))
            .io_thread_reads_all(reads_all)
            .connect()
            .unwrap();
        let waiting = InterProcessMutex::new(&c, &path).unwrap();
        assert!(waiting
            .try_acquire_for(Duration::from_millis(200))
            .unwrap()
            .is_none());
        c.exists("/").unwrap();
        let n = open_descriptors().saturating_sub(before);
        drop(waiting);
        c.close();
        drop(c);
        // Its descriptors gone before the next count begins.
        assert!(
            wait_for(Duration::from_secs(10), || (open_descriptors() <= before)
                .then_some(()))
            .is_some(),
            "a closed client kept descriptors"
        );
        n
    };
    let reads_all = held_by(true);
    let default = held_by(false);
    drop(held);
    assert_eq!(
        reads_all, 1,
        "descriptors of a client whose I/O thread reads all"
    );
    assert!(default > 1, "a default client held {default} descriptors");
    println!("descriptors: default {default}, io_thread_reads_all {reads_all}");
}
