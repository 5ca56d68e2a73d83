//! A party that enters and leaves together (Curator's `DistributedDoubleBarrier`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::lock::core::LockCore;
use crate::lock::names::ProtectedId;
use crate::lock::watching::Watching;
use crate::lock::MIN_ATTEMPT;
use crate::{paths, Client, CreateMode, Error, LockOptions, Result, SessionId, ZkCode};

/// The node whose creation lets every member through [`enter`]: Curator's name.
///
/// [`enter`]: DistributedDoubleBarrier::enter
pub const READY_NODE: &str = "ready";

/// A party of processes that begin a phase together and end it together: no member passes
/// [`enter`](Self::enter) before `member_qty` members have entered, and none passes
/// [`leave`](Self::leave) before every member has left. Apache Curator's
/// `DistributedDoubleBarrier`, same nodes: each member is an ephemeral child of the barrier's
/// path, and the member that makes the count creates the `ready` child, whose creation wakes
/// the others.
///
/// A member's node is named like a protected lock node's id (UUID-shaped, carrying its
/// session), so operators can tell whose it is. A member whose session is lost while it
/// enters makes its node again on the next session; one whose session is lost while it leaves
/// has left. A call that returns `false` (its deadline passed) or an error takes the
/// member's node away: nothing of a member that gave up is left behind. Dropping the barrier
/// does the same.
///
/// ```no_run
/// # fn main() -> zk_recipes::Result<()> {
/// use std::time::Duration;
/// use zk_recipes::barriers::DistributedDoubleBarrier;
/// use zk_recipes::Client;
///
/// let client = Client::builder("127.0.0.1:2181").connect()?;
/// // Five workers run each phase together.
/// let barrier = DistributedDoubleBarrier::new(&client, "/jobs/nightly/phase-1", 5)?;
/// if barrier.enter(Duration::from_secs(60))? {
///     // ... this worker's share of the phase ...
///     barrier.leave(Duration::from_secs(60))?;
/// }
/// # Ok(())
/// # }
/// ```
pub struct DistributedDoubleBarrier {
    core: LockCore,
    ready: String,
    member_qty: usize,
    /// Our member node: its path, the session it is made under, and whether it is known made.
    own: Mutex<Option<Member>>,
    /// Names of member nodes this barrier gave up whose deletes may still be owed (the
    /// client's janitor sends them when it can): not counted as members meanwhile.
    given_up: Mutex<Vec<String>>,
}

/// A member's node.
#[derive(Clone)]
struct Member {
    path: String,
    session: SessionId,
    /// Known to exist (its create answered, or found ours). Until then its name is kept for
    /// the session: a create whose answer was lost goes again under the same name, so a
    /// member is never counted twice.
    made: bool,
    /// The transaction that made it (once made): a `ready` node made after it is this
    /// round's.
    czxid: i64,
    /// Creates under this name whose answers were lost: each may still land, even after the
    /// node is deleted (see the client's janitor), so a member that drops its node has the
    /// janitor look for that many landings while the session lives.
    lost: u32,
}

impl std::fmt::Debug for DistributedDoubleBarrier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DistributedDoubleBarrier")
            .field("path", &self.core.path)
            .field("member_qty", &self.member_qty)
            .field("node", &self.node_path())
            .finish()
    }
}

/// What one look found.
enum Step {
    /// The call is over: passed (true) or out of time (false).
    Done(bool),
    /// Wait for a watch or the client, then look again.
    Wait,
    /// Look again at once.
    Again,
}

impl DistributedDoubleBarrier {
    /// A barrier at `path` for a party of `member_qty` (at least one).
    pub fn new(client: &Client, path: &str, member_qty: usize) -> Result<DistributedDoubleBarrier> {
        Self::with_options(client, path, member_qty, LockOptions::new())
    }

