//! Writes the server applies only while a lock is held: each goes out as a `multi` together
//! with a `check` of the holder's lock node, so the server refuses it atomically once that
//! node is gone (session expired, node deleted by an operator or a revocation tool), whatever
//! the client believes at the time. For state kept in ZooKeeper itself; `FencingGate` is for
//! resources outside it.

use crate::{Client, CreateMode, Error, Op, OpResult, Result, Stat};

/// Writes that succeed only while the lock node `node` exists. Made by
/// [`Lease::while_held`](super::Lease::while_held), or for any holder's node (a Curator
/// holder's too) by [`WhileHeld::for_node`].
///
/// ```no_run
/// use zk_recipes::{Client, InterProcessMutex};
///
/// # fn main() -> zk_recipes::Result<()> {
/// let client = Client::connect("127.0.0.1:2181")?;
/// let mutex = InterProcessMutex::new(&client, "/locks/config-writer")?;
/// let guard = mutex.acquire()?;
/// // Applied only if our lock node still exists when the server runs it.
/// guard.while_held().set_data("/config/mode", b"fast", None)?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct WhileHeld<'a> {
    client: &'a Client,
    node: String,
}

impl<'a> WhileHeld<'a> {
    /// Writes guarded by the lock node at `node` (any recipe's, any client's).
    pub fn for_node(client: &'a Client, node: &str) -> WhileHeld<'a> {
        WhileHeld {
            client,
            node: node.to_owned(),
        }
    }

    /// The lock node the writes depend on.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Runs `ops` atomically, and only while the lock node exists.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the lock node is gone (nothing was applied); otherwise as
    /// [`Client::multi`].
    pub fn multi(&self, ops: &[Op]) -> Result<Vec<OpResult>> {
        let mut all = Vec::with_capacity(ops.len() + 1);
        all.push(Op::Check {
            path: self.node.clone(),
            version: None,
        });
        all.extend_from_slice(ops);
        match self.client.multi(&all) {
            Ok(mut results) => {
                results.remove(0);
                Ok(results)
            }
            Err(e)
                if e.is_no_node()
                    && matches!(&e, Error::ZooKeeper { path, .. } if *path == self.node) =>
            {
                Err(Error::NotHeld {
                    node: self.node.clone(),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Creates a node (with the client's default ACL) while the lock is held; returns its path.
    pub fn create(&self, path: &str, data: &[u8], mode: CreateMode) -> Result<String> {
        match self.single(Op::Create {
            path: path.to_owned(),
            data: data.to_vec(),
            mode,
        })? {
            OpResult::Created { path, .. } => Ok(path),
            other => Err(unexpected(other)),
        }
    }

    /// Sets a node's data (at `version`, if given) while the lock is held.
    pub fn set_data(&self, path: &str, data: &[u8], version: Option<i32>) -> Result<Stat> {
        match self.single(Op::SetData {
            path: path.to_owned(),
            data: data.to_vec(),
            version,
        })? {
            OpResult::DataSet(stat) => Ok(stat),
            other => Err(unexpected(other)),
        }
    }

    /// Deletes a node (at `version`, if given) while the lock is held.
    pub fn delete(&self, path: &str, version: Option<i32>) -> Result<()> {
        self.single(Op::Delete {
            path: path.to_owned(),
            version,
        })
        .map(|_| ())
    }

    fn single(&self, op: Op) -> Result<OpResult> {
        self.multi(&[op])?
            .pop()
            .ok_or_else(|| Error::Protocol("a transaction answered without results".into()))
    }
}

fn unexpected(r: OpResult) -> Error {
    Error::Protocol(format!("unexpected result {r:?}"))
}
