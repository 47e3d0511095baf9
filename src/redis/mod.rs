//! The Redis a Celery app's broker URL names, opened the way kombu's Redis transport reads that
//! URL (`kombu/utils/url.py`, `Channel._connparams` in `kombu/transport/redis.py`), and kombu's
//! envelope and key names (`envelope`).

pub(crate) mod envelope;

use crate::error::usage;
use crate::tls::TlsFiles;
use anyhow::{Result, anyhow};
use percent_encoding::percent_decode_str;
use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, Client, ClientTlsConfig, ConnectionAddr, ConnectionInfo, ErrorKind,
    IntoConnectionInfo, RedisConnectionInfo, RedisError, TlsCertificates,
};
use std::time::Duration;

/// How long opening the connection (TCP, TLS, AUTH, SELECT) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A reply slower than this is a Redis that stopped answering: the outcome is unknown. Every
/// blocking command dlq sends (BRPOP, WAIT) blocks for at most a second.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_PORT: u16 = 6379;

/// Where the URL points, parsed as kombu parses it. The password stays inside `info`.
#[derive(Clone)]
pub(crate) struct Endpoint {
    info: ConnectionInfo,
    /// The database number (kombu's `virtual_host`), part of the fanout channel names.
    pub(crate) db: i64,
    /// `host:port` or the socket path, for messages.
    pub(crate) place: String,
    tls: bool,
}

/// An open connection: commands from clones are pipelined on one socket.
#[derive(Clone)]
pub(crate) struct Redis {
    pub(crate) conn: MultiplexedConnection,
    pub(crate) db: i64,
    pub(crate) place: String,
}

impl Endpoint {
    /// `redis://[user:password@]host[:port][/db]`, `rediss://` (TLS), and
    /// `redis+socket:///path[?virtual_host=db]`. A bad URL is a usage error; messages show the
    /// URL through `crate::redact::url`, never the password.
    pub(crate) fn parse(raw: &str) -> Result<Endpoint> {
        let shown = crate::redact::url(raw);
        let bad = |why: String| usage(format!("invalid --broker-url {shown}: {why}"));
        let (scheme, rest) = raw
            .split_once("://")
            .ok_or_else(|| bad("no scheme".into()))?;
        let parts = Parts::split(rest).map_err(bad)?;
        let scheme = scheme.to_ascii_lowercase();
        let (addr, place, db_text) = match scheme.as_str() {
            "redis" | "rediss" => {
                let (host, port) = parts.host_port().map_err(bad)?;
                let place = match host.contains(':') {
                    true => format!("[{host}]:{port}"),
                    false => format!("{host}:{port}"),
                };
                let addr = if scheme == "rediss" {
                    let (insecure, tls_params) = (false, None);
                    ConnectionAddr::TcpTls {
                        host,
                        port,
                        insecure,
                        tls_params,
                    }
                } else {
                    ConnectionAddr::Tcp(host, port)
                };
                (addr, place, parts.path.clone())
            }
            "redis+socket" => {
                // kombu re-roots the path (`'/' + path`) and takes the database from the query.
                let path = format!(
                    "/{}",
                    parts.path.as_deref().unwrap_or("").trim_start_matches('/')
                );
                let db = parts.query("virtual_host");
                (ConnectionAddr::Unix(path.clone().into()), path, db)
            }
            other => return Err(bad(format!("scheme {other}:// is not a Redis URL"))),
        };
        let db = database(db_text.as_deref()).map_err(bad)?;
        let mut redis = RedisConnectionInfo::default().set_db(db);
        if let Some(user) = &parts.user {
            redis = redis.set_username(user);
        }
        if let Some(password) = &parts.password {
            redis = redis.set_password(password);
        }
        let info = addr
            .into_connection_info()
            .map_err(|e| bad(e.to_string()))?
            .set_redis_settings(redis);
        let tls = scheme == "rediss";
        Ok(Endpoint {
            info,
            db,
            place,
            tls,
        })
    }

