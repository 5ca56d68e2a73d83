//! Requests as the client builds them (full server paths), their frames, and the records their
//! answers carry.

use std::borrow::Cow;

use crossbeam_channel::Sender;

use super::conn::{Anchors, Outgoing, Reply};
use super::proto::{self, op, Decoded, Enc, Malformed};
use super::types::{ClientInfo, CreateMode, Op, OpResult, WatchEvent};
use super::watches::{WatchReg, WatchType};
use crate::acl::Acl;

/// One request. Paths are the server's (chroot and namespace included).
pub(crate) enum Req<'a> {
    Create {
        path: &'a str,
        data: &'a [u8],
        acl: &'a [Acl],
        mode: CreateMode,
        /// The answer carries the new node's stat (`create2`); without, a plain `create`
        /// (the path alone: 68 bytes less from the server). Containers and TTL nodes have
        /// only the form with the stat.
        stat: bool,
    },
    Delete {
        path: &'a str,
        version: i32,
    },
    SetData {
        path: &'a str,
        data: &'a [u8],
        version: i32,
    },
    Check {
        path: &'a str,
        version: i32,
    },
    Exists {
        path: Cow<'a, str>,
        watch: Option<WatchReg>,
    },
    GetData {
        path: Cow<'a, str>,
        watch: Option<WatchReg>,
    },
    GetChildren {
        path: Cow<'a, str>,
        watch: Option<WatchReg>,
        /// The answer carries the parent's stat (`getChildren2`); without, the names alone
        /// (68 bytes less from the server).
        stat: bool,
    },
    GetAcl {
        path: Cow<'a, str>,
    },
    SetAcl {
        path: &'a str,
        acl: &'a [Acl],
        version: i32,
    },
    Sync {
        path: Cow<'a, str>,
    },
    /// A persistent watch; `watch` is always set.
    AddWatch {
        path: Cow<'a, str>,
        watch: Option<WatchReg>,
    },
    /// `kind: None` removes every watch at the path.
    RemoveWatches {
        path: &'a str,
        kind: Option<WatchType>,
    },
    WhoAmI,
    GetEphemerals {
        prefix: &'a str,
    },
    /// Incremental reconfiguration: servers joining (`server.N=...` specs, comma-separated),
    /// server ids leaving, and the configuration version it applies to (-1: any).
    Reconfig {
        joining: String,
        leaving: String,
        from: i64,
    },
    Multi(Vec<Req<'a>>),
    /// Reads at one point in time (ZooKeeper ≥ 3.6): `GetData` and `GetChildren` only.
    MultiRead(Vec<Req<'a>>),
    GetAllChildrenNumber {
        path: Cow<'a, str>,
    },
}

impl<'a> Req<'a> {
    /// The request for `op`, at the server path `full`.
    pub fn from_op(op: &'a Op, full: &'a str, acl: &'a [Acl]) -> Req<'a> {
        match op {
            Op::Create { data, mode, .. } => Req::Create {
                path: full,
                data,
                acl,
                mode: *mode,
                stat: true,
            },
            Op::Delete { version, .. } => Req::Delete {
                path: full,
                version: version.unwrap_or(-1),
            },
            Op::SetData { data, version, .. } => Req::SetData {
                path: full,
                data,
                version: version.unwrap_or(-1),
            },
            Op::Check { version, .. } => Req::Check {
                path: full,
                version: version.unwrap_or(-1),
            },
            Op::Exists { .. } => Req::Exists {
                path: full.into(),
                watch: None,
            },
            Op::GetData { .. } => Req::GetData {
                path: full.into(),
                watch: None,
            },
            Op::GetChildren { .. } => Req::GetChildren {
                path: full.into(),
                watch: None,
                stat: false,
            },
        }
    }

    /// A read that leaves a one-shot watch reporting into `tx` (an exist, data or child watch,
    /// as the read); any other request unchanged.
    pub fn watched(self, tx: &Sender<WatchEvent>) -> Req<'a> {
        let reg = |path: &str, kind| Some(WatchReg::new(path, kind, tx));
        match self {
            Req::Exists { path, .. } => Req::Exists {
                watch: reg(&path, WatchType::Exist),
                path,
            },
            Req::GetData { path, .. } => Req::GetData {
                watch: reg(&path, WatchType::Data),
                path,
            },
            Req::GetChildren { path, stat, .. } => Req::GetChildren {
                watch: reg(&path, WatchType::Child),
                path,
                stat,
            },
            other => other,
        }
    }

    fn opcode(&self) -> i32 {
        match self {
            Req::Create { mode, stat, .. } => match mode {
                CreateMode::Container => op::CREATE_CONTAINER,
                CreateMode::PersistentWithTtl(_) | CreateMode::PersistentSequentialWithTtl(_) => {
                    op::CREATE_TTL
                }
                _ if *stat => op::CREATE2,
                _ => op::CREATE,
            },
            Req::Delete { .. } => op::DELETE,
            Req::SetData { .. } => op::SET_DATA,
            Req::Check { .. } => op::CHECK,
            Req::Exists { .. } => op::EXISTS,
            Req::GetData { .. } => op::GET_DATA,
            Req::GetChildren { stat: true, .. } => op::GET_CHILDREN2,
            Req::GetChildren { stat: false, .. } => op::GET_CHILDREN,
            Req::GetAcl { .. } => op::GET_ACL,
            Req::SetAcl { .. } => op::SET_ACL,
            Req::Sync { .. } => op::SYNC,
            Req::AddWatch { .. } => op::ADD_WATCH,
            Req::RemoveWatches { .. } => op::REMOVE_WATCHES,
            Req::WhoAmI => op::WHO_AM_I,
            Req::Reconfig { .. } => op::RECONFIG,
            Req::GetEphemerals { .. } => op::GET_EPHEMERALS,
            Req::Multi(_) => op::MULTI,
            Req::MultiRead(_) => op::MULTI_READ,
            Req::GetAllChildrenNumber { .. } => op::GET_ALL_CHILDREN_NUMBER,
        }
    }

    /// The record after the request header.
    fn body(&self, e: &mut Enc) {
        match self {
            Req::Create {
                path,
                data,
                acl,
                mode,
                ..
            } => {
                e.str(path).buffer(data).acl(acl).i32(mode.flags());
                if let Some(ttl) = mode.ttl_ms() {
                    e.i64(ttl);
                }
            }
            Req::Delete { path, version } | Req::Check { path, version } => {
                e.str(path).i32(*version);
            }
            Req::SetData {
                path,
                data,
                version,
            } => {
                e.str(path).buffer(data).i32(*version);
            }
            Req::Exists { path, watch }
            | Req::GetData { path, watch }
            | Req::GetChildren { path, watch, .. } => {
                e.str(path).bool(watch.is_some());
            }
            Req::GetAcl { path } | Req::Sync { path } => {
                e.str(path);
            }
            Req::SetAcl { path, acl, version } => {
                e.str(path).acl(acl).i32(*version);
            }
            Req::AddWatch { path, watch } => {
                let recursive = watch
                    .as_ref()
                    .is_some_and(|w| w.kind == WatchType::PersistentRecursive);
                e.str(path).i32(recursive as i32);
            }
            Req::RemoveWatches { path, kind } => {
                // The server's WatcherType: Children 1, Data 2 (exists watches too), Any 3,
                // Persistent 4, PersistentRecursive 5 (the last two from 3.9 on).
                let code = match kind {
                    Some(WatchType::Child) => 1,
                    Some(WatchType::Data | WatchType::Exist) => 2,
                    None => 3,
                    Some(WatchType::Persistent) => 4,
                    Some(WatchType::PersistentRecursive) => 5,
                };
                e.str(path).i32(code);
            }
            Req::WhoAmI => {}
            Req::Reconfig {
                joining,
                leaving,
                from,
            } => {
                // Nothing given is null, as the server reads it; `newMembers` (a whole new
                // membership) is not offered.
                for part in [joining, leaving] {
                    if part.is_empty() {
                        e.i32(-1);
                    } else {
                        e.str(part);
                    }
                }
                e.i32(-1).i64(*from);
            }
            Req::GetEphemerals { prefix } => {
                e.str(prefix);
            }
            Req::GetAllChildrenNumber { path } => {
                e.str(path);
            }
            Req::MultiRead(ops) => {
                for sub in ops {
                    // A listing in a multiRead is a plain getChildren (no stat).
                    let code = match sub {
                        Req::GetChildren { .. } => op::GET_CHILDREN,
                        other => other.opcode(),
                    };
                    e.i32(code).bool(false).i32(-1);
                    sub.body(e);
                }
                e.i32(op::ERROR).bool(true).i32(-1);
            }
            Req::Multi(ops) => {
                for sub in ops {
                    e.i32(sub.opcode()).bool(false).i32(-1);
                    sub.body(e);
                }
                e.i32(op::ERROR).bool(true).i32(-1);
            }
        }
    }

    /// The whole frame, with xid 0 (the outbox sets it).
    pub fn frame(&self) -> Vec<u8> {
        let mut e = Enc::request(0, self.opcode());
        self.body(&mut e);
        e.finish()
    }

    /// The request, ready for the outbox.
    pub fn outgoing(&self) -> Outgoing {
        Outgoing {
            frame: self.frame(),
            watch: self.watch_reg(),
            anchors: self.anchors(),
            heartbeat: false,
            hold: false,
        }
    }

    /// Writes: the leader checks the session before it takes them into its pipeline, so their
    /// answers can vouch for touches the leader applied before them (see `touches`). Not
    /// `sync`: a follower answers it with the leader's go-ahead, which carries no session
    /// check.
    fn anchors(&self) -> Anchors {
        match self {
            Req::Create { .. }
            | Req::Delete { .. }
            | Req::SetData { .. }
            | Req::Check { .. }
            | Req::SetAcl { .. } => Anchors::Write,
            Req::Multi(_) => Anchors::Transaction,
            _ => Anchors::No,
        }
    }

    /// The watcher to register when the server sets the watch.
    pub fn watch_reg(&self) -> Option<WatchReg> {
        match self {
            Req::Exists { watch, .. }
            | Req::GetData { watch, .. }
            | Req::GetChildren { watch, .. }
            | Req::AddWatch { watch, .. } => watch.clone(),
            _ => None,
        }
    }
}

/// A plain create's answer (`CreateResponse`, a `Req::Create` without `stat`): the path made.
pub(crate) fn created_path(reply: &Reply) -> Decoded<String> {
    reply.record().str()
}

/// A create's answer (`Create2Response`): the path made and its stat.
pub(crate) fn created(reply: &Reply) -> Decoded<(String, super::types::Stat)> {
    let mut d = reply.record();
    Ok((d.str()?, d.stat()?))
}

/// A read or write's result in a pipeline.
pub(crate) fn op_result(op: &Op, reply: &Reply) -> Decoded<OpResult> {
    let mut d = reply.record();
    Ok(match op {
        Op::Create { .. } => OpResult::Created {
            path: d.str()?,
            stat: Some(d.stat()?),
        },
        Op::Delete { .. } => OpResult::Deleted,
        Op::SetData { .. } => OpResult::DataSet(d.stat()?),
        Op::Check { .. } => OpResult::Checked,
        Op::Exists { .. } => OpResult::Exists(Some(d.stat()?)),
        Op::GetData { .. } => OpResult::Data(d.buffer()?, d.stat()?),
        Op::GetChildren { .. } => OpResult::Children(d.strs()?),
    })
}

/// True for a write's answers that the leader gives only after it found the session alive:
/// success, and the errors its checks after that raise (no node, bad version, no children for
/// ephemerals, node exists, not empty). Not `NoAuth`: with `enableEagerACLCheck` a follower
/// answers it alone (and with zxid 0, which the session layer refuses too).
pub(crate) fn leader_checked(err: i32) -> bool {
    matches!(err, 0 | -101 | -103 | -108 | -110 | -111)
}

/// True when the leader checked the session for this answer to a write (`anchors`).
pub(crate) fn leader_vouched(anchors: Anchors, reply: &Reply) -> bool {
    if reply.header.zxid <= 0 {
        return false;
    }
    match anchors {
        Anchors::No => false,
        Anchors::Write => leader_checked(reply.header.err),
        // The leader checks the session in each operation before anything else; the first
        // failure rolls the rest back (-2), the ones before it show 0. An empty transaction
        // is checked nowhere.
        Anchors::Transaction => {
            reply.header.err == 0
                && multi_results(reply, usize::MAX).is_ok_and(|results| {
                    !results.is_empty()
                        && results.iter().all(|r| {
                            r.as_ref()
                                .map_or_else(|&c| c == -2 || leader_checked(c), |_| true)
                        })
                })
        }
    }
}

/// A transaction's per-operation results: `Err(code)` for an operation that failed (0 for one
/// that would have succeeded but was rolled back with the failure before it, -2 for one after).
/// `expected`: how many operations were sent (`usize::MAX`: not known).
pub(crate) fn multi_results(reply: &Reply, expected: usize) -> Decoded<Vec<Result<OpResult, i32>>> {
    results(reply, expected, |kind, d| {
        Ok(match kind {
            // A server before 3.7.2 / 3.8.2 answers a create in a transaction with the path
            // alone, whatever was asked: the stat is absent, not a zeroed one.
            op::CREATE => OpResult::Created {
                path: d.str()?,
                stat: None,
            },
            op::CREATE2 | op::CREATE_CONTAINER | op::CREATE_TTL => OpResult::Created {
                path: d.str()?,
                stat: Some(d.stat()?),
            },
            op::DELETE => OpResult::Deleted,
            op::SET_DATA => OpResult::DataSet(d.stat()?),
            op::CHECK => OpResult::Checked,
            _ => return Err(Malformed("unknown operation in a transaction's answer")),
        })
    })
}

/// A `multiRead`'s per-operation results: `Err(code)` for one that failed.
pub(crate) fn multi_read_results(
    reply: &Reply,
    expected: usize,
) -> Decoded<Vec<Result<OpResult, i32>>> {
    results(reply, expected, |kind, d| {
        Ok(match kind {
            op::GET_DATA => OpResult::Data(d.buffer()?, d.stat()?),
            op::GET_CHILDREN | op::GET_CHILDREN2 => OpResult::Children(d.strs()?),
            _ => return Err(Malformed("unknown operation in a multiRead's answer")),
        })
    })
}

/// The results of a `multi` or `multiRead` answer: each a `(type, done, err)` header, then
/// the record `one` reads for its type, or an error code; `expected` of them (`usize::MAX`:
/// any number).
fn results(
    reply: &Reply,
    expected: usize,
    one: impl Fn(i32, &mut proto::Dec<'_>) -> Decoded<OpResult>,
) -> Decoded<Vec<Result<OpResult, i32>>> {
    let mut d = reply.record();
    let mut out = Vec::with_capacity(expected.min(64));
    loop {
        let (kind, done, _err) = proto::multi_header(&mut d)?;
        if done {
            break;
        }
        out.push(match kind {
            op::ERROR => Err(d.i32()?),
            kind => Ok(one(kind, &mut d)?),
        });
        if out.len() > expected {
            return Err(Malformed("more results than operations"));
        }
    }
    if expected != usize::MAX && out.len() != expected {
        return Err(Malformed("fewer results than operations"));
    }
    Ok(out)
}

/// `WhoAmIResponse`.
pub(crate) fn client_infos(reply: &Reply) -> Decoded<Vec<ClientInfo>> {
    let mut d = reply.record();
    let n = d.i32()?.max(0) as usize;
    let mut out = Vec::new();
    for _ in 0..n {
        if d.is_empty() {
            return Err(Malformed("fewer identities than announced"));
        }
        out.push(ClientInfo {
            scheme: d.str()?,
            user: d.str()?,
        });
    }
    Ok(out)
}

impl OpResult {
    /// The result with created paths as the caller names them.
    pub(crate) fn stripped(self, prefix: &str) -> OpResult {
        match self {
            OpResult::Created { path, stat } => OpResult::Created {
                path: super::config::strip(prefix, &path),
                stat,
            },
            other => other,
        }
    }
}
