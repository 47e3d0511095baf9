//! TLS material named by path (a CA file, a client certificate and its key), read and checked
//! once at start-up so that a wrong file is a usage error naming it, never a handshake failure
//! later; and certificate errors found in an error chain, told in plain words.

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::error::Error as StdError;
use std::path::{Path, PathBuf};

/// CA certificates trusted on top of the system's roots.
#[derive(Debug, Clone)]
pub(crate) struct CaFile {
    pub(crate) path: PathBuf,
    /// The file's text: lapin takes the chain as PEM text.
    pub(crate) pem: String,
    pub(crate) certs: Vec<CertificateDer<'static>>,
}

/// A client certificate chain and its private key (PEM). The key is a secret: `Debug` shows
/// only the paths.
#[derive(Clone)]
pub(crate) struct ClientIdentity {
    pub(crate) cert_path: PathBuf,
    pub(crate) key_path: PathBuf,
    pub(crate) cert_pem: Vec<u8>,
    pub(crate) key_pem: Vec<u8>,
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("cert_path", &self.cert_path)
            .field("key_path", &self.key_path)
            .finish_non_exhaustive()
    }
}

/// Three TLS stacks share one rustls here (lapin, reqwest, sqlx), and rustls is built with
/// two crypto providers, so a library that asks for "the" process default (sqlx's verify-ca
/// verifier does) would panic. Choosing one at start-up settles it.
/// Extra CA and client certificate (RabbitMQ's AMQP and management API, and rediss://), read
/// and checked at start-up. Without a CA file, only the system's roots are trusted.
#[derive(Debug, Clone, Default)]
pub(crate) struct TlsFiles {
    pub(crate) ca: Option<CaFile>,
    pub(crate) client: Option<ClientIdentity>,
}

pub fn install_crypto_provider() {
    // An error only means one is installed already.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

/// Reads a CA file: PEM text holding at least one certificate usable as a trust anchor.
/// `option` names the setting in messages (`--amqp-ca-file`).
pub(crate) fn load_ca_file(path: &Path, option: &str) -> Result<CaFile, String> {
    let shown = path.display();
    let bytes =
        std::fs::read(path).map_err(|e| format!("cannot read CA file {shown} ({option}): {e}"))?;
    let certs = read_certs(&bytes).map_err(|e| format!("CA file {shown} ({option}): {e}"))?;
    // The platform verifier refuses the whole set when one root does not parse, at the first
    // connection: check each here, where the message can say which one.
    for (i, cert) in certs.iter().enumerate() {
        rustls::RootCertStore::empty()
            .add(cert.clone())
            .map_err(|e| {
                format!(
                    "CA file {shown} ({option}): certificate #{} cannot be used as a CA: {e}",
                    i + 1
                )
            })?;
    }
    let pem = String::from_utf8(bytes)
        .map_err(|_| format!("CA file {shown} ({option}): not a text (PEM) file"))?;
    Ok(CaFile {
        path: path.to_owned(),
        pem,
        certs,
    })
}

/// The certificates of a PEM file; an error when there is none.
fn read_certs(bytes: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("invalid PEM: {e}"))?;
    if certs.is_empty() {
        // A DER certificate starts with an ASN.1 SEQUENCE (0x30).
        let der_hint = if bytes.first() == Some(&0x30) {
            "; it looks like DER: convert it with `openssl x509 -inform der -in FILE -out FILE.pem`"
        } else {
            ""
        };
        return Err(format!(
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----){der_hint}"
        ));
    }
    Ok(certs)
}

/// Reads a client certificate (PEM chain, leaf first) and its unencrypted PEM private key, and
/// checks that they belong together. Messages name the files, never their content.
pub(crate) fn load_client_identity(cert: &Path, key: &Path) -> Result<ClientIdentity, String> {
    let cert_pem = std::fs::read(cert).map_err(|e| {
        format!(
            "cannot read client certificate {} (--amqp-client-cert): {e}",
            cert.display()
        )
    })?;
    let certs = read_certs(&cert_pem).map_err(|e| {
        format!(
            "client certificate {} (--amqp-client-cert): {e}",
            cert.display()
        )
    })?;
    let key_pem = std::fs::read(key).map_err(|e| {
        format!(
            "cannot read client key {} (--amqp-client-key): {e}",
            key.display()
        )
    })?;
    let shown = key.display();
    let der = match PrivateKeyDer::from_pem_slice(&key_pem) {
        Ok(k) => k,
        Err(pem::Error::NoItemsFound) if contains(&key_pem, b"ENCRYPTED PRIVATE KEY") => {
            return Err(format!(
                "client key {shown} (--amqp-client-key) is encrypted: dlq needs it unencrypted (`openssl pkey -in KEY -out KEY.pem`; keep it readable by you only)"
            ));
        }
        Err(pem::Error::NoItemsFound) => {
            return Err(format!(
                "client key {shown} (--amqp-client-key) holds no PEM private key (PKCS#8, RSA or EC)"
            ));
        }
        Err(e) => {
            return Err(format!(
                "client key {shown} (--amqp-client-key): invalid PEM: {e}"
            ));
        }
    };
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    match rustls::sign::CertifiedKey::from_der(certs, der, &provider) {
        Ok(_) => {}
        Err(rustls::Error::InconsistentKeys(_)) => {
            return Err(format!(
                "client key {shown} (--amqp-client-key) does not belong to the certificate {} (--amqp-client-cert)",
                cert.display()
            ));
        }
        Err(e) => {
            return Err(format!(
                "client key {shown} (--amqp-client-key) cannot be used: {e}"
            ));
        }
    }
    Ok(ClientIdentity {
        cert_path: cert.to_owned(),
        key_path: key.to_owned(),
        cert_pem,
        key_pem,
    })
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The rustls error somewhere in an error chain. `io::Error::source` skips the error it
/// wraps, and TLS libraries wrap rustls errors in io errors, so those are opened too.
pub(crate) fn find_rustls_error<'a>(e: &'a (dyn StdError + 'static)) -> Option<&'a rustls::Error> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(r) = err.downcast_ref::<rustls::Error>() {
            return Some(r);
        }
        if let Some(inner) = err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            && let Some(r) = find_rustls_error(inner)
        {
            return Some(r);
        }
        cur = err.source();
    }
    None
}