    /// Opens the connection (and, with `rediss://`, trusts `--amqp-ca-file` and presents the
    /// `--amqp-client-cert` if set). Errors name what failed, never the password.
    pub(crate) async fn connect(&self, tls: &TlsFiles) -> Result<Redis> {
        let client = self.client(tls)?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT));
        let opened = tokio::time::timeout(
            CONNECT_TIMEOUT,
            client.get_multiplexed_async_connection_with_config(&config),
        )
        .await;
        let conn = match opened {
            Err(_) => Err(anyhow!(
                "cannot connect to Redis at {}: no answer within {} s",
                self.place,
                CONNECT_TIMEOUT.as_secs()
            )),
            Ok(Err(e)) => Err(self.connect_error(&e)),
            Ok(Ok(conn)) => Ok(conn),
        }?;
        Ok(Redis {
            conn,
            db: self.db,
            place: self.place.clone(),
        })
    }

    /// A pub/sub connection of its own (kombu's fanout: Celery's events and remote control).
    pub(crate) async fn pubsub(&self, tls: &TlsFiles) -> Result<redis::aio::PubSub> {
        let client = self.client(tls)?;
        match tokio::time::timeout(CONNECT_TIMEOUT, client.get_async_pubsub()).await {
            Err(_) => Err(anyhow!(
                "cannot connect to Redis at {}: no answer within {} s",
                self.place,
                CONNECT_TIMEOUT.as_secs()
            )),
            Ok(Err(e)) => Err(self.connect_error(&e)),
            Ok(Ok(p)) => Ok(p),
        }
    }

    fn client(&self, tls: &TlsFiles) -> Result<Client> {
        let opened = if self.tls {
            let certs = TlsCertificates {
                client_tls: tls.client.as_ref().map(|c| ClientTlsConfig {
                    client_cert: c.cert_pem.clone(),
                    client_key: c.key_pem.clone(),
                }),
                root_cert: tls.ca.as_ref().map(|ca| ca.pem.clone().into_bytes()),
            };
            Client::build_with_tls(self.info.clone(), certs)
        } else {
            Client::open(self.info.clone())
        };
        opened.map_err(|e| anyhow!("Redis at {}: {}", self.place, said(&e)))
    }

    /// What went wrong opening the connection, in the words of the step that failed.
    fn connect_error(&self, e: &RedisError) -> anyhow::Error {
        let place = &self.place;
        let text = said(e);
        if e.kind() == ErrorKind::AuthenticationFailed || is_code(e, &["WRONGPASS", "NOAUTH"]) {
            return anyhow!("Redis at {place} refused the credentials (AUTH): {text}");
        }
        if text.contains("DB index") {
            return anyhow!(
                "Redis at {place}: cannot select database {}: {text}",
                self.db
            );
        }
        if let Some(tls) = tls_problem(e) {
            return anyhow!("cannot connect to Redis at {place}: TLS: {tls}");
        }
        anyhow!("cannot connect to Redis at {place}: {text}")
    }
}

/// A Redis error as text, scrubbed of any registered secret.
pub(crate) fn said(e: &RedisError) -> String {
    crate::redact::scrub(&e.to_string())
}

fn is_code(e: &RedisError, codes: &[&str]) -> bool {
    e.code().is_some_and(|c| codes.contains(&c))
}

/// A certificate problem somewhere in the chain, in rustls' words.
fn tls_problem(e: &RedisError) -> Option<String> {
    crate::tls::find_rustls_error(e).map(|found| found.to_string())
}

/// kombu's `_prepare_virtual_host`: empty or `/` is database 0, else an integer.
fn database(text: Option<&str>) -> Result<i64, String> {
    let text = text.unwrap_or("").trim_start_matches('/');
    if text.is_empty() {
        return Ok(0);
    }
    text.parse::<i64>()
        .ok()
        .filter(|db| *db >= 0)
        .ok_or_else(|| format!("the database must be a number (/0, /1 ...), not {text:?}"))
}

/// The URL after `scheme://`, split with the HTTP rules kombu applies (`url_to_parts`).
#[derive(Debug, Default, PartialEq)]
struct Parts {
    user: Option<String>,
    password: Option<String>,
    host: String,
    port: Option<u16>,
    path: Option<String>,
    query: Vec<(String, String)>,
}

