//! The one error type of the crate.

use std::fmt;
use std::time::Duration;

pub use zookeeper::ZkError as ZkCode;

use crate::SessionId;

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
    ConnectionLoss,
    /// A deadline passed before the operation completed.
    Timeout {
        /// What was being waited for.
        what: String,
        /// How long the caller allowed.
        after: Duration,
    },
    /// The session that the operation (or a lock) belonged to is gone: expired on the server or
    /// declared lost by the client. Ephemeral nodes of that session are (or will shortly be) gone.
    SessionLost {
        /// The session that was lost.
        session_id: SessionId,
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
    /// The client (or the recipe) has been closed; nothing more can be done with it.
    Closed,
    /// A recipe was used in a way its protocol forbids (for example releasing a lock from a
    /// thread that does not hold it).
    IllegalState(String),
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

    /// Maps a transport error onto ours; `path` is the caller's path.
    pub(crate) fn from_zk(code: ZkCode, path: &str) -> Error {
        match code {
            ZkCode::ConnectionLoss | ZkCode::OperationTimeout => Error::ConnectionLoss,
            code => Error::ZooKeeper {
                code,
                path: path.to_owned(),
            },
        }
    }

    pub(crate) fn timeout(what: impl Into<String>, after: Duration) -> Error {
        Error::Timeout {
            what: what.into(),
            after,
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
            Error::ConnectionLoss => write!(
                f,
                "connection to ZooKeeper lost; the request may or may not have been applied \
                 (check the servers and the connect string)"
            ),
            Error::Timeout { what, after } => {
                write!(f, "timed out after {after:?} waiting for {what}")
            }
            Error::SessionLost { session_id } => write!(
                f,
                "ZooKeeper session {session_id} is lost; its ephemeral nodes and locks are gone"
            ),
            Error::InvalidPath { path, reason } => write!(f, "invalid path {path:?}: {reason}"),
            Error::BadArguments(msg) => write!(f, "bad arguments: {msg}"),
            Error::Closed => write!(f, "the client or recipe has been closed"),
            Error::IllegalState(msg) => write!(f, "{msg}"),
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
            Error::ConnectionLoss
        );
        let e = Error::from_zk(ZkCode::NoNode, "/a/b");
        assert!(e.is_no_node());
        assert_eq!(e.to_string(), "no node at /a/b");
    }
}
