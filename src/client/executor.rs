//! Runs transport calls that carry a deadline, so the caller can stop waiting at the deadline.
//!
//! The `zookeeper` crate waits for every answer with an unbounded `recv()`. A call with a
//! deadline therefore runs on a worker thread while the caller waits on a channel with that
//! deadline; if the deadline passes, the caller gets `Timeout` and the worker finishes the call
//! on its own (the relay's cut bounds how long that can take on a silent connection). Calls
//! without a deadline run on the caller's thread and skip the hand-off.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, unbounded, Receiver, RecvTimeoutError, Sender};
use log::warn;
use parking_lot::Mutex;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// Idle workers exit after this long, so an idle client keeps no spare threads.
const IDLE_EXIT: Duration = Duration::from_secs(10);

pub(crate) struct Executor {
    tx: Mutex<Option<Sender<Job>>>,
    rx: Receiver<Job>,
    /// Workers waiting for a job. Sending a job and a worker deciding to exit both happen
    /// under this lock, so a job is never left queued with no worker to take it.
    idle: Arc<Mutex<usize>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    stopped: AtomicBool,
}

/// Why [`Executor::run`] returned without the job's result.
pub(crate) enum RunError {
    /// The deadline passed first.
    Deadline,
    /// The executor is shut down.
    Stopped,
}

impl Executor {
    pub fn new() -> Executor {
        let (tx, rx) = unbounded();
        Executor {
            tx: Mutex::new(Some(tx)),
            rx,
            idle: Arc::new(Mutex::new(0)),
            workers: Mutex::new(Vec::new()),
            stopped: AtomicBool::new(false),
        }
    }

    /// Runs `f` on a worker and waits for its result until `deadline`.
    pub fn run<T: Send + 'static>(
        &self,
        deadline: Instant,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, RunError> {
        let done_rx = self.submit(f)?;
        match done_rx.recv_deadline(deadline) {
            Ok(v) => Ok(v),
            Err(RecvTimeoutError::Timeout) => Err(RunError::Deadline),
            Err(RecvTimeoutError::Disconnected) => Err(RunError::Stopped),
        }
    }

    /// Starts `f` on a worker; its result arrives on the returned channel, whoever waits for
    /// it (a caller that gives up can hand the channel to someone who cleans up after `f`).
    pub fn submit<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<Receiver<T>, RunError> {
        let (done_tx, done_rx) = bounded(1);
        let job: Job = Box::new(move || {
            let _ = done_tx.send(f());
        });
        {
            let tx = self.tx.lock();
            let Some(tx) = tx.as_ref() else {
                return Err(RunError::Stopped);
            };
            let mut idle = self.idle.lock();
            if *idle == 0 {
                self.spawn_worker(&mut idle);
            }
            if *idle == 0 {
                // No worker could be started: the machine is out of threads.
                return Err(RunError::Stopped);
            }
            *idle -= 1;
            if tx.send(job).is_err() {
                return Err(RunError::Stopped);
            }
        }
        Ok(done_rx)
    }

    /// Starts a worker; `idle` is the locked idle count, which the sender then claims.
    fn spawn_worker(&self, idle: &mut usize) {
        let rx = self.rx.clone();
        let shared_idle = self.idle.clone();
        let spawned = thread::Builder::new()
            .name("zk-call".into())
            .spawn(move || loop {
                match rx.recv_timeout(IDLE_EXIT) {
                    Ok(job) => {
                        job();
                        *shared_idle.lock() += 1;
                    }
                    Err(RecvTimeoutError::Timeout) => {
                        let mut idle = shared_idle.lock();
                        if rx.is_empty() {
                            *idle -= 1;
                            return;
                        }
                    }
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            });
        let mut workers = self.workers.lock();
        workers.retain(|w| !w.is_finished());
        match spawned {
            // Counted idle now, so a burst of calls does not start a thread each.
            Ok(h) => {
                workers.push(h);
                *idle += 1;
            }
            Err(e) => warn!("could not start a call worker: {e}"),
        }
    }

    /// Refuses new jobs and joins the workers once their current calls return.
    pub fn stop(&self) {
        if self.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        self.tx.lock().take();
        let workers: Vec<_> = std::mem::take(&mut *self.workers.lock());
        let me = thread::current().id();
        for w in workers {
            // A job may drop the last client handle and so stop the executor from a worker;
            // that worker ends by itself once the channel is closed.
            if w.thread().id() != me {
                let _ = w.join();
            }
        }
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        self.stop();
    }
}
