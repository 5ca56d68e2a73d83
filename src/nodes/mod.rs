//! Nodes a recipe keeps present: [`PersistentNode`] (Curator's `PersistentNode`, and its TTL
//! form), and group membership on it, [`GroupMember`].

mod group;
mod persistent;

/// The longest [`PersistentNode::close`] waits for the server to delete the node; what is not
/// done by then the client finishes in the background, or the session's end does.
pub const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

pub use self::group::GroupMember;
pub use self::persistent::{NodeEvent, NodeMode, PersistentNode, TTL_TOUCH_NODE};
