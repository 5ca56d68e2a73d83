//! Starting and stopping ZooKeeper's JVM so that it never outlives the process that started it.
//!
//! The JVM runs under a small `sh` wrapper that reads its standard input from us: when we close
//! it (on drop, or because our process died in any way, even `SIGKILL`), the wrapper's `read`
//! returns and it kills the JVM. A static server that is never dropped therefore still goes
//! with the test binary.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use super::HarnessError;

/// A line on stdin means "stopped on purpose, keep the data" (a restart follows, or the owner
/// removes the directory itself); end of file means our process is gone, and nobody else will
/// remove the server's directory, so the wrapper does, first unmounting the log disks a
/// firewalled ensemble mounts in it (`<dir>/m*/log`).
const WRAPPER: &str = r#"
$ZKR_AS "$ZKR_PROGRAM" "$@" >>"$ZKR_LOG" 2>&1 &
pid=$!
echo "$pid"
if read _keep; then ZKR_CLEAN=; fi
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
if [ -n "$ZKR_CLEAN" ]; then
  for m in "$ZKR_CLEAN"/*/log; do umount -l "$m" 2>/dev/null; done
  rm -rf "$ZKR_CLEAN" 2>/dev/null
fi
exit 0
"#;

/// The watchdog wrapper's command for `program` (arguments follow): its output to `log`,
/// `dir` removed if our process dies first, run in group `group` if given.
fn wrapped(program: &Path, log: &Path, dir: &Path, group: Option<u32>) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(WRAPPER)
        .arg("zk-recipes-watched")
        .env("ZKR_PROGRAM", program)
        .env("ZKR_LOG", log)
        .env("ZKR_CLEAN", dir)
        .env(
            "ZKR_AS",
            group.map_or(String::new(), |g| {
                format!("setpriv --regid={g} --clear-groups")
            }),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    cmd
}

/// Default location of the Debian package's server jar (its manifest names the rest).
pub const DEBIAN_CLASSPATH: &str = "/usr/share/java/zookeeper.jar";
const SLF4J_SIMPLE: &str = "/usr/share/java/slf4j-simple.jar";
/// The Netty modules ZooKeeper's Netty connection factory loads (Debian's names).
const NETTY_MODULES: [&str; 8] = [
    "netty-buffer",
    "netty-codec",
    "netty-common",
    "netty-handler",
    "netty-resolver",
    "netty-transport",
    "netty-transport-native-epoll",
    "netty-transport-native-unix-common",
];

/// Debian's Netty modules that ZooKeeper's Netty code (server or client) loads, as classpath
/// entries each after a `:` (for a Java client with TLS, too).
pub fn netty_classpath() -> String {
    NETTY_MODULES
        .iter()
        .map(|m| format!(":/usr/share/java/{m}.jar"))
        .collect()
}

/// The classpath to run: `ZOOKEEPER_CLASSPATH` or the Debian package's jars. Checked: every
/// file entry must exist.
///
/// With `netty` (a TLS port), Debian's Netty modules join the default classpath: the server's
/// Netty connection factory needs them, and Debian's `netty-all.jar` is an empty aggregate.
pub(crate) fn classpath(explicit: Option<&str>, netty: bool) -> Result<String, HarnessError> {
    let cp = match explicit
        .map(str::to_owned)
        .or_else(|| std::env::var("ZOOKEEPER_CLASSPATH").ok())
    {
        Some(cp) => cp,
        None => {
            let mut cp = DEBIAN_CLASSPATH.to_owned();
            // Without an slf4j binding the server logs nothing; with it, its log explains a
            // failed start.
            if Path::new(SLF4J_SIMPLE).exists() {
                cp.push(':');
                cp.push_str(SLF4J_SIMPLE);
            }
            if netty {
                cp.push_str(&netty_classpath());
            }
            cp
        }
    };
    for entry in cp.split(':').filter(|e| !e.is_empty()) {
        let entry_path = entry.trim_end_matches('*');
        if !Path::new(entry_path).exists() {
            return Err(HarnessError::ZooKeeperMissing(format!(
                "ZooKeeper classpath entry {entry} does not exist. Install the server with \
                 `apt-get install zookeeper` (Debian/Ubuntu), or point ZOOKEEPER_CLASSPATH at \
                 its jars"
            )));
        }
    }
    Ok(cp)
}

pub(crate) fn java() -> Result<PathBuf, HarnessError> {
    if let Ok(j) = std::env::var("ZOOKEEPER_JAVA") {
        return Ok(PathBuf::from(j));
    }
    if let Ok(home) = std::env::var("JAVA_HOME") {
        let p = Path::new(&home).join("bin/java");
        if p.exists() {
            return Ok(p);
        }
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("java"))
        .find(|p| p.exists())
        .ok_or_else(|| {
            HarnessError::ZooKeeperMissing(
                "no `java` on PATH. Install ZooKeeper (it brings Java) with \
                 `apt-get install zookeeper`"
                    .into(),
            )
        })
}

/// Where Debian's `libfaketime` puts the library a JVM preloads to run its clocks at a rate
/// (per architecture), and where a build from source does.
fn libfaketime() -> Option<PathBuf> {
    let arch = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("faketime/libfaketime.so.1"));
    arch.chain(["/usr/local/lib/faketime/libfaketime.so.1".into()])
        .find(|p| p.exists())
}

/// How a JVM's process runs, beside its arguments.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Process {
    /// Its group id (and no other group; the user stays ours), if not ours.
    pub group: Option<u32>,
    /// How fast its clocks run against the machine's (`libfaketime`), if not at 1.
    pub clock_rate: Option<f64>,
}

/// A running JVM (or another server of the harness's: the KDC) under the watchdog wrapper,
/// which kills it when our process dies.
pub(crate) struct Jvm {
    wrapper: Child,
    stdin: Option<ChildStdin>,
    pid: u32,
    log: PathBuf,
}

impl Jvm {
    /// Starts `main_class` with system properties `props` (`-Dk=v`), as `process` says (its
    /// group, its clocks' rate). `dir` is removed by the wrapper if our process dies without
    /// stopping the JVM.
    pub fn spawn(
        classpath: &str,
        main_class: &str,
        props: &[String],
        args: &[String],
        log: &Path,
        dir: &Path,
        process: Process,
    ) -> Result<Jvm, HarnessError> {
        let java = java()?;
        let level = std::env::var("ZOOKEEPER_LOG_LEVEL").unwrap_or_else(|_| "warn".into());
        let mut cmd = wrapped(&java, log, dir, process.group);
        cmd.args([
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-Dzookeeper.admin.enableServer=false",
            &format!("-Dorg.slf4j.simpleLogger.defaultLogLevel={level}"),
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            // The time of day (UTC on the machines we run), not milliseconds since the JVM
            // started: members' and clients' logs line up.
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
        ])
        .args(props)
        .args(["-cp", classpath, main_class])
        .args(args);
        if let Some(rate) = process.clock_rate {
            if !(rate.is_finite() && rate > 0.0) {
                return Err(HarnessError::StartFailed(format!(
                    "a clock rate must be a positive number, not {rate}"
                )));
            }
            let Some(faketime) = libfaketime() else {
                return Err(HarnessError::ZooKeeperMissing(
                    "a clock rate needs libfaketime (apt-get install libfaketime)".into(),
                ));
            };
            // Every clock the JVM reads (monotonic ones too: `System.nanoTime`, which times
            // its sessions) and every timed wait runs at `rate` from the JVM's start on.
            cmd.env("LD_PRELOAD", faketime)
                .env("FAKETIME", format!("+0 x{rate}"))
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "0");
        }
        Jvm::start(cmd, log)
    }

    /// Starts `program` with `args` and the environment `envs` under the watchdog: a server
    /// of the harness's that is no JVM (the KDC). `dir` is removed as for a JVM.
    pub fn spawn_program(
        program: &Path,
        args: &[&str],
        envs: &[(&str, &Path)],
        log: &Path,
        dir: &Path,
    ) -> Result<Jvm, HarnessError> {
        let mut cmd = wrapped(program, log, dir, None);
        cmd.args(args);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        Jvm::start(cmd, log)
    }

    fn start(mut cmd: Command, log: &Path) -> Result<Jvm, HarnessError> {
        let mut wrapper = cmd.spawn()?;
        let stdin = wrapper.stdin.take();
        let mut first = String::new();
        if let Some(out) = wrapper.stdout.take() {
            BufReader::new(out).read_line(&mut first)?;
        }
        let pid: u32 = first.trim().parse().map_err(|_| {
            HarnessError::StartFailed(format!("JVM wrapper printed {first:?} instead of a pid"))
        })?;
        Ok(Jvm {
            wrapper,
            stdin,
            pid,
            log: log.to_owned(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn is_alive(&self) -> bool {
        pid_alive(self.pid)
    }

    /// The last lines of the JVM's log, for error messages.
    pub fn log_tail(&self) -> String {
        log_tail(&self.log)
    }

    /// Kills the JVM (`SIGKILL`, like a crash) and waits for it.
    pub fn kill(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"keep\n");
        }
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            match self.wrapper.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(10)),
                _ => {
                    let _ = Command::new("kill")
                        .args(["-9", &self.pid.to_string()])
                        .status();
                    let _ = self.wrapper.kill();
                    let _ = self.wrapper.wait();
                    break;
                }
            }
        }
    }
}

impl Drop for Jvm {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// True if a process with this pid exists (and is not a zombie).
pub fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    }
}

pub(crate) fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// Sends a four-letter word and returns the answer.
pub fn four_letter(addr: SocketAddr, word: &str, timeout: Duration) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    s.write_all(word.as_bytes())?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// Sends a four-letter word over the server's client port as a client would reach it (plain
/// or TLS) and returns the answer.
pub(crate) fn four_letter_over(
    addr: SocketAddr,
    word: &str,
    timeout: Duration,
    security: &crate::client::link::Security,
) -> std::io::Result<String> {
    use crate::client::link;
    if matches!(security, link::Security::Plain) {
        return four_letter(addr, word, timeout);
    }
    let until = std::time::Instant::now() + timeout;
    let host = addr.ip().to_string();
    let target = link::Target {
        host: &host,
        port: addr.port(),
        addr: Some(addr),
    };
    let (mut r, mut w) = link::open(&target, security, until, |_| true)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    crate::client::dial::bound(w.socket(), until)?;
    r.set_read_timeout(Some(timeout))?;
    w.write_all(word.as_bytes())?;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            // The server closes without a TLS close_notify: the answer is whole.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !out.is_empty() => break,
            Err(e) => return Err(e),
        }
        if std::time::Instant::now() >= until {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// A free loopback port for a server to bind (see [`reserve_port`]).
pub(crate) fn free_port() -> std::io::Result<u16> {
    Ok(reserve_port()?.local_addr()?.port())
}

/// A listener on a free loopback port below the kernel's ephemeral range, to be dropped just
/// before a server binds the port. A port the kernel hands out for `bind(0)` is in that
/// range, and so is the local port of every outgoing connection: between our release and the
/// server's bind, a client connecting elsewhere could take it (seen in CI as a member that
/// exited on "Address already in use"). Below the range only an explicit bind can, and the
/// start is random so that tests choosing at once rarely try the same port.
pub(crate) fn reserve_port() -> std::io::Result<std::net::TcpListener> {
    use std::hash::{BuildHasher, Hasher};
    const FIRST: u32 = 10_000;
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    if ephemeral_low > FIRST + 1_000 {
        let span = ephemeral_low - FIRST;
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        let start = (h.finish() % u64::from(span)) as u32;
        for i in 0..span.min(2_000) {
            let port = FIRST + (start + i * 7) % span;
            let Ok(port) = u16::try_from(port) else {
                continue;
            };
            if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", port)) {
                return Ok(l);
            }
        }
    }
    std::net::TcpListener::bind(("127.0.0.1", 0))
}

/// A fresh directory under the system temp dir (`zk-recipes-<tag>-…`), removed on drop
/// (`tempfile`'s, which makes the name unique and the directory private to us). The JVM
/// watchdog removes it too if this process dies without dropping it.
pub(crate) struct TempDir(tempfile::TempDir);

impl TempDir {
    pub fn new(tag: &str) -> std::io::Result<TempDir> {
        tempfile::Builder::new()
            .prefix(&format!("zk-recipes-{tag}-"))
            .tempdir()
            .map(TempDir)
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }
}
