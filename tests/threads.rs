//! The client's footprint: at most two threads of its own while connected and two file
//! descriptors (its socket and, on Linux, the epoll instance its I/O thread waits on), also
//! after a reconnect; none of either after it is gone (after a clean close, a failed connect,
//! and a drop while the connection is silent); and no listening socket, so no other process
//! can reach a session through this one.
//! Its own test binary, and one test, so that no other test's threads or sockets are counted.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use zk_recipes::testing::{FaultProxy, TestingServer};
use zk_recipes::{Client, ConnectionState, CreateMode, InterProcessMutex};

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

/// How many file descriptors this process has open.
fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
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
fn a_client_runs_two_threads_holds_two_descriptors_listens_on_nothing_and_leaves_nothing_behind() {
    init_logs();
    let server = TestingServer::with_options(server_options()).unwrap();
    assert!(client_threads().is_empty(), "{:?}", client_threads());
    let before = open_descriptors();

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
    // A process runs many clients (a session per partition, a bench's 256): each costs the
    // socket and, on Linux, its I/O thread's epoll instance, nothing more.
    let held = open_descriptors() - before;
    assert!(
        held <= 2,
        "a connected client holds {held} file descriptors"
    );
    drop(guard);
    drop(mutex);
    drop(client);
    let back = wait_for(SOON, || (open_descriptors() == before).then_some(()));
    assert!(
        back.is_some(),
        "a closed client left {} file descriptors open",
        open_descriptors() - before
    );

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

    // A client dropped while its connection is silent, after a reconnect.
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let client = connect(&proxy.connect_string(), Duration::from_secs(5));
    let connected = open_descriptors();
    let sub = client.subscribe();
    proxy.cut();
    next_state(&sub, ConnectionState::Suspended);
    next_state(&sub, ConnectionState::Reconnected);
    client.exists("/").unwrap();
    // Nothing of the cut connection stays open (the proxy lets go of its side as its pumps
    // end, so the count settles rather than drops at once).
    let settled = wait_for(SOON, || (open_descriptors() <= connected).then_some(()));
    assert!(
        settled.is_some(),
        "after a reconnect the process holds {} more file descriptors",
        open_descriptors() - connected
    );
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
    let closed = wait_for(SOON, || (open_descriptors() == before).then_some(()));
    assert!(
        closed.is_some(),
        "file descriptors left behind: {} more than before the first client",
        open_descriptors() - before
    );
}
