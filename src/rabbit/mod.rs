//! RabbitMQ dead-letter queues: connecting, checking a queue before reading it, and
//! streaming its messages as records without changing the queue.
//!
//! Reading never changes a queue: messages are consumed with manual acknowledgement, held
//! unacknowledged, and given back with `basic.nack(multiple, requeue)` followed by closing
//! the channel, which puts them back in their original positions. Streams are read by
//! offset and never change. See `reader` for the details and docs/QUEUES.md for what a
//! reader can still observe (`redelivered`, quorum delivery counts).

mod budget;
pub(crate) mod codec;
mod connection;
mod consumer;
pub(crate) mod death;
pub(crate) mod management;
pub(crate) mod private;
pub(crate) mod publish;
pub(crate) mod reader;
mod renew;
pub(crate) mod reported;
mod settle;
pub(crate) mod take;
pub(crate) mod topology;

pub(crate) use budget::AckBudget;
pub(crate) use connection::{
    BLOCKED_STOP_GRACE, Connection, Liveness, blocked, blocked_stop_hint, broker_failure,
    led_by_loss, lost_connection_in, named_loss,
};
pub(crate) use settle::{AckMarks, ack, settle_grace_after};

use crate::error::usage;
use crate::model::TargetFacts;
use crate::output::Printer;
use crate::redact;
use crate::tls::TlsFiles;
use crate::tls::{self, Problem};
use anyhow::{Result, anyhow, bail};
use lapin::ConnectionProperties;
use lapin::protocol::{AMQPErrorKind, AMQPHardError, AMQPSoftError};
use lapin::tcp::{OwnedIdentity, OwnedTLSConfig};
use lapin::uri::{AMQPAuthority, AMQPQueryString, AMQPScheme, AMQPUri, AMQPUserInfo};
use management::{ApiError, Management};
use std::time::Duration;
use topology::{ApiQueue, QueueFacts, QueueKind, ReadVerdict, Version};

/// A dead broker address must fail fast, not hang a cron job.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Heartbeat asked for unless the URL says `?heartbeat=N`: a stalled network is noticed after
/// two missed beats (20 s), not the broker default's 120 s.
const DEFAULT_HEARTBEAT_SECS: u16 = 10;
/// Records in flight between the reader and the command: bounds memory.
pub(crate) const CHANNEL_DEPTH: usize = 256;

/// Where and as whom to connect, resolved once from the settings.
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) uri: AMQPUri,
    pub(crate) vhost: String,
    /// The AMQP URL with the password masked, for messages.
    pub(crate) shown: String,
    /// Extra CA and client certificate for amqps:// (and an https management API).
    pub(crate) tls_files: TlsFiles,
    /// `--management-url` (secret like the AMQP URL); `None`: derived from the AMQP URL.
    management_url: Option<String>,
}

/// Never the password: a debug print of the settings must not leak it either.
impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("url", &self.shown)
            .field("vhost", &self.vhost)
            .field(
                "management_url",
                &self.management_url.as_deref().map(redact::url),
            )
            .field("tls_files", &self.tls_files)
            .finish()
    }
}

