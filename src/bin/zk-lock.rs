//! `zk-lock`: run a command under a ZooKeeper lock, like flock(1) across machines.

use std::process::{Command, ExitCode};
use std::thread;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use crossbeam_channel::{after, never, select, unbounded};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use zk_recipes::lock::{inspect, HoldKind, InterProcessReadWriteLock, LockOptions};
use zk_recipes::paths;
use zk_recipes::{Client, ClientBuilder, Error, TlsOptions};

/// Exit codes of zk-lock itself (anything else is the command's own status).
mod code {
    pub const USAGE: u8 = 64;
    pub const UNAVAILABLE: u8 = 69;
    pub const ZOOKEEPER: u8 = 70;
    pub const BUSY: u8 = 73;
    pub const TIMED_OUT: u8 = 75;
    pub const LOST: u8 = 76;
    pub const NOT_STARTED: u8 = 127;
}

const AFTER_HELP: &str = "\
The lock is exclusive by default; --read takes a shared read lock instead (readers share,
writers exclude everyone). The command runs with ZK_LOCK_PATH, ZK_LOCK_NODE and
ZK_LOCK_FENCING_TOKEN set. SIGINT, SIGTERM and SIGHUP are forwarded to it. If the lock is lost
while it runs (session lost, or the lease can no longer be trusted) the command gets SIGTERM,
then SIGKILL after --kill-after.

Durations: 500ms, 10s, 2m, or a number of seconds.

Exit status:
  the command's own status (128+N if it died of signal N)
  128+N  signal N arrived while waiting for the lock (nothing ran; our place in line is gone)
  64   bad arguments or path
  69   no ZooKeeper server reachable
  70   other ZooKeeper error
  73   lock busy (--no-wait)
  75   gave up waiting (--wait)
  76   lock lost while the command ran; the command was terminated
  127  the command could not be started";

