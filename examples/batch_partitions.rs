//! Worker processes share 64 partitions: each partition is worked on by one worker at a time,
//! under a lease and a fencing token of its own. One worker is killed (SIGKILL: its
//! partitions move once its session expires), another stops gracefully (its partitions move
//! at once), and no partition is ever written by an older owner after a newer one.
//!
//! ```text
//! cargo run -p zk-recipes-examples --example batch_partitions                  # starts ZooKeeper, 4 workers
//! cargo run -p zk-recipes-examples --example batch_partitions -- --workers 6
//! ZK_CONNECT=host:2181 cargo run -p zk-recipes-examples --example batch_partitions -- --worker --id a --dir /tmp/parts
//! ```
//!
//! Each piece of work appends `by <id> token <fencing token>` to its partition's file, and
//! refuses to write with a token older than the file's last one (the resource's own fencing,
//! as a database or a storage service would do it).

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs::OpenOptions;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use zk_recipes::partition::Partitioner;
use zk_recipes::Client;
use zk_recipes_examples::{spawn_workers, Args};

const PATH: &str = "/batch/ingest";
const PARTITIONS: usize = 64;

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

fn partitions() -> Vec<String> {
    (0..PARTITIONS)
        .map(|p| format!("partition-{p:02}"))
        .collect()
}

fn main() -> AnyResult<()> {
    let args = Args::from_env();
    let flag = |name: &str| args.flag(name);
    let connect = args.connect();
    let (session, tick) = args.session_and_tick();
    if args.has("--worker") {
        let id = flag("--id").ok_or("--worker needs --id NAME")?;
        let dir = PathBuf::from(flag("--dir").ok_or("--worker needs --dir PATH")?);
        let connect = connect.ok_or("--worker needs --connect HOSTS or ZK_CONNECT")?;
        return worker(&connect, &id, &dir, session, tick);
    }
    let workers = args.workers(4, 3);
    let (_server, connect, tick) = args.ensemble()?;
    cluster(&connect, workers, session, tick)
}

/// One worker: works on whatever partitions it owns until its standard input closes.
fn worker(connect: &str, id: &str, dir: &Path, session: Duration, tick: Duration) -> AnyResult<()> {
    let client = Client::builder(connect)
        .session_timeout(session)
        .tick_time(tick)
        .connect()?;
    let share = Partitioner::new(&client, PATH, id, partitions())?;
    share.start()?;
    let stopping = Arc::new(AtomicBool::new(false));
    {
        let stopping = stopping.clone();
        thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                if line.map_or(true, |l| l.trim() == "stop") {
                    break;
                }
            }
            stopping.store(true, Ordering::SeqCst);
        });
    }
    let mut last: BTreeSet<String> = BTreeSet::new();
    while !stopping.load(Ordering::SeqCst) {
        let owned = share.owned();
        let now: BTreeSet<String> = owned.iter().map(|o| o.item().to_owned()).collect();
        if now != last {
            println!("OWNS {id} {}", now.len());
            last = now;
        }
        for item in &owned {
            let Ok(token) = item.fencing_token() else {
                continue;
            };
            // The work runs only while the lease vouches for the partition; the write itself
            // is fenced by the partition's file.
            let written = item.run(|| append(dir, item.item(), id, token));
            if let Ok(Err(e)) = written {
                println!("REFUSED {id} {} {e}", item.item());
            }
        }
        // A worker's pace (a piece of work per partition every 100 ms), not a synchronisation.
        share.wait_for_change(Duration::from_millis(100));
    }
    share.close();
    client.close();
    println!("STOPPED {id}");
    Ok(())
}

/// Appends a line to `item`'s file, refusing a token older than the file's last one.
fn append(dir: &Path, item: &str, id: &str, token: i64) -> AnyResult<()> {
    let file = dir.join(item);
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    let last = text
        .lines()
        .last()
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|t| t.parse::<i64>().ok());
    if last.is_some_and(|last| token < last) {
        return Err(format!("token {token} is older than {last:?}").into());
    }
    let mut f = OpenOptions::new().create(true).append(true).open(file)?;
    writeln!(f, "by {id} token {token}")?;
    Ok(())
}

