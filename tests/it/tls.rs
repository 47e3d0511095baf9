//! TLS for real, without reconfiguring any shared server: a throwaway CA signs certificates
//! for "localhost", and TLS-terminating proxies in this process forward to the broker's AMQP
//! port, its management API and PostgreSQL. amqps://, an https management API and
//! sslmode=verify-full then run real handshakes against certificates the test controls.

use crate::broker::Broker;
use crate::common::*;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

const MQ_SECRET: &str = "Tls-Mq-S3cret-3f9d";
const DB_SECRET: &str = "Tls-Db-S3cret-81c4";

/// A CA and the files a test hands to dlq, in a temp dir of its own.
struct Pki {
    dir: tempfile::TempDir,
    ca: Issuer<'static, KeyPair>,
    ca_der: CertificateDer<'static>,
}

/// A certificate the CA signed, with its key.
struct Leaf {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    cert_pem: String,
    key_pem: String,
}

impl Pki {
    fn new() -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // A name of its own: a certificate of another test CA must be unknown, not badly signed.
        params
            .distinguished_name
            .push(DnType::CommonName, unique("dlq test CA"));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), cert.pem()).unwrap();
        Pki {
            dir,
            ca_der: cert.der().clone(),
            ca: Issuer::new(params, key),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn ca_file(&self) -> String {
        self.path("ca.pem").display().to_string()
    }

    /// A server certificate for `names` (or a client certificate), signed by this CA.
    fn leaf(&self, names: &[&str], client: bool) -> Leaf {
        let mut params =
            CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, names.first().copied().unwrap_or("leaf"));
        params.extended_key_usages = vec![if client {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        }];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        Leaf {
            chain: vec![cert.der().clone(), self.ca_der.clone()],
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// Writes a file in this PKI's directory and returns its path as text.
    fn write(&self, name: &str, content: &str) -> String {
        let p = self.path(name);
        std::fs::write(&p, content).unwrap();
        p.display().to_string()
    }
}

/// What the proxy expects before the TLS handshake.
#[derive(Clone, Copy)]
enum Front {
    /// TLS from the first byte (amqps, https).
    Tls,
    /// PostgreSQL's SSLRequest, answered with 'S', then TLS.
    Postgres,
}

/// A TLS-terminating TCP proxy on 127.0.0.1: handshakes with `leaf`, then forwards the
/// plaintext to `backend`. Stops when dropped.
struct Proxy {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    // Explicit: more than one rustls crypto provider is compiled into this tree.
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

async fn proxy(leaf: &Leaf, backend: String, front: Front, client_ca: Option<&Pki>) -> Proxy {
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        Some(pki) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(pki.ca_der.clone()).unwrap();
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider(),
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let config = builder
        .with_single_cert(leaf.chain.clone(), leaf.key.clone_key())
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        while let Ok((mut sock, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let backend = backend.clone();
            conns.spawn(async move {
                if let Front::Postgres = front {
                    // SSLRequest: length 8, code 80877103.
                    let mut req = [0u8; 8];
                    if sock.read_exact(&mut req).await.is_err()
                        || req != [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]
                        || sock.write_all(b"S").await.is_err()
                    {
                        return;
                    }
                }
                let Ok(mut tls) = acceptor.accept(sock).await else {
                    return;
                };
                let Ok(mut up) = TcpStream::connect(backend.as_str()).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
            });
        }
    });
    Proxy { port, task }
}

async fn management(method: reqwest::Method, path: &str, body: Option<serde_json::Value>) {
    let mut req = reqwest::Client::new()
        .request(method, format!("{}/{path}", crate::target::api()))
        .basic_auth("guest", Some("guest"));
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.expect("management API");
    assert!(resp.status().is_success(), "{path}: {}", resp.status());
}

/// A broker vhost with a queue of two messages, and a user of its own whose password the
/// test looks for in every output.
struct Fixture {
    broker: Broker,
    user: String,
    vhost_path: String,
    queue: String,
}

impl Fixture {
    async fn new() -> Fixture {
        let broker = Broker::new("tls").await;
        let vhost_path = broker.amqp_url().rsplit('/').next().unwrap().to_owned();
        let user = unique("dlq_tls_user");
        management(
            reqwest::Method::PUT,
            &format!("users/{user}"),
            Some(serde_json::json!({"password": MQ_SECRET, "tags": "monitoring"})),
        )
        .await;
        management(
            reqwest::Method::PUT,
            &format!("permissions/{vhost_path}/{user}"),
            Some(serde_json::json!({"configure": ".*", "write": ".*", "read": ".*"})),
        )
        .await;
        let queue = "tls.dlq".to_owned();
        broker.queue(&queue, Default::default()).await;
        for body in [br#"{"n": 1}"#, br#"{"n": 2}"#] {
            broker
                .publish(&queue, body, lapin::BasicProperties::default())
                .await;
        }
        Fixture {
            broker,
            user,
            vhost_path,
            queue,
        }
    }

    fn url(&self, scheme: &str, host: &str, port: u16) -> String {
        format!(
            "{scheme}://{}:{MQ_SECRET}@{host}:{port}/{}",
            self.user, self.vhost_path
        )
    }

    /// `dlq <global> inspect -Q <queue> -o json`, on a blocking thread so that the proxies
    /// in this runtime keep going; asserts that the password is never printed.
    async fn inspect(&self, global: &[String], env: &[(&str, String)]) -> Run {
        self.inspect_with(global, env, &[]).await
    }

    async fn inspect_with(&self, global: &[String], env: &[(&str, String)], tail: &[&str]) -> Run {
        let mut args: Vec<String> = global.to_vec();
        args.extend(["inspect", "-Q", &self.queue, "-o", "json"].map(String::from));
        args.extend(strings(tail));
        run_dlq(args, env).await
    }

    async fn delete(self) {
        management(
            reqwest::Method::DELETE,
            &format!("users/{}", self.user),
            None,
        )
        .await;
        self.broker.delete().await;
    }
}

async fn run_dlq(args: Vec<String>, env: &[(&str, String)]) -> Run {
    let mut d = Dlq::new();
    if args.iter().any(|a| a == "--config") {
        // The URLs come from the file alone, not from the target's defaults (crate::target).
        d = d
            .env_remove("DLQ_AMQP_URL")
            .env_remove("DLQ_MANAGEMENT_URL");
    }
    for (k, v) in env {
        d = d.env(k, v);
    }
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let d = d.args(&argv);
    let run = tokio::task::spawn_blocking(move || d.run()).await.unwrap();
    eprintln!(
        "TLSDEBUG {} => {}: {}",
        args.join(" "),
        run.code(),
        run.stderr()
    );
    let all = format!("{}{}", run.stdout(), run.stderr());
    for secret in [MQ_SECRET, DB_SECRET] {
        assert!(!all.contains(secret), "{args:?} printed a password:\n{all}");
    }
    run
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn amqps_with_a_ca_file_reads_a_queue_and_the_https_management_api() {
    let fx = Fixture::new().await;
    let pki = Pki::new();
    let leaf = pki.leaf(&["localhost"], false);
    let amqp = proxy(&leaf, crate::target::amqp_addr(), Front::Tls, None).await;
    let api = proxy(&leaf, crate::target::api_addr(), Front::Tls, None).await;
    let url = fx.url("amqps", "localhost", amqp.port);
    let mgmt = format!("https://localhost:{}/", api.port);

    // Both the AMQP connection and the management API (which tells the queue type; without
    // it inspect refuses) go through TLS and trust the CA file.
    let run = fx
        .inspect(
            &strings(&[
                "--amqp-url",
                &url,
                "--management-url",
                &mgmt,
                "--amqp-ca-file",
                &pki.ca_file(),
            ]),
            &[],
        )
        .await;
    let records = run.json();
    assert_eq!(records.as_array().unwrap().len(), 2, "{records}");
    assert_eq!(records[0]["payload"]["n"], 1);
    assert!(run.stderr().is_empty(), "{}", run.stderr());

    // The same from the environment, and from the config file.
    let run = fx
        .inspect(
            &[],
            &[
                ("DLQ_AMQP_URL", url.clone()),
                ("DLQ_MANAGEMENT_URL", mgmt.clone()),
                ("DLQ_AMQP_CA_FILE", pki.ca_file()),
            ],
        )
        .await;
    assert_eq!(run.json().as_array().unwrap().len(), 2);
    let config = pki.write(
        "config.toml",
        &format!(
            "amqp_url = \"{url}\"\nmanagement_url = \"{mgmt}\"\namqp_ca_file = \"{}\"\n",
            pki.ca_file()
        ),
    );
    std::fs::set_permissions(&config, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let run = fx.inspect(&strings(&["--config", &config]), &[]).await;
    assert_eq!(run.json().as_array().unwrap().len(), 2);

    // Without the CA file: the certificate is not trusted, and dlq says how to fix it.
    let run = fx
        .inspect(
            &strings(&["--amqp-url", &url, "--management-url", &mgmt]),
            &[],
        )
        .await;
    let err = run.fails(1, "TLS certificate is not trusted");
    assert!(err.contains("--amqp-ca-file"), "{err}");
    assert!(run.stdout().is_empty());

    // A host the certificate does not name.
    let run = fx
        .inspect(
            &strings(&[
                "--amqp-url",
                &fx.url("amqps", "127.0.0.1", amqp.port),
                "--amqp-ca-file",
                &pki.ca_file(),
            ]),
            &[],
        )
        .await;
    let err = run.fails(1, "not valid for host \"127.0.0.1\"");
    assert!(err.contains("localhost"), "{err}");

    // amqps:// to the plain AMQP port: the existing hint.
    let run = fx
        .inspect(
            &strings(&[
                "--amqp-url",
                &fx.url("amqps", "localhost", crate::target::amqp_port()),
                "--amqp-ca-file",
                &pki.ca_file(),
            ]),
            &[],
        )
        .await;
    run.fails(
        1,
        &format!("does port {} speak TLS?", crate::target::amqp_port()),
    );

    // The management API's certificate is checked as well: a wrong name is reported (the
    // AMQP side works), and inspect, unable to tell the queue type, refuses.
    let run = fx
        .inspect(
            &strings(&[
                "--amqp-url",
                &url,
                "--management-url",
                &format!("https://127.0.0.1:{}/", api.port),
                "--amqp-ca-file",
                &pki.ca_file(),
            ]),
            &[],
        )
        .await;
    let err = run.fails(2, "not valid for host \"127.0.0.1\"");
    assert!(err.contains("management https:// URL"), "{err}");

    // A self-signed server certificate is its own CA file. (The management proxy's
    // certificate is not signed by it, so the queue type is unknown: --force.)
    let own = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let own_leaf = Leaf {
        chain: vec![own.cert.der().clone()],
        key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(own.signing_key.serialize_der())),
        cert_pem: own.cert.pem(),
        key_pem: String::new(),
    };
    let own_proxy = proxy(&own_leaf, crate::target::amqp_addr(), Front::Tls, None).await;
    let own_ca = pki.write("self-signed.pem", &own_leaf.cert_pem);
    let run = fx
        .inspect_with(
            &strings(&[
                "--amqp-url",
                &fx.url("amqps", "localhost", own_proxy.port),
                "--management-url",
                &mgmt,
                "--amqp-ca-file",
                &own_ca,
            ]),
            &[],
            &["--force"],
        )
        .await;
    assert_eq!(run.json().as_array().unwrap().len(), 2);

    // Nothing was consumed by any of this.
    assert_eq!(fx.broker.depth(&fx.queue).await, 2);
    fx.delete().await;
}

#[tokio::test]
async fn amqps_client_certificate() {
    let fx = Fixture::new().await;
    let pki = Pki::new();
    let leaf = pki.leaf(&["localhost"], false);
    let amqp = proxy(&leaf, crate::target::amqp_addr(), Front::Tls, Some(&pki)).await;
    let client = pki.leaf(&["dlq-client"], true);
    let cert = pki.write("client.pem", &client.cert_pem);
    let key = pki.write("client.key", &client.key_pem);
    let url = fx.url("amqps", "localhost", amqp.port);
    // No management API here: --force reads the classic queue without knowing its type.
    let base = strings(&[
        "--amqp-url",
        &url,
        "--management-url",
        "http://127.0.0.1:1/",
        "--amqp-ca-file",
        &pki.ca_file(),
    ]);
    let with = |extra: &[&str]| {
        let mut v = base.clone();
        v.extend(strings(extra));
        v
    };

    let run = fx
        .inspect_with(
            &with(&["--amqp-client-cert", &cert, "--amqp-client-key", &key]),
            &[],
            &["--force"],
        )
        .await;
    assert_eq!(run.json().as_array().unwrap().len(), 2);

    let run = fx
        .inspect_with(
            &with(&[]),
            &[
                ("DLQ_AMQP_CLIENT_CERT", cert.clone()),
                ("DLQ_AMQP_CLIENT_KEY", key.clone()),
            ],
            &["--force"],
        )
        .await;
    assert_eq!(run.json().as_array().unwrap().len(), 2);

    let run = fx.inspect_with(&with(&[]), &[], &["--force"]).await;
    let err = run.fails(1, "requires a client certificate");
    assert!(err.contains("--amqp-client-cert"), "{err}");

    // A certificate from another CA is refused by the server.
    let other = Pki::new().leaf(&["dlq-client"], true);
    let ocert = pki.write("other.pem", &other.cert_pem);
    let okey = pki.write("other.key", &other.key_pem);
    let run = fx
        .inspect_with(
            &with(&["--amqp-client-cert", &ocert, "--amqp-client-key", &okey]),
            &[],
            &["--force"],
        )
        .await;
    run.fails(1, "refused the client certificate");
    fx.delete().await;
}

#[tokio::test]
async fn bad_tls_files_are_usage_errors() {
    let pki = Pki::new();
    let client = pki.leaf(&["dlq-client"], true);
    let other = pki.leaf(&["dlq-other"], true);
    let cert = pki.write("client.pem", &client.cert_pem);
    let other_key = pki.write("other.key", &other.key_pem);
    let key = pki.write("client.key", &client.key_pem);
    let text = pki.write("notes.txt", "not a certificate\n");
    let missing = pki.path("missing.pem").display().to_string();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            strings(&["--amqp-ca-file", &missing]),
            "cannot read CA file",
        ),
        (
            strings(&["--amqp-ca-file", &text]),
            "holds no PEM certificate",
        ),
        // A private key is no CA.
        (
            strings(&["--amqp-ca-file", &key]),
            "holds no PEM certificate",
        ),
        (
            strings(&["--amqp-client-cert", &cert]),
            "--amqp-client-cert needs --amqp-client-key",
        ),
        (
            strings(&["--amqp-client-cert", &cert, "--amqp-client-key", &other_key]),
            "does not belong to the certificate",
        ),
        (
            strings(&["--amqp-client-cert", &cert, "--amqp-client-key", &text]),
            "holds no PEM private key",
        ),
        (
            strings(&[
                "--database-url",
                &format!(
                    "postgres://u:{DB_SECRET}@localhost/db?sslmode=verify-full&sslrootcert={missing}"
                ),
            ]),
            "sslrootcert in the database URL",
        ),
    ];
    for (mut args, needle) in cases {
        args.extend(strings(&["inspect", "-Q", "q"]));
        let run = run_dlq(args.clone(), &[]).await;
        let err = run.fails(2, needle);
        assert!(
            !err.contains("PRIVATE KEY"),
            "{args:?} printed a key:\n{err}"
        );
    }
}

