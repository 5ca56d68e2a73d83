//! A gate held shut by one node (Curator's `DistributedBarrier`).

use std::time::{Duration, Instant};

use crate::lock::core::LockCore;
use crate::lock::watching::Watching;
use crate::lock::MIN_ATTEMPT;
use crate::{Client, CreateMode, Error, LockOptions, Result};

/// A gate held shut by one persistent node at its path: while the node exists, waiters wait;
/// once it is removed, every waiter passes. Apache Curator's `DistributedBarrier`, same node.
///
/// A coordinator sets the barrier before the work begins and removes it when the work may go
/// on; workers wait on it, each with a deadline.
///
/// ```no_run
/// # fn main() -> zk_recipes::Result<()> {
/// use std::time::Duration;
/// use zk_recipes::barriers::DistributedBarrier;
/// use zk_recipes::Client;
///
/// let client = Client::builder("127.0.0.1:2181").connect()?;
/// let barrier = DistributedBarrier::new(&client, "/jobs/nightly/loaded")?;
/// // The coordinator:
/// barrier.set_barrier()?;
/// // ... later, once the data is loaded:
/// barrier.remove_barrier()?;
/// // A worker:
/// if barrier.wait_on_barrier(Duration::from_secs(60))? {
///     // The gate is open.
/// }
/// # Ok(())
/// # }
/// ```
pub struct DistributedBarrier {
    core: LockCore,
}

impl std::fmt::Debug for DistributedBarrier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DistributedBarrier")
            .field("path", &self.core.path)
            .finish()
    }
}

impl DistributedBarrier {
    /// A barrier at `path` (the node that holds it shut).
    pub fn new(client: &Client, path: &str) -> Result<DistributedBarrier> {
        Ok(DistributedBarrier {
            core: LockCore::new(client, path, LockOptions::new())?,
        })
    }

    /// The barrier's node.
    pub fn path(&self) -> &str {
        &self.core.path
    }

    /// Shuts the gate: creates the node (its missing parents as containers). Already set is
    /// no error.
    pub fn set_barrier(&self) -> Result<()> {
        let client = &self.core.client;
        match client.create_under_containers(&self.core.path, &[], CreateMode::Persistent) {
            Err(e) if !e.is_node_exists() => Err(e),
            _ => Ok(()),
        }
    }

    /// Opens the gate: deletes the node. Not set is no error.
    pub fn remove_barrier(&self) -> Result<()> {
        self.core.client.delete(&self.core.path)
    }

    /// True while the gate is shut.
    pub fn is_set(&self) -> Result<bool> {
        Ok(self.core.client.exists(&self.core.path)?.is_some())
    }

    /// Waits until the gate is open, at most `timeout`: true once it is (at once if it is not
    /// set), false if the time ran out first. The look at the node gets at least
    /// [`MIN_ATTEMPT`](crate::lock::MIN_ATTEMPT), so a zero timeout still tells an open gate.
    pub fn wait_on_barrier(&self, timeout: Duration) -> Result<bool> {
        self.wait_on_barrier_until(Instant::now() + timeout)
    }

    /// [`wait_on_barrier`](Self::wait_on_barrier) until `deadline`.
    ///
    /// # Errors
    /// What a look at the node meets that is not a connection problem the client rides out
    /// (`NoAuth`, `Closed`, ...). A broken connection or a lost session does not end the
    /// wait: the node is looked at again once the client is back, within the deadline.
    pub fn wait_on_barrier_until(&self, deadline: Instant) -> Result<bool> {
        let mut watching = Watching::new(&self.core);
        // Each look gets at least MIN_ATTEMPT, as a timed acquire does: a zero timeout still
        // looks once.
        let looks = deadline.max(Instant::now() + MIN_ATTEMPT);
        loop {
            let looked = self
                .core
                .client
                .with_deadline(looks)
                .exists_watch(&self.core.path, watching.tx());
            match looked {
                Ok(stat) => {
                    // The watch is set either way (on a missing node, for its creation).
                    watching.watching(&self.core.path);
                    if stat.is_none() {
                        return Ok(true);
                    }
                }
                Err(Error::Timeout { .. }) => return Ok(false),
                Err(Error::ConnectionLoss { .. }) => {}
                Err(e) => return Err(e),
            }
            if !watching.wait(deadline)? {
                return Ok(false);
            }
        }
    }
}
