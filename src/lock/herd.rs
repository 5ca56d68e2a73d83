//! `HerdLock`: the naive sequential-node lock of the early articles. **A baseline for the
//! benches, not a lock to use.**

use crossbeam_channel::unbounded;

use super::names::sort_contenders;
use crate::{paths, Client, CreateMode, Error, Result};

const NAME: &str = "herd-";

/// The lock as first described: every contender creates an ephemeral sequential child, lists
/// the children with a watch on the **parent**, and the lowest wins. Every change of the
/// children wakes every waiter (the herd effect), which is what the benches measure against
/// [`InterProcessMutex`](super::InterProcessMutex)'s predecessor-only watch.
///
/// Kept deliberately simple: no protected names (a lost create answer leaves an orphan), no
/// deadline, no session tracking. Do not use it for anything but comparison.
#[derive(Debug)]
#[doc(alias = "baseline")]
pub struct HerdLock {
    client: Client,
    path: String,
}

/// A hold of a [`HerdLock`]; releases on drop.
#[derive(Debug)]
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct HerdGuard<'a> {
    lock: &'a HerdLock,
    node: String,
    released: bool,
}

impl HerdLock {
    /// A herd lock on `path`.
    pub fn new(client: &Client, path: &str) -> Result<HerdLock> {
        paths::validate(path, false)?;
        Ok(HerdLock {
            client: client.clone(),
            path: path.to_owned(),
        })
    }

    /// Waits for the lock.
    pub fn acquire(&self) -> Result<HerdGuard<'_>> {
        let prefix = paths::join(&self.path, NAME);
        let node = match self
            .client
            .create(&prefix, b"", CreateMode::EphemeralSequential)
        {
            Err(e) if e.is_no_node() => {
                self.client.ensure_path(&self.path)?;
                self.client
                    .create(&prefix, b"", CreateMode::EphemeralSequential)?
            }
            other => other?,
        };
        let name = paths::node_name(&node).to_owned();
        let (tx, rx) = unbounded();
        loop {
            let listed = self.client.children_watch(&self.path, &tx)?;
            let children = sort_contenders(&listed);
            match children.first() {
                Some(first) if first.name == name => {
                    return Ok(HerdGuard {
                        lock: self,
                        node,
                        released: false,
                    })
                }
                Some(_) if children.iter().any(|c| c.name == name) => {}
                _ => return Err(Error::IllegalState(format!("{node} vanished"))),
            }
            // Any change of the children wakes us, whoever it concerns.
            if rx.recv().is_err() {
                return Err(Error::Closed);
            }
        }
    }
}

impl HerdGuard<'_> {
    /// Releases the lock now.
    pub fn release(mut self) -> Result<()> {
        self.released = true;
        self.lock.client.delete(&self.node)
    }
}

impl Drop for HerdGuard<'_> {
    fn drop(&mut self) {
        if !self.released {
            let _ = self.lock.client.delete(&self.node);
        }
    }
}
