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

/// `ZKR_TEST_SECURE=1`: the shared server and every `faulty()` server are TLS-only and
/// require SASL, and `connect` speaks TLS and SASL, so the tests built on these helpers (the
/// recipe suites) run over the secured transport unchanged.
pub struct Secure {
    pub pki: pki::Pki,
}

pub const SECURE_USER: (&str, &str) = ("recipes", "recipes' password");

pub fn secure() -> Option<&'static Secure> {
    static SECURE: OnceLock<Option<Secure>> = OnceLock::new();
    SECURE
        .get_or_init(|| {
            std::env::var("ZKR_TEST_SECURE")
                .is_ok_and(|v| v == "1")
                .then(|| Secure {
                    pki: pki::Pki::lasting("suite"),
                })
        })
        .as_ref()
}

/// `ZKR_TEST_KERBEROS=1`: a KDC on loopback for the test binary (realm
/// `ZK-RECIPES.TEST`), every server the helpers start requires SASL and serves GSSAPI as
/// `zookeeper/localhost`, and `connect` authenticates as [`KERBEROS_CLIENT`] from its keytab.
/// With `ZKR_TEST_SECURE=1` too, over TLS.
pub struct Kerberos {
    pub kdc: zk_recipes::testing::Kdc,
    /// The keytab of [`KERBEROS_CLIENT`].
    pub keytab: std::path::PathBuf,
}

/// The suites' Kerberos client principal (in realm `ZK-RECIPES.TEST`).
pub const KERBEROS_CLIENT: &str = "recipes";

pub fn kerberos() -> Option<&'static Kerberos> {
    static KERBEROS: OnceLock<Option<Kerberos>> = OnceLock::new();
    KERBEROS
        .get_or_init(|| {
            std::env::var("ZKR_TEST_KERBEROS")
                .is_ok_and(|v| v == "1")
                .then(start_kerberos)
        })
        .as_ref()
}

/// The binary's KDC for tests of Kerberos itself: the suites' one in Kerberos mode, else one
/// of its own, with `KRB5_CONFIG` pointing at it either way.
pub fn realm() -> &'static Kerberos {
    static OWN: OnceLock<Kerberos> = OnceLock::new();
    match kerberos() {
        Some(k) => k,
        None => OWN.get_or_init(start_kerberos),
    }
}

/// A ZooKeeper server that requires SASL and serves GSSAPI as the realm's
/// `zookeeper/localhost`.
pub fn kerberos_server() -> TestingServer {
    init_logs();
    TestingServer::with_options(ServerOptions {
        sasl: Some(zk_recipes::testing::ServerSasl {
            users: Vec::new(),
            required: true,
            kerberos: Some(realm().kdc.server().expect("the servers' principal")),
        }),
        ..ServerOptions::default()
    })
    .expect("a Kerberos ZooKeeper server")
}

/// A KDC for this test binary, and the client library pointed at its realm. The KDC dies with
/// the process (the harness's watchdog).
pub fn start_kerberos() -> Kerberos {
    let kdc = zk_recipes::testing::Kdc::start()
        .expect("start a KDC (apt-get install krb5-kdc krb5-admin-server krb5-user)");
    let keytab = kdc
        .add_principal(KERBEROS_CLIENT)
        .expect("a client principal");
    // MIT krb5 reads its configuration from KRB5_CONFIG whenever it makes a context: set
    // once, before this binary's first Kerberos call, and never changed (every KDC of a test
    // binary is this one).
    std::env::set_var("KRB5_CONFIG", kdc.krb5_conf());
    Kerberos { kdc, keytab }
}

/// The GSSAPI settings of the suites' client.
pub fn kerberos_client(k: &Kerberos) -> zk_recipes::GssapiOptions {
    zk_recipes::GssapiOptions::new()
        .principal(KERBEROS_CLIENT)
        .keytab(&k.keytab)
}

/// The options of the servers the helpers start: TLS-only and SASL-enforcing in secure mode,
/// Kerberos-enforcing in Kerberos mode.
pub fn server_options() -> ServerOptions {
    let mut options = ServerOptions::default();
    if let Some(s) = secure() {
        options.tls = Some(s.pki.server(false));
        options.sasl = Some(zk_recipes::testing::ServerSasl {
            users: vec![(SECURE_USER.0.into(), SECURE_USER.1.into())],
            required: true,
            kerberos: None,
        });
    }
    if let Some(k) = kerberos() {
        options.sasl = Some(zk_recipes::testing::ServerSasl {
            users: Vec::new(),
            required: true,
            kerberos: Some(k.kdc.server().expect("the servers' principal")),
        });
    }
    options
}

/// A client builder for the helpers' servers: TLS and SASL in secure mode.
pub fn builder(connect_string: &str) -> zk_recipes::ClientBuilder {
    let b = Client::builder(connect_string);
    let b = match secure() {
        Some(s) => b
            .tls(zk_recipes::TlsOptions::new(s.pki.ca()))
            .sasl_digest(SECURE_USER.0, SECURE_USER.1),
        None => b,
    };
    match kerberos() {
        Some(k) => b.sasl_gssapi(kerberos_client(k)),
        None => b,
    }
}

