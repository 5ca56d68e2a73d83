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
    use plotters::prelude::*;
    let font = std::fs::read("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
        .map_err(|e| format!("{e} (apt-get install fonts-dejavu-core)"))?;
    plotters::style::register_font(
        "sans-serif",
        FontStyle::Normal,
        Box::leak(font.into_boxed_slice()),
    )
    .map_err(|_| "cannot load the font")?;
    let out = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/herd.png");
    let root = BitMapBackend::new(out, (1100, 450)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(550);
    let series = |kind: Kind, pick: fn(&Contended) -> f64| -> Vec<(f64, f64)> {
        rows.iter()
            .filter(|r| r.0 == kind && r.2 == 0)
            .map(|r| (r.1 as f64, pick(&r.3)))
            .collect()
    };
    for (area, title, pick, ylabel) in [
        (
            &left,
            "handoff latency p50 (hold 0)",
            (|c: &Contended| c.handoff_p50_us / 1000.0) as fn(&Contended) -> f64,
            "ms",
        ),
        (
            &right,
            "watch notifications per release",
            (|c: &Contended| c.notifications_per_release) as fn(&Contended) -> f64,
            "notifications",
        ),
    ] {
        let ymax = rows.iter().map(|r| pick(&r.3)).fold(0.0, f64::max) * 1.1 + 0.1;
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(35)
            .y_label_area_size(55)
            .build_cartesian_2d(0f64..66f64, 0f64..ymax)?;
        chart
            .configure_mesh()
            .x_desc("contenders (N)")
            .y_desc(ylabel)
            .draw()?;
        for (kind, color) in [
            (Kind::Herd, RED),
            (Kind::Mutex, BLUE),
            (Kind::MutexNoFastHandoff, GREEN),
        ] {
            let points = series(kind, pick);
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
                .label(kind.name())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            chart.draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 4, color.filled())),
            )?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}