/// PostgreSQL behind a TLS proxy that speaks the SSLRequest preamble: verify-full with a CA
/// file, for real.
#[tokio::test]
async fn postgres_verify_full_with_a_ca_file() {
    let db = TestDb::with_rows(Dialect::Postgres, "tls", &scenario2()[..12]).await;
    let pki = Pki::new();
    let leaf = pki.leaf(&["localhost"], false);
    let pg = proxy(&leaf, "127.0.0.1:5432".into(), Front::Postgres, None).await;
    let url = |host: &str, query: &str| {
        format!(
            "postgres://postgres:{DB_SECRET}@{host}:{}/test?{query}",
            pg.port
        )
    };
    let count = |url: String| {
        let table = db.table.clone();
        run_dlq(
            strings(&[
                "--database-url",
                &url,
                "--table",
                &table,
                "filter",
                "--count",
            ]),
            &[],
        )
    };
    let ca = pki.ca_file();
    let run = count(url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    ))
    .await;
    assert_eq!(run.ok().trim(), "12");
    // verify-ca checks the CA only, not the name.
    let run = count(url(
        "127.0.0.1",
        &format!("sslmode=verify-ca&sslrootcert={ca}"),
    ))
    .await;
    assert_eq!(run.ok().trim(), "12");
    let run = count(url("localhost", "sslmode=verify-full")).await;
    let err = run.fails(1, "TLS certificate is not trusted");
    assert!(err.contains("sslrootcert=/path/to/ca.pem"), "{err}");
    let run = count(url(
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    ))
    .await;
    let err = run.fails(1, "not valid for host \"127.0.0.1\"");
    assert!(err.contains("sslmode=verify-ca"), "{err}");
    db.drop().await;
}

