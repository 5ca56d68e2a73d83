//! A batch cluster: the same job runs on several machines, and exactly one of them does the
//! scheduled work at a time. When the leader dies (SIGKILL) another takes over within the
//! session timeout; when it stops gracefully the next one takes over at once.
//!
//! ```text
//! cargo run -p zk-recipes-examples --example batch_leader                 # starts ZooKeeper, runs 3 workers, kills one
//! cargo run -p zk-recipes-examples --example batch_leader -- --workers 5  # more workers
//! ZK_CONNECT=host:2181 cargo run -p zk-recipes-examples --example batch_leader -- --worker --id a --file /tmp/jobs.log
//! ```
//!
//! Each term, the leader appends `job <n> by <id> token <fencing token>` to a shared file. It
//! refuses to write with a token older than the file's last one, so a leader that was paused
//! past its session cannot write over its successor.

use std::ffi::OsStr;
use std::fs::OpenOptions;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use zk_recipes::leader::LeaderSelector;
use zk_recipes::Client;
use zk_recipes_examples::{spawn_workers, Args};

const PATH: &str = "/batch/nightly-job";

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> AnyResult<()> {
    let args = Args::from_env();
    let flag = |name: &str| args.flag(name);
    let connect = args.connect();
    let (session, tick) = args.session_and_tick();
    if args.has("--worker") {
        let id = flag("--id").ok_or("--worker needs --id NAME")?;
        let file = PathBuf::from(flag("--file").ok_or("--worker needs --file PATH")?);
        let connect = connect.ok_or("--worker needs --connect HOSTS or ZK_CONNECT")?;
        return worker(&connect, &id, &file, session, tick);
    }
    let workers = args.workers(3, 2);
    let (_server, connect, tick) = args.ensemble()?;
    cluster(&connect, workers, session, tick)
}

/// One machine of the cluster: contends for leadership until its standard input closes.
fn worker(
    connect: &str,
    id: &str,
    file: &Path,
    session: Duration,
    tick: Duration,
) -> AnyResult<()> {
    let client = Client::builder(connect)
        .session_timeout(session)
        .tick_time(tick)
        .connect()?;
    let me = id.to_owned();
    let file = file.to_owned();
    let selector = LeaderSelector::new(&client, PATH, id, move |ctx| {
        let Ok(token) = ctx.lease().fencing_token() else {
            return;
        };
        println!("LEADING {me} {token}");
        match append_job(&file, &me, token) {
            Ok(n) => println!("JOB {me} {n}"),
            Err(e) => println!("REFUSED {me} {e}"),
        }
        // Hold the shift for a while, stopping at once if leadership comes into doubt.
        for _ in 0..20 {
            if ctx.is_cancelled() {
                println!("CANCELLED {me}");
                return;
            }
            thread::sleep(Duration::from_millis(25));
        }
    })?
    .auto_requeue();
    selector.start()?;
    // Standard input closing (or "stop") is the graceful-stop signal.
    for line in std::io::stdin().lock().lines() {
        if line.map_or(true, |l| l.trim() == "stop") {
            break;
        }
    }
    selector.close();
    client.close();
    println!("STOPPED {id}");
    Ok(())
}

/// Appends a job line, refusing a token older than the last one written.
fn append_job(file: &Path, id: &str, token: i64) -> AnyResult<usize> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let last = lines
        .last()
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|t| t.parse::<i64>().ok());
    if last.is_some_and(|last| token < last) {
        return Err(format!("token {token} is older than {last:?}: a newer leader wrote").into());
    }
    let n = lines.len() + 1;
    let mut f = OpenOptions::new().create(true).append(true).open(file)?;
    writeln!(f, "job {n} by {id} token {token}")?;
    Ok(n)
}

/// Runs `count` worker processes and shows a crash handover and a graceful one.
fn cluster(connect: &str, count: usize, session: Duration, tick: Duration) -> AnyResult<()> {
    let file = std::env::temp_dir().join(format!("batch-leader-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&file);
    let (tx, rx) = mpsc::channel::<(String, Instant)>();
    let extra = [OsStr::new("--file"), file.as_os_str()];
    let mut workers = spawn_workers(count, connect, &extra, (session, tick), &tx)?;
    println!("{count} workers contend on {PATH} (session {session:?})");
    let started = Instant::now();
    let next_leader = |rx: &mpsc::Receiver<(String, Instant)>| -> AnyResult<(String, Instant)> {
        loop {
            let (line, at) = rx.recv_timeout(Duration::from_secs(60))?;
            println!(
                "  {:>6.2}s {line}",
                at.duration_since(started).as_secs_f64()
            );
            if let Some(rest) = line.strip_prefix("LEADING ") {
                let id = rest.split(' ').next().unwrap_or_default().to_owned();
                return Ok((id, at));
            }
        }
    };

    // A few ordinary turns.
    let mut leader = String::new();
    for _ in 0..4 {
        leader = next_leader(&rx)?.0;
    }

    // The leader's machine dies.
    let victim = workers
        .iter_mut()
        .find(|w| w.id == leader)
        .ok_or("leader not found")?;
    victim.child.kill()?;
    let killed_at = Instant::now();
    println!("SIGKILL {leader}");
    let (heir, at) = next_leader(&rx)?;
    println!(
        "=> {heir} took over {:?} after the crash (session timeout {session:?})",
        at.duration_since(killed_at)
    );

    // The next leader stops gracefully, while it leads.
    let graceful = workers
        .iter_mut()
        .find(|w| w.id == heir)
        .ok_or("heir not found")?;
    drop(graceful.stdin.take());
    let stopped_at = Instant::now();
    println!("graceful stop of {heir}");
    let (next, at) = next_leader(&rx)?;
    println!(
        "=> {next} took over {:?} after the graceful stop",
        at.duration_since(stopped_at)
    );

    for w in &mut workers {
        drop(w.stdin.take());
    }
    for w in &mut workers {
        let _ = w.child.wait();
    }
    while let Ok((line, at)) = rx.try_recv() {
        println!(
            "  {:>6.2}s {line}",
            at.duration_since(started).as_secs_f64()
        );
    }

    let text = std::fs::read_to_string(&file)?;
    println!("\n{}:\n{text}", file.display());
    let tokens: Vec<i64> = text
        .lines()
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    let increasing = tokens.windows(2).all(|w| w[0] < w[1]);
    println!(
        "{} jobs, one leader per job, fencing tokens strictly increasing: {increasing}",
        tokens.len()
    );
    let _ = std::fs::remove_file(&file);
    if increasing {
        Ok(())
    } else {
        Err("two leaders wrote out of order".into())
    }
}
