//! PKI behaviour through the public API: persistence, re-issue rules, file modes, token
//! authentication, kubeconfig shape and real TLS handshakes the way kube-rs makes them.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use finale_apiserver::authn::ClientCertificate;
use finale_apiserver::pki::{
    self, AuthError, Identity, Pki, PkiError, TokenAuthenticator, identity_from_client_cert,
    write_kubeconfig,
};
use rustls::RootCertStore;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn cert_der(pem: &str) -> CertificateDer<'static> {
    rustls_pemfile::certs(&mut pem.as_bytes())
        .next()
        .expect("a certificate")
        .expect("valid PEM")
}

fn key_der(pem: &str) -> PrivateKeyDer<'static> {
    rustls_pemfile::private_key(&mut pem.as_bytes())
        .expect("valid PEM")
        .expect("a key")
}

fn roots(ca_pem: &str) -> Arc<RootCertStore> {
    let mut roots = RootCertStore::empty();
    roots.add(cert_der(ca_pem)).expect("CA accepted as root");
    Arc::new(roots)
}

/// What kube-rs does with `certificate-authority-data`: verify the serving cert against the
/// CA only, for the host in the server URL.
fn verify_serving(ca_pem: &str, serving_pem: &str, name: &str) -> Result<(), rustls::Error> {
    let verifier = WebPkiServerVerifier::builder_with_provider(roots(ca_pem), provider())
        .build()
        .expect("verifier");
    let now =
        UnixTime::since_unix_epoch(SystemTime::now().duration_since(UNIX_EPOCH).expect("clock"));
    verifier
        .verify_server_cert(
            &cert_der(serving_pem),
            &[],
            &ServerName::try_from(name.to_string()).expect("server name"),
            &[],
            now,
        )
        .map(|_| ())
}

fn pki_file(dir: &Path, name: &str) -> std::path::PathBuf {
    dir.join(pki::PKI_DIR).join(name)
}

#[test]
fn create_then_load_keeps_ca_token_and_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let first = Pki::load_or_create(dir.path(), &[]).unwrap();
    let second = Pki::load_or_create(dir.path(), &[]).unwrap();

    assert_eq!(first.ca_pem(), second.ca_pem());
    assert_eq!(first.admin_token(), second.admin_token());
    assert_eq!(first.serving_cert_pem(), second.serving_cert_pem());
    assert_eq!(
        first.admin_client_cert_pem(),
        second.admin_client_cert_pem()
    );
    assert!(first.ca_pem().starts_with("-----BEGIN CERTIFICATE-----"));
    // 32 random bytes, base64url without padding.
    let token = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(first.admin_token())
        .unwrap();
    assert_eq!(token.len(), 32);
    assert_eq!(
        fs::read_to_string(pki_file(dir.path(), pki::ADMIN_TOKEN_FILE)).unwrap(),
        format!("{}\n", first.admin_token())
    );
    // Secrets stay out of Debug output.
    assert!(!format!("{first:?}").contains(first.admin_token()));
}

