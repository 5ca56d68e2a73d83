//! Reads: existence, data, children, counts, identities and ephemerals.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::Sender;

use crate::client::config::strip;
use crate::client::conn::Reply;
use crate::client::proto::Names;
use crate::client::request::{self, Req};
use crate::client::types::{ClientInfo, Stat, WatchEvent};
use crate::client::watches::{OnFire, WatchReg, WatchType};
use crate::error::{Error, Result};
use crate::paths;

use super::{Client, Prefetch};

impl Client {
    /// The node's stat, or `None` if there is no node.
    pub fn exists(&self, path: &str) -> Result<Option<Stat>> {
        self.exists_inner(path, None)
    }

    /// Like [`exists`](Self::exists), and leaves a watch that reports into `tx` when the node is
    /// created, changed or deleted.
    pub fn exists_watch(&self, path: &str, tx: &Sender<WatchEvent>) -> Result<Option<Stat>> {
        self.exists_inner(path, Some((WatchType::Exist, tx)))
    }

    fn exists_inner(
        &self,
        path: &str,
        watch: Option<(WatchType, &Sender<WatchEvent>)>,
    ) -> Result<Option<Stat>> {
        let found = self.read(
            path,
            watch,
            |p, w| Req::Exists {
                path: p.into(),
                watch: w,
            },
            |r| Ok(r.record().stat()?),
        );
        match found {
            Ok(stat) => Ok(Some(stat)),
            Err(e) if e.is_no_node() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The node's data and stat.
    pub fn data(&self, path: &str) -> Result<(Vec<u8>, Stat)> {
        self.data_inner(path, None)
    }

    /// Like [`data`](Self::data), and leaves a watch that reports into `tx` when the node's data
    /// changes or the node is deleted. The channel exists before the watch is set, so an event
    /// that fires at once is never missed.
    pub fn data_watch(&self, path: &str, tx: &Sender<WatchEvent>) -> Result<(Vec<u8>, Stat)> {
        let reg = WatchReg::new(&self.full(path), WatchType::Data, tx);
        self.data_inner(path, Some(reg))
    }

    /// Like [`data_watch`](Self::data_watch), for a lock waiter that lists `then_list` again
    /// as soon as the watch fires: the client's reader thread sends that listing the moment
    /// the event arrives, before it wakes the waiter, which takes it with
    /// [`prefetched_children`](Self::prefetched_children). The listing goes out a thread
    /// wake-up sooner, which is one hop less on a lock handoff's critical path.
    pub(crate) fn data_watch_then_list(
        &self,
        path: &str,
        tx: &Sender<WatchEvent>,
        then_list: &str,
    ) -> Result<Arc<Prefetch>> {
        paths::validate(then_list, false)?;
        let prefetch = Arc::new(Prefetch::default());
        let (core, list, into) = (
            Arc::downgrade(&self.core),
            self.full(then_list).into_owned(),
            prefetch.clone(),
        );
        let counted = self.owner.is_some();
        let on_fire: OnFire = Arc::new(move || {
            let Some(core) = core.upgrade() else { return };
            let req = Req::GetChildren {
                path: list.as_str().into(),
                watch: None,
                stat: false,
            };
            // Runs on whichever thread read the notification, maybe a caller with a deadline,
            // the waiter itself or the I/O thread: it never waits for a connection, nor more
            // than a moment for a writer (one stuck on a full socket holds the lock up to the
            // write timeout), nor for socket space to begin in (the reader would hold every
            // answer up meanwhile, its own deadline too; see `Outbox::try_send` for a frame
            // that fits only in part). Without any of them, the waiter lists for itself.
            let now = Some(Instant::now());
            if let Ok(Some([sent])) = core.outbox.try_send([req.outgoing()], now) {
                if counted {
                    core.counters.requests.fetch_add(1, Ordering::Relaxed);
                }
                *into.0.lock() = Some(sent);
            }
        });
        let mut reg = WatchReg::new(&self.full(path), WatchType::Data, tx);
        reg.on_fire = Some(on_fire);
        self.data_inner(path, Some(reg))?;
        Ok(prefetch)
    }

    /// The listing the reader thread sent when the watch of
    /// [`data_watch_then_list`](Self::data_watch_then_list) fired, waited for until this
    /// handle's deadline; `None` if none went out (the watch has not fired, or there was no
    /// connection then), or if its connection died before the answer: list afresh then.
    pub(crate) fn prefetched_children(
        &self,
        prefetch: &Prefetch,
        path: &str,
    ) -> Option<Result<Names>> {
        let ticket = prefetch.0.lock().take()?;
        match self.wait(ticket, path, None) {
            Err(Error::ConnectionLoss { .. }) => None,
            answer => Some(answer.and_then(|r| Ok(r.record().names()?))),
        }
    }

    fn data_inner(&self, path: &str, reg: Option<WatchReg>) -> Result<(Vec<u8>, Stat)> {
        self.read_with(
            path,
            reg,
            |p, w| Req::GetData {
                path: p.into(),
                watch: w,
            },
            |r| {
                let mut d = r.record();
                Ok((d.buffer()?, d.stat()?))
            },
        )
    }

    /// The names of the node's children, unsorted.
    pub fn children(&self, path: &str) -> Result<Vec<String>> {
        self.children_inner(path, None, |r| Ok(r.record().strs()?))
    }

    /// Like [`children`](Self::children), and leaves a watch that reports into `tx` when a child
    /// is added or removed or the node is deleted.
    pub fn children_watch(&self, path: &str, tx: &Sender<WatchEvent>) -> Result<Vec<String>> {
        self.children_inner(path, Some((WatchType::Child, tx)), |r| {
            Ok(r.record().strs()?)
        })
    }

    /// [`children`](Self::children) as [`Names`] (the lock core's listings), with a children
    /// watch into `tx` if given.
    pub(crate) fn child_names(&self, path: &str, tx: Option<&Sender<WatchEvent>>) -> Result<Names> {
        self.children_inner(path, tx.map(|tx| (WatchType::Child, tx)), |r| {
            Ok(r.record().names()?)
        })
    }

    fn children_inner<T>(
        &self,
        path: &str,
        watch: Option<(WatchType, &Sender<WatchEvent>)>,
        decode: impl Fn(&Reply) -> Result<T>,
    ) -> Result<T> {
        self.read(
            path,
            watch,
            |p, w| Req::GetChildren {
                path: p.into(),
                watch: w,
                stat: false,
            },
            decode,
        )
    }

    /// The node's children (names, in no particular order) and the node's own stat, from one
    /// read.
    pub fn children_stat(&self, path: &str) -> Result<(Vec<String>, Stat)> {
        self.read(
            path,
            None,
            |p, w| Req::GetChildren {
                path: p.into(),
                watch: w,
                stat: true,
            },
            |r| {
                let mut d = r.record();
                Ok((d.strs()?, d.stat()?))
            },
        )
    }

    /// How many nodes there are below `path`, at every depth (ZooKeeper ≥ 3.6).
    pub fn all_children_number(&self, path: &str) -> Result<u32> {
        self.read(
            path,
            None,
            |p, _| Req::GetAllChildrenNumber { path: p.into() },
            |r| Ok(u32::try_from(r.record().i32()?).unwrap_or(0)),
        )
    }

    /// The identities the server has authenticated this connection as (ZooKeeper ≥ 3.7;
    /// `Unimplemented` before).
    pub fn who_am_i(&self) -> Result<Vec<ClientInfo>> {
        let (reply, _) = self.request("/", &Req::WhoAmI)?;
        Ok(request::client_infos(&reply)?)
    }

    /// The ephemeral nodes of this session whose paths start with `prefix` ("/" for all),
    /// ZooKeeper ≥ 3.6.
    pub fn ephemerals(&self, prefix: &str) -> Result<Vec<String>> {
        let full = self.full(prefix);
        let (reply, _) = self.request(prefix, &Req::GetEphemerals { prefix: &full })?;
        let paths = reply.record().strs()?;
        Ok(paths
            .iter()
            .map(|p| strip(&self.core.config.prefix, p))
            .collect())
    }
}
