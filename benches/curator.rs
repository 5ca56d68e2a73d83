//! Apache Curator side by side: the same contended `InterProcessMutex` loop run by Curator 5.4
//! (Debian's `libcurator-recipes-java`, driven by `benches/CuratorBench.java`, compiled with
//! `javac` here) and by this crate, against the same server in the same run.
//!
//! `cargo bench --bench curator [-- --quick]`. Skips, saying why, if Java or Curator is missing.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

const CURATOR_JARS: &str = "/usr/share/java/curator-recipes.jar:/usr/share/java/slf4j-nop.jar";

fn main() {
    let args = args();
    if let Err(why) = check() {
        json("curator", &[("skipped", s(&why))]);
        println!("curator bench skipped: {why}");
        return;
    }
    let out_dir = std::env::temp_dir().join(format!("zkr-curator-bench-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir).expect("temp dir");
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/CuratorBench.java");
    let compiled = Command::new("javac")
        .args(["-cp", CURATOR_JARS, "-d"])
        .arg(&out_dir)
        .arg(source)
        .status()
        .expect("javac");
    assert!(compiled.success(), "javac failed");

    let server = server(&args);
    let ns: &[usize] = if args.quick { &[2, 8] } else { &[2, 8, 32] };
    let run_for = Duration::from_millis(if args.quick { 1000 } else { 3000 });
    let ours_clients = clients(&server.connect_string(), *ns.iter().max().unwrap_or(&2));
    println!(
        "\n{:>4}{:>14}{:>14}{:>12}{:>16}{:>16}{:>12}",
        "N", "ours acq/s", "Curator acq/s", "ratio", "ours hand p50", "Curator p50", "ratio"
    );
    let mut lines = Vec::new();
    for &n in ns {
        let cp = format!("{}:{CURATOR_JARS}", out_dir.display());
        let out = Command::new("java")
            .args(["-cp", &cp, "CuratorBench", &server.connect_string()])
            .arg(format!("/bench/curator/java-{n}"))
            .args([n.to_string(), run_for.as_millis().to_string(), "0".into()])
            .output()
            .expect("java");
        let text = String::from_utf8_lossy(&out.stdout);
        let Some(result) = text.lines().find_map(|l| l.strip_prefix("RESULT ")) else {
            panic!(
                "Curator driver printed no result: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let v: Vec<f64> = result.split(' ').filter_map(|x| x.parse().ok()).collect();
        let (c_rate, c_p50) = (v[1], v[2]);
        let ours = contend(
            Kind::Mutex,
            &ours_clients[..n],
            &format!("/bench/curator/rust-{n}"),
            Duration::ZERO,
            run_for,
        );
        json(
            "curator",
            &[
                ("n", n.to_string()),
                ("ours_per_second", f(ours.per_second)),
                ("curator_per_second", f(c_rate)),
                ("ratio_throughput", f(ours.per_second / c_rate)),
                ("ours_handoff_p50_us", f(ours.handoff_p50_us)),
                ("curator_handoff_p50_us", f(c_p50)),
                ("ratio_handoff_p50", f(ours.handoff_p50_us / c_p50)),
            ],
        );
        lines.push(format!(
            "{:>4}{:>14.0}{:>14.0}{:>12.2}{:>14.0}µs{:>14.0}µs{:>12.2}",
            n,
            ours.per_second,
            c_rate,
            ours.per_second / c_rate,
            ours.handoff_p50_us,
            c_p50,
            ours.handoff_p50_us / c_p50
        ));
    }
    for l in lines {
        println!("{l}");
    }
    let _ = std::fs::remove_dir_all(&out_dir);
}

fn check() -> Result<(), String> {
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
    Ok(())
}
