//! Cooperative revocation, as Curator does it: anyone may ask a holder to let go by writing
//! [`REVOKE_MESSAGE`] into its lock node; a holder whose lock is revocable watches its own node
//! and calls its listener.

use std::sync::Arc;
use std::thread::{self, JoinHandle};

use crossbeam_channel::{bounded, select, unbounded, Sender};
use log::{debug, warn};

use crate::{Client, Result, WatchEvent, WatchKind};

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

/// A revocable lock's dispatcher: one thread per lock (not per hold) that hears the watches of
/// the lock's held nodes and calls the listener when one of them is asked to let go. Holds
/// come and go without waiting for it, so a listener that waits for the release cannot
/// deadlock it (Curator never joins its listener either).
pub(crate) struct Revocation {
    client: Client,
    tx: Sender<WatchEvent>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Revocation {
    pub fn start(client: &Client, listener: Listener) -> Option<Arc<Revocation>> {
        let (tx, rx) = unbounded::<WatchEvent>();
        let (stop, stopped) = bounded::<()>(0);
        let (c, watch_tx) = (client.clone(), tx.clone());
        let spawned = thread::Builder::new()
            .name("zk-revocation".into())
            .spawn(move || loop {
                select! {
                    recv(stopped) -> _ => return,
                    recv(rx) -> e => {
                        let Ok(e) = e else { return };
                        if e.kind != WatchKind::DataChanged {
                            continue;
                        }
                        // Read the data and watch on: the holder may be asked again later.
                        match c.data_watch(&e.path, &watch_tx) {
                            Ok((data, _)) if data == REVOKE_MESSAGE => {
                                debug!("revocation requested for {}", e.path);
                                listener(&e.path);
                            }
                            Ok(_) => {}
                            Err(err) => debug!("revocation watch on {}: {err}", e.path),
                        }
                    }
                }
            });
        match spawned {
            Ok(t) => Some(Arc::new(Revocation {
                client: client.clone(),
                tx,
                stop: Some(stop),
                thread: Some(t),
            })),
            Err(e) => {
                warn!("could not start the revocation thread: {e}");
                None
            }
        }
    }

    /// Watches a held node until the returned value is dropped; a revoke already written calls
    /// the listener at once (on the dispatcher's thread).
    pub fn watch(self: &Arc<Revocation>, node: &str) -> RevocationWatch {
        match self.client.data_watch(node, &self.tx) {
            Ok((data, _)) if data == REVOKE_MESSAGE => {
                let _ = self.tx.send(WatchEvent {
                    kind: WatchKind::DataChanged,
                    path: node.to_owned(),
                });
            }
            Ok(_) => {}
            Err(e) => debug!("revocation watch on {node}: {e}"),
        }
        RevocationWatch {
            revocation: self.clone(),
            node: node.to_owned(),
        }
    }
}

impl Drop for Revocation {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            // The listener may be what drops the lock; never join the thread from itself.
            if t.thread().id() != thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

/// One hold's watch for a revoke; dropped with the hold, without waiting for anything.
pub(crate) struct RevocationWatch {
    revocation: Arc<Revocation>,
    node: String,
}

impl Drop for RevocationWatch {
    fn drop(&mut self) {
        self.revocation
            .client
            .forget_watch(&self.node, &self.revocation.tx);
    }
}
