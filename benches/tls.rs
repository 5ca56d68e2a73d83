//! TLS on and off, side by side (issue 21): what TLS costs us and what it costs
//! `zookeeper-client` 0.11 (feature `tls`), on one server that opens a TLS port and a
//! plaintext port on the same Netty connection factory, so the only difference between the
//! columns of a client is TLS.
//!
//! Fair means, as in `benches/peers.rs`:
//! - both clients' TLS runs on the same crypto (rustls with *ring*: ours always, and
//!   `zookeeper-client`'s through rustls' process default, installed here) and negotiates
//!   what the server offers (Java's TLS 1.2 on Debian's ZooKeeper 3.8);
//! - the server is warmed first, TLS and plaintext sessions together, until a round adds
//!   little JIT compile time;
//! - the four contenders (ours and `zookeeper-client`, each plaintext and TLS) and, if it is
//!   built, the wire floor (`../shared/floor`, plaintext) run alternately, configuration by
//!   configuration, in blocks whose order rotates.
//!
//! `cargo bench --bench tls [-- --quick]`. The floor column needs
//! `cargo build --release --manifest-path ../shared/floor/Cargo.toml --target-dir target/floor`
//! first (or `ZK_FLOOR=/path/to/zk-floor`); without it the column is left out.

mod common;
#[allow(dead_code)] // the tests' certificate maker; the bench uses part of it
#[path = "../tests/common/pki.rs"]
mod pki;

use std::time::Duration;

use common::figures::*;
use common::shared_floor::SharedFloor;
use common::zkc::ZkcContenders;
use common::*;
use zk_recipes::testing::{ServerOptions, ServerTls, TestingServer};
use zk_recipes::{Client, TlsOptions};

/// Who runs a configuration.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Who {
    OursPlain,
    OursTls,
    ZkcPlain,
    ZkcTls,
    Floor,
}

const EVERYONE: [Who; 5] = [
    Who::OursPlain,
    Who::OursTls,
    Who::ZkcPlain,
    Who::ZkcTls,
    Who::Floor,
];

impl Who {
    fn tag(self) -> &'static str {
        match self {
            Who::OursPlain => "ours-plain",
            Who::OursTls => "ours-tls",
            Who::ZkcPlain => "zkc-plain",
            Who::ZkcTls => "zkc-tls",
            Who::Floor => "floor",
        }
    }
}

/// Everyone's sessions on the one server.
struct Contenders {
    ours_plain: Vec<Client>,
    ours_tls: Vec<Client>,
    zkc_plain: ZkcContenders,
    zkc_tls: ZkcContenders,
    floor: Option<SharedFloor>,
}

impl Contenders {
    fn uncontended(&self, who: Who, dir: &str, rounds: usize) -> Option<Figures> {
        Some(match who {
            Who::OursPlain => uncontended_ours(&self.ours_plain[0], dir, rounds),
            Who::OursTls => uncontended_ours(&self.ours_tls[0], dir, rounds),
            Who::ZkcPlain => self.zkc_plain.uncontended(dir, rounds),
            Who::ZkcTls => self.zkc_tls.uncontended(dir, rounds),
            Who::Floor => self.floor.as_ref()?.uncontended(rounds),
        })
    }

    fn contend(&self, who: Who, n: usize, dir: &str, run_for: Duration) -> Option<Figures> {
        Some(match who {
            Who::OursPlain => contend_ours(Kind::Mutex, &self.ours_plain[..n], dir, run_for),
            Who::OursTls => contend_ours(Kind::Mutex, &self.ours_tls[..n], dir, run_for),
            Who::ZkcPlain => self.zkc_plain.contend(n, dir, run_for),
            Who::ZkcTls => self.zkc_tls.contend(n, dir, run_for),
            Who::Floor => self.floor.as_ref()?.contend(n, run_for),
        })
    }
}

