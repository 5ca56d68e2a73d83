//! The client's second thread: delivers watch events (so a slow watcher never holds up the
//! reader), and is the janitor that never forgets a node this client made while its session
//! lives.
//!
//! A lock that cannot delete its node now, or that stopped waiting for a create or a delete
//! still on the wire, hands it here. Work is tried when it arrives and again after every
//! (re)connect of the session that owns the node; it is dropped once that session is gone,
//! since the node went with it. Nothing here wakes on a timer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Select;
use log::{debug, warn};

use super::api::Client;
use super::config::strip;
use super::conn::Answer;
use super::events::{Chore, Job, Then};
use super::session::{Core, Inbox, Phase};
use super::types::{WatchEvent, WatchKind};
use crate::error::Error;
use crate::session_id::SessionId;

/// Deadline of each request the janitor makes.
const REQUEST: Duration = Duration::from_secs(5);

pub(crate) fn run(core: Arc<Core>, inbox: Inbox) {
    let Inbox { jobs, holds } = inbox;
    let mut todo: Vec<Chore> = Vec::new();
    loop {
        let job = {
            let mut sel = Select::new();
            sel.recv(&jobs);
            sel.recv(&holds);
            let op = sel.select();
            if op.index() == 1 {
                if let Ok(event) = op.recv(&holds) {
                    on_hold_event(&core, event);
                }
                continue;
            }
            op.recv(&jobs)
        };
        match job {
            Ok(Job::Deliver(to, event)) => {
                for tx in to {
                    let _ = tx.send(event.clone());
                }
                continue;
            }
            Ok(Job::Chore(chore)) => todo.push(chore),
            Ok(Job::Connected(session)) => todo.retain(|c| c.session() == session),
            Ok(Job::Answered {
                answer,
                then,
                session,
            }) => todo.extend(resolved(&core, answer, then, session)),
            Ok(Job::Stop) | Err(_) => return,
        }
        if core.phase() == Phase::Connected {
            let current = core.session_id();
            let client = Client::background(core.clone(), Instant::now() + REQUEST);
            todo = todo
                .into_iter()
                .filter_map(|c| attempt(&client, c, current))
                .collect();
        }
    }
}

/// A watch on a held node fired: deleted means the hold is over; anything else (a revoke
/// written into it) used the one-shot watch up, so it is set again.
fn on_hold_event(core: &Arc<Core>, event: WatchEvent) {
    match event.kind {
        WatchKind::Deleted => core.hold_gone(&event.path),
        _ if core.is_tracked_hold(&event.path) => {
            if let Some(session) = core.session_id() {
                let sent =
                    Client::background(core.clone(), Instant::now()).watch_hold_again(&event.path);
                if !sent {
                    core.job(Job::Chore(Chore::WatchHold {
                        path: event.path,
                        session,
                    }));
                }
            }
        }
        _ => {}
    }
}

/// The chore an awaited answer leaves, if any.
fn resolved(core: &Core, answer: Answer, then: Then, session: SessionId) -> Option<Chore> {
    let chore = match (then, answer) {
        (Then::Created { parent, marker }, Some(reply)) if reply.header.err == 0 => {
            match reply.record().str() {
                Ok(full) => Chore::Delete {
                    path: strip(&core.config.prefix, &full),
                    session,
                },
                Err(_) => Chore::DeleteMarked {
                    parent,
                    marker,
                    session,
                },
            }
        }
        (Then::Created { parent, marker }, _) => Chore::DeleteMarked {
            parent,
            marker,
            session,
        },
        // Deleted, or already gone (NoNode): nothing left to do.
        (Then::Deleted { .. }, Some(r)) if r.header.err == 0 || r.header.err == -101 => {
            return None
        }
        (Then::Deleted { path }, _) => Chore::Delete { path, session },
    };
    Some(chore)
}

/// Tries one chore; returns it if it must be tried again.
fn attempt(client: &Client, chore: Chore, current: Option<SessionId>) -> Option<Chore> {
    if current != Some(chore.session()) {
        debug!("janitor: dropping work of a session that is gone");
        return None;
    }
    match chore {
        Chore::Delete { path, session } => match client.delete(&path) {
            Ok(()) => {
                debug!("janitor: deleted {path}");
                None
            }
            Err(e) if again(&e) => Some(Chore::Delete { path, session }),
            Err(e) => {
                warn!("janitor: cannot delete {path}: {e}; giving up on it");
                None
            }
        },
        Chore::DeleteMarked {
            parent,
            marker,
            session,
        } => {
            // The member we talk to may not have applied the create yet (it landed through
            // another, or our answer was lost): a listing there would miss a node that shows
            // up later and stays for the session's life. A `sync` first makes it catch up with
            // everything the leader committed before, our create included: our requests reach
            // the leader in order, and a create still on its way when the session moved to
            // this member is refused there (session moved). Only a synced listing without the
            // marker proves the create never landed.
            let children = match client.sync(&parent).and_then(|()| client.children(&parent)) {
                Ok(c) => c,
                Err(e) if again(&e) => {
                    return Some(Chore::DeleteMarked {
                        parent,
                        marker,
                        session,
                    })
                }
                Err(_) => return None,
            };
            let mut retry = false;
            for child in children.into_iter().filter(|c| c.contains(&marker)) {
                let path = crate::paths::join(&parent, &child);
                retry |= attempt(client, Chore::Delete { path, session }, current).is_some();
            }
            retry.then_some(Chore::DeleteMarked {
                parent,
                marker,
                session,
            })
        }
        Chore::WatchHold { path, session } => {
            if client.core().is_tracked_hold(&path) && !client.watch_hold_again(&path) {
                return Some(Chore::WatchHold { path, session });
            }
            None
        }
    }
}

fn again(e: &Error) -> bool {
    matches!(e, Error::ConnectionLoss | Error::Timeout { .. })
}
