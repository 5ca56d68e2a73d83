//! `zookeeper-client` 0.11 contenders, plaintext or TLS: the async Rust peer, driven the way
//! its docs show.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use zk_recipes::Client;

use super::figures::{uncontended_figures, Figures};
use super::{pct, process_cpu};

/// What a `zookeeper-client` contender's thread is asked to do.
enum Task {
    /// Timed acquire, awaited delete, `rounds` times; the acquire latencies come back.
    Uncontended {
        dir: String,
        rounds: usize,
        done: std::sync::mpsc::Sender<Vec<(Duration, Duration)>>,
    },
    /// The contended loop until `stop`.
    Contend {
        dir: String,
        shared: Arc<Shared>,
        done: std::sync::mpsc::Sender<()>,
    },
}

/// State of one contended run, shared by its contenders.
#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    count: AtomicU64,
    released_at: Mutex<Option<Instant>>,
    handoffs: Mutex<Vec<Duration>>,
}

/// `zookeeper-client` contenders: each its own session on a current-thread runtime that its
/// own thread drives all the time (so the client's pings go out between runs too).
pub struct ZkcContenders {
    helper: Client,
    tasks: Vec<tokio::sync::mpsc::UnboundedSender<Task>>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl ZkcContenders {
    /// `n` sessions to `connect`, over TLS if `tls` is given; `helper` (one of our clients, on
    /// any port of the same server) makes the lock parents.
    pub fn connect(
        connect: &str,
        n: usize,
        tls: Option<zookeeper_client::TlsOptions>,
        helper: Client,
    ) -> ZkcContenders {
        let mut tasks = Vec::new();
        let mut threads = Vec::new();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        for _ in 0..n {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Task>();
            let (connect, ready, tls) = (connect.to_owned(), ready_tx.clone(), tls.clone());
            threads.push(thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                rt.block_on(async move {
                    let c = match tls {
                        Some(tls) => {
                            zookeeper_client::Client::connector()
                                .with_tls(tls)
                                .secure_connect(&connect)
                                .await
                        }
                        None => zookeeper_client::Client::connect(&connect).await,
                    }
                    .expect("zookeeper-client connect");
                    let _ = ready.send(());
                    while let Some(task) = rx.recv().await {
                        match task {
                            Task::Uncontended { dir, rounds, done } => {
                                let mut t = Vec::with_capacity(rounds);
                                for _ in 0..rounds {
                                    t.push(zkc_round(&c, &dir, None).await);
                                }
                                let _ = done.send(t);
                            }
                            Task::Contend { dir, shared, done } => {
                                while !shared.stop.load(Ordering::Relaxed) {
                                    zkc_round(&c, &dir, Some(&shared)).await;
                                }
                                let _ = done.send(());
                            }
                        }
                    }
                });
            }));
            tasks.push(tx);
        }
        for _ in 0..n {
            ready_rx.recv().expect("a zookeeper-client contender died");
        }
        ZkcContenders {
            helper,
            tasks,
            threads,
        }
    }

    fn ensure(&self, dir: &str) {
        // Made by one of our clients (the lock recipe needs its parent).
        self.helper.ensure_path(dir).expect("path");
    }

    pub fn uncontended(&self, dir: &str, rounds: usize) -> Figures {
        self.ensure(dir);
        let (done, results) = std::sync::mpsc::channel();
        let cpu = process_cpu();
        let _ = self.tasks[0].send(Task::Uncontended {
            dir: dir.to_owned(),
            rounds,
            done,
        });
        let t = results.recv().expect("uncontended run");
        uncontended_figures(&t, process_cpu() - cpu)
    }

    /// The same contended loop as ours: handoff from release to the next acquire's return.
    pub fn contend(&self, n: usize, dir: &str, run_for: Duration) -> Figures {
        self.ensure(dir);
        let shared = Arc::new(Shared::default());
        let (done, finished) = std::sync::mpsc::channel();
        let cpu = process_cpu();
        let began = Instant::now();
        for tx in &self.tasks[..n] {
            let _ = tx.send(Task::Contend {
                dir: dir.to_owned(),
                shared: shared.clone(),
                done: done.clone(),
            });
        }
        thread::sleep(run_for);
        shared.stop.store(true, Ordering::Relaxed);
        let counted = shared.count.load(Ordering::Relaxed);
        let secs = began.elapsed().as_secs_f64();
        for _ in 0..n {
            finished.recv().expect("a contender finished");
        }
        let cpu = process_cpu() - cpu;
        let mut h = shared.handoffs.lock().unwrap().clone();
        Figures {
            per_second: counted as f64 / secs,
            p50_us: pct(&mut h, 0.5),
            p99_us: pct(&mut h, 0.99),
            cpu_us_per_acq: cpu.as_secs_f64() * 1e6
                / shared.count.load(Ordering::Relaxed).max(1) as f64,
            acquisitions: shared.count.load(Ordering::Relaxed) as f64,
            ..Default::default()
        }
    }
}

impl Drop for ZkcContenders {
    fn drop(&mut self) {
        self.tasks.clear(); // closes every task channel: the threads end
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// One acquisition with `zookeeper-client`: acquire, note the handoff if contended, release by
/// the awaited delete of the lock node (its guard would only delete in the background on
/// drop); the acquire's and the release's latencies.
async fn zkc_round(
    c: &zookeeper_client::Client,
    dir: &str,
    shared: Option<&Shared>,
) -> (Duration, Duration) {
    let s = Instant::now();
    let prefix = zookeeper_client::LockPrefix::new_curator(dir, "lock-").expect("prefix");
    let lock = c
        .lock(prefix, b"", zookeeper_client::Acls::anyone_all())
        .await
        .expect("zookeeper-client lock");
    let took = s.elapsed();
    if let Some(sh) = shared {
        let now = Instant::now();
        if let Some(r) = sh.released_at.lock().unwrap().take() {
            sh.handoffs.lock().unwrap().push(now - r);
        }
        sh.count.fetch_add(1, Ordering::Relaxed);
        *sh.released_at.lock().unwrap() = Some(Instant::now());
    }
    let node = lock.lock_path().to_owned();
    std::mem::forget(lock);
    let release = Instant::now();
    c.delete(&node, None).await.expect("delete");
    (took, release.elapsed())
}
