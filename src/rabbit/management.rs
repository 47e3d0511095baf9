//! The RabbitMQ management HTTP API: queue types, policies and bindings, which AMQP 0-9-1
//! cannot tell. Read-only: only GET requests.

use super::topology::{ApiBinding, ApiExchange, ApiPolicy, ApiQueue, Version};
use crate::redact;
use crate::tls;
use crate::tls::TlsFiles;
use serde::de::DeserializeOwned;
use std::time::Duration;

/// A slow API must not hold up an incident: `list` still has AMQP.
const TIMEOUT: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The columns `list` needs from `/api/queues`: less JSON with thousands of queues.
const QUEUE_COLUMNS: &str =
    "name,type,arguments,effective_policy_definition,messages,messages_unacknowledged,consumers";

#[derive(Debug, Clone)]
pub(crate) struct Management {
    client: reqwest::Client,
    /// Base URL without credentials, ending before `api/`.
    base: url::Url,
    user: String,
    password: String,
    /// For messages: the URL with the password masked.
    pub(crate) shown: String,
    /// For messages about certificates.
    tls_files: TlsFiles,
    /// The URL was derived (no `--management-url`) for an AMQP port that is not the default:
    /// the port, and the AMQP URL to name, checked against the API's listeners before the
    /// first request (`check_broker`).
    check_port: Option<(u16, String)>,
    checked: std::sync::Arc<tokio::sync::OnceCell<Result<(), ApiError>>>,
}

/// Why the API could not answer.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum ApiError {
    #[error("management API at {url} is not reachable: {reason}")]
    Unreachable { url: String, reason: String },
    #[error(
        "management API at {url} refused user {user:?} (HTTP {status}): wrong password, or the user lacks the monitoring/management tag"
    )]
    Refused {
        url: String,
        user: String,
        status: u16,
    },
    #[error("management API at {url}: {path} not found (HTTP 404)")]
    NotFound { url: String, path: String },
    #[error("management API at {url} answered HTTP {status} for {path}")]
    Status {
        url: String,
        path: String,
        status: u16,
    },
    #[error("management API at {url} sent an unexpected answer for {path}: {reason}")]
    Invalid {
        url: String,
        path: String,
        reason: String,
    },
    #[error(
        "the management API at {url} reports AMQP listeners on {said}, not on the port where dlq reached RabbitMQ ({amqp}): it may belong to another broker, whose queues it would describe. Without --management-url dlq uses the AMQP host on port 15672 (15671 for amqps) whatever the AMQP port; pass --management-url (the same URL confirms it, e.g. behind a port forward)"
    )]
    OtherBroker {
        url: String,
        amqp: String,
        said: String,
    },
}

/// The HTTP client: timeouts, and the TLS files' CA and client certificate on top of the
/// system's roots.
fn http_client(tls_files: &TlsFiles) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder()
        .timeout(TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .user_agent(concat!("dlq/", env!("CARGO_PKG_VERSION")));
    // The broker's API sits behind the same CA as its AMQP port: trust the CA file here
    // too, on top of the system's roots (the same platform verifier as lapin's).
    if let Some(ca) = &tls_files.ca {
        let certs = ca
            .certs
            .iter()
            .map(|c| reqwest::Certificate::from_der(c))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("CA file {}: {e}", ca.path.display()))?;
        builder = builder.tls_certs_merge(certs);
    }
    if let Some(id) = &tls_files.client {
        let mut pem = id.cert_pem.clone();
        pem.push(b'\n');
        pem.extend_from_slice(&id.key_pem);
        let identity = reqwest::Identity::from_pem(&pem).map_err(|_| {
            format!(
                "client certificate {} cannot be used for the management API",
                id.cert_path.display()
            )
        })?;
        builder = builder.identity(identity);
    }
    builder
        .build()
        .map_err(|e| format!("cannot set up an HTTP client: {e}"))
}

#[derive(Debug, serde::Deserialize)]
struct Overview {
    rabbitmq_version: Option<String>,
}

/// `/api/overview`'s listeners: which ports the broker behind the API listens on.
#[derive(Debug, serde::Deserialize)]
struct Listeners {
    #[serde(default)]
    listeners: Vec<Listener>,
}

#[derive(Debug, serde::Deserialize)]
struct Listener {
    protocol: String,
    port: serde_json::Value,
    #[serde(default)]
    node: Option<String>,
}

