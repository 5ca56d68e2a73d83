//! Group membership (Curator's `GroupMember`).

use std::collections::BTreeMap;
use std::time::Duration;

use crossbeam_channel::Sender;

use super::{NodeMode, PersistentNode};
use crate::{paths, Client, Error, Op, OpResult, Result, WatchEvent};

/// A member of a group: an ephemeral node `<membership path>/<id>` with the member's payload,
/// kept present by a [`PersistentNode`] (made again after a lost session), and the group's
/// members read from the server. Apache Curator's `GroupMember`, same nodes, so Curator
/// members and ours see each other.
///
/// ```no_run
/// # fn main() -> zk_recipes::Result<()> {
/// use zk_recipes::nodes::GroupMember;
/// use zk_recipes::Client;
///
/// let client = Client::builder("127.0.0.1:2181").connect()?;
/// let me = GroupMember::new(&client, "/jobs/nightly/workers", "host-a", b"10.0.0.7")?;
/// me.start()?;
/// for (id, payload) in me.current_members()? {
///     println!("{id}: {}", String::from_utf8_lossy(&payload));
/// }
/// # Ok(())
/// # }
/// ```
pub struct GroupMember {
    node: PersistentNode,
    client: Client,
    membership: String,
    id: String,
}

impl std::fmt::Debug for GroupMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupMember")
            .field("membership", &self.membership)
            .field("id", &self.id)
            .finish()
    }
}

impl GroupMember {
    /// A member `id` of the group at `membership_path`, with `payload`. It joins on
    /// [`start`](Self::start).
    ///
    /// # Errors
    /// `BadArguments` for an id that is not one node name.
    pub fn new(
        client: &Client,
        membership_path: &str,
        id: &str,
        payload: &[u8],
    ) -> Result<GroupMember> {
        if id.is_empty() || id.contains('/') || id == "." || id == ".." {
            return Err(Error::BadArguments(format!(
                "a member id is one node name, not {id:?}"
            )));
        }
        let path = paths::join(membership_path, id);
        Ok(GroupMember {
            node: PersistentNode::new(client, &path, NodeMode::Ephemeral, payload)?,
            client: client.clone(),
            membership: membership_path.to_owned(),
            id: id.to_owned(),
        })
    }

    /// This member's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Joins the group (returns at once; see [`wait_joined`](Self::wait_joined)).
    pub fn start(&self) -> Result<()> {
        self.node.start()
    }

    /// Waits at most `timeout` for this member's node to be made: true once it is.
    pub fn wait_joined(&self, timeout: Duration) -> Result<bool> {
        self.node.wait_for_initial_create(timeout)
    }

    /// Changes this member's payload (see [`PersistentNode::set_data`]).
    pub fn set_this_data(&self, payload: &[u8]) -> Result<()> {
        self.node.set_data(payload)
    }

    /// The group's members and their payloads, as the server has them now. This member is
    /// always among them, with its own payload (also before it joined, as in Curator).
    pub fn current_members(&self) -> Result<BTreeMap<String, Vec<u8>>> {
        Ok(self.read_members(&self.client, None)?.0)
    }

    /// [`current_members`](Self::current_members), leaving a watch on the group that reports
    /// into `tx` the next time a member joins or leaves (once; call again to hear the next).
    pub fn watch_members(&self, tx: &Sender<WatchEvent>) -> Result<BTreeMap<String, Vec<u8>>> {
        Ok(self.read_members(&self.client, Some(tx))?.0)
    }

    /// [`watch_members`](Self::watch_members), its calls bounded by `deadline`; also says
    /// whether this member's own node, on the client's session, was in the server's listing
    /// (not only added to it, nor another session's at its name).
    pub(crate) fn watch_members_by(
        &self,
        deadline: std::time::Instant,
        tx: &Sender<WatchEvent>,
    ) -> Result<(BTreeMap<String, Vec<u8>>, bool)> {
        self.read_members(&self.client.with_deadline(deadline), Some(tx))
    }

    /// The members, and whether this member's node, made on the client's session, was among
    /// those listed.
    fn read_members(
        &self,
        client: &Client,
        tx: Option<&Sender<WatchEvent>>,
    ) -> Result<(BTreeMap<String, Vec<u8>>, bool)> {
        let listed = match tx {
            Some(tx) => client.children_watch(&self.membership, tx),
            None => client.children(&self.membership),
        };
        let ids = match listed {
            Ok(ids) => ids,
            Err(e) if e.is_no_node() => {
                // No group yet (or its container was reaped): a listing leaves no watch on a
                // missing node, so watch for its creation, which the first join makes.
                if let Some(tx) = tx {
                    if client.exists_watch(&self.membership, tx)?.is_some() {
                        return self.read_members(client, Some(tx));
                    }
                }
                Vec::new()
            }
            Err(e) => return Err(e),
        };
        // Every member's payload in one pipeline (one round trip).
        let reads: Vec<Op> = ids
            .iter()
            .map(|id| Op::GetData {
                path: paths::join(&self.membership, id),
            })
            .collect();
        let mut members = BTreeMap::new();
        let mut listed = false;
        if !reads.is_empty() {
            let session = client.session_id().map(|s| s.0);
            for (id, read) in ids.into_iter().zip(client.pipeline(&reads)?) {
                match read {
                    Ok(OpResult::Data(payload, stat)) => {
                        // Our node is the one of our session: a node of another at our name
                        // (a crashed run of this member's) goes with it, and ours comes then.
                        listed |= id == self.id && Some(stat.ephemeral_owner) == session;
                        members.insert(id, payload);
                    }
                    // Left between the listing and the read.
                    Err(e) if e.is_no_node() => {}
                    Err(e) => return Err(e),
                    Ok(_) => {}
                }
            }
        }
        members
            .entry(self.id.clone())
            .or_insert_with(|| self.node.data());
        Ok((members, listed))
    }

    /// Leaves the group: the node goes (see [`PersistentNode::close`]). Also done on drop.
    pub fn close(&self) {
        self.node.close();
    }
}
