//! Whether the members' replicas of the tree agree: the server's own promise, checked so that a
//! run in which ZooKeeper broke it is not blamed on a recipe.
//!
//! Every member applies the same transactions in the same order, so two members that have
//! applied up to the same zxid hold the same tree. ZooKeeper 3.8.0 (Debian's) does not always
//! keep that promise across a leader change: a follower synced by `DIFF` can miss transactions
//! for good (ZOOKEEPER-4394, -4646, -4785, fixed in 3.8.4 and 3.9.2). A client on such a member
//! reads a tree no other member has (a node its own session made and still owns, missing; a
//! node the leader deleted, still there), and no client can mend that. Seen in one CI-length
//! run: a group member's node missing on one follower for the last 30 s of the run, while the
//! leader and the other follower listed it as the member's live session's; a double barrier's
//! member on the same follower counted its peers' deleted nodes and passed early.
//!
//! The check: with the workers stopped (so that nothing writes), wait until every member
//! reports the same last zxid, then compare what each says it holds (its node count and its
//! ephemeral nodes) and confirm the zxid did not move meanwhile. A difference at one zxid is a
//! divergence, whatever caused it.

use std::collections::BTreeSet;
use std::thread;
use std::time::{Duration, Instant};

use zk_recipes::testing::TestingCluster;

/// What one member says it holds.
#[derive(Debug, PartialEq, Eq)]
struct Held {
    nodes: u64,
    ephemerals: BTreeSet<String>,
}

/// `Some(why)` if two members that applied the same transactions hold different trees; `None`
/// if they agree, or if they did not come to one zxid within `within` (said on stdout: then
/// nothing is known either way).
pub fn diverged(cluster: &TestingCluster, within: Duration) -> Option<String> {
    let until = Instant::now() + within;
    while Instant::now() < until {
        let Some(zxid) = common_zxid(cluster) else {
            // The members still applying what was sent before the workers stopped: a poll.
            thread::sleep(Duration::from_millis(20));
            continue;
        };
        let held: Option<Vec<Held>> = (0..cluster.len()).map(|m| held(cluster, m)).collect();
        // Compared only if nothing was applied while they were read.
        if let (Some(held), Some(after)) = (held, common_zxid(cluster)) {
            if after == zxid {
                let found = differences(&held);
                if found.is_none() {
                    println!("jepsen: the members' replicas agree at zxid {zxid:#x}");
                }
                return found.map(|d| format!("at zxid {zxid:#x}: {d}"));
            }
        }
    }
    println!(
        "jepsen: the members did not come to one zxid within {within:?}: replicas not compared"
    );
    None
}

/// The last zxid every member reports, if they all report the same.
fn common_zxid(cluster: &TestingCluster) -> Option<u64> {
    let mut common = None;
    for m in 0..cluster.len() {
        let srvr = cluster.four_letter(m, "srvr").ok()?;
        let zxid = field(&srvr, "Zxid: ")
            .and_then(|z| u64::from_str_radix(z.trim_start_matches("0x"), 16).ok())?;
        if common.is_some_and(|c| c != zxid) {
            return None;
        }
        common = Some(zxid);
    }
    common
}

fn held(cluster: &TestingCluster, m: usize) -> Option<Held> {
    let srvr = cluster.four_letter(m, "srvr").ok()?;
    let nodes = field(&srvr, "Node count: ")?.parse().ok()?;
    let dump = cluster.four_letter(m, "dump").ok()?;
    Some(Held {
        nodes,
        ephemerals: ephemerals(&dump),
    })
}

/// The value after `name` on its line of a four-letter word's answer.
fn field<'a>(answer: &'a str, name: &str) -> Option<&'a str> {
    answer
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .map(str::trim)
}

/// The ephemeral nodes a `dump` lists (one per line, indented under their session).
fn ephemerals(dump: &str) -> BTreeSet<String> {
    dump.lines()
        .filter_map(|l| l.strip_prefix('\t'))
        .filter(|p| p.starts_with('/'))
        .map(str::to_owned)
        .collect()
}

/// How the members' holdings differ from member 0's, if they do.
fn differences(held: &[Held]) -> Option<String> {
    let first = held.first()?;
    let mut out = Vec::new();
    for (m, h) in held.iter().enumerate().skip(1) {
        if h == first {
            continue;
        }
        let missing: Vec<&String> = first.ephemerals.difference(&h.ephemerals).collect();
        let extra: Vec<&String> = h.ephemerals.difference(&first.ephemerals).collect();
        out.push(format!(
            "member {m} holds {} nodes to member 0's {}; ephemerals member 0 has and it lacks \
             {missing:?}, it has and member 0 lacks {extra:?}",
            h.nodes, first.nodes
        ));
    }
    (!out.is_empty()).then(|| out.join("; "))
}

/// The rules above, on answers made to break them.
pub fn self_test() {
    let dump = "SessionTracker dump:\nephemeral nodes dump:\nSessions with Ephemerals (1):\n\
                0x100:\n\t/a/x\n\t/a/y\nConnections with Ephemerals (0):\n\tip: /127.0.0.1:1\n";
    let mk = |nodes, paths: &[&str]| Held {
        nodes,
        ephemerals: paths.iter().map(|p| p.to_string()).collect(),
    };
    assert_eq!(ephemerals(dump), mk(0, &["/a/x", "/a/y"]).ephemerals);
    assert_eq!(
        field("Zxid: 0x600001540\nMode: leader\n", "Zxid: "),
        Some("0x600001540")
    );
    let same = [mk(5, &["/a/x"]), mk(5, &["/a/x"]), mk(5, &["/a/x"])];
    assert_eq!(differences(&same), None);
    let lacks = [
        mk(5, &["/a/x", "/g/33"]),
        mk(5, &["/a/x", "/g/33"]),
        mk(4, &["/a/x"]),
    ];
    let d = differences(&lacks).expect("a member that lacks a node differs");
    assert!(d.contains("member 2") && d.contains("/g/33"), "{d}");
    let count_only = [mk(5, &[]), mk(6, &[])];
    assert!(differences(&count_only).is_some());
}
