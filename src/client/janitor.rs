//! The client's second thread: delivers watch events (so a slow watcher never holds up the
//! reader), and is the janitor that never forgets a node this client made while its session
//! lives.
//!
//! A lock that cannot delete its node now, or that stopped waiting for a create or a delete
//! still on the wire, hands it here. Work is tried when it arrives and again after every
//! (re)connect of the session that owns the node; it is dropped once that session is gone,
//! since the node went with it. Nothing here wakes on a timer.
//!
//! A create whose answer was lost is looked for, and its node deleted, for the rest of its
//! session, not only once: a synced listing without it does not prove it will never land.
//! ZooKeeper fences a request a follower forwarded late only by the identity of the member
//! the session is attached to, and that identity can come back (the session moves to another
//! member and, through a handshake the client abandoned, back to the first, whose held link
//! to the leader then delivers the create; `recipes/mutex.md`, "A create that lands late").
//! So such a search stays armed: looked at again after every reconnect of its session (a
//! late landing makes the session's next write fail as moved, and the client reconnect), and,
//! for [`LATE`] after the create was given up on, on every change to the parent's children.

use std::sync::Arc;
use std::time::{Duration, Instant};

use std::collections::VecDeque;

use crossbeam_channel::{Select, Sender, TrySendError};
use log::{debug, info, warn};

use super::api::Client;
use super::config::strip;
use super::conn::Answer;
use super::ensemble::EnsembleConfig;
use super::events::{Chore, Job, Then};
use super::session::{Core, Counters, Inbox, Phase};
use super::types::{WatchEvent, WatchKind};
use crate::error::Error;
use crate::session_id::SessionId;

/// Deadline of each request the janitor makes.
const REQUEST: Duration = Duration::from_secs(5);

/// How long after a create was given up on a change to its parent's children wakes a look for
/// it. A forwarded request can reach the leader only while the link that carried it lives,
/// and the leader closes a follower's link that delivers nothing for `syncLimit` ticks (10 s
/// with ZooKeeper's sample configuration, 2 s ticks and a limit of 5): a minute covers that
/// six times over. After it (or on a link that trickles), the look runs on reconnects only.
pub(crate) const LATE: Duration = Duration::from_secs(60);

/// At most this many searches for lost creates stay armed (each costs a look on every
/// reconnect of its session, shared by the searches under one parent).
const MAX_ARMED: usize = 1024;

/// `DeleteMarked` chores grouped by parent, in the order each parent first came.
fn by_parent(marked: Vec<Chore>) -> Vec<Vec<Chore>> {
    let mut groups: Vec<Vec<Chore>> = Vec::new();
    for chore in marked {
        let parent = |c: &Chore| match c {
            Chore::DeleteMarked { parent, .. } => Some(parent.clone()),
            _ => None,
        };
        let key = parent(&chore);
        match groups
            .iter_mut()
            .find(|g| g.first().map(parent) == Some(key.clone()))
        {
            Some(g) => g.push(chore),
            None => groups.push(vec![chore]),
        }
    }
    groups
}

/// What became of a chore tried once.
enum Next {
    /// Nothing is left to do.
    Done,
    /// Tried again on the next job.
    Again(Chore),
    /// Nothing to do now, but tried again on its session's next reconnect and, within
    /// [`LATE`], on a change to the watched parent.
    Armed(Chore),
}

