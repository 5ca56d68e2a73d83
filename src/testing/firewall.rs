//! Cutting the links between ensemble members, election links included, with nftables.
//!
//! Every member runs with a group id of its own (still as root, so it reads what the harness
//! wrote). A rule marks each connection with the group id of the member that opened it (the
//! socket owner's, on its first packet); a cut from member `a` to
//! member `b` drops the packets of every connection `a` opened to one of `b`'s ports (quorum,
//! election, or a fault proxy in front of them) and of every connection `b` opened to `a`'s, in
//! the directions the cut names. Whichever side dials, the link is covered; clients and the
//! harness (other group ids) pass untouched. All of it on loopback, in a network namespace the
//! test made ([`enter_private_namespaces`](super::enter_private_namespaces)).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use parking_lot::Mutex;

use super::namespace::{succeeded, system_tool};
use super::HarnessError;

/// The first group id a member runs with; each firewalled ensemble of a process takes the next
/// ones.
const FIRST_GID: u32 = 61_000;
static NEXT_GID: AtomicU32 = AtomicU32::new(FIRST_GID);

/// One ensemble's nftables table.
pub(crate) struct Firewall {
    table: String,
    gids: Vec<u32>,
    /// `reach[a][b]`: the ports member `a` dials to reach member `b`.
    reach: Vec<Vec<Vec<u16>>>,
    /// Directed cuts in force, each with how many times it was made and not lifted yet:
    /// `(from, to)` drops what `from` sends to `to`.
    cuts: Mutex<BTreeMap<(usize, usize), u32>>,
}

impl Firewall {
    /// Group ids for `n` members, distinct from every other firewalled ensemble's in this
    /// process.
    pub fn gids(n: usize) -> Vec<u32> {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        let first = NEXT_GID.fetch_add(n, Ordering::SeqCst);
        (0..n).map(|i| first + i).collect()
    }

    /// Installs the table: connections marked by the member that opens them, no cut yet.
    pub fn install(gids: Vec<u32>, reach: Vec<Vec<Vec<u16>>>) -> Result<Firewall, HarnessError> {
        let table = format!("zkr{}", gids.first().copied().unwrap_or(FIRST_GID));
        let mut script = format!(
            "add table inet {table}\n\
             add chain inet {table} out {{ type filter hook output priority 0; }}\n\
             add chain inet {table} cuts\n"
        );
        for gid in &gids {
            let _ = writeln!(
                script,
                "add rule inet {table} out meta skgid {gid} ct state new ct mark set {gid}"
            );
        }
        let _ = writeln!(script, "add rule inet {table} out jump cuts");
        nft(&script)?;
        Ok(Firewall {
            table,
            gids,
            reach,
            cuts: Mutex::new(BTreeMap::new()),
        })
    }

    /// Adds directed cuts (`(from, to)`: what `from` sends to `to` is dropped). A cut made
    /// twice stays until lifted twice. Nothing changes if a member is out of range or nft
    /// refuses the rules.
    pub fn cut(&self, directed: &[(usize, usize)]) -> Result<(), HarnessError> {
        let n = self.gids.len();
        if let Some((a, b)) = directed.iter().find(|(a, b)| *a >= n || *b >= n) {
            return Err(HarnessError::StartFailed(format!(
                "no link between members {a} and {b} of {n}"
            )));
        }
        self.change(|cuts| {
            for &pair in directed.iter().filter(|(a, b)| a != b) {
                *cuts.entry(pair).or_default() += 1;
            }
        })
    }

    /// Lifts directed cuts once each (a cut not in force is skipped).
    pub fn lift(&self, directed: &[(usize, usize)]) -> Result<(), HarnessError> {
        self.change(|cuts| {
            for pair in directed {
                if let Some(n) = cuts.get_mut(pair) {
                    *n -= 1;
                    if *n == 0 {
                        cuts.remove(pair);
                    }
                }
            }
        })
    }

    /// Lifts every cut.
    pub fn lift_all(&self) -> Result<(), HarnessError> {
        self.change(BTreeMap::clear)
    }

    /// The directed cuts in force.
    pub fn cuts(&self) -> Vec<(usize, usize)> {
        self.cuts.lock().keys().copied().collect()
    }

    /// Applies `edit` to a copy of the cuts, installs the copy's rules, and keeps the copy only
    /// once nft took them: the counts always say what the kernel drops.
    fn change(
        &self,
        edit: impl FnOnce(&mut BTreeMap<(usize, usize), u32>),
    ) -> Result<(), HarnessError> {
        let mut cuts = self.cuts.lock();
        let mut next = cuts.clone();
        edit(&mut next);
        nft(&self.rules(&next))?;
        *cuts = next;
        Ok(())
    }

    /// The script that replaces the rules of the `cuts` chain with `cuts`, in one
    /// transaction.
    fn rules(&self, cuts: &BTreeMap<(usize, usize), u32>) -> String {
        let table = &self.table;
        let mut script = format!("flush chain inet {table} cuts\n");
        for &(from, to) in cuts.keys() {
            // What `from` sends to `to`: on the connections `from` opened to `to`, the
            // original direction; on those `to` opened to `from`, the reply direction.
            for (opener, target, direction) in [(from, to, "original"), (to, from, "reply")] {
                let ports = &self.reach[opener][target];
                if ports.is_empty() {
                    continue;
                }
                let set = elements(ports);
                let _ = writeln!(
                    script,
                    "add rule inet {table} cuts meta l4proto tcp ct mark {} \
                     ct original proto-dst {{ {set} }} ct direction {direction} drop",
                    self.gids[opener]
                );
            }
        }
        if !cuts.is_empty() {
            // A member's packet that conntrack cannot place (its entry gone) carries no mark
            // and would pass every rule above: while anything is cut, it goes nowhere.
            let gids = elements(&self.gids);
            let _ = writeln!(
                script,
                "add rule inet {table} cuts meta skgid {{ {gids} }} ct state invalid drop"
            );
        }
        script
    }
}

impl Drop for Firewall {
    fn drop(&mut self) {
        let _ = nft(&format!("delete table inet {}\n", self.table));
    }
}

/// Runs an nftables script (`nft -f -`): all of it or nothing.
fn nft(script: &str) -> Result<(), HarnessError> {
    let mut child = Command::new(system_tool("nft"))
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            HarnessError::ZooKeeperMissing(format!(
                "cannot run nft (apt-get install nftables): {e}"
            ))
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(script.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    succeeded(&out, "nft refused the rules")
}

/// `items` as an nftables set's elements: `a, b, c`.
fn elements<T: ToString>(items: &[T]) -> String {
    items
        .iter()
        .map(T::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
