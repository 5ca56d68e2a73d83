//! The raw-operation floor: an uncontended acquire+release of `InterProcessMutex` against the
//! same three requests made directly with the `zookeeper` crate (create ephemeral sequential,
//! list children, delete), alternating in one run.
//!
//! `cargo bench --bench floor [-- --quick] [-- --fsync]`

mod common;

use std::time::{Duration, Instant};

use common::*;
use zk_recipes::lock::InterProcessMutex;

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
    let acl = zookeeper::Acl::open_unsafe().clone();
    let raw_round = || {
        let node = raw
            .create(
                "/bench/floor/raw/n-",
                vec![],
                acl.clone(),
                zookeeper::CreateMode::EphemeralSequential,
            )
            .expect("create");
        raw.get_children("/bench/floor/raw", false)
            .expect("children");
        raw.delete(&node, None).expect("delete");
    };
    let ours_round = || drop(mutex.acquire().expect("acquire"));
    let rounds = if args.quick { 300 } else { 3000 };
    for _ in 0..rounds / 10 {
        raw_round();
        ours_round();
    }
    let (mut r, mut o) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        raw_round();
        r.push(t.elapsed());
        let t = Instant::now();
        ours_round();
        o.push(t.elapsed());
    }
    let (r50, r99, o50, o99) = (
        pct(&mut r, 0.5),
        pct(&mut r, 0.99),
        pct(&mut o, 0.5),
        pct(&mut o, 0.99),
    );
    json(
        "floor",
        &[
            ("rounds", rounds.to_string()),
            ("raw_p50_us", f(r50)),
            ("raw_p99_us", f(r99)),
            ("mutex_p50_us", f(o50)),
            ("mutex_p99_us", f(o99)),
            ("ratio_p50", f(o50 / r50)),
            ("ratio_p99", f(o99 / r99)),
        ],
    );
    println!("\nuncontended acquire+release, {rounds} rounds each, alternating");
    println!("{:<28}{:>12}{:>12}", "", "p50 µs", "p99 µs");
    println!("{:<28}{:>12.1}{:>12.1}", "raw crate (3 requests)", r50, r99);
    println!("{:<28}{:>12.1}{:>12.1}", "InterProcessMutex", o50, o99);
    println!(
        "{:<28}{:>12.3}{:>12.3}",
        "ratio mutex / raw",
        o50 / r50,
        o99 / r99
    );
}
