//! Writes: creating nodes and paths, setting data and ACLs, deleting, transactions,
//! reads at one point in time, and pipelines.

use crate::acl::Acl;
use crate::client::config::strip;
use crate::client::request::{self, Req};
use crate::client::types::{CreateMode, Op, OpResult, Stat, WatchEvent};
use crate::error::{Error, Result};
use crate::paths;
use crate::session_id::SessionId;
use crossbeam_channel::Sender;

use super::{check_data, Client, Retry};

impl Client {
    /// Creates a node and returns its path (with the counter, for sequential modes).
    ///
    /// Persistent creates are retried on connection loss (a retry that finds the node reports
    /// `NodeExists`, since it cannot tell whose it is). Sequential and ephemeral creates are
    /// never retried: find such a node by a name of your own (as the locks do).
    pub fn create(&self, path: &str, data: &[u8], mode: CreateMode) -> Result<String> {
        let acl = self.core.config.acl.clone();
        self.create_with_acl(path, data, mode, &acl).map(|(p, _)| p)
    }

    /// [`create`](Self::create) with an ACL of its own; also returns the new node's stat.
    pub fn create_with_acl(
        &self,
        path: &str,
        data: &[u8],
        mode: CreateMode,
        acl: &[Acl],
    ) -> Result<(String, Stat)> {
        self.create_in_session(path, data, mode, acl)
            .map(|(p, s, _)| (p, s))
    }

    /// [`create`](Self::create), also returning the stat and the session it ran under.
    pub(crate) fn create_in_session(
        &self,
        path: &str,
        data: &[u8],
        mode: CreateMode,
        acl: &[Acl],
    ) -> Result<(String, Stat, SessionId)> {
        paths::validate(path, mode.is_sequential())?;
        check_data(data)?;
        if acl.is_empty() {
            return Err(Error::BadArguments(
                "an ACL needs at least one entry".into(),
            ));
        }
        let full = self.full(path);
        let retry = if mode.is_sequential() || mode.is_ephemeral() {
            Retry::Never
        } else {
            Retry::OnConnectionLoss
        };
        let req = Req::Create {
            path: &full,
            data,
            acl,
            mode,
            stat: true,
        };
        self.retried(path, retry, || {
            let (reply, session) = self.request(path, &req)?;
            let (created, stat) = request::created(&reply)?;
            Ok((strip(&self.core.config.prefix, &created), stat, session))
        })
    }

    /// Creates the node, creating missing persistent parents first.
    pub fn create_with_parents(&self, path: &str, data: &[u8], mode: CreateMode) -> Result<String> {
        match self.create(path, data, mode) {
            Err(e) if e.is_no_node() => {
                if let Some(parent) = paths::parent(path) {
                    self.ensure_path(parent)?;
                }
                self.create(path, data, mode)
            }
            other => other,
        }
    }

    /// Creates `path` and its missing ancestors as empty persistent nodes, like `mkdir -p`.
    pub fn ensure_path(&self, path: &str) -> Result<()> {
        let acl = self.core.config.acl.clone();
        self.ensure_path_with_acl(path, &acl)
    }

    /// [`ensure_path`](Self::ensure_path) creating missing nodes with `acl`.
    pub(crate) fn ensure_path_with_acl(&self, path: &str, acl: &[Acl]) -> Result<()> {
        paths::validate(path, false)?;
        if self.exists(path)?.is_some() {
            return Ok(());
        }
        self.ensure_full_path(&self.full(path), acl)
    }

    /// `ensure_path` on a path already including the prefix.
    pub(crate) fn ensure_full_path(&self, full: &str, acl: &[Acl]) -> Result<()> {
        self.make_path(full, acl, usize::MAX)
    }

    /// Makes a lock's path and its missing ancestors below the client's prefix as container
    /// nodes (ZooKeeper ≥ 3.5.3), so the server reaps them once the last contender is gone
    /// and a per-job lock path does not stay for ever. A server without containers gets
    /// persistent nodes instead, with a warning the first time.
    pub(crate) fn ensure_lock_path(&self, path: &str, acl: &[Acl]) -> Result<()> {
        paths::validate(path, false)?;
        let prefix_len = self.core.config.prefix.len();
        self.make_path(&self.full(path), acl, prefix_len)
    }

