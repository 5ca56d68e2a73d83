//! Configuring and opening a client: settings are checked before anything is sent, and
//! `connect` returns only once the server has granted a session.

use std::thread;
use std::time::{Duration, Instant};

use super::api::Client;
use super::config::Config;
use super::janitor;
use super::session::Core;
use crate::acl::Acl;
use crate::connect_string::ConnectString;
use crate::error::{ConnectFailure, Error, Result};
use crate::paths;
use crate::retry::RetryPolicy;
use crate::SessionId;

/// ZooKeeper's default `jute.maxbuffer`: the largest frame a server reads.
const MAX_REQUEST: usize = 0xfffff;

/// Configures and opens a [`Client`]. Its `Debug` shows the auth schemes, never the
/// credentials.
#[derive(Clone)]
pub struct ClientBuilder {
    connect_string: String,
    auth: Vec<(String, super::Secret)>,
    acl: Vec<Acl>,
    session_timeout: Duration,
    connection_timeout: Duration,
    retry: RetryPolicy,
    namespace: Option<String>,
    allow_read_only: bool,
    io_thread_reads_all: bool,
    tick_time: Duration,
    max_request: usize,
    /// A session to re-attach to: its id and password.
    resume: Option<(SessionId, super::Secret)>,
    follow_ensemble: bool,
    follow_hosts: Vec<String>,
    follow_port: Option<super::ensemble::FollowPort>,
    #[cfg(feature = "tls")]
    tls: Option<super::tls::TlsOptions>,
    #[cfg(feature = "sasl")]
    sasl: Option<super::sasl::Mechanism>,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let schemes: Vec<&str> = self.auth.iter().map(|(s, _)| s.as_str()).collect();
        f.debug_struct("ClientBuilder")
            .field("connect_string", &self.connect_string)
            .field("auth_schemes", &schemes)
            .field("acl", &self.acl)
            .field("session_timeout", &self.session_timeout)
            .field("connection_timeout", &self.connection_timeout)
            .field("tick_time", &self.tick_time)
            .field("retry", &self.retry)
            .field("namespace", &self.namespace)
            .field("allow_read_only", &self.allow_read_only)
            .field("io_thread_reads_all", &self.io_thread_reads_all)
            .field("max_request", &self.max_request)
            .field("session", &self.resume.as_ref().map(|(id, _)| *id))
            .field("follow_ensemble", &self.follow_ensemble)
            .field("follow_hosts", &self.follow_hosts)
            .field("follow_port", &self.follow_port)
            .field("tls", &self.tls_debug())
            .field("sasl_user", &self.sasl_user())
            .finish()
    }
}