/// The local servers as they are: what sslmode does against PostgreSQL (TLS on or off) and
/// MariaDB (TLS on or off). Each branch asserts what that server must do.
#[tokio::test]
async fn sslmode_against_the_local_servers() {
    let pg = TestDb::new(Dialect::Postgres, "tls_local").await;
    pg.init();
    pg.insert(&scenario2()[..3]).await;
    let pg_tls = pg.db.row_text("SHOW ssl").await.unwrap() == ["on"];
    let count = |url: String, table: String| {
        run_dlq(
            strings(&[
                "--database-url",
                &url,
                "--table",
                &table,
                "filter",
                "--count",
            ]),
            &[],
        )
    };
    let pg_url = |mode: &str| {
        let base = pg_url().replacen(
            "postgres://postgres@",
            &format!("postgres://postgres:{DB_SECRET}@"),
            1,
        );
        let sep = if base.contains('?') { '&' } else { '?' };
        format!("{base}{sep}sslmode={mode}")
    };
    for mode in ["disable", "prefer"] {
        let run = count(pg_url(mode), pg.table.clone()).await;
        assert_eq!(run.ok().trim(), "3", "sslmode={mode}");
    }
    let run = count(pg_url("require"), pg.table.clone()).await;
    if pg_tls {
        assert_eq!(run.ok().trim(), "3");
        // Debian's self-signed snakeoil certificate names the machine, not 127.0.0.1 (and is
        // trusted only where /etc/ssl/certs holds it): verify-full fails either way.
        let run = count(pg_url("verify-full"), pg.table.clone()).await;
        run.fails(1, "TLS certificate is not");
    } else {
        let err = run.fails(1, "does not support TLS");
        assert!(err.contains("the URL requires TLS"), "{err}");
    }
    pg.drop().await;

    let my = TestDb::new(Dialect::MySql, "tls_local").await;
    my.init();
    my.insert(&scenario2()[..3]).await;
    let my_tls = {
        let row = my
            .db
            .row_text("SHOW VARIABLES LIKE 'have_ssl'")
            .await
            .unwrap();
        row[1] == "YES"
    };
    let my_url = |mode: &str| {
        let base = mysql_url();
        let sep = if base.contains('?') { '&' } else { '?' };
        format!("{base}{sep}ssl-mode={mode}")
    };
    for mode in ["DISABLED", "PREFERRED"] {
        let run = count(my_url(mode), my.table.clone()).await;
        assert_eq!(run.ok().trim(), "3", "ssl-mode={mode}");
    }
    let run = count(my_url("REQUIRED"), my.table.clone()).await;
    if my_tls {
        assert_eq!(run.ok().trim(), "3");
    } else {
        let err = run.fails(1, "does not support TLS");
        assert!(err.contains("ssl-mode REQUIRED"), "{err}");
    }
    my.drop().await;
}
