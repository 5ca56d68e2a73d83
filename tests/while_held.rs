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

/// A fencing token is read only from the hold's own node: a node someone else put at its path
/// after it was deleted gives none (its creation zxid would be a newer holder's token).
#[test]
fn a_fencing_token_is_never_read_from_a_node_another_session_put_at_the_hold_s_path() {
    let client = connect(&server().connect_string(), Duration::from_secs(10));
    let operator = connect(&server().connect_string(), Duration::from_secs(10));
    let mutex = InterProcessMutex::new(&client, &root("imposter-node")).unwrap();
    let guard = mutex.acquire().unwrap();
    let node = guard.node_path().to_owned();
    operator.delete(&node).unwrap();
    operator
        .create(&node, b"", zk_recipes::CreateMode::Ephemeral)
        .unwrap();
    assert!(
        matches!(guard.fencing_token(), Err(Error::SessionLost { .. })),
        "a token was read from another session's node"
    );
}

/// A hold's bound lies ahead of now and within a session timeout of it while the hold lasts,
/// and there is none once the hold is lost.
#[test]
fn a_hold_is_valid_until_a_bound_within_its_session_and_has_none_once_lost() {
    let client = connect(&server().connect_string(), Duration::from_secs(10));
    let operator = connect(&server().connect_string(), Duration::from_secs(10));
    let mutex = InterProcessMutex::new(&client, &root("valid-until")).unwrap();
    let guard = mutex.acquire().unwrap();
    let now = std::time::Instant::now();
    let until = guard.valid_until().expect("a held lease has a bound");
    assert!(until > now, "the bound of a fresh hold is already past");
    assert!(
        until <= now + client.session_timeout(),
        "the bound lies past a session timeout from now"
    );
    let lost = guard.lost();
    operator.delete(guard.node_path()).unwrap();
    assert!(matches!(
        lost.recv_timeout(SOON),
        Err(crossbeam_channel::RecvTimeoutError::Disconnected)
    ));
    assert_eq!(guard.valid_until(), None, "a lost hold still has a bound");
}

/// The watch on the hold's node is set at the first look: a holder that only asks for `lost()`
/// once hears of the deletion.
#[test]
fn a_holder_that_looks_once_hears_when_its_node_is_deleted() {
    let client = connect(&server().connect_string(), Duration::from_secs(10));
    let operator = connect(&server().connect_string(), Duration::from_secs(10));
    let path = root("deleted-after-one-look");
    let mutex = InterProcessMutex::new(&client, &path).unwrap();
    let guard = mutex.acquire().unwrap();
    let node = guard.node_path().to_owned();
    let lost = guard.lost();
    // The watch request went out with that look; a read on the same connection after it is
    // answered after it (a session's answers come in order), so the delete below comes after
    // the watch was set.
    assert!(client.exists(&node).unwrap().is_some());
    operator.delete(&node).unwrap();
    assert!(
        matches!(
            lost.recv_timeout(SOON),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected)
        ),
        "the hold's only look set no watch on its node"
    );
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