impl ClientBuilder {
    /// Session timeout to ask for (the server may grant another within its
    /// `minSessionTimeout`..`maxSessionTimeout`; [`Client::session_timeout`] tells).
    /// Default 30 s.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// How long [`connect`](Self::connect) and every call wait for a connection before failing
    /// (one connection attempt gets at most this, or a third of the session timeout shared by
    /// the hosts). Within an attempt, a server that took the connection but does not answer
    /// the connect request is left after 1 s (or twice what opening the connection took),
    /// twice as long after each such attempt in a row.
    /// Default 15 s.
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// Retry policy for operations that are safe to retry: how many retries and for how long.
    /// A retry waits for the next connection, not for a timer. Default:
    /// [`RetryPolicy::default`].
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Authenticates every connection of every session with `scheme` and `credentials` (for
    /// example `"digest"` and `b"user:password"`), sent right behind the handshake and before
    /// any request. A scheme the server refuses makes `connect` and every call fail at once
    /// with `AuthFailed`. (With `digest` any password authenticates; a wrong one simply
    /// matches no ACL, so protected nodes answer `NoAuth`.)
    pub fn authorization(mut self, scheme: &str, credentials: impl Into<Vec<u8>>) -> Self {
        self.auth
            .push((scheme.to_owned(), super::Secret::new(credentials.into())));
        self
    }

    /// The ACL of every node this client creates (default: open to everyone, as ZooKeeper's
    /// own default). See [`acl::creator_all_others_read`](crate::acl::creator_all_others_read).
    /// Recipes may set their own with `LockOptions::acl`.
    pub fn default_acl(mut self, acl: Vec<Acl>) -> Self {
        self.acl = acl;
        self
    }

    /// Puts every path below `/namespace` (a single node name or a path without the leading
    /// slash, e.g. `"app/locks"`). Created on connect if missing.
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.to_owned());
        self
    }

    /// Accepts a session from a server that is cut off from its quorum and serves reads only
    /// (default: refused, and the next host is tried). Writes on such a session fail with
    /// `NotReadOnly`; locks need a quorum and should leave this off.
    pub fn allow_read_only(mut self, allow: bool) -> Self {
        self.allow_read_only = allow;
        self
    }

    /// Leaves every read of the connection to the client's I/O thread (default: off).
    ///
    /// By default a caller reads its own answer, and a lock's waiter its own wake-up, so that
    /// an answer wakes only the thread waiting for it; for that the client holds an epoll
    /// instance beside its socket, and an event descriptor once a thread of it waits for a
    /// watch. With this on, a client holds one descriptor, its socket, and each answer wakes
    /// the I/O thread and then its caller: about 45 µs more a round trip on a 2-vCPU VM
    /// (`benches/RESULTS.md`, issue 22). For a process that holds thousands of sessions near
    /// its open-file limit. Over TLS the I/O thread reads everything already; the option still
    /// saves the epoll instance and the event descriptor there.
    pub fn io_thread_reads_all(mut self, on: bool) -> Self {
        self.io_thread_reads_all = on;
        self
    }

    /// The ensemble's `tickTime` (default 2 s, as in ZooKeeper's sample configuration). The
    /// lease bound ([`Client::session_valid_until`]) trusts only touches of the session that
    /// the leader has certainly applied, and a follower passes its clients' touches on to the
    /// leader only when the leader pings it, every half tick; the bound allows a whole tick.
    /// Set it to your servers' `tickTime`: a value below it lets the bound overstate, a value
    /// above it only makes the bound shorter.
    pub fn tick_time(mut self, tick: Duration) -> Self {
        self.tick_time = tick;
        self
    }

    /// The largest request the servers take, in bytes after the frame's length prefix: their
    /// `jute.maxbuffer` (default 0xfffff, as in ZooKeeper). A larger request makes the server
    /// drop the connection, and every user of the client with it; the client refuses it
    /// instead, alone, with [`Error::RequestTooLarge`](crate::Error::RequestTooLarge), before
    /// sending anything.
    pub fn max_request_size(mut self, bytes: usize) -> Self {
        self.max_request = bytes;
        self
    }

    /// Secures every connection with TLS (feature `tls`): the servers' certificates are
    /// checked against `options`' certificate authority and the host names of the connect
    /// string, and the client presents its own certificate if `options` name one. The files
    /// are read again on every connection, so rotating them needs no restart. `connect`
    /// fails with [`Error::Tls`](crate::Error::Tls) at once if they cannot be read, as soon
    /// as TLS has failed on every server of the connect string in a row (a certificate that
    /// does not verify, a refused handshake: waiting does not mend these), and when no
    /// server's certificate verified within the connection timeout. A client that has been
    /// connected keeps trying (a certificate may be put right meanwhile).
    #[cfg(feature = "tls")]
    pub fn tls(mut self, options: super::tls::TlsOptions) -> Self {
        self.tls = Some(options);
        self
    }

    /// Authenticates every connection with SASL DIGEST-MD5 as `user` (feature `sasl`): what
    /// a server with ZooKeeper's `DigestLoginModule` serves, the `sasl` scheme in ACLs. It
    /// runs on each new connection before any other request; the server's own proof is
    /// checked too. A wrong user or password, or a server that requires SASL of a client
    /// without it, stops the client at once with `AuthFailed` (no reconnect loop). The
    /// password never reaches a log or `Debug`.
    #[cfg(feature = "sasl")]
    pub fn sasl_digest(mut self, user: &str, password: &str) -> Self {
        self.sasl = Some(super::sasl::Mechanism::Digest(
            super::sasl::SaslCredentials {
                user: user.to_owned(),
                password: zeroize::Zeroizing::new(password.to_owned()),
            },
        ));
        self
    }

    /// Authenticates every connection with Kerberos, SASL GSSAPI (feature `gssapi`): what a
    /// server with `Krb5LoginModule` serves, beside Kafka, HBase and Hadoop. It runs on each
    /// new connection before any other request, with credentials acquired afresh each time
    /// (from a keytab, tickets are renewed for as long as the client runs: see
    /// [`GssapiOptions`](crate::GssapiOptions)); the server must prove it holds its
    /// principal's key. ACLs name the client by its principal (`sasl` scheme). Credentials
    /// this client cannot get (no ticket, an expired one without a keytab, an unreadable
    /// keytab) stop the client with [`Error::Kerberos`](crate::Error::Kerberos), with no
    /// reconnect loop; a server whose principal the KDC does not know, or that refuses the
    /// ticket or does not prove itself, is passed over for the next (the client stops only
    /// if every server failed so before it ever connected); a KDC that cannot be reached is
    /// waited for like a server that cannot. The KDC's work is done before each connection.
    /// Replaces [`sasl_digest`](Self::sasl_digest).
    #[cfg(feature = "gssapi")]
    pub fn sasl_gssapi(mut self, options: super::gssapi::GssapiOptions) -> Self {
        self.sasl = Some(super::sasl::Mechanism::Gssapi(options));
        self
    }

    fn sasl_user(&self) -> Option<&str> {
        #[cfg(feature = "sasl")]
        return self.sasl.as_ref().map(|s| s.who());
        #[cfg(not(feature = "sasl"))]
        None
    }

    fn tls_debug(&self) -> Option<String> {
        #[cfg(feature = "tls")]
        return self.tls.as_ref().map(|t| format!("{t:?}"));
        #[cfg(not(feature = "tls"))]
        None
    }

    /// Follows a changing ensemble (ZooKeeper ≥ 3.5 with dynamic configuration): the client
    /// watches `/zookeeper/config` and, whenever the servers it lists change, takes them as
    /// its host list with [`Client::update_hosts`](crate::Client::update_hosts)'s rule,
    /// keeping its session. The connect string then only has to reach the ensemble once.
    /// Off by default.
    ///
    /// Whoever can write that node (any user on a server run with `skipACL`, a superuser
    /// always) names the servers the client dials next, with its session password and
    /// credentials; so a configuration is followed only if every server it names is a host
    /// of the connect string (any port), a name in the domain of one of its names
    /// (`zk1.prod.example.com` admits `*.prod.example.com`), or allowed by
    /// [`follow_ensemble_hosts`](Self::follow_ensemble_hosts); any other is refused, with a
    /// warning. Following without TLS is warned about when the client is built: without it,
    /// nothing checks that a server is the one its name says.
    ///
    /// With TLS: the configuration publishes each server's plaintext client port only (a
    /// `secureClientPort` stays in the server's static file), so the client dials the servers
    /// it follows on the port every server of the connect string names (ensembles serve TLS
    /// on one port everywhere, `2281` say), or as
    /// [`follow_ensemble_secure_port`](Self::follow_ensemble_secure_port) or
    /// [`follow_ensemble_secure_port_with`](Self::follow_ensemble_secure_port_with) say. A TLS
    /// connect string whose servers name different ports, with neither, fails `connect` with
    /// `BadArguments`: there is no port to be had for a server it does not name.
    pub fn follow_ensemble(mut self, follow: bool) -> Self {
        self.follow_ensemble = follow;
        self
    }

    /// More servers a client that follows the ensemble may be sent to: host names, `*.domain`
    /// (any name in it) or `address/prefix` networks (`10.1.0.0/16`, `fd00::/8`). A bad entry
    /// fails `connect` with `BadArguments`.
    pub fn follow_ensemble_hosts(mut self, hosts: &[&str]) -> Self {
        self.follow_hosts = hosts.iter().map(|h| (*h).to_owned()).collect();
        self
    }

    /// With TLS, the port every server a followed configuration names serves TLS on (their
    /// `secureClientPort`), instead of the plaintext port the configuration publishes. A
    /// client without TLS fails `connect` with `BadArguments` if given one.
    pub fn follow_ensemble_secure_port(mut self, port: u16) -> Self {
        self.follow_port = Some(super::ensemble::FollowPort::Fixed(port));
        self
    }

    /// With TLS, the port a followed server serves TLS on, as `port(host, published)` says for
    /// its host and the plaintext client port the configuration publishes for it (servers
    /// that serve TLS on different ports; `Some(published)` for servers with
    /// `client.portUnification`, which take TLS on their plaintext port). `None` (or a panic
    /// in `port`, caught) refuses the server: a configuration naming it is not followed,
    /// with a warning. A TLS-only ensemble (a `secureClientPort` and no `clientPort`)
    /// publishes no client address at all: there is nothing to follow, and the client keeps
    /// its connect string.
    pub fn follow_ensemble_secure_port_with(
        mut self,
        port: impl Fn(&str, u16) -> Option<u16> + Send + Sync + 'static,
    ) -> Self {
        self.follow_port = Some(super::ensemble::FollowPort::With(std::sync::Arc::new(port)));
        self
    }

    /// Re-attaches to an existing session instead of making a new one (a session handed over
    /// from another process, with the id and password its client had). `connect` fails with
    /// `SessionLost` if the session has expired.
    pub fn session(mut self, id: SessionId, password: Vec<u8>) -> Self {
        self.resume = Some((id, super::Secret::new(password)));
        self
    }

    /// Where followed servers are dialled: as published without TLS; with TLS, as the user
    /// said, else on the seeds' one port.
    fn follow_port(
        &self,
        seeds: &[crate::connect_string::HostPort],
        security: &super::link::Security,
    ) -> Result<super::ensemble::FollowPort> {
        use super::ensemble::FollowPort;
        let plain = matches!(security, super::link::Security::Plain);
        match (&self.follow_port, plain) {
            (Some(_), true) => Err(Error::BadArguments(
                "a secure port to follow the ensemble on, without TLS".into(),
            )),
            (Some(port), false) => Ok(port.clone()),
            (None, true) => Ok(FollowPort::Published),
            (None, false) if !self.follow_ensemble => Ok(FollowPort::Published),
            (None, false) => FollowPort::from_seeds(seeds).ok_or_else(|| {
                Error::BadArguments(
                    "follow_ensemble with TLS: the ensemble's configuration publishes only \
                     plaintext client ports, and the connect string's servers name different \
                     ports, so no TLS port can be told for the servers it does not name; give \
                     it with follow_ensemble_secure_port or follow_ensemble_secure_port_with"
                        .into(),
                )
            }),
        }
    }

    fn config(&self) -> Result<Config> {
        let connect = ConnectString::parse(&self.connect_string)?;
        let connect_hosts = connect.hosts.clone();
        let security = self.security()?;
        if self.follow_ensemble && matches!(security, super::link::Security::Plain) {
            log::warn!(
                "following the ensemble without TLS: nothing checks that a server the \
                 configuration names is the one its name says"
            );
        }
        let follow_port = self.follow_port(&connect_hosts, &security)?;
        let sane =
            |d: Duration| d >= Duration::from_millis(100) && d <= Duration::from_secs(86_400);
        if !sane(self.session_timeout) {
            return Err(Error::BadArguments(format!(
                "session timeout {:?} is outside 100 ms ..= 1 day",
                self.session_timeout
            )));
        }
        if !sane(self.connection_timeout) {
            return Err(Error::BadArguments(format!(
                "connection timeout {:?} is outside 100 ms ..= 1 day",
                self.connection_timeout
            )));
        }
        if self.tick_time.is_zero() || self.tick_time > Duration::from_secs(3600) {
            return Err(Error::BadArguments(format!(
                "tick time {:?} is outside (0, 1 h]",
                self.tick_time
            )));
        }
        let mut prefix = connect.chroot.clone().unwrap_or_default();
        if let Some(ns) = &self.namespace {
            let ns_path = format!("/{}", ns.trim_start_matches('/'));
            paths::validate(&ns_path, false)
                .map_err(|e| Error::BadArguments(format!("namespace {ns:?}: {e}")))?;
            if ns_path != "/" {
                prefix.push_str(&ns_path);
            }
        }
        if self.acl.is_empty() {
            return Err(Error::BadArguments(
                "an ACL needs at least one entry".into(),
            ));
        }
        for (scheme, _) in &self.auth {
            if scheme.is_empty() || scheme.contains(char::is_whitespace) {
                return Err(Error::BadArguments(format!(
                    "{scheme:?} is not an auth scheme"
                )));
            }
        }
        Ok(Config {
            connect,
            auth: self.auth.clone(),
            acl: self.acl.clone(),
            session_timeout: self.session_timeout,
            connection_timeout: self.connection_timeout,
            retry: self.retry.clone(),
            prefix,
            allow_read_only: self.allow_read_only,
            io_thread_reads_all: self.io_thread_reads_all,
            tick_time: self.tick_time,
            max_request: self.max_request,
            resume: self.resume.clone(),
            security,
            follow_ensemble: self.follow_ensemble,
            follow_rule: super::ensemble::FollowRule::new(&connect_hosts, &self.follow_hosts)
                .map_err(Error::BadArguments)?,
            follow_port,
            #[cfg(feature = "sasl")]
            sasl: self.sasl.clone(),
        })
    }

    /// How connections are secured; TLS files are read once here, so that a wrong path or a
    /// bad file fails `connect` at once.
    fn security(&self) -> Result<super::link::Security> {
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            tls.load().map_err(Error::Tls)?;
            return Ok(super::link::Security::Tls(std::sync::Arc::new(tls.clone())));
        }
        Ok(super::link::Security::Plain)
    }

    /// Connects and blocks until the server has granted a session, at most the connection
    /// timeout.
    ///
    /// # Errors
    /// `BadArguments` for a bad connect string, namespace or timeout; `Timeout` when no session
    /// was established in time (nothing listens, or the servers do not answer), its message
    /// naming what the last attempt met (a refusal, no answer, no descriptor left in this
    /// process: `Too many open files`); `AuthFailed`
    /// when the server refused the credentials; `Tls` when TLS failed on every server (at
    /// once), or was the last failure waiting does not mend when the time ran out; `Kerberos`
    /// for this client's own Kerberos credentials (at once), or, as for `Tls`, Kerberos
    /// failing with the servers.
    pub fn connect(self) -> Result<Client> {
        let config = self.config()?;
        let connection_timeout = config.connection_timeout;
        let (core, inbox) = Core::start(config)?;
        // The client's second thread: watch delivery and the janitor.
        let c = core.clone();
        let spawned = thread::Builder::new()
            .name("zk-events".into())
            .spawn(move || janitor::run(c, inbox));
        match spawned {
            Ok(handle) => core.adopt_thread(handle),
            Err(e) => {
                core.shutdown();
                return Err(Error::BadArguments(format!("cannot start a thread: {e}")));
            }
        }
        let client = Client::owning(core);
        let until = Instant::now() + connection_timeout;
        match client.core().wait_connected(until) {
            Ok(_) => {}
            Err(Error::ConnectionLoss { .. }) => {
                let unmended = client
                    .core()
                    .unmended
                    .lock()
                    .latest()
                    .map(|(cause, why)| (cause, why.to_owned()));
                match unmended {
                    Some((ConnectFailure::Kerberos, why)) => return Err(Error::Kerberos(why)),
                    Some((_, why)) => return Err(Error::Tls(why)),
                    None => {}
                }
                let what = match client.core().last_failure.lock().take() {
                    Some(last) => format!(
                        "a ZooKeeper session from {} (last attempt: {last})",
                        self.connect_string
                    ),
                    None => format!(
                        "a ZooKeeper session from {} (is a server running there?)",
                        self.connect_string
                    ),
                };
                return Err(Error::timeout(what, connection_timeout));
            }
            Err(e) => return Err(e),
        }
        if let Some((id, _)) = &self.resume {
            if client.session_id() != Some(*id) {
                client.close();
                return Err(Error::SessionLost { session_id: *id });
            }
        }
        let (granted, tick) = (client.session_timeout(), self.tick_time);
        if granted < tick * 4 {
            log::warn!(
                "session timeout {granted:?} is short for a {tick:?} tick: the lease bound \
                 trails the leader's view by a tick or more, so lease checks will often fail"
            );
        }
        let prefix = client.core().config.prefix.clone();
        if !prefix.is_empty() {
            let acl = client.core().config.acl.clone();
            client.ensure_full_path(&prefix, &acl)?;
        }
        Ok(client)
    }
}