pub(crate) fn run(core: Arc<Core>, inbox: Inbox) {
    let Inbox {
        jobs,
        holds,
        config,
        marks,
    } = inbox;
    let mut todo: Vec<Chore> = Vec::new();
    let mut armed: Vec<Chore> = Vec::new();
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
            sel.recv(&marks);
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
                // A parent of a lost create changed: its searches look again.
                3 => match op.recv(&marks) {
                    Ok(e) if !matches!(e.kind, WatchKind::SessionLost | WatchKind::Closed) => {
                        let (parent, rest) = armed.into_iter().partition(
                            |c| matches!(c, Chore::DeleteMarked { parent, .. } if *parent == e.path),
                        );
                        armed = rest;
                        todo.extend::<Vec<Chore>>(parent);
                        Ok(Job::Wake)
                    }
                    _ => continue,
                },
                i => {
                    if let Some((tx, event)) = heads.get(i - 4) {
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
            Ok(Job::Wake) => {}
            Ok(Job::Connected(session)) => {
                todo.append(&mut armed);
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
            // Searches for lost creates: one listing per parent.
            let (marked, rest): (Vec<Chore>, Vec<Chore>) = std::mem::take(&mut todo)
                .into_iter()
                .partition(|c| matches!(c, Chore::DeleteMarked { .. }));
            let mut nexts: Vec<Next> = rest
                .into_iter()
                .map(|c| attempt(&client, c, current))
                .collect();
            for group in by_parent(marked) {
                nexts.extend(look_for_marked(&client, group, current));
            }
            for next in nexts {
                match next {
                    Next::Done => {}
                    Next::Again(c) => todo.push(c),
                    Next::Armed(c) => armed.push(c),
                }
            }
            if armed.len() > MAX_ARMED {
                // The oldest first: a create given up on long ago is the least likely to land.
                // (The list is not in that order: a reconnect and a parent's change move
                // searches about.)
                armed.sort_by_key(|c| match c {
                    Chore::DeleteMarked { since, .. } => Some(*since),
                    _ => None,
                });
                let over = armed.len() - MAX_ARMED;
                warn!("janitor: {over} searches for lost creates dropped (more than {MAX_ARMED} armed)");
                armed.drain(..over);
            }
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
                    since: Instant::now(),
                    landings: 1,
                },
            }
        }
        // The server refused the create: nothing landed, nor ever will.
        (Then::Created { .. }, Some(_)) => return None,
        (Then::Created { parent, marker }, None) => Chore::DeleteMarked {
            parent,
            marker,
            session,
            since: Instant::now(),
            landings: 1,
        },
        // Deleted, or already gone (NoNode): nothing left to do.
        (Then::Deleted { .. }, Some(r)) if r.header.err == 0 || r.header.err == -101 => {
            return None
        }
        (Then::Deleted { path }, _) => Chore::Delete { path, session },
    };
    Some(chore)
}

/// Follows the ensemble's configuration `config` if it may: every member's client address
/// given, every server admitted by the follow rule and given a port this client dials.
fn follow(client: &Client, config: &EnsembleConfig) -> Next {
    // A configuration that does not say where every member serves clients
    // is not followed: the members it names alone are not the ensemble.
    let Some(hosts) = config.client_hosts() else {
        warn!(
            "the ensemble's configuration leaves out some members' client \
             addresses: not following it"
        );
        return Next::Done;
    };
    // Every server it names must be one this client may be sent to.
    let rule = &client.core().config.follow_rule;
    if let Some(out) = hosts.iter().find(|h| !rule.admits(&h.host)) {
        warn!(
            "the ensemble's configuration (version {:x}) names {out}, which \
             neither the connect string nor follow_ensemble_hosts admits: not \
             following it",
            config.version
        );
        return Next::Done;
    }
    // Where this client dials them: a TLS client on their TLS ports.
    let hosts = match client.core().config.follow_port.place(hosts) {
        Ok(hosts) => hosts,
        Err(out) => {
            warn!(
                "the ensemble's configuration (version {:x}) names {out}, for \
                 which follow_ensemble_secure_port_with gives no TLS port: not \
                 following it",
                config.version
            );
            return Next::Done;
        }
    };
    let known = client.core().host_list();
    let same = hosts.len() == known.len() && hosts.iter().all(|h| known.contains(h));
    if !hosts.is_empty() && !same {
        info!(
            "the ensemble's configuration (version {:x}) lists other servers: \
             following it",
            config.version
        );
        client.core().update_hosts(hosts);
    }
    Next::Done
}

