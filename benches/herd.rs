//! Herd effect vs predecessor watch: N contenders, each with its own session, take one lock in
//! turn for a fixed time, with `InterProcessMutex` (predecessor-only watches, fast handoff on
//! and off) and with `HerdLock` (every waiter watches the parent).
//!
//! `cargo bench --bench herd [-- --quick] [-- --fsync]`; writes `benches/herd.png` on a full run.

mod common;

use std::time::Duration;

use common::*;

fn main() {
    let args = args();
    let server = server(&args);
    let ns: &[usize] = if args.quick { &[2, 8] } else { &[2, 8, 32, 64] };
    let run_for = Duration::from_millis(if args.quick { 1000 } else { 3000 });
    let all = clients(&server.connect_string(), *ns.iter().max().unwrap_or(&2));
    let kinds = [Kind::Mutex, Kind::MutexNoFastHandoff, Kind::Herd];
    let mut rows = Vec::new();
    for &hold_ms in &[0u64, 1] {
        for &n in ns {
            for kind in kinds {
                let path = format!("/bench/herd/{}-{n}-{hold_ms}", kind.name());
                let r = contend(
                    kind,
                    &all[..n],
                    &path,
                    Duration::from_millis(hold_ms),
                    run_for,
                );
                assert_eq!(r.most_inside, 1, "{} let two in", kind.name());
                json(
                    "herd",
                    &[
                        ("lock", s(kind.name())),
                        ("n", n.to_string()),
                        ("hold_ms", hold_ms.to_string()),
                        ("acquisitions", r.acquisitions.to_string()),
                        ("per_second", f(r.per_second)),
                        ("handoff_p50_us", f(r.handoff_p50_us)),
                        ("handoff_p99_us", f(r.handoff_p99_us)),
                        ("notifications_per_release", f(r.notifications_per_release)),
                        ("requests_per_acquisition", f(r.requests_per_acquisition)),
                    ],
                );
                rows.push((kind, n, hold_ms, r));
            }
        }
    }
    println!(
        "\n{:<30}{:>4}{:>6}{:>10}{:>11}{:>11}{:>9}{:>9}",
        "lock", "N", "hold", "acq/s", "hand p50", "hand p99", "notif", "req/acq"
    );
    for (kind, n, hold, r) in &rows {
        println!(
            "{:<30}{:>4}{:>4}ms{:>10.0}{:>9.0}µs{:>9.0}µs{:>9.2}{:>9.2}",
            kind.name(),
            n,
            hold,
            r.per_second,
            r.handoff_p50_us,
            r.handoff_p99_us,
            r.notifications_per_release,
            r.requests_per_acquisition
        );
    }
    println!("\nratios herd / predecessor (same N and hold):");
    println!(
        "{:>4}{:>6}{:>12}{:>14}{:>14}",
        "N", "hold", "acq/s", "handoff p50", "notif/release"
    );
    for (kind, n, hold, h) in rows.iter().filter(|r| r.0 == Kind::Herd) {
        let _ = kind;
        if let Some((_, _, _, p)) = rows
            .iter()
            .find(|r| r.0 == Kind::Mutex && r.1 == *n && r.2 == *hold)
        {
            println!(
                "{:>4}{:>4}ms{:>12.2}{:>14.2}{:>14.2}",
                n,
                hold,
                h.per_second / p.per_second,
                h.handoff_p50_us / p.handoff_p50_us,
                h.notifications_per_release / p.notifications_per_release.max(1e-9)
            );
        }
    }
    if !args.quick {
        match plot(&rows) {
            Ok(()) => println!("\nwrote benches/herd.png"),
            Err(e) => println!("\nno plot: {e}"),
        }
    }
}

type Row = (Kind, usize, u64, Contended);

/// Handoff latency and notifications per release against N, herd vs predecessor (hold 0).
fn plot(rows: &[Row]) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::style::{BLUE, GREEN, RED};
    let lines = |pick: fn(&Contended) -> f64| -> Vec<Line> {
        [
            (Kind::Herd, RED),
            (Kind::Mutex, BLUE),
            (Kind::MutexNoFastHandoff, GREEN),
        ]
        .into_iter()
        .map(|(kind, color)| {
            let points = rows
                .iter()
                .filter(|r| r.0 == kind && r.2 == 0)
                .map(|r| (r.1 as f64, pick(&r.3)))
                .collect();
            (kind.name().to_string(), color, points)
        })
        .collect()
    };
    plot_panels(
        concat!(env!("CARGO_MANIFEST_DIR"), "/herd.png"),
        &[
            (
                "handoff latency p50 (hold 0)",
                "contenders (N)",
                "ms",
                lines(|c| c.handoff_p50_us / 1000.0),
            ),
            (
                "watch notifications per release",
                "contenders (N)",
                "notifications",
                lines(|c| c.notifications_per_release),
            ),
        ],
    )
}
