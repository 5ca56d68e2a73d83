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
// On docs.rs, every feature-gated item carries its feature's badge.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod acl;
pub mod atomic;
pub mod barriers;
pub mod cache;
pub mod client;
pub mod connect_string;
pub mod error;
pub mod leader;
pub mod lock;
pub mod nodes;
pub mod partition;
pub mod paths;
pub mod queue;
pub mod retry;
mod session_id;
pub mod shared;
#[cfg(feature = "testing")]
pub mod testing;
mod trace;

#[cfg(feature = "gssapi")]
pub use client::GssapiOptions;
#[cfg(feature = "tls")]
pub use client::TlsOptions;
pub use client::{
    AddWatchMode, Client, ClientBuilder, ClientInfo, ClientMetrics, ConnectionState, CreateMode,
    EnsembleConfig, EnsembleMember, Op, OpResult, SessionId, Stat, StateEvent, Subscription,
    WatchEvent, WatchKind,
};
pub use error::{ConnectFailure, Error, Result, ZkCode};
pub use leader::{
    LeaderLatch, LeaderSelector, LeadershipContext, LeadershipEvent, LeadershipPolicy, TermOutcome,
};
pub use lock::{
    FencingGate, InterProcessMutex, InterProcessMutexGuard, InterProcessReadWriteLock,
    InterProcessSemaphoreMutex, InterProcessSemaphoreV2, Lease, LockOptions, RunError,
    SemaphoreLease, WhileHeld,
};
pub use retry::RetryPolicy;

/// The channels of our public API, re-exported: watches deliver into a
/// [`Sender`](crossbeam_channel::Sender) you pass, and a lease's or a term's
/// [`lost`](crate::Lease::lost) signal, a selector's outcomes and a [`Subscription`] are
/// [`Receiver`](crossbeam_channel::Receiver)s, so that a thread can wait on several at once
/// with `crossbeam_channel::select!`. Use this re-export rather than a `crossbeam-channel`
/// dependency of your own, and the types always match: `crossbeam-channel` is a public
/// dependency of this crate, and a move to a release of it that breaks its API is a breaking
/// release of ours.
pub use crossbeam_channel;

/// The README's code blocks, compiled as doc tests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// What the type system promises about threads, checked at compile time: a change that took
/// one away fails the build here instead of a user's.
///
/// The client and every recipe are `Send + Sync` (shared by threads, behind an `Arc` or a
/// `&`), and so are the leases (a hold can move to another thread and be checked from many):
///
/// The reentrant mutex's guard is not `Send`: reentrancy is per thread, and a guard released
/// on another thread would release a count its owner still relies on.
///
/// ```compile_fail
/// fn send<T: Send>() {}
/// send::<zk_recipes::InterProcessMutexGuard<'static>>();
/// ```
///
/// Nor is it `Sync`:
///
/// ```compile_fail
/// fn sync<T: Sync>() {}
/// sync::<zk_recipes::InterProcessMutexGuard<'static>>();
/// ```
#[allow(dead_code)]
mod thread_promises {
    use super::*;

    const fn send_sync<T: Send + Sync>() {}

    const _: () = {
        send_sync::<Client>();
        send_sync::<ClientBuilder>();
        send_sync::<Subscription>();
        send_sync::<InterProcessMutex>();
        send_sync::<InterProcessSemaphoreMutex>();
        send_sync::<InterProcessSemaphoreV2>();
        send_sync::<InterProcessReadWriteLock>();
        send_sync::<LeaderLatch>();
        send_sync::<LeaderSelector>();
        send_sync::<LeadershipContext>();
        send_sync::<FencingGate>();
        send_sync::<Lease>();
        send_sync::<SemaphoreLease>();
        send_sync::<LockOptions>();
        send_sync::<RetryPolicy>();
        send_sync::<Error>();
    };
}