/// The owners of each partition so far, from its file.
fn owners(dir: &Path) -> Vec<(String, Vec<(String, i64)>)> {
    partitions()
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(dir.join(&p)).unwrap_or_default();
            let lines = text
                .lines()
                .filter_map(|l| {
                    let f: Vec<&str> = l.split(' ').collect();
                    Some((f.get(1)?.to_string(), f.get(3)?.parse().ok()?))
                })
                .collect();
            (p, lines)
        })
        .collect()
}

/// Runs `count` workers, kills one, stops another, and checks every partition's file.
fn cluster(connect: &str, count: usize, session: Duration, tick: Duration) -> AnyResult<()> {
    let dir = std::env::temp_dir().join(format!("batch-partitions-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let (tx, rx) = mpsc::channel::<(String, Instant)>();
    let extra = [OsStr::new("--dir"), dir.as_os_str()];
    let mut workers = spawn_workers(count, connect, &extra, (session, tick), &tx)?;
    println!("{count} workers share {PARTITIONS} partitions at {PATH} (session {session:?})");
    let started = Instant::now();
    // Until every partition has been worked on by the worker that owns it now, and again
    // after each change: the files tell.
    let all_worked_since =
        |since: usize, rx: &mpsc::Receiver<(String, Instant)>| -> AnyResult<()> {
            let until = Instant::now() + Duration::from_secs(60);
            loop {
                while let Ok((line, at)) = rx.try_recv() {
                    println!(
                        "  {:>6.2}s {line}",
                        at.duration_since(started).as_secs_f64()
                    );
                }
                let counts: Vec<usize> = owners(&dir).iter().map(|(_, l)| l.len()).collect();
                if counts.iter().all(|&c| c > since) {
                    return Ok(());
                }
                if Instant::now() >= until {
                    return Err("some partitions were never worked on".into());
                }
                // Waiting for the workers' files to grow, not a synchronisation between them.
                thread::sleep(Duration::from_millis(100));
            }
        };
    all_worked_since(0, &rx)?;
    let owner_of = |p: usize| owners(&dir)[p].1.last().map(|(w, _)| w.clone());
    let victim = owner_of(0).ok_or("partition-00 has no owner")?;
    let most = owners(&dir).iter().map(|(_, l)| l.len()).max().unwrap_or(0);
    workers
        .iter_mut()
        .find(|w| w.id == victim)
        .ok_or("victim not found")?
        .child
        .kill()?;
    println!("SIGKILL {victim} (its partitions move once its session expires)");
    all_worked_since(most, &rx)?;
    let graceful = workers
        .iter()
        .map(|w| w.id.clone())
        .find(|id| *id != victim)
        .ok_or("no worker left")?;
    let most = owners(&dir).iter().map(|(_, l)| l.len()).max().unwrap_or(0);
    if let Some(w) = workers.iter_mut().find(|w| w.id == graceful) {
        drop(w.stdin.take());
    }
    println!("graceful stop of {graceful} (its partitions move at once)");
    all_worked_since(most, &rx)?;

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
    let mut in_order = true;
    let mut moved = 0;
    for (p, lines) in owners(&dir) {
        let tokens: Vec<i64> = lines.iter().map(|(_, t)| *t).collect();
        if tokens.windows(2).any(|w| w[0] > w[1]) {
            println!("{p}: tokens out of order: {tokens:?}");
            in_order = false;
        }
        let holders: BTreeSet<&str> = lines.iter().map(|(w, _)| w.as_str()).collect();
        if holders.len() > 1 {
            moved += 1;
        }
    }
    println!(
        "{PARTITIONS} partitions, {moved} of them moved between workers; every partition's \
         writes in fencing-token order (no older owner after a newer one): {in_order}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    if in_order {
        Ok(())
    } else {
        Err("a partition was written by an older owner after a newer one".into())
    }
}
