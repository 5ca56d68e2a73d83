//! A single Apache ZooKeeper server for tests.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::jvm::{self, four_letter_over, Jvm, Process, TempDir};
use super::HarnessError;

/// Server settings shared by [`TestingServer`] and [`TestingCluster`](super::TestingCluster).
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// The server's tick. Sessions can be as short as two ticks, so the default of 100 ms
    /// allows 200 ms sessions, and a fault test's session expiry costs about a second.
    pub tick_time: Duration,
    /// Largest session timeout the server grants. Default 60 s.
    pub max_session_timeout: Duration,
    /// `fsync` the transaction log on every write. Default off: tests and benches measure the
    /// protocol, not the disk.
    pub force_sync: bool,
    /// Classpath override (otherwise `ZOOKEEPER_CLASSPATH`, otherwise the Debian jars).
    pub classpath: Option<String>,
    /// How long to wait for the server to answer `ruok`. Default 60 s.
    pub start_timeout: Duration,
    /// How often the server looks for empty containers to delete
    /// (`znode.container.checkIntervalMs`); `None` keeps the server's default of a minute.
    pub container_check_interval: Option<Duration>,
    /// TTL nodes (`zookeeper.extendedTypesEnabled`). Default off, as in ZooKeeper.
    pub extended_types: bool,
    /// An ensemble's `syncLimit`, in ticks: how long a follower keeps serving after it last
    /// heard from the leader. Default 20.
    pub sync_limit: u32,
    /// More JVM system properties for the server, `(name, value)` (for example
    /// `("zookeeper.enforce.auth.enabled", "true")`).
    pub system_properties: Vec<(String, String)>,
    /// More `zoo.cfg` lines, `(key, value)` (for example `("localSessionsEnabled", "true")`).
    pub config: Vec<(String, String)>,
    /// How fast each server's clocks run against the machine's, by member index (a standalone
    /// server is member 0); a missing entry runs at 1. Through `libfaketime` (Debian's
    /// `libfaketime`), preloaded into the JVM: every clock it reads, `System.nanoTime` too,
    /// and every timed wait. A leader whose clock runs fast by a fraction `f` expires each
    /// session `f / (1 + f)` of its timeout early, in the machine's time.
    pub clock_rates: Vec<f64>,
    /// SASL: the users the server knows (DIGEST-MD5, ZooKeeper's `DigestLoginModule`) or its
    /// Kerberos principal (GSSAPI), and whether it requires every client to authenticate
    /// with SASL.
    pub sasl: Option<ServerSasl>,
    /// TLS only: the client port is a `secureClientPort` (Netty), and there is no plaintext
    /// port (feature `tls`).
    #[cfg(feature = "tls")]
    pub tls: Option<ServerTls>,
}

/// A server's SASL: DIGEST-MD5 users (`DigestLoginModule`), or a Kerberos principal
/// (`Krb5LoginModule`, GSSAPI), in a JAAS file the harness writes, with
/// `SASLAuthenticationProvider`.
#[derive(Clone, Default)]
pub struct ServerSasl {
    /// Users and their passwords (DIGEST-MD5), when `kerberos` is `None`.
    pub users: Vec<(String, String)>,
    /// The server's Kerberos principal and keytab (see [`Kdc::server`](super::Kdc::server)):
    /// the server then serves GSSAPI, and DIGEST-MD5 no more (a ZooKeeper server serves one
    /// mechanism, the one its login module gives it).
    pub kerberos: Option<ServerKerberos>,
    /// Every client must authenticate with SASL (`enforce.auth.enabled` with the `sasl`
    /// scheme): a session without it is closed at its first request.
    pub required: bool,
}

/// Names the users, never their passwords.
impl std::fmt::Debug for ServerSasl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let users: Vec<&str> = self.users.iter().map(|(user, _)| user.as_str()).collect();
        f.debug_struct("ServerSasl")
            .field("users", &users)
            .field("kerberos", &self.kerberos)
            .field("required", &self.required)
            .finish_non_exhaustive()
    }
}

/// A ZooKeeper server's Kerberos identity: its principal, the keytab with its key, and the
/// realm's configuration.
#[derive(Debug, Clone)]
pub struct ServerKerberos {
    /// The whole principal, `zookeeper/localhost@REALM`.
    pub principal: String,
    /// The keytab holding its key.
    pub keytab: std::path::PathBuf,
    /// The realm's `krb5.conf` (`java.security.krb5.conf`).
    pub krb5_conf: std::path::PathBuf,
}

