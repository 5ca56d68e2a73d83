//! The one error type of the crate.

use std::fmt;
use std::time::Duration;

use crate::session_id::SessionId;

/// ZooKeeper's error codes (`KeeperException.Code`), as the server sends them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ZkCode {
    /// A server-side system error.
    SystemError,
    /// The server's state is inconsistent.
    RuntimeInconsistency,
    /// Data inconsistency.
    DataInconsistency,
    /// The connection was lost (the crate reports it as [`Error::ConnectionLoss`]).
    ConnectionLoss,
    /// A record could not be (un)marshalled.
    MarshallingError,
    /// The server does not know the operation (an older server, or a disabled feature such
    /// as TTL nodes).
    Unimplemented,
    /// The operation timed out on the server.
    OperationTimeout,
    /// Bad arguments.
    BadArguments,
    /// The session is not known to the server.
    UnknownSession,
    /// No quorum for a new configuration.
    NewConfigNoQuorum,
    /// A reconfiguration is in progress.
    ReconfigInProgress,
    /// An API error.
    ApiError,
    /// The node does not exist.
    NoNode,
    /// Not authorised by the node's ACL.
    NoAuth,
    /// The node is not at the expected version.
    BadVersion,
    /// Ephemeral nodes cannot have children.
    NoChildrenForEphemerals,
    /// The node already exists.
    NodeExists,
    /// The node has children.
    NotEmpty,
    /// The session has expired.
    SessionExpired,
    /// An invalid callback.
    InvalidCallback,
    /// An invalid ACL.
    InvalidAcl,
    /// The server refused the credentials.
    AuthFailed,
    /// The session moved to another server.
    SessionMoved,
    /// A write on a read-only server.
    NotReadOnly,
    /// An ephemeral node on a local session.
    EphemeralOnLocalSession,
    /// No such watch to remove.
    NoWatcher,
    /// The request timed out.
    RequestTimeout,
    /// Reconfiguration is disabled.
    ReconfigDisabled,
    /// The session needs SASL authentication.
    SessionClosedRequireSaslAuth,
    /// A quota was exceeded.
    QuotaExceeded,
    /// The server throttled the request.
    Throttled,
    /// A code this crate does not know.
    Unknown(i32),
}

impl ZkCode {
    /// The code for the wire value `code` (not 0, which is success).
    pub fn from_code(code: i32) -> ZkCode {
        use ZkCode::*;
        match code {
            -1 => SystemError,
            -2 => RuntimeInconsistency,
            -3 => DataInconsistency,
            -4 => ConnectionLoss,
            -5 => MarshallingError,
            -6 => Unimplemented,
            -7 => OperationTimeout,
            -8 => BadArguments,
            -12 => UnknownSession,
            -13 => NewConfigNoQuorum,
            -14 => ReconfigInProgress,
            -100 => ApiError,
            -101 => NoNode,
            -102 => NoAuth,
            -103 => BadVersion,
            -108 => NoChildrenForEphemerals,
            -110 => NodeExists,
            -111 => NotEmpty,
            -112 => SessionExpired,
            -113 => InvalidCallback,
            -114 => InvalidAcl,
            -115 => AuthFailed,
            -118 => SessionMoved,
            -119 => NotReadOnly,
            -120 => EphemeralOnLocalSession,
            -121 => NoWatcher,
            -122 => RequestTimeout,
            -123 => ReconfigDisabled,
            -124 => SessionClosedRequireSaslAuth,
            -125 => QuotaExceeded,
            -127 => Throttled,
            other => Unknown(other),
        }
    }
}