    /// Test hook: a barrier whose member creates run `options`' `testing_before_create` hook
    /// (with the member node's path) before they go out.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn testing_with_options(
        client: &Client,
        path: &str,
        member_qty: usize,
        options: LockOptions,
    ) -> Result<DistributedDoubleBarrier> {
        Self::with_options(client, path, member_qty, options)
    }

    fn with_options(
        client: &Client,
        path: &str,
        member_qty: usize,
        options: LockOptions,
    ) -> Result<DistributedDoubleBarrier> {
        if member_qty == 0 {
            return Err(Error::BadArguments(
                "a double barrier needs at least one member".into(),
            ));
        }
        Ok(DistributedDoubleBarrier {
            ready: paths::join(path, READY_NODE),
            core: LockCore::new(client, path, options)?,
            member_qty,
            own: Mutex::new(None),
            given_up: Mutex::new(Vec::new()),
        })
    }

    /// The barrier's path.
    pub fn path(&self) -> &str {
        &self.core.path
    }

    /// This member's node, while it is in the barrier.
    pub fn node_path(&self) -> Option<String> {
        self.own
            .lock()
            .as_ref()
            .filter(|m| m.made)
            .map(|m| m.path.clone())
    }

    /// Enters, and waits (at most `timeout`) until `member_qty` members have: true then,
    /// false if the time ran out first (and this member is out again).
    pub fn enter(&self, timeout: Duration) -> Result<bool> {
        self.enter_until(Instant::now() + timeout)
    }

    /// [`enter`](Self::enter) until `deadline`.
    ///
    /// # Errors
    /// What a call meets that is not a connection problem the client rides out (`NoAuth`,
    /// `Closed`, ...); this member is out again then.
    pub fn enter_until(&self, deadline: Instant) -> Result<bool> {
        let entered = self.until_done(deadline, |watching, looks| self.enter_step(watching, looks));
        if !matches!(entered, Ok(true)) {
            self.drop_own_node(deadline.max(Instant::now() + MIN_ATTEMPT));
        }
        entered
    }

    /// Looks with `step`, and waits between looks, until a look says it is done or the
    /// deadline passes (each look's calls get at least `MIN_ATTEMPT`).
    fn until_done(
        &self,
        deadline: Instant,
        mut step: impl FnMut(&mut Watching<'_>, Instant) -> Result<Step>,
    ) -> Result<bool> {
        let mut watching = Watching::new(&self.core);
        let looks = deadline.max(Instant::now() + MIN_ATTEMPT);
        loop {
            match step(&mut watching, looks)? {
                Step::Done(done) => return Ok(done),
                Step::Again => {}
                Step::Wait => {
                    if !watching.wait(deadline)? {
                        return Ok(false);
                    }
                }
            }
        }
    }

    /// One look: `ready` watched first (the last member to enter creates it, and its
    /// creation wakes the rest), then our node made if this session has none, then the count.
    ///
    /// A `ready` node counts only if it was made (or renewed) after our node, by a member that
    /// had counted the party whole. One older than our node is an earlier round's, left
    /// behind when no leaver's delete was answered (every member's session lost at once,
    /// say): it lets nobody through, and the member that completes the party renews it (a
    /// write at the version it read, so a late renewal cannot land on a newer one; the write
    /// wakes the members watching it). Nodes this barrier gave up (whose deletes the janitor
    /// may still owe) are not counted as members; other members on the same client are.
    fn enter_step(&self, watching: &mut Watching<'_>, deadline: Instant) -> Result<Step> {
        let client = self.core.client.with_deadline(deadline);
        let ready = match client.exists_watch(&self.ready, watching.tx()) {
            Ok(stat) => {
                watching.watching(&self.ready);
                stat
            }
            Err(e) => return passable(e),
        };
        let own = match self.ensure_own_node(&client) {
            Ok(own) => own,
            // The session changed before our create went out (it was not sent): a name for
            // the new one at once; the change it would wait for has come already.
            Err(Error::SessionLost { .. }) if client.session_id().is_some() => {
                return Ok(Step::Again)
            }
            Err(e) => return passable(e),
        };
        if ready.is_some_and(|stat| stat.mzxid > own.czxid) {
            return Ok(Step::Done(true));
        }
        // Beside an old `ready`, the members are watched too: a member that completes the party
        // without renewing it (a Curator member passes on any `ready`) must wake us to count.
        let listed = if ready.is_some() {
            let listed = client.children_watch(&self.core.path, watching.tx());
            if listed.is_ok() {
                watching.watching(&self.core.path);
            }
            listed
        } else {
            client.children(&self.core.path)
        };
        let members = match listed {
            Ok(names) => {
                let mut given_up = self.given_up.lock();
                given_up.retain(|n| names.contains(n));
                names
                    .iter()
                    .filter(|n| *n != READY_NODE && !given_up.contains(n))
                    .count()
            }
            Err(e) => return passable(e),
        };
        if members < self.member_qty {
            return Ok(Step::Wait);
        }
        let renewed = match ready {
            Some(old) => client
                .set_data(&self.ready, &[], Some(old.version))
                .map(|_| ()),
            None => client
                .create(&self.ready, &[], CreateMode::Persistent)
                .map(|_| ()),
        };
        match renewed {
            Ok(()) => Ok(Step::Done(true)),
            // Renewed, made or deleted by another member meanwhile (or by our own write
            // whose answer was lost): the next look sees which.
            Err(e) if e.is_node_exists() || e.is_no_node() || e.is_code(ZkCode::BadVersion) => {
                Ok(Step::Again)
            }
            Err(e) => passable(e),
        }
    }

    /// Leaves, and waits (at most `timeout`) until every member has: true then, false if the
    /// time ran out first (this member is out either way).
    ///
    /// After `false` the round did not end for everyone: a member still leaving it keeps its
    /// node for a while, and the barrier's nodes carry no round to tell that node from a
    /// member of the next (nor can they tell a node whose session its client gave up on but
    /// the servers have not yet expired). A party that goes on after a failed leave, or after
    /// a member's `Lost`, should meet at a fresh path.
    pub fn leave(&self, timeout: Duration) -> Result<bool> {
        self.leave_until(Instant::now() + timeout)
    }

    /// [`leave`](Self::leave) until `deadline`. The lowest member (by node name) leaves
    /// last: it watches the highest; every other deletes its node and watches the lowest. The
    /// `ready` node goes once the wait ends, so the barrier can be used again.
    ///
    /// # Errors
    /// As [`enter_until`](Self::enter_until).
    pub fn leave_until(&self, deadline: Instant) -> Result<bool> {
        let mut round = None;
        let left = self.until_done(deadline, |watching, looks| {
            self.leave_step(watching, looks, &mut round)
        });
        // Within the caller's deadline (at least MIN_ATTEMPT): what the server has not
        // answered by then, the janitor finishes (our node), or the next leaver does (`ready`).
        let by = deadline.max(Instant::now() + MIN_ATTEMPT);
        self.drop_own_node(by);
        if let Err(e) = self.core.client.with_deadline(by).delete(&self.ready) {
            log::debug!("{}: {e}", self.ready);
        }
        left
    }

    /// One look at the members: done once none is left (or only we are, and we go).
    ///
    /// `round`: the members of our round, as the first look found them. A node made after it
    /// belongs to the next round (a member that left before us and entered again), and is not
    /// waited for: a late leaver that took it for one of its own round's would wait for the
    /// next round, which waits for it.
    fn leave_step(
        &self,
        watching: &mut Watching<'_>,
        deadline: Instant,
        round: &mut Option<BTreeSet<String>>,
    ) -> Result<Step> {
        let client = self.core.client.with_deadline(deadline);
        let mut members = match client.children(&self.core.path) {
            Ok(names) => names,
            Err(e) if e.is_no_node() => Vec::new(),
            Err(e) => return passable(e),
        };
        members.retain(|n| n != READY_NODE);
        let round = round.get_or_insert_with(|| members.iter().cloned().collect());
        members.retain(|n| round.contains(n));
        members.sort_unstable();
        let own = self.own.lock().clone();
        // Our node is gone with its session, or was never made: we have left.
        let ours = own.as_ref().and_then(|m| {
            let name = paths::node_name(&m.path);
            members.iter().position(|n| n == name)
        });
        if own.is_some() && ours.is_none() {
            self.drop_own_node(deadline);
        }
        let (Some(lowest), Some(highest)) = (members.first(), members.last()) else {
            return Ok(Step::Done(true));
        };
        if members.len() == 1 && ours == Some(0) {
            self.drop_own_node(deadline);
            return Ok(Step::Done(true));
        }
        let watched = paths::join(
            &self.core.path,
            if ours == Some(0) { highest } else { lowest },
        );
        let there = match client.exists_watch(&watched, watching.tx()) {
            Ok(stat) => {
                watching.watching(&watched);
                stat.is_some()
            }
            Err(e) => return passable(e),
        };
        if ours.is_some_and(|i| i > 0) {
            self.drop_own_node(deadline);
        }
        // The watched node went before the look: look again at once.
        Ok(if there { Step::Wait } else { Step::Again })
    }

    /// Makes our member node if the client's session has none of ours; returns it.
    ///
    /// The name carries the session it is chosen for, and its create goes out only on that
    /// session: sent on a newer one, a node whose answer was lost would be owned by a session
    /// that does not know its name, and would count as a second member.
    fn ensure_own_node(&self, client: &Client) -> Result<Member> {
        let Some(session) = client.session_id() else {
            return Err(client.connection_loss());
        };
        let path = {
            let mut own = self.own.lock();
            match own.as_ref() {
                Some(m) if m.session == session && m.made => return Ok(m.clone()),
                Some(m) if m.session == session => m.path.clone(),
                old => {
                    // A node of an older session (one the client gave up on, which the
                    // servers may keep a while) is not another member.
                    if let Some(m) = old {
                        self.given_up
                            .lock()
                            .push(paths::node_name(&m.path).to_owned());
                    }
                    let path = paths::join(&self.core.path, ProtectedId::next(session).as_str());
                    *own = Some(Member {
                        path: path.clone(),
                        session,
                        made: false,
                        czxid: 0,
                        lost: 0,
                    });
                    path
                }
            }
        };
        #[cfg(feature = "testing")]
        self.core.options.hook_before_create(|| path.clone());
        let client = client.only_on(session);
        let made = match client.create_under_containers(&path, &[], CreateMode::Ephemeral) {
            Ok((_, stat, _)) => Some(stat.czxid),
            // An earlier create under this name whose answer was lost: the name carries our
            // session, and only our session sends it, so the node is ours.
            Err(e) if e.is_node_exists() => client.exists(&path)?.map(|stat| stat.czxid),
            Err(e) => {
                if e.answer_lost() {
                    if let Some(m) = self.own.lock().as_mut().filter(|m| m.path == path) {
                        m.lost = m.lost.saturating_add(1);
                    }
                }
                return Err(e);
            }
        };
        let mut own = self.own.lock();
        match (made, own.as_mut().filter(|m| m.path == path)) {
            (Some(czxid), Some(m)) => {
                m.made = true;
                m.czxid = czxid;
                Ok(m.clone())
            }
            // Gone again already: its session was lost meanwhile. The next look makes another.
            _ => Err(self.core.client.connection_loss()),
        }
    }

    /// Takes our member node away: now, waiting at most until `by`, or through the client's
    /// janitor.
    fn drop_own_node(&self, by: Instant) {
        if let Some(m) = self.own.lock().take() {
            let name = paths::node_name(&m.path);
            self.given_up.lock().push(name.to_owned());
            let client = self.core.client.with_deadline(by);
            let gone = client.remove_own(&m.path, m.session);
            // A create whose answer was lost may land after that delete, and would be counted
            // by the others as a member until the session ends: the janitor looks for it (the
            // name is never used again), counting the node the delete left to it, which it may
            // find too.
            client.remove_marked_later(
                &self.core.path,
                name,
                m.session,
                m.lost.saturating_add(u32::from(!gone && m.lost > 0)),
            );
        }
    }
}

impl Drop for DistributedDoubleBarrier {
    fn drop(&mut self) {
        self.drop_own_node(Instant::now() + super::CLEAN_UP_WAIT);
    }
}

/// A call's error during a wait: a connection problem the client rides out means "wait for
/// the client, then look again"; the deadline passing ends the wait; anything else is the
/// caller's.
fn passable(e: Error) -> Result<Step> {
    match e {
        Error::ConnectionLoss { .. } | Error::SessionLost { .. } => Ok(Step::Wait),
        Error::Timeout { .. } => Ok(Step::Done(false)),
        e => Err(e),
    }
}
