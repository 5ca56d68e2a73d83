//! Writes the server applies only while a lock is held (a `multi` with a `check` of the
//! holder's node): refused atomically once the hold is over, whatever the holder believes.

mod common;

use std::time::Duration;

use common::*;
use zk_recipes::{CreateMode, Error, InterProcessMutex, WhileHeld};

#[test]
fn a_write_after_the_holders_session_expired_is_refused_and_nothing_is_written() {
    let f = faulty();
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(4));
    let observer = connect(&f.server.connect_string(), Duration::from_secs(10));
    observer
        .create("/state", b"v1", CreateMode::Persistent)
        .unwrap();
    let mutex = InterProcessMutex::new(&client, "/writer").unwrap();
    let guard = mutex.acquire().unwrap();
    let stat = guard.while_held().set_data("/state", b"v2", None).unwrap();
    assert_eq!(stat.version, 1);
    let made = guard
        .while_held()
        .create("/state/child", b"", CreateMode::Persistent)
        .unwrap();
    assert_eq!(made, "/state/child");

    expire_and_renew(&f, &client);
    let refused = guard.while_held().set_data("/state", b"zombie", None);
    assert_eq!(
        refused,
        Err(Error::NotHeld {
            node: guard.node_path().to_string()
        })
    );
    let refused = guard
        .while_held()
        .create("/state/zombie", b"", CreateMode::Persistent);
    assert!(matches!(refused, Err(Error::NotHeld { .. })), "{refused:?}");
    assert_eq!(observer.data("/state").unwrap().0, b"v2");
    assert!(observer.exists("/state/zombie").unwrap().is_none());
}

#[test]
fn an_operators_delete_of_the_holders_node_stops_its_writes() {
    let client = connect(&server().connect_string(), Duration::from_secs(10));
    let operator = connect(&server().connect_string(), Duration::from_secs(10));
    let path = root("while-held");
    let data = format!("{path}-data");
    client.create(&data, b"", CreateMode::Persistent).unwrap();
    let mutex = InterProcessMutex::new(&client, &path).unwrap();
    let guard = mutex.acquire().unwrap();
    operator.delete(guard.node_path()).unwrap();
    assert!(matches!(
        guard.while_held().delete(&data, None),
        Err(Error::NotHeld { .. })
    ));
    assert!(client.exists(&data).unwrap().is_some());
}

#[test]
fn any_holders_node_can_guard_writes() {
    // Another client's lock node (as a Curator holder's would be): the guard is its existence.
    let holder = connect(&server().connect_string(), Duration::from_secs(10));
    let writer = connect(&server().connect_string(), Duration::from_secs(10));
    let path = root("foreign-holder");
    let holder_lock = InterProcessMutex::new(&holder, &path).unwrap();
    let held = holder_lock.acquire().unwrap();
    let target = format!("{path}-target");
    let guarded = WhileHeld::for_node(&writer, held.node_path());
    assert_eq!(
        guarded
            .create(&target, b"x", CreateMode::Persistent)
            .unwrap(),
        target
    );
    drop(held);
    assert!(matches!(
        guarded.set_data(&target, b"late", None),
        Err(Error::NotHeld { .. })
    ));
    assert_eq!(writer.data(&target).unwrap().0, b"x");
}

#[test]
fn a_holder_hears_when_an_operator_deletes_its_node() {
    let client = connect(&server().connect_string(), Duration::from_secs(10));
    let operator = connect(&server().connect_string(), Duration::from_secs(10));
    let path = root("deleted-under-holder");
    let mutex = InterProcessMutex::new(&client, &path).unwrap();
    let guard = mutex.acquire().unwrap();
    let lost = guard.lost();
    assert!(guard.check().is_ok());
    operator.delete(guard.node_path()).unwrap();
    assert!(matches!(
        lost.recv_timeout(SOON),
        Err(crossbeam_channel::RecvTimeoutError::Disconnected)
    ));
    assert!(!guard.is_held());
    assert!(guard.check().is_err());
    assert!(matches!(guard.release(), Err(Error::SessionLost { .. })));
    // The lock works on: the next hold is a new node, watched again.
    let again = mutex.acquire().unwrap();
    assert!(again.check().is_ok());
}
