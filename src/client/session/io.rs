//! The I/O thread: it dials the ensemble, makes or resumes the session (the handshake, auth
//! replay, watch restore), then reads every answer and notification, keeps the connection
//! alive (pings, the lease heartbeat) and decides what each answer proves about the session.

use super::frames::{Beats, Ended};
use super::*;

/// The pause after every host was tried once in vain doubles from here...
const FIRST_PAUSE: Duration = Duration::from_millis(20);
/// ...up to this.
const MAX_PAUSE: Duration = Duration::from_secs(1);
/// How long a resumed session's connect request waits for its answer, the first time: a
/// server that reads the request answers it at once (a standalone server revalidates the
/// session in place). One that took the connection and says nothing is left for a fresh
/// connection after this, twice as long after each such attempt in a row, never past the
/// attempt's own bound (a third of the session timeout). Never shorter than twice what
/// opening the connection took (a slow link), nor than three times what the last resumed
/// session's connect answer took (a server known to be slow). ZooKeeper 3.8 keeps such
/// connections after a restart: one it read before it loaded its database fails its close
/// (`removeCnxn` on a database not there yet) and stays open, never answered; a whole attempt
/// on each (10 s of a 30 s session) was the tail of every session's return in the sessions
/// bench.
///
/// Only with one server to connect to: one host whose name has one address. On an ensemble
/// the member left would still revalidate the session when it got to the request, making
/// itself the session's owner after the client had moved on through another: the client's
/// next write there fails as "session moved", and it reconnects again. There the attempt's
/// own bound (its share of a third of the session timeout) stays the only one, as it does for
/// a new session (whose create, left behind, would live a session timeout on the server). A
/// load balancer's one address in front of several members cannot be told from one server:
/// behind one, a request left after a second may cost that one more reconnect.
const CONNECT_ANSWER_FIRST: Duration = Duration::from_secs(1);
/// A client on a read-only server first asks the other members whether one serves
/// read-write this soon after it attached, then twice as late each time, up to the most (the
/// Java client's schedule).
const FIRST_PROBE: Duration = Duration::from_millis(100);
const MAX_PROBE: Duration = Duration::from_secs(60);
/// How soon the reader tries again a keep-alive it could not write because a caller was
/// writing (it never waits behind a write: that write may wait for the reader).
const BUSY_RETRY: Duration = Duration::from_millis(5);

/// How a connection ended.
struct Served {
    /// An answer ended the session.
    ended: Option<Ended>,
    /// The connection was to a read-only server, left for this address (of this host),
    /// which serves read-write.
    read_write: Option<(HostPort, SocketAddr)>,
}

/// While on a read-only server: which server to ask next whether it serves read-write, and
/// when. The candidates are every address the connect string's hosts resolve to but the one
/// attached (a single name may stand for the whole ensemble), as the Java client asks its
/// resolved host list.
struct Probe {
    hosts: Vec<HostPort>,
    security: Security,
    attached: Option<SocketAddr>,
    next: usize,
    at: Instant,
    every: Duration,
}

impl Probe {
    /// Asks the next candidate if it is time; the one that serves read-write, if it does.
    /// Takes at most `patience` (the I/O thread reads nothing meanwhile).
    fn run(&mut self, patience: Duration) -> Option<(HostPort, SocketAddr)> {
        let start = Instant::now();
        if start < self.at {
            return None;
        }
        let until = start + patience;
        let candidates: Vec<(HostPort, SocketAddr)> = self
            .hosts
            .iter()
            .flat_map(|h| {
                resolve(&h.host, h.port, until)
                    .unwrap_or_default()
                    .into_iter()
                    .map(move |a| (h.clone(), a))
            })
            .filter(|(_, a)| Some(*a) != self.attached)
            .collect();
        self.every = (self.every * 2).min(MAX_PROBE);
        self.at = start + self.every;
        let (host, addr) = candidates.get(self.next % candidates.len().max(1))?.clone();
        self.next += 1;
        let read_write = link::serves_read_write(&host.host, addr, &self.security, until);
        debug!("asked {addr} ({host}) whether it serves read-write: {read_write:?}");
        read_write.unwrap_or(false).then_some((host, addr))
    }
}