/// What a client's attempts to connect met that waiting alone does not mend: someone must
/// change a certificate, a key or a principal. Told by
/// [`Client::connect_failure`](crate::Client::connect_failure), by the
/// [`Error::ConnectionLoss`] and [`Error::Timeout`] that the client's calls return when they
/// find no connection, and by the `Lost` [state event](crate::StateEvent): the latest such
/// failure of a server, until that server fails otherwise (down, unreachable: the failure is
/// no longer what stops the client there), leaves the server list, or a connection is made.
/// The client keeps trying (another server, or the same one once mended, may let it in); the
/// log has the whole message, with the server and the names.
///
/// A network fault or a server that is down is no such failure (`None` where one is carried).
/// Recipes that turn a lost connection into an answer of their own (a wait that returns
/// `false`, an [`Error::OutcomeUnknown`]) do not carry it; `Client::connect_failure` tells it
/// then.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConnectFailure {
    /// The server's certificate does not name the host dialled (or the name given by
    /// `TlsOptions::server_name`).
    CertificateNameMismatch,
    /// The server's certificate has expired.
    CertificateExpired,
    /// The server's certificate is not valid yet (or the clocks disagree).
    CertificateNotYetValid,
    /// The server's certificate was issued by no authority this client trusts.
    CertificateUnknownIssuer,
    /// The server's certificate is revoked by one of the client's CRLs.
    CertificateRevoked,
    /// The server's certificate does not verify for another reason (a bad signature, a use
    /// it is not issued for, an encoding the client cannot read, a revocation status the
    /// client's CRLs do not give).
    CertificateInvalid,
    /// The server ended the TLS handshake with an alert: most often it refused this client's
    /// certificate (none given, expired, or from an authority it does not trust), or shares
    /// no protocol version or cipher with the client.
    TlsRefusedByServer,
    /// The client's own TLS files (certificate, key, trust store, CRLs) could not be read or
    /// used.
    TlsFiles,
    /// Any other TLS failure: a server that closed the connection during the handshake (a
    /// port that does not speak TLS, a server that wants a client certificate and says it no
    /// other way, but also a server at its connection limit or a proxy whose server is down),
    /// a name given to `TlsOptions::server_name` that cannot name a certificate, a protocol or
    /// cipher the client found the server does not share.
    Tls,
    /// Kerberos failed with the server: the KDC knows no principal for it, or it did not
    /// prove it holds that principal's key, or it refused this client's ticket.
    Kerberos,
}

impl fmt::Display for ConnectFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConnectFailure::CertificateNameMismatch => {
                "the server's certificate does not name the host dialled"
            }
            ConnectFailure::CertificateExpired => "the server's certificate has expired",
            ConnectFailure::CertificateNotYetValid => "the server's certificate is not valid yet",
            ConnectFailure::CertificateUnknownIssuer => {
                "the server's certificate is issued by no authority this client trusts"
            }
            ConnectFailure::CertificateRevoked => "the server's certificate is revoked",
            ConnectFailure::CertificateInvalid => "the server's certificate does not verify",
            ConnectFailure::TlsRefusedByServer => {
                "the server refused the TLS handshake (this client's certificate?)"
            }
            ConnectFailure::TlsFiles => "this client's TLS files cannot be read or used",
            ConnectFailure::Tls => "the TLS handshake failed",
            ConnectFailure::Kerberos => "Kerberos failed with the server",
        })
    }
}