impl Target {
    /// Builds the connection URI from a validated AMQP URL, with `vhost` instead of the URL's
    /// when given; `management_url` is `--management-url` (`None`: derived from this URL).
    ///
    /// The URI is assembled here rather than by `AMQPUri::from_str`, which takes the host
    /// from `Url::domain()` and so turns an IP address (`amqp://10.0.0.5`) into "localhost".
    pub(crate) fn from_url(
        raw: &str,
        vhost: Option<&str>,
        tls_files: &TlsFiles,
        management_url: Option<&str>,
    ) -> Result<Target> {
        let shown = redact::url(raw);
        let u =
            url::Url::parse(raw).map_err(|e| usage(format!("invalid AMQP URL {shown}: {e}")))?;
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .map(|c| c.into_owned())
                .map_err(|_| {
                    usage(format!(
                        "invalid AMQP URL {shown}: not UTF-8 after decoding"
                    ))
                })
        };
        let scheme = match u.scheme() {
            "amqps" => AMQPScheme::AMQPS,
            _ => AMQPScheme::AMQP,
        };
        let host = match u.host() {
            Some(url::Host::Ipv6(a)) => a.to_string(),
            Some(h) => decode(&h.to_string())?,
            None => return Err(usage(format!("invalid AMQP URL {shown}: missing host"))),
        };
        let defaults = AMQPUri::default();
        let username = if u.username().is_empty() {
            defaults.authority.userinfo.username.clone()
        } else {
            decode(u.username())?
        };
        let password = match u.password() {
            Some(p) => decode(p)?,
            None => defaults.authority.userinfo.password.clone(),
        };
        // amqp://host and amqp://host/%2f both mean the default vhost "/".
        let url_vhost = match u.path() {
            "" | "/" => "/".to_owned(),
            p => decode(&p[1..])?,
        };
        let vhost = vhost.map(str::to_owned).unwrap_or(url_vhost);
        // Keep the URL's tuning parameters (heartbeat, frame_max, ...).
        let mut query = raw
            .parse::<AMQPUri>()
            .map(|q| q.query)
            .unwrap_or_else(|_| AMQPQueryString::default());
        // The broker's 60 s would notice a stalled network only after 120 s.
        query.heartbeat = query.heartbeat.or(Some(DEFAULT_HEARTBEAT_SECS));
        let port = u.port().unwrap_or_else(|| scheme.default_port());
        let uri = AMQPUri {
            scheme,
            authority: AMQPAuthority {
                userinfo: AMQPUserInfo { username, password },
                host,
                port,
            },
            vhost: vhost.clone(),
            query,
        };
        Ok(Target {
            uri,
            vhost,
            shown,
            tls_files: tls_files.clone(),
            management_url: management_url.map(str::to_owned),
        })
    }

    pub(crate) fn user(&self) -> &str {
        &self.uri.authority.userinfo.username
    }

    pub(crate) fn tls(&self) -> bool {
        self.uri.scheme == AMQPScheme::AMQPS
    }

    /// The management API client for this broker (`--management-url` or the default).
    pub(crate) fn management(&self) -> Result<Management> {
        Management::new(
            self.management_url.as_deref(),
            (
                &self.uri.authority.host,
                self.uri.authority.port,
                &self.shown,
            ),
            self.tls(),
            self.user(),
            &self.uri.authority.userinfo.password,
            &self.tls_files,
        )
        .map_err(usage)
    }

    /// lapin's TLS settings: the system's roots (rustls platform verifier) plus the CA file,
    /// and the client certificate when one is configured.
    fn tls_config(&self) -> OwnedTLSConfig {
        OwnedTLSConfig {
            identity: self
                .tls_files
                .client
                .as_ref()
                .map(|c| OwnedIdentity::PKCS8 {
                    pem: c.cert_pem.clone(),
                    key: c.key_pem.clone(),
                }),
            cert_chain: self.tls_files.ca.as_ref().map(|ca| ca.pem.clone()),
        }
    }
}

/// Opens the connection; errors say what went wrong without the password.
pub(crate) async fn connect(t: &Target) -> Result<Connection> {
    // Named per process so an operator (or a test) can find this run's connection.
    let name = format!("dlq-{} v{}", std::process::id(), env!("CARGO_PKG_VERSION"));
    let props = ConnectionProperties::default().with_connection_name(name.as_str().into());
    let runtime = lapin::runtime::default_runtime()
        .map_err(|e| anyhow!("cannot connect to RabbitMQ at {}: {e}", t.shown))?;
    let attempt =
        lapin::Connection::connect_uri_with_config(t.uri.clone(), props, t.tls_config(), runtime);
    match tokio::time::timeout(CONNECT_TIMEOUT, attempt).await {
        Err(_) => Err(anyhow!(
            "cannot connect to RabbitMQ at {}: no answer within {} s (unreachable, or a server that is not RabbitMQ on that port?)",
            t.shown,
            CONNECT_TIMEOUT.as_secs()
        )),
        Ok(Ok(c)) => {
            let api = t.management().ok().map(|m| (m, t.vhost.clone()));
            Ok(Connection::watched(c, reported::ReportedTimeouts::new(api)))
        }
        Ok(Err(e)) => Err(connect_error(&e, t)),
    }
}

