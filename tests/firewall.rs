//! The firewalled ensemble's faults do what the partition harness counts on them doing: a
//! severed pair has no link left (election links included) while every other link and every
//! client passes; a member severed from all is deposed and the others elect; a frozen log disk
//! stalls the writes whose quorum needs it, and nothing is lost when it thaws.
//!
//! Runs as root, in network and mount namespaces of its own (the binary runs itself again
//! there). Without root it says so and runs nothing, unless `ZKR_REQUIRE_NAMESPACES=1` (CI sets
//! it), which makes that a failure.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use zk_recipes::testing::{enter_private_namespaces, ServerOptions, TestingCluster};
use zk_recipes::CreateMode;

type Test = (&'static str, fn());

const TESTS: [Test; 3] = [
    (
        "severing_a_pair_drops_every_link_between_them_and_no_other",
        severing_a_pair_drops_every_link_between_them_and_no_other,
    ),
    (
        "a_member_severed_from_all_is_deposed_and_the_others_elect",
        a_member_severed_from_all_is_deposed_and_the_others_elect,
    ),
    (
        "a_frozen_log_stalls_the_writes_whose_quorum_needs_it_and_loses_none",
        a_frozen_log_stalls_the_writes_whose_quorum_needs_it_and_loses_none,
    ),
];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        for (name, _) in TESTS {
            println!("{name}: test");
        }
        return;
    }
    // libtest's arguments: name filters, `--skip NAME`, `--exact`; the values of its other
    // flags (`--test-threads 1`, ...) are not names.
    let valued = ["--test-threads", "--color", "--format", "--logfile", "-Z"];
    let (mut filters, mut skips) = (Vec::new(), Vec::new());
    let mut rest = args.iter();
    while let Some(a) = rest.next() {
        if a == "--skip" {
            skips.extend(rest.next());
        } else if valued.contains(&a.as_str()) {
            rest.next();
        } else if !a.starts_with('-') {
            filters.push(a);
        }
    }
    let exact = args.iter().any(|a| a == "--exact");
    let matches = |name: &str, f: &String| {
        if exact {
            name == f
        } else {
            name.contains(f.as_str())
        }
    };
    let chosen: Vec<Test> = TESTS
        .into_iter()
        .filter(|(name, _)| filters.is_empty() || filters.iter().any(|f| matches(name, f)))
        .filter(|(name, _)| !skips.iter().any(|f| matches(name, f)))
        .collect();
    if chosen.is_empty() {
        return;
    }
    if let Err(e) = enter_private_namespaces() {
        assert!(
            std::env::var("ZKR_REQUIRE_NAMESPACES").map_or(true, |v| v != "1"),
            "ZKR_REQUIRE_NAMESPACES=1, but: {e}"
        );
        println!("firewall: {} tests not run: {e}", chosen.len());
        return;
    }
    init_logs();
    for (name, test) in &chosen {
        println!("test {name} ...");
        test();
        println!("test {name} ... ok");
    }
    println!("firewall: {} passed", chosen.len());
}

fn cluster(force_sync: bool) -> TestingCluster {
    let options = ServerOptions {
        force_sync,
        ..ServerOptions::default()
    };
    let c = TestingCluster::firewalled(3, options).expect("firewalled ensemble");
    c.wait_for_leader(SOON).expect("a leader");
    c
}

