//! The framework client: a ZooKeeper session you can trust, with bounded calls and retries.
//!
//! [`Client`] speaks the ZooKeeper protocol itself; the rest of this page is
//! `recipes/README.md`.
//!
#![doc = include_str!("../../recipes/README.md")]

mod api;

/// Bytes that are a secret (a session password, credentials): wiped when dropped.
pub(crate) type Secret = zeroize::Zeroizing<Vec<u8>>;
mod builder;
pub(crate) mod clock;
mod config;
mod conn;
pub(crate) mod dial;
mod ensemble;
mod events;
#[cfg(feature = "gssapi")]
mod gssapi;
mod janitor;
pub(crate) mod link;
mod proto;
mod request;
#[cfg(feature = "sasl")]
mod sasl;
pub(crate) mod session;
mod slot;
mod state;
#[cfg(feature = "tls")]
mod tls;
pub(crate) mod token;
mod touches;
mod types;
mod watches;

pub(crate) use self::api::Prefetch;
pub use self::api::{Client, ClientMetrics, MAX_DATA_LEN};
pub use self::builder::ClientBuilder;
pub use self::ensemble::{EnsembleConfig, EnsembleMember, CONFIG_NODE};
#[cfg(feature = "gssapi")]
pub use self::gssapi::GssapiOptions;
pub(crate) use self::proto::Names;
pub(crate) use self::state::Parked;
pub use self::state::{ConnectionState, StateEvent, Subscription};
#[cfg(feature = "tls")]
pub use self::tls::TlsOptions;
pub use self::types::{
    AddWatchMode, ClientInfo, CreateMode, Op, OpResult, Stat, WatchEvent, WatchKind,
};
pub use crate::session_id::SessionId;