fn connect_error(e: &lapin::Error, t: &Target) -> anyhow::Error {
    let shown = &t.shown;
    if let Some(problem) = tls::find_rustls_error(e).map(tls::classify)
        && !matches!(problem, Problem::Other(_))
    {
        return anyhow!(
            "cannot connect to RabbitMQ at {shown}: {}",
            redact::scrub(&explain_tls(&problem, &t.tls_files, "amqps://"))
        );
    }
    match e.kind() {
        lapin::ErrorKind::ProtocolError(amqp) => {
            let msg = redact::scrub(amqp.get_message().as_str());
            match amqp.kind() {
                AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED)
                | AMQPErrorKind::Hard(AMQPHardError::NOTALLOWED)
                    if msg.contains("Login was refused") =>
                {
                    anyhow!(
                        "RabbitMQ at {shown} refused the login of user {:?}: wrong user name or password",
                        t.user()
                    )
                }
                AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED) => {
                    anyhow!("RabbitMQ at {shown} refused user {:?}: {msg}", t.user())
                }
                AMQPErrorKind::Hard(AMQPHardError::NOTALLOWED) if msg.contains("not found") => {
                    usage(format!(
                        "virtual host {:?} does not exist on RabbitMQ at {shown} (set it with --vhost or the URL path; the default vhost \"/\" is written %2f)",
                        t.vhost
                    ))
                }
                AMQPErrorKind::Hard(AMQPHardError::NOTALLOWED) => anyhow!(
                    "user {:?} may not use virtual host {:?} on RabbitMQ at {shown}: {msg}",
                    t.user(),
                    t.vhost
                ),
                _ => anyhow!("RabbitMQ at {shown} closed the connection: {msg}"),
            }
        }
        // Something else listens there (HTTP, Redis, ...): its bytes are no AMQP frame.
        lapin::ErrorKind::ParsingError(_) | lapin::ErrorKind::InvalidProtocolVersion(_) => {
            anyhow!(
                "cannot connect to RabbitMQ at {shown}: the server on port {} did not answer as RabbitMQ (AMQP 0-9-1); is this the AMQP port (5672, 5671 for amqps)?",
                t.uri.authority.port
            )
        }
        lapin::ErrorKind::IOError(io) => {
            // A TLS client talking to a plain AMQP port reads garbage, not a clear refusal.
            use std::io::ErrorKind as K;
            let port = t.uri.authority.port;
            let hint = match io.kind() {
                K::InvalidData if t.tls() => format!(
                    " (TLS handshake failed: does port {port} speak TLS? amqps usually uses 5671)"
                ),
                // Closed before the AMQP handshake: an HTTP server or the like.
                K::ConnectionAborted | K::ConnectionReset | K::UnexpectedEof => format!(
                    " (the server on port {port} closed the connection instead of answering as RabbitMQ: is this the AMQP port, 5672 or 5671 for amqps?)"
                ),
                _ => String::new(),
            };
            anyhow!(
                "cannot connect to RabbitMQ at {shown}: {}{hint}",
                redact::scrub(&io.to_string())
            )
        }
        _ => anyhow!(
            "cannot connect to RabbitMQ at {shown}: {}",
            redact::scrub(&e.to_string())
        ),
    }
}

