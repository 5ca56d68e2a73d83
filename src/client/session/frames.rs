//! What each frame from the server means: answers complete their requests and say what the
//! leader has certainly seen of the session, notifications fire watches, and some answers end
//! the session. Whichever thread reads a frame (the I/O thread, or a caller reading its own
//! answer: see `turn`) takes it here, one at a time, in the order the frames came.

use super::*;

/// The wire code of `NoNode`, for which an `exists` still sets its watch.
const NO_NODE: i32 = -101;
const SESSION_EXPIRED: i32 = -112;
const UNIMPLEMENTED: i32 = -6;
pub(super) const SESSION_CLOSED_REQUIRE_AUTH: i32 = -124;

/// The connection's keep-alives, and what its answers prove the leader has seen.
pub(super) struct Beats {
    /// When the unanswered ping went out, on the lease clock (`clock`).
    pub(super) ping_sent: Option<Instant>,
    /// A lease heartbeat (a check-only transaction) waits for its answer.
    pub(super) heartbeat_out: bool,
    /// When the last heartbeat was answered: the next goes out a tick later at the earliest,
    /// so that it can vouch for the touch before it (see `touches`).
    pub(super) heartbeat_answered: Option<Instant>,
    pub(super) touches: Touches,
    /// A read-only server: it has no leader, so nothing it answers extends the lease.
    pub(super) read_only: bool,
    /// When the latest answer came: the server answers a session's requests in order, so the
    /// next one waited only from then (or from its send, if later). On the lease clock.
    pub(super) last_answer: Option<Instant>,
    /// An answer said the session is over: the connection ends here.
    pub(super) ended: Option<Ended>,
    /// The latest frame was an older server's refusal of an opcode it does not know: if the
    /// connection ends now, it ended for that (the server closes after one), not for a
    /// restart.
    pub(super) refused_last: bool,
    /// When the latest frame came.
    pub(super) last_recv: Instant,
}

impl Beats {
    /// A new connection's: `read_only` if its server is read-only (no heartbeat there).
    pub(super) fn new(read_only: bool, tick: Duration) -> Beats {
        Beats {
            ping_sent: None,
            heartbeat_out: read_only,
            heartbeat_answered: None,
            touches: Touches::new(tick),
            read_only,
            last_answer: None,
            ended: None,
            refused_last: false,
            last_recv: Instant::now(),
        }
    }
}

/// How the server ended the session in an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ended {
    /// `SessionExpired`: LOST now, not when the server closes the connection.
    Expired,
    /// `SessionClosedRequireSaslAuth`: the server enforces authentication this client does not
    /// have; it stops, as for refused credentials.
    AuthRequired,
}

impl Core {
    /// Takes one frame, whichever thread read it. `Err` with why if the connection ends with
    /// it: a frame the protocol does not allow, or an answer that ends the session.
    pub(super) fn take_frame(&self, frame: Vec<u8>) -> std::result::Result<(), String> {
        let mut beats = self.beats.lock();
        beats.last_recv = Instant::now();
        if let Err(e) = self.on_frame(frame, &mut beats) {
            return Err(format!(
                "the server sent what the protocol does not allow: {}",
                e.0
            ));
        }
        match beats.ended {
            Some(ended) => Err(format!("the server ended the session ({ended:?})")),
            None => Ok(()),
        }
    }