impl Listeners {
    /// `None` when the broker listens for AMQP on `port` (or says nothing about it); else
    /// what it listens on, for the refusal.
    fn mismatch(&self, port: u16) -> Option<String> {
        let amqp: Vec<&Listener> = self
            .listeners
            .iter()
            .filter(|l| l.protocol.starts_with("amqp"))
            .collect();
        let port_of = |l: &Listener| match &l.port {
            serde_json::Value::Number(n) => n.as_u64(),
            serde_json::Value::String(s) => s.parse().ok(),
            _ => None,
        };
        if amqp.is_empty() || amqp.iter().any(|l| port_of(l) == Some(u64::from(port))) {
            return None;
        }
        let said: Vec<String> = amqp
            .iter()
            .map(|l| {
                let node = l
                    .node
                    .as_deref()
                    .map(|n| format!(" on {n}"))
                    .unwrap_or_default();
                format!("port {}{node}", l.port)
            })
            .collect();
        Some(said.join(", "))
    }
}

/// What the API shows of a queue's consumers' timeouts (`Management::consumer_timeouts`).
#[derive(Debug, Default)]
pub(crate) struct ConsumerTimeouts {
    pub(crate) consumers: usize,
    /// The timeouts shown for them (RabbitMQ 4.0 and later; 3.10 shows none).
    pub(crate) timeouts: Vec<u64>,
    /// A policy gives the queue a consumer timeout of its own.
    pub(crate) policy_sets_one: bool,
}