/// A server's TLS (feature `tls`): ZooKeeper's PEM key and trust stores
/// (`ssl.keyStore.type=PEM`), on a `secureClientPort` served by Netty.
#[cfg(feature = "tls")]
#[derive(Debug, Clone)]
pub struct ServerTls {
    /// PEM file with the server's private key and certificate chain.
    pub key_store: std::path::PathBuf,
    /// PEM file with the authorities whose client certificates the server accepts.
    pub trust_store: std::path::PathBuf,
    /// `ssl.clientAuth=need` (every client presents a certificate) if true, `want` if false.
    pub client_auth_required: bool,
    /// What the harness itself uses to talk to the server (readiness, four-letter words).
    pub client: crate::TlsOptions,
    /// A [`TestingServer`] also opens a plaintext `clientPort` on the same Netty connection
    /// factory ([`TestingServer::plaintext_connect_string`]): TLS and plaintext clients of one
    /// server, side by side (the TLS bench). A [`TestingCluster`](super::TestingCluster)'s
    /// members stay TLS only.
    pub plaintext_too: bool,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            tick_time: Duration::from_millis(100),
            max_session_timeout: Duration::from_secs(60),
            force_sync: false,
            classpath: None,
            start_timeout: Duration::from_secs(60),
            container_check_interval: None,
            extended_types: false,
            sync_limit: 20,
            system_properties: Vec::new(),
            config: Vec::new(),
            clock_rates: Vec::new(),
            sasl: None,
            #[cfg(feature = "tls")]
            tls: None,
        }
    }
}

impl ServerOptions {
    /// Member `i`'s clock rate, if not 1.
    pub(crate) fn clock_rate(&self, i: usize) -> Option<f64> {
        self.clock_rates.get(i).copied().filter(|&r| r != 1.0)
    }

    /// The JVM system properties these options set.
    pub(crate) fn jvm_properties(&self) -> Vec<String> {
        let mut props = Vec::new();
        if let Some(i) = self.container_check_interval {
            props.push(format!(
                "-Dznode.container.checkIntervalMs={}",
                i.as_millis()
            ));
        }
        if self.extended_types {
            props.push("-Dzookeeper.extendedTypesEnabled=true".to_owned());
        }
        for (name, value) in &self.system_properties {
            props.push(format!("-D{name}={value}"));
        }
        props
    }

    /// Writes what the options need beside `zoo.cfg` into `dir` (the SASL JAAS file) and
    /// the system properties that point at it.
    pub(crate) fn prepare(&mut self, dir: &Path) -> std::io::Result<()> {
        let Some(sasl) = &self.sasl else {
            return Ok(());
        };
        let mut jaas = String::from("Server {\n  ");
        let mut props = Vec::new();
        if let Some(k) = &sasl.kerberos {
            let _ = write!(
                jaas,
                "com.sun.security.auth.module.Krb5LoginModule required\n  useKeyTab=true\n  \
                 keyTab=\"{}\"\n  storeKey=true\n  useTicketCache=false\n  principal=\"{}\"",
                k.keytab.display(),
                k.principal
            );
            props.push((
                "java.security.krb5.conf".to_owned(),
                k.krb5_conf.display().to_string(),
            ));
        } else {
            jaas.push_str("org.apache.zookeeper.server.auth.DigestLoginModule required");
            for (user, password) in &sasl.users {
                let _ = write!(jaas, "\n  user_{user}=\"{password}\"");
            }
        }
        jaas.push_str(";\n};\n");
        let path = dir.join("jaas.conf");
        std::fs::write(&path, jaas)?;
        props.extend([
            (
                "java.security.auth.login.config".to_owned(),
                path.display().to_string(),
            ),
            (
                "zookeeper.authProvider.sasl".to_owned(),
                "org.apache.zookeeper.server.auth.SASLAuthenticationProvider".to_owned(),
            ),
        ]);
        if sasl.required {
            props.push(("zookeeper.enforce.auth.enabled".into(), "true".into()));
            props.push(("zookeeper.enforce.auth.schemes".into(), "sasl".into()));
        }
        self.system_properties.extend(props);
        Ok(())
    }