/// A certificate problem with RabbitMQ, and what to do about it. `what` names the URL kind
/// whose host the certificate must name (`amqps://`, `management https://`).
pub(crate) fn explain_tls(problem: &Problem, files: &TlsFiles, what: &str) -> String {
    match problem {
        Problem::Untrusted => match &files.ca {
            None => "the server's TLS certificate is not trusted: no CA of the system's store signed it. Pass the CA certificate that did (PEM) with --amqp-ca-file PATH (env DLQ_AMQP_CA_FILE, config amqp_ca_file)".to_owned(),
            Some(ca) => format!(
                "the server's TLS certificate is not trusted: neither a CA of the system's store nor one in {} (--amqp-ca-file) signed it",
                ca.path.display()
            ),
        },
        Problem::WrongName { expected, presented } => format!(
            "the server's TLS certificate is not valid for host {expected:?} (it names {presented}): use a host name the certificate names in the {what} URL"
        ),
        Problem::Rejected(why) => format!("the server's TLS certificate was rejected: {why}"),
        Problem::ClientCertificate(alert) => match &files.client {
            None => format!(
                "the server requires a client certificate (TLS alert {alert}): pass --amqp-client-cert and --amqp-client-key"
            ),
            Some(c) => format!(
                "the server refused the client certificate {} (TLS alert {alert})",
                c.cert_path.display()
            ),
        },
        Problem::Alert(alert) => format!(
            "the server ended the TLS handshake (TLS alert {alert}): see its log for why"
        ),
        Problem::Other(why) => format!("TLS failed: {why}"),
    }
}

/// True when a lapin error is the broker's 404 for a queue.
pub(crate) fn is_not_found(e: &lapin::Error) -> bool {
    is_soft(e, AMQPSoftError::NOTFOUND)
}

/// True when a lapin error is the broker's 405: another connection's exclusive queue.
pub(crate) fn is_resource_locked(e: &lapin::Error) -> bool {
    is_soft(e, AMQPSoftError::RESOURCELOCKED)
}

fn is_soft(e: &lapin::Error, code: AMQPSoftError) -> bool {
    soft_error(e) == Some(&code)
}

/// The broker's soft error a lapin error carries, if any: the broker closed one channel
/// (a 404, a 405), the connection serves on.
fn soft_error(e: &lapin::Error) -> Option<&AMQPSoftError> {
    match e.kind() {
        lapin::ErrorKind::ProtocolError(a) => match a.kind() {
            AMQPErrorKind::Soft(code) => Some(code),
            AMQPErrorKind::Hard(_) => None,
        },
        _ => None,
    }
}

/// What a passive declare tells: exact ready count and consumers.
#[derive(Debug, Clone, Copy)]
pub struct Depth {
    pub ready: u32,
    pub consumers: u32,
}

/// How long a closing handshake (channel or connection) may take once the work is done.
pub(crate) const CLOSE_LIMIT: Duration = Duration::from_secs(10);

/// Closes the connection at the end of a command. Bounded: everything was settled before,
/// and a close-ok that never comes (the client's I/O loop already gone) must not keep the
/// process alive; the broker drops the connection when the process exits anyway.
pub(crate) async fn close(conn: &Connection, why: &str) {
    let _ = tokio::time::timeout(CLOSE_LIMIT, conn.close(200, why.into())).await;
}

/// Closes a channel, waiting at most `CLOSE_LIMIT` for its close-ok (see `close`).
pub(crate) async fn close_channel(ch: &lapin::Channel, why: &str) {
    let _ = tokio::time::timeout(CLOSE_LIMIT, ch.close(200, why.into())).await;
}

/// Passive `queue.declare` on a channel of its own: a missing queue is `None` (the 404
/// closes that channel, never one in use), and nothing is ever created.
pub(crate) async fn passive_declare(conn: &Connection, queue: &str) -> Result<Option<Depth>> {
    Ok(match passive_declare_keep(conn, queue).await? {
        Some((depth, ch)) => {
            close_channel(&ch, "passive declare done").await;
            Some(depth)
        }
        None => None,
    })
}

