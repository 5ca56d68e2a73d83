//! Work partitioning: workers share a set of items (partitions, shards, file ranges), each item
//! owned by at most one worker at a time under a lease of its own.
//!
//! - [`Partitioner`]: a worker's share, kept as workers join and leave (kazoo's
//!   `SetPartitioner`, with a lock and a lease per item, and rendezvous hashing so that a
//!   join or a leave moves only the items it must).

mod assign;
mod partitioner;

pub use self::assign::owner_of;
pub use self::partitioner::{OwnedItem, Partitioner, CLOSE_WAIT};