/// `finale server --pki-dir`: replicas with their own data directories share one PKI, so a
/// client trusts every replica with one CA and one token.
#[test]
fn replicas_sharing_a_pki_dir_present_one_ca_token_and_serving_certificate() {
    let shared = tempfile::tempdir().unwrap();
    let sans = ["replica-a.example".to_string(), "10.0.0.2".to_string()];
    let first = Pki::load_or_create_in(shared.path(), &sans).unwrap();
    let second = Pki::load_or_create_in(shared.path(), &sans).unwrap();
    assert_eq!(first.ca_pem(), second.ca_pem());
    assert_eq!(first.admin_token(), second.admin_token());
    assert_eq!(first.serving_cert_pem(), second.serving_cert_pem());
    // The files are directly in the shared directory, not in a `pki/` below it.
    assert!(shared.path().join(pki::ADMIN_TOKEN_FILE).is_file());
    assert!(!shared.path().join(pki::PKI_DIR).exists());
    for name in ["replica-a.example", "10.0.0.2", "127.0.0.1"] {
        verify_serving(second.ca_pem(), second.serving_cert_pem(), name)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    // A data directory's own PKI is another CA altogether.
    let own = tempfile::tempdir().unwrap();
    let separate = Pki::load_or_create(own.path(), &sans).unwrap();
    assert_ne!(separate.ca_pem(), first.ca_pem());
}

#[test]
fn serving_cert_covers_loopback_names_and_is_not_a_ca() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::load_or_create(dir.path(), &[]).unwrap();
    for name in ["127.0.0.1", "::1", "localhost"] {
        // webpki also rejects a CA:TRUE end-entity certificate (CaUsedAsEndEntity), so
        // success here proves the serving certificate is a proper leaf.
        verify_serving(pki.ca_pem(), pki.serving_cert_pem(), name)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    assert!(verify_serving(pki.ca_pem(), pki.serving_cert_pem(), "example.com").is_err());
    assert!(verify_serving(pki.ca_pem(), pki.serving_cert_pem(), "10.0.0.1").is_err());

    // basicConstraints: OID 2.5.29.19, critical, empty SEQUENCE (CA:FALSE) for the leaf and
    // SEQUENCE { TRUE } for the CA.
    let leaf = cert_der(pki.serving_cert_pem());
    let ca = cert_der(pki.ca_pem());
    let leaf_bc = [
        0x06, 0x03, 0x55, 0x1d, 0x13, 0x01, 0x01, 0xff, 0x04, 0x02, 0x30, 0x00,
    ];
    let ca_bc = [
        0x06, 0x03, 0x55, 0x1d, 0x13, 0x01, 0x01, 0xff, 0x04, 0x05, 0x30, 0x03, 0x01, 0x01, 0xff,
    ];
    assert!(leaf.windows(leaf_bc.len()).any(|w| w == leaf_bc));
    assert!(ca.windows(ca_bc.len()).any(|w| w == ca_bc));
    assert_eq!(pki.serving_sans(), ["127.0.0.1", "::1", "localhost"]);
}

#[test]
fn adding_an_extra_san_reissues_only_the_serving_cert() {
    let dir = tempfile::tempdir().unwrap();
    let before = Pki::load_or_create(dir.path(), &[]).unwrap();
    let extra = vec!["10.1.2.3".to_string(), "API.example.com".to_string()];
    let after = Pki::load_or_create(dir.path(), &extra).unwrap();

    assert_ne!(before.serving_cert_pem(), after.serving_cert_pem());
    assert_eq!(before.ca_pem(), after.ca_pem());
    assert_eq!(before.admin_token(), after.admin_token());
    assert_eq!(
        before.admin_client_cert_pem(),
        after.admin_client_cert_pem()
    );
    for name in [
        "10.1.2.3",
        "api.example.com",
        "127.0.0.1",
        "localhost",
        "::1",
    ] {
        verify_serving(before.ca_pem(), after.serving_cert_pem(), name)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }

    // A subset of what the certificate covers needs no new certificate.
    let subset = Pki::load_or_create(dir.path(), &extra[..1]).unwrap();
    assert_eq!(subset.serving_cert_pem(), after.serving_cert_pem());
}

#[test]
fn broken_leaves_are_reissued_from_the_same_ca() {
    let dir = tempfile::tempdir().unwrap();
    let original = Pki::load_or_create(dir.path(), &[]).unwrap();

    fs::remove_file(pki_file(dir.path(), pki::SERVING_CERT_FILE)).unwrap();
    let missing = Pki::load_or_create(dir.path(), &[]).unwrap();
    assert_ne!(missing.serving_cert_pem(), original.serving_cert_pem());
    verify_serving(original.ca_pem(), missing.serving_cert_pem(), "localhost").unwrap();

    fs::write(pki_file(dir.path(), pki::SERVING_CERT_FILE), "garbage").unwrap();
    let garbage = Pki::load_or_create(dir.path(), &[]).unwrap();
    verify_serving(original.ca_pem(), garbage.serving_cert_pem(), "localhost").unwrap();

    // A key from another issuance (crash between writing key and certificate).
    let other = tempfile::tempdir().unwrap();
    let other_pki = Pki::load_or_create(other.path(), &[]).unwrap();
    drop(other_pki);
    fs::copy(
        pki_file(other.path(), pki::ADMIN_KEY_FILE),
        pki_file(dir.path(), pki::ADMIN_KEY_FILE),
    )
    .unwrap();
    let mismatched = Pki::load_or_create(dir.path(), &[]).unwrap();
    assert_ne!(
        mismatched.admin_client_cert_pem(),
        original.admin_client_cert_pem()
    );
    assert_eq!(mismatched.ca_pem(), original.ca_pem());
    assert_eq!(mismatched.admin_token(), original.admin_token());
}

#[test]
fn lost_ca_certificate_is_recreated_compatibly_but_lost_ca_key_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let original = Pki::load_or_create(dir.path(), &[]).unwrap();

    fs::remove_file(pki_file(dir.path(), pki::CA_CERT_FILE)).unwrap();
    let recovered = Pki::load_or_create(dir.path(), &[]).unwrap();
    assert_ne!(recovered.ca_pem(), original.ca_pem());
    // Same key and subject: each CA certificate verifies the other's leaves, so old
    // kubeconfigs keep working.
    assert_eq!(recovered.serving_cert_pem(), original.serving_cert_pem());
    verify_serving(original.ca_pem(), recovered.serving_cert_pem(), "localhost").unwrap();
    verify_serving(recovered.ca_pem(), original.serving_cert_pem(), "localhost").unwrap();

    fs::remove_file(pki_file(dir.path(), pki::CA_KEY_FILE)).unwrap();
    let err = Pki::load_or_create(dir.path(), &[]).unwrap_err();
    assert!(matches!(err, PkiError::CaKeyMissing { .. }), "{err}");
    assert!(err.to_string().contains("ca.key"), "{err}");
}