/// How long a passive declare may take: the broker answers one in milliseconds, even under
/// an alarm, so past this the connection is gone unnoticed (see `Liveness`).
const DECLARE_LIMIT: Duration = Duration::from_secs(30);

/// `passive_declare`, handing back the (still open) channel for further use.
pub(crate) async fn passive_declare_keep(
    conn: &Connection,
    queue: &str,
) -> Result<Option<(Depth, lapin::Channel)>> {
    let declare = async {
        let ch = conn.create_channel().await?;
        let r = ch
            .queue_declare(
                queue.into(),
                lapin::options::QueueDeclareOptions::default().passive(),
                lapin::types::FieldTable::default(),
            )
            .await;
        Ok::<_, lapin::Error>((ch, r))
    };
    let Ok(opened) = tokio::time::timeout(DECLARE_LIMIT, declare).await else {
        bail!(
            "cannot check queue {queue:?}: the broker did not answer within {} s",
            DECLARE_LIMIT.as_secs()
        );
    };
    let (ch, r) = opened?;
    match r {
        Ok(q) => Ok(Some((
            Depth {
                ready: q.message_count(),
                consumers: q.consumer_count(),
            },
            ch,
        ))),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(anyhow!("cannot check queue {queue:?}: {e}")),
    }
}

/// What the management API says about one queue (and the queue as it showed it), or why it
/// could not say.
async fn queue_facts(
    mgmt: &Management,
    vhost: &str,
    queue: &str,
    version: Option<Version>,
) -> Result<(QueueFacts, Option<ApiQueue>), ApiError> {
    let (q, policies, ops) = tokio::try_join!(
        mgmt.queue(vhost, queue),
        mgmt.policies(vhost),
        mgmt.operator_policies(vhost),
    )?;
    let Some(q) = q else {
        let facts = QueueFacts {
            version,
            ..unknown_facts()
        };
        return Ok((facts, None));
    };
    let mut warnings = Vec::new();
    let policy = topology::effective_policy(&q, &policies, &ops, &mut warnings);
    let kind = QueueKind::from_api(q.kind.as_deref());
    let delivery_limit = match kind {
        QueueKind::Quorum => topology::delivery_limit(&q.arguments, &policy, version),
        _ => None,
    };
    let facts = QueueFacts {
        kind,
        delivery_limit,
        version,
        renew_blocker: topology::renew_blocker(&q.arguments, &policy),
        consumer_timeout: topology::consumer_timeout(&q.arguments, &policy, version),
    };
    Ok((facts, Some(q)))
}

/// A queue checked and ready to be read.
#[derive(Debug, Clone)]
pub(crate) struct Checked {
    pub(crate) name: String,
    pub(crate) facts: QueueFacts,
    pub(crate) depth: Depth,
    /// Consumers the queue counts that no live connection owns (`topology::Lost`): left out
    /// of `depth.consumers` here, and of every later count of it.
    pub(crate) lost_consumers: u32,
}