    /// The TLS lines of `zoo.cfg`, if TLS is on: the client port is then the secure one.
    fn add_tls(&self, cfg: &mut String, client_port: u16) -> bool {
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            let _ = writeln!(cfg, "secureClientPort={client_port}");
            let _ = writeln!(cfg, "secureClientPortAddress=127.0.0.1");
            let _ = writeln!(
                cfg,
                "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory"
            );
            let _ = writeln!(cfg, "ssl.keyStore.location={}", tls.key_store.display());
            let _ = writeln!(cfg, "ssl.keyStore.type=PEM");
            let _ = writeln!(cfg, "ssl.trustStore.location={}", tls.trust_store.display());
            let _ = writeln!(cfg, "ssl.trustStore.type=PEM");
            let auth = if tls.client_auth_required {
                "need"
            } else {
                "want"
            };
            let _ = writeln!(cfg, "ssl.clientAuth={auth}");
            return true;
        }
        let _ = (cfg, client_port);
        false
    }

    /// How the harness talks to the server's client port.
    pub(crate) fn security(&self) -> crate::client::link::Security {
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            return crate::client::link::Security::Tls(std::sync::Arc::new(tls.client.clone()));
        }
        crate::client::link::Security::Plain
    }

    /// Whether the server needs Netty (TLS) on its classpath.
    pub(crate) fn needs_netty(&self) -> bool {
        #[cfg(feature = "tls")]
        return self.tls.is_some();
        #[cfg(not(feature = "tls"))]
        false
    }

    /// A plaintext port beside the TLS one, for a single server
    /// (`ServerTls::plaintext_too`).
    fn wants_plaintext_too(&self) -> bool {
        #[cfg(feature = "tls")]
        return self.tls.as_ref().is_some_and(|t| t.plaintext_too);
        #[cfg(not(feature = "tls"))]
        false
    }

    /// The common part of `zoo.cfg`: `client_port` is the TLS port if TLS is on, and
    /// `plain_port` a plaintext one beside it.
    pub(crate) fn base_config(
        &self,
        data_dir: &Path,
        client_port: u16,
        plain_port: Option<u16>,
    ) -> String {
        let mut cfg = String::new();
        let _ = writeln!(cfg, "tickTime={}", self.tick_time.as_millis());
        let _ = writeln!(cfg, "dataDir={}", data_dir.display());
        let plain_port = if self.add_tls(&mut cfg, client_port) {
            plain_port
        } else {
            Some(client_port)
        };
        if let Some(port) = plain_port {
            let _ = writeln!(cfg, "clientPort={port}");
            let _ = writeln!(cfg, "clientPortAddress=127.0.0.1");
        }
        let _ = writeln!(
            cfg,
            "maxSessionTimeout={}",
            self.max_session_timeout.as_millis()
        );
        let _ = writeln!(cfg, "maxClientCnxns=0");
        let _ = writeln!(cfg, "admin.enableServer=false");
        let _ = writeln!(cfg, "4lw.commands.whitelist=*");
        let _ = writeln!(
            cfg,
            "forceSync={}",
            if self.force_sync { "yes" } else { "no" }
        );
        for (key, value) in &self.config {
            let _ = writeln!(cfg, "{key}={value}");
        }
        cfg
    }
}

/// The `Mode:` line of a `srvr` answer (`standalone`, `leader`, `follower`), present only
/// while the server serves requests.
pub(crate) fn mode_of(srvr: &str) -> Option<&str> {
    srvr.lines()
        .find_map(|l| l.strip_prefix("Mode: "))
        .map(str::trim)
}

