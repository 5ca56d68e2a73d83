//! Barriers: processes that wait for each other, with Apache Curator's node layout, so a
//! Curator process and ours can meet at one barrier.
//!
//! - [`DistributedBarrier`]: a gate held shut by one node; every waiter passes once it is
//!   removed.
//! - [`DistributedDoubleBarrier`]: a party of processes that start a phase together (no one
//!   passes [`enter`](DistributedDoubleBarrier::enter) before enough have entered) and end it
//!   together (no one passes [`leave`](DistributedDoubleBarrier::leave) before every one has
//!   left).
//!
//! Every wait has a deadline. A barrier's state lives on the server, so a broken connection
//! or a lost session does not end a wait: it looks again once the client is back.

mod barrier;
mod double;

/// How long a barrier waits for the server to delete a member's node (or the `ready` node)
/// once the caller's deadline has passed; what is not done by then the client finishes in the
/// background, or the session's end does.
const CLEAN_UP_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

pub use self::barrier::DistributedBarrier;
pub use self::double::{DistributedDoubleBarrier, READY_NODE};
