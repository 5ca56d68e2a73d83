//! # zk-recipes
//!
//! Curator-style ZooKeeper recipes with a blocking API, for thread-based Rust services and
//! batch clusters that need one holder at a time across machines.
//!
//! The crate is layered like Apache Curator:
//!
//! 1. [`Client`]: the framework client. It speaks the ZooKeeper protocol itself (pipelined,
//!    two threads per client, no listening socket), waits until a session really exists,
//!    reports CONNECTED / SUSPENDED / RECONNECTED / LOST with the session id, restores watches
//!    after a reconnect, bounds every call, retries what is safe to retry, and tells until when
//!    the session is certainly valid.
//! 2. The lock core, shared by every lock recipe: protected nodes, predecessor-only watches, a
//!    wait that cannot miss its wake-up, leases and fencing tokens.
//! 3. Thin recipes on top, all at the crate root: [`InterProcessMutex`],
//!    [`InterProcessReadWriteLock`], [`InterProcessSemaphoreV2`], [`InterProcessSemaphoreMutex`],
//!    and leader election with [`LeaderLatch`] and [`LeaderSelector`]. Every guard dereferences
//!    to a [`Lease`]; release goes only through guards.
//!
//! The `zk-lock` command (feature `cli`) runs a command under a lock, and the `testing`
//! feature brings the real-ZooKeeper harness (and the herd lock the benches compare with).
//!
//! With the `testing` feature, the `testing` module runs the real Apache ZooKeeper server
//! (single or an ensemble) and a fault proxy, for tests and examples.
//!
//! See the [`client`] module for the layering, the client's state machine and how calls are
//! bounded.
#![warn(missing_docs)]

pub mod acl;
pub mod client;
pub mod connect_string;
pub mod error;
pub mod leader;
pub mod lock;
pub mod paths;
pub mod retry;
mod session_id;
#[cfg(feature = "testing")]
pub mod testing;

#[cfg(feature = "tls")]
pub use client::TlsOptions;
pub use client::{
    AddWatchMode, Client, ClientBuilder, ClientInfo, ClientMetrics, ConnectionState, CreateMode,
    EnsembleConfig, EnsembleMember, Op, OpResult, SessionId, Stat, StateEvent, Subscription,
    WatchEvent, WatchKind,
};
pub use error::{Error, Result, ZkCode};
pub use leader::{
    LeaderLatch, LeaderSelector, LeadershipContext, LeadershipEvent, LeadershipPolicy, TermOutcome,
};
pub use lock::{
    FencingGate, InterProcessMutex, InterProcessMutexGuard, InterProcessReadWriteLock,
    InterProcessSemaphoreMutex, InterProcessSemaphoreV2, Lease, LockOptions, RunError,
    SemaphoreLease, WhileHeld,
};
pub use retry::RetryPolicy;

/// The README's code blocks, compiled as doc tests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
