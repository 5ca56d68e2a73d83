//! Shared bench code: a server, clients, the contended loop that drives any lock, percentiles,
//! and JSON-line output.
#![allow(dead_code)]

pub mod driver;
pub mod figures;
pub mod heap;
pub mod procs;
pub mod shared_floor;
pub mod target;
pub mod turn;
pub mod wire;
pub mod zkc;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use zk_recipes::lock::{HerdLock, InterProcessMutex, LockOptions};
use zk_recipes::testing::{ServerOptions, TestingServer};
use zk_recipes::Client;
use zk_recipes::{InterProcessReadWriteLock, InterProcessSemaphoreMutex};

/// Command-line flags every bench takes: `--quick` (CI smoke run), `--fsync`; and
/// `--ensemble` (the benches that offer it: a three-member ensemble that fsyncs), with
/// `--on-leader` its clients on the leader rather than a follower.
pub struct Args {
    pub quick: bool,
    pub fsync: bool,
    pub ensemble: bool,
    pub on_leader: bool,
}

/// Curator 5.4's jars (Debian's `libcurator-recipes-java`) and a logger that says nothing.
pub const CURATOR_JARS: &str = "/usr/share/java/curator-recipes.jar:/usr/share/java/slf4j-nop.jar";

/// Compiles the Java driver `benches/<class>.java` against Curator's jars into a directory of
/// the build's, and returns the class path to run it with; or why it cannot run here.
pub fn curator_driver(class: &str) -> Result<String, String> {
    use std::path::Path;
    use std::process::Command;
    for tool in ["java", "javac"] {
        if Command::new(tool).arg("-version").output().is_err() {
            return Err(format!(
                "no `{tool}` (apt-get install default-jdk-headless)"
            ));
        }
    }
    for jar in CURATOR_JARS.split(':') {
        if !Path::new(jar).exists() {
            return Err(format!(
                "{jar} missing (apt-get install libcurator-recipes-java libslf4j-java)"
            ));
        }
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{class}-classes"));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let source = format!("{}/{class}.java", env!("CARGO_MANIFEST_DIR"));
    let compiled = Command::new("javac")
        .args(["-cp", CURATOR_JARS, "-d"])
        .arg(&dir)
        .arg(source)
        .status()
        .map_err(|e| e.to_string())?;
    if !compiled.success() {
        return Err("javac failed".into());
    }
    Ok(format!("{}:{CURATOR_JARS}", dir.display()))
}

pub fn args() -> Args {
    let args: Vec<String> = std::env::args().collect();
    Args {
        quick: args.iter().any(|a| a == "--quick") || std::env::var_os("ZKR_BENCH_QUICK").is_some(),
        fsync: args.iter().any(|a| a == "--fsync"),
        ensemble: args.iter().any(|a| a == "--ensemble"),
        on_leader: args.iter().any(|a| a == "--on-leader"),
    }
}

/// Logs errors only (and nothing from the raw `zookeeper` crate), unless `RUST_LOG` says more.
pub fn init_logs() {
    let _ = env_logger::Builder::from_env(
        env_logger::Env::default().default_filter_or("error,zookeeper=off"),
    )
    .try_init();
}

pub fn server(args: &Args) -> TestingServer {
    init_logs();
    TestingServer::with_options(ServerOptions {
        force_sync: args.fsync,
        ..Default::default()
    })
    .expect("start ZooKeeper (apt-get install zookeeper)")
}

pub fn clients(connect: &str, n: usize) -> Vec<Client> {
    (0..n)
        .map(|_| {
            Client::builder(connect)
                .session_timeout(Duration::from_secs(30))
                .connect()
                .expect("connect")
        })
        .collect()
}

/// The p-th percentile (0..=1) of `samples`, in microseconds.
pub fn pct(samples: &mut [Duration], p: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.sort();
    let i = ((samples.len() - 1) as f64 * p).round() as usize;
    samples[i].as_secs_f64() * 1e6
}

/// Prints one JSON object per line: `fields` are (name, already-JSON value, made by [`s`],
/// [`f`] or a literal), in this order after `"bench"`. Written by `serde_json`, so a name or a
/// message with a quote in it still makes a valid line.
pub fn json(bench: &str, fields: &[(&str, String)]) {
    let mut line = serde_json::Map::new();
    line.insert("bench".into(), bench.into());
    for (k, v) in fields {
        let value = serde_json::from_str(v).unwrap_or_else(|_| v.as_str().into());
        line.insert((*k).into(), value);
    }
    println!("{}", serde_json::Value::Object(line));
}

/// A JSON field name built at run time (a bench makes a few dozen).
pub fn leak(name: String) -> &'static str {
    Box::leak(name.into_boxed_str())
}