/// Why a connection attempt gave no usable connection.
enum Dial {
    /// The server said the session expired (LOST is published): build a new one at once.
    Expired,
    AuthFailed,
    Failed(String),
    /// The server could not be reached at all, or reset the connection: down (or a proxy whose
    /// server is). Failed otherwise than by TLS or Kerberos, so what it met before no longer
    /// counts (`Unmended::passed`); a timeout does not say so.
    Down(String),
    /// TLS could not be set up: unreadable files, a certificate that does not verify.
    Tls(ConnectFailure, String),
    /// Kerberos could not authenticate us, for a reason retrying does not mend (see
    /// `Error::Kerberos`): the client stops.
    #[cfg_attr(not(feature = "gssapi"), allow(dead_code))]
    Kerberos(String),
    /// Kerberos failed with this server (its principal unknown, a server that did not prove
    /// itself or refused our ticket): another may do, as for TLS.
    #[cfg_attr(not(feature = "gssapi"), allow(dead_code))]
    KerberosServer(String),
}

/// A GSSAPI exchange whose KDC work is done, if the client speaks Kerberos.
#[cfg(feature = "gssapi")]
type KerberosStart = Option<super::super::gssapi::Started>;
#[cfg(not(feature = "gssapi"))]
type KerberosStart = Option<std::convert::Infallible>;

/// How a Kerberos failure ends a dial.
#[cfg(feature = "gssapi")]
fn kerberos_dial(failure: super::super::gssapi::Failure) -> Dial {
    use super::super::gssapi::Failure;
    match failure {
        Failure::Transient(why) => {
            // Retried like a server that cannot be reached, but said: the cause is not the
            // server's.
            warn!("Kerberos, to be tried again: {why}");
            Dial::Failed(format!("Kerberos: {why}"))
        }
        Failure::Server(why) => Dial::KerberosServer(why),
        Failure::Refused(why) => Dial::Kerberos(why),
    }
}

impl From<std::io::Error> for Dial {
    fn from(e: std::io::Error) -> Dial {
        match link::tls_failure(&e) {
            Some((cause, why)) => Dial::Tls(cause, why),
            None => network(e),
        }
    }
}

/// A network failure: `Down` if the server is not there, `Failed` otherwise.
fn network(e: std::io::Error) -> Dial {
    use std::io::ErrorKind::*;
    match e.kind() {
        ConnectionRefused | ConnectionReset | ConnectionAborted | HostUnreachable
        | NetworkUnreachable => Dial::Down(e.to_string()),
        _ => Dial::Failed(e.to_string()),
    }
}

impl From<OpenError> for Dial {
    fn from(e: OpenError) -> Dial {
        match e {
            OpenError::Io(e) => network(e),
            OpenError::Tls(cause, e) => Dial::Tls(cause, e),
        }
    }
}

/// A connection ready for requests, as the I/O thread keeps it.
struct Conn {
    /// The server's address.
    server: Option<SocketAddr>,
    stream: LinkReader,
    frames: FrameReader,
    epoch: u64,
    timeout: Duration,
    read_only: bool,
}

impl Core {
    /// The client can never be served (refused or missing credentials): every call fails with
    /// `error` from now on, and the I/O thread waits for the client to close.
    fn stop_for(&self, error: Error) {
        {
            let mut status = self.status.lock();
            status.terminal = Some(error.clone());
            // A stop for another cause (credentials refused, say) is not told as a
            // certificate's.
            if !matches!(error, Error::Tls(_) | Error::Kerberos(_)) {
                self.unmended.lock().clear();
            }
            self.status_changed.notify_all();
        }
        // The session cannot be served again: whatever is held under it is lost now (tokens,
        // waiters and watchers hear LOST), not when the server expires it unseen.
        if let Some(id) = self.session_id() {
            self.lose(id, &format!("the client stops: {error}"), false);
        }
        self.outbox.shut(error);
        let _ = self.stopped.recv();
    }

