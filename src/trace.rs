//! Spans for the `tracing` feature: an acquire, a handshake and a reconnect, each with the
//! session id as a field, so that a service on `tracing` sees where a slow call went. Without
//! the feature they open nothing and the compiler drops their bodies; the crate's messages go
//! through `log` either way (a `tracing` subscriber takes them with `tracing-log`).

use crate::SessionId;

#[cfg(feature = "tracing")]
std::thread_local! {
    /// An acquire span is open on this thread: a recipe built on others (a semaphore takes
    /// an internal mutex, then a lease) shows as the one acquire the caller made.
    static IN_ACQUIRE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// An entered span, left when dropped (nothing without the `tracing` feature).
#[cfg(feature = "tracing")]
pub(crate) struct Entered {
    span: Option<tracing::span::EnteredSpan>,
    /// This span set `IN_ACQUIRE`, and clears it when dropped.
    outermost_acquire: bool,
    /// A new session's handshake: its `session_id` is recorded once granted.
    wants_session: bool,
}

/// An entered span, left when dropped (nothing without the `tracing` feature).
#[cfg(not(feature = "tracing"))]
pub(crate) struct Entered;

#[cfg(feature = "tracing")]
impl Drop for Entered {
    fn drop(&mut self) {
        if self.outermost_acquire {
            IN_ACQUIRE.with(|c| c.set(false));
        }
    }
}

impl Entered {
    /// Records the session the span's work ended up on (a handshake learns it last).
    #[allow(unused_variables)]
    pub(crate) fn session(&self, id: SessionId) {
        #[cfg(feature = "tracing")]
        if let Some(span) = self.span.as_ref().filter(|_| self.wants_session) {
            span.record("session_id", tracing::field::display(id));
        }
    }
}

/// A lock's acquire (any recipe), on `path`, under the session current when it began. Inside
/// another acquire on the same thread, nothing is opened.
#[allow(unused_variables)]
pub(crate) fn acquire(path: &str, session: Option<SessionId>) -> Entered {
    #[cfg(feature = "tracing")]
    {
        if IN_ACQUIRE.with(|c| c.replace(true)) {
            return Entered {
                span: None,
                outermost_acquire: false,
                wants_session: false,
            };
        }
        // The id is formatted only if a subscriber takes the span (the macro evaluates its
        // fields then): an acquire with no one listening pays nothing for it.
        let session_id = tracing::field::display(MaybeSession(session));
        Entered {
            span: Some(tracing::info_span!("zk_recipes.acquire", path, session_id).entered()),
            outermost_acquire: true,
            wants_session: false,
        }
    }
    #[cfg(not(feature = "tracing"))]
    Entered
}

/// A session id, or nothing: formatted only if a subscriber records it.
#[cfg(feature = "tracing")]
struct MaybeSession(Option<SessionId>);

#[cfg(feature = "tracing")]
impl std::fmt::Display for MaybeSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(id) => id.fmt(f),
            None => Ok(()),
        }
    }
}

/// A connection's handshake with `server`: a new session's (its id recorded once granted,
/// see [`Entered::session`]), or a reconnect of `resuming`.
#[allow(unused_variables)]
pub(crate) fn handshake(server: impl std::fmt::Display, resuming: Option<SessionId>) -> Entered {
    #[cfg(feature = "tracing")]
    {
        let span = match resuming {
            Some(s) => {
                tracing::info_span!("zk_recipes.reconnect", %server, session_id = %s).entered()
            }
            None => tracing::info_span!(
                "zk_recipes.handshake",
                %server,
                session_id = tracing::field::Empty
            )
            .entered(),
        };
        Entered {
            span: Some(span),
            outermost_acquire: false,
            wants_session: resuming.is_none(),
        }
    }
    #[cfg(not(feature = "tracing"))]
    Entered
}
