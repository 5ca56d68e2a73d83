//! Shared state on one node (Curator's `shared` package): [`SharedValue`], bytes every process
//! reads from memory and sets with a compare-and-set, and [`SharedCount`], an `i32` on it.
//! See `recipes/shared.md` for the protocol, what it promises and why.

mod count;
mod value;

pub use self::count::SharedCount;
pub use self::value::{SharedValue, VersionedValue};