    pub(super) fn io_main(self: Arc<Core>) {
        let mut hosts = self.config.connect.hosts.clone();
        // Spreads clients over the ensemble.
        fastrand::shuffle(&mut hosts);
        let mut failures = 0u32;
        // Failures waiting does not mend (TLS, a server's Kerberos) in a row, and whether this
        // client ever had a connection: one that never had one and failed so on every server
        // stops (a certificate does not verify by waiting); one that had stays, as a
        // certificate or a keytab may be put right meanwhile.
        let mut unmended_in_a_row = 0usize;
        let mut ever_connected = false;
        let mut next = 0usize;
        let mut pinned = None;
        while !self.is_closed() {
            self.check_silence();
            // A new server list (`update_hosts`), in the order to try it.
            {
                let mut h = self.hosts.lock();
                if let Some(order) = h.update.take() {
                    h.must_move = false;
                    self.unmended.lock().keep_only(&order);
                    hosts = order;
                    next = 0;
                    pinned = None;
                }
            }
            let (host, addr) = match pinned.take() {
                Some((host, addr)) => (host, Some(addr)),
                None => {
                    let Some(host) = hosts.get(next % hosts.len().max(1)).cloned() else {
                        return;
                    };
                    next += 1;
                    (host, None)
                }
            };
            // The server being dialed counts as the current one for a list that changes
            // meanwhile (its move rule asks where this client is).
            self.hosts.lock().current = Some(host.clone());
            match self.handshake(&host, addr, hosts.len()) {
                Ok(conn) => {
                    failures = 0;
                    unmended_in_a_row = 0;
                    ever_connected = true;
                    // A failure before this connection is no longer the last attempt's.
                    *self.last_failure.lock() = None;
                    let served = self.serve(conn, hosts.clone());
                    // The next attempt goes to the server found serving read-write.
                    pinned = served.read_write;
                    match served.ended {
                        Some(Ended::Expired) => {
                            if let Some(id) = self.session_id() {
                                self.lose(id, "the server answered that it expired", false);
                            }
                        }
                        Some(Ended::AuthRequired) => {
                            warn!(
                                "the server requires authentication this client does not have; \
                                 the client stops connecting"
                            );
                            return self.stop_for(Error::ZooKeeper {
                                code: crate::ZkCode::SessionClosedRequireSaslAuth,
                                path: String::new(),
                            });
                        }
                        None => {}
                    }
                }
                Err(Dial::Expired) => {}
                Err(Dial::AuthFailed) => {
                    warn!("the server refused the credentials; the client stops connecting");
                    return self.stop_for(Error::auth_failed());
                }
                Err(Dial::Kerberos(why)) => {
                    warn!("Kerberos: {why}; the client stops connecting");
                    return self.stop_for(Error::Kerberos(why));
                }
                // Left for a server of a new list (`update_hosts`): not a failure, the next
                // turn takes the list.
                Err(Dial::Failed(_) | Dial::Down(_) | Dial::Tls(..) | Dial::KerberosServer(_))
                    if self.move_pending() =>
                {
                    debug!("left {host} for a server of the new list");
                }
                Err(
                    failure @ (Dial::Failed(_)
                    | Dial::Down(_)
                    | Dial::Tls(..)
                    | Dial::KerberosServer(_)),
                ) => {
                    // A failure waiting does not mend, with this server: the client stops
                    // only when every server failed so before it ever connected.
                    let mut unmended = |why: String, error: fn(String) -> Error| {
                        unmended_in_a_row += 1;
                        let stop = !ever_connected && unmended_in_a_row >= hosts.len();
                        if stop {
                            warn!(
                                "TLS or Kerberos failed on every server before any connection; \
                                 the client stops connecting"
                            );
                        }
                        stop.then(|| error(why))
                    };
                    let why = match failure {
                        Dial::Tls(cause, why) => {
                            warn!("no TLS connection to {host}: {why}");
                            self.unmended.lock().met(&host, cause, why.clone());
                            if let Some(e) = unmended(why.clone(), Error::Tls) {
                                return self.stop_for(e);
                            }
                            why
                        }
                        Dial::KerberosServer(why) => {
                            warn!("Kerberos failed with {host}: {why}");
                            self.unmended
                                .lock()
                                .met(&host, ConnectFailure::Kerberos, why.clone());
                            if let Some(e) = unmended(why.clone(), Error::Kerberos) {
                                return self.stop_for(e);
                            }
                            why
                        }
                        Dial::Failed(why) => {
                            unmended_in_a_row = 0;
                            why
                        }
                        Dial::Down(why) => {
                            unmended_in_a_row = 0;
                            self.unmended.lock().passed(&host);
                            why
                        }
                        Dial::Expired | Dial::AuthFailed | Dial::Kerberos(_) => String::new(),
                    };
                    debug!("no connection to {host}: {why}");
                    if !why.is_empty() {
                        *self.last_failure.lock() = Some(format!("{host}: {why}"));
                    }
                    failures += 1;
                    if failures as usize % hosts.len().max(1) == 0 {
                        // A whole round failed on a list that replaced the connect string's
                        // (followed or given by `update_hosts`): the seeds join it again, so
                        // that published addresses this client cannot reach never strand it.
                        for seed in &self.config.connect.hosts {
                            if !hosts.contains(seed) {
                                hosts.push(seed.clone());
                            }
                        }
                        let round = failures / hosts.len().max(1) as u32;
                        let pause = FIRST_PAUSE
                            .saturating_mul(1 << round.min(10))
                            .min(MAX_PAUSE);
                        let pause = match self.lost_at() {
                            Some(at) => pause.min(at.saturating_duration_since(Instant::now())),
                            None => pause,
                        };
                        // Waits for the next attempt's time (with jitter, so that clients
                        // cut off together do not all come back at once), or for shutdown.
                        let _ = self.stopped.recv_timeout(crate::retry::jitter(pause));
                    }
                }
            }
        }
    }

