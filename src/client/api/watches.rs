//! Persistent watches, and taking a channel's watches away.

use crossbeam_channel::Sender;

use crate::client::request::Req;
use crate::client::types::{AddWatchMode, WatchEvent};
use crate::client::watches::WatchType;
use crate::error::Result;
use crate::paths;

use super::Client;

impl Client {
    /// Sets a persistent watch (ZooKeeper ≥ 3.6) that reports into `tx` until removed with
    /// [`remove_watch`](Self::remove_watch); it survives reconnects, and ends with the session.
    pub fn add_watch(&self, path: &str, mode: AddWatchMode, tx: &Sender<WatchEvent>) -> Result<()> {
        let kind = match mode {
            AddWatchMode::Persistent => WatchType::Persistent,
            AddWatchMode::PersistentRecursive => WatchType::PersistentRecursive,
        };
        self.read(
            path,
            Some((kind, tx)),
            |p, w| Req::AddWatch {
                path: p.into(),
                watch: w,
            },
            |_| Ok(()),
        )
    }

    /// Removes every watch at `path` that reports into `tx`. The server is told to drop a
    /// watch only where no other channel still needs what it does there; otherwise the
    /// server's watch stays, and what it reports goes to nobody here.
    pub fn remove_watch(&self, path: &str, tx: &Sender<WatchEvent>) -> Result<()> {
        paths::validate(path, false)?;
        let full = self.full(path);
        for kind in self.core.forget_watch(&full, tx) {
            use WatchType::*;
            let left = self.core.watch_kinds(&full);
            let needed = |kinds: &[WatchType]| kinds.iter().any(|k| left.contains(k));
            let kind = match kind {
                // Servers before 3.9 remove a persistent watch only as "any watch at the path".
                Persistent | PersistentRecursive if !left.is_empty() => continue,
                Persistent | PersistentRecursive => None,
                // One server watch serves data reads and `exists` alike; and servers 3.6–3.8
                // strip a persistent watch at the path along with a data or child watch.
                Data | Exist if needed(&[Data, Exist, Persistent, PersistentRecursive]) => continue,
                Child if needed(&[Child, Persistent, PersistentRecursive]) => continue,
                other => Some(other),
            };
            let req = Req::RemoveWatches { path: &full, kind };
            match self.request(path, &req) {
                Ok(_) => {}
                Err(e) if e.is_code(crate::ZkCode::NoWatcher) || e.is_no_node() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