/// Everything that can go wrong in this crate.
///
/// Messages say what happened and, where there is one, what to do about it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// The server answered a request with an error code (`NoNode`, `NodeExists`, `BadVersion`,
    /// `NoAuth`, ...). `path` is the path the request named, as the caller gave it.
    ZooKeeper {
        /// The server's error code.
        code: ZkCode,
        /// The path of the request.
        path: String,
    },
    /// The connection to the server broke while a request was outstanding, or no connection
    /// came back within the connection timeout. The request may or may not have been applied.
    ConnectionLoss {
        /// What the client's attempts to connect again met that waiting does not mend (a
        /// server certificate that stopped verifying, say), if it knows; `None` for a network
        /// fault or a server that is down. The same as
        /// [`Client::connect_failure`](crate::Client::connect_failure) when the error was made.
        cause: Option<ConnectFailure>,
    },
    /// A deadline passed before the operation completed.
    Timeout {
        /// What was being waited for.
        what: String,
        /// How long the caller allowed.
        after: Duration,
        /// For a wait for a connection: what the client's attempts met that waiting does not
        /// mend, as for [`Error::ConnectionLoss`]; `None` otherwise.
        cause: Option<ConnectFailure>,
    },
    /// The session that the operation (or a lock) belonged to is gone: expired on the server or
    /// declared lost by the client. Ephemeral nodes of that session are (or will shortly be) gone.
    SessionLost {
        /// The session that was lost.
        session_id: SessionId,
    },
    /// The hold a call builds on is over because its lock node is gone (its session expired,
    /// or someone deleted it): a write made [while held](crate::lock::WhileHeld) was refused
    /// by the server, or a re-entry or downgrade found the node deleted. Nothing was written
    /// or taken.
    NotHeld {
        /// The lock node the call depended on.
        node: String,
    },
    /// A path that ZooKeeper would reject, caught before anything was sent.
    InvalidPath {
        /// The path as given.
        path: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// An argument that cannot work (a connect string, a timeout, a size), caught before
    /// anything was sent.
    BadArguments(String),
    /// A request larger than the servers take (`jute.maxbuffer`, see
    /// [`ClientBuilder::max_request_size`](crate::ClientBuilder::max_request_size)); nothing was
    /// sent, and the connection is untouched.
    RequestTooLarge {
        /// The request's size in bytes.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// TLS could not be set up: a certificate or key file that cannot be read or parsed, or
    /// (from `connect`) no server whose certificate verified within the connection timeout.
    /// The message names files by path only, never their contents.
    Tls(String),
    /// Kerberos (SASL GSSAPI, feature `gssapi`) could not authenticate this client, and
    /// retrying would not mend it: its own credentials (no ticket, an expired one, a keytab
    /// that cannot be read or holds no key for the principal, a principal the KDC does not
    /// know), the server's principal (unknown to the KDC), or a server that did not prove it
    /// holds that principal's key. The client stops. The message is GSSAPI's, with the
    /// principals and files it concerns; it never holds a key or ticket.
    Kerberos(String),
    /// The client (or the recipe) has been closed; nothing more can be done with it.
    Closed,
    /// A recipe was used in a way its protocol forbids (for example releasing a lock from a
    /// thread that does not hold it).
    IllegalState(String),
    /// The server sent an answer this client cannot read.
    Protocol(String),
    /// A write went out and its answer was lost (the connection broke, the session ended or
    /// the deadline passed first): it may or may not have been applied, and it was not sent
    /// again. Returned by recipes whose writes must not be applied twice (a counter's
    /// increment, a compare-and-set), so that a caller can tell it from a failure before any
    /// write went out (`ConnectionLoss`, `Timeout`, ... then mean nothing was written).
    OutcomeUnknown {
        /// The node written.
        path: String,
    },
    /// A node's data is not in the format the recipe reads and writes there (a count shorter
    /// than its 4 bytes, a long shorter than its 8): someone else wrote it. Nothing was
    /// written.
    Malformed {
        /// The node.
        path: String,
        /// What was expected and found.
        what: String,
    },
    /// A thread holding the read lock asked for the write lock of the same read/write lock. It
    /// would wait for its own read lock for ever, so it is refused at once; nothing was created.
    LockUpgrade {
        /// The read/write lock's path.
        path: String,
    },
}

impl Error {
    /// True when this is the server error `code`.
    pub fn is_code(&self, code: ZkCode) -> bool {
        matches!(self, Error::ZooKeeper { code: c, .. } if *c == code)
    }

    /// True for `NoNode`.
    pub fn is_no_node(&self) -> bool {
        self.is_code(ZkCode::NoNode)
    }

    /// True for `NodeExists`.
    pub fn is_node_exists(&self) -> bool {
        self.is_code(ZkCode::NodeExists)
    }

    /// Maps a server error code onto ours; `path` is the caller's path.
    pub(crate) fn from_zk(code: ZkCode, path: &str) -> Error {
        match code {
            ZkCode::ConnectionLoss | ZkCode::OperationTimeout => Error::connection_loss(),
            code => Error::ZooKeeper {
                code,
                path: path.to_owned(),
            },
        }
    }

    /// Maps a code from the wire onto ours; `path` is the caller's path.
    pub(crate) fn from_wire(code: i32, path: &str) -> Error {
        Error::from_zk(ZkCode::from_code(code), path)
    }

    /// The server refused the client's credentials.
    pub(crate) fn auth_failed() -> Error {
        Error::ZooKeeper {
            code: ZkCode::AuthFailed,
            path: String::new(),
        }
    }

    /// A write's error, as the caller must take it: one that may have been applied (its
    /// answer lost: the connection broke, the deadline passed or the session ended first) is
    /// [`Error::OutcomeUnknown`] for `path`.
    pub(crate) fn unknown_if_lost(self, path: &str) -> Error {
        match self {
            Error::ConnectionLoss { .. } | Error::Timeout { .. } | Error::SessionLost { .. } => {
                Error::OutcomeUnknown { path: path.into() }
            }
            e => e,
        }
    }

    /// True if the request went out and its answer was lost (the connection broke, or the
    /// deadline passed, while it was on its way): it may still be applied, even later.
    pub(crate) fn answer_lost(&self) -> bool {
        matches!(self, Error::ConnectionLoss { .. } | Error::Timeout { .. })
    }

    pub(crate) fn timeout(what: impl Into<String>, after: Duration) -> Error {
        Error::Timeout {
            what: what.into(),
            after,
            cause: None,
        }
    }

    /// A connection loss whose cause is not known here (the client's calls add it).
    pub(crate) fn connection_loss() -> Error {
        Error::ConnectionLoss { cause: None }
    }

    /// True for [`Error::ConnectionLoss`], whatever its cause: the error a caller may retry
    /// once a connection is back.
    pub fn is_connection_loss(&self) -> bool {
        matches!(self, Error::ConnectionLoss { .. })
    }

    /// The cause a [`ConnectionLoss`](Error::ConnectionLoss) or a
    /// [`Timeout`](Error::Timeout) carries: what the client's attempts to connect met that
    /// waiting does not mend.
    pub fn connect_failure(&self) -> Option<ConnectFailure> {
        match self {
            Error::ConnectionLoss { cause } | Error::Timeout { cause, .. } => *cause,
            _ => None,
        }
    }

    /// This error with `cause` given to a `ConnectionLoss` or `Timeout` that has none.
    pub(crate) fn caused_by(self, failure: Option<ConnectFailure>) -> Error {
        match self {
            Error::ConnectionLoss { cause: None } => Error::ConnectionLoss { cause: failure },
            Error::Timeout {
                what,
                after,
                cause: None,
            } => Error::Timeout {
                what,
                after,
                cause: failure,
            },
            e => e,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::ZooKeeper { code, path } => match code {
                ZkCode::NoNode => write!(f, "no node at {path}"),
                ZkCode::NodeExists => write!(f, "a node already exists at {path}"),
                ZkCode::NotEmpty => write!(f, "{path} has children; delete them first"),
                ZkCode::BadVersion => write!(
                    f,
                    "{path} changed since it was read (version mismatch); read it again"
                ),
                ZkCode::NoAuth => write!(
                    f,
                    "not authorised for {path}: add credentials with the right ACL"
                ),
                ZkCode::SessionExpired => write!(f, "the session expired (at {path})"),
                ZkCode::AuthFailed => write!(
                    f,
                    "the server refused the credentials: check the scheme and credentials given \
                     to ClientBuilder::authorization"
                ),
                code => write!(f, "ZooKeeper error {code:?} at {path}"),
            },
            Error::ConnectionLoss { cause: None } => write!(
                f,
                "connection to ZooKeeper lost; the request may or may not have been applied \
                 (check the servers and the connect string)"
            ),
            Error::ConnectionLoss { cause: Some(cause) } => write!(
                f,
                "connection to ZooKeeper lost; the request may or may not have been applied; \
                 the client's attempts to connect again fail: {cause} (the log says more)"
            ),
            Error::Timeout { what, after, cause } => {
                write!(f, "timed out after {after:?} waiting for {what}")?;
                match cause {
                    Some(cause) => write!(
                        f,
                        "; the client's attempts to connect fail: {cause} (the log says more)"
                    ),
                    None => Ok(()),
                }
            }
            Error::SessionLost { session_id } => write!(
                f,
                "ZooKeeper session {session_id} is lost; its ephemeral nodes and locks are gone"
            ),
            Error::NotHeld { node } => write!(
                f,
                "the lock node {node} is gone: the hold is over, and nothing was done on it"
            ),
            Error::InvalidPath { path, reason } => write!(f, "invalid path {path:?}: {reason}"),
            Error::BadArguments(msg) => write!(f, "bad arguments: {msg}"),
            Error::RequestTooLarge { size, limit } => write!(
                f,
                "a request of {size} bytes is over the servers' limit of {limit} bytes \
                 (jute.maxbuffer); nothing was sent"
            ),
            Error::Protocol(msg) => write!(f, "ZooKeeper protocol error: {msg}"),
            Error::Tls(why) => write!(f, "TLS: {why}"),
            Error::Kerberos(why) => write!(f, "Kerberos: {why}"),
            Error::Closed => write!(f, "the client or recipe has been closed"),
            Error::IllegalState(msg) => write!(f, "{msg}"),
            Error::OutcomeUnknown { path } => write!(
                f,
                "the answer to a write of {path} was lost: it may or may not have been applied \
                 (it was not sent again)"
            ),
            Error::Malformed { path, what } => write!(
                f,
                "the data at {path} is not what this recipe keeps there: {what}"
            ),
            Error::LockUpgrade { path } => write!(
                f,
                "this thread holds the read lock of {path} and cannot take its write lock (it \
                 would wait for itself): release the read lock first"
            ),
        }
    }
}

impl std::error::Error for Error {}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_loss_codes_are_folded_into_one_variant() {
        assert_eq!(
            Error::from_zk(ZkCode::ConnectionLoss, "/a"),
            Error::ConnectionLoss { cause: None }
        );
        let e = Error::from_zk(ZkCode::NoNode, "/a/b");
        assert!(e.is_no_node());
        assert_eq!(e.to_string(), "no node at /a/b");
    }
}
