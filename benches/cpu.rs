//! Where a contended acquisition's client CPU goes: ours beside the wire floor (N = 8, one
//! server), in alternated rounds, with what each costs the client and the server per
//! acquisition, and the allocations each makes per acquisition. A third column runs the floor
//! with lock nodes of our shape (the protected name and a holder id as data): the part of the
//! server's extra work that our safety edges cost, apart from the client's.
//!
//! `cargo bench --bench cpu [-- --quick] [-- SECONDS]` (a round per client, three rounds).
//!
//! Instructions per acquisition, which do not move with the machine's load (the figures in
//! `benches/RESULTS.md`, issue 22): run one client alone under callgrind, for two lengths,
//! and divide the difference in instructions by the difference in acquisitions:
//! `ZKR_CPU_ALONE=ours valgrind --tool=callgrind <bench binary> 4` (then `12`; `floor` for the
//! floor). The binary is the one `cargo bench --bench cpu --no-run` names. It prints
//! `READY <pid>` before the measured rounds, for `perf record -p`.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::figures::{contend_ours, on_server, warm_server, Figures};
use common::*;

/// Counting, only while an allocation pass runs (a flag every thread reads, no shared write
/// otherwise: the timed rounds do not pay for it).
static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

struct Counted;

// SAFETY: every call goes to `System` unchanged; the counter has no effect on the memory.
unsafe impl GlobalAlloc for Counted {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static HEAP: Counted = Counted;

const N: usize = 8;
const CLIENTS: [&str; 3] = ["ours", "floor", "floor, our nodes"];

fn main() {
    let args = args();
    let secs: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(if args.quick { 1 } else { 5 });
    let run_for = Duration::from_secs(secs);
    let server = server(&args);
    let connect = server.connect_string();
    let ours = clients(&connect, N);
    ours[0].ensure_path("/bench/cpu").expect("path");
    let run = |who: &str, dir: &str, run_for: Duration| -> Figures {
        ours[0].ensure_path(dir).expect("path");
        match who {
            "ours" => contend_ours(Kind::Mutex, &ours, dir, run_for),
            "floor" => wire::contended(&connect, dir, N, run_for),
            _ => wire::contended_like_ours(&connect, dir, N, run_for),
        }
    };
    if let Ok(who) = std::env::var("ZKR_CPU_ALONE") {
        let f = run(&who, &format!("/bench/cpu/alone-{who}"), run_for);
        println!("{who}: {} acquisitions", f.acquisitions);
        return;
    }
    println!("server warmed: {}", warm_server(&server, &ours, args.quick));
    for (i, who) in CLIENTS.iter().enumerate() {
        let _ = run(who, &format!("/bench/cpu/warm-{i}"), run_for / 2);
    }
    println!("READY {}", std::process::id());
    let _ = std::io::stdout().flush();
    let rounds = if args.quick { 1 } else { 3 };
    for round in 0..rounds {
        for (i, who) in CLIENTS.iter().enumerate() {
            let f = on_server(&server, || {
                run(who, &format!("/bench/cpu/r{round}-{i}"), run_for)
            });
            println!(
                "round {round} {who:>16}: {:6.0} acq/s, client {:5.1} µs/acq, server {:5.1} µs/acq",
                f.per_second, f.cpu_us_per_acq, f.server_us_per_acq
            );
            json(
                "cpu",
                &[
                    ("round", round.to_string()),
                    ("client", s(who)),
                    ("acq_per_s", format!("{:.0}", f.per_second)),
                    ("client_us_per_acq", format!("{:.1}", f.cpu_us_per_acq)),
                    ("server_us_per_acq", format!("{:.1}", f.server_us_per_acq)),
                ],
            );
        }
    }
    for (i, who) in CLIENTS.iter().enumerate().take(2) {
        ALLOCATIONS.store(0, Ordering::Relaxed);
        COUNTING.store(true, Ordering::Relaxed);
        let f = run(
            who,
            &format!("/bench/cpu/alloc-{i}"),
            run_for.min(Duration::from_secs(2)),
        );
        COUNTING.store(false, Ordering::Relaxed);
        let per = ALLOCATIONS.load(Ordering::Relaxed) as f64 / f.acquisitions.max(1.0);
        println!("{who:>22}: {per:.1} allocations per acquisition (the bench's own included)");
        json(
            "cpu",
            &[
                ("client", s(who)),
                ("allocations_per_acq", format!("{per:.1}")),
            ],
        );
    }
}