#[derive(Parser, Debug)]
#[command(
    name = "zk-lock",
    version,
    about = "Run a command under a ZooKeeper lock, like flock(1) across machines",
    after_help = AFTER_HELP,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    list: Option<Sub>,
    /// ZooKeeper connect string (`host:port[,host:port...][/chroot]`); default $ZK_CONNECT.
    #[arg(long, env = "ZK_CONNECT", global = true)]
    connect: Option<String>,
    /// Session timeout.
    #[arg(long, value_parser = duration, default_value = "10s", global = true)]
    session_timeout: Duration,
    /// The servers' tickTime: the lease check allows a tick for a follower to pass the
    /// session's touches on to the leader.
    #[arg(long, env = "ZK_TICK_TIME", value_parser = duration, default_value = "2s", global = true)]
    tick_time: Duration,
    /// Give up after waiting this long for the lock (default: wait as long as it takes).
    #[arg(long, value_parser = duration, conflicts_with = "no_wait")]
    wait: Option<Duration>,
    /// Fail at once if the lock is held.
    #[arg(long)]
    no_wait: bool,
    /// Take a shared read lock instead of the exclusive one.
    #[arg(long)]
    read: bool,
    /// Holder id stored in the lock node (default host:pid:thread).
    #[arg(long)]
    id: Option<String>,
    /// TLS: the PEM file of the certificate authorities that sign the servers' certificates
    /// (TLS is on when this is given).
    #[arg(long, env = "ZK_TLS_CA", global = true)]
    tls_ca: Option<std::path::PathBuf>,
    /// TLS: this client's certificate chain (PEM), for servers that want one.
    #[arg(long, env = "ZK_TLS_CERT", global = true, requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// TLS: the private key (PEM) of --tls-cert.
    #[arg(long, env = "ZK_TLS_KEY", global = true, requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// TLS: a file whose first line is the password of an encrypted --tls-key (PKCS#8); or
    /// the ZK_TLS_KEY_PASSWORD environment variable. Never on the command line.
    #[arg(
        long,
        env = "ZK_TLS_KEY_PASSWORD_FILE",
        global = true,
        requires = "tls_key"
    )]
    tls_key_password_file: Option<std::path::PathBuf>,
    /// TLS: the name every server's certificate must carry, instead of the host dialled (for
    /// servers reached by address, or behind names their certificates do not list).
    #[arg(long, env = "ZK_TLS_SERVER_NAME", global = true, requires = "tls_ca")]
    tls_server_name: Option<String>,
    /// TLS: a PEM file of certificate revocation lists; servers whose certificate they revoke
    /// are refused (read again on every connection).
    #[arg(long, env = "ZK_TLS_CRL", global = true, requires = "tls_ca")]
    tls_crl: Option<std::path::PathBuf>,
    /// SASL DIGEST-MD5 user. The password comes from --sasl-password-file or the
    /// ZK_SASL_PASSWORD environment variable, never from the command line.
    #[arg(long, env = "ZK_SASL_USER", global = true)]
    sasl_user: Option<String>,
    /// File whose first line is the SASL password.
    #[arg(
        long,
        env = "ZK_SASL_PASSWORD_FILE",
        global = true,
        requires = "sasl_user"
    )]
    sasl_password_file: Option<std::path::PathBuf>,
    /// Kerberos (SASL GSSAPI): authenticate with the default ticket cache's tickets (what
    /// `kinit` made). Any other --kerberos-* flag turns it on too.
    #[cfg(feature = "gssapi")]
    #[arg(long, env = "ZK_KERBEROS", global = true, conflicts_with = "sasl_user")]
    kerberos: bool,
    /// Kerberos: this client's principal (`user@REALM`); default: the ticket cache's, or the
    /// keytab's first.
    #[cfg(feature = "gssapi")]
    #[arg(
        long,
        env = "ZK_KERBEROS_PRINCIPAL",
        global = true,
        conflicts_with = "sasl_user"
    )]
    kerberos_principal: Option<String>,
    /// Kerberos: get tickets from this keytab (renewed for as long as the command runs).
    #[cfg(feature = "gssapi")]
    #[arg(
        long,
        env = "ZK_KERBEROS_KEYTAB",
        global = true,
        conflicts_with = "sasl_user"
    )]
    kerberos_keytab: Option<std::path::PathBuf>,
    /// Kerberos: the ticket cache to use instead of the default one (`FILE:/tmp/krb5cc_x`).
    #[cfg(feature = "gssapi")]
    #[arg(
        long,
        env = "ZK_KERBEROS_CCACHE",
        global = true,
        conflicts_with = "sasl_user"
    )]
    kerberos_ccache: Option<String>,
    /// Kerberos: the servers' service name, `zookeeper` unless they run as another (Java's
    /// zookeeper.sasl.client.username).
    #[cfg(feature = "gssapi")]
    #[arg(
        long,
        env = "ZK_KERBEROS_SERVICE",
        global = true,
        conflicts_with = "sasl_user"
    )]
    kerberos_service: Option<String>,
    /// Kerberos: the servers' whole principal, for servers that share one (Java's
    /// zookeeper.server.principal).
    #[cfg(feature = "gssapi")]
    #[arg(
        long,
        env = "ZK_KERBEROS_SERVER_PRINCIPAL",
        global = true,
        conflicts_with = "sasl_user"
    )]
    kerberos_server_principal: Option<String>,
    /// Kerberos: name the server's principal by the host as dialled, not canonicalized
    /// (Java's zookeeper.sasl.client.canonicalize.hostname=false).
    #[cfg(feature = "gssapi")]
    #[arg(
        long,
        env = "ZK_KERBEROS_NO_CANONICALIZE",
        global = true,
        conflicts_with = "sasl_user"
    )]
    kerberos_no_canonicalize: bool,
    /// Follow the ensemble as its membership changes (ZooKeeper ≥ 3.5, `/zookeeper/config`):
    /// only to servers of --connect's hosts, their domains, or --follow-host.
    #[arg(long, env = "ZK_FOLLOW_ENSEMBLE", global = true)]
    follow_ensemble: bool,
    /// More servers a followed configuration may name: a host, `*.domain` or
    /// `address/prefix` (repeatable; ZK_FOLLOW_HOSTS takes them comma-separated).
    #[arg(
        long = "follow-host",
        env = "ZK_FOLLOW_HOSTS",
        value_delimiter = ',',
        global = true,
        requires = "follow_ensemble"
    )]
    follow_hosts: Vec<String>,
    /// With TLS, the port the followed servers serve TLS on (default: the one port every
    /// --connect server names).
    #[arg(
        long,
        env = "ZK_FOLLOW_SECURE_PORT",
        global = true,
        requires = "follow_ensemble"
    )]
    follow_secure_port: Option<u16>,
    /// Grace period between SIGTERM and SIGKILL when the lock is lost.
    #[arg(long, value_parser = duration, default_value = "5s")]
    kill_after: Duration,
    /// Lock path, e.g. /locks/nightly-report.
    path: Option<String>,
    /// The command and its arguments (after --).
    #[arg(last = true)]
    command: Vec<String>,
}

