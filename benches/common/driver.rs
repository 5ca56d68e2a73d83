//! A peer's driver process (Curator's JVM, kazoo's Python): commands on its standard input,
//! one answer line each.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// A peer's driver: one long-lived process for the whole run, commands on its standard input,
/// one answer line each. Killed on drop (a panicking bench leaves none behind).
pub struct Driver {
    name: &'static str,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Driver {
    pub fn spawn(name: &'static str, command: &mut Command) -> Result<Driver, String> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        Ok(Driver {
            name,
            child,
            stdin,
            stdout,
        })
    }

    /// The Curator driver `benches/<class>.java` in a JVM of its own, with `clients` clients
    /// (each its own session) opened.
    pub fn curator(class: &str, connect: &str, clients: usize) -> Result<Driver, String> {
        let cp = super::curator_driver(class)?;
        let mut d = Driver::spawn(
            "Curator",
            Command::new("java").args(["-Xmx1g", "-cp", &cp, class, connect]),
        )?;
        d.expect_ok(&format!("clients {clients}"))?;
        Ok(d)
    }

    /// The Curator driver for the bench `bench`, or `None` (said, and recorded) if it cannot
    /// run here.
    pub fn curator_or_skip(
        bench: &str,
        class: &str,
        connect: &str,
        clients: usize,
    ) -> Option<Driver> {
        match Driver::curator(class, connect, clients) {
            Ok(d) => Some(d),
            Err(why) => {
                super::json(bench, &[("curator_skipped", super::s(&why))]);
                println!("Curator skipped: {why}");
                None
            }
        }
    }

    /// Warms a Curator driver (its `warm PATH MAXSECS`) until its JIT has been quiet for a
    /// second, at most 120 s (3 s quick). A JIT still compiling makes every ratio of the run
    /// worthless: said, and recorded for `bench`.
    pub fn warm_jit(&mut self, bench: &str, path: &str, quick: bool) {
        let most_secs = if quick { 3 } else { 120 };
        let warm = self.ask(&format!("warm {path} {most_secs}"));
        println!("Curator warmed: {warm}");
        if !warm.ends_with("quiet") {
            println!("Curator's JIT was not quiet yet: this run's ratios are a smoke test only");
            super::json(bench, &[("curator_jit_quiet", "false".into())]);
        }
    }

    pub fn expect_ok(&mut self, command: &str) -> Result<(), String> {
        match self.ask(command).as_str() {
            "OK" => Ok(()),
            other => Err(format!("{command:?} answered {other:?}")),
        }
    }

    pub fn ask(&mut self, command: &str) -> String {
        let name = self.name;
        writeln!(self.stdin, "{command}").unwrap_or_else(|e| panic!("to the {name} driver: {e}"));
        self.stdin
            .flush()
            .unwrap_or_else(|e| panic!("to the {name} driver: {e}"));
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .unwrap_or_else(|e| panic!("from the {name} driver: {e}"));
        line.trim().to_owned()
    }

    /// The numbers of a `RESULT` answer.
    pub fn numbers(&mut self, command: &str) -> Vec<f64> {
        let answer = self.ask(command);
        let Some(rest) = answer.strip_prefix("RESULT ") else {
            panic!(
                "the {} driver answered {answer:?} to {command:?}",
                self.name
            );
        };
        rest.split(' ').filter_map(|x| x.parse().ok()).collect()
    }

    pub fn quit(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        let _ = self.child.wait();
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
