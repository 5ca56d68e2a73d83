//! Access control: digest auth on every connection, and ACLs that keep others off a lock path.

mod common;

use std::time::Duration;

use common::*;
use zk_recipes::acl::creator_all_others_read;
use zk_recipes::lock::{revoke, InterProcessMutex};
use zk_recipes::{Client, ConnectionState, Error, ZkCode};

fn client_as(connect: &str, credentials: Option<&str>, session: Duration) -> Client {
    let mut b = Client::builder(connect)
        .session_timeout(session)
        .tick_time(Duration::from_millis(100));
    if let Some(c) = credentials {
        b = b
            .authorization("digest", c.as_bytes().to_vec())
            .default_acl(creator_all_others_read());
    }
    b.connect().expect("connect")
}

fn no_auth(r: zk_recipes::Result<impl std::fmt::Debug>) {
    match r {
        Err(Error::ZooKeeper {
            code: ZkCode::NoAuth,
            ..
        }) => {}
        other => panic!("expected NoAuth, got {other:?}"),
    }
}

#[test]
fn without_the_credentials_a_client_cannot_delete_revoke_or_queue() {
    let path = root("secure-lock");
    let owner = client_as(
        &server().connect_string(),
        Some("alice:secret"),
        Duration::from_secs(10),
    );
    let mutex = InterProcessMutex::new(&owner, &path).unwrap();
    let guard = mutex.acquire().unwrap();

    let intruder = client_as(&server().connect_string(), None, Duration::from_secs(10));
    no_auth(intruder.delete(guard.node_path()));
    no_auth(revoke(&intruder, guard.node_path()));
    no_auth(
        InterProcessMutex::new(&intruder, &path)
            .unwrap()
            .try_acquire(),
    );
    // A wrong password is just another identity: no rights either.
    let wrong = client_as(
        &server().connect_string(),
        Some("alice:wrong"),
        Duration::from_secs(10),
    );
    no_auth(wrong.delete(guard.node_path()));
    no_auth(InterProcessMutex::new(&wrong, &path).unwrap().try_acquire());
    // Looking is allowed.
    assert_eq!(intruder.children(&path).unwrap().len(), 1);
    assert!(guard.is_held());

    // Another process with the credentials locks normally.
    let colleague = client_as(
        &server().connect_string(),
        Some("alice:secret"),
        Duration::from_secs(10),
    );
    let theirs = InterProcessMutex::new(&colleague, &path).unwrap();
    assert!(
        theirs.try_acquire().unwrap().is_none(),
        "busy while the owner holds it"
    );
    drop(guard);
    assert!(theirs.try_acquire().unwrap().is_some());
}

/// A waiter that may queue but not read the node ahead of it (its holder's ACL is the
/// holder's alone) is told `NoAuth` at once, not left listing and retrying until its deadline;
/// its node goes, and the holder keeps the lock.
#[test]
fn a_waiter_that_may_not_read_the_node_ahead_of_it_is_told_no_auth() {
    let path = root("unreadable-holder");
    let waiter = client_as(&server().connect_string(), None, Duration::from_secs(10));
    // The line itself is open to all.
    waiter.ensure_path(&path).unwrap();
    let owner = client_as(
        &server().connect_string(),
        Some("alice:secret"),
        Duration::from_secs(10),
    );
    let private = zk_recipes::lock::LockOptions::new().acl(zk_recipes::acl::creator_all());
    let holding = InterProcessMutex::with_options(&owner, &path, private).unwrap();
    let guard = holding.acquire().unwrap();
    no_auth(waiter.data(guard.node_path()));
    let mutex = InterProcessMutex::new(&waiter, &path).unwrap();
    no_auth(mutex.try_acquire_for(Duration::from_secs(5)));
    wait_for(SOON, || {
        (waiter.children(&path).ok()?.len() == 1).then_some(())
    })
    .expect("the refused waiter's node stayed");
    assert!(guard.is_held());
}

#[test]
fn credentials_survive_reconnects_and_new_sessions_after_lost() {
    let f = faulty();
    let connect = f.proxy.connect_string();
    let alice = client_as(&connect, Some("alice:secret"), Duration::from_millis(1500));
    let mutex = InterProcessMutex::new(&alice, "/secure").unwrap();
    drop(mutex.acquire().unwrap());
    let sub = alice.subscribe();

    // A reconnect: the server forgets a connection's authentication; the client sends it again.
    f.proxy.cut();
    assert_eq!(
        sub.recv_timeout(SOON).unwrap().state,
        ConnectionState::Suspended
    );
    assert_eq!(
        sub.recv_timeout(SOON).unwrap().state,
        ConnectionState::Reconnected
    );
    drop(mutex.acquire().unwrap());

    // A new session after LOST authenticates too.
    f.proxy.blackhole();
    while sub.recv_timeout(SOON).expect("no LOST").state != ConnectionState::Lost {}
    f.proxy.heal();
    assert_eq!(
        sub.recv_timeout(SOON).unwrap().state,
        ConnectionState::Connected
    );
    drop(mutex.acquire().unwrap());
}

#[test]
fn a_scheme_the_server_refuses_fails_at_once_with_a_typed_error() {
    let err = Client::builder(&server().connect_string())
        .authorization("no-such-scheme", b"x".to_vec())
        .connection_timeout(Duration::from_secs(20))
        .connect()
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::ZooKeeper {
                code: ZkCode::AuthFailed,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("refused the credentials"), "{err}");
    assert!(matches!(
        Client::builder("127.0.0.1:1")
            .authorization("", b"x".to_vec())
            .connect(),
        Err(Error::BadArguments(_))
    ));
}

