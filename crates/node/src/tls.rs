//! TLS of the log endpoint: a self-signed serving certificate made at start (as a kubelet
//! without `--tls-cert-file` makes one), and client certificates checked against the cluster
//! CA.
//!
//! The handshake asks for a client certificate and checks that the client holds its key, but
//! accepts any certificate; whether it chains to the cluster CA is decided afterwards
//! ([`ClientAuth::judge`]), so an unknown certificate gets an HTTP 401 with a message instead of
//! a failed handshake (Go's `tls.RequestClientCert`, as the kubelet and kube-apiserver do).

use std::net::IpAddr;
use std::sync::Arc;

use anyhow::Context;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};

/// The group a client certificate's subject must name (`O=`) to read logs: the API server's
/// kubelet client certificate (`CN=kube-apiserver-kubelet-client, O=system:masters`).
pub const AUTHORIZED_GROUP: &str = "system:masters";

/// Who is calling, decided once per connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Caller {
    /// No cluster CA was configured: nobody can be authenticated.
    NoClusterCa,
    /// No client certificate.
    Anonymous,
    /// A certificate that does not chain to the cluster CA (or is expired, or not for client
    /// authentication).
    Rejected(String),
    /// A valid certificate: its subject's CN and Os.
    Verified { user: String, groups: Vec<String> },
}

/// Checks client certificates against the cluster CA.
#[derive(Clone)]
pub(crate) struct ClientAuth {
    verifier: Option<Arc<dyn ClientCertVerifier>>,
}

