//! TLS (issue 21): a server with only a TLS client port, reached by clients that check its
//! certificate against their CA and present their own.

mod common;

use std::time::Duration;

use common::pki::Pki;
use common::*;
use zk_recipes::testing::{ServerOptions, TestingServer};
use zk_recipes::{Client, CreateMode, Error, InterProcessMutex, TlsOptions};

fn tls_server(pki: &Pki, client_auth_required: bool) -> TestingServer {
    init_logs();
    TestingServer::with_options(ServerOptions {
        tls: Some(pki.server(client_auth_required)),
        ..ServerOptions::default()
    })
    .expect("a TLS-only server")
}

fn tls_client(server: &TestingServer, tls: TlsOptions) -> zk_recipes::Result<Client> {
    Client::builder(&server.connect_string())
        .session_timeout(Duration::from_secs(10))
        .tick_time(server.tick_time())
        .connection_timeout(Duration::from_secs(10))
        .tls(tls)
        .connect()
}

#[test]
fn a_client_that_trusts_the_servers_ca_works_over_tls() {
    let pki = Pki::new("works");
    let server = tls_server(&pki, false);
    let client = tls_client(&server, TlsOptions::new(pki.ca())).expect("a TLS session");
    let path = root("tls");
    client
        .create(&path, b"over tls", CreateMode::Persistent)
        .unwrap();
    assert_eq!(client.data(&path).unwrap().0, b"over tls");
    let mutex = InterProcessMutex::new(&client, &format!("{path}/lock")).unwrap();
    let guard = mutex.try_acquire_for(SOON).unwrap().expect("the lock");
    guard.check().unwrap();
    drop(guard);
}

#[test]
fn a_server_asked_for_both_serves_tls_and_plaintext_clients_of_one_tree() {
    // The TLS bench's server: TLS and plaintext clients of the same server side by side.
    let pki = Pki::new("both");
    init_logs();
    let server = TestingServer::with_options(ServerOptions {
        tls: Some(zk_recipes::testing::ServerTls {
            plaintext_too: true,
            ..pki.server(false)
        }),
        ..ServerOptions::default()
    })
    .expect("a server with both ports");
    let plain = server.plaintext_connect_string().expect("a plaintext port");
    assert_ne!(plain, server.connect_string());
    let secure = tls_client(&server, TlsOptions::new(pki.ca())).expect("a TLS session");
    let path = root("both");
    secure
        .create(&path, b"written over tls", CreateMode::Persistent)
        .unwrap();
    let plaintext = Client::builder(&plain)
        .session_timeout(Duration::from_secs(10))
        .connect()
        .expect("a plaintext session");
    assert_eq!(plaintext.data(&path).unwrap().0, b"written over tls");
    // A plaintext client on the TLS port gets no session: the ports are what they say.
    let e = Client::builder(&server.connect_string())
        .connection_timeout(Duration::from_secs(1))
        .connect()
        .unwrap_err();
    assert!(
        matches!(e, Error::ConnectionLoss { .. } | Error::Timeout { .. }),
        "{e:?}"
    );
}

#[test]
fn a_server_certificate_from_another_ca_fails_connect_with_a_tls_error() {
    let pki = Pki::new("server side");
    let server = tls_server(&pki, false);
    let stranger = Pki::new("stranger");
    let e = tls_client(&server, TlsOptions::new(stranger.ca())).unwrap_err();
    assert!(matches!(e, Error::Tls(_)), "{e:?}");
}

/// A certificate that does not verify on every server of the connect string is not retried
/// for the whole connection timeout (issue 39, item 5): `connect` returns the TLS error once
/// every server failed so, here well within a 60 s timeout (it took the whole 60 s).
#[test]
fn a_certificate_that_does_not_verify_anywhere_fails_connect_before_its_timeout() {
    let pki = Pki::new("server side");
    let server = tls_server(&pki, false);
    let stranger = Pki::new("stranger");
    let timeout = Duration::from_secs(60);
    let began = std::time::Instant::now();
    let e = Client::builder(&format!(
        "{},{}",
        server.connect_string(),
        server.connect_string()
    ))
    .session_timeout(Duration::from_secs(10))
    .connection_timeout(timeout)
    .tls(TlsOptions::new(stranger.ca()))
    .connect()
    .unwrap_err();
    assert!(matches!(e, Error::Tls(_)), "{e:?}");
    assert!(
        began.elapsed() < timeout / 2,
        "returned after {:?} of a {timeout:?} timeout",
        began.elapsed()
    );
}

