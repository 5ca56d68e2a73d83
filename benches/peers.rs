//! This crate against the two peers a user would pick instead, fairly: Apache Curator 5.4 (Java,
//! `benches/CuratorBench.java`, one long-lived JVM) and `zookeeper-client` 0.11 (async Rust,
//! each contender its own session on a current-thread tokio runtime driven by its own thread;
//! release = the awaited delete of its lock node).
//!
//! Fair means:
//! - the server is warmed first, in rounds, until a round adds little JIT compile time on the
//!   server (`jstat -compiler`);
//! - Curator is warmed until its own JIT has been quiet for a second (at least 2 s);
//! - ours and both peers then run alternately, configuration by configuration, on the same
//!   server in the same run, with the same loop; a contended configuration runs in six 1 s
//!   blocks per client, the three clients taking turns in an order that rotates from block to
//!   block;
//! - client CPU per acquisition is reported for each (Curator: its JVM's; ours and
//!   `zookeeper-client`: this process's, while only that client runs), and the server's CPU
//!   per acquisition while each ran.
//!
//! `cargo bench --bench peers [-- --quick]`. Skips Curator, saying why, if Java or Curator is
//! missing.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use common::figures::*;
use common::zkc::ZkcContenders;
use common::*;

const CURATOR_JARS: &str = "/usr/share/java/curator-recipes.jar:/usr/share/java/slf4j-nop.jar";

fn main() {
    let args = args();
    let server = server(&args);
    let connect = server.connect_string();
    let ns: Vec<usize> = if args.quick {
        vec![2, 8]
    } else {
        vec![2, 8, 32, 64]
    };
    let big = if args.quick { None } else { Some(256) };
    let most = big.unwrap_or(*ns.iter().max().unwrap_or(&8));
    let run_for = Duration::from_millis(if args.quick { 500 } else { 6000 });
    let ours = clients(&connect, most);
    ours[0].ensure_path("/bench/peers").expect("path");
    let zkc = ZkcContenders::connect(&connect, most, None, ours[0].clone());
    let mut curator = match Curator::start(&connect, most) {
        Ok(c) => Some(c),
        Err(why) => {
            json("peers", &[("curator_skipped", s(&why))]);
            println!("Curator skipped: {why}");
            None
        }
    };

    // 1. The server, warmed until its JIT is quiet.
    let warm = warm_server(&server, &ours[..8.min(most)], args.quick);
    println!("server warmed: {warm}");
    // 2. Curator, warmed until its own JIT is quiet.
    if let Some(c) = curator.as_mut() {
        let most_secs = if args.quick { 3 } else { 120 };
        let warm = c.ask(&format!("warm /bench/peers/curator-warm {most_secs}"));
        println!("Curator warmed: {warm}");
        if !warm.ends_with("quiet") {
            // A peer measured with its JIT still compiling makes every ratio worthless.
            println!("Curator's JIT was not quiet yet: this run's ratios are a smoke test only");
            json("peers", &[("curator_jit_quiet", "false".into())]);
        }
    }
    // Our side and zookeeper-client get the same untimed warm-up loops.
    for i in 0..3 {
        let _ = uncontended_ours(&ours[0], &format!("/bench/peers/ours-warm-{i}"), 300);
        let _ = zkc.uncontended(&format!("/bench/peers/zkc-warm-{i}"), 300);
        let _ = zkc.contend(
            8.min(most),
            &format!("/bench/peers/zkc-warm-c{i}"),
            run_for / 3,
        );
    }

    let mut rows = Vec::new();
    // 3. Uncontended acquire (acquire latency; release not timed), blocks alternated.
    let rounds = if args.quick { 300 } else { 2000 };
    let (mut o, mut z, mut c) = (Vec::new(), Vec::new(), Vec::new());
    for block in 0..3 {
        o.push(on_server(&server, || {
            uncontended_ours(&ours[0], &format!("/bench/peers/u-ours-{block}"), rounds)
        }));
        if let Some(cur) = curator.as_mut() {
            c.push(on_server(&server, || {
                cur.result(&format!("uncontended /bench/peers/u-cur-{block} {rounds}"))
            }));
        }
        z.push(on_server(&server, || {
            zkc.uncontended(&format!("/bench/peers/u-zkc-{block}"), rounds)
        }));
    }
    rows.push((
        "uncontended acquire".to_string(),
        median(&o),
        median(&z),
        median(&c),
    ));

    // 4. Contended mutex, hold 0, at every N (and once at 256), in alternated blocks whose
    // order rotates, so that no client always runs right after another one's load.
    let blocks = if args.quick { 1 } else { 6 };
    let block_for = run_for / blocks;
    let mut curve = Vec::new();
    for &n in ns.iter().chain(big.iter()) {
        let path = format!("/bench/peers/m{n}");
        let (mut o, mut z, mut c) = (Vec::new(), Vec::new(), Vec::new());
        for block in 0..blocks {
            for turn in 0..3 {
                let dir = format!("{path}-{block}");
                match (block + turn) % 3 {
                    0 => o.push(on_server(&server, || {
                        contend_ours(Kind::Mutex, &ours[..n], &format!("{dir}-ours"), block_for)
                    })),
                    1 => c.extend(curator.as_mut().map(|cur| {
                        on_server(&server, || {
                            cur.run("mutex", &format!("{dir}-cur"), n, block_for)
                        })
                    })),
                    _ => z.push(on_server(&server, || {
                        zkc.contend(n, &format!("{dir}-zkc"), block_for)
                    })),
                }
            }
        }
        let (ours_fig, zkc_fig, cur_fig) = (combine(&o), combine(&z), combine(&c));
        // The naive herd lock, for the plot: what predecessor-only watches save.
        let herd = if n <= 64 {
            contend_ours(Kind::Herd, &ours[..n], &format!("{path}-herd"), block_for)
        } else {
            Figures::default()
        };
        curve.push((n, ours_fig, zkc_fig, cur_fig, herd));
        rows.push((format!("mutex N={n}"), ours_fig, zkc_fig, cur_fig));
    }
    // 5. The semaphore mutex and the read/write lock (10 % writes), N = 8, against Curator.
    for (kind, name) in [(Kind::Semaphore, "semaphore"), (Kind::RwLock, "rwlock")] {
        let n = 8.min(most);
        let path = format!("/bench/peers/{name}");
        let (mut o, mut c) = (Vec::new(), Vec::new());
        for block in 0..blocks {
            for turn in 0..2 {
                let dir = format!("{path}-{block}");
                if (block + turn) % 2 == 0 {
                    o.push(on_server(&server, || {
                        contend_ours(kind, &ours[..n], &format!("{dir}-ours"), block_for)
                    }));
                } else {
                    c.extend(curator.as_mut().map(|cur| {
                        on_server(&server, || {
                            cur.run(name, &format!("{dir}-cur"), n, block_for)
                        })
                    }));
                }
            }
        }
        rows.push((
            format!("{name} N={n}"),
            combine(&o),
            Figures::default(),
            combine(&c),
        ));
    }
    if let Some(mut c) = curator {
        c.quit();
    }
    report(&rows);
    if !args.quick {
        if let Err(e) = plot(&curve) {
            println!("no plot: {e}");
        }
    }
}

