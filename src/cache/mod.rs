//! Caches of the tree (Curator's `cache` package): [`CuratorCache`], a node and its subtree
//! (or the node alone) kept current in memory from a persistent recursive watch. See
//! `recipes/cache.md` for the protocol, what it promises and why.

mod tree;

pub use self::tree::{CacheEvent, CacheMemory, CacheOptions, CachedNode, CuratorCache};