/// Whether a process with member `from`'s group id gets any answer (a connection, or a refusal)
/// from `port` within 5 s: a dropped SYN gets none, ever; a port that answers does so in
/// milliseconds (the 5 s only allow for a loaded machine starting the probe).
fn reaches(c: &TestingCluster, from: usize, port: u16) -> bool {
    let group = c.member_group(from).expect("a firewalled member's group");
    let status = Command::new("setpriv")
        .args([&format!("--regid={group}"), "--clear-groups", "--"])
        .args(["timeout", "5", "bash", "-c"])
        .arg(format!("exec 3<>/dev/tcp/127.0.0.1/{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("setpriv, timeout and bash");
    // `timeout` exits 124 when it had to stop the dial.
    status.code() != Some(124)
}

fn serving(c: &TestingCluster, i: usize) -> bool {
    c.four_letter(i, "srvr")
        .is_ok_and(|a| a.contains("Mode: leader") || a.contains("Mode: follower"))
}

fn severing_a_pair_drops_every_link_between_them_and_no_other() {
    let c = cluster(false);
    let election = |i| c.member_ports(i).1;
    let quorum = |i| c.member_ports(i).0;
    // The quorum link a member dials: the proxy in front of the other's quorum port.
    let link = |a, b| c.quorum_link_port(a, b).expect("a partitionable ensemble");
    for (a, b) in [(0, 1), (1, 0), (0, 2), (2, 1)] {
        assert!(
            reaches(&c, a, election(b)),
            "{a} reaches {b} before any cut"
        );
        assert!(
            reaches(&c, a, link(a, b)),
            "{a} reaches its link to {b} first"
        );
    }
    assert!(c.sever(0, 1));
    // Both ways, election and quorum ports and the quorum link, whoever dials.
    for (a, b) in [(0, 1), (1, 0)] {
        assert!(
            !reaches(&c, a, election(b)),
            "{a} reaches {b}'s election port"
        );
        assert!(!reaches(&c, a, quorum(b)), "{a} reaches {b}'s quorum port");
        assert!(
            !reaches(&c, a, link(a, b)),
            "{a} reaches its quorum link to {b}"
        );
    }
    // Every other link passes, and clients reach both.
    for (a, b) in [(0, 2), (2, 0), (1, 2), (2, 1)] {
        assert!(
            reaches(&c, a, election(b)),
            "{a} lost {b}, which was not cut"
        );
        assert!(reaches(&c, a, link(a, b)), "{a} lost its link to {b}");
    }
    for i in 0..3 {
        assert!(c.four_letter(i, "ruok").is_ok(), "a client lost member {i}");
    }
    // One way: what 0 sends to 1 is dropped, so 0's dial to 1 gets nothing, and neither does
    // 1's (0's answer to it is dropped: a new link cannot open either way); 2 is untouched.
    assert!(c.mend(0, 1));
    assert!(reaches(&c, 0, election(1)), "mended, 0 reaches 1 again");
    assert!(c.sever_one_way(0, 1));
    assert!(!reaches(&c, 0, election(1)));
    assert!(!reaches(&c, 1, election(0)));
    assert!(reaches(&c, 2, election(0)) && reaches(&c, 0, election(2)));
    assert_eq!(c.severed(), vec![(0, 1)]);
    // Cuts count: two overlapping faults on one pair need two mends.
    assert!(c.sever_one_way(0, 1));
    assert!(c.mend_one_way(0, 1));
    assert!(
        !reaches(&c, 0, election(1)),
        "one mend of two lifted the cut"
    );
    assert!(c.mend_one_way(0, 1));
    assert!(reaches(&c, 0, election(1)));
    assert!(c.severed().is_empty());
    // A cut of a member that is not there changes nothing and says so.
    assert!(!c.sever(0, 7));
    assert!(c.severed().is_empty());
    assert!(reaches(&c, 0, election(1)));
}

fn a_member_severed_from_all_is_deposed_and_the_others_elect() {
    let c = cluster(false);
    let old = c.wait_for_leader(SOON).expect("a leader");
    assert!(c.sever_member(old));
    let new = wait_for(SOON, || c.leader().filter(|&l| l != old));
    assert!(new.is_some(), "the two others elected no leader");
    let deposed = wait_for(SOON, || (!serving(&c, old)).then_some(()));
    assert!(deposed.is_some(), "the severed member still serves");
    assert!(c.mend_member(old));
    let back = wait_for(SOON, || (0..3).all(|i| serving(&c, i)).then_some(()));
    assert!(back.is_some(), "mended, the member did not rejoin");
    let leading = |i| {
        c.four_letter(i, "srvr")
            .is_ok_and(|a| a.contains("Mode: leader"))
    };
    assert_eq!(
        (0..3).filter(|&i| leading(i)).count(),
        1,
        "one leader after the mend"
    );
}

fn a_frozen_log_stalls_the_writes_whose_quorum_needs_it_and_loses_none() {
    let c = cluster(true);
    let leader = c.wait_for_leader(SOON).expect("a leader");
    let follower = (0..3).find(|&i| i != leader).expect("a follower");
    let client = connect(&c.connect_string(), Duration::from_secs(10));
    let root = root("frozen-log");
    client
        .create(&root, b"", CreateMode::Persistent)
        .expect("a write before the freeze");
    // The leader's log and one follower's: two of three members cannot acknowledge, so no
    // write gathers a quorum.
    assert!(c.freeze_log(leader));
    assert!(c.freeze_log(follower));
    assert!(!c.freeze_log(leader), "a frozen disk freezes once");
    let stalled = format!("{root}/during");
    let during =
        client
            .with_timeout(Duration::from_secs(2))
            .create(&stalled, b"x", CreateMode::Persistent);
    assert!(
        during.is_err(),
        "a write was acknowledged while two of three logs were frozen: {during:?}"
    );
    c.thaw_log(leader);
    c.thaw_log(follower);
    // The stalled write was proposed, so it commits once the logs move again.
    let landed = wait_for(SOON, || client.exists(&stalled).ok().flatten().map(|_| ()));
    assert!(landed.is_some(), "the write made while frozen was lost");
    client
        .create(&format!("{root}/after"), b"", CreateMode::Persistent)
        .expect("a write after the thaw");
}