    /// One frame from the server.
    fn on_frame(
        &self,
        frame: Vec<u8>,
        beats: &mut Beats,
    ) -> std::result::Result<(), proto::Malformed> {
        let mut d = Dec::new(&frame);
        let header = ReplyHeader::decode(&mut d)?;
        beats.refused_last = false;
        if header.zxid > 0 {
            self.last_zxid.fetch_max(header.zxid, Ordering::SeqCst);
        }
        match header.xid {
            xid::NOTIFICATION => {
                let n = Notification::decode(&mut d)?;
                let to = self.watches.lock().fire(&n);
                if !to.is_empty() {
                    self.counters
                        .watch_events
                        .fetch_add(to.len() as u64, Ordering::Relaxed);
                    let event = WatchEvent {
                        kind: n.kind,
                        path: strip_owned(&self.config.prefix, n.path),
                    };
                    // An unbounded channel never blocks: it gets the event from here, one
                    // thread hop sooner (a lock's waiter wakes at once). A bounded one may be
                    // full, so the event thread does the (possibly blocking) send; each channel
                    // always goes one way, so its events stay in order.
                    // Work to do before waking anyone (a waiter's next read) goes out first.
                    for w in &to {
                        if let Some(first) = &w.on_fire {
                            first();
                        }
                    }
                    let (direct, queued): (Vec<_>, Vec<_>) = to
                        .into_iter()
                        .map(|w| w.tx)
                        .partition(|tx| tx.capacity().is_none());
                    for tx in direct {
                        let _ = tx.send(event.clone());
                    }
                    if !queued.is_empty() {
                        self.job(Job::Deliver(queued, event));
                    }
                }
            }
            // A ping keeps the connection alive. It does not extend the lease bound: a
            // follower answers it alone, also while cut off from the leader, which may be
            // expiring the session meanwhile.
            xid::PING => {
                let sent = beats
                    .ping_sent
                    .take()
                    .ok_or(proto::Malformed("unasked ping answer"))?;
                if let Some(ended) = ended_by(header.err) {
                    // A server that ends the session answers whatever came first with it,
                    // a ping too.
                    beats.ended = Some(ended);
                    return Ok(());
                }
                // The server touched the session for it, which the leader learns later.
                // Not counted as the answer before the next one (`last_answer`): that one's
                // wait is measured from its own send or an earlier answer, the safe side.
                beats.touches.touched(sent, clock::lease_now());
            }
            xid::SET_WATCHES => {
                if let Some(ended) = ended_by(header.err) {
                    beats.ended = Some(ended);
                } else if header.err != 0 {
                    warn!(
                        "the server did not restore the watches (error {})",
                        header.err
                    );
                }
            }
            xid::AUTH => {
                let waiter = self
                    .auth_waiters
                    .lock()
                    .pop_front()
                    .ok_or(proto::Malformed("an auth answer nobody asked for"))?;
                // Accepted credentials are replayed on every later connection: kept before the
                // caller hears, so a connection that dies right after cannot lose them.
                if header.err == 0 {
                    let kept = (waiter.scheme, waiter.credentials);
                    let mut added = self.added_auth.lock();
                    // Once each: a caller who heard nothing in time may well ask again.
                    if !added.contains(&kept) {
                        added.push(kept);
                    }
                }
                let _ = waiter.answer.send(header.err);
            }
            x => {
                let pending = self.outbox.complete(x, header.err)?;
                // An opcode the server does not know is refused ahead of its pipeline, with
                // zxid -1, and the connection closed after it; a feature switched off is
                // refused through the pipeline (a real zxid) and the connection stays.
                beats.refused_last = header.err == UNIMPLEMENTED && header.zxid == -1;
                if let Some(w) = pending.watch.as_ref() {
                    if header.err == 0 || (header.err == NO_NODE && w.kind == WatchType::Exist) {
                        self.watches.lock().add(w.as_set(header.err == 0));
                    } else if header.err == NO_NODE && pending.hold {
                        // A held node that was gone before its watch was set.
                        self.hold_gone(&strip(&self.config.prefix, &w.path));
                    }
                }
                let now = Instant::now();
                // What the answer proves about the session is kept on the lease clock.
                let lease_now = clock::lease_time(now);
                if pending.heartbeat {
                    beats.heartbeat_out = false;
                    beats.heartbeat_answered = Some(now);
                    if header.err != 0 {
                        // NoAuth: our identity cannot read the root we check; the bound then
                        // moves only with our own writes, and holds lapse.
                        warn!(
                            "the lease heartbeat failed (error {}): held locks lapse unless \
                             this client's writes go through; it needs READ on {}",
                            header.err,
                            self.config.full("/")
                        );
                    }
                }
                // A write's answer from the leader's pipeline vouches for the touches the
                // follower passed on before it forwarded the write (see `touches`). Only
                // answers given after the leader checked the session count: not one from the
                // server we talk to alone (a read-only one, a throttled or refused request).
                let err = header.err;
                let reply = conn::Reply { header, frame };
                // Its own wait: from its send, or from the answer before it if that came later
                // (it queued behind ours).
                let waited_from = beats
                    .last_answer
                    .replace(lease_now)
                    .map_or(pending.sent, |a| a.max(pending.sent));
                if pending.anchors != Anchors::No && !beats.read_only {
                    let checked = request::leader_vouched(pending.anchors, &reply);
                    let through = Through {
                        sent: pending.sent,
                        waited_from,
                        answered: lease_now,
                        checked,
                    };
                    if let Some(touch) = beats.touches.leader_answered(through) {
                        self.answered(touch);
                    }
                }
                if err == 0 || err == NO_NODE {
                    beats.touches.touched(pending.sent, lease_now);
                }
                pending.answer.fulfil(reply);
                beats.ended = ended_by(err).or(beats.ended);
            }
        }
        Ok(())
    }

    /// The leader has certainly touched the current session at or after `touch`.
    fn answered(&self, touch: Instant) {
        let mut status = self.status.lock();
        if status.session.is_some() {
            status.leader_saw = Some(status.leader_saw.map_or(touch, |t| t.max(touch)));
        }
    }
}

/// The answers that end the session, whatever they answer.
pub(super) fn ended_by(err: i32) -> Option<Ended> {
    match err {
        SESSION_EXPIRED => Some(Ended::Expired),
        SESSION_CLOSED_REQUIRE_AUTH => Some(Ended::AuthRequired),
        _ => None,
    }
}
