//! Shared test helpers: one ZooKeeper server per test binary, unique root paths, and bounded
//! waits (never sleeps).
#![allow(dead_code)]

pub mod pki;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use zk_recipes::testing::{FaultProxy, ServerOptions, TestingServer};
use zk_recipes::{Client, ConnectionState, StateEvent, Subscription};

/// Generous bound for anything that should happen "soon" on a loaded 2-core machine.
pub const SOON: Duration = Duration::from_secs(30);

pub fn init_logs() {
    let _ = env_logger::builder().is_test(true).try_init();
}

/// The test binary's shared server. Never dropped: its JVM dies with the process.
pub fn server() -> &'static TestingServer {
    static SERVER: OnceLock<TestingServer> = OnceLock::new();
    init_logs();
    SERVER.get_or_init(|| {
        TestingServer::start().expect("start ZooKeeper (apt-get install zookeeper)")
    })
}

/// A root path no other test uses.
pub fn root(name: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "/{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn connect(connect_string: &str, session: Duration) -> Client {
    Client::builder(connect_string)
        .session_timeout(session)
        // The harness servers tick every 100 ms (see `ServerOptions`).
        .tick_time(Duration::from_millis(100))
        .connection_timeout(Duration::from_secs(20))
        .connect()
        .expect("connect")
}

/// A private server and a proxy in front of it, for fault tests.
pub struct Faulty {
    pub proxy: FaultProxy,
    pub server: TestingServer,
}

pub fn faulty() -> Faulty {
    init_logs();
    let server = TestingServer::with_options(ServerOptions::default()).expect("start ZooKeeper");
    let proxy = FaultProxy::start(server.addr()).expect("start proxy");
    Faulty { proxy, server }
}

/// Polls `f` until it returns `Some`, at most `timeout`.
pub fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let until = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits on watch events, not a timer, until the children of `path` (which must exist) satisfy
/// `done`; false at `timeout`.
pub fn wait_children(
    c: &Client,
    path: &str,
    timeout: Duration,
    done: impl Fn(&[String]) -> bool,
) -> bool {
    let until = Instant::now() + timeout;
    let (tx, rx) = crossbeam_channel::unbounded();
    loop {
        match c.children_watch(path, &tx) {
            Ok(now) if done(&now) => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
        if rx.recv_deadline(until).is_err() {
            return false;
        }
    }
}

/// The next state event, which must be `state`.
pub fn next_state(sub: &Subscription, state: ConnectionState) -> StateEvent {
    let e = sub
        .recv_timeout(SOON)
        .unwrap_or_else(|| panic!("no state event within {SOON:?}, expected {state:?}"));
    assert_eq!(e.state, state, "expected {state:?}, got {e:?}");
    e
}

/// Expires `client`'s session on the server while its traffic is held, then lets it through:
/// the client finds the session expired and builds a new one.
pub fn expire_and_renew(f: &Faulty, client: &Client) {
    let sub = client.subscribe();
    let (id, passwd) = client.testing_session_credentials().unwrap();
    f.proxy.blackhole();
    assert!(zk_recipes::testing::expire_session(f.server.addr(), id, &passwd).unwrap());
    f.proxy.heal();
    while sub.recv_timeout(SOON).expect("no new session").state != ConnectionState::Connected {}
}
