//! Spans for the `tracing` feature: an acquire, a handshake and a reconnect, each with the
//! session id as a field, so that a service on `tracing` sees where a slow call went. Without
//! the feature they cost nothing; the crate's messages go through `log` either way (a
//! `tracing` subscriber takes them with `tracing-log`).

use crate::SessionId;

/// An entered span, left when dropped (nothing without the `tracing` feature).
#[cfg(feature = "tracing")]
pub(crate) struct Entered(#[allow(dead_code)] tracing::span::EnteredSpan);

/// An entered span, left when dropped (nothing without the `tracing` feature).
#[cfg(not(feature = "tracing"))]
pub(crate) struct Entered;

/// A lock's acquire (any recipe), on `path`, under the session current when it began.
#[allow(unused_variables)]
pub(crate) fn acquire(path: &str, session: Option<SessionId>) -> Entered {
    #[cfg(feature = "tracing")]
    {
        let session_id = session.map(|s| s.to_string()).unwrap_or_default();
        Entered(tracing::info_span!("zk_recipes.acquire", path, session_id).entered())
    }
    #[cfg(not(feature = "tracing"))]
    Entered
}

/// A connection's handshake with `server`: a new session's, or a reconnect of `resuming`.
#[allow(unused_variables)]
pub(crate) fn handshake(server: &str, resuming: Option<SessionId>) -> Entered {
    #[cfg(feature = "tracing")]
    {
        let entered = match resuming {
            Some(s) => {
                tracing::info_span!("zk_recipes.reconnect", server, session_id = %s).entered()
            }
            None => tracing::info_span!("zk_recipes.handshake", server).entered(),
        };
        Entered(entered)
    }
    #[cfg(not(feature = "tracing"))]
    Entered
}