/// Checks every named queue before anything is read: it exists (else a usage error naming
/// it, and nothing is created), and reading it is safe (else a usage error unless `force`).
pub(crate) async fn check_queues(
    conn: &Connection,
    target: &Target,
    printer: &Printer,
    names: &[String],
    force: bool,
) -> Result<Vec<Checked>> {
    let mgmt = target.management()?;
    let version = mgmt.version().await;
    if let Err(e) = &version {
        printer.warn(format!("{e}"));
    }
    let mut out = Vec::new();
    for name in names {
        let Some(depth) = passive_declare(conn, name).await? else {
            return Err(usage(format!(
                "queue {name:?} does not exist in virtual host {:?} on {} (nothing was created)",
                target.vhost, target.shown
            )));
        };
        let (facts, seen) = match &version {
            Ok(v) => match queue_facts(&mgmt, &target.vhost, name, *v).await {
                Ok(f) => f,
                Err(e) => {
                    printer.warn(format!("{e}"));
                    (unknown_facts(), None)
                }
            },
            Err(_) => (unknown_facts(), None),
        };
        let (depth, lost) = match seen {
            Some(q) => without_lost_consumers(&mgmt, &target.vhost, name, Some(q), depth).await,
            None => (depth, None),
        };
        if let Some(lost) = &lost {
            printer.warn(lost.warning(name));
        }
        let lost_consumers = lost.map_or(0, |l| l.consumers);
        match topology::read_verdict(name, &facts, depth.consumers) {
            ReadVerdict::Safe(_) => {}
            ReadVerdict::Risky(why) if !force => {
                return Err(usage(format!(
                    "refusing to read {name:?}: {why}. Nothing was read. Pass --force to read it anyway"
                )));
            }
            ReadVerdict::Risky(why) => printer.warn(format!("--force: reading anyway: {why}")),
        }
        if depth.consumers > 0 && facts.kind != QueueKind::Stream {
            printer.warn(format!(
                "{name:?} has {} consumer(s): messages they hold unacknowledged are not shown, and they may take messages while dlq reads",
                depth.consumers
            ));
        }
        out.push(Checked {
            name: name.clone(),
            facts,
            depth,
            lost_consumers,
        });
    }
    Ok(out)
}

/// How long the management API may take to show a new consumer (its default statistics
/// interval is 5 s): a queue that seems to have orphaned holders is asked again after it.
const STATS_LAG: Duration = Duration::from_millis(5_500);

/// `depth` without the consumers no live connection owns (`topology::lost_consumers`), and
/// those, seen twice a statistics interval apart so that a consumer started a moment ago is
/// not taken for one. `seen` is a first look at the queue with its consumers' details, if
/// the caller has one; else the management API is asked.
pub(crate) async fn without_lost_consumers(
    mgmt: &Management,
    vhost: &str,
    name: &str,
    seen: Option<ApiQueue>,
    depth: Depth,
) -> (Depth, Option<topology::Lost>) {
    let lost = match depth.consumers {
        0 => None,
        counted => lost_consumers_of(mgmt, vhost, name, seen, counted).await,
    };
    let n = lost.as_ref().map_or(0, |l| l.consumers);
    let depth = Depth {
        consumers: depth.consumers.saturating_sub(n),
        ..depth
    };
    (depth, lost)
}

async fn lost_consumers_of(
    mgmt: &Management,
    vhost: &str,
    name: &str,
    seen: Option<ApiQueue>,
    counted: u32,
) -> Option<topology::Lost> {
    let look = || async { mgmt.queue(vhost, name).await.ok().flatten() };
    let first = match seen {
        Some(q) => q,
        None => look().await?,
    };
    let before = topology::lost_consumers(&first, counted)?;
    tokio::time::sleep(STATS_LAG).await;
    let lost = topology::lost_consumers(&look().await?, counted)?;
    let version = mgmt.version().await.ok().flatten();
    Some(topology::Lost {
        held: topology::nearer_held(before.held, lost.held),
        timed_out_back: version.is_some_and(|v| v >= topology::DISCONNECTED_TIMEOUT_FROM),
        ..lost
    })
}

fn unknown_facts() -> QueueFacts {
    QueueFacts {
        kind: QueueKind::Unknown,
        delivery_limit: None,
        version: None,
        renew_blocker: None,
        consumer_timeout: None,
    }
}

/// Refuses a destination that does not exist (nothing is changed); a queue with no consumer
/// is a warning, since replayed tasks would wait there.
pub(crate) async fn check_target(
    conn: &Connection,
    target: &crate::model::Target,
) -> Result<TargetFacts> {
    use crate::model::Target;
    match target {
        Target::Queue(q) => match passive_declare(conn, q).await? {
            None => Err(usage(format!(
                "target queue {q:?} does not exist: nothing was replayed (declare it, start its workers, or pass --to-queue)"
            ))),
            Some(s) => {
                let mut facts = TargetFacts {
                    note: Some(format!(
                        "queue {q:?}: {} message(s) ready, {} consumer(s)",
                        s.ready, s.consumers
                    )),
                    warnings: Vec::new(),
                };
                if s.consumers == 0 {
                    facts.warnings.push(format!(
                        "queue {q:?} has no consumers: replayed tasks will wait there until a worker starts"
                    ));
                }
                Ok(facts)
            }
        },
        Target::Exchange { exchange, .. } => {
            if publish::exchange_exists(conn, exchange).await? {
                Ok(TargetFacts::default())
            } else {
                Err(usage(format!(
                    "target exchange {exchange:?} does not exist: nothing was replayed"
                )))
            }
        }
    }
}