#[test]
fn unreadable_tls_files_fail_connect_at_once() {
    let e = Client::builder("127.0.0.1:1")
        .tls(TlsOptions::new("/nonexistent/ca.pem"))
        .connect()
        .unwrap_err();
    assert!(
        matches!(&e, Error::Tls(m) if m.contains("/nonexistent/ca.pem")),
        "{e:?}"
    );
}

/// The server's x509 provider names a client by its certificate's subject: an ACL can give a
/// node to one certificate alone.
#[test]
fn a_client_certificate_names_the_client_for_acls() {
    let pki = Pki::new("x509");
    let server = tls_server(&pki, true);
    let alice = tls_client(&server, pki.client("alice")).expect("alice");
    let who = alice.who_am_i().unwrap();
    assert!(
        who.iter()
            .any(|i| i.scheme == "x509" && i.user.contains("CN=alice")),
        "{who:?}"
    );
}

#[test]
fn a_node_given_to_one_certificate_is_closed_to_another() {
    use zk_recipes::acl::{Acl, Id, Permission};
    let pki = Pki::new("acl");
    let server = tls_server(&pki, true);
    let alice = tls_client(&server, pki.client("alice")).expect("alice");
    let bob = tls_client(&server, pki.client("bob")).expect("bob");
    let path = root("alice-only");
    let only_alice = vec![Acl::new(Permission::ALL, Id::new("x509", "CN=alice"))];
    alice
        .create_with_acl(&path, b"hers", CreateMode::Persistent, &only_alice)
        .unwrap();
    assert_eq!(alice.data(&path).unwrap().0, b"hers");
    let denied = bob.data(&path).unwrap_err();
    assert!(denied.is_code(zk_recipes::ZkCode::NoAuth), "{denied:?}");
}

#[test]
fn a_server_that_needs_a_client_certificate_refuses_a_client_without_one() {
    let pki = Pki::new("need");
    let server = tls_server(&pki, true);
    let e = tls_client(&server, TlsOptions::new(pki.ca())).unwrap_err();
    assert!(matches!(e, Error::Tls(_)), "{e:?}");
}

/// The files are read again on every connection: a certificate renewed in place is the one
/// the next connection presents, with no restart.
#[test]
fn a_renewed_client_certificate_is_used_from_the_next_connection() {
    let pki = Pki::new("rotate");
    let server = tls_server(&pki, true);
    let proxy = zk_recipes::testing::FaultProxy::start(server.addr()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("me.pem"), dir.path().join("me.key"));
    pki.write_client("before", &cert, &key);
    let client = Client::builder(&proxy.connect_string())
        .session_timeout(Duration::from_secs(10))
        .tick_time(server.tick_time())
        .tls(TlsOptions::new(pki.ca()).identity(&cert, &key))
        .connect()
        .unwrap();
    let named = |c: &Client, cn: &str| {
        c.who_am_i()
            .unwrap()
            .iter()
            .any(|i| i.scheme == "x509" && i.user == format!("CN={cn}"))
    };
    assert!(named(&client, "before"));
    pki.write_client("after", &cert, &key);
    let id = client.session_id();
    let sub = client.subscribe();
    proxy.cut();
    next_state(&sub, zk_recipes::ConnectionState::Suspended);
    next_state(&sub, zk_recipes::ConnectionState::Reconnected);
    assert_eq!(client.session_id(), id, "the same session");
    assert!(named(&client, "after"), "{:?}", client.who_am_i());
}

/// Requests larger than what the TLS state takes at once (a megabyte of data) go out whole.
#[test]
fn a_large_request_goes_out_whole_over_tls() {
    let pki = Pki::new("large");
    let server = tls_server(&pki, false);
    let client = tls_client(&server, TlsOptions::new(pki.ca())).expect("a TLS session");
    let path = root("large");
    let data = vec![42u8; 1000 * 1000];
    client.create(&path, &data, CreateMode::Persistent).unwrap();
    assert_eq!(client.data(&path).unwrap().0, data);
}

