//! Cooperative revocation, as Curator does it: anyone may ask a holder to let go by writing
//! [`REVOKE_MESSAGE`] into its lock node; a holder whose lock is revocable watches its own node
//! and calls its listener.

use std::sync::Arc;
use std::thread::{self, JoinHandle};

use crossbeam_channel::{bounded, select, unbounded, Sender};
use log::{debug, warn};

use crate::{Client, ConnectionState, Error, Result};

/// What a revoke writes into the holder's node (the same bytes Curator writes).
pub const REVOKE_MESSAGE: &[u8] = b"__REVOKE__";

pub(crate) type Listener = Arc<dyn Fn(&str) + Send + Sync>;

/// Asks the holder of the lock node `node_path` to release it. The holder's listener runs if it
/// made its lock revocable; otherwise nothing happens. A node that is already gone is fine.
pub fn revoke(client: &Client, node_path: &str) -> Result<()> {
    match client.set_data(node_path, REVOKE_MESSAGE, None) {
        Ok(_) => Ok(()),
        Err(e) if e.is_no_node() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Watches one held node for a revoke until dropped.
pub(crate) struct RevocationWatch {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl RevocationWatch {
    pub fn start(client: &Client, node: &str, listener: Listener) -> Option<RevocationWatch> {
        let (stop, stopped) = bounded::<()>(0);
        let client = client.clone();
        let node = node.to_owned();
        let spawned = thread::Builder::new()
            .name("zk-revocation".into())
            .spawn(move || {
                let states = client.subscribe();
                let (tx, rx) = unbounded();
                loop {
                    match client.data_watch(&node, &tx) {
                        Ok((data, _)) if data == REVOKE_MESSAGE => {
                            debug!("revocation requested for {node}");
                            listener(&node);
                            return;
                        }
                        Ok(_) => {}
                        Err(e) if e.is_no_node() => return,
                        Err(Error::Closed) => return,
                        Err(e) => debug!("revocation watch on {node}: {e}"),
                    }
                    select! {
                        recv(stopped) -> _ => return,
                        recv(rx) -> _ => {}
                        recv(states.receiver()) -> e => match e.map(|e| e.state) {
                            Ok(ConnectionState::Reconnected) => {}
                            Ok(ConnectionState::Suspended) => {}
                            _ => return,
                        },
                    }
                }
            });
        match spawned {
            Ok(t) => Some(RevocationWatch {
                stop: Some(stop),
                thread: Some(t),
            }),
            Err(e) => {
                warn!(
                    "could not watch {node} for revocation: {e}",
                    node = "lock node"
                );
                None
            }
        }
    }
}

impl Drop for RevocationWatch {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            // The listener may be what releases the lock; never join the thread from itself.
            if t.thread().id() != thread::current().id() {
                let _ = t.join();
            }
        }
    }
}
