//! Who holds a lock and who waits, as every contender's own rule sees it: for operators and
//! tools (`zk-lock list`), without re-deriving the recipes' rules.

use super::core::{Decision, MaxLeases, ReaderRule, Rule, WriterRule};
use super::names::{sort_contenders, READ_NAME, WRITE_NAME};
use crate::{paths, Client, Result, SessionId};

/// What kind of hold a node asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HoldKind {
    /// A mutex or semaphore-mutex node: exclusive.
    Exclusive,
    /// A read/write lock's read node: shared with other readers.
    Read,
    /// A read/write lock's write node: exclusive.
    Write,
}

/// One node in a lock's line.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LineEntry {
    /// The node's path.
    pub path: String,
    /// What it asks for.
    pub kind: HoldKind,
    /// True if its rule lets it go now (it holds the lock); false if it waits.
    pub holds: bool,
    /// The holder id stored in the node (`host:pid:thread` unless set), if readable.
    pub holder_id: Option<String>,
    /// The session that made it, for protected names (this crate's and Curator's).
    pub session: Option<SessionId>,
}

/// The line at `path` (a mutex's or a read/write lock's path), holders first, in order. Nodes
/// without a sequence are not contenders and are left out; an empty or missing path has none.
pub fn inspect(client: &Client, path: &str) -> Result<Vec<LineEntry>> {
    let children = match client.children(path) {
        Ok(c) => c,
        Err(e) if e.is_no_node() => Vec::new(),
        Err(e) => return Err(e),
    };
    let contenders = sort_contenders(&children);
    let mut out = Vec::with_capacity(contenders.len());
    for (i, c) in contenders.iter().enumerate() {
        let (kind, rule): (HoldKind, &dyn Rule) = if c.name.contains(READ_NAME) {
            (HoldKind::Read, &ReaderRule)
        } else if c.name.contains(WRITE_NAME) {
            (HoldKind::Write, &WriterRule)
        } else {
            (HoldKind::Exclusive, &MaxLeases(1))
        };
        let node = paths::join(path, c.name);
        let holder_id = match client.data(&node) {
            Ok((d, _)) => Some(String::from_utf8_lossy(&d).into_owned()),
            Err(e) if e.is_no_node() => continue, // gone meanwhile
            Err(_) => None,
        };
        out.push(LineEntry {
            path: node,
            kind,
            holds: rule.decide(&contenders, i) == Decision::Go,
            holder_id,
            session: super::names::session_of(c.name),
        });
    }
    Ok(out)
}