/// What went wrong in a TLS handshake, as far as the user can act on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Problem {
    /// No trusted CA signed the server's certificate: the fix is a CA file.
    Untrusted,
    /// A trusted certificate for other names: the fix is the host name in the URL.
    WrongName { expected: String, presented: String },
    /// Any other rejection of the server's certificate (expired, bad signature ...).
    Rejected(String),
    /// The server wants a client certificate, or refused the one it got.
    ClientCertificate(String),
    /// The server ended the handshake for another reason (TLS alert).
    Alert(String),
    /// Not about certificates (e.g. a peer that does not speak TLS).
    Other(String),
}

pub(crate) fn classify(e: &rustls::Error) -> Problem {
    use rustls::AlertDescription as A;
    use rustls::CertificateError as C;
    match e {
        rustls::Error::InvalidCertificate(C::UnknownIssuer) => Problem::Untrusted,
        rustls::Error::InvalidCertificate(C::NotValidForNameContext {
            expected,
            presented,
        }) => Problem::WrongName {
            expected: expected.to_str().into_owned(),
            presented: if presented.is_empty() {
                "no name".to_owned()
            } else {
                presented
                    .iter()
                    .map(|n| plain_name(n))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        },
        rustls::Error::InvalidCertificate(C::NotValidForName) => Problem::WrongName {
            expected: String::new(),
            presented: "other names".to_owned(),
        },
        rustls::Error::InvalidCertificate(c) => Problem::Rejected(c.to_string()),
        rustls::Error::AlertReceived(
            a @ (A::CertificateRequired
            | A::BadCertificate
            | A::UnknownCA
            | A::CertificateUnknown
            | A::UnsupportedCertificate
            | A::CertificateRevoked
            | A::CertificateExpired
            | A::AccessDenied),
        ) => Problem::ClientCertificate(format!("{a:?}")),
        rustls::Error::AlertReceived(a) => Problem::Alert(format!("{a:?}")),
        other => Problem::Other(other.to_string()),
    }
}

/// rustls shows presented names as `DnsName("x")` / `IpAddress(x)`: show `x`.
fn plain_name(n: &str) -> &str {
    n.strip_prefix("DnsName(\"")
        .and_then(|r| r.strip_suffix("\")"))
        .or_else(|| {
            n.strip_prefix("IpAddress(")
                .and_then(|r| r.strip_suffix(')'))
        })
        .unwrap_or(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, data: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, data).unwrap();
        p
    }

    #[test]
    fn ca_file_must_hold_a_usable_pem_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.pem");
        let e = load_ca_file(&missing, "--amqp-ca-file").unwrap_err();
        assert!(
            e.contains("cannot read CA file") && e.contains("nope.pem"),
            "{e}"
        );
        let empty = write(dir.path(), "empty.pem", b"just text\n");
        let e = load_ca_file(&empty, "--amqp-ca-file").unwrap_err();
        assert!(e.contains("no PEM certificate"), "{e}");
        let der = write(dir.path(), "ca.der", &[0x30, 0x82, 0x01, 0x00]);
        let e = load_ca_file(&der, "--amqp-ca-file").unwrap_err();
        assert!(e.contains("looks like DER"), "{e}");
        let garbage = write(
            dir.path(),
            "bad.pem",
            b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        );
        let e = load_ca_file(&garbage, "--amqp-ca-file").unwrap_err();
        assert!(e.contains("certificate #1 cannot be used as a CA"), "{e}");
    }

    #[test]
    fn certificate_errors_are_classified() {
        use rustls::CertificateError as C;
        assert_eq!(
            classify(&rustls::Error::InvalidCertificate(C::UnknownIssuer)),
            Problem::Untrusted
        );
        assert!(matches!(
            classify(&rustls::Error::InvalidCertificate(C::Expired)),
            Problem::Rejected(_)
        ));
        assert!(matches!(
            classify(&rustls::Error::AlertReceived(
                rustls::AlertDescription::CertificateRequired
            )),
            Problem::ClientCertificate(_)
        ));
        // Wrapped in io errors, as TLS streams report it.
        let io = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(C::UnknownIssuer),
        );
        assert_eq!(plain_name("DnsName(\"localhost\")"), "localhost");
        assert_eq!(plain_name("IpAddress(10.0.0.1)"), "10.0.0.1");
        let outer = std::io::Error::other(io);
        assert_eq!(
            find_rustls_error(&outer).map(classify),
            Some(Problem::Untrusted)
        );
    }
}
