//! `../shared/floor`, the wire floor the project's figures are measured against, run as a
//! child process: the benches' own floor (`wire`) is checked against it on the same server.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use super::children_cpu;
use super::figures::Figures;

/// `../shared/floor`'s binary, run as a child process against one server.
pub struct SharedFloor {
    binary: PathBuf,
    connect: String,
}

impl SharedFloor {
    /// The floor built as its README says (or `ZK_FLOOR`), if it is there.
    pub fn find(connect: &str) -> Option<SharedFloor> {
        let binary = std::env::var_os("ZK_FLOOR")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/../target/floor/release/zk-floor"
                ))
            });
        binary.exists().then(|| SharedFloor {
            binary,
            connect: connect.to_owned(),
        })
    }

    /// One run of the floor; its JSON line and the CPU its process used.
    fn run(&self, args: &[String]) -> (serde_json::Value, Duration) {
        let cpu = children_cpu();
        let out = Command::new(&self.binary)
            .args(args)
            .env("ZK_CONNECT", &self.connect)
            .output()
            .expect("run the wire floor");
        let cpu = children_cpu().saturating_sub(cpu);
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().last().unwrap_or("{}");
        let value = serde_json::from_str(line).unwrap_or_else(|e| {
            panic!(
                "the floor printed no JSON line ({e}): {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (value, cpu)
    }

    /// The floor's uncontended mode runs 300 rounds it does not time before the timed ones.
    pub fn uncontended(&self, rounds: usize) -> Figures {
        let (v, cpu) = self.run(&["uncontended".into(), rounds.to_string()]);
        let us = |k: &str| v[k].as_f64().unwrap_or(0.0);
        let acquisitions = (rounds + 300) as f64;
        Figures {
            p50_us: us("acquire_p50_us"),
            p99_us: us("acquire_p99_us"),
            release_p50_us: us("release_p50_us"),
            release_p99_us: us("release_p99_us"),
            cpu_us_per_acq: cpu.as_secs_f64() * 1e6 / acquisitions,
            acquisitions,
            ..Default::default()
        }
    }

    /// The floor's contended mode runs whole seconds, after two seconds of the same load that
    /// it does not count: the CPU figures divide by the acquisitions of the whole run.
    pub fn contend(&self, n: usize, run_for: Duration) -> Figures {
        let secs = run_for.as_secs().max(1);
        let (v, cpu) = self.run(&["contended".into(), n.to_string(), secs.to_string()]);
        let num = |k: &str| v[k].as_f64().unwrap_or(0.0);
        let acquisitions = num("acq_per_s") * (secs + 2) as f64;
        Figures {
            per_second: num("acq_per_s"),
            p50_us: num("handoff_p50_us"),
            p99_us: num("handoff_p99_us"),
            cpu_us_per_acq: cpu.as_secs_f64() * 1e6 / acquisitions.max(1.0),
            acquisitions,
            ..Default::default()
        }
    }
}