impl Client {
    /// Starts configuring a client for `connect_string` (`host:port[,host:port...][/chroot]`).
    pub fn builder(connect_string: &str) -> ClientBuilder {
        ClientBuilder {
            connect_string: connect_string.to_owned(),
            auth: Vec::new(),
            acl: crate::acl::open(),
            session_timeout: Duration::from_secs(30),
            connection_timeout: Duration::from_secs(15),
            tick_time: Duration::from_secs(2),
            retry: RetryPolicy::default(),
            namespace: None,
            allow_read_only: false,
            io_thread_reads_all: false,
            max_request: MAX_REQUEST,
            resume: None,
            follow_ensemble: false,
            follow_hosts: Vec::new(),
            follow_port: None,
            #[cfg(feature = "tls")]
            tls: None,
            #[cfg(feature = "sasl")]
            sasl: None,
        }
    }

    /// Connects with the default settings. See [`ClientBuilder::connect`].
    pub fn connect(connect_string: &str) -> Result<Client> {
        Client::builder(connect_string).connect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_a_credential() {
        let secret = b"batch:s3cret".to_vec();
        let shown = format!(
            "{:?}",
            Client::builder("h:1").authorization("digest", secret.clone())
        );
        assert!(!shown.contains(&format!("{secret:?}")), "{shown}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("digest"), "{shown}");
    }

    #[test]
    fn builder_refuses_bad_settings_before_connecting() {
        let bad = |b: ClientBuilder| matches!(b.connect(), Err(Error::BadArguments(_)));
        assert!(bad(Client::builder("nohostport")));
        assert!(bad(Client::builder("h:1").session_timeout(Duration::ZERO)));
        assert!(bad(
            Client::builder("h:1").connection_timeout(Duration::from_secs(10_000_000))
        ));
        assert!(bad(Client::builder("h:1").namespace("a//b")));
    }
}
