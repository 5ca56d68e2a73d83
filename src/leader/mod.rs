//! Leader election for batch clusters: exactly one of many processes does the scheduled work,
//! and another takes over when it dies.
//!
//! - [`LeaderLatch`]: "am I the leader now?", for processes that lead until they leave.
//! - [`LeaderSelector`]: runs your work while leading; leadership lasts until the work returns,
//!   and the work is told to stop when the session is in doubt.

mod latch;
mod selector;

pub use self::latch::LeaderLatch;
pub use self::selector::{LeaderSelector, LeadershipContext, TermOutcome};

use crate::lock::core::LockCore;
use crate::lock::names::sort_contenders;
use crate::{paths, Result};

/// The longest [`LeaderLatch::close`] and [`LeaderSelector::close`] wait for the server to
/// delete their node (a selector's, after its work returned); what is not done by then the
/// client finishes in the background, or the session's end does.
pub const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// When leadership ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeadershipPolicy {
    /// On SUSPENDED: while the connection is broken nobody can know what the server decides,
    /// so leadership is dropped at once (and taken up again after RECONNECTED if still first).
    Standard,
    /// Only on LOST, and while the session's lease is certainly valid. Rides out short
    /// connection breaks (a server restart) without changing leader.
    Session,
}

/// A change of leadership, as told to a latch's listeners.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeadershipEvent {
    /// This participant now leads.
    Gained,
    /// This participant no longer leads.
    Lost,
}

/// Someone in line for leadership.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Participant {
    /// The id it gave (its node's data).
    pub id: String,
    /// Its node's path.
    pub node: String,
    /// True for the first in line.
    pub is_leader: bool,
}

/// Everyone in line under `core`'s path, first (the leader) first.
pub(crate) fn participants(core: &LockCore) -> Result<Vec<Participant>> {
    let mut out = Vec::new();
    let line = core.line(None, None)?;
    for c in sort_contenders(line.iter()) {
        let node = paths::join(&core.path, c.name);
        match core.client.data(&node) {
            Ok((data, _)) => out.push(Participant {
                id: String::from_utf8_lossy(&data).into_owned(),
                is_leader: out.is_empty(),
                node,
            }),
            Err(e) if e.is_no_node() => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}
