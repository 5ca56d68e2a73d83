//! Hostile input: the parsers never panic (the node-name parsers are tested inside the crate,
//! where they live), and foreign children under a lock path do not break the lock.

mod common;

use std::time::Duration;

use common::*;
use proptest::prelude::*;
use zk_recipes::connect_string::ConnectString;
use zk_recipes::lock::{InterProcessMutex, LockOptions};
use zk_recipes::{paths, Client, CreateMode, Error};

proptest! {
    #[test]
    fn path_validation_never_panics_and_agrees_with_itself(s in ".{0,64}") {
        let verdict = paths::validate(&s, false);
        if verdict.is_ok() {
            prop_assert!(s.starts_with('/'));
            prop_assert!(s == "/" || !s.ends_with('/'));
            prop_assert!(!s.contains("//") && !s.contains('\0'));
        }
        let _ = paths::validate(&s, true);
        let _ = paths::validate_name(&s);
    }

    #[test]
    fn connect_strings_never_panic(s in "[a-z0-9.:,/\\[\\] -]{0,48}") {
        if let Ok(c) = ConnectString::parse(&s) {
            prop_assert!(!c.hosts.is_empty());
            prop_assert!(c.hosts.iter().all(|h| h.port != 0));
        }
    }
}

#[test]
fn foreign_children_without_a_sequence_neither_block_nor_break_the_lock() {
    let path = root("foreign");
    let c = connect(&server().connect_string(), Duration::from_secs(10));
    c.ensure_path(&path).unwrap();
    // What other tools leave under a lock path: plain nodes, and Curator's semaphore folders.
    for name in ["config", "leases", "locks", "readme-v2"] {
        c.create(&format!("{path}/{name}"), b"", CreateMode::Persistent)
            .unwrap();
    }
    let mutex = InterProcessMutex::new(&c, &path).unwrap();
    let guard = mutex
        .try_acquire()
        .unwrap()
        .expect("foreign children must not block the lock");
    assert_eq!(
        mutex.participant_nodes().unwrap(),
        vec![guard.node_path().to_string()]
    );
    assert!(mutex.current_holder().unwrap().is_some());
    drop(guard);
    assert_eq!(c.children(&path).unwrap().len(), 4, "only our node went");
}

#[test]
fn a_foreign_sequential_node_orders_like_any_contender() {
    // kazoo's lock writes `<uuid>__lock__<seq>`: it is another client's place in line.
    let path = root("foreign-seq");
    let c = connect(&server().connect_string(), Duration::from_secs(10));
    c.ensure_path(&path).unwrap();
    let theirs = c
        .create(
            &format!("{path}/0f8e1c2d__lock__"),
            b"",
            CreateMode::EphemeralSequential,
        )
        .unwrap();
    let mutex = InterProcessMutex::new(&c, &path).unwrap();
    assert!(
        mutex.try_acquire().unwrap().is_none(),
        "their node stands ahead of ours"
    );
    c.delete(&theirs).unwrap();
    assert!(mutex.try_acquire().unwrap().is_some());
}

#[test]
fn bad_input_at_every_entry_is_a_typed_error() {
    let c: Client = connect(&server().connect_string(), Duration::from_secs(10));
    for bad in ["", "relative", "/trailing/", "/a/../b", "/nul\0"] {
        assert!(
            matches!(
                InterProcessMutex::new(&c, bad),
                Err(Error::InvalidPath { .. })
            ),
            "{bad:?}"
        );
    }
    assert!(matches!(
        InterProcessMutex::new(&c, "/"),
        Err(Error::InvalidPath { .. })
    ));
    assert!(matches!(
        zk_recipes::InterProcessSemaphoreV2::new(&c, "/s", 0),
        Err(Error::BadArguments(_))
    ));
    // Node data over ZooKeeper's 1 MiB limit, here as a holder id.
    let huge = "x".repeat(zk_recipes::client::MAX_DATA_LEN + 1);
    let m =
        InterProcessMutex::with_options(&c, &root("huge-id"), LockOptions::new().holder_id(huge))
            .unwrap();
    assert!(matches!(m.try_acquire(), Err(Error::BadArguments(_))));
    for (session, connection) in [(0u64, 1000u64), (1000, 0), (u64::MAX / 2, 1000)] {
        let r = Client::builder("127.0.0.1:2181")
            .session_timeout(Duration::from_millis(session))
            .connection_timeout(Duration::from_millis(connection))
            .connect();
        assert!(
            matches!(r, Err(Error::BadArguments(_))),
            "{session} {connection}"
        );
    }
    assert!(matches!(
        Client::connect("127.0.0.1:2181,bad host:1"),
        Err(Error::BadArguments(_))
    ));
}