/// The test binary's shared server. Never dropped: its JVM dies with the process.
pub fn server() -> &'static TestingServer {
    static SERVER: OnceLock<TestingServer> = OnceLock::new();
    init_logs();
    SERVER.get_or_init(|| {
        TestingServer::with_options(server_options())
            .expect("start ZooKeeper (apt-get install zookeeper)")
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
    builder(connect_string)
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
    let server = TestingServer::with_options(server_options()).expect("start ZooKeeper");
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
    assert!(expire(&f.server, id, &passwd));
    f.proxy.heal();
    while sub.recv_timeout(SOON).expect("no new session").state != ConnectionState::Connected {}
}

/// Ends session `id` on the server now; false if it had already expired. In secure mode, by
/// taking the session over with this crate's own client (TLS and SASL) and closing it, as
/// Curator's `KillSession` does; otherwise with the harness's bare close.
pub fn expire(server: &TestingServer, id: zk_recipes::SessionId, passwd: &[u8]) -> bool {
    if secure().is_none() && kerberos().is_none() {
        return zk_recipes::testing::expire_session(server.addr(), id, passwd).unwrap();
    }
    let taken = builder(&server.connect_string())
        .session(id, passwd.to_vec())
        .tick_time(Duration::from_millis(100))
        .connect();
    match taken {
        Ok(c) => {
            c.close();
            true
        }
        Err(zk_recipes::Error::SessionLost { .. }) => false,
        Err(e) => panic!("could not take session {id} over: {e}"),
    }
}

/// Bytes the kernel still holds unsent on this process's connections to `peer` (the client
/// side of a proxy), from `/proc/net/tcp`: how a test knows a write is stuck on a full socket.
pub fn unsent_to(peer: std::net::SocketAddr) -> u64 {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let want = format!("0100007F:{:04X}", peer.port());
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // local, remote, state, tx_queue:rx_queue
            (f.get(2) == Some(&want.as_str()) && f.get(3) == Some(&"01"))
                .then(|| f.get(4)?.split(':').next())
                .flatten()
                .and_then(|tx| u64::from_str_radix(tx, 16).ok())
        })
        .sum()
}

/// Whether this process has a thread named `name` and it is asleep (blocked in the kernel,
/// state `S` in `/proc/self/task/*/stat`): how a test knows a thread it started is waiting.
pub fn asleep(name: &str) -> bool {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return false;
    };
    tasks.flatten().any(|t| {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        // The state follows the name's closing parenthesis.
        comm.trim_end() == name
            && stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('S'))
    })
}

/// A JAAS file whose `Client` section logs ZooKeeper's Java client in as `principal` (in
/// the harness's realm) from `keytab`.
pub fn write_java_kerberos_jaas(path: &std::path::Path, principal: &str, keytab: &std::path::Path) {
    std::fs::write(
        path,
        format!(
            "Client {{\n  com.sun.security.auth.module.Krb5LoginModule required\n  \
             useKeyTab=true\n  keyTab=\"{}\"\n  storeKey=true\n  useTicketCache=false\n  \
             principal=\"{principal}@{}\";\n}};\n",
            keytab.display(),
            zk_recipes::testing::KDC_REALM
        ),
    )
    .expect("a JAAS file");
}

/// Writes a JAAS file at `path` whose `Client` section gives Java's ZooKeeper client `user`
/// and `password` for SASL DIGEST-MD5 (UTF-8).
pub fn write_java_client_jaas(path: &std::path::Path, user: &str, password: &str) {
    std::fs::write(
        path,
        format!(
            "Client {{\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n  \
             username=\"{user}\"\n  password=\"{password}\";\n}};\n"
        ),
    )
    .expect("a JAAS file");
}

/// Returns once the client's janitor has handled every job handed to it so far: a watch event
/// for a bounded channel reaches it through the janitor, after the jobs before it (an
/// unbounded channel gets its events from the reader directly).
pub fn janitor_caught_up(client: &Client, scratch: &str) {
    let (tx, rx) = crossbeam_channel::bounded(1);
    assert!(client.exists_watch(scratch, &tx).unwrap().is_none());
    client
        .create(scratch, b"", zk_recipes::CreateMode::Ephemeral)
        .unwrap();
    rx.recv_timeout(SOON).expect("the scratch node's event");
    client.delete(scratch).unwrap();
}

/// For the tests of a name chosen for one session whose create must not go out on the next,
/// with the proxy holding replies: once an answer longer than a ping's (20 bytes) is held,
/// the connection is cut if the server made a node under the first name (the create went out
/// on the new session, and this was its answer), and traffic let through either way.
pub fn lose_a_create_made_under_the_old_name(
    f: &std::sync::Arc<Faulty>,
    names: &std::sync::Arc<parking_lot::Mutex<Vec<String>>>,
) -> std::thread::JoinHandle<()> {
    let (f, names) = (f.clone(), names.clone());
    let observer = connect(&f.server.connect_string(), Duration::from_secs(10));
    std::thread::spawn(move || {
        wait_for(SOON, || (f.proxy.held_replies() > 20).then_some(())).expect("no answer was held");
        let first = names.lock().first().cloned().expect("a name");
        if observer.exists(&first).unwrap().is_some() {
            f.proxy.cut();
        }
        f.proxy.heal();
        observer.close();
    })
}

/// The sessions the shared server says watch `path` (`wchp`).
pub fn watchers_of(path: &str) -> Vec<String> {
    let listing = server().four_letter("wchp").unwrap_or_default();
    let mut out = Vec::new();
    let mut inside = false;
    for line in listing.lines() {
        if !line.starts_with(char::is_whitespace) {
            inside = line.trim() == path;
        } else if inside {
            out.push(line.trim().to_owned());
        }
    }
    out
}

/// Runs this test binary's ignored test `name` alone, in a child process with the variable
/// `env` set (so that no other test's threads or descriptors are counted with its own), and
/// returns what it printed; fails if it failed or did not run.
pub fn run_alone(name: &str, env: &str) -> String {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            name,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(env, "1")
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("test result: ok. 1 passed"),
        "{name} did not run: {said}"
    );
    said
}

/// The descriptors this process holds open now.
pub fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}