/// The review of issue 21: under TLS 1.3 the server refuses a missing client certificate only
/// after the client finished its handshake, with an alert on the first read; that was taken
/// for a network fault (retried, then a bare timeout). It is a TLS error.
#[test]
fn a_tls13_server_that_needs_a_client_certificate_refuses_with_a_tls_error() {
    init_logs();
    let pki = Pki::new("tls13");
    let server = TestingServer::with_options(ServerOptions {
        tls: Some(pki.server(true)),
        config: vec![
            ("ssl.protocol".into(), "TLSv1.3".into()),
            ("ssl.enabledProtocols".into(), "TLSv1.3".into()),
            // ZooKeeper 3.8's default suites are TLS 1.2's only.
            (
                "ssl.ciphersuites".into(),
                "TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384".into(),
            ),
        ],
        ..ServerOptions::default()
    })
    .expect("a TLS 1.3 server");
    let e = tls_client(&server, TlsOptions::new(pki.ca())).unwrap_err();
    assert!(matches!(e, Error::Tls(_)), "{e:?}");
}

/// Issue 39, item 6: a CRL file. A CRL of the servers' CA that revokes another certificate
/// lets the client in; one that revokes the server's refuses it at `connect` with a TLS error
/// naming the revocation; a CRL file that is no CRL is an error at once. The file is read on
/// every connection: published in place, the revoking CRL refuses the next connection.
#[test]
fn a_crl_that_revokes_the_servers_certificate_refuses_it() {
    let pki = Pki::new("crl");
    let server = tls_server(&pki, false);
    let dir = tempfile::tempdir().unwrap();
    let crl = dir.path().join("ca.crl");
    pki.write_crl(&crl, &[0x77], 1);
    let proxy = zk_recipes::testing::FaultProxy::start(server.addr()).unwrap();
    let client = Client::builder(&proxy.connect_string())
        .session_timeout(Duration::from_secs(10))
        .tick_time(server.tick_time())
        .connection_timeout(Duration::from_secs(10))
        .tls(TlsOptions::new(pki.ca()).crls(&crl))
        .connect()
        .expect("a server whose certificate is not revoked");
    client.exists("/").unwrap();

    let revoking = dir.path().join("revoking.crl");
    pki.write_crl(&revoking, &[0x77, common::pki::SERVER_SERIAL], 2);
    match tls_client(&server, TlsOptions::new(pki.ca()).crls(&revoking)) {
        Err(Error::Tls(why)) => assert!(why.to_lowercase().contains("revoked"), "{why}"),
        other => panic!("a revoked server certificate was taken: {other:?}"),
    }
    let not_a_crl = dir.path().join("not.crl");
    std::fs::write(&not_a_crl, "no CRL here\n").unwrap();
    match tls_client(&server, TlsOptions::new(pki.ca()).crls(&not_a_crl)) {
        Err(Error::Tls(why)) => assert!(why.contains("not.crl"), "{why}"),
        other => panic!("expected a TLS error for the CRL file, got {other:?}"),
    }

    // The revoking CRL published where the connected client reads its CRLs: its next
    // connection is refused (it keeps trying, as a client that has been connected does).
    std::fs::copy(&revoking, &crl).unwrap();
    let events = client.subscribe();
    let before = proxy.accepted();
    proxy.cut();
    // Two connections after the cut: the first was refused, or there would be no second.
    wait_for(SOON, || (proxy.accepted() >= before + 2).then_some(()))
        .expect("the client dials again");
    while let Some(e) = events.try_recv() {
        assert_ne!(
            e.state,
            zk_recipes::ConnectionState::Reconnected,
            "reconnected to a revoked server"
        );
    }
    assert!(client
        .with_timeout(Duration::from_millis(200))
        .exists("/")
        .is_err());
}

/// Issue 39, item 6: an encrypted private key (PKCS#8 with PBES2, as `openssl pkcs8 -topk8`
/// writes it and ZooKeeper's Java client opens it with `ssl.keyStore.password`) presents the
/// client's certificate to a server that needs one; a wrong password is a TLS error at once,
/// naming the file, and the password shows nowhere in `Debug`.
#[test]
fn an_encrypted_client_key_opens_with_its_password() {
    let pki = Pki::new("encrypted-key");
    let server = tls_server(&pki, true);
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, encrypted) = (
        dir.path().join("me.pem"),
        dir.path().join("me.key"),
        dir.path().join("me.enc.key"),
    );
    pki.write_client("encrypted", &cert, &key);
    Pki::encrypt_key(&key, &encrypted, "s3cret pw", false);
    assert!(std::fs::read_to_string(&encrypted)
        .unwrap()
        .contains("ENCRYPTED PRIVATE KEY"));
    let options = TlsOptions::new(pki.ca()).identity_encrypted(&cert, &encrypted, "s3cret pw");
    assert!(!format!("{options:?}").contains("s3cret"));
    let client = tls_client(&server, options).expect("in with the decrypted key");
    let who = client.who_am_i().unwrap();
    assert!(
        who.iter()
            .any(|i| i.scheme == "x509" && i.user.contains("encrypted")),
        "{who:?}"
    );
    match tls_client(
        &server,
        TlsOptions::new(pki.ca()).identity_encrypted(&cert, &encrypted, "not it"),
    ) {
        Err(Error::Tls(why)) => {
            assert!(
                why.contains("me.enc.key") && why.contains("decrypt"),
                "{why}"
            )
        }
        other => panic!("a wrong password opened the key: {other:?}"),
    }
    // As OpenSSL 1.0 wrote them (3DES, the SHA-1 PRF), which Java's loader opens too.
    let legacy = dir.path().join("me.legacy.key");
    Pki::encrypt_key(&key, &legacy, "s3cret pw", true);
    tls_client(
        &server,
        TlsOptions::new(pki.ca()).identity_encrypted(&cert, &legacy, "s3cret pw"),
    )
    .expect("in with the legacy-encrypted key");
}