/// A string as a JSON value.
pub fn s(v: &str) -> String {
    serde_json::Value::from(v).to_string()
}

/// A number as a JSON value, two decimals; `null` for one that is not finite (a ratio to a
/// figure that was not measured).
pub fn f(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.2}")
    } else {
        "null".into()
    }
}

/// Runs `one_round` over and over on one thread per worker state for `run_for`, all starting
/// together; returns the rounds completed per second.
pub fn timed<T: Send + 'static>(
    workers: Vec<T>,
    run_for: Duration,
    one_round: impl Fn(&T) + Send + Sync + 'static,
) -> f64 {
    let one_round = Arc::new(one_round);
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(workers.len() + 1));
    let threads: Vec<_> = workers
        .into_iter()
        .map(|w| {
            let (one_round, stop, count, start) = (
                one_round.clone(),
                stop.clone(),
                count.clone(),
                start.clone(),
            );
            thread::spawn(move || {
                start.wait();
                while !stop.load(Ordering::Relaxed) {
                    one_round(&w);
                    count.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let (rounds, secs) = run_window(&start, &stop, &count, run_for, threads);
    rounds as f64 / secs
}

/// Releases workers waiting at `start`, lets them run for `run_for`, then stops and joins
/// them: what `count` held when they were told to stop, and the seconds until then. (A bench
/// measures a time window: the sleep is the measurement, not a synchronisation.)
pub fn run_window(
    start: &Barrier,
    stop: &AtomicBool,
    count: &AtomicU64,
    run_for: Duration,
    threads: Vec<thread::JoinHandle<()>>,
) -> (u64, f64) {
    start.wait();
    let began = Instant::now();
    thread::sleep(run_for);
    stop.store(true, Ordering::Relaxed);
    let counted = count.load(Ordering::Relaxed);
    let secs = began.elapsed().as_secs_f64();
    for t in threads {
        t.join().expect("a bench worker");
    }
    (counted, secs)
}

/// The coordinator of a run in rounds: for each of `rounds` rounds, releases the `n` members
/// waiting at `go` (`n + 1` parties: they and the coordinator) and takes each member's
/// (start, end) of the round from `results`. A round lasts from its first member's start to
/// its last member's end; the rounds' durations. A member that fails or hangs is reported
/// here, after a long wait, as a panic.
pub fn rounds(
    go: &Barrier,
    results: &std::sync::mpsc::Receiver<(Instant, Instant)>,
    n: usize,
    rounds: usize,
) -> Vec<Duration> {
    (0..rounds)
        .map(|_| {
            go.wait();
            let spans: Vec<(Instant, Instant)> = (0..n)
                .map(|_| {
                    results
                        .recv_timeout(Duration::from_secs(180))
                        .expect("every member's round (one failed or hung)")
                })
                .collect();
            let first = spans.iter().map(|s| s.0).min().expect("a member");
            let last = spans.iter().map(|s| s.1).max().expect("a member");
            last - first
        })
        .collect()
}

/// Which lock the contended loop drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Mutex,
    MutexNoFastHandoff,
    Herd,
    /// `InterProcessSemaphoreMutex`.
    Semaphore,
    /// `InterProcessReadWriteLock`: a write every tenth round, reads otherwise.
    RwLock,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Mutex => "predecessor",
            Kind::MutexNoFastHandoff => "predecessor-no-fast-handoff",
            Kind::Herd => "herd",
            Kind::Semaphore => "semaphore",
            Kind::RwLock => "rwlock",
        }
    }
}

/// One lock, seen by one client, held around `work` (one bench loop drives every kind).
enum Lock {
    Mutex(Box<InterProcessMutex>),
    Herd(HerdLock),
    Semaphore(InterProcessSemaphoreMutex),
    ReadWrite(Box<InterProcessReadWriteLock>, AtomicU64),
}

impl Lock {
    fn new(kind: Kind, client: &Client, path: &str) -> Lock {
        match kind {
            Kind::Mutex => Lock::Mutex(Box::new(
                InterProcessMutex::new(client, path).expect("lock"),
            )),
            Kind::MutexNoFastHandoff => Lock::Mutex(Box::new(
                InterProcessMutex::with_options(
                    client,
                    path,
                    LockOptions::new().fast_handoff(false),
                )
                .expect("lock"),
            )),
            Kind::Herd => Lock::Herd(HerdLock::new(client, path).expect("lock")),
            Kind::Semaphore => {
                Lock::Semaphore(InterProcessSemaphoreMutex::new(client, path).expect("lock"))
            }
            Kind::RwLock => Lock::ReadWrite(
                Box::new(InterProcessReadWriteLock::new(client, path).expect("lock")),
                AtomicU64::new(0),
            ),
        }
    }

    fn hold(&self, work: impl FnOnce()) {
        match self {
            Lock::Mutex(m) => {
                let g = m.acquire().expect("acquire");
                work();
                drop(g);
            }
            Lock::Herd(h) => {
                let g = h.acquire().expect("acquire");
                work();
                drop(g);
            }
            Lock::Semaphore(s) => {
                let g = s.acquire().expect("acquire");
                work();
                drop(g);
            }
            Lock::ReadWrite(rw, round) => {
                let side = if round.fetch_add(1, Ordering::Relaxed) % 10 == 9 {
                    rw.write_lock()
                } else {
                    rw.read_lock()
                };
                let g = side.acquire().expect("acquire");
                work();
                drop(g);
            }
        }
    }
}

/// What a contended run measured.
pub struct Contended {
    pub acquisitions: u64,
    pub per_second: f64,
    pub handoff_p50_us: f64,
    pub handoff_p99_us: f64,
    pub notifications_per_release: f64,
    pub requests_per_acquisition: f64,
    pub most_inside: usize,
}

/// `clients.len()` contenders, one per client, take the lock in turn for `run_for`, holding it
/// `hold` each time. Handoff latency: from the moment a holder calls release to the moment the
/// next holder's acquire returns, on one clock.
pub fn contend(
    kind: Kind,
    clients: &[Client],
    path: &str,
    hold: Duration,
    run_for: Duration,
) -> Contended {
    let n = clients.len();
    let before: Vec<_> = clients.iter().map(|c| c.metrics()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let acquisitions = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let released_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let handoffs: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let start = Arc::new(Barrier::new(n + 1));
    let threads: Vec<_> = clients
        .iter()
        .map(|c| {
            let lock = Lock::new(kind, c, path);
            let (stop, acquisitions, inside, most, released_at, handoffs, start) = (
                stop.clone(),
                acquisitions.clone(),
                inside.clone(),
                most.clone(),
                released_at.clone(),
                handoffs.clone(),
                start.clone(),
            );
            thread::spawn(move || {
                start.wait();
                while !stop.load(Ordering::Relaxed) {
                    lock.hold(|| {
                        let now = Instant::now();
                        if let Some(r) = released_at.lock().unwrap().take() {
                            handoffs.lock().unwrap().push(now - r);
                        }
                        let k = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(k, Ordering::SeqCst);
                        acquisitions.fetch_add(1, Ordering::Relaxed);
                        if !hold.is_zero() {
                            thread::sleep(hold);
                        }
                        inside.fetch_sub(1, Ordering::SeqCst);
                        *released_at.lock().unwrap() = Some(Instant::now());
                    });
                }
            })
        })
        .collect();
    let (counted, secs) = run_window(&start, &stop, &acquisitions, run_for, threads);
    let total = acquisitions.load(Ordering::Relaxed).max(1);
    let after: Vec<_> = clients.iter().map(|c| c.metrics()).collect();
    let delta = |f: fn(&zk_recipes::ClientMetrics) -> u64| -> u64 {
        before.iter().zip(&after).map(|(b, a)| f(a) - f(b)).sum()
    };
    let mut h = handoffs.lock().unwrap().clone();
    Contended {
        acquisitions: counted,
        per_second: counted as f64 / secs,
        handoff_p50_us: pct(&mut h, 0.5),
        handoff_p99_us: pct(&mut h, 0.99),
        notifications_per_release: delta(|m| m.watch_events) as f64 / total as f64,
        requests_per_acquisition: delta(|m| m.requests) as f64 / total as f64,
        most_inside: most.load(Ordering::SeqCst),
    }
}

/// CPU time this process has used so far (user + system), from `/proc/self/stat`.
pub fn process_cpu() -> Duration {
    cpu_of("self")
}

/// CPU time process `pid` has used so far.
pub fn cpu_of(pid: &str) -> Duration {
    stat_ticks(pid, [11, 12])
}

/// CPU time this process's finished (waited-for) children have used so far.
pub fn children_cpu() -> Duration {
    stat_ticks("self", [13, 14])
}

/// The sum of some clock-tick fields of `/proc/<pid>/stat` (counted after the command name).
fn stat_ticks(pid: &str, which: [usize; 2]) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks: u64 = which
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    // USER_HZ is 100 on Linux.
    Duration::from_millis(ticks * 10)
}

/// One line of a chart: its name, colour and points.
pub type Line = (String, plotters::style::RGBColor, Vec<(f64, f64)>);

/// Draws side-by-side line charts into a PNG: each panel is (title, x label, y label, lines).
pub fn plot_panels(
    out: &str,
    panels: &[(&str, &str, &str, Vec<Line>)],
) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let font = std::fs::read("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
        .map_err(|e| format!("{e} (apt-get install fonts-dejavu-core)"))?;
    // Registering twice in one process is refused; the first one stays, which is fine.
    let _ = plotters::style::register_font(
        "sans-serif",
        FontStyle::Normal,
        Box::leak(font.into_boxed_slice()),
    );
    let width = 550 * panels.len() as u32;
    let root = BitMapBackend::new(out, (width, 450)).into_drawing_area();
    root.fill(&WHITE)?;
    let areas = root.split_evenly((1, panels.len()));
    for (area, (title, xlabel, ylabel, lines)) in areas.iter().zip(panels) {
        let xmax = lines
            .iter()
            .flat_map(|l| l.2.iter().map(|p| p.0))
            .fold(1.0, f64::max)
            * 1.05;
        let ymax = lines
            .iter()
            .flat_map(|l| l.2.iter().map(|p| p.1))
            .fold(0.0, f64::max)
            * 1.1
            + 0.1;
        let mut chart = ChartBuilder::on(area)
            .caption(*title, ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..xmax, 0f64..ymax)?;
        chart
            .configure_mesh()
            .x_desc(*xlabel)
            .y_desc(*ylabel)
            .draw()?;
        for (name, color, points) in lines {
            let color = *color;
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            chart.draw_series(points.iter().map(|p| Circle::new(*p, 4, color.filled())))?;
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
