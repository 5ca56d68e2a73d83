//! A client's settings once checked, and the path prefix (chroot and namespace) they imply.

use std::borrow::Cow;
use std::time::Duration;

use crate::acl::Acl;
use crate::connect_string::ConnectString;
use crate::retry::RetryPolicy;

pub(crate) struct Config {
    pub connect: ConnectString,
    /// `addAuth` credentials for every connection.
    pub auth: Vec<(String, crate::client::Secret)>,
    /// ACL of the nodes this client creates, unless a recipe gives its own.
    pub acl: Vec<Acl>,
    pub session_timeout: Duration,
    pub connection_timeout: Duration,
    pub retry: RetryPolicy,
    /// Chroot and namespace, joined: every path the caller gives is below it. Empty for none.
    pub prefix: String,
    pub allow_read_only: bool,
    /// No caller or waiter reads the connection: one descriptor per client.
    pub io_thread_reads_all: bool,
    /// The ensemble's tick: how long a follower may hold a touch of the session before the
    /// leader has it.
    pub tick_time: Duration,
    /// The largest request body the servers take (`jute.maxbuffer`).
    pub max_request: usize,
    /// A session to re-attach to at the first connection: id and password.
    pub resume: Option<(crate::SessionId, crate::client::Secret)>,
    /// Plain or TLS connections.
    pub security: super::link::Security,
    /// Take the servers of the ensemble's configuration as the host list, as it changes.
    pub follow_ensemble: bool,
    /// Which servers a followed configuration may name.
    pub follow_rule: super::ensemble::FollowRule,
    /// Which port a followed server is dialled on.
    pub follow_port: super::ensemble::FollowPort,
    /// SASL (DIGEST-MD5 or GSSAPI) on every new connection, before any other request.
    #[cfg(feature = "sasl")]
    pub sasl: Option<super::sasl::Mechanism>,
}

impl Config {
    /// `path` with the chroot and namespace in front, as the server names it.
    /// Borrowed when there is no prefix (most clients): nothing to allocate per request.
    pub fn full<'a>(&'a self, path: &'a str) -> Cow<'a, str> {
        match (self.prefix.is_empty(), path) {
            (true, _) => Cow::Borrowed(path),
            (false, "/") => Cow::Borrowed(&self.prefix),
            (false, p) => Cow::Owned(format!("{}{p}", self.prefix)),
        }
    }
}

/// [`strip`] of a path already owned: without a chroot or namespace it is returned as it is,
/// not copied (a created node's path, a notification's).
pub(crate) fn strip_owned(prefix: &str, full: String) -> String {
    if prefix.is_empty() && !full.is_empty() {
        full
    } else {
        strip(prefix, &full)
    }
}

/// `full` without the client's chroot and namespace.
pub(crate) fn strip(prefix: &str, full: &str) -> String {
    match full.strip_prefix(prefix) {
        Some("") => "/".to_owned(),
        Some(rest) if !prefix.is_empty() && rest.starts_with('/') => rest.to_owned(),
        _ => full.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_is_stripped_from_returned_paths() {
        for (prefix, full) in [
            ("/ns", "/ns/a"),
            ("/ns", "/ns"),
            ("", "/a"),
            ("", ""),
            ("/ns", "/nsx"),
        ] {
            assert_eq!(strip_owned(prefix, full.to_owned()), strip(prefix, full));
        }
        assert_eq!(strip("/ns", "/ns/a"), "/a");
        assert_eq!(strip("/ns", "/ns"), "/");
        assert_eq!(strip("", "/a"), "/a");
        assert_eq!(strip("/ns", "/nsx"), "/nsx");
    }
}