#[test]
fn a_foreign_ca_is_reported_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    Pki::load_or_create(dir.path(), &[]).unwrap();

    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "someone-else");
    let cert = params.self_signed(&key).unwrap();
    fs::write(pki_file(dir.path(), pki::CA_CERT_FILE), cert.pem()).unwrap();
    fs::write(pki_file(dir.path(), pki::CA_KEY_FILE), key.serialize_pem()).unwrap();

    let err = Pki::load_or_create(dir.path(), &[]).unwrap_err();
    assert!(matches!(err, PkiError::Invalid { .. }), "{err}");
    assert_eq!(
        fs::read_to_string(pki_file(dir.path(), pki::CA_CERT_FILE)).unwrap(),
        cert.pem()
    );
}

#[test]
fn token_file_is_kept_and_validated() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir_all(dir.path().join(pki::PKI_DIR)).unwrap();
    fs::write(
        pki_file(dir.path(), pki::ADMIN_TOKEN_FILE),
        "my-own-token\n",
    )
    .unwrap();
    let pki = Pki::load_or_create(dir.path(), &[]).unwrap();
    assert_eq!(pki.admin_token(), "my-own-token");

    fs::write(pki_file(dir.path(), pki::ADMIN_TOKEN_FILE), "  \n").unwrap();
    let err = Pki::load_or_create(dir.path(), &[]).unwrap_err();
    assert!(matches!(err, PkiError::Invalid { .. }), "{err}");
    assert!(err.to_string().contains("admin.token"), "{err}");
}

#[test]
fn invalid_extra_san_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let err = Pki::load_or_create(dir.path(), &["bad name!".to_string()]).unwrap_err();
    assert!(matches!(err, PkiError::InvalidSan { .. }), "{err}");
}