    /// [`create_in_session`](Self::create_in_session) of `path` with the client's default
    /// ACL; if its parent is missing (`NoNode`), the missing parents are made as containers
    /// (see [`ensure_lock_path`](Self::ensure_lock_path)) and the create sent again, twice at
    /// most (the server may reap an empty container between the two). Under a parent that
    /// exists, one round trip: the create goes first, as Curator's
    /// `creatingParentContainersIfNeeded` sends it.
    pub(crate) fn create_under_containers(
        &self,
        path: &str,
        data: &[u8],
        mode: CreateMode,
    ) -> Result<(String, Stat, SessionId)> {
        let acl = self.core.config.acl.clone();
        let parent = paths::parent(path).filter(|p| *p != "/");
        let mut parents_made = 0;
        loop {
            match self.create_in_session(path, data, mode, &acl) {
                Err(e) if e.is_no_node() && parents_made < 2 => {
                    let Some(parent) = parent else {
                        return Err(e);
                    };
                    self.ensure_lock_path(parent, &acl)?;
                    parents_made += 1;
                }
                created => return created,
            }
        }
    }

    /// Creates a persistent node, its missing parents as containers, sending the create only
    /// once: a lost answer is `ConnectionLoss` (a retry could meet the node the first attempt
    /// made and report `NodeExists`, hiding that the node is ours). For a create that must not
    /// be taken for someone else's.
    pub(crate) fn create_once_under_containers(&self, path: &str, data: &[u8]) -> Result<()> {
        let acl = self.core.config.acl.clone();
        if let Some(parent) = paths::parent(path).filter(|p| *p != "/") {
            self.ensure_lock_path(parent, &acl)?;
        }
        let op = Op::Create {
            path: path.to_owned(),
            data: data.to_vec(),
            mode: CreateMode::Persistent,
        };
        self.multi(std::slice::from_ref(&op)).map(|_| ())
    }