    /// When the suspended session is to be declared lost.
    fn lost_at(&self) -> Option<Instant> {
        let status = self.status.lock();
        match (&status.phase, &status.session, status.silent_since) {
            (Phase::Suspended, Some(s), Some(since)) => Some(since + s.timeout),
            _ => None,
        }
    }

    fn check_silence(&self) {
        if self.lost_at().is_some_and(|at| Instant::now() >= at) {
            if let Some(id) = self.session_id() {
                self.lose(
                    id,
                    "no server took it back within the session timeout",
                    true,
                );
            }
        }
    }

    /// Registers the handshake socket for shutdown; false if the client is closing, or moving
    /// to a server of a new list (decided before the socket was registered, so nothing shut
    /// it: `update_hosts` sets the move, then looks for the socket).
    fn track_connecting(&self, s: &Socket) -> bool {
        *self.connecting.lock() = Some(s.clone());
        !self.is_closed() && !self.move_pending()
    }

    /// Opens a connection to `host`, attaches a session (the live one if there is one) and
    /// makes it ready for requests: credentials, then the watches to restore.
    /// `addr`: the one address of `host` to dial (one found serving read-write), if not all.
    fn handshake(
        &self,
        host: &HostPort,
        addr: Option<SocketAddr>,
        hosts: usize,
    ) -> std::result::Result<Conn, Dial> {
        // Only a session the ensemble knows is resumed: one a read-only server made is its
        // own, and a read-write server is asked for a new one (as the Java client does).
        let resume = {
            let status = self.status.lock();
            status.session.clone().filter(|_| status.session_is_global)
        };
        let span = crate::trace::handshake(host, resume.as_ref().map(|s| s.id));
        let timeout = resume
            .as_ref()
            .map_or(self.config.session_timeout, |s| s.timeout);
        // Each host gets a third of its share of the session timeout, so that every host is
        // tried at least three times before the session is gone: a silent host then cannot
        // keep us from the others. Within it, the connect answer has a shorter bound of its
        // own (`CONNECT_ANSWER_FIRST`): a restarting server can leave a connection it took
        // open and unanswered.
        let per_attempt = self
            .config
            .connection_timeout
            .min((timeout / (3 * hosts.max(1) as u32)).max(Duration::from_millis(100)));
        let mut until = Instant::now() + per_attempt;
        if let Some(at) = self.lost_at() {
            until = until.min(at);
        }
        let target = Target {
            host: &host.host,
            port: host.port,
            addr,
        };
        // Kerberos's KDC work first, before any connection: a slow or unreachable KDC then
        // holds no session on a server, and leaves none behind.
        #[cfg(feature = "gssapi")]
        let kerberos: KerberosStart = match &self.config.sasl {
            Some(super::super::sasl::Mechanism::Gssapi(options)) => {
                Some(super::super::gssapi::start(options, &host.host).map_err(kerberos_dial)?)
            }
            _ => None,
        };
        #[cfg(not(feature = "gssapi"))]
        let kerberos: KerberosStart = None;
        if let Some(old) = self.to_close.lock().take() {
            let closed = link::open(&target, &self.config.security, until, |s| {
                self.track_connecting(s)
            })
            .map_err(|e| e.to_string())
            .and_then(|(mut r, mut w)| {
                close_session(&mut r, &mut w, old.id, &old.passwd, until).map_err(|e| e.to_string())
            });
            match closed {
                Ok(closed) => debug!("closed lost session {} on the server: {closed}", old.id),
                Err(e) => debug!("could not close lost session {}: {e}", old.id),
            }
        }
        // One server behind one address: the only case for the connect answer's short bound
        // (`CONNECT_ANSWER_FIRST`). The name is looked up here, and its one address dialed.
        let mut target = target;
        let mut one_address = target.addr.is_some();
        if hosts == 1 && resume.is_some() && target.addr.is_none() {
            if let Ok([only]) = resolve(&host.host, host.port, until).as_deref() {
                target.addr = Some(*only);
                one_address = true;
            }
        }
        let dialed = Instant::now();
        let (mut stream, mut writer) = link::open(&target, &self.config.security, until, |s| {
            self.track_connecting(s)
        })?;
        // The connection and TLS took round trips of this link: the connect answer is given
        // at least twice that (a slow link is not a silent server).
        let opened_in = dialed.elapsed();
        bound(writer.socket(), until)?;
        // On the lease clock: it may anchor the bound (see `clock`).
        let sent_at = clock::lease_now();
        let request = ConnectRequest {
            last_zxid_seen: self.last_zxid.load(Ordering::SeqCst),
            timeout_ms: i32::try_from(self.config.session_timeout.as_millis()).unwrap_or(i32::MAX),
            session_id: resume.as_ref().map_or(0, |s| s.id.0),
            passwd: resume
                .as_ref()
                .map_or_else(|| Secret::new(vec![0; 16]), |s| s.passwd.clone()),
            read_only: self.config.allow_read_only,
        };
        // The connect request goes alone, as the Java client sends it: a server that refuses
        // the session answers and closes at once, and bytes written behind the request could
        // make that close a reset that loses the answer ("expired").
        writer.write_all(&request.encode())?;
        let mut reader = FrameReader::new();
        // See `CONNECT_ANSWER_FIRST`.
        let short = hosts == 1 && resume.is_some() && one_address;
        let silent = self.unanswered.load(Ordering::SeqCst).min(8);
        let answer_wait = CONNECT_ANSWER_FIRST
            .max(opened_in.saturating_mul(2))
            .max(Duration::from_micros(self.answer_took.load(Ordering::SeqCst)).saturating_mul(3))
            .saturating_mul(1 << silent);
        let asked = Instant::now();
        let answer_by = if short {
            until.min(asked + answer_wait)
        } else {
            until
        };
        bound(writer.socket(), answer_by)?;
        let frame = match reader.read_frame(&mut stream, Some(answer_by)) {
            Err(e) if conn::timed_out(&e) && answer_by < until => {
                self.unanswered.fetch_add(1, Ordering::SeqCst);
                // Closed now, not when the next dial replaces it.
                writer.shutdown();
                self.connecting.lock().take();
                return Err(Dial::Failed(format!(
                    "no answer to the connect request within {answer_wait:?}"
                )));
            }
            answer => answer?,
        };
        if short {
            self.unanswered.store(0, Ordering::SeqCst);
            self.answer_took.store(
                u64::try_from(asked.elapsed().as_micros()).unwrap_or(u64::MAX),
                Ordering::SeqCst,
            );
        }
        bound(writer.socket(), until)?;
        // A server that will not make the session (a read-only one without local sessions
        // answers `NotReadOnly`) sends a bare reply header instead of a connect answer.
        if frame.len() == 16 {
            if let Ok(header) = ReplyHeader::decode(&mut Dec::new(&frame)) {
                return Err(Dial::Failed(format!(
                    "the server refused to make a session (error {}{})",
                    header.err,
                    if header.err == -119 {
                        ": a read-only server gives sessions only with localSessionsEnabled"
                    } else {
                        ""
                    }
                )));
            }
        }
        let answer = ConnectResponse::decode(&frame)
            .map_err(|e| Dial::Failed(format!("bad connect answer: {}", e.0)))?;
        if answer.timeout_ms <= 0 {
            return match resume {
                Some(old) => {
                    self.lose(old.id, "the server says it expired", false);
                    Err(Dial::Expired)
                }
                None => Err(Dial::Failed("the server granted no session".into())),
            };
        }
        if answer.read_only && !self.config.allow_read_only {
            return Err(Dial::Failed(
                "a read-only server (allow_read_only is off)".into(),
            ));
        }
        if let Some(old) = resume.as_ref().filter(|s| s.id.0 != answer.session_id) {
            self.lose(
                old.id,
                "the server gave the connection another session",
                false,
            );
        }
        // SASL first, alone: the server holds everything else of an unauthenticated client
        // to the enforcement rules, and answers each SASL step before the next.
        #[cfg(feature = "sasl")]
        if let Some(mechanism) = &self.config.sasl {
            let exchanged = sasl_exchange(
                mechanism,
                kerberos,
                &host.host,
                &mut stream,
                &mut writer,
                &mut reader,
                until,
            );
            if let Err(e) = exchanged {
                // The session goes now, not at its expiry (a server that keeps the connection
                // after a failed exchange still takes this): when the client stops, and when
                // the session was made by this connection, which no later one will resume.
                let fresh = resume.as_ref().is_none_or(|s| s.id.0 != answer.session_id);
                if fresh || matches!(e, Dial::AuthFailed | Dial::Kerberos(_)) {
                    let _ = writer.write_all(&Enc::request(3, op::CLOSE_SESSION).finish());
                }
                return Err(e);
            }
        }
        // Then, in one write, the credentials and (on a resumed session) the watches to
        // restore. The server answers the credentials at once and the watches through its
        // pipeline, so their answers come in this order.
        let auth: Vec<(String, Secret)> = self
            .config
            .auth
            .iter()
            .cloned()
            .chain(self.added_auth.lock().iter().cloned())
            .collect();
        let mut out = Vec::new();
        for (scheme, credentials) in &auth {
            out.extend_from_slice(&proto::auth_request(scheme, credentials));
        }
        if resume.as_ref().is_some_and(|s| s.id.0 == answer.session_id) {
            let restore = self
                .watches
                .lock()
                .to_restore(self.last_zxid.load(Ordering::SeqCst));
            for set in restore {
                out.extend_from_slice(&set.encode());
            }
        }
        if !out.is_empty() {
            writer.write_all(&out)?;
        }
        for _ in &auth {
            let frame = reader.read_frame(&mut stream, Some(until))?;
            let header =
                ReplyHeader::decode(&mut Dec::new(&frame)).map_err(|e| Dial::Failed(e.0.into()))?;
            match (header.xid, header.err) {
                (xid::AUTH, 0) => {}
                (xid::AUTH, _) => return Err(Dial::AuthFailed),
                (other, _) => return Err(Dial::Failed(format!("xid {other} before auth"))),
            }
        }
        let id = SessionId(answer.session_id);
        span.session(id);
        let resumed = resume.as_ref().is_some_and(|s| s.id == id);
        if !resumed {
            self.end_watches(WatchKind::SessionLost);
        }
        let timeout = Duration::from_millis(answer.timeout_ms as u64);
        let read_timeout = timeout * 2 / 3;
        writer.set_write_timeout(Some(read_timeout))?;
        let server = writer.peer_addr();
        let epoch = self.epochs.fetch_add(1, Ordering::SeqCst) + 1;
        let session = Session {
            id,
            timeout,
            passwd: answer.passwd,
        };
        // A read-only server has no leader: attaching there proves nothing about the session.
        let anchor = (!answer.read_only).then_some(sent_at);
        if !self.connected(writer, session, epoch, anchor, answer.read_only) {
            return Err(Dial::Failed("closing".into()));
        }
        self.connecting.lock().take();
        Ok(Conn {
            server,
            stream,
            frames: reader,
            epoch,
            timeout,
            read_only: answer.read_only,
        })
    }