#[test]
fn files_are_private_and_no_temp_files_remain() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::load_or_create(dir.path(), &[]).unwrap();
    let kubeconfig = pki::default_kubeconfig_path(dir.path());
    pki.write_admin_kubeconfig(&kubeconfig, "https://127.0.0.1:6443", "finale")
        .unwrap();

    let pki_dir = dir.path().join(pki::PKI_DIR);
    assert_eq!(pki.dir(), pki_dir);
    assert_eq!(
        fs::metadata(&pki_dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    let mut names: Vec<String> = fs::read_dir(&pki_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "admin.crt",
            "admin.key",
            "admin.token",
            "apiserver.crt",
            "apiserver.key",
            "ca.crt",
            "ca.key",
            "sa.key",
            "sa.pub"
        ]
    );
    for path in names.iter().map(|n| pki_dir.join(n)).chain([kubeconfig]) {
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", path.display());
    }
}

#[test]
fn token_authentication() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::load_or_create(dir.path(), &[]).unwrap();
    let auth = pki.token_authenticator();
    let token = pki.admin_token();

    let admin = Identity {
        user: "admin".into(),
        uid: String::new(),
        groups: vec!["system:masters".into(), "system:authenticated".into()],
        extra: Default::default(),
    };
    for header in [
        format!("Bearer {token}"),
        format!("bearer {token}"),
        format!("BEARER   {token}  "),
        format!("  Bearer\t{token}"),
    ] {
        assert_eq!(
            auth.authenticate(Some(&header)),
            Ok(admin.clone()),
            "{header:?}"
        );
    }

    assert_eq!(auth.authenticate(None), Err(AuthError::MissingCredentials));
    assert_eq!(
        auth.authenticate(Some("")),
        Err(AuthError::MissingCredentials)
    );
    assert_eq!(
        auth.authenticate(Some("Bearer ")),
        Err(AuthError::MissingCredentials)
    );
    assert_eq!(
        auth.authenticate(Some("Bearer wrong")),
        Err(AuthError::InvalidToken)
    );
    // A prefix or extension of the right token is not the right token.
    assert_eq!(
        auth.authenticate(Some(&format!("Bearer {}", &token[..10]))),
        Err(AuthError::InvalidToken)
    );
    assert_eq!(
        auth.authenticate(Some(&format!("Bearer {token}x"))),
        Err(AuthError::InvalidToken)
    );
    assert_eq!(
        auth.authenticate(Some(&format!("Basic {token}"))),
        Err(AuthError::UnsupportedScheme {
            scheme: "Basic".into()
        })
    );
    assert_eq!(
        auth.authenticate(Some(token)),
        Err(AuthError::UnsupportedScheme {
            scheme: "<not a scheme name; missing `Bearer `?>".into()
        })
    );
    let bare = auth.authenticate(Some(token)).unwrap_err().to_string();
    assert!(!bare.contains(&token[..8]), "{bare}");

    let missing = AuthError::MissingCredentials.to_string();
    assert!(missing.contains("kubeconfig"), "{missing}");
    assert!(!AuthError::InvalidToken.to_string().contains(token));
    assert!(
        TokenAuthenticator::new()
            .authenticate(Some(&format!("Bearer {token}")))
            .is_err()
    );

    // Header-map front end.
    let mut headers = http::HeaderMap::new();
    assert_eq!(
        auth.authenticate_headers(&headers),
        Err(AuthError::MissingCredentials)
    );
    headers.insert(
        http::header::AUTHORIZATION,
        format!("Bearer {token}").parse().unwrap(),
    );
    assert_eq!(auth.authenticate_headers(&headers), Ok(admin));
    headers.append(http::header::AUTHORIZATION, "Bearer other".parse().unwrap());
    assert_eq!(
        auth.authenticate_headers(&headers),
        Err(AuthError::InvalidToken)
    );
}

#[test]
fn several_tokens_map_to_their_identities() {
    let mut auth = TokenAuthenticator::new();
    auth.insert("token-a", Identity::admin());
    auth.insert(
        "token-b",
        Identity {
            user: "ci".into(),
            uid: String::new(),
            groups: vec!["ci-bots".into()],
            extra: Default::default(),
        },
    );
    assert_eq!(auth.len(), 2);
    let ci = auth.authenticate(Some("Bearer token-b")).unwrap();
    assert_eq!(ci.user, "ci");
    assert_eq!(ci.groups, ["ci-bots", "system:authenticated"]);
    assert_eq!(
        auth.authenticate(Some("Bearer token-a")).unwrap().user,
        "admin"
    );
}

