//! No thread of the client (or of the transport under it) outlives the client: after a clean
//! close, after a failed connect, and after a drop while the connection is black-holed.
//! Its own test binary, so no other test's threads are counted.

mod common;

use std::time::Duration;

use common::*;
use zk_recipes::testing::{FaultProxy, TestingServer};
use zk_recipes::{Client, CreateMode};

/// Names of this process's threads that belong to the client, the transport or the proxy.
fn client_threads() -> Vec<String> {
    let mut names = Vec::new();
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for t in tasks.flatten() {
            if let Ok(name) = std::fs::read_to_string(t.path().join("comm")) {
                let name = name.trim().to_string();
                if name.starts_with("zk-")
                    || name.starts_with("fault-proxy")
                    || name == "io"
                    || name == "event"
                {
                    names.push(name);
                }
            }
        }
    }
    names
}

#[test]
fn no_client_thread_outlives_its_client() {
    init_logs();
    let server = TestingServer::start().unwrap();
    assert!(client_threads().is_empty(), "{:?}", client_threads());

    // A clean life: connect, work (also with deadlines, which use worker threads), close.
    let client = connect(&server.connect_string(), Duration::from_secs(5));
    let _sub = client.subscribe();
    client.create("/n", b"", CreateMode::Ephemeral).unwrap();
    client
        .with_timeout(Duration::from_secs(5))
        .exists("/n")
        .unwrap();
    assert!(!client_threads().is_empty());
    drop(client);

    // A connect that fails because nothing listens.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    assert!(Client::builder(&format!("127.0.0.1:{port}"))
        .connection_timeout(Duration::from_millis(300))
        .connect()
        .is_err());

    // A client dropped while its connection is silent.
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let client = connect(&proxy.connect_string(), Duration::from_secs(5));
    proxy.blackhole();
    let _ = client.with_timeout(Duration::from_millis(200)).exists("/");
    drop(client);
    drop(proxy);

    let left = wait_for(SOON, || {
        let t = client_threads();
        t.is_empty().then_some(())
    });
    assert!(
        left.is_some(),
        "threads left behind: {:?}",
        client_threads()
    );
}