#[derive(Subcommand, Debug)]
enum Sub {
    /// Print the holders and waiters of PATH in order, with their ids.
    List {
        /// Lock path.
        path: String,
    },
}

/// A duration as people write them (`500ms`, `10s`, `2m`, `1h 30m`; humantime's syntax), or a
/// bare number of seconds; at most a year.
fn duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let d = if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|e| e.to_string())
    } else {
        humantime::parse_duration(s).map_err(|e| e.to_string())
    }
    .map_err(|e| format!("{s:?} is not a duration (e.g. 500ms, 10s, 2m): {e}"))?;
    if d > Duration::from_secs(86_400 * 365) {
        return Err(format!("{s:?} is out of range"));
    }
    Ok(d)
}

fn fail(code: u8, msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("zk-lock: {msg}");
    ExitCode::from(code)
}

fn error_code(e: &Error) -> u8 {
    match e {
        Error::InvalidPath { .. } | Error::BadArguments(_) => code::USAGE,
        Error::Timeout { .. } | Error::ConnectionLoss { .. } => code::UNAVAILABLE,
        Error::Tls(_) => code::UNAVAILABLE,
        _ => code::ZOOKEEPER,
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let first = e.to_string();
            let line = first
                .lines()
                .next()
                .unwrap_or("bad arguments")
                .trim_start_matches("error: ");
            return fail(code::USAGE, format!("{line} (see zk-lock --help)"));
        }
    };
    let Some(connect) = cli.connect.clone() else {
        return fail(
            code::USAGE,
            "no ZooKeeper given: use --connect HOSTS or set ZK_CONNECT",
        );
    };
    let mut builder = Client::builder(&connect)
        .session_timeout(cli.session_timeout)
        .tick_time(cli.tick_time)
        .connection_timeout(Duration::from_secs(10));
    if cli.follow_ensemble {
        let allowed: Vec<&str> = cli.follow_hosts.iter().map(String::as_str).collect();
        builder = builder
            .follow_ensemble(true)
            .follow_ensemble_hosts(&allowed);
        if let Some(port) = cli.follow_secure_port {
            builder = builder.follow_ensemble_secure_port(port);
        }
    }
    let builder = match secured(builder, &cli) {
        Ok(b) => b,
        Err(why) => return fail(code::USAGE, why),
    };
    let client = match builder.connect() {
        Ok(c) => c,
        Err(e) => return fail(error_code(&e), e),
    };
    let status = match &cli.list {
        Some(Sub::List { path }) => list(&client, path),
        None => run(&client, &cli),
    };
    client.close();
    status
}

/// TLS and SASL as the flags say. The SASL password is read from its file or the environment
/// only, so it never shows in a process list.
fn secured(builder: ClientBuilder, cli: &Cli) -> Result<ClientBuilder, String> {
    let mut builder = builder;
    match (&cli.tls_ca, &cli.tls_cert, &cli.tls_key) {
        (Some(ca), cert, key) => {
            let mut tls = TlsOptions::new(ca);
            if let (Some(cert), Some(key)) = (cert, key) {
                tls = match key_password(cli)? {
                    Some(password) => tls.identity_encrypted(cert, key, &password),
                    None => tls.identity(cert, key),
                };
            }
            if let Some(name) = &cli.tls_server_name {
                tls = tls.server_name(name.as_str());
            }
            if let Some(crl) = &cli.tls_crl {
                tls = tls.crls(crl);
            }
            builder = builder.tls(tls);
        }
        (None, None, None) => {}
        (None, _, _) => return Err("--tls-cert and --tls-key need --tls-ca".into()),
    }
    if let Some(user) = &cli.sasl_user {
        let password = match &cli.sasl_password_file {
            Some(file) => std::fs::read_to_string(file)
                .map_err(|e| format!("the SASL password file {}: {e}", file.display()))?
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned(),
            None => std::env::var("ZK_SASL_PASSWORD").map_err(|_| {
                "--sasl-user needs a password: --sasl-password-file or ZK_SASL_PASSWORD".to_string()
            })?,
        };
        builder = builder.sasl_digest(user, &password);
    }
    #[cfg(feature = "gssapi")]
    if let Some(gssapi) = kerberos(cli) {
        builder = builder.sasl_gssapi(gssapi);
    }
    Ok(builder)
}