#[test]
fn kubeconfig_has_the_expected_shape() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::load_or_create(dir.path(), &[]).unwrap();
    let path = dir.path().join("nested").join("kubeconfig");
    write_kubeconfig(
        &path,
        "https://127.0.0.1:6443",
        "finale",
        pki.ca_pem(),
        pki.admin_token(),
    )
    .unwrap();

    let text = fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("apiVersion: v1\nkind: Config\n"), "{text}");
    let config: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    let ca_data = base64::engine::general_purpose::STANDARD.encode(pki.ca_pem().as_bytes());
    let expected = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": "finale",
            "cluster": {
                "server": "https://127.0.0.1:6443",
                "certificate-authority-data": ca_data,
            },
        }],
        "users": [{"name": "admin", "user": {"token": pki.admin_token()}}],
        "contexts": [{
            "name": "finale",
            "context": {"cluster": "finale", "user": "admin", "namespace": "default"},
        }],
        "current-context": "finale",
    });
    assert_eq!(config, expected);
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o700
    );

    // Rewriting replaces the file; awkward names survive quoting.
    write_kubeconfig(&path, "https://[::1]:6443", "yes", pki.ca_pem(), "0123").unwrap();
    let config: serde_json::Value =
        serde_saphyr::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(config["current-context"], "yes");
    assert_eq!(config["users"][0]["user"]["token"], "0123");
    assert_eq!(
        config["clusters"][0]["cluster"]["server"],
        "https://[::1]:6443"
    );
}

/// Result of one server-side handshake.
struct Accepted {
    alpn: Option<Vec<u8>>,
    /// What the client certificate proved, as the server judges it after the handshake.
    certificate: ClientCertificate,
    received: Vec<u8>,
}

async fn handshake(
    pki: &Pki,
    client_config: rustls::ClientConfig,
    server_name: &str,
) -> Result<Accepted, String> {
    let server_config = pki.server_tls_config().unwrap();
    let authenticator = pki.client_cert_authenticator().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(server_config);
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.map_err(|e| e.to_string())?;
        let mut tls = acceptor.accept(tcp).await.map_err(|e| e.to_string())?;
        let (_, conn) = tls.get_ref();
        let alpn = conn.alpn_protocol().map(<[u8]>::to_vec);
        let certificate = authenticator.check(conn.peer_certificates());
        let mut received = Vec::new();
        tls.read_to_end(&mut received)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(Accepted {
            alpn,
            certificate,
            received,
        })
    });

    let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from(server_name.to_string()).unwrap();
    let client_result = async {
        let mut tls = connector
            .connect(name, tcp)
            .await
            .map_err(|e| e.to_string())?;
        tls.write_all(b"ping").await.map_err(|e| e.to_string())?;
        tls.shutdown().await.map_err(|e| e.to_string())
    }
    .await;
    let server_result = tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("server finished")
        .expect("server task");
    client_result?;
    server_result
}

fn client_builder(
    ca_pem: &str,
) -> rustls::ConfigBuilder<rustls::ClientConfig, rustls::client::WantsClientCert> {
    rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots(ca_pem))
}

#[tokio::test]
async fn tls_handshake_with_only_the_ca_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::load_or_create(dir.path(), &["finale.internal".to_string()]).unwrap();

    for name in ["localhost", "127.0.0.1", "::1", "finale.internal"] {
        let mut client = client_builder(pki.ca_pem()).with_no_client_auth();
        client.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let accepted = handshake(&pki, client, name)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(accepted.alpn.as_deref(), Some(&b"h2"[..]));
        assert_eq!(
            accepted.certificate,
            ClientCertificate::Absent,
            "no client certificate was sent"
        );
        assert_eq!(accepted.received, b"ping");
    }

    // kube-rs offers only http/1.1.
    let mut client = client_builder(pki.ca_pem()).with_no_client_auth();
    client.alpn_protocols = vec![b"http/1.1".to_vec()];
    let accepted = handshake(&pki, client, "localhost").await.unwrap();
    assert_eq!(accepted.alpn.as_deref(), Some(&b"http/1.1"[..]));

    // A name outside the SANs fails, as it must.
    let client = client_builder(pki.ca_pem()).with_no_client_auth();
    assert!(handshake(&pki, client, "example.com").await.is_err());

    // A client trusting some other CA fails.
    let other = tempfile::tempdir().unwrap();
    let other_pki = Pki::load_or_create(other.path(), &[]).unwrap();
    let client = client_builder(other_pki.ca_pem()).with_no_client_auth();
    assert!(handshake(&pki, client, "localhost").await.is_err());
}

