//! The raw-operation floor: our client's own round trips against the `zookeeper` crate's, on
//! the same server in the same run, alternating request by request: `exists`, an ephemeral
//! sequential create, a delete, and an uncontended `InterProcessMutex` acquire+release against
//! the same three requests made with the crate (create, list children, delete).
//!
//! `cargo bench --bench floor [-- --quick] [-- --fsync]`

mod common;

use std::time::{Duration, Instant};

use common::*;
use zk_recipes::lock::InterProcessMutex;
use zk_recipes::CreateMode;

/// Runs `a` and `b` alternately, `warm` untimed rounds first; returns their timings.
fn alternate(
    rounds: usize,
    warm: usize,
    mut a: impl FnMut(),
    mut b: impl FnMut(),
) -> (Vec<Duration>, Vec<Duration>) {
    for _ in 0..warm {
        a();
        b();
    }
    let (mut ta, mut tb) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for _ in 0..rounds {
        let t = Instant::now();
        a();
        ta.push(t.elapsed());
        let t = Instant::now();
        b();
        tb.push(t.elapsed());
    }
    (ta, tb)
}

fn main() {
    let args = args();
    let server = server(&args);
    let client = clients(&server.connect_string(), 1).remove(0);
    let mutex = InterProcessMutex::new(&client, "/bench/floor/mutex").expect("lock");
    let raw =
        zookeeper::ZooKeeper::connect(&server.connect_string(), Duration::from_secs(30), |_| {})
            .expect("raw connect");
    while raw.exists("/", false).is_err() {} // the raw crate returns before it has a session
    client.ensure_path("/bench/floor/raw").expect("path");
    client.ensure_path("/bench/floor/ours").expect("path");
    let acl = zookeeper::Acl::open_unsafe().clone();
    let raw_create = || {
        raw.create(
            "/bench/floor/raw/n-",
            vec![],
            acl.clone(),
            zookeeper::CreateMode::EphemeralSequential,
        )
        .expect("create")
    };
    let ours_create = || {
        client
            .create("/bench/floor/ours/n-", b"", CreateMode::EphemeralSequential)
            .expect("create")
    };
    let rounds = if args.quick { 300 } else { 5000 };
    let warm = rounds / 5;
    let mut rows: Vec<(&str, Vec<Duration>, Vec<Duration>)> = Vec::new();

    // A fresh server's JIT makes the first ten thousand or so requests' tails noisy (seen in
    // both clients alike): warm it up on both clients before anything is timed.
    let server_warm = if args.quick { 300 } else { 15_000 };
    let (r, o) = alternate(
        rounds,
        server_warm,
        || {
            raw.exists("/bench/floor", false).expect("exists");
        },
        || {
            client.exists("/bench/floor").expect("exists");
        },
    );
    rows.push(("exists", r, o));

    let (mut raw_nodes, mut our_nodes) = (Vec::new(), Vec::new());
    let (r, o) = alternate(
        rounds,
        warm,
        || raw_nodes.push(raw_create()),
        || our_nodes.push(ours_create()),
    );
    rows.push(("create (ephemeral seq)", r, o));

    let (mut raw_iter, mut our_iter) = (raw_nodes.into_iter(), our_nodes.into_iter());
    let (r, o) = alternate(
        rounds,
        warm,
        || {
            let n = raw_iter.next().unwrap_or_else(raw_create);
            raw.delete(&n, None).expect("delete")
        },
        || {
            let n = our_iter.next().unwrap_or_else(ours_create);
            client.delete(&n).expect("delete")
        },
    );
    rows.push(("delete", r, o));

    let (r, o) = alternate(
        rounds,
        warm,
        || {
            let node = raw_create();
            raw.get_children("/bench/floor/raw", false)
                .expect("children");
            raw.delete(&node, None).expect("delete");
        },
        || drop(mutex.acquire().expect("acquire")),
    );
    rows.push(("lock round (3 requests)", r, o));

    println!(
        "\n{rounds} rounds each, alternating, after {server_warm} rounds warming the server and \
         {warm} per row"
    );
    println!(
        "{:<26}{:>12}{:>12}{:>12}{:>12}{:>10}{:>10}",
        "", "raw p50 µs", "ours p50", "raw p99", "ours p99", "p50 ×", "p99 ×"
    );
    for (name, mut r, mut o) in rows {
        let (r50, r99, o50, o99) = (
            pct(&mut r, 0.5),
            pct(&mut r, 0.99),
            pct(&mut o, 0.5),
            pct(&mut o, 0.99),
        );
        json(
            "floor",
            &[
                ("op", s(name)),
                ("rounds", rounds.to_string()),
                ("raw_p50_us", f(r50)),
                ("raw_p99_us", f(r99)),
                ("ours_p50_us", f(o50)),
                ("ours_p99_us", f(o99)),
                ("ratio_p50", f(o50 / r50)),
                ("ratio_p99", f(o99 / r99)),
            ],
        );
        println!(
            "{name:<26}{r50:>12.1}{o50:>12.1}{r99:>12.1}{o99:>12.1}{:>10.3}{:>10.3}",
            o50 / r50,
            o99 / r99
        );
    }
}
