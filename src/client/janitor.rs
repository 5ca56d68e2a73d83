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

use std::collections::VecDeque;

use crossbeam_channel::{Select, Sender, TrySendError};
use log::{debug, info, warn};

use super::api::Client;
use super::config::strip;
use super::conn::Answer;
use super::events::{Chore, Job, Then};
use super::session::{Core, Counters, Inbox, Phase};
use super::types::{WatchEvent, WatchKind};
use crate::error::Error;
use crate::session_id::SessionId;

/// Deadline of each request the janitor makes.
const REQUEST: Duration = Duration::from_secs(5);

pub(crate) fn run(core: Arc<Core>, inbox: Inbox) {
    let Inbox {
        jobs,
        holds,
        config,
    } = inbox;
    let mut todo: Vec<Chore> = Vec::new();
    let mut waiting = Backlog::default();
    // The session whose ensemble configuration is read and watched (a resumed session keeps
    // its watch; a new one sets it again).
    let mut following = None;
    loop {
        let job = {
            let mut sel = Select::new();
            sel.recv(&jobs);
            sel.recv(&holds);
            sel.recv(&config);
            // A full channel never stalls this thread: its events wait here, in order, and
            // go as soon as it has room, while everything else goes on.
            let heads = waiting.heads();
            for (tx, _) in &heads {
                sel.send(tx);
            }
            let op = sel.select();
            match op.index() {
                0 => op.recv(&jobs),
                1 => {
                    if let Ok(event) = op.recv(&holds) {
                        on_hold_event(&core, event);
                    }
                    continue;
                }
                // The configuration changed: read it again (and watch it again). A watch
                // that ended with its session is set again on the next one.
                2 => match (op.recv(&config), core.session_id()) {
                    (Ok(e), Some(session))
                        if !matches!(e.kind, WatchKind::SessionLost | WatchKind::Closed) =>
                    {
                        Ok(Job::Chore(Chore::FollowEnsemble { session }))
                    }
                    _ => continue,
                },
                i => {
                    if let Some((tx, event)) = heads.get(i - 3) {
                        let sent = op.send(tx, event.clone()).is_ok();
                        waiting.sent(tx, sent);
                    }
                    continue;
                }
            }
        };
        match job {
            Ok(Job::Deliver(to, event)) => {
                for tx in to {
                    if waiting.deliver(tx, event.clone()) {
                        Counters::count(&core.counters.watch_backlogs);
                    }
                }
                continue;
            }
            Ok(Job::Chore(chore)) => todo.push(chore),
            Ok(Job::Connected(session)) => {
                todo.retain(|c| c.session() == session);
                // Following the ensemble: its configuration is read (and watched) on every
                // new session; a resumed one keeps its watch.
                if core.config.follow_ensemble && following != Some(session) {
                    following = Some(session);
                    todo.push(Chore::FollowEnsemble { session });
                }
            }
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

/// Events for bounded channels that were full, per channel, oldest first.
#[derive(Default)]
struct Backlog(Vec<(Sender<WatchEvent>, VecDeque<WatchEvent>)>);

impl Backlog {
    /// Sends `event` to `tx` now if it has room and nothing of it waits; otherwise keeps it
    /// (then true). A channel whose receivers are gone gets nothing.
    fn deliver(&mut self, tx: Sender<WatchEvent>, event: WatchEvent) -> bool {
        if let Some((_, queue)) = self.0.iter_mut().find(|(t, _)| t.same_channel(&tx)) {
            queue.push_back(event);
            return true;
        }
        if let Err(TrySendError::Full(event)) = tx.try_send(event) {
            self.0.push((tx, VecDeque::from([event])));
            return true;
        }
        false
    }

    /// Each waiting channel with its oldest event.
    fn heads(&self) -> Vec<(Sender<WatchEvent>, WatchEvent)> {
        self.0
            .iter()
            .filter_map(|(tx, queue)| Some((tx.clone(), queue.front()?.clone())))
            .collect()
    }

    /// The oldest event of `tx` went (`delivered`), or the channel is gone: forget it either
    /// way, and the channel once nothing of it waits.
    fn sent(&mut self, tx: &Sender<WatchEvent>, delivered: bool) {
        if let Some(i) = self.0.iter().position(|(t, _)| t.same_channel(tx)) {
            let queue = &mut self.0[i].1;
            queue.pop_front();
            if !delivered || queue.is_empty() {
                self.0.remove(i);
            }
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
        Chore::FollowEnsemble { session } => {
            match client.ensemble_config_watch(&client.core().config_tx) {
                Ok((config, _)) => {
                    // A configuration that does not say where every member serves clients
                    // is not followed: the members it names alone are not the ensemble.
                    let Some(hosts) = config.client_hosts() else {
                        warn!(
                            "the ensemble's configuration leaves out some members' client \
                             addresses: not following it"
                        );
                        return None;
                    };
                    let known = client.core().host_list();
                    let same =
                        hosts.len() == known.len() && hosts.iter().all(|h| known.contains(h));
                    if !hosts.is_empty() && !same {
                        info!(
                            "the ensemble's configuration (version {:x}) lists other servers: \
                             following it",
                            config.version
                        );
                        client.core().update_hosts(hosts);
                    }
                    None
                }
                Err(e) if again(&e) => Some(Chore::FollowEnsemble { session }),
                Err(e) => {
                    warn!("janitor: cannot read the ensemble's configuration: {e}");
                    None
                }
            }
        }
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