fn main() {
    let args = args();
    init_logs();
    // rustls cannot choose a process default when both of its providers are compiled in
    // (`zookeeper-client` brings aws-lc-rs, we use ring): ring for both, the same crypto.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let pki = pki::Pki::new("bench");
    let server = TestingServer::with_options(ServerOptions {
        force_sync: args.fsync,
        tls: Some(ServerTls {
            plaintext_too: true,
            ..pki.server(false)
        }),
        ..Default::default()
    })
    .expect("start ZooKeeper with TLS (apt-get install zookeeper)");
    let plain = server
        .plaintext_connect_string()
        .expect("the plaintext port asked for");
    let secure = server.connect_string();
    let ns: Vec<usize> = if args.quick {
        vec![2, 8]
    } else {
        vec![2, 8, 32]
    };
    let most = ns.iter().copied().max().unwrap_or(8);
    let run_for = Duration::from_millis(if args.quick { 500 } else { 6000 });
    let ca_pem = std::fs::read_to_string(pki.ca()).expect("the CA file");
    let ours_plain = clients(&plain, most);
    ours_plain[0].ensure_path("/bench/tls").expect("path");
    let ours_tls: Vec<Client> = (0..most)
        .map(|_| {
            Client::builder(&secure)
                .session_timeout(Duration::from_secs(30))
                .tls(TlsOptions::new(pki.ca()))
                .connect()
                .expect("connect over TLS")
        })
        .collect();
    let zkc_tls_options = zookeeper_client::TlsOptions::new()
        .with_pem_ca(&ca_pem)
        .expect("the CA for zookeeper-client");
    let all = Contenders {
        zkc_plain: ZkcContenders::connect(&plain, most, None, ours_plain[0].clone()),
        zkc_tls: ZkcContenders::connect(
            &secure,
            most,
            Some(zkc_tls_options),
            ours_plain[0].clone(),
        ),
        floor: SharedFloor::find(&plain),
        ours_plain,
        ours_tls,
    };
    if all.floor.is_none() {
        println!("no wire floor built: its column is left out (see this bench's header)");
    }

    // 1. The server, warmed with TLS and plaintext sessions together.
    let half = (most / 2).min(4);
    let mixed: Vec<Client> = all.ours_plain[..half]
        .iter()
        .chain(&all.ours_tls[..half])
        .cloned()
        .collect();
    println!(
        "server warmed: {}",
        warm_server(&server, &mixed, args.quick)
    );
    // 2. The same untimed warm-up loops for each client.
    for i in 0..3 {
        for who in EVERYONE {
            let dir = format!("/bench/tls/warm-{}-{i}", who.tag());
            let _ = all.uncontended(who, &dir, 300);
            let _ = all.contend(who, 8.min(most), &format!("{dir}-c"), run_for / 3);
        }
    }

    // 3. Uncontended acquire, then the contended mutex at each N, in blocks whose order rotates.
    let mut rows: Vec<(String, [Option<Figures>; 5])> = Vec::new();
    let rounds = if args.quick { 300 } else { 2000 };
    let mut blocks: Vec<Vec<Figures>> = vec![Vec::new(); 5];
    for block in 0..3 {
        for turn in 0..5 {
            let i = (block + turn) % 5;
            let who = EVERYONE[i];
            let dir = format!("/bench/tls/u-{}-{block}", who.tag());
            blocks[i].extend(measured_on(&server, || all.uncontended(who, &dir, rounds)));
        }
    }
    rows.push(("uncontended acquire".into(), blocks.map_each(median)));
    let per_config = if args.quick { 1 } else { 6 };
    let block_for = run_for / per_config;
    for &n in &ns {
        let mut blocks: Vec<Vec<Figures>> = vec![Vec::new(); 5];
        for block in 0..per_config as usize {
            for turn in 0..5 {
                let i = (block + turn) % 5;
                let who = EVERYONE[i];
                let dir = format!("/bench/tls/m{n}-{}-{block}", who.tag());
                blocks[i].extend(measured_on(&server, || {
                    all.contend(who, n, &dir, block_for)
                }));
            }
        }
        rows.push((format!("mutex N={n}"), blocks.map_each(combine)));
    }
    report(&rows);
}