impl Parts {
    fn split(rest: &str) -> Result<Parts, String> {
        let rest = rest.split('#').next().unwrap_or("");
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (user, password) = match userinfo.map(|u| u.split_once(':').unwrap_or((u, ""))) {
            Some((u, p)) => (decoded(u), decoded(p)),
            None => (None, None),
        };
        let (host, port) = split_port(hostport)?;
        let query = url::form_urlencoded::parse(query.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        Ok(Parts {
            user,
            password,
            host: percent_decode_str(host).decode_utf8_lossy().into_owned(),
            port,
            path: path.and_then(decoded),
            query,
        })
    }

    /// kombu's defaults: `127.0.0.1`, port 6379.
    fn host_port(&self) -> Result<(String, u16), String> {
        let host = match self.host.as_str() {
            "" => "127.0.0.1".to_owned(),
            h => h.to_owned(),
        };
        Ok((host, self.port.unwrap_or(DEFAULT_PORT)))
    }

    fn query(&self, key: &str) -> Option<String> {
        self.query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    }
}

/// Percent-decoded; empty is absent (kombu: `unquote(x or '') or None`).
fn decoded(s: &str) -> Option<String> {
    let d = percent_decode_str(s).decode_utf8_lossy().into_owned();
    (!d.is_empty()).then_some(d)
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`.
fn split_port(hostport: &str) -> Result<(&str, Option<u16>), String> {
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (host, after) = v6
            .split_once(']')
            .ok_or("an IPv6 address needs its closing ]")?;
        (host, after.strip_prefix(':'))
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    let port = match port.filter(|p| !p.is_empty()) {
        None => None,
        Some(p) => Some(
            p.parse::<u16>()
                .map_err(|_| format!("port {p:?} is not a number from 1 to 65535"))?,
        ),
    };
    Ok((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: &str) -> Endpoint {
        Endpoint::parse(raw).unwrap_or_else(|e| panic!("{raw}: {e:#}"))
    }

    fn failure(raw: &str) -> String {
        format!("{:#}", Endpoint::parse(raw).err().expect(raw))
    }

    #[test]
    fn reads_urls_as_kombu_does() {
        let e = parse("redis://");
        assert_eq!(
            (e.place.as_str(), e.db, e.tls),
            ("127.0.0.1:6379", 0, false)
        );
        let e = parse("redis://u%40x:p%3Ass@cache.internal:6380/3");
        assert_eq!((e.place.as_str(), e.db), ("cache.internal:6380", 3));
        let r = e.info.redis_settings();
        assert_eq!((r.username(), r.password()), (Some("u@x"), Some("p:ss")));
        let e = parse("redis://:secret@127.0.0.1/");
        let r = e.info.redis_settings();
        assert_eq!(
            (r.username(), r.password(), r.db()),
            (None, Some("secret"), 0)
        );
        let e = parse("rediss://[::1]:7000/2?ssl_cert_reqs=required");
        assert_eq!((e.place.as_str(), e.db, e.tls), ("[::1]:7000", 2, true));
        let e = parse("redis+socket:///run/redis/redis.sock?virtual_host=4");
        assert_eq!((e.place.as_str(), e.db), ("/run/redis/redis.sock", 4));
        assert!(
            matches!(e.info.addr(), ConnectionAddr::Unix(p) if p.to_str() == Some("/run/redis/redis.sock"))
        );
        let e = parse("redis+socket://:pw@/tmp/r.sock");
        assert_eq!(e.info.redis_settings().password(), Some("pw"));
        assert_eq!((e.place.as_str(), e.db), ("/tmp/r.sock", 0));
    }

    #[test]
    fn refuses_bad_urls_without_the_password() {
        let e = failure("redis://u:hunter22@h:6379/x");
        assert!(e.contains("the database must be a number"), "{e}");
        assert!(!e.contains("hunter22"), "{e}");
        assert!(failure("redis://h:99999/0").contains("port \"99999\""));
        assert!(failure("redis://[::1/0").contains("closing ]"));
        assert!(failure("redis://h/-1").contains("must be a number"));
    }
}