/// `benches/peers.png`: throughput and handoff latency against contenders, for ours, both
/// peers and the herd lock.
fn plot(
    curve: &[(usize, Figures, Figures, Figures, Figures)],
) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::style::{BLUE, GREEN, MAGENTA, RED};
    let pick = |f: fn(&(usize, Figures, Figures, Figures, Figures)) -> Figures,
                y: fn(&Figures) -> f64| {
        curve
            .iter()
            .filter(|c| c.0 <= 64)
            .map(|c| (c.0 as f64, y(&f(c))))
            .filter(|p| p.1 > 0.0)
            .collect::<Vec<_>>()
    };
    let lines = |y: fn(&Figures) -> f64| -> Vec<Line> {
        vec![
            ("zk-recipes".into(), BLUE, pick(|c| c.1, y)),
            ("zookeeper-client".into(), GREEN, pick(|c| c.2, y)),
            ("Curator".into(), MAGENTA, pick(|c| c.3, y)),
            ("herd lock".into(), RED, pick(|c| c.4, y)),
        ]
    };
    plot_panels(
        concat!(env!("CARGO_MANIFEST_DIR"), "/benches/peers.png"),
        &[
            (
                "acquisitions per second (hold 0)",
                "contenders (N)",
                "acq/s",
                lines(|f| f.per_second),
            ),
            (
                "handoff latency p50 (hold 0)",
                "contenders (N)",
                "µs",
                lines(|f| f.p50_us),
            ),
        ],
    )
}