/// A warning for the plan when a destination is at or near its length limit: with the
/// default overflow (`drop-head`) the broker confirms every publish and then dead-letters
/// the oldest messages again, so a replay would report success for messages it pushed out.
/// `None` when there is no limit, room enough, or no management API to ask.
pub(crate) async fn length_limit_warning(
    target: &Target,
    queue: &str,
    adding: u64,
) -> Option<String> {
    let api = target.management().ok()?;
    let q = api.queue(&target.vhost, queue).await.ok()??;
    let policy = q.effective_policy_definition.clone().unwrap_or_default();
    let setting = |arg: &str, key: &str| q.arguments.get(arg).or_else(|| policy.get(key)).cloned();
    let max = setting("x-max-length", "max-length")?.as_u64()?;
    let overflow = setting("x-overflow", "overflow")
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "drop-head".into());
    let held = q.messages.unwrap_or(0);
    // Near: the replay would take it past nine tenths of its limit.
    if (held + adding) * 10 < max * 9 {
        return None;
    }
    let what = match overflow.as_str() {
        "drop-head" => {
            "the broker confirms every publish and then drops (or dead-letters) the oldest messages to make room: they may land back in a DLQ although the replay reports them replayed"
        }
        "reject-publish" | "reject-publish-dlx" => {
            "publishes past the limit are refused (nacked): those messages stay where they are and are reported as failed"
        }
        _ => "messages past the limit are handled by the queue's overflow setting",
    };
    Some(format!(
        "destination queue {queue:?} holds {held} of at most {max} message(s) (overflow {overflow}) and this run sends up to {adding}: {what}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(url: &str, vhost: Option<&str>) -> Target {
        Target::from_url(url, vhost, &TlsFiles::default(), None).unwrap()
    }

    #[test]
    fn ip_hosts_are_kept_and_vhosts_resolved() {
        // AMQPUri::from_str would connect to "localhost" here.
        let t = target("amqp://app:p%40ss@10.1.2.3:5673/prod?heartbeat=7", None);
        assert_eq!(t.uri.authority.host, "10.1.2.3");
        assert_eq!(t.uri.authority.port, 5673);
        assert_eq!(t.uri.authority.userinfo.username, "app");
        assert_eq!(t.uri.authority.userinfo.password, "p@ss");
        assert_eq!(t.vhost, "prod");
        assert_eq!(t.uri.query.heartbeat, Some(7));
        assert_eq!(target("amqp://h", None).uri.query.heartbeat, Some(10));
        assert_eq!(t.shown, "amqp://app:***@10.1.2.3:5673/prod?heartbeat=7");
        assert_eq!(target("amqp://h/%2f", None).vhost, "/");
        assert_eq!(target("amqp://h", None).vhost, "/");
        assert_eq!(target("amqp://h/", None).vhost, "/");
        assert_eq!(target("amqp://h/a%2Fb", None).vhost, "a/b");
        assert_eq!(target("amqp://h/%2f", Some("other")).uri.vhost, "other");
        let t = target("amqps://[::1]/%2f", None);
        assert_eq!(t.uri.authority.host, "::1");
        assert_eq!(t.uri.authority.port, 5671);
        assert!(t.tls());
        // No user in the URL: RabbitMQ's defaults.
        assert_eq!(target("amqp://h", None).user(), "guest");
    }
}