    /// The connection is ready: opens the gate and publishes CONNECTED, RECONNECTED or
    /// CONNECTED_READ_ONLY.
    /// `anchor`: the handshake's send time, if the leader created or revalidated the session
    /// after it (not on a read-only server).
    fn connected(
        &self,
        writer: LinkWriter,
        session: Session,
        epoch: u64,
        anchor: Option<Instant>,
        read_only: bool,
    ) -> bool {
        let mut status = self.status.lock();
        if status.phase == Phase::Closed || !self.outbox.open(writer, session.id, epoch) {
            return false;
        }
        super::Counters::count(&self.counters.connections);
        let same = status.session.as_ref().is_some_and(|s| s.id == session.id);
        let event = if read_only {
            ConnectionState::ConnectedReadOnly
        } else if same {
            ConnectionState::Reconnected
        } else {
            ConnectionState::Connected
        };
        status.read_only = read_only;
        // A read-only server's session is its own; one a read-write server made or took back
        // is the ensemble's.
        status.session_is_global = if read_only {
            same && status.session_is_global
        } else {
            true
        };
        // The same session keeps what the leader was seen to have (a read-only server adds
        // nothing to it); a new one starts from its handshake.
        status.leader_saw = match (same, status.leader_saw) {
            (true, Some(t)) => Some(anchor.map_or(t, |a| t.max(a))),
            _ => anchor,
        };
        let id = session.id;
        status.session = Some(session);
        status.phase = Phase::Connected;
        status.silent_since = None;
        // Nothing stops the client now: cleared before anyone hears of the connection.
        self.unmended.lock().clear();
        self.status_changed.notify_all();
        self.publish(event, id);
        self.job(Job::Connected(id));
        true
    }

