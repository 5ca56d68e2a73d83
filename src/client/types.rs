//! The plain data of the client's API: node stats, create modes, watch events and the
//! operations of a pipeline or a transaction. Our own types, so no transport's types leak into
//! the public API.

use std::time::Duration;

/// A node's metadata, as the server keeps it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Stat {
    /// The zxid of the transaction that created the node. Unique per node ever made, and
    /// growing: a fencing token.
    pub czxid: i64,
    /// The zxid of the transaction that last changed the node's data.
    pub mzxid: i64,
    /// Creation time, milliseconds since the epoch (server clock).
    pub ctime: i64,
    /// Last modification time, milliseconds since the epoch (server clock).
    pub mtime: i64,
    /// Number of changes to the data.
    pub version: i32,
    /// Number of changes to the children.
    pub cversion: i32,
    /// Number of changes to the ACL.
    pub aversion: i32,
    /// The owning session of an ephemeral node; 0 for a persistent node, `i64::MIN` for a
    /// container.
    pub ephemeral_owner: i64,
    /// Length of the data.
    pub data_length: i32,
    /// Number of children.
    pub num_children: i32,
    /// The zxid of the transaction that last added or removed a child.
    pub pzxid: i64,
}

/// How a node is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CreateMode {
    /// Stays until deleted.
    Persistent,
    /// Deleted when the session that created it ends.
    Ephemeral,
    /// Persistent, with a 10-digit counter appended by the server.
    PersistentSequential,
    /// Ephemeral, with a 10-digit counter appended by the server.
    EphemeralSequential,
    /// A container (ZooKeeper ≥ 3.5.3): the server deletes it some time after its last child
    /// is gone. Good for lock paths, which then clean up after themselves.
    Container,
    /// Persistent, deleted by the server once it has had no children and no change for `ttl`.
    /// Needs a server started with `zookeeper.extendedTypesEnabled=true` (otherwise the server
    /// answers `Unimplemented`).
    PersistentWithTtl(Duration),
    /// [`PersistentWithTtl`](Self::PersistentWithTtl) with a sequence counter.
    PersistentSequentialWithTtl(Duration),
}

impl CreateMode {
    /// True when the server appends a sequence counter.
    pub fn is_sequential(self) -> bool {
        matches!(
            self,
            CreateMode::PersistentSequential
                | CreateMode::EphemeralSequential
                | CreateMode::PersistentSequentialWithTtl(_)
        )
    }

    /// True when the node goes with the session.
    pub fn is_ephemeral(self) -> bool {
        matches!(
            self,
            CreateMode::Ephemeral | CreateMode::EphemeralSequential
        )
    }

    /// The `CreateMode` flag the protocol carries.
    pub(crate) fn flags(self) -> i32 {
        match self {
            CreateMode::Persistent => 0,
            CreateMode::Ephemeral => 1,
            CreateMode::PersistentSequential => 2,
            CreateMode::EphemeralSequential => 3,
            CreateMode::Container => 4,
            CreateMode::PersistentWithTtl(_) => 5,
            CreateMode::PersistentSequentialWithTtl(_) => 6,
        }
    }

    /// The TTL in milliseconds, for the TTL modes.
    pub(crate) fn ttl_ms(self) -> Option<i64> {
        match self {
            CreateMode::PersistentWithTtl(t) | CreateMode::PersistentSequentialWithTtl(t) => {
                Some(i64::try_from(t.as_millis()).unwrap_or(i64::MAX))
            }
            _ => None,
        }
    }
}

/// What a watch reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WatchKind {
    /// The node was created.
    Created,
    /// The node was deleted.
    Deleted,
    /// The node's data changed.
    DataChanged,
    /// A child was added or removed.
    ChildrenChanged,
    /// Anything else the server may send (a watch removed).
    Other,
    /// The watch will never fire: its session is gone (expired, or declared lost by the
    /// client), and the server dropped its watches with it. Set it again on the new session.
    SessionLost,
    /// The watch will never fire: the client was closed.
    Closed,
}

/// A fired watch. One-shot watches fire once; persistent ones (see
/// [`Client::add_watch`](crate::Client::add_watch)) until removed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WatchEvent {
    /// What happened.
    pub kind: WatchKind,
    /// The path it happened at, as the caller names it (chroot and namespace removed).
    pub path: String,
}

/// The kind of a persistent watch set with [`Client::add_watch`](crate::Client::add_watch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AddWatchMode {
    /// Data changes, creation and deletion of the node, and changes to its children list;
    /// stays set after it fires.
    Persistent,
    /// The same for the node and every node below it (no children-changed events).
    PersistentRecursive,
}

/// One operation of a [`Client::multi`](crate::Client::multi) transaction or a
/// [`Client::pipeline`](crate::Client::pipeline).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op {
    /// Create a node (with the client's default ACL).
    Create {
        /// Where.
        path: String,
        /// Its data.
        data: Vec<u8>,
        /// How.
        mode: CreateMode,
    },
    /// Delete a node; with a version, only at that version.
    Delete {
        /// Which.
        path: String,
        /// The expected version, or `None` for any.
        version: Option<i32>,
    },
    /// Set a node's data; with a version, only at that version.
    SetData {
        /// Which.
        path: String,
        /// The new data.
        data: Vec<u8>,
        /// The expected version, or `None` for any.
        version: Option<i32>,
    },
    /// Fails the transaction unless the node exists (at `version`, if given). In a pipeline,
    /// needs a server that accepts a lone check.
    Check {
        /// Which.
        path: String,
        /// The expected version, or `None` for any.
        version: Option<i32>,
    },
    /// Read the node's stat (pipeline only).
    Exists {
        /// Which.
        path: String,
    },
    /// Read the node's data (pipeline only).
    GetData {
        /// Which.
        path: String,
    },
    /// List the node's children (pipeline only).
    GetChildren {
        /// Which.
        path: String,
    },
}

impl Op {
    /// The path the operation names.
    pub fn path(&self) -> &str {
        match self {
            Op::Create { path, .. }
            | Op::Delete { path, .. }
            | Op::SetData { path, .. }
            | Op::Check { path, .. }
            | Op::Exists { path }
            | Op::GetData { path }
            | Op::GetChildren { path } => path,
        }
    }

    /// True for the operations a transaction may hold.
    pub(crate) fn is_write(&self) -> bool {
        matches!(
            self,
            Op::Create { .. } | Op::Delete { .. } | Op::SetData { .. } | Op::Check { .. }
        )
    }
}

/// The result of one [`Op`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpResult {
    /// The node was created at this path, with this stat.
    Created {
        /// The path (with the counter, for sequential modes).
        path: String,
        /// The new node's stat. `None` only in a [`Client::multi`](crate::Client::multi)'s
        /// results from a server before 3.7.2, 3.8.2 or 3.9.0 (ZOOKEEPER-4026), which answers
        /// a create in a transaction with its path alone.
        stat: Option<Stat>,
    },
    /// The node was deleted.
    Deleted,
    /// The data was set; the node's new stat.
    DataSet(Stat),
    /// The check passed.
    Checked,
    /// The node's stat, or `None` if there is no node.
    Exists(Option<Stat>),
    /// The node's data and stat.
    Data(Vec<u8>, Stat),
    /// The node's children, unsorted.
    Children(Vec<String>),
}

/// An identity the server has authenticated this connection as (see
/// [`Client::who_am_i`](crate::Client::who_am_i)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientInfo {
    /// The auth scheme (`ip`, `digest`, `sasl`, ...).
    pub scheme: String,
    /// The user within it.
    pub user: String,
}