/// Issue 20, item 6: a namespace (or chroot) below a parent the client may only read is made
/// without writing what exists: the server checks CREATE on the parent before it says the
/// node exists, so creating every component from the root fails with NoAuth.
#[test]
fn a_namespace_below_a_read_only_parent_is_made_without_touching_the_parent() {
    let base = root("locked-parent");
    let owner = client_as(
        &server().connect_string(),
        Some("admin:secret"),
        Duration::from_secs(10),
    );
    // The parent: everyone may read it, only its creator may create under it.
    owner
        .create(&base, b"", zk_recipes::CreateMode::Persistent)
        .unwrap();
    // Its child is open to all.
    let open = Client::builder(&server().connect_string())
        .connect()
        .unwrap();
    no_auth(open.create(
        &format!("{base}/x"),
        b"",
        zk_recipes::CreateMode::Persistent,
    ));
    owner
        .create_with_acl(
            &format!("{base}/app"),
            b"",
            zk_recipes::CreateMode::Persistent,
            &zk_recipes::acl::open(),
        )
        .unwrap();

    let namespaced = Client::builder(&server().connect_string())
        .namespace(&format!("{}/app/ns", &base[1..]))
        .tick_time(Duration::from_millis(100))
        .connect()
        .expect("the namespace is made below the open child");
    namespaced
        .create("/inside", b"", zk_recipes::CreateMode::Persistent)
        .unwrap();
    assert!(open
        .exists(&format!("{base}/app/ns/inside"))
        .unwrap()
        .is_some());
}

/// A server of its own that serves only clients authenticated with `digest`.
fn enforcing_server() -> zk_recipes::testing::TestingServer {
    zk_recipes::testing::TestingServer::with_options(zk_recipes::testing::ServerOptions {
        system_properties: vec![
            ("zookeeper.enforce.auth.enabled".into(), "true".into()),
            ("zookeeper.enforce.auth.schemes".into(), "digest".into()),
        ],
        ..Default::default()
    })
    .unwrap()
}

/// Issue 20, item 9: a server that enforces authentication closes the session of a client
/// without it (`SessionClosedRequireSaslAuth`). That answer is terminal: the client stops
/// (every call fails with it at once), instead of reconnecting again and again.
#[test]
fn a_server_that_requires_authentication_stops_a_client_without_it() {
    use zk_recipes::testing::FaultProxy;
    let server = enforcing_server();
    // With credentials: served.
    let allowed = client_as(
        &server.connect_string(),
        Some("alice:secret"),
        Duration::from_secs(10),
    );
    assert!(allowed.exists("/").unwrap().is_some());

    let proxy = FaultProxy::start(server.addr()).unwrap();
    let refused = Client::builder(&proxy.connect_string())
        .session_timeout(Duration::from_secs(10))
        .connect()
        .unwrap();
    let required = |r: zk_recipes::Result<Option<zk_recipes::Stat>>| {
        assert!(
            matches!(
                r,
                Err(Error::ZooKeeper {
                    code: ZkCode::SessionClosedRequireSaslAuth,
                    ..
                })
            ),
            "{r:?}"
        );
    };
    required(refused.exists("/"));
    let accepted = proxy.accepted();
    // Terminal: the next call fails the same way without a new connection.
    required(refused.exists("/"));
    assert!(!refused.is_connected());
    assert_eq!(proxy.accepted(), accepted, "the client connected again");
}

/// Issue 20: credentials added to a live client (`add_auth`, as Java's `addAuthInfo`) work at
/// once and are replayed on every new connection; a scheme the server does not know fails.
#[test]
fn credentials_added_at_run_time_work_and_survive_a_reconnect() {
    use zk_recipes::testing::FaultProxy;
    let path = root("added-auth");
    let owner = client_as(
        &server().connect_string(),
        Some("carol:secret"),
        Duration::from_secs(10),
    );
    // Only carol may read it.
    owner
        .create_with_acl(
            &path,
            b"hers",
            zk_recipes::CreateMode::Persistent,
            &zk_recipes::acl::creator_all(),
        )
        .unwrap();
    let proxy = FaultProxy::start(server().addr()).unwrap();
    let later = client_as(&proxy.connect_string(), None, Duration::from_secs(10));
    no_auth(later.data(&path));
    later.add_auth("digest", b"carol:secret").unwrap();
    assert_eq!(later.data(&path).unwrap().0, b"hers");

    let sub = later.subscribe();
    proxy.cut();
    next_state(&sub, ConnectionState::Suspended);
    next_state(&sub, ConnectionState::Reconnected);
    assert_eq!(later.data(&path).unwrap().0, b"hers", "not replayed");

    assert!(later.add_auth("no-such-scheme", b"x").is_err());
}

/// The same server answers an idle client's first ping with it: the client stops as well,
/// and whatever waited under the session hears LOST at once (not when the server expires it,
/// unseen).
#[test]
fn an_idle_client_of_a_server_that_requires_authentication_stops_and_loses_its_session() {
    let server = enforcing_server();
    let client = Client::builder(&server.connect_string())
        .session_timeout(Duration::from_secs(2))
        .tick_time(Duration::from_millis(100))
        .connect()
        .unwrap();
    let id = client.session_id().unwrap();
    let sub = client.subscribe();
    // Nothing is asked: the first ping meets the refusal.
    assert_eq!(next_state(&sub, ConnectionState::Suspended).session_id, id);
    assert_eq!(next_state(&sub, ConnectionState::Lost).session_id, id);
    assert!(matches!(
        client.exists("/"),
        Err(Error::ZooKeeper {
            code: ZkCode::SessionClosedRequireSaslAuth,
            ..
        })
    ));
}