/// Issue 39, item 6: PKCS#12 stores as Java users bring them: a trust store made by
/// `keytool`, and key stores made by OpenSSL in its default (PBES2, AES-256) and in the older
/// PBE-SHA1-3DES scheme. Each gets the client in to a server that needs a client certificate,
/// named by it; a wrong password is a TLS error at once, naming the store.
#[test]
fn pkcs12_key_and_trust_stores_open_with_their_passwords() {
    let pki = Pki::new("pkcs12");
    let server = tls_server(&pki, true);
    let dir = tempfile::tempdir().unwrap();
    let path = |n: &str| dir.path().join(n);
    let run = |program: &str, args: &[&str]| {
        let out = std::process::Command::new(program)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        assert!(
            out.status.success(),
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let p = |n: &str| path(n).display().to_string();
    run(
        "keytool",
        &[
            "-importcert",
            "-noprompt",
            "-storetype",
            "PKCS12",
            "-alias",
            "zk-ca",
            "-keystore",
            &p("trust.p12"),
            "-storepass",
            "trust pw",
            "-file",
            &pki.ca().display().to_string(),
        ],
    );
    pki.write_client("p12-client", &path("me.pem"), &path("me.key"));
    Pki::write_pkcs12(
        &path("me.pem"),
        &path("me.key"),
        &path("me.p12"),
        "key pw",
        false,
    );
    Pki::write_pkcs12(
        &path("me.pem"),
        &path("me.key"),
        &path("me-3des.p12"),
        "key pw",
        true,
    );
    for key_store in ["me.p12", "me-3des.p12"] {
        let options = TlsOptions::pkcs12_trust_store(path("trust.p12"), "trust pw")
            .identity_pkcs12(path(key_store), "key pw");
        assert!(!format!("{options:?}").contains("pw\""), "{options:?}");
        let client =
            tls_client(&server, options).unwrap_or_else(|e| panic!("in with {key_store}: {e}"));
        let who = client.who_am_i().unwrap();
        assert!(
            who.iter()
                .any(|i| i.scheme == "x509" && i.user.contains("p12-client")),
            "{key_store}: {who:?}"
        );
    }
    let wrong = TlsOptions::pkcs12_trust_store(path("trust.p12"), "trust pw")
        .identity_pkcs12(path("me.p12"), "not it");
    match tls_client(&server, wrong) {
        Err(Error::Tls(why)) => assert!(why.contains("me.p12"), "{why}"),
        other => panic!("a wrong password opened the key store: {other:?}"),
    }
    // A trust store made by OpenSSL marks nothing trusted (Java's keytool does): refused
    // with what to do, not as an empty file.
    let out = std::process::Command::new("openssl")
        .args(["pkcs12", "-export", "-nokeys", "-passout", "pass:pw", "-in"])
        .arg(pki.ca())
        .arg("-out")
        .arg(path("openssl-trust.p12"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    match tls_client(
        &server,
        TlsOptions::pkcs12_trust_store(path("openssl-trust.p12"), "pw"),
    ) {
        Err(Error::Tls(why)) => assert!(why.contains("trusted certificate entry"), "{why}"),
        other => panic!("expected the trust store's error, got {other:?}"),
    }
    match tls_client(
        &server,
        TlsOptions::pkcs12_trust_store(path("trust.p12"), "nope"),
    ) {
        Err(Error::Tls(why)) => assert!(why.contains("trust.p12"), "{why}"),
        other => panic!("a wrong password opened the trust store: {other:?}"),
    }
}

/// Issue 39, item 5: a certificate that stops verifying after `connect` is reported, not
/// retried in silence. The client's one address (a proxy) is moved to a server whose
/// certificate names another host, then to one whose certificate expired, then back:
/// `connect_failure`, the errors of calls that find no connection and the `Lost` event say
/// which; the client keeps trying, and is back with a new session (and no cause) once a
/// server's certificate verifies again.
#[test]
fn a_certificate_that_stops_verifying_after_connect_is_told_to_callers_and_listeners() {
    use zk_recipes::{ConnectFailure, ConnectionState, RetryPolicy};
    let pki = Pki::new("rotated");
    let good = tls_server(&pki, false);
    let start = |tls| {
        TestingServer::with_options(ServerOptions {
            tls: Some(tls),
            ..ServerOptions::default()
        })
        .expect("a TLS server")
    };
    let misnamed = start(pki.server_misissued("misnamed", &["elsewhere.test"], false));
    let expired = start(pki.server_misissued("expired", &["127.0.0.1"], true));
    let proxy = zk_recipes::testing::FaultProxy::start(good.addr()).unwrap();
    let client = Client::builder(&proxy.connect_string())
        .session_timeout(Duration::from_secs(4))
        .tick_time(good.tick_time())
        .connection_timeout(Duration::from_secs(2))
        .retry_policy(RetryPolicy::never())
        .tls(TlsOptions::new(pki.ca()))
        .connect()
        .expect("a TLS session");
    let lost = client.session_id().unwrap();
    assert_eq!(client.connect_failure(), None);
    let events = client.subscribe();

    let stops_on = |cause: ConnectFailure| {
        wait_for(SOON, || {
            (client.connect_failure() == Some(cause)).then_some(())
        })
        .unwrap_or_else(|| panic!("no {cause:?} told: {:?}", client.connect_failure()));
    };
    proxy.retarget(misnamed.addr());
    proxy.cut();
    let suspended = next_state(&events, ConnectionState::Suspended);
    assert_eq!(suspended.session_id, lost);
    assert_eq!(
        suspended.cause, None,
        "told as the connection ends, before any attempt"
    );
    stops_on(ConnectFailure::CertificateNameMismatch);
    // A call bounded by its deadline, and one bounded by the connection timeout.
    match client.with_timeout(Duration::from_millis(300)).exists("/") {
        Err(Error::Timeout { cause, .. }) => {
            assert_eq!(cause, Some(ConnectFailure::CertificateNameMismatch))
        }
        other => panic!("expected a timeout that says why, got {other:?}"),
    }
    match client.exists("/") {
        Err(e @ Error::ConnectionLoss { .. }) => {
            assert_eq!(
                e.connect_failure(),
                Some(ConnectFailure::CertificateNameMismatch)
            );
            assert!(e.to_string().contains("does not name the host"), "{e}");
        }
        other => panic!("expected a connection loss that says why, got {other:?}"),
    }
    let gone = next_state(&events, ConnectionState::Lost);
    assert_eq!(gone.session_id, lost);
    assert_eq!(gone.cause, Some(ConnectFailure::CertificateNameMismatch));

    proxy.retarget(expired.addr());
    stops_on(ConnectFailure::CertificateExpired);
    match client.with_timeout(Duration::from_millis(300)).exists("/") {
        Err(e) => assert_eq!(
            e.connect_failure(),
            Some(ConnectFailure::CertificateExpired),
            "{e:?}"
        ),
        Ok(found) => panic!("answered through an expired certificate: {found:?}"),
    }

    // The expired server goes down: what stops the client there is no longer its
    // certificate (the proxy resets the connections it cannot pass on, as a server that is
    // down refuses them).
    expired.stop();
    wait_for(SOON, || client.connect_failure().is_none().then_some(()))
        .expect("the cause is no longer told once the server fails otherwise");
    match client.with_timeout(Duration::from_millis(300)).exists("/") {
        Err(e) => assert_eq!(e.connect_failure(), None, "{e:?}"),
        Ok(found) => panic!("answered by a server that is down: {found:?}"),
    }

    proxy.retarget(good.addr());
    let back = next_state(&events, ConnectionState::Connected);
    assert_ne!(back.session_id, lost, "a new session");
    assert_eq!(
        client.connect_failure(),
        None,
        "cleared before Connected is told"
    );
    client
        .exists("/")
        .expect("answered once the certificate verifies");
}