#[tokio::test]
async fn tls_client_certificate_maps_to_admin() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::load_or_create(dir.path(), &[]).unwrap();

    let client = client_builder(pki.ca_pem())
        .with_client_auth_cert(
            vec![cert_der(pki.admin_client_cert_pem())],
            key_der(pki.admin_client_key_pem()),
        )
        .unwrap();
    let accepted = handshake(&pki, client, "localhost").await.unwrap();
    assert_eq!(
        accepted.certificate,
        ClientCertificate::Verified(Identity::admin())
    );

    // A certificate for another identity from the same CA names that identity.
    let (cert, key) = pki.issue_client_certificate("alice", &["team-a"]).unwrap();
    let client = client_builder(pki.ca_pem())
        .with_client_auth_cert(vec![cert_der(&cert)], key_der(&key))
        .unwrap();
    let accepted = handshake(&pki, client, "localhost").await.unwrap();
    assert_eq!(
        accepted.certificate,
        ClientCertificate::Verified(Identity {
            user: "alice".into(),
            uid: String::new(),
            groups: vec!["team-a".into(), "system:authenticated".into()],
            extra: Default::default(),
        })
    );

    // A client certificate from a foreign CA completes the handshake (as with upstream's
    // tls.RequestClientCert) but is rejected, so the request gets a 401.
    let other = tempfile::tempdir().unwrap();
    let other_pki = Pki::load_or_create(other.path(), &[]).unwrap();
    let client = client_builder(pki.ca_pem())
        .with_client_auth_cert(
            vec![cert_der(other_pki.admin_client_cert_pem())],
            key_der(other_pki.admin_client_key_pem()),
        )
        .unwrap();
    let accepted = handshake(&pki, client, "localhost").await.unwrap();
    assert!(
        // Both CAs are `CN=finale-ca`, so the chain is found and its signature fails.
        matches!(&accepted.certificate, ClientCertificate::Rejected(reason) if reason.contains("BadSignature")),
        "{:?}",
        accepted.certificate
    );

    // The server's own serving certificate is signed by the CA but is not for clients.
    let serving_key = std::fs::read_to_string(dir.path().join("pki/apiserver.key")).unwrap();
    let client = client_builder(pki.ca_pem())
        .with_client_auth_cert(
            vec![cert_der(pki.serving_cert_pem())],
            key_der(&serving_key),
        )
        .unwrap();
    let accepted = handshake(&pki, client, "localhost").await.unwrap();
    assert!(
        matches!(accepted.certificate, ClientCertificate::Rejected(_)),
        "{:?}",
        accepted.certificate
    );
}

#[test]
fn client_cert_identity_reads_cn_and_organizations() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::load_or_create(dir.path(), &[]).unwrap();
    assert_eq!(
        identity_from_client_cert(&cert_der(pki.admin_client_cert_pem())),
        Some(Identity::admin())
    );

    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "team-a");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "alice");
    let cert = params.self_signed(&key).unwrap();
    let identity = identity_from_client_cert(cert.der()).unwrap();
    assert_eq!(identity.user, "alice");
    assert_eq!(identity.groups, ["team-a", "system:authenticated"]);

    // No CN: no identity.
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "team-a");
    let cert = params.self_signed(&key).unwrap();
    assert_eq!(identity_from_client_cert(cert.der()), None);
}
