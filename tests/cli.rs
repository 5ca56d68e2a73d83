//! The `zk-lock` command against a real server.

mod common;

use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::Duration;

use common::*;
use zk_recipes::lock::InterProcessReadWriteLock;
use zk_recipes::testing::pid_alive;

fn zk_lock(connect: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_zk-lock"));
    // The harness servers tick every 100 ms.
    c.env("ZK_TICK_TIME", "100ms");
    c.env("ZK_CONNECT", connect).env_remove("RUST_LOG");
    c
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

#[test]
fn two_runs_on_one_path_never_overlap() {
    let path = root("cli-overlap");
    let stamps = std::env::temp_dir().join(format!("zkr-cli-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&stamps);
    let script = format!(
        "echo start $(date +%s%N) >> {f}; sleep 0.3; echo end $(date +%s%N) >> {f}",
        f = stamps.display()
    );
    let runs: Vec<_> = (0..2)
        .map(|_| {
            let (path, script) = (path.clone(), script.clone());
            thread::spawn(move || {
                zk_lock(&server().connect_string())
                    .args([path.as_str(), "--", "sh", "-c", &script])
                    .output()
                    .unwrap()
            })
        })
        .collect();
    for r in runs {
        assert_eq!(code(&r.join().unwrap()), 0);
    }
    let text = std::fs::read_to_string(&stamps).unwrap();
    let _ = std::fs::remove_file(&stamps);
    let kinds: Vec<&str> = text.lines().map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(
        kinds,
        ["start", "end", "start", "end"],
        "the two commands overlapped:\n{text}"
    );
}

#[test]
fn the_command_sees_the_lock_and_its_exit_code_passes_through() {
    let path = root("cli-exit");
    let out = zk_lock(&server().connect_string())
        .args([path.as_str(), "--", "sh", "-c"])
        .arg(r#"test -n "$ZK_LOCK_NODE" && test "$ZK_LOCK_PATH" = "$1" && test "$ZK_LOCK_FENCING_TOKEN" -gt 0 && exit 7"#)
        .args(["sh", path.as_str()])
        .output()
        .unwrap();
    assert_eq!(code(&out), 7, "{}", String::from_utf8_lossy(&out.stderr));
    let c = connect(&server().connect_string(), Duration::from_secs(10));
    assert!(
        c.children(&path).unwrap().is_empty(),
        "the lock node stayed"
    );
}

#[test]
fn no_wait_fails_at_once_on_a_held_lock_and_errors_are_one_line() {
    let path = root("cli-busy");
    let c = connect(&server().connect_string(), Duration::from_secs(10));
    let rw = InterProcessReadWriteLock::new(&c, &path).unwrap();
    let held = rw.write_lock().acquire().unwrap();
    let out = zk_lock(&server().connect_string())
        .args(["--no-wait", path.as_str(), "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 73);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("is locked"), "{stderr}");
    let waited = zk_lock(&server().connect_string())
        .args(["--wait", "300ms", path.as_str(), "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&waited), 75);
    drop(held);
    // A shared read lock is free now, and readers share.
    let read = zk_lock(&server().connect_string())
        .args(["--read", "--no-wait", path.as_str(), "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&read), 0);
    let bad = zk_lock(&server().connect_string())
        .args(["relative", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&bad), 64);
    let nothing = Command::new(env!("CARGO_BIN_EXE_zk-lock"))
        .env_remove("ZK_CONNECT")
        .args(["/x", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&nothing), 64);
}

#[test]
fn list_shows_the_holder_and_the_waiter_in_order() {
    let path = root("cli-list");
    let mut holder = zk_lock(&server().connect_string())
        .args(["--id", "first", path.as_str(), "--", "sleep", "30"])
        .spawn()
        .unwrap();
    let c = connect(&server().connect_string(), Duration::from_secs(10));
    wait_for(SOON, || {
        (c.children(&path).unwrap_or_default().len() == 1).then_some(())
    })
    .unwrap();
    let mut waiter = zk_lock(&server().connect_string())
        .args(["--id", "second", "--read", path.as_str(), "--", "true"])
        .spawn()
        .unwrap();
    wait_for(SOON, || {
        (c.children(&path).unwrap_or_default().len() == 2).then_some(())
    })
    .unwrap();
    let out = zk_lock(&server().connect_string())
        .args(["list", path.as_str()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].starts_with("holds") && lines[0].contains("write") && lines[0].contains("first"),
        "{text}"
    );
    assert!(
        lines[1].starts_with("waits") && lines[1].contains("read") && lines[1].contains("second"),
        "{text}"
    );
    // SIGTERM to zk-lock is forwarded to the command; its death by that signal comes back as
    // 128 + 15, and the lock goes to the waiter at once.
    let term = Command::new("kill")
        .args(["-TERM", &holder.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    assert_eq!(holder.wait().unwrap().code(), Some(143));
    assert_eq!(waiter.wait().unwrap().code(), Some(0));
}

#[test]
fn the_command_is_killed_when_the_holders_session_is_black_holed_past_expiry() {
    let f = faulty();
    let pidfile = std::env::temp_dir().join(format!("zkr-cli-pid-{}", std::process::id()));
    let child = zk_lock(&f.proxy.connect_string())
        .args([
            "--session-timeout",
            "1500ms",
            "--kill-after",
            "1s",
            "/cli-lost",
            "--",
            "sh",
            "-c",
        ])
        .arg(format!("echo $$ > {}; exec sleep 60", pidfile.display()))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid: u32 = wait_for(SOON, || {
        std::fs::read_to_string(&pidfile).ok()?.trim().parse().ok()
    })
    .expect("the command never started");
    f.proxy.blackhole();
    let out = child.wait_with_output().unwrap();
    let _ = std::fs::remove_file(&pidfile);
    assert_eq!(code(&out), 76, "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!pid_alive(pid), "the command outlived the lock");
}

#[test]
fn a_signal_while_waiting_ends_the_wait_and_leaves_no_node() {
    let path = root("cli-interrupt");
    let c = connect(&server().connect_string(), Duration::from_secs(10));
    let rw = InterProcessReadWriteLock::new(&c, &path).unwrap();
    let held = rw.write_lock().acquire().unwrap();
    let mut waiting = zk_lock(&server().connect_string())
        .args([path.as_str(), "--", "true"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(SOON, || {
        (c.children(&path).unwrap_or_default().len() == 2).then_some(())
    })
    .expect("zk-lock never queued");
    let int = Command::new("kill")
        .args(["-INT", &waiting.id().to_string()])
        .status()
        .unwrap();
    assert!(int.success());
    let status = wait_for(SOON, || waiting.try_wait().unwrap());
    if status.is_none() {
        let _ = waiting.kill();
        let _ = waiting.wait();
        panic!("SIGINT did not end the wait");
    }
    assert_eq!(status.unwrap().code(), Some(130));
    assert_eq!(
        c.children(&path).unwrap().len(),
        1,
        "the interrupted waiter left its node"
    );
    drop(held);
}

/// CPU ticks (user + system) a live process has used, from `/proc/PID/stat`.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit(')').next()?.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

#[test]
fn after_a_loss_zk_lock_waits_for_the_kill_deadline_without_burning_a_core() {
    let f = faulty();
    let pidfile = std::env::temp_dir().join(format!("zkr-cli-stubborn-{}", std::process::id()));
    let mut child = zk_lock(&f.proxy.connect_string())
        .args([
            "--session-timeout",
            "1500ms",
            "--kill-after",
            "3s",
            "/cli-stubborn",
            "--",
            "sh",
            "-c",
        ])
        // The command ignores SIGTERM, so zk-lock waits the whole --kill-after.
        .arg(format!(
            "trap '' TERM; echo $$ > {}; exec sleep 60",
            pidfile.display()
        ))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let command: u32 = wait_for(SOON, || {
        std::fs::read_to_string(&pidfile).ok()?.trim().parse().ok()
    })
    .expect("the command never started");
    f.proxy.blackhole();
    let zk_lock_pid = child.id();
    let mut last = 0;
    let status = wait_for(SOON, || {
        if let Some(t) = cpu_ticks(zk_lock_pid) {
            last = t;
        }
        child.try_wait().unwrap()
    })
    .expect("zk-lock never ended");
    let _ = std::fs::remove_file(&pidfile);
    assert_eq!(status.code(), Some(76));
    assert!(!pid_alive(command), "the command outlived the lock");
    // Loss, 3 s of waiting for the stubborn command, SIGKILL: a spinning loop would use about
    // 300 ticks (at 100 per second) in those 3 s alone.
    assert!(last < 60, "zk-lock used {last} CPU ticks");
}

/// Issue 21: zk-lock against a TLS-only server that requires SASL, the password from the
/// environment (never argv); a wrong one is an error at once, not a hang.
#[test]
fn zk_lock_speaks_tls_and_sasl() {
    init_logs();
    let pki = common::pki::Pki::new("cli");
    let server =
        zk_recipes::testing::TestingServer::with_options(zk_recipes::testing::ServerOptions {
            tls: Some(pki.server(false)),
            sasl: Some(zk_recipes::testing::ServerSasl {
                users: vec![("cron".into(), "cron's pw".into())],
                required: true,
                kerberos: None,
            }),
            ..zk_recipes::testing::ServerOptions::default()
        })
        .unwrap();
    let path = root("cli-secure");
    let run = |password: &str| {
        zk_lock(&server.connect_string())
            .args(["--tls-ca"])
            .arg(pki.ca())
            .args([
                "--sasl-user",
                "cron",
                &path,
                "--",
                "sh",
                "-c",
                "echo $ZK_LOCK_PATH ${ZK_SASL_PASSWORD:-unset}",
            ])
            .env("ZK_SASL_PASSWORD", password)
            .output()
            .unwrap()
    };
    let ok = run("cron's pw");
    assert_eq!(code(&ok), 0, "{}", String::from_utf8_lossy(&ok.stderr));
    // The command runs under the lock, not with the lock's credentials: the password is not
    // passed on to it (reviewer's finding).
    assert_eq!(
        String::from_utf8_lossy(&ok.stdout).trim(),
        format!("{path} unset")
    );
    let wrong = run("not it");
    assert_eq!(
        code(&wrong),
        70,
        "{}",
        String::from_utf8_lossy(&wrong.stderr)
    );
    let no_password = zk_lock(&server.connect_string())
        .args(["--sasl-user", "cron", &path, "--", "true"])
        .env_remove("ZK_SASL_PASSWORD")
        .output()
        .unwrap();
    assert_eq!(code(&no_password), 64);
}

/// Issue 39, item 6: `--tls-server-name` is the name the server's certificate must carry
/// instead of the host dialled: one the certificate lists gets in, one it does not is a TLS
/// error (`UNAVAILABLE`), at once. An encrypted key opens with its password; a CRL that
/// revokes the server's certificate refuses it.
#[test]
fn zk_lock_takes_the_tls_settings_java_users_bring() {
    init_logs();
    let pki = common::pki::Pki::new("cli-name");
    let server =
        zk_recipes::testing::TestingServer::with_options(zk_recipes::testing::ServerOptions {
            tls: Some(pki.server(false)),
            ..zk_recipes::testing::ServerOptions::default()
        })
        .unwrap();
    let path = root("cli-server-name");
    let run = |name: &str| {
        zk_lock(&server.connect_string())
            .args(["--tls-ca"])
            .arg(pki.ca())
            .args(["--tls-server-name", name, &path, "--", "true"])
            .output()
            .unwrap()
    };
    let listed = run("localhost");
    assert_eq!(
        code(&listed),
        0,
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let other = run("not-the-server.example");
    assert_eq!(
        code(&other),
        69,
        "{}",
        String::from_utf8_lossy(&other.stderr)
    );
    // --tls-key-password-file: an encrypted client key, its password from the environment
    // too, which the command does not get.
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, encrypted) = (
        dir.path().join("c.pem"),
        dir.path().join("c.key"),
        dir.path().join("c.enc.key"),
    );
    pki.write_client("cli", &cert, &key);
    common::pki::Pki::encrypt_key(&key, &encrypted, "kpw", false);
    // The key's password from the environment (`Some`) or from --tls-key-password-file.
    let with_key = |password: Option<&str>, command: &[&str]| {
        let mut cmd = zk_lock(&server.connect_string());
        cmd.args(["--tls-ca"])
            .arg(pki.ca())
            .arg("--tls-cert")
            .arg(&cert)
            .arg("--tls-key")
            .arg(&encrypted);
        match password {
            Some(password) => cmd.env("ZK_TLS_KEY_PASSWORD", password),
            None => {
                // Its line's end is not part of it.
                let file = dir.path().join("key.password");
                std::fs::write(&file, "kpw\n").unwrap();
                cmd.arg("--tls-key-password-file")
                    .arg(file)
                    .env_remove("ZK_TLS_KEY_PASSWORD")
            }
        };
        cmd.arg(&path).arg("--").args(command).output().unwrap()
    };
    let opened = with_key(
        Some("kpw"),
        &["sh", "-c", "echo ${ZK_TLS_KEY_PASSWORD:-unset}"],
    );
    assert_eq!(
        code(&opened),
        0,
        "{}",
        String::from_utf8_lossy(&opened.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&opened.stdout).trim(), "unset");
    let wrong = with_key(Some("not it"), &["true"]);
    assert_ne!(code(&wrong), 0);
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("decrypt"));
    let from_file = with_key(None, &["true"]);
    assert_eq!(
        code(&from_file),
        0,
        "{}",
        String::from_utf8_lossy(&from_file.stderr)
    );

    // --tls-crl: a CRL that revokes the server's certificate refuses it, at once.
    let crl = tempfile::NamedTempFile::new().unwrap();
    pki.write_crl(crl.path(), &[common::pki::SERVER_SERIAL], 1);
    let revoked = zk_lock(&server.connect_string())
        .args(["--tls-ca"])
        .arg(pki.ca())
        .args(["--tls-crl"])
        .arg(crl.path())
        .args([&path, "--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&revoked.stderr);
    assert_eq!(code(&revoked), 69, "{stderr}");
    assert!(stderr.to_lowercase().contains("revoked"), "{stderr}");
}

/// Issue 39, item 1: zk-lock with Kerberos, from a keytab; with no credentials it fails at
/// once with the cause, not after the connection timeout.
#[test]
fn zk_lock_speaks_kerberos() {
    let server = kerberos_server();
    let name = format!("cron-{}", std::process::id());
    let keytab = realm().kdc.add_principal(&name).unwrap();
    let path = root("cli-kerberos");
    let ok = zk_lock(&server.connect_string())
        .args(["--kerberos-principal", &name, "--kerberos-keytab"])
        .arg(&keytab)
        .args([&path, "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&ok), 0, "{}", String::from_utf8_lossy(&ok.stderr));
    let dir = tempfile::tempdir().unwrap();
    let none = zk_lock(&server.connect_string())
        .args(["--kerberos-ccache"])
        .arg(format!("FILE:{}", dir.path().join("none").display()))
        .args([&path, "--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&none.stderr);
    assert_eq!(code(&none), 70, "{stderr}");
    assert!(stderr.contains("Kerberos"), "{stderr}");
}

/// Issue 39, item 4: zk-lock follows the ensemble only where it is told it may; a bad
/// allow-list entry, or a TLS port without TLS, is a usage error before anything is dialled.
#[test]
fn zk_lock_follows_the_ensemble_within_its_allow_list() {
    let server = server();
    let path = root("cli-follow");
    let run = |args: &[&str]| {
        zk_lock(&server.connect_string())
            .args(args)
            .args([&path, "--", "true"])
            .output()
            .unwrap()
    };
    let ok = run(&[
        "--follow-ensemble",
        "--follow-host",
        "*.zk.example.com,10.1.0.0/16",
    ]);
    assert_eq!(code(&ok), 0, "{}", String::from_utf8_lossy(&ok.stderr));
    let bad = run(&["--follow-ensemble", "--follow-host", "not a host"]);
    assert_eq!(code(&bad), 64, "{}", String::from_utf8_lossy(&bad.stderr));
    let no_tls = run(&["--follow-ensemble", "--follow-secure-port", "2281"]);
    assert_eq!(
        code(&no_tls),
        64,
        "{}",
        String::from_utf8_lossy(&no_tls.stderr)
    );
}