fn report(rows: &[(String, Figures, Figures, Figures)]) {
    println!(
        "\n{:<22}{:>11}{:>11}{:>11}{:>9}{:>9}{:>11}{:>11}{:>11}{:>9}{:>9}{:>8}{:>8}{:>8}{:>8}{:>8}{:>8}",
        "",
        "ours/s",
        "zkc/s",
        "cur/s",
        "÷zkc",
        "÷cur",
        "ours p50",
        "zkc p50",
        "cur p50",
        "÷zkc",
        "÷cur",
        "cpu us",
        "zkc",
        "cur",
        "srv us",
        "zkc",
        "cur"
    );
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    for (name, o, z, c) in rows {
        json(
            "peers",
            &[
                ("config", s(name)),
                ("ours_per_second", f(o.per_second)),
                ("zkc_per_second", f(z.per_second)),
                ("curator_per_second", f(c.per_second)),
                ("ours_p50_us", f(o.p50_us)),
                ("zkc_p50_us", f(z.p50_us)),
                ("curator_p50_us", f(c.p50_us)),
                ("ours_p99_us", f(o.p99_us)),
                ("zkc_p99_us", f(z.p99_us)),
                ("curator_p99_us", f(c.p99_us)),
                ("ours_cpu_us_per_acq", f(o.cpu_us_per_acq)),
                ("ours_notifications_per_release", f(o.notifications)),
                ("zkc_cpu_us_per_acq", f(z.cpu_us_per_acq)),
                ("curator_cpu_us_per_acq", f(c.cpu_us_per_acq)),
                ("ours_server_us_per_acq", f(o.server_us_per_acq)),
                ("zkc_server_us_per_acq", f(z.server_us_per_acq)),
                ("curator_server_us_per_acq", f(c.server_us_per_acq)),
            ],
        );
        println!(
            "{name:<22}{:>11.0}{:>11.0}{:>11.0}{:>9.2}{:>9.2}{:>11.0}{:>11.0}{:>11.0}{:>9.2}{:>9.2}{:>8.0}{:>8.0}{:>8.0}{:>8.0}{:>8.0}{:>8.0}",
            o.per_second,
            z.per_second,
            c.per_second,
            ratio(o.per_second, z.per_second),
            ratio(o.per_second, c.per_second),
            o.p50_us,
            z.p50_us,
            c.p50_us,
            ratio(o.p50_us, z.p50_us),
            ratio(o.p50_us, c.p50_us),
            o.cpu_us_per_acq,
            z.cpu_us_per_acq,
            c.cpu_us_per_acq,
            o.server_us_per_acq,
            z.server_us_per_acq,
            c.server_us_per_acq,
        );
    }
    println!("(p50: acquire latency when uncontended, handoff latency when contended)");
    for (name, o, _, _) in rows {
        if o.notifications > 0.0 {
            println!(
                "{name}: {:.2} watch notifications per release (ours)",
                o.notifications
            );
        }
    }
}

/// The Curator driver: one JVM for the whole run, commands on its standard input.
struct Curator {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    _dir: std::path::PathBuf,
}

impl Curator {
    fn start(connect: &str, clients: usize) -> Result<Curator, String> {
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
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("curator-bench");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let source = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/CuratorBench.java");
        let compiled = Command::new("javac")
            .args(["-cp", CURATOR_JARS, "-d"])
            .arg(&dir)
            .arg(source)
            .status()
            .map_err(|e| e.to_string())?;
        if !compiled.success() {
            return Err("javac failed".into());
        }
        let cp = format!("{}:{CURATOR_JARS}", dir.display());
        let mut child = Command::new("java")
            .args(["-Xmx1g", "-cp", &cp, "CuratorBench", connect])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let mut c = Curator {
            child,
            stdin,
            stdout,
            _dir: dir,
        };
        c.ask(&format!("clients {clients}"));
        Ok(c)
    }

    fn ask(&mut self, command: &str) -> String {
        writeln!(self.stdin, "{command}").expect("to the Curator driver");
        self.stdin.flush().expect("to the Curator driver");
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .expect("from the Curator driver");
        line.trim().to_owned()
    }

    fn numbers(&mut self, command: &str) -> Vec<f64> {
        let answer = self.ask(command);
        let Some(rest) = answer.strip_prefix("RESULT ") else {
            panic!("the Curator driver answered {answer:?} to {command:?}");
        };
        rest.split(' ').filter_map(|x| x.parse().ok()).collect()
    }

    /// `uncontended PATH ROUNDS`.
    fn result(&mut self, command: &str) -> Figures {
        let v = self.numbers(command);
        Figures {
            per_second: 0.0,
            p50_us: v[1],
            p99_us: v[2],
            cpu_us_per_acq: v[3] / 1000.0,
            acquisitions: v[0],
            ..Default::default()
        }
    }

    fn run(&mut self, kind: &str, path: &str, n: usize, run_for: Duration) -> Figures {
        let v = self.numbers(&format!("run {kind} {path} {n} {}", run_for.as_millis()));
        Figures {
            per_second: v[1],
            p50_us: v[2],
            p99_us: v[3],
            cpu_us_per_acq: v[4] / 1000.0,
            acquisitions: v[0],
            ..Default::default()
        }
    }

    fn quit(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        let _ = self.child.wait();
    }
}

impl Drop for Curator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