    /// Reads answers until the connection dies, pinging it while idle; on a read-only server,
    /// also asks the `others` now and then whether one serves read-write, and leaves for the
    /// first that does. Returns how the connection ended.
    fn serve(&self, conn: Conn, hosts: Vec<HostPort>) -> Served {
        let read_timeout = conn.timeout * 2 / 3;
        let ping_every = read_timeout / 3;
        // The lease heartbeat: a write the leader checks the session for, whenever the lease
        // bound is half a session timeout old; a tick after the last one was answered at the
        // earliest, so that each vouches for a touch before it. Only while something is held
        // (a live token): a client that holds nothing costs the ensemble no writes. On a
        // read-only server nothing can move the bound: no heartbeat.
        let anchor_every = conn.timeout / 2;
        let tick = self.config.tick_time;
        *self.beats.lock() = Beats::new(conn.read_only, tick);
        self.reading.install(conn.stream, conn.frames, read_timeout);
        let mut probe = conn.read_only.then(|| Probe {
            hosts,
            security: self.config.security.clone(),
            attached: conn.server,
            next: 0,
            at: Instant::now() + FIRST_PROBE,
            every: FIRST_PROBE,
        });
        // A probe holds up the reading of answers: half the ping interval at most, so the
        // connection's own keep-alive never suffers (and a second at most, Java's bound).
        let probe_patience = (ping_every / 2).min(Duration::from_secs(1));
        let mut read_write = None;
        // A keep-alive that found a caller writing: when to try it again.
        let mut busy = None;
        let why = loop {
            // A new list that moves this client came while this connection was being made.
            if self.move_pending() {
                break "moving to a server of the new list".to_owned();
            }
            if let Some(found) = probe.as_mut().and_then(|p| p.run(probe_patience)) {
                let why = format!("{} ({}) serves read-write", found.1, found.0);
                read_write = Some(found);
                break why;
            }
            // What is due goes out first, on every turn: also while answers keep coming (a
            // busy reader must not starve the heartbeat, nor the ping).
            let now = Instant::now();
            // What is due is marked sent before it goes, under the lock every reader takes
            // frames under: a caller may read its answer before the send returns.
            let (last_recv, anchor_at, mut beat, ping) = {
                let mut beats = self.beats.lock();
                let anchor_at = self
                    .anchored_at()
                    .map(|t| t + anchor_every)
                    .max(beats.heartbeat_answered.map(|t| t + tick));
                let beat = !beats.heartbeat_out && self.live_tokens.load(Ordering::SeqCst) > 0;
                let beat_now = beat && anchor_at.is_none_or(|t| now >= t);
                let ping = !beat_now
                    && beats.ping_sent.is_none()
                    && now >= self.outbox.last_send() + ping_every;
                if beat_now {
                    beats.heartbeat_out = true;
                } else if ping {
                    beats.ping_sent = Some(clock::lease_time(now));
                }
                (beats.last_recv, anchor_at, beat, ping)
            };
            if now >= last_recv + read_timeout {
                break format!("nothing heard for {read_timeout:?}");
            }
            if beat && anchor_at.is_none_or(|t| now >= t) {
                // The cheapest request the leader checks the session for: a transaction that
                // only checks that the root exists.
                let root = self.config.full("/");
                let check = Req::Multi(vec![Req::Check {
                    path: &root,
                    version: -1,
                }])
                .outgoing();
                let heartbeat = Outgoing {
                    heartbeat: true,
                    ..check
                };
                match self.outbox.try_send([heartbeat], None) {
                    Ok(Some(_)) => beat = false,
                    // A caller is writing: again on the next turn, soon.
                    Ok(None) => {
                        self.beats.lock().heartbeat_out = false;
                        busy = Some(now + BUSY_RETRY);
                    }
                    Err(e) => break format!("heartbeat: {e}"),
                }
            } else if ping {
                let ping = Enc::request(xid::PING, op::PING).finish();
                match self.outbox.try_send_reserved(conn.epoch, &ping) {
                    Ok(true) => {}
                    Ok(false) => {
                        self.beats.lock().ping_sent = None;
                        busy = Some(now + BUSY_RETRY);
                    }
                    Err(e) => break format!("ping: {e}"),
                }
            }
            let mut wake = last_recv + read_timeout;
            if let Some(b) = busy.take() {
                wake = wake.min(b);
            }
            if let Some(p) = &probe {
                wake = wake.min(p.at);
            }
            if self.beats.lock().ping_sent.is_none() {
                wake = wake.min(self.outbox.last_send() + ping_every);
            }
            if beat {
                wake = wake.min(anchor_at.unwrap_or(now));
            }
            let wake = wake.max(now + Duration::from_millis(1));
            // Whatever fell due is sent at the top of the loop.
            if let Err(why) = self.reading.io_turn(wake, |frame| self.take_frame(frame)) {
                break why;
            }
            let mut beats = self.beats.lock();
            if beats.last_recv < now {
                // A quiet turn: the connection outlived the latest frame, a refusal or not.
                beats.refused_last = false;
            }
        };
        let (refused_last, ended) = {
            let beats = self.beats.lock();
            (beats.refused_last, beats.ended)
        };
        // The socket is shut first, which ends a caller's read of it.
        self.disconnected(conn.epoch, &why);
        self.reading.uninstall();
        if let Some(server) = conn.server.filter(|_| !refused_last) {
            self.outbox.forget_refusals(server);
        }
        Served { ended, read_write }
    }

