//! The client's footprint: at most two threads of its own while connected, none after it is
//! gone (after a clean close, a failed connect, and a drop while the connection is silent), and
//! no listening socket, so no other process can reach a session through this one.
//! Its own test binary, and one test, so that no other test's threads or sockets are counted.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use zk_recipes::testing::{FaultProxy, TestingServer};
use zk_recipes::{Client, CreateMode, InterProcessMutex};

/// Names of this process's threads that belong to a client or a proxy.
fn client_threads() -> Vec<String> {
    let mut names = Vec::new();
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for t in tasks.flatten() {
            if let Ok(name) = std::fs::read_to_string(t.path().join("comm")) {
                let name = name.trim().to_string();
                if name.starts_with("zk-") || name.starts_with("fault-proxy") {
                    names.push(name);
                }
            }
        }
    }
    names
}

/// Inodes of the TCP sockets this process listens on.
fn listening_sockets() -> Vec<String> {
    let mut ours = HashSet::new();
    for fd in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        if let Ok(target) = std::fs::read_link(fd.path()) {
            let t = target.to_string_lossy().into_owned();
            if let Some(inode) = t.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')) {
                ours.insert(inode.to_owned());
            }
        }
    }
    let mut listening = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            // Column 3 is the state (0A = LISTEN), column 9 the inode.
            if cols.len() > 9 && cols[3] == "0A" && ours.contains(cols[9]) {
                listening.push(format!("{} (inode {})", cols[1], cols[9]));
            }
        }
    }
    listening
}

#[test]
fn a_client_runs_two_threads_listens_on_nothing_and_leaves_nothing_behind() {
    init_logs();
    let server = TestingServer::with_options(server_options()).unwrap();
    assert!(client_threads().is_empty(), "{:?}", client_threads());

    // A clean life: connect, work (also with deadlines and under a lock), close.
    let client = connect(&server.connect_string(), Duration::from_secs(5));
    let _sub = client.subscribe();
    client.create("/n", b"", CreateMode::Ephemeral).unwrap();
    client
        .with_timeout(Duration::from_secs(5))
        .exists("/n")
        .unwrap();
    let mutex = InterProcessMutex::new(&client, "/lock").unwrap();
    let guard = mutex.acquire().unwrap();
    let idle = client_threads();
    assert!(
        !idle.is_empty() && idle.len() <= 2,
        "an idle connected client runs {idle:?}"
    );
    assert_eq!(
        listening_sockets(),
        Vec::<String>::new(),
        "the process must listen on no port"
    );
    drop(guard);
    drop(mutex);
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