impl Management {
    /// `explicit` is `--management-url`; without it, the AMQP host on port 15672 (15671 and
    /// https for amqps://) with the AMQP credentials.
    pub(crate) fn new(
        explicit: Option<&str>,
        (amqp_host, amqp_port, amqp_shown): (&str, u16, &str),
        tls: bool,
        amqp_user: &str,
        amqp_password: &str,
        tls_files: &TlsFiles,
    ) -> Result<Management, String> {
        let mut base = match explicit {
            Some(u) => url::Url::parse(u)
                .map_err(|e| format!("invalid management URL {}: {e}", redact::url(u)))?,
            None => {
                let (scheme, port) = if tls {
                    ("https", 15671)
                } else {
                    ("http", 15672)
                };
                let host = if amqp_host.contains(':') && !amqp_host.starts_with('[') {
                    format!("[{amqp_host}]")
                } else {
                    amqp_host.to_owned()
                };
                url::Url::parse(&format!("{scheme}://{host}:{port}/"))
                    .map_err(|e| format!("cannot build a management URL for host {host}: {e}"))?
            }
        };
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        };
        let (user, password) = if base.username().is_empty() {
            (amqp_user.to_owned(), amqp_password.to_owned())
        } else {
            (
                decode(base.username()),
                base.password().map(decode).unwrap_or_default(),
            )
        };
        let _ = base.set_username("");
        let _ = base.set_password(None);
        if !base.path().ends_with('/') {
            let p = format!("{}/", base.path());
            base.set_path(&p);
        }
        let client = http_client(tls_files)?;
        let shown = base.to_string();
        let default_port = if tls { 5671 } else { 5672 };
        let check_port = (explicit.is_none() && amqp_port != default_port)
            .then(|| (amqp_port, amqp_shown.to_owned()));
        Ok(Management {
            client,
            base,
            user,
            password,
            shown,
            tls_files: tls_files.clone(),
            check_port,
            checked: Default::default(),
        })
    }

    /// A derived URL for a non-default AMQP port may reach another broker on the same host
    /// (its own AMQP on 5672): its answers would describe other queues. Checked once.
    async fn check_broker(&self) -> Result<(), ApiError> {
        let Some((port, amqp)) = &self.check_port else {
            return Ok(());
        };
        let check = || async {
            let l: Listeners = self.get_unchecked(&["overview"], &[]).await?;
            match l.mismatch(*port) {
                None => Ok(()),
                Some(said) => Err(ApiError::OtherBroker {
                    url: self.shown.clone(),
                    amqp: amqp.clone(),
                    said,
                }),
            }
        };
        self.checked.get_or_init(check).await.clone()
    }

    async fn get<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        query: &[(&str, &str)],
    ) -> Result<T, ApiError> {
        self.check_broker().await?;
        self.get_unchecked(segments, query).await
    }

    async fn get_unchecked<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        query: &[(&str, &str)],
    ) -> Result<T, ApiError> {
        let mut url = self.base.clone();
        {
            let mut s = url.path_segments_mut().expect("http URLs have paths");
            s.pop_if_empty();
            s.push("api");
            for seg in segments {
                // `push` percent-encodes, so the default vhost "/" becomes %2F.
                s.push(seg);
            }
        }
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        let path = format!("/api/{}", segments.join("/"));
        let shown = self.shown.clone();
        let resp = self
            .client
            .get(url)
            .basic_auth(&self.user, Some(&self.password))
            .send()
            .await
            .map_err(|e| ApiError::Unreachable {
                url: shown.clone(),
                reason: redact::scrub(&match tls::find_rustls_error(&e).map(tls::classify) {
                    Some(p) if !matches!(p, tls::Problem::Other(_)) => {
                        super::explain_tls(&p, &self.tls_files, "management https://")
                    }
                    _ => error_chain(&e),
                }),
            })?;
        let status = resp.status().as_u16();
        match status {
            200..=299 => {}
            401 | 403 => {
                return Err(ApiError::Refused {
                    url: shown,
                    user: self.user.clone(),
                    status,
                });
            }
            404 => return Err(ApiError::NotFound { url: shown, path }),
            _ => {
                return Err(ApiError::Status {
                    url: shown,
                    path,
                    status,
                });
            }
        }
        resp.json::<T>().await.map_err(|e| ApiError::Invalid {
            url: shown,
            path,
            reason: redact::scrub(&error_chain(&e)),
        })
    }

    /// The broker version (`/api/overview`). `DLQ_TEST_BROKER_VERSION` stands in for it:
    /// the tests run a 4.3 broker's path (give back with a nack) on 4.0, the newest here.
    pub(crate) async fn version(&self) -> Result<Option<Version>, ApiError> {
        if let Ok(v) = std::env::var("DLQ_TEST_BROKER_VERSION") {
            return Ok(Version::parse(&v));
        }
        // Asked once per broker and process: a paced replay's queue check and its
        // consumer-timeout probe both need it.
        static SEEN: std::sync::Mutex<Vec<(url::Url, Version)>> = std::sync::Mutex::new(Vec::new());
        let seen = |m: &Management| {
            let seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
            seen.iter().find(|(b, _)| *b == m.base).map(|(_, v)| *v)
        };
        if let Some(v) = seen(self) {
            return Ok(Some(v));
        }
        let o: Overview = self.get(&["overview"], &[]).await?;
        let v = o.rabbitmq_version.as_deref().and_then(Version::parse);
        if let Some(v) = v {
            SEEN.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((self.base.clone(), v));
        }
        Ok(v)
    }

    /// Every queue of the vhost. Without per-queue statistics (`disable_stats`), which cost
    /// the broker most of the time of this call (100 ms instead of 17 ms for 400 queues);
    /// `enable_queue_totals` keeps the message counts. The effective policy then comes from
    /// the policy lists (`topology::effective_policy`).
    pub(crate) async fn queues(&self, vhost: &str) -> Result<Vec<ApiQueue>, ApiError> {
        self.get(
            &["queues", vhost],
            &[
                ("disable_stats", "true"),
                ("enable_queue_totals", "true"),
                ("columns", QUEUE_COLUMNS),
            ],
        )
        .await
    }

    /// One queue; `None` when it does not exist.
    pub(crate) async fn queue(
        &self,
        vhost: &str,
        name: &str,
    ) -> Result<Option<ApiQueue>, ApiError> {
        match self.get(&["queues", vhost, name], &[]).await {
            Ok(q) => Ok(Some(q)),
            Err(ApiError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// How many consumers the queue has that the API shows, the consumer timeouts it
    /// shows for them, and whether a policy sets one. A queue that is gone has none.
    pub(crate) async fn consumer_timeouts(
        &self,
        vhost: &str,
        name: &str,
    ) -> Result<ConsumerTimeouts, ApiError> {
        let columns = [(
            "columns",
            "consumer_details.consumer_timeout,effective_policy_definition",
        )];
        let q: serde_json::Value = match self.get(&["queues", vhost, name], &columns).await {
            Ok(q) => q,
            Err(ApiError::NotFound { .. }) => return Ok(ConsumerTimeouts::default()),
            Err(e) => return Err(e),
        };
        let consumers = q["consumer_details"]
            .as_array()
            .map_or(&[][..], Vec::as_slice);
        let timeouts = consumers
            .iter()
            .filter_map(|c| c["consumer_timeout"].as_u64())
            .collect();
        Ok(ConsumerTimeouts {
            consumers: consumers.len(),
            timeouts,
            policy_sets_one: !q["effective_policy_definition"]["consumer-timeout"].is_null(),
        })
    }

    pub(crate) async fn bindings(&self, vhost: &str) -> Result<Vec<ApiBinding>, ApiError> {
        self.get(&["bindings", vhost], &[]).await
    }

    pub(crate) async fn exchanges(&self, vhost: &str) -> Result<Vec<ApiExchange>, ApiError> {
        self.get(&["exchanges", vhost], &[("columns", "name,type")])
            .await
    }

    pub(crate) async fn policies(&self, vhost: &str) -> Result<Vec<ApiPolicy>, ApiError> {
        self.get(&["policies", vhost], &[]).await
    }

    /// Operator policies; users without the policymaker/administrator tag get a 401 here,
    /// which only means there is nothing they may see.
    pub(crate) async fn operator_policies(&self, vhost: &str) -> Result<Vec<ApiPolicy>, ApiError> {
        match self.get(&["operator-policies", vhost], &[]).await {
            Err(ApiError::Refused { .. }) | Err(ApiError::NotFound { .. }) => Ok(Vec::new()),
            other => other,
        }
    }
}

/// reqwest's Display hides the cause ("error sending request"); the chain says why.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_url_and_credentials() {
        let m = Management::new(
            None,
            ("mq.internal", 5672, "amqp://mq.internal"),
            false,
            "app",
            "s3cret",
            &TlsFiles::default(),
        )
        .unwrap();
        assert_eq!(m.shown, "http://mq.internal:15672/");
        assert_eq!(m.user, "app");
        assert_eq!(m.password, "s3cret");
        let m = Management::new(
            None,
            ("mq.internal", 5671, "amqps://mq.internal"),
            true,
            "app",
            "pw",
            &TlsFiles::default(),
        )
        .unwrap();
        assert_eq!(m.shown, "https://mq.internal:15671/");
        let m = Management::new(
            None,
            ("::1", 5672, "amqp://[::1]"),
            false,
            "a",
            "b",
            &TlsFiles::default(),
        )
        .unwrap();
        assert_eq!(m.shown, "http://[::1]:15672/");
    }

    #[test]
    fn explicit_url_credentials_win_and_are_not_shown() {
        let m = Management::new(
            Some("https://ops:p%40ss@mgmt.example/rabbit"),
            ("mq", 5673, "amqp://mq:5673"),
            false,
            "app",
            "s3cret",
            &TlsFiles::default(),
        )
        .unwrap();
        assert_eq!(m.user, "ops");
        assert_eq!(m.password, "p@ss");
        assert_eq!(m.shown, "https://mgmt.example/rabbit/");
        let m = Management::new(
            Some("http://mgmt:15672"),
            ("mq", 5673, "amqp://mq:5673"),
            false,
            "app",
            "pw",
            &TlsFiles::default(),
        )
        .unwrap();
        assert_eq!(m.user, "app");
        assert_eq!(m.shown, "http://mgmt:15672/");
    }

    #[test]
    fn a_derived_url_for_another_amqp_port_is_checked_against_the_listeners() {
        let derived = |port| {
            Management::new(
                None,
                ("h", port, "amqp://h"),
                false,
                "a",
                "b",
                &TlsFiles::default(),
            )
            .unwrap()
        };
        assert!(derived(5672).check_port.is_none());
        assert_eq!(derived(5700).check_port.map(|c| c.0), Some(5700));
        let explicit = Management::new(
            Some("http://h:15700"),
            ("h", 5700, "amqp://h:5700"),
            false,
            "a",
            "b",
            &TlsFiles::default(),
        )
        .unwrap();
        assert!(explicit.check_port.is_none(), "an explicit URL is trusted");
        let l: Listeners = serde_json::from_str(
            r#"{"listeners": [{"protocol": "amqp", "port": 5672, "node": "rabbit@a"},
                {"protocol": "http", "port": 15672, "node": "rabbit@a"}]}"#,
        )
        .unwrap();
        assert_eq!(l.mismatch(5672), None);
        assert_eq!(l.mismatch(5700).as_deref(), Some("port 5672 on rabbit@a"));
        let none: Listeners = serde_json::from_str("{}").unwrap();
        assert_eq!(none.mismatch(5700), None, "nothing said: nothing refused");
    }
}
