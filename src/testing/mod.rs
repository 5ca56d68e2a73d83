//! A test harness that runs the real Apache ZooKeeper server (feature `testing`).
//!
//! - [`TestingServer`]: one server on a free loopback port, with its own temporary data.
//! - [`TestingCluster`]: an n-server ensemble on loopback; members can be killed and restarted.
//! - [`FaultProxy`]: a TCP proxy that cuts, black-holes, delays or refuses connections on
//!   demand.
//! - [`enter_private_namespaces`]: a test process in network and mount namespaces of its own,
//!   where a [`TestingCluster::firewalled`] ensemble can have any link between members severed
//!   (nftables) and any member's log disk frozen.
//!
//! The server comes from the system installation: Debian's `zookeeper` package puts its jars
//! in `/usr/share/java` (`apt-get install zookeeper`; Java comes with it). Set
//! `ZOOKEEPER_CLASSPATH` to use other jars, `ZOOKEEPER_JAVA` for another `java`, and
//! `ZOOKEEPER_LOG_LEVEL` (default `warn`) for more of the server's log in its data directory.
//!
//! No JVM outlives the process that started it: each runs under a wrapper that kills it when
//! our end of its standard input closes, which the kernel does when our process ends, however
//! it ends.

mod cluster;
mod disk;
mod firewall;
mod jvm;
mod kdc;
mod namespace;
mod proxy;
mod server;
mod silent;

use std::fmt;

pub use cluster::TestingCluster;
pub use jvm::{four_letter, netty_classpath, pid_alive, DEBIAN_CLASSPATH};
pub use kdc::{Kdc, REALM as KDC_REALM, SERVER_PRINCIPAL as KDC_SERVER_PRINCIPAL};
pub use namespace::{enter_private_namespaces, in_private_namespaces};
pub use proxy::FaultProxy;
#[cfg(feature = "tls")]
pub use server::ServerTls;
pub use server::{ServerKerberos, ServerOptions, ServerSasl, TestingServer};
pub use silent::SilentPort;
#[cfg(test)]
pub(crate) use silent::{fill, taking_port, unread_pair};

/// Why the harness could not provide a server. More reasons may come: match with a `_` arm.
#[derive(Debug)]
#[non_exhaustive]
pub enum HarnessError {
    /// ZooKeeper or Java is not installed where expected; the message says how to install it.
    ZooKeeperMissing(String),
    /// The server did not come up; the message carries the end of its log.
    StartFailed(String),
    /// A file or socket operation failed.
    Io(std::io::Error),
}

impl fmt::Display for HarnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HarnessError::ZooKeeperMissing(m) | HarnessError::StartFailed(m) => f.write_str(m),
            HarnessError::Io(e) => write!(f, "test harness I/O error: {e}"),
        }
    }
}

impl std::error::Error for HarnessError {}

/// Makes the server end session `id` now, the way a second client that takes the session over
/// and closes it does (Curator's `KillSession`). The client that owned it finds it expired on
/// its next reconnect. Returns false if the session had already expired.
///
/// Taking the session over drops its owner's connection, and a healthy owner resumes at once,
/// which can take the session back before the close lands; so this retries, and a test that
/// wants no such tug of war holds the owner's traffic (a black-holed [`FaultProxy`]) meanwhile.
/// Plain servers only: on a TLS or SASL server, take the session over with a
/// [`ClientBuilder::session`](crate::ClientBuilder::session) client of the same security and
/// close it.
pub fn expire_session(
    server: std::net::SocketAddr,
    id: crate::SessionId,
    passwd: &[u8],
) -> std::io::Result<bool> {
    let security = crate::client::link::Security::Plain;
    let timeout = std::time::Duration::from_secs(5);
    let host = server.ip().to_string();
    let mut last = std::io::Error::other("no attempt made");
    for _ in 0..20 {
        let until = std::time::Instant::now() + timeout;
        let target = crate::client::link::Target {
            host: &host,
            port: server.port(),
            addr: Some(server),
        };
        let attempt = crate::client::link::open(&target, &security, until, |_| true)
            .map_err(|e| std::io::Error::other(e.to_string()))
            .and_then(|(mut r, mut w)| {
                crate::client::session::close_session(&mut r, &mut w, id, passwd, until)
            });
        match attempt {
            Ok(closed) => return Ok(closed),
            Err(e) => last = e,
        }
    }
    Err(last)
}

impl From<std::io::Error> for HarnessError {
    fn from(e: std::io::Error) -> Self {
        HarnessError::Io(e)
    }
}

/// Moves the clock every lease bound of this process is kept on forward by `by`, as a suspend
/// of the machine that long would: the servers' clocks ran on while this machine slept, so every
/// [`Lease::valid_until`](crate::lock::Lease::valid_until) and
/// [`Client::session_valid_until`](crate::Client::session_valid_until) comes `by` closer.
/// Process-wide and for good: give such a test a binary of its own. (On Linux the bounds read
/// `CLOCK_BOOTTIME`, which a real suspend moves the same way; `Instant` does not see it.)
pub fn suspend_lease_clock(by: std::time::Duration) {
    crate::client::clock::testing_suspend(by);
}