/// Runs `measure` and adds the server's CPU per acquisition, if there was a measurement.
fn measured_on(
    server: &TestingServer,
    measure: impl FnOnce() -> Option<Figures>,
) -> Option<Figures> {
    let mut measured = None;
    let figures = on_server(server, || {
        measured = measure();
        measured.unwrap_or_default()
    });
    measured.map(|_| figures)
}

/// Each client's blocks, summarised; a client with no blocks (no floor) has no figures.
trait MapEach {
    fn map_each(&self, f: impl Fn(&[Figures]) -> Figures) -> [Option<Figures>; 5];
}

impl MapEach for Vec<Vec<Figures>> {
    fn map_each(&self, f: impl Fn(&[Figures]) -> Figures) -> [Option<Figures>; 5] {
        std::array::from_fn(|i| {
            let b = &self[i];
            (!b.is_empty()).then(|| f(b))
        })
    }
}

fn report(rows: &[(String, [Option<Figures>; 5])]) {
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    let names = [
        "ours, plaintext",
        "ours, TLS",
        "zookeeper-client, plaintext",
        "zookeeper-client, TLS",
        "wire floor, plaintext",
    ];
    for (name, figures) in rows {
        let contended = figures[0].is_some_and(|f| f.per_second > 0.0);
        let what = if contended { "handoff" } else { "acquire" };
        println!(
            "\n{name:<30}{:>9}{:>13}{:>9}{:>11}{:>11}",
            "acq/s",
            format!("{what} p50"),
            "p99",
            "cpu µs/acq",
            "server µs"
        );
        let mut fields = vec![("config", s(name))];
        for ((who, label), x) in EVERYONE.iter().zip(names).zip(figures) {
            let Some(x) = x else { continue };
            println!(
                "  {label:<28}{:>9.0}{:>13.0}{:>9.0}{:>11.0}{:>11.0}",
                x.per_second, x.p50_us, x.p99_us, x.cpu_us_per_acq, x.server_us_per_acq
            );
            let tag = who.tag().replace('-', "_");
            fields.extend([
                (leak(format!("{tag}_per_second")), f(x.per_second)),
                (leak(format!("{tag}_p50_us")), f(x.p50_us)),
                (leak(format!("{tag}_p99_us")), f(x.p99_us)),
                (leak(format!("{tag}_cpu_us_per_acq")), f(x.cpu_us_per_acq)),
                (
                    leak(format!("{tag}_server_us_per_acq")),
                    f(x.server_us_per_acq),
                ),
            ]);
        }
        // The TLS cost of each client (TLS ÷ plaintext), and ours against the peer's over TLS.
        let [op, ot, zp, zt, fl] = figures.map(Option::unwrap_or_default);
        let cost = |a: &Figures, b: &Figures| {
            let rate = match contended {
                true => format!(" acq/s {:.2},", ratio(a.per_second, b.per_second)),
                false => String::new(),
            };
            format!(
                "p50 {:.2},{rate} cpu {:.2}",
                ratio(a.p50_us, b.p50_us),
                ratio(a.cpu_us_per_acq, b.cpu_us_per_acq)
            )
        };
        println!(
            "  TLS ÷ plaintext: ours {}; zookeeper-client {}",
            cost(&ot, &op),
            cost(&zt, &zp)
        );
        println!(
            "  ours ÷ zookeeper-client over TLS: {}; ours plaintext ÷ floor: {}",
            cost(&ot, &zt),
            cost(&op, &fl)
        );
        json("tls", &fields);
    }
    println!(
        "\n(uncontended: acquire latency; contended: handoff latency, from a release to the next \
         holder's acquire. cpu: the client's, per acquisition; server: the server's, per \
         acquisition, while that client ran)"
    );
}
