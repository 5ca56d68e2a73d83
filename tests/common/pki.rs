//! Certificates for the TLS tests, made fresh by each test: a certificate authority, a server
//! certificate for the loopback address, and client certificates by common name. Nothing is
//! checked in, so nothing expires.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use zk_recipes::testing::ServerTls;
use zk_recipes::TlsOptions;

/// The serial number of every [`Pki`]'s server certificate (others have 1).
pub const SERVER_SERIAL: u64 = 0x5e4e;

pub struct Pki {
    dir: tempfile::TempDir,
    ca: rcgen::Certificate,
    ca_key: KeyPair,
}

impl Pki {
    /// A new certificate authority named `name`, its files in a directory removed on drop.
    pub fn new(name: &str) -> Pki {
        Pki::in_dir(name, tempfile::tempdir().unwrap())
    }

    /// For a process-wide authority, never dropped: its files under cargo's target
    /// directory, not the system temp dir.
    pub fn lasting(name: &str) -> Pki {
        let dir = tempfile::Builder::new()
            .prefix("pki-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap();
        Pki::in_dir(name, dir)
    }

    fn in_dir(name: &str, dir: tempfile::TempDir) -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} CA"));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = KeyPair::generate().unwrap();
        let ca = params.self_signed(&ca_key).unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        let pki = Pki { dir, ca, ca_key };
        // The server's key store: its key and certificate in one PEM file.
        let (cert, key) = pki.issue_serial("zookeeper", &["127.0.0.1", "localhost"], SERVER_SERIAL);
        std::fs::write(pki.path("server.pem"), format!("{key}{cert}")).unwrap();
        pki
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A certificate (PEM) and its key (PEM, PKCS#8) for `cn`, valid for `names`.
    fn issue(&self, cn: &str, names: &[&str]) -> (String, String) {
        self.issue_serial(cn, names, 1)
    }

    fn issue_serial(&self, cn: &str, names: &[&str], serial: u64) -> (String, String) {
        self.issue_with(cn, names, serial, false)
    }

    /// As `issue_serial`; with `expired`, valid only during 2020.
    fn issue_with(&self, cn: &str, names: &[&str], serial: u64, expired: bool) -> (String, String) {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        params.serial_number = Some(rcgen::SerialNumber::from(serial));
        params.distinguished_name.push(DnType::CommonName, cn);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// Writes into `file` a CRL of this CA's (PEM) that revokes the certificates with these
    /// serial numbers ([`SERVER_SERIAL`] is the server's); `number` is the CRL's own.
    pub fn write_crl(&self, file: &Path, revoked: &[u64], number: u64) {
        let revoked_certs = revoked
            .iter()
            .map(|&serial| rcgen::RevokedCertParams {
                serial_number: rcgen::SerialNumber::from(serial),
                revocation_time: rcgen::date_time_ymd(2024, 1, 1),
                reason_code: Some(rcgen::RevocationReason::KeyCompromise),
                invalidity_date: None,
            })
            .collect();
        let crl = rcgen::CertificateRevocationListParams {
            this_update: rcgen::date_time_ymd(2024, 1, 1),
            next_update: rcgen::date_time_ymd(2100, 1, 1),
            crl_number: rcgen::SerialNumber::from(number),
            issuing_distribution_point: None,
            revoked_certs,
            key_identifier_method: rcgen::KeyIdMethod::Sha256,
        }
        .signed_by(&self.ca, &self.ca_key)
        .unwrap();
        std::fs::write(file, crl.pem().unwrap()).unwrap();
    }

    /// Writes into `encrypted` the PEM key `key` encrypted with `password` as Java users'
    /// tools write it: `openssl pkcs8 -topk8 -v2 aes-256-cbc` (PKCS#8, PBES2), or with
    /// `legacy` as OpenSSL 1.0 did (3DES, PBKDF2 with HMAC-SHA1).
    pub fn encrypt_key(key: &Path, encrypted: &Path, password: &str, legacy: bool) {
        let pass = format!("pass:{password}");
        let (cipher, prf) = if legacy {
            ("des3", "hmacWithSHA1")
        } else {
            ("aes-256-cbc", "hmacWithSHA256")
        };
        let args = [
            "pkcs8", "-topk8", "-v2", cipher, "-v2prf", prf, "-passout", &pass, "-in",
        ];
        openssl(
            std::process::Command::new("openssl")
                .args(args)
                .arg(key)
                .arg("-out")
                .arg(encrypted),
        );
    }

    /// Writes into `store` a PKCS#12 key store of the PEM certificate `cert` and key `key`,
    /// with `password` and OpenSSL's default encryption (PBES2, AES-256), or with `legacy`
    /// the PBE-SHA1-3DES that older tools wrote.
    pub fn write_pkcs12(cert: &Path, key: &Path, store: &Path, password: &str, legacy: bool) {
        let pass = format!("pass:{password}");
        let mut cmd = std::process::Command::new("openssl");
        cmd.args(["pkcs12", "-export", "-name", "me", "-passout", &pass, "-in"])
            .arg(cert)
            .arg("-inkey")
            .arg(key)
            .arg("-out")
            .arg(store);
        if legacy {
            cmd.args([
                "-keypbe",
                "PBE-SHA1-3DES",
                "-certpbe",
                "PBE-SHA1-3DES",
                "-macalg",
                "sha1",
            ]);
        }
        openssl(&mut cmd);
    }

    /// The CA certificate's file.
    pub fn ca(&self) -> PathBuf {
        self.path("ca.pem")
    }

    /// Writes a client certificate for `cn` into `cert` and `key` (replacing what is there).
    pub fn write_client(&self, cn: &str, cert: &Path, key: &Path) {
        let (c, k) = self.issue(cn, &[]);
        std::fs::write(cert, c).unwrap();
        std::fs::write(key, k).unwrap();
    }

    /// Client options that trust this CA and present a certificate for `cn`.
    pub fn client(&self, cn: &str) -> TlsOptions {
        let (cert, key) = (
            self.path(&format!("{cn}.pem")),
            self.path(&format!("{cn}.key")),
        );
        self.write_client(cn, &cert, &key);
        TlsOptions::new(self.ca()).identity(cert, key)
    }

    /// A server side like [`server`](Self::server)'s with a certificate of this CA that names
    /// `names` instead of the loopback address (and, with `expired`, expired long ago), in a
    /// key store of its own (`tag`). The server also opens a plaintext port: the harness
    /// knows it is up without taking that certificate.
    pub fn server_misissued(&self, tag: &str, names: &[&str], expired: bool) -> ServerTls {
        let (cert, key) = self.issue_with("zookeeper", names, SERVER_SERIAL, expired);
        let key_store = self.path(&format!("server-{tag}.pem"));
        std::fs::write(&key_store, format!("{key}{cert}")).unwrap();
        ServerTls {
            key_store,
            plaintext_too: true,
            ..self.server(false)
        }
    }

    /// The server side: this CA's server certificate, trusting this CA's clients.
    pub fn server(&self, client_auth_required: bool) -> ServerTls {
        ServerTls {
            key_store: self.path("server.pem"),
            trust_store: self.ca(),
            client_auth_required,
            client: self.client("harness"),
            plaintext_too: false,
        }
    }
}

/// Runs an `openssl` command, which must succeed.
fn openssl(cmd: &mut std::process::Command) {
    let out = cmd.output().expect("openssl (apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
