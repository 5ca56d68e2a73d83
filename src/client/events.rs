//! What the client's second thread is given to do: watch events to deliver, and clean-up for
//! the janitor. Plain data, so that the session layer and the calls can hand work over without
//! depending on the thread that does it.

use crossbeam_channel::Sender;

use super::conn::Answer;
use super::types::WatchEvent;
use crate::session_id::SessionId;

/// Work for the event thread.
pub(crate) enum Job {
    /// A fired watch, for these channels.
    Deliver(Vec<Sender<WatchEvent>>, WatchEvent),
    Chore(Chore),
    /// The session (re)connected: pending chores of it can go now.
    Connected(SessionId),
    /// Chores were made due by the event thread itself (a watched parent changed): try them.
    Wake,
    /// The answer to a request nobody waited for any more (`None`: its connection died):
    /// finish its work.
    Answered {
        answer: Answer,
        then: Then,
        session: SessionId,
    },
    Stop,
}

/// Clean-up handed to the janitor. Paths are the client's (without chroot or namespace).
pub(crate) enum Chore {
    /// Delete this node while `session` lives.
    Delete { path: String, session: SessionId },
    /// Delete every child of `parent` whose name contains `marker`, now and whenever it shows
    /// up later while `session` lives (a create whose answer was lost can land after a look
    /// found nothing); `since`: when the create was given up on; `landings`: how many nodes
    /// the search deletes before it is done (each create under the marker makes one at most,
    /// and may land even after another's node was deleted).
    DeleteMarked {
        parent: String,
        marker: String,
        session: SessionId,
        since: std::time::Instant,
        landings: u32,
    },
    /// Set the watch on a held node once connected (it could not go out when the hold began).
    WatchHold { path: String, session: SessionId },
    /// Read the ensemble's configuration (watching it) and take its servers as the client's
    /// list (`ClientBuilder::follow_ensemble`).
    FollowEnsemble { session: SessionId },
}

/// What an awaited request was.
pub(crate) enum Then {
    /// A protected create under `parent`: whatever it made goes.
    Created { parent: String, marker: String },
    /// The delete of `path`: if it did not happen, it is tried again.
    Deleted { path: String },
}

impl Chore {
    /// The session whose node the chore is about.
    pub fn session(&self) -> SessionId {
        match self {
            Chore::Delete { session, .. }
            | Chore::DeleteMarked { session, .. }
            | Chore::WatchHold { session, .. }
            | Chore::FollowEnsemble { session } => *session,
        }
    }
}