/// Waits until `addr` takes TCP connections, or the JVM dies, or `until`.
fn wait_listening(addr: SocketAddr, jvm: &Jvm, until: Instant) -> Result<(), HarnessError> {
    while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err() {
        if !jvm.is_alive() || Instant::now() >= until {
            return Err(HarnessError::StartFailed(format!(
                "ZooKeeper's TLS port {addr} did not open. Its log:\n{}",
                jvm.log_tail()
            )));
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    Ok(())
}

/// Waits until `addr` answers `word` with a reply that `ready` accepts, or the JVM dies, or
/// `timeout` passes.
pub(crate) fn wait_ready(
    addr: SocketAddr,
    security: &crate::client::link::Security,
    word: &str,
    ready: impl Fn(&str) -> bool,
    jvm: &Jvm,
    timeout: Duration,
) -> Result<(), HarnessError> {
    let until = Instant::now() + timeout;
    loop {
        let last = match four_letter_over(addr, word, Duration::from_millis(500), security) {
            Ok(answer) if ready(&answer) => return Ok(()),
            Ok(answer) => format!("answered {:?}", answer.lines().next().unwrap_or("")),
            Err(e) => e.to_string(),
        };
        if !jvm.is_alive() {
            return Err(HarnessError::StartFailed(format!(
                "the ZooKeeper JVM exited during start-up. Its log:\n{}",
                jvm.log_tail()
            )));
        }
        if Instant::now() >= until {
            return Err(HarnessError::StartFailed(format!(
                "ZooKeeper at {addr} did not answer `{word}` within {timeout:?} (last: {last}). \
                 Its log:\n{}",
                jvm.log_tail()
            )));
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// A real Apache ZooKeeper server on a free loopback port, with its own temporary data
/// directory. Its JVM is killed on drop, and also if the process that started it dies.
///
/// ```no_run
/// use zk_recipes::testing::TestingServer;
/// let server = TestingServer::start().expect("apt-get install zookeeper");
/// let client = zk_recipes::Client::connect(&server.connect_string()).unwrap();
/// ```
pub struct TestingServer {
    port: u16,
    /// A plaintext port beside the TLS one (`ServerTls::plaintext_too`).
    plain_port: Option<u16>,
    options: ServerOptions,
    classpath: String,
    dir: TempDir,
    jvm: Mutex<Option<Jvm>>,
}

impl TestingServer {
    /// Starts a server with the default [`ServerOptions`].
    pub fn start() -> Result<TestingServer, HarnessError> {
        TestingServer::with_options(ServerOptions::default())
    }

    /// Starts a server with `options`.
    pub fn with_options(mut options: ServerOptions) -> Result<TestingServer, HarnessError> {
        let classpath = jvm::classpath(options.classpath.as_deref(), options.needs_netty())?;
        let dir = TempDir::new("server")?;
        options.prepare(dir.path())?;
        let port = jvm::free_port()?;
        let plain_port = match options.wants_plaintext_too() {
            true => Some(jvm::free_port()?),
            false => None,
        };
        std::fs::create_dir_all(dir.path().join("data"))?;
        let cfg = options.base_config(&dir.path().join("data"), port, plain_port);
        std::fs::write(dir.path().join("zoo.cfg"), cfg)?;
        let server = TestingServer {
            port,
            plain_port,
            options,
            classpath,
            dir,
            jvm: Mutex::new(None),
        };
        server.launch()?;
        Ok(server)
    }

    fn launch(&self) -> Result<(), HarnessError> {
        let jvm = Jvm::spawn(
            &self.classpath,
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            &self.options.jvm_properties(),
            &[self.dir.path().join("zoo.cfg").display().to_string()],
            &self.dir.path().join("server.log"),
            self.dir.path(),
            Process {
                group: None,
                clock_rate: self.options.clock_rate(0),
            },
        )?;
        // `ruok` answers `imok` a few hundred milliseconds before the server takes sessions;
        // `srvr` reports a mode only once it does. Over the plaintext port when there is one
        // (a test may give the TLS port a certificate no client takes, an expired one say),
        // then until the TLS port, bound just after it, takes connections.
        let (addr, security) = match self.plain_port {
            Some(port) => (
                SocketAddr::from(([127, 0, 0, 1], port)),
                crate::client::link::Security::Plain,
            ),
            None => (self.addr(), self.options.security()),
        };
        let ready = |a: &str| mode_of(a).is_some();
        let until = Instant::now() + self.options.start_timeout;
        wait_ready(
            addr,
            &security,
            "srvr",
            ready,
            &jvm,
            self.options.start_timeout,
        )?;
        if addr != self.addr() {
            wait_listening(self.addr(), &jvm, until)?;
        }
        *self.jvm.lock() = Some(jvm);
        Ok(())
    }

    /// The server's `tickTime`: give it to [`ClientBuilder::tick_time`](crate::ClientBuilder::tick_time).
    pub fn tick_time(&self) -> Duration {
        self.options.tick_time
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `127.0.0.1:<port>`.
    pub fn connect_string(&self) -> String {
        self.addr().to_string()
    }

    /// `127.0.0.1:<port>` of the plaintext port a TLS server also opens if asked
    /// (`ServerTls::plaintext_too`, feature `tls`); `None` otherwise.
    pub fn plaintext_connect_string(&self) -> Option<String> {
        self.plain_port.map(|p| format!("127.0.0.1:{p}"))
    }

    /// The server's own directory (configuration, data, log), removed when the server is
    /// dropped or, if its process dies first, by the JVM's watchdog.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The JVM's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.jvm.lock().as_ref().map(|j| j.pid())
    }

    /// Kills the server (like a crash; data stays on disk).
    pub fn stop(&self) {
        if let Some(j) = self.jvm.lock().take() {
            j.kill();
        }
    }

    /// Kills the server and starts it again on the same port with the same data, and waits
    /// until it answers. A restart shorter than a session's timeout keeps that session.
    pub fn restart(&self) -> Result<(), HarnessError> {
        self.stop();
        self.launch()
    }

    /// Sends a four-letter word (`srvr`, `cons`, `stat`, ...) and returns the answer.
    pub fn four_letter(&self, word: &str) -> std::io::Result<String> {
        four_letter_over(
            self.addr(),
            word,
            Duration::from_secs(5),
            &self.options.security(),
        )
    }
}

impl Drop for TestingServer {
    fn drop(&mut self) {
        self.stop();
    }
}