impl ClientAuth {
    /// From the cluster CA bundle (PEM); `None` refuses everyone.
    pub(crate) fn new(cluster_ca_pem: Option<&str>) -> anyhow::Result<ClientAuth> {
        let Some(pem) = cluster_ca_pem else {
            return Ok(ClientAuth { verifier: None });
        };
        let mut roots = RootCertStore::empty();
        let mut reader = std::io::BufReader::new(pem.as_bytes());
        for certificate in rustls_pemfile::certs(&mut reader) {
            let certificate = certificate.context("parse the cluster CA (PEM)")?;
            roots
                .add(certificate)
                .context("add the cluster CA certificate")?;
        }
        if roots.is_empty() {
            anyhow::bail!("the cluster CA bundle holds no certificate");
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .context("build the client certificate verifier")?;
        Ok(ClientAuth {
            verifier: Some(verifier),
        })
    }

    /// Judges the chain a client presented (leaf first).
    pub(crate) fn judge(&self, chain: Option<&[CertificateDer<'_>]>) -> Caller {
        let Some(verifier) = &self.verifier else {
            return Caller::NoClusterCa;
        };
        let Some((leaf, intermediates)) = chain.and_then(<[_]>::split_first) else {
            return Caller::Anonymous;
        };
        if let Err(error) = verifier.verify_client_cert(leaf, intermediates, UnixTime::now()) {
            return Caller::Rejected(error.to_string());
        }
        match der::subject_cn_and_orgs(leaf.as_ref()) {
            Some((user, groups)) if !user.is_empty() => Caller::Verified { user, groups },
            _ => Caller::Rejected("its subject has no common name (CN)".to_string()),
        }
    }

    /// The rustls server configuration: the self-signed certificate for `ip` and `hostname`,
    /// HTTP/2 and HTTP/1.1, and a request for client certificates when a CA is configured.
    pub(crate) fn server_config(
        &self,
        ip: IpAddr,
        hostname: &str,
    ) -> anyhow::Result<Arc<rustls::ServerConfig>> {
        let (certificate, key) = self_signed(ip, hostname)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?;
        let mut config = match &self.verifier {
            Some(inner) => builder.with_client_cert_verifier(Arc::new(RequestClientCert {
                inner: Arc::clone(inner),
            })),
            None => builder.with_no_client_auth(),
        }
        .with_single_cert(vec![certificate], key)
        .context("the serving certificate")?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// A self-signed serving certificate naming `ip` and `hostname`.
fn self_signed(
    ip: IpAddr,
    hostname: &str,
) -> anyhow::Result<(CertificateDer<'static>, PrivateKeyDer<'static>)> {
    let mut names = vec![ip.to_string(), hostname.to_string()];
    if hostname != "localhost" {
        names.push("localhost".to_string());
    }
    let certified = rcgen::generate_simple_self_signed(names)
        .context("generate the self-signed serving certificate")?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        certified.signing_key.serialize_der(),
    ));
    Ok((certified.cert.der().clone(), key))
}

/// PEM of DER certificates (a kubeconfig's CA, as kube-rs hands it over) for [`crate::run`].
pub fn pem_from_der(certificates: &[Vec<u8>]) -> String {
    use base64::Engine;
    let mut pem = String::new();
    for der in certificates {
        let encoded = base64::engine::general_purpose::STANDARD.encode(der);
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in encoded.as_bytes().chunks(64) {
            pem.push_str(&String::from_utf8_lossy(line));
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    pem
}

/// Asks for a certificate and checks the handshake signature with it, but leaves trust to
/// [`ClientAuth::judge`].
#[derive(Debug)]
struct RequestClientCert {
    inner: Arc<dyn ClientCertVerifier>,
}

impl ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Just enough DER to read a certificate's subject (CN and O), without an x509 parser
/// dependency; the same reading as the API server's client-certificate authenticator.
mod der {
    const SEQUENCE: u8 = 0x30;
    const SET: u8 = 0x31;
    const OID: u8 = 0x06;
    const VERSION_TAG: u8 = 0xA0;
    const UTF8_STRING: u8 = 0x0C;
    const PRINTABLE_STRING: u8 = 0x13;
    const IA5_STRING: u8 = 0x16;
    /// 2.5.4.3 and 2.5.4.10.
    const OID_COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
    const OID_ORGANIZATION: &[u8] = &[0x55, 0x04, 0x0A];

    /// Splits one TLV off `input`: `(tag, content, rest)`.
    fn read_tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
        let (&tag, rest) = input.split_first()?;
        let (&first, rest) = rest.split_first()?;
        let (len, rest) = if first < 0x80 {
            (usize::from(first), rest)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 || rest.len() < n {
                return None;
            }
            let len = rest[..n]
                .iter()
                .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
            (len, &rest[n..])
        };
        if rest.len() < len {
            return None;
        }
        Some((tag, &rest[..len], &rest[len..]))
    }

    fn expect(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
        let (found, content, rest) = read_tlv(input)?;
        (found == tag).then_some((content, rest))
    }

    /// `(CN, [O…])` of the subject; with several CNs the last wins, as in Go's `pkix.Name`.
    pub(super) fn subject_cn_and_orgs(cert: &[u8]) -> Option<(String, Vec<String>)> {
        let (cert, _) = expect(cert, SEQUENCE)?;
        let (tbs, _) = expect(cert, SEQUENCE)?;
        let mut rest = tbs;
        if rest.first() == Some(&VERSION_TAG) {
            rest = read_tlv(rest)?.2;
        }
        let (_serial_tag, _serial, rest) = read_tlv(rest)?;
        let (_signature_alg, rest) = expect(rest, SEQUENCE)?;
        let (_issuer, rest) = expect(rest, SEQUENCE)?;
        let (_validity, rest) = expect(rest, SEQUENCE)?;
        let (mut subject, _) = expect(rest, SEQUENCE)?;
        let mut cn = None;
        let mut orgs = Vec::new();
        while !subject.is_empty() {
            let (mut rdn, next) = expect(subject, SET)?;
            subject = next;
            while !rdn.is_empty() {
                let (attribute, next) = expect(rdn, SEQUENCE)?;
                rdn = next;
                let (oid, value) = expect(attribute, OID)?;
                let (value_tag, value, _) = read_tlv(value)?;
                let text = match value_tag {
                    UTF8_STRING | PRINTABLE_STRING | IA5_STRING => {
                        std::str::from_utf8(value).ok()?.to_string()
                    }
                    _ => continue,
                };
                if oid == OID_COMMON_NAME {
                    cn = Some(text);
                } else if oid == OID_ORGANIZATION {
                    orgs.push(text);
                }
            }
        }
        Some((cn?, orgs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{
        BasicConstraints, CertificateParams, DistinguishedName as Dn, DnType,
        ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    };

    struct Ca {
        pem: String,
        params: CertificateParams,
        key: KeyPair,
    }

    fn ca(name: &str) -> Ca {
        let mut params = CertificateParams::default();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name = Dn::new();
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().expect("key");
        let cert = params.clone().self_signed(&key).expect("CA");
        Ca {
            pem: cert.pem(),
            params,
            key,
        }
    }

    fn client(ca: &Ca, cn: &str, orgs: &[&str]) -> CertificateDer<'static> {
        let mut params = CertificateParams::default();
        params.distinguished_name = Dn::new();
        params.distinguished_name.push(DnType::CommonName, cn);
        for org in orgs {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *org);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().expect("key");
        let issuer = Issuer::from_params(&ca.params, &ca.key);
        params.signed_by(&key, &issuer).expect("sign").der().clone()
    }

    #[test]
    fn client_certificates_are_judged_against_the_cluster_ca() {
        let cluster = ca("cluster-ca");
        let other = ca("other-ca");
        let auth = ClientAuth::new(Some(&cluster.pem)).expect("auth");
        let good = client(
            &cluster,
            "kube-apiserver-kubelet-client",
            &["system:masters"],
        );
        assert_eq!(
            auth.judge(Some(&[good])),
            Caller::Verified {
                user: "kube-apiserver-kubelet-client".into(),
                groups: vec!["system:masters".into()]
            }
        );
        let stranger = client(&other, "mallory", &["system:masters"]);
        assert!(matches!(auth.judge(Some(&[stranger])), Caller::Rejected(_)));
        assert_eq!(auth.judge(None), Caller::Anonymous);
        let nobody = ClientAuth::new(None).expect("no CA");
        assert_eq!(nobody.judge(None), Caller::NoClusterCa);
        assert!(ClientAuth::new(Some("not a certificate")).is_err());
    }

    #[test]
    fn the_serving_config_builds_and_pem_round_trips() {
        let cluster = ca("cluster-ca");
        let auth = ClientAuth::new(Some(&cluster.pem)).expect("auth");
        let config = auth
            .server_config("127.0.0.1".parse().expect("ip"), "host")
            .expect("config");
        assert_eq!(config.alpn_protocols.len(), 2);
        let der: Vec<Vec<u8>> = rustls_pemfile::certs(&mut cluster.pem.as_bytes())
            .map(|c| c.expect("cert").to_vec())
            .collect();
        let pem = pem_from_der(&der);
        assert!(ClientAuth::new(Some(&pem)).is_ok());
        let again: Vec<Vec<u8>> = rustls_pemfile::certs(&mut pem.as_bytes())
            .map(|c| c.expect("cert").to_vec())
            .collect();
        assert_eq!(again, der);
    }
}