    /// The send time of the latest answer that extended the lease bound.
    fn anchored_at(&self) -> Option<Instant> {
        self.status.lock().leader_saw.and_then(clock::to_instant)
    }
}

/// SASL on a new connection, to the server `host`: DIGEST-MD5 (see `sasl`: an empty first
/// message, the response to the server's challenge, then the server's proof checked) or
/// GSSAPI (see `gssapi`). A refusal stops the client.
#[cfg(feature = "sasl")]
fn sasl_exchange(
    mechanism: &super::super::sasl::Mechanism,
    kerberos: KerberosStart,
    host: &str,
    r: &mut LinkReader,
    w: &mut LinkWriter,
    frames: &mut FrameReader,
    until: Instant,
) -> std::result::Result<(), Dial> {
    use super::super::sasl::{cnonce, DigestMd5, Mechanism};
    let mut ask = |xid: i32, token: &[u8]| -> std::result::Result<Vec<u8>, Dial> {
        let mut request = Enc::request(xid, op::SASL);
        request.buffer(token);
        w.write_all(&request.finish())?;
        let frame = frames.read_frame(r, Some(until))?;
        let mut d = Dec::new(&frame);
        let header = ReplyHeader::decode(&mut d).map_err(|e| Dial::Failed(e.0.into()))?;
        match header.err {
            0 => d.buffer().map_err(|e| Dial::Failed(e.0.into())),
            // AuthFailed, SessionClosedRequireSaslAuth: the server closes after either.
            -115 | super::frames::SESSION_CLOSED_REQUIRE_AUTH => Err(Dial::AuthFailed),
            err => Err(Dial::Failed(format!(
                "the server's SASL answer: error {err}"
            ))),
        }
    };
    // What the server says cannot authenticate us (no SASL configured there: an empty
    // challenge; a wrong proof) is an authentication failure: the client stops.
    let refused = |why: String| {
        warn!("SASL authentication failed: {why}");
        Dial::AuthFailed
    };
    // Without `gssapi` the match has one arm.
    #[cfg_attr(not(feature = "gssapi"), allow(clippy::infallible_destructuring_match))]
    let credentials = match mechanism {
        Mechanism::Digest(credentials) => credentials,
        #[cfg(feature = "gssapi")]
        Mechanism::Gssapi(_) => {
            let Some(started) = kerberos else {
                return Err(Dial::Failed("Kerberos was not started".into()));
            };
            let mut xid = 0;
            let exchanged = super::super::gssapi::finish(started, host, |token| {
                xid += 1;
                // A server that refuses our ticket (its keytab stale, a replay) is this
                // server's failure: another may take it.
                ask(xid, token).map_err(|e| match e {
                    Dial::AuthFailed => Dial::KerberosServer(format!(
                        "the server {host} refused the Kerberos ticket"
                    )),
                    e => e,
                })
            })?;
            return exchanged.map_err(kerberos_dial);
        }
    };
    let _ = (host, kerberos);
    let mut exchange = DigestMd5::new(credentials, cnonce().map_err(Dial::Failed)?);
    let challenge = ask(1, &[])?;
    if challenge.is_empty() {
        return Err(refused(
            "the server offered no SASL challenge (is SASL configured there?)".into(),
        ));
    }
    let response = exchange.respond(&challenge).map_err(refused)?;
    let proof = ask(2, &response)?;
    exchange.verify(&proof).map_err(refused)
}

/// Attaches to session `id` over `sock` and closes it, so that its ephemeral nodes go now
/// rather than when the server would expire it. `Ok(false)` if it had already expired.
pub(crate) fn close_session(
    r: &mut LinkReader,
    w: &mut LinkWriter,
    id: SessionId,
    passwd: &[u8],
    until: Instant,
) -> std::io::Result<bool> {
    bound(w.socket(), until)?;
    let timeout = until.saturating_duration_since(Instant::now());
    let req = ConnectRequest {
        last_zxid_seen: 0,
        timeout_ms: i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX),
        session_id: id.0,
        passwd: Secret::new(passwd.to_vec()),
        read_only: false,
    };
    w.write_all(&req.encode())?;
    let mut reader = FrameReader::new();
    let answer = ConnectResponse::decode(&reader.read_frame(r, Some(until))?)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.0))?;
    if answer.timeout_ms <= 0 {
        return Ok(false);
    }
    w.write_all(&Enc::request(1, op::CLOSE_SESSION).finish())?;
    reader.read_frame(r, Some(until))?;
    Ok(true)
}
