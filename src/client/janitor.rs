//! The janitor: never forgets a node this client made while its session lives.
//!
//! A lock that cannot delete its node now (the connection is down), or that stopped waiting for
//! a create that may still land, hands the node to the janitor. The janitor retries until the
//! node is gone or the session that owns it is gone (and the node with it). It also clears the
//! transport's local watchers that can never fire, which the transport would otherwise keep.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver, Sender};
use log::{debug, warn};
use zookeeper::{WatcherType, ZkError, ZkResult};

use super::session::Core;
use super::state::SessionId;

/// How often pending chores are tried again.
const TICK: Duration = Duration::from_millis(200);
/// Deadline of each request the janitor makes.
const REQUEST: Duration = Duration::from_secs(5);

/// Work handed to the janitor. Paths include the client's chroot and namespace.
pub(crate) enum Chore {
    /// Delete this node while `session` lives.
    Delete { path: String, session: SessionId },
    /// A create nobody waits for any more: once it resolves, remove what it made, which is the
    /// child of `parent` whose name contains `marker`.
    Abandoned {
        result: Receiver<ZkResult<String>>,
        parent: String,
        marker: String,
        session: SessionId,
    },
    /// Delete every child of `parent` whose name contains `marker`.
    DeleteMarked {
        parent: String,
        marker: String,
        session: SessionId,
    },
    /// Drop the transport's local watchers on a path whose node is gone.
    ForgetWatches { path: String },
}

pub(crate) fn run(core: Arc<Core>, chores: Receiver<Chore>, stop: Receiver<()>) {
    let mut pending: Vec<Chore> = Vec::new();
    loop {
        select! {
            recv(stop) -> _ => return,
            recv(chores) -> c => match c {
                Ok(c) => pending.push(c),
                Err(_) => return,
            },
            default(TICK) => {}
        }
        if pending.is_empty() || !core.is_connected() {
            continue;
        }
        let current = core.session_id();
        let mut keep = Vec::new();
        for chore in pending.drain(..) {
            if let Some(again) = attempt(&core, chore, current) {
                keep.push(again);
            }
        }
        pending = keep;
    }
}

fn call<T: Send + 'static>(
    core: &Core,
    f: impl FnOnce(&zookeeper::ZooKeeper) -> ZkResult<T> + Send + 'static,
) -> ZkResult<T> {
    match core.call(Some(Instant::now() + REQUEST), f) {
        Ok((r, _)) => r,
        Err(_) => Err(ZkError::ConnectionLoss),
    }
}

/// Tries one chore; returns it if it must be tried again.
fn attempt(core: &Core, chore: Chore, current: Option<SessionId>) -> Option<Chore> {
    match chore {
        Chore::Delete { path, session } => {
            if current != Some(session) {
                debug!("janitor: {path} went with session {session}");
                return None;
            }
            let p = path.clone();
            match call(core, move |zk| zk.delete(&p, None)) {
                Ok(()) | Err(ZkError::NoNode) => {
                    debug!("janitor: deleted {path}");
                    None
                }
                Err(ZkError::ConnectionLoss) => Some(Chore::Delete { path, session }),
                Err(e) => {
                    warn!("janitor: cannot delete {path}: {e:?}; giving up on it");
                    None
                }
            }
        }
        Chore::Abandoned {
            result,
            parent,
            marker,
            session,
        } => match result.try_recv() {
            Ok(Ok(path)) => attempt(core, Chore::Delete { path, session }, current),
            Ok(Err(_)) | Err(crossbeam_channel::TryRecvError::Disconnected) => attempt(
                core,
                Chore::DeleteMarked {
                    parent,
                    marker,
                    session,
                },
                current,
            ),
            Err(crossbeam_channel::TryRecvError::Empty) => Some(Chore::Abandoned {
                result,
                parent,
                marker,
                session,
            }),
        },
        Chore::DeleteMarked {
            parent,
            marker,
            session,
        } => {
            if current != Some(session) {
                return None;
            }
            let p = parent.clone();
            let children = match call(core, move |zk| zk.get_children(&p, false)) {
                Ok(c) => c,
                Err(ZkError::NoNode) => return None,
                Err(_) => {
                    return Some(Chore::DeleteMarked {
                        parent,
                        marker,
                        session,
                    })
                }
            };
            let mut again = false;
            for child in children.into_iter().filter(|c| c.contains(&marker)) {
                let path = format!("{parent}/{child}");
                again |= attempt(core, Chore::Delete { path, session }, current).is_some();
            }
            again.then_some(Chore::DeleteMarked {
                parent,
                marker,
                session,
            })
        }
        Chore::ForgetWatches { path } => {
            // The server has no watch there (the node is gone), so it answers NoWatcher; the
            // transport drops its local entries for the path whatever the answer.
            let p = path.clone();
            let _ = call(core, move |zk| zk.remove_watches(&p, WatcherType::Data));
            None
        }
    }
}

/// Where chores are sent.
pub(crate) type Chores = Sender<Chore>;
