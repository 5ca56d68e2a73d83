//! What the lock recipes use of the client: protected creates, guaranteed deletes, session
//! tokens, the watch on held nodes; and the test hooks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use crate::acl::Acl;
use crate::client::config::strip_owned;
use crate::client::conn::Outgoing;
use crate::client::events::{Chore, Job, Then};
use crate::client::proto::Names;
use crate::client::request::{self, Req};
use crate::client::token;
use crate::client::types::{CreateMode, WatchEvent};
use crate::client::watches::{WatchReg, WatchType};
use crate::error::{Error, Result};
use crate::paths;
use crate::retry::RetryPolicy;
use crate::session_id::SessionId;

use super::{check_data, checked, Client};

impl Client {
    /// The client's retry policy.
    pub(crate) fn retry_policy(&self) -> &RetryPolicy {
        &self.core.config.retry
    }

    /// The ACL nodes get unless a recipe gives its own.
    pub(crate) fn default_acl(&self) -> &[Acl] {
        &self.core.config.acl
    }

    /// Waits for a live session until `deadline` (or the connection timeout) and returns it;
    /// `Timeout` when a deadline was given and passed.
    pub(crate) fn wait_session(
        &self,
        deadline: Option<Instant>,
        what: impl std::fmt::Display,
    ) -> Result<SessionId> {
        let fallback = Instant::now() + self.core.config.connection_timeout;
        match self.core.wait_connected(deadline.unwrap_or(fallback)) {
            Ok(id) => Ok(id),
            Err(Error::ConnectionLoss { cause }) if deadline.is_some() => {
                Err(Error::timeout(format!("a session to {what}"), Duration::ZERO).caused_by(cause))
            }
            Err(e) => Err(e),
        }
    }

    /// True once the connection has been silent for a whole session timeout.
    pub(crate) fn silent_too_long(&self) -> bool {
        self.core.silent_too_long()
    }

    /// A token that is marked when `session` is lost (or suspended, with `lost_on_suspend`);
    /// `None` if `session` is no longer the client's.
    pub(crate) fn session_token(
        &self,
        session: SessionId,
        lost_on_suspend: bool,
    ) -> Option<Arc<token::SessionToken>> {
        self.core.session_token(session, lost_on_suspend)
    }

    /// Creates an ephemeral sequential node whose name carries `marker` under `parent`, for
    /// the locks, and lists `parent` right behind it without waiting in between: the server
    /// answers a session's requests in order, so the listing includes the new node, and an
    /// uncontended lock is had in one round trip. Returns the node's path, the session it was
    /// made under, and the listing if it came (`None` if only the listing failed). With
    /// `line_watch`, the listing also leaves a children watch reporting there.
    ///
    /// Never retried: `ConnectionLoss` when the create's answer is lost. At this handle's
    /// deadline a create still on the wire is handed to the janitor, which removes whatever it
    /// makes, and the caller gets `Timeout`.
    pub(crate) fn create_protected(
        &self,
        parent: &str,
        prefix: &str,
        data: &[u8],
        marker: &str,
        acl: &[Acl],
        line_watch: Option<&Sender<WatchEvent>>,
    ) -> Result<(String, SessionId, Option<Names>)> {
        let path = paths::join(parent, prefix);
        paths::validate(&path, true)?;
        check_data(data)?;
        let (full, full_parent) = (self.full(&path), self.full(parent));
        // Neither answer's stat is used: the plain forms, 136 bytes less from the server.
        let create = Req::Create {
            path: &full,
            data,
            acl,
            mode: CreateMode::EphemeralSequential,
            stat: false,
        };
        let list = Req::GetChildren {
            path: full_parent.as_ref().into(),
            watch: line_watch.map(|tx| WatchReg::new(&full_parent, WatchType::Child, tx)),
            stat: false,
        };
        let [ticket, listed] = self.send([create.outgoing(), list.outgoing()])?;
        let session = ticket.session;
        // The server answers in order, so the listing's answer comes right after the create's:
        // waiting for the listing first wakes this thread once for both.
        let listing = self.core.await_answer(&listed.answer, self.deadline);
        if let Some(d) = self.deadline {
            if !ticket.answer.ready(d) {
                self.core.finish_later(
                    ticket.answer,
                    Then::Created {
                        parent: parent.to_owned(),
                        marker: marker.to_owned(),
                    },
                    session,
                );
                return Err(Error::timeout(
                    format!("the create of {path}"),
                    Duration::ZERO,
                ));
            }
        }
        let reply = self.wait(ticket, &path, None)?;
        let created = request::created_path(&reply)?;
        // A listing that failed (or did not come by the deadline) is simply not used.
        let line = match listing {
            Ok(Some(reply)) => checked(reply, parent)
                .ok()
                .and_then(|r| r.record().names().ok()),
            _ => None,
        };
        Ok((
            strip_owned(&self.core.config.prefix, created),
            session,
            line,
        ))
    }

