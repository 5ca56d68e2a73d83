//! Worker processes a bench drives by lines on their stdin and stdout, and what the benches
//! that spread sessions over processes read about them: JVM JIT time, the server's bytes, the
//! one monotonic clock every process shares.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use zk_recipes::{Client, ClientBuilder};

/// A worker process, its sessions connected and waiting for the word.
pub struct Worker {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: Option<std::io::Lines<BufReader<std::process::ChildStdout>>>,
}

impl Worker {
    /// Starts `cmd` with its stdin and stdout piped to this bench.
    pub fn start(mut cmd: Command) -> Worker {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("a worker process");
        let stdin = child.stdin.take().expect("its stdin");
        let lines = BufReader::new(child.stdout.take().expect("its stdout")).lines();
        Worker {
            child,
            stdin: Some(stdin),
            lines: Some(lines),
        }
    }

    /// Writes `word` as a line to the worker.
    pub fn say(&mut self, word: &str) {
        let stdin = self.stdin.as_mut().expect("a worker still told things");
        writeln!(stdin, "{word}").expect("tell a worker");
        stdin.flush().expect("tell a worker");
    }

    /// The worker's next line; panics if it ended (or its lines are forwarded).
    pub fn next_line(&mut self) -> String {
        match self.lines.as_mut().and_then(Iterator::next) {
            Some(Ok(line)) => line,
            other => panic!("a worker ended early: {other:?}"),
        }
    }

    /// From now on, every line the worker writes goes to `tx` as `(tag, line)`, from a thread
    /// that ends with the worker's stdout.
    pub fn forward_lines(&mut self, tag: usize, tx: std::sync::mpsc::Sender<(usize, String)>) {
        if let Some(lines) = self.lines.take() {
            thread::spawn(move || {
                for line in lines.map_while(Result::ok) {
                    if tx.send((tag, line)).is_err() {
                        break;
                    }
                }
            });
        }
    }

    /// Closes the worker's stdin: its end of input, on which the workers here end.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }
}

/// A worker still running when its bench lets go of it (a panic, an early return) is told to
/// end, given 10 s to close its sessions, then killed: none is left behind, retrying forever.
impl Drop for Worker {
    fn drop(&mut self) {
        self.stdin = None;
        let until = Instant::now() + Duration::from_secs(10);
        while let Ok(None) = self.child.try_wait() {
            if Instant::now() >= until {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Waits until no worker JVM's JIT has compiled for 20 ms or more in a second, at most `most`;
/// whether it got there.
pub fn jit_quiet(workers: &[Worker], most: Duration) -> bool {
    quiet_within(most, || {
        workers.iter().map(|w| jit_ms(Some(w.child.id()))).sum()
    })
}

/// Waits until the worker JVMs together compiled under 20 ms in a second, at most `most`;
/// whether they got there. Each JVM says its own compile time so far (`jit` → `jit <ms>`, the
/// JVM's `CompilationMXBean`): asking `jstat` would start a JVM per worker each second, whose
/// own start-up on 2 cores would keep the workers' JIT from ever looking quiet.
pub fn jvm_jit_quiet(workers: &mut [Worker], most: Duration) -> bool {
    quiet_within(most, || {
        workers
            .iter_mut()
            .map(|w| {
                w.say("jit");
                // Its answer, past any other line the JVM wrote meanwhile.
                loop {
                    let line = w.next_line();
                    if let Some(ms) = line.strip_prefix("jit ") {
                        break ms
                            .parse::<f64>()
                            .unwrap_or_else(|_| panic!("a JVM worker said {line:?} to `jit`"));
                    }
                }
            })
            .sum()
    })
}

/// Waits until `compiled_ms` (JIT compile time so far, in ms, summed over the JVMs watched)
/// grows by under 20 ms in a second, at most `most`; whether it got there.
pub fn quiet_within(most: Duration, mut compiled_ms: impl FnMut() -> f64) -> bool {
    let until = Instant::now() + most;
    let mut last = compiled_ms();
    while Instant::now() < until {
        // Sampling once a second is the measurement's design.
        thread::sleep(Duration::from_secs(1));
        let now = compiled_ms();
        if now - last < 20.0 {
            return true;
        }
        last = now;
    }
    false
}

/// The bytes the server has sent and received on its client port's connections, summed
/// (`ss`'s `bytes_sent` and `bytes_received` of each socket whose local port is `port`).
pub fn server_bytes(port: u16) -> (u64, u64) {
    let out = Command::new("ss")
        .args(["-tinH", "state", "established"])
        .arg(format!("( sport = :{port} )"))
        .output()
        .expect("ss (apt-get install iproute2)");
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| -> u64 {
        text.split_whitespace()
            .filter_map(|w| w.strip_prefix(name)?.parse::<u64>().ok())
            .sum()
    };
    (field("bytes_sent:"), field("bytes_received:"))
}

/// A JVM's JIT compile time so far, in milliseconds (`jstat -compiler`), or 0.
pub fn jit_ms(pid: Option<u32>) -> f64 {
    let Some(pid) = pid else { return 0.0 };
    let Ok(out) = Command::new("jstat")
        .args(["-compiler", &pid.to_string()])
        .output()
    else {
        return 0.0;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    // Columns: Compiled Failed Invalid Time FailedType FailedMethod; Time in seconds.
    text.lines()
        .nth(1)
        .and_then(|l| l.split_whitespace().nth(3)?.parse::<f64>().ok())
        .map_or(0.0, |secs| secs * 1000.0)
}

/// The machine's monotonic clock, in nanoseconds: one clock for every process (Java's
/// `System.nanoTime` reads it too).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to write into.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `n` sessions to `connect`, each made by `builder` (the session's options) and connected
/// on a thread of its own, all at once.
pub fn connect_sessions(
    connect: &str,
    n: usize,
    builder: impl Fn(&str) -> ClientBuilder + Sync,
) -> Vec<Client> {
    thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|_| scope.spawn(|| builder(connect).connect().expect("connect")))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a connect"))
            .collect()
    })
}