/// The password of an encrypted TLS key: from its file, else the environment, if either.
fn key_password(cli: &Cli) -> Result<Option<zeroize::Zeroizing<String>>, String> {
    if let Some(file) = &cli.tls_key_password_file {
        let text = std::fs::read_to_string(file)
            .map(zeroize::Zeroizing::new)
            .map_err(|e| format!("the TLS key password file {}: {e}", file.display()))?;
        let first = text.lines().next().unwrap_or_default();
        return Ok(Some(zeroize::Zeroizing::new(first.to_owned())));
    }
    Ok(std::env::var("ZK_TLS_KEY_PASSWORD")
        .ok()
        .map(zeroize::Zeroizing::new))
}

/// The Kerberos settings the flags give, if any flag asks for Kerberos.
#[cfg(feature = "gssapi")]
fn kerberos(cli: &Cli) -> Option<zk_recipes::GssapiOptions> {
    let on = cli.kerberos
        || cli.kerberos_principal.is_some()
        || cli.kerberos_keytab.is_some()
        || cli.kerberos_ccache.is_some()
        || cli.kerberos_service.is_some()
        || cli.kerberos_server_principal.is_some()
        || cli.kerberos_no_canonicalize;
    if !on {
        return None;
    }
    let mut o = zk_recipes::GssapiOptions::new().canonicalize_host(!cli.kerberos_no_canonicalize);
    if let Some(p) = &cli.kerberos_principal {
        o = o.principal(p.as_str());
    }
    if let Some(k) = &cli.kerberos_keytab {
        o = o.keytab(k);
    }
    if let Some(c) = &cli.kerberos_ccache {
        o = o.ccache(c.as_str());
    }
    if let Some(s) = &cli.kerberos_service {
        o = o.service(s.as_str());
    }
    if let Some(p) = &cli.kerberos_server_principal {
        o = o.server_principal(p.as_str());
    }
    Some(o)
}

fn list(client: &Client, path: &str) -> ExitCode {
    let line = match inspect(client, path) {
        Ok(l) => l,
        Err(e) => return fail(error_code(&e), e),
    };
    for entry in line {
        let kind = match entry.kind {
            HoldKind::Exclusive => "lock",
            HoldKind::Read => "read",
            HoldKind::Write => "write",
            // A kind added after this command was written.
            _ => "other",
        };
        let session = entry.session.map_or("-".to_owned(), |s| s.to_string());
        println!(
            "{:<8} {kind:<6} {:<32} session {session}  {}",
            if entry.holds { "holds" } else { "waits" },
            entry.holder_id.unwrap_or_default(),
            paths::node_name(&entry.path),
        );
    }
    ExitCode::SUCCESS
}

/// Where the command stands while it runs under the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Run {
    Running,
    /// The lock was lost and the command got SIGTERM; SIGKILL follows at `kill_at`.
    Terminating {
        kill_at: Instant,
    },
    Killed,
}