/// Tries one chore.
fn attempt(client: &Client, chore: Chore, current: Option<SessionId>) -> Next {
    if current != Some(chore.session()) {
        debug!("janitor: dropping work of a session that is gone");
        return Next::Done;
    }
    match chore {
        Chore::FollowEnsemble { session } => {
            match client.ensemble_config_watch(&client.core().config_tx) {
                Ok((config, _)) => {
                    let judged = follow(client, &config);
                    client
                        .core()
                        .config_judged
                        .store(config.version, std::sync::atomic::Ordering::SeqCst);
                    judged
                }
                Err(e) if again(&e) => Next::Again(Chore::FollowEnsemble { session }),
                Err(e) => {
                    warn!("janitor: cannot read the ensemble's configuration: {e}");
                    Next::Done
                }
            }
        }
        Chore::Delete { path, session } => match client.only_on(session).delete(&path) {
            Ok(()) => {
                debug!("janitor: deleted {path}");
                Next::Done
            }
            // Not sent: the session is gone, and its node with it.
            Err(Error::SessionLost { .. }) => Next::Done,
            Err(e) if again(&e) => Next::Again(Chore::Delete { path, session }),
            Err(e) => {
                warn!("janitor: cannot delete {path}: {e}; giving up on it");
                Next::Done
            }
        },
        Chore::DeleteMarked { .. } => look_for_marked(client, vec![chore], current)
            .pop()
            .unwrap_or(Next::Done),
        Chore::WatchHold { path, session } => {
            if client.core().is_tracked_hold(&path) && !client.watch_hold_again(&path) {
                return Next::Again(Chore::WatchHold { path, session });
            }
            Next::Done
        }
    }
}

/// Looks for the nodes of lost creates under one parent (`chores`: `DeleteMarked` of it, as
/// many as are due), with one listing: each found is deleted; a search that finds nothing
/// stays armed. Returns what became of each.
fn look_for_marked(client: &Client, chores: Vec<Chore>, current: Option<SessionId>) -> Vec<Next> {
    let (mut live, gone): (Vec<Chore>, Vec<Chore>) = chores
        .into_iter()
        .partition(|c| current == Some(c.session()));
    let mut out: Vec<Next> = gone.into_iter().map(|_| Next::Done).collect();
    let Some(Chore::DeleteMarked { parent, .. }) = live.first() else {
        return out;
    };
    let parent = parent.clone();
    let watch = live
        .iter()
        .any(|c| matches!(c, Chore::DeleteMarked { since, .. } if since.elapsed() < LATE));
    // The member we talk to may not have applied the create yet (it landed through another,
    // or our answer was lost): a listing there would miss a node that shows up later. A
    // `sync` first makes it catch up with everything the leader committed before, our create
    // included if it was applied. A listing without the marker still does not prove the
    // create will never land (see the module's notes): the search stays armed, and within
    // `LATE` the listing watches the parent.
    let listed = client.sync(&parent).and_then(|()| {
        if watch {
            client.children_watch(&parent, &client.core().marks_tx)
        } else {
            client.children(&parent)
        }
    });
    let children = match listed {
        Ok(c) => c,
        Err(e) if again(&e) => {
            out.extend(live.into_iter().map(Next::Again));
            return out;
        }
        // No parent: a create under it fails, unless the parent is made again first (a
        // container reaped and made again by the next round of a barrier): within `LATE`, its
        // creation wakes the search, as a change to its children would.
        Err(e) if e.is_no_node() => {
            if watch {
                if let Err(e) = client.exists_watch(&parent, &client.core().marks_tx) {
                    debug!("janitor: cannot watch for {parent}: {e}");
                }
            }
            out.extend(live.into_iter().map(Next::Armed));
            return out;
        }
        Err(e) => {
            warn!("janitor: cannot look under {parent}: {e}; giving up on it");
            out.extend(live.iter().map(|_| Next::Done));
            return out;
        }
    };
    for chore in live.drain(..) {
        let Chore::DeleteMarked {
            parent: of,
            marker,
            session,
            since,
            landings,
        } = chore
        else {
            out.push(Next::Done);
            continue;
        };
        let found: Vec<&String> = children
            .iter()
            .filter(|c| c.contains(marker.as_str()))
            .collect();
        // Each create under the marker makes at most one node: once as many nodes as creates
        // went out unanswered are deleted, nothing is left to look for.
        let mut left = landings;
        let mut retry = false;
        for child in found {
            let path = crate::paths::join(&parent, child);
            match attempt(client, Chore::Delete { path, session }, current) {
                Next::Again(_) => retry = true,
                _ => left = left.saturating_sub(1),
            }
        }
        let chore = Chore::DeleteMarked {
            parent: of,
            marker,
            session,
            since,
            landings: left,
        };
        out.push(if retry {
            Next::Again(chore)
        } else if left == 0 {
            Next::Done
        } else {
            Next::Armed(chore)
        });
    }
    out
}

fn again(e: &Error) -> bool {
    e.answer_lost()
}