    /// Deletes a node of `session`'s, waiting at most until this handle's deadline; what
    /// cannot finish by then is finished by the janitor while the session lives. True if the
    /// node is certainly gone now (the server answered the delete, or the session is not the
    /// client's any more); false if the janitor has it.
    pub(crate) fn remove_own(&self, path: &str, session: SessionId) -> bool {
        // Made only when needed: every release passes here.
        let chore = || {
            Job::Chore(Chore::Delete {
                path: path.to_owned(),
                session,
            })
        };
        if paths::validate(path, false).is_err() || self.session_id() != Some(session) {
            return true;
        }
        let full = self.full(path);
        let req = Req::Delete {
            path: &full,
            version: -1,
        };
        // Only on a connection of `session`: the node went with it otherwise, and a path a
        // newer session made since (a queue's item lock) must not be deleted for it.
        let ticket = match self.only_on(session).send([req.outgoing()]) {
            Ok([t]) => t,
            Err(Error::SessionLost { .. }) => return true,
            Err(_) => {
                self.core.job(chore());
                return false;
            }
        };
        let answered = match self.deadline {
            Some(d) => ticket.answer.ready(d),
            None => true,
        };
        if !answered {
            self.core.finish_later(
                ticket.answer,
                Then::Deleted {
                    path: path.to_owned(),
                },
                session,
            );
            return false;
        }
        match self.wait(ticket, path, None) {
            Ok(_) => true,
            Err(e) if e.is_no_node() => true,
            Err(_) => {
                self.core.job(chore());
                false
            }
        }
    }

    /// Watches a held node: if anyone deletes it (an operator, a revocation tool), `token` is
    /// marked lost, so the hold's `is_held()` turns false, `check()` fails and `lost()` fires.
    /// The watch goes out without waiting for its answer: it costs no round trip.
    pub(crate) fn watch_hold(&self, path: &str, token: &Arc<token::SessionToken>) {
        self.core.track_hold(path, token);
        // Never waits for a connection: without one, the event thread sets it on reconnect.
        let now = self.with_deadline(Instant::now());
        if !now.watch_hold_again(path) {
            self.core.job(Job::Chore(Chore::WatchHold {
                path: path.to_owned(),
                session: token.session,
            }));
        }
    }

    /// (Re)sets the watch on a held node without waiting for the answer (the reader thread
    /// marks the hold lost if the node is already gone). False if it could not be sent.
    pub(crate) fn watch_hold_again(&self, path: &str) -> bool {
        let full = self.full(path);
        let req = Req::GetData {
            path: full.as_ref().into(),
            watch: Some(WatchReg::new(
                &full,
                WatchType::Data,
                self.core.hold_watch_tx(),
            )),
        };
        let out = Outgoing {
            hold: true,
            ..req.outgoing()
        };
        self.send([out]).is_ok()
    }

    /// Stops watching a held node (it is being released).
    pub(crate) fn unwatch_hold(&self, path: &str) {
        self.core.untrack_hold(path);
        self.core
            .forget_watch(&self.full(path), self.core.hold_watch_tx());
    }

    /// Hands the janitor the removal of every child of `parent` carrying `marker`, now and
    /// whenever one turns up while `session` lives, until `landings` such nodes are gone
    /// (one per create under the marker that may have made a node). The marker must be one
    /// no later node of `session`'s will carry (a `ProtectedId` never used again).
    pub(crate) fn remove_marked_later(
        &self,
        parent: &str,
        marker: &str,
        session: SessionId,
        landings: u32,
    ) {
        if landings == 0 {
            return;
        }
        self.core.job(Job::Chore(Chore::DeleteMarked {
            parent: parent.to_owned(),
            marker: marker.to_owned(),
            session,
            since: Instant::now(),
            landings,
        }));
    }

    /// Test hook: hands the janitor the search for a create of the current session under
    /// `parent` whose name carries `marker`, given up on `given_up_ago`.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn testing_remove_marked_later(&self, parent: &str, marker: &str, given_up_ago: Duration) {
        let Some(session) = self.session_id() else {
            return;
        };
        let now = Instant::now();
        self.core.job(Job::Chore(Chore::DeleteMarked {
            parent: parent.to_owned(),
            marker: marker.to_owned(),
            session,
            since: now.checked_sub(given_up_ago).unwrap_or(now),
            landings: 1,
        }));
    }

    /// Reads the connection on this thread while no one else does, until `done` (checked
    /// before each frame) or `until`; see `Core::read_until`.
    pub(crate) fn read_until(
        &self,
        done: impl Fn() -> bool,
        due: impl Fn() -> bool,
        until: Option<Instant>,
    ) {
        self.core.read_until(done, due, until);
    }

    /// Takes `tx` off the watches at `path` (a waiter that gives up).
    pub(crate) fn forget_watch(&self, path: &str, tx: &Sender<WatchEvent>) {
        self.core.forget_watch(&self.full(path), tx);
    }

    /// Test hook: the current session's id and password, as a second client would need them to
    /// take the session over (which is how tests make the server expire it).
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn testing_session_credentials(&self) -> Option<(SessionId, Vec<u8>)> {
        self.core.session_credentials()
    }

    /// Test hook: the version of the latest ensemble configuration this client judged when
    /// following the ensemble (followed or refused), if any.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn testing_config_judged(&self) -> Option<u64> {
        let v = self
            .core
            .config_judged
            .load(std::sync::atomic::Ordering::SeqCst);
        (v != 0).then_some(v)
    }

    /// Test hook: how many watchers the client's registry holds.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn testing_watch_count(&self) -> usize {
        self.core.watch_count()
    }

    /// Test hook: how many turns to read the connection this client's callers and waiters
    /// have taken (the I/O thread's are not counted).
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn testing_reader_turns(&self) -> u64 {
        self.core.reader_turns()
    }
}