fn run(client: &Client, cli: &Cli) -> ExitCode {
    let Some(path) = cli.path.as_deref() else {
        return fail(code::USAGE, "no lock path given (see zk-lock --help)");
    };
    let Some((program, args)) = cli.command.split_first() else {
        return fail(
            code::USAGE,
            "no command given: zk-lock PATH -- COMMAND [ARGS...]",
        );
    };
    let mut options = LockOptions::new();
    if let Some(id) = &cli.id {
        options = options.holder_id(id.clone());
    }
    let rw = match InterProcessReadWriteLock::with_options(client, path, options) {
        Ok(l) => l,
        Err(e) => return fail(error_code(&e), e),
    };
    let side = if cli.read {
        rw.read_lock()
    } else {
        rw.write_lock()
    };
    // Signals are caught from here on. While we wait, one closes the client: that ends the wait,
    // and closing the session removes our node.
    let Ok(mut signals) = Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
        return fail(code::ZOOKEEPER, "cannot install signal handlers");
    };
    let handle = signals.handle();
    let (sig_tx, sig_rx) = unbounded();
    let forwarder = thread::spawn(move || {
        for sig in signals.forever() {
            if sig_tx.send(sig).is_err() {
                break;
            }
        }
    });
    let (waited_tx, waited_rx) = crossbeam_channel::bounded::<()>(0);
    let interrupter = {
        let (client, sig_rx) = (client.clone(), sig_rx.clone());
        thread::spawn(move || {
            select! {
                recv(sig_rx) -> sig => {
                    client.close();
                    sig.ok()
                }
                recv(waited_rx) -> _ => None,
            }
        })
    };
    let acquired = if cli.no_wait {
        side.try_acquire()
    } else if let Some(d) = cli.wait {
        side.try_acquire_for(d)
    } else {
        side.acquire().map(Some)
    };
    drop(waited_tx);
    if let Ok(Some(sig)) = interrupter.join() {
        handle.close();
        let _ = forwarder.join();
        return fail(
            128u8.saturating_add(sig as u8),
            "interrupted while waiting for the lock",
        );
    }
    let guard = match acquired {
        Ok(Some(g)) => g,
        Ok(None) if cli.no_wait => return fail(code::BUSY, format!("{path} is locked")),
        Ok(None) => return fail(code::TIMED_OUT, format!("gave up waiting for {path}")),
        Err(e) => return fail(error_code(&e), e),
    };
    let token = match guard.fencing_token() {
        Ok(t) => t,
        Err(e) => {
            return fail(
                code::LOST,
                format!("lost {path} before the command started: {e}"),
            )
        }
    };
    let mut child = match Command::new(program)
        .args(args)
        // The lock's credentials are ours, not the command's.
        .env_remove("ZK_SASL_PASSWORD")
        .env_remove("ZK_TLS_KEY_PASSWORD")
        .env("ZK_LOCK_PATH", path)
        .env("ZK_LOCK_NODE", guard.node_path())
        .env("ZK_LOCK_FENCING_TOKEN", token.to_string())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return fail(code::NOT_STARTED, format!("cannot start {program}: {e}")),
    };
    let pid = child.id() as libc::pid_t;
    let send = |sig: libc::c_int| {
        // SAFETY: kill(2) with our own child's pid and a valid signal number; it touches no
        // memory of ours. The child is not reaped before the loop below ends (the waiter only
        // peeks with WNOWAIT), so the pid cannot have been reused by another process.
        unsafe {
            libc::kill(pid, sig);
        }
    };
    let (exit_tx, exit_rx) = unbounded();
    let waiter = thread::spawn(move || {
        // Waits for the child to exit without reaping it, so that signals sent meanwhile
        // reach (at worst) our zombie and never a process that took over the pid.
        // SAFETY: waitid(2) on our own child, writing into a zeroed siginfo_t we own.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        let _ = exit_tx.send(r);
    });
    let mut lost = guard.lost();
    // The next real deadline: when the lease check will fail unless answers keep coming.
    let check_at = |g: &zk_recipes::lock::InterProcessMutexGuard<'_>| match g.valid_until() {
        Some(t) => after(t.saturating_duration_since(Instant::now())),
        None => after(Duration::ZERO),
    };
    let mut lease_timer = check_at(&guard);
    let mut state = Run::Running;
    loop {
        let kill_timer = match state {
            Run::Terminating { kill_at } => {
                after(kill_at.saturating_duration_since(Instant::now()))
            }
            _ => never(),
        };
        select! {
            recv(exit_rx) -> _ => break,
            recv(sig_rx) -> sig => {
                if let Ok(sig) = sig {
                    send(sig);
                }
                continue;
            }
            // Fires once, when the hold is lost: a closed channel would fire for ever.
            recv(lost) -> _ => lost = never(),
            recv(lease_timer) -> _ => lease_timer = check_at(&guard),
            recv(kill_timer) -> _ => {
                send(libc::SIGKILL);
                state = Run::Killed;
                continue;
            }
        }
        if state == Run::Running && (!guard.is_held() || guard.check().is_err()) {
            eprintln!("zk-lock: lost {path}; terminating the command");
            send(libc::SIGTERM);
            state = Run::Terminating {
                kill_at: Instant::now() + cli.kill_after,
            };
            lease_timer = never();
        }
    }
    let status = child.wait().ok();
    handle.close();
    let _ = forwarder.join();
    let _ = waiter.join();
    let released = guard.release();
    if state != Run::Running {
        return fail(
            code::LOST,
            format!("the lock on {path} was lost while the command ran"),
        );
    }
    if let Err(e) = released {
        eprintln!("zk-lock: {e}");
    }
    match status {
        Some(s) => match s.code() {
            Some(c) => ExitCode::from(c.clamp(0, 255) as u8),
            None => {
                use std::os::unix::process::ExitStatusExt;
                ExitCode::from(128u8.saturating_add(s.signal().unwrap_or(0) as u8))
            }
        },
        None => fail(code::ZOOKEEPER, "lost track of the command"),
    }
}
