//! Counters changed by compare-and-set (Curator's `atomic` package):
//! [`DistributedAtomicLong`], with Curator's [`PromotedToLock`] fallback. See
//! `recipes/atomic.md` for the protocol, what it promises and why.

mod long;

pub use self::long::{AtomicStats, AtomicValue, DistributedAtomicLong, PromotedToLock};