    /// Creates every missing node of `full` (a server path): persistent up to byte
    /// `containers_from`, containers below it. Only below the deepest node that exists: the
    /// server checks CREATE on the parent before it says a node exists, so writing what
    /// exists under a parent we may only read fails `NoAuth`.
    fn make_path(&self, full: &str, acl: &[Acl], containers_from: usize) -> Result<()> {
        let ends: Vec<usize> = full
            .match_indices('/')
            .skip(1)
            .map(|(i, _)| i)
            .chain([full.len()])
            .collect();
        let mut first_missing = ends.len();
        for (k, &end) in ends.iter().enumerate().rev() {
            let prefix = &full[..end];
            let found = self.retried(prefix, Retry::OnConnectionLoss, || {
                let req = Req::Exists {
                    path: prefix.into(),
                    watch: None,
                };
                match self.request(prefix, &req) {
                    Ok(_) => Ok(true),
                    Err(e) if e.is_no_node() => Ok(false),
                    Err(e) => Err(e),
                }
            })?;
            if found {
                break;
            }
            first_missing = k;
        }
        for &i in &ends[first_missing..] {
            let prefix = &full[..i];
            let container = i > containers_from && !self.core.no_containers();
            let mode = if container {
                CreateMode::Container
            } else {
                CreateMode::Persistent
            };
            let made = self.retried(prefix, Retry::OnConnectionLoss, || {
                let req = Req::Create {
                    path: prefix,
                    data: &[],
                    acl,
                    mode,
                    stat: false,
                };
                self.request(prefix, &req).map(|_| ())
            });
            match made {
                Ok(()) => {}
                Err(e) if e.is_node_exists() => {}
                Err(e) if container && e.is_code(crate::ZkCode::Unimplemented) => {
                    self.core.containers_unsupported();
                    return self.make_path(full, acl, containers_from);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Sets the node's data; with `version`, only if the node is still at that version.
    /// Retried on connection loss only without a version (a retry with one could fail on the
    /// first attempt's own change).
    pub fn set_data(&self, path: &str, data: &[u8], version: Option<i32>) -> Result<Stat> {
        paths::validate(path, false)?;
        check_data(data)?;
        let full = self.full(path);
        let retry = if version.is_none() {
            Retry::OnConnectionLoss
        } else {
            Retry::Never
        };
        let req = Req::SetData {
            path: &full,
            data,
            version: version.unwrap_or(-1),
        };
        self.retried(path, retry, || {
            let (reply, _) = self.request(path, &req)?;
            Ok(reply.record().stat()?)
        })
    }

    /// Deletes the node; a node that is already gone counts as deleted. Retried on connection
    /// loss.
    pub fn delete(&self, path: &str) -> Result<()> {
        match self.delete_inner(path, -1, Retry::OnConnectionLoss) {
            Err(e) if e.is_no_node() => Ok(()),
            other => other,
        }
    }

    /// Deletes the node only if it is at `version`. `NoNode` and `BadVersion` are reported.
    /// Not retried.
    pub fn delete_version(&self, path: &str, version: i32) -> Result<()> {
        self.delete_inner(path, version, Retry::Never)
    }

    fn delete_inner(&self, path: &str, version: i32, retry: Retry) -> Result<()> {
        paths::validate(path, false)?;
        let full = self.full(path);
        let req = Req::Delete {
            path: &full,
            version,
        };
        self.retried(path, retry, || self.request(path, &req).map(|_| ()))
    }

    /// The node's ACL and stat.
    pub fn acl(&self, path: &str) -> Result<(Vec<Acl>, Stat)> {
        self.read(
            path,
            None,
            |p, _| Req::GetAcl { path: p.into() },
            |r| {
                let mut d = r.record();
                Ok((d.acl()?, d.stat()?))
            },
        )
    }

    /// Replaces the node's ACL; with `version`, only if the ACL is still at that version
    /// (`Stat::aversion`). Not retried.
    pub fn set_acl(&self, path: &str, acl: &[Acl], version: Option<i32>) -> Result<Stat> {
        paths::validate(path, false)?;
        if acl.is_empty() {
            return Err(Error::BadArguments(
                "an ACL needs at least one entry".into(),
            ));
        }
        let full = self.full(path);
        let req = Req::SetAcl {
            path: &full,
            acl,
            version: version.unwrap_or(-1),
        };
        let (reply, _) = self.request(path, &req)?;
        Ok(reply.record().stat()?)
    }

    /// Waits until the server this client is connected to has caught up with the leader for
    /// `path`: reads after it see every write committed before it.
    pub fn sync(&self, path: &str) -> Result<()> {
        self.read(path, None, |p, _| Req::Sync { path: p.into() }, |_| Ok(()))
    }

    /// Runs `ops` as one transaction: all of them or none. On failure, the error names the
    /// first operation that failed (its code and path); nothing was applied. Not retried.
    /// Reads are refused with `BadArguments`.
    pub fn multi(&self, ops: &[Op]) -> Result<Vec<OpResult>> {
        if let Some(op) = ops.iter().find(|o| !o.is_write()) {
            return Err(Error::BadArguments(format!(
                "a transaction holds writes and checks only, not {op:?}"
            )));
        }
        let full = self.validate_ops(ops)?;
        let acl = &self.core.config.acl;
        let subs: Vec<Req<'_>> = ops
            .iter()
            .zip(&full)
            .map(|(op, p)| Req::from_op(op, p, acl))
            .collect();
        let req = Req::Multi(subs);
        let (reply, _) = self.request(ops.first().map_or("/", Op::path), &req)?;
        let prefix = &self.core.config.prefix;
        let mut out = Vec::with_capacity(ops.len());
        // The answer carries each operation's result, also when the transaction failed: the
        // failed one has its code, the others 0 (before it) or -2 (after it).
        for (i, r) in request::multi_results(&reply, ops.len())?
            .into_iter()
            .enumerate()
        {
            match r {
                Ok(r) => out.push(r.stripped(prefix)),
                Err(0) | Err(-2) => {}
                Err(code) => return Err(Error::from_wire(code, ops[i].path())),
            }
        }
        if out.len() != ops.len() {
            return Err(Error::Protocol(
                "a transaction failed without naming the operation".into(),
            ));
        }
        Ok(out)
    }

    /// Reads several nodes at one point in time (ZooKeeper ≥ 3.6): [`Op::GetData`] and
    /// [`Op::GetChildren`] only (others are refused with `BadArguments`). Each result stands
    /// on its own: a missing node fails its read alone. Retried on connection loss.
    pub fn multi_read(&self, ops: &[Op]) -> Result<Vec<Result<OpResult>>> {
        if let Some(op) = ops
            .iter()
            .find(|o| !matches!(o, Op::GetData { .. } | Op::GetChildren { .. }))
        {
            return Err(Error::BadArguments(format!(
                "a multi_read holds data reads and listings only, not {op:?}"
            )));
        }
        let full = self.validate_ops(ops)?;
        let acl = &self.core.config.acl;
        let req = Req::MultiRead(
            ops.iter()
                .zip(&full)
                .map(|(op, p)| Req::from_op(op, p, acl))
                .collect(),
        );
        let path = ops.first().map_or("/", Op::path);
        let reply = self.retried(path, Retry::OnConnectionLoss, || {
            self.request(path, &req).map(|(reply, _)| reply)
        })?;
        Ok(request::multi_read_results(&reply, ops.len())?
            .into_iter()
            .zip(ops)
            .map(|(r, op)| r.map_err(|code| Error::from_wire(code, op.path())))
            .collect())
    }

    /// Sends every operation before waiting for any answer (the server answers them in
    /// order), then returns each one's result: one round trip for all of them. Unlike
    /// [`multi`](Self::multi) they are independent: each may succeed or fail on its own. Not
    /// retried.
    pub fn pipeline(&self, ops: &[Op]) -> Result<Vec<Result<OpResult>>> {
        self.pipeline_inner(ops, None)
    }

    /// [`pipeline`](Self::pipeline), each read leaving a one-shot watch that reports into
    /// `tx` (`Exists` an exist watch, `GetData` a data watch, `GetChildren` a child watch),
    /// set by the server with the read.
    pub(crate) fn pipeline_watched(
        &self,
        ops: &[Op],
        tx: &Sender<WatchEvent>,
    ) -> Result<Vec<Result<OpResult>>> {
        self.pipeline_inner(ops, Some(tx))
    }

    fn pipeline_inner(
        &self,
        ops: &[Op],
        tx: Option<&Sender<WatchEvent>>,
    ) -> Result<Vec<Result<OpResult>>> {
        let full = self.validate_ops(ops)?;
        let acl = &self.core.config.acl;
        let frames: Vec<_> = ops
            .iter()
            .zip(&full)
            .map(|(op, p)| {
                let req = Req::from_op(op, p, acl);
                match tx {
                    Some(tx) => req.watched(tx),
                    None => req,
                }
                .outgoing()
            })
            .collect();
        let tickets = self.send(frames)?;
        let prefix = &self.core.config.prefix;
        Ok(tickets
            .into_iter()
            .zip(ops)
            .map(|(t, op)| {
                let reply = match self.wait(t, op.path(), None) {
                    Err(e) if e.is_no_node() && matches!(op, Op::Exists { .. }) => {
                        return Ok(OpResult::Exists(None))
                    }
                    other => other?,
                };
                Ok(request::op_result(op, &reply)?.stripped(prefix))
            })
            .collect())
    }

    /// Validates every operation's path and data; returns the full paths.
    fn validate_ops(&self, ops: &[Op]) -> Result<Vec<String>> {
        ops.iter()
            .map(|op| {
                let sequential = matches!(op, Op::Create { mode, .. } if mode.is_sequential());
                paths::validate(op.path(), sequential)?;
                if let Op::Create { data, .. } | Op::SetData { data, .. } = op {
                    check_data(data)?;
                }
                Ok(self.full(op.path()).into_owned())
            })
            .collect()
    }
}
