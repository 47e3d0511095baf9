//! Flags + environment + config file -> validated `Settings`, built once.
//! Precedence: flag > env > config (profile, then top level) > default.

use crate::celery::redis::RedisBroker;
use crate::celery::workers::Mailbox;
use crate::cli::{ColorChoice, GlobalArgs};
use crate::endpoints::{CeleryBroker, Database, Endpoints};
use crate::error::usage;
use crate::output::OutputFormat;
use crate::rabbit::Target as RabbitTarget;
use crate::redact;
use crate::source::table::{DatabaseUrl, TableName};
use crate::tls::{self, TlsFiles};
use anyhow::Result;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub(crate) const DEFAULT_AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
pub(crate) const DEFAULT_TABLE: &str = "tasks_falhadas";

/// What the terminal looks like; passed in so that tests can fake it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Terminal {
    pub(crate) stdin_tty: bool,
    pub(crate) stdout_tty: bool,
    pub(crate) stderr_tty: bool,
}

impl Terminal {
    pub(crate) fn detect() -> Terminal {
        use std::io::IsTerminal;
        // DLQ_FORCE_TTY lets tests exercise terminal-only behaviour (colour, prompts' refusal paths).
        let forced = std::env::var_os("DLQ_FORCE_TTY").is_some();
        Terminal {
            stdin_tty: forced || std::io::stdin().is_terminal(),
            stdout_tty: forced || std::io::stdout().is_terminal(),
            stderr_tty: forced || std::io::stderr().is_terminal(),
        }
    }
}

/// One section of the config file (top level or a profile). Unknown keys are errors,
/// so a typo never silently falls back to a default.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConfigSection {
    pub(crate) database_url: Option<String>,
    pub(crate) table: Option<String>,
    pub(crate) amqp_url: Option<String>,
    pub(crate) management_url: Option<String>,
    pub(crate) amqp_ca_file: Option<PathBuf>,
    pub(crate) amqp_client_cert: Option<PathBuf>,
    pub(crate) amqp_client_key: Option<PathBuf>,
    pub(crate) vhost: Option<String>,
    pub(crate) broker_url: Option<String>,
    pub(crate) redis_key_prefix: Option<String>,
    pub(crate) redis_sep: Option<String>,
    pub(crate) redis_wait_replicas: Option<u32>,
    pub(crate) control_exchange: Option<String>,
    pub(crate) output: Option<OutputFormat>,
    pub(crate) color: Option<ColorChoice>,
    /// DLQs to list and read even without the management API.
    pub(crate) queues: Option<Vec<String>>,
    /// Stored Celery task name -> the name to send (`--task-map`).
    pub(crate) task_map: Option<BTreeMap<String, String>>,
    /// The audit trail of every run that changes something (`--audit-log`).
    pub(crate) audit_log: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConfigFile {
    #[serde(flatten)]
    pub(crate) base: ConfigSection,
    #[serde(default)]
    pub(crate) profiles: BTreeMap<String, ConfigSection>,
}

#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Where dlq connects and writes, built once; the only part handed below `commands/`.
    pub(crate) endpoints: Endpoints,
    /// The config file's profile in use (`--profile` / `DLQ_PROFILE`), for the browser's
    /// status line.
    pub(crate) profile: Option<String>,
    /// Queues named in the config file.
    pub(crate) config_queues: Vec<String>,
    /// `task_map` from the config file, as `OLD=NEW` entries (flags add to it).
    pub(crate) config_task_map: Vec<String>,
    pub(crate) output: OutputFormat,
    pub(crate) quiet: bool,
    pub(crate) verbose: u8,
    pub(crate) color: bool,
    pub(crate) progress: bool,
    pub(crate) terminal: Terminal,
}

type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

fn non_empty(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.trim().is_empty())
}

fn default_config_path(env: Env) -> Option<PathBuf> {
    if let Some(x) = non_empty(env("XDG_CONFIG_HOME")) {
        return Some(Path::new(&x).join("dlq/config.toml"));
    }
    non_empty(env("HOME")).map(|h| Path::new(&h).join(".config/dlq/config.toml"))
}

/// `$XDG_STATE_HOME/dlq/audit.ndjson`, else `~/.local/state/dlq/audit.ndjson`.
fn default_audit_log(env: Env) -> Option<PathBuf> {
    if let Some(x) = non_empty(env("XDG_STATE_HOME")) {
        return Some(Path::new(&x).join("dlq/audit.ndjson"));
    }
    non_empty(env("HOME")).map(|h| Path::new(&h).join(".local/state/dlq/audit.ndjson"))
}

/// Reads the config file: an explicit path must exist; the default path may not.
fn load_config(explicit: Option<PathBuf>, env: Env) -> Result<ConfigFile> {
    let (path, required) =
        match explicit.or_else(|| non_empty(env("DLQ_CONFIG")).map(PathBuf::from)) {
            Some(p) => (p, true),
            None => match default_config_path(env) {
                Some(p) => (p, false),
                None => return Ok(ConfigFile::default()),
            },
        };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => {
            return Ok(ConfigFile::default());
        }
        Err(e) => {
            return Err(usage(format!(
                "cannot read config file {}: {e}",
                path.display()
            )));
        }
    };
    warn_if_readable_by_others(&path);
    let config: ConfigFile = toml::from_str(&text).map_err(|e| {
        // toml errors quote the offending line, which may hold a password: scrub it.
        for url in text
            .lines()
            .filter_map(|l| l.split_once('=').map(|(_, v)| v.trim().trim_matches('"')))
        {
            redact::register_url(url);
        }
        usage(redact::scrub(&format!(
            "invalid config file {}: {e}",
            path.display()
        )))
    })?;
    Ok(config)
}

#[cfg(unix)]
fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(path)
        && meta.permissions().mode() & 0o044 != 0
    {
        // Printed at once (and only here): it matters even when the rest of the settings
        // are invalid.
        say!(
            "warning: config file {} is readable by other users and may hold credentials; run: chmod 600 {}",
            path.display(),
            path.display()
        );
    }
}

#[cfg(not(unix))]
fn warn_if_readable_by_others(_: &Path) {}

/// `--color` (else the config's `color`): `auto` colours a terminal unless `NO_COLOR` is set.
fn colour(choice: Option<ColorChoice>, env: Env, terminal: Terminal) -> bool {
    let no_color = env("NO_COLOR").is_some_and(|v| !v.is_empty());
    match choice.unwrap_or(ColorChoice::Auto) {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => terminal.stdout_tty && !no_color,
    }
}

/// The config file's `queues` and `task_map` (the profile's, else the top level's), the map
/// as `OLD=NEW` entries that `--task-map` flags add to.
fn config_lists(profile: &ConfigSection, base: &ConfigSection) -> (Vec<String>, Vec<String>) {
    let mut queues = profile
        .queues
        .clone()
        .or_else(|| base.queues.clone())
        .unwrap_or_default();
    queues.dedup();
    let task_map = profile
        .task_map
        .clone()
        .or_else(|| base.task_map.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|(old, new)| format!("{old}={new}"))
        .collect();
    (queues, task_map)
}

/// `--profile NAME`: that section of the config file (an unknown name is a usage error).
fn select_profile(config: &ConfigFile, name: Option<&str>) -> Result<ConfigSection> {
    let Some(name) = name else {
        return Ok(ConfigSection::default());
    };
    config.profiles.get(name).cloned().ok_or_else(|| {
        let known: Vec<&str> = config.profiles.keys().map(String::as_str).collect();
        usage(format!(
            "unknown profile {name:?}; the config file defines: {}",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        ))
    })
}

/// The CA file and client identity for RabbitMQ, read and checked now.
fn tls_files(
    ca_file: Option<PathBuf>,
    client_cert: Option<PathBuf>,
    client_key: Option<PathBuf>,
) -> Result<TlsFiles> {
    Ok(TlsFiles {
        ca: ca_file
            .as_deref()
            .map(|p| tls::load_ca_file(p, "--amqp-ca-file"))
            .transpose()
            .map_err(usage)?,
        client: match (client_cert, client_key) {
            (Some(c), Some(k)) => Some(tls::load_client_identity(&c, &k).map_err(usage)?),
            (None, None) => None,
            (Some(_), None) => {
                return Err(usage(
                    "--amqp-client-cert needs --amqp-client-key (the certificate's private key)",
                ));
            }
            (None, Some(_)) => {
                return Err(usage(
                    "--amqp-client-key needs --amqp-client-cert (the certificate it belongs to)",
                ));
            }
        },
    })
}

impl Settings {
    pub(crate) fn from_env(global: &GlobalArgs) -> Result<Settings> {
        Settings::build(global, &|k| std::env::var(k).ok(), Terminal::detect())
    }

    pub(crate) fn build(g: &GlobalArgs, env: Env, terminal: Terminal) -> Result<Settings> {
        let config = load_config(g.config.clone(), env)?;
        let profile_name = g.profile.clone().or_else(|| non_empty(env("DLQ_PROFILE")));
        let profile = select_profile(&config, profile_name.as_deref())?;
        let layers = Layers {
            env,
            profile: &profile,
            base: &config.base,
        };
        let endpoints = layers.endpoints(g)?;
        let output = g
            .output
            .map(OutputFormat::from)
            .or(profile.output)
            .or(config.base.output)
            .unwrap_or(OutputFormat::Table);
        let color = colour(
            g.color.or(profile.color).or(config.base.color),
            env,
            terminal,
        );
        let (config_queues, config_task_map) = config_lists(&profile, &config.base);
        Ok(Settings {
            endpoints,
            profile: profile_name,
            config_queues,
            config_task_map,
            output,
            quiet: g.quiet,
            verbose: g.verbose,
            color,
            progress: terminal.stderr_tty && !g.no_progress && !g.quiet,
            terminal,
        })
    }

    /// The one output layer, as these settings shape it (built here, so that output.rs needs
    /// nothing of settings).
    pub(crate) fn printer(&self) -> crate::output::Printer {
        crate::output::Printer {
            format: self.output,
            quiet: self.quiet,
            verbose: self.verbose,
            color: self.color,
            progress: self.progress,
            stdout_tty: self.terminal.stdout_tty,
            interactive: self.terminal.stdin_tty && self.terminal.stderr_tty,
        }
    }
}

/// Where a setting may come from, in precedence order: flag > env > profile > top level.
struct Layers<'a> {
    env: Env<'a>,
    profile: &'a ConfigSection,
    base: &'a ConfigSection,
}

type Key<T> = fn(&ConfigSection) -> &Option<T>;

impl Layers<'_> {
    fn pick(&self, flag: &Option<String>, vars: &[&str], key: Key<String>) -> Option<String> {
        flag.clone()
            .or_else(|| vars.iter().find_map(|v| non_empty((self.env)(v))))
            .or_else(|| key(self.profile).clone())
            .or_else(|| key(self.base).clone())
    }

    fn path(&self, flag: &Option<PathBuf>, var: &str, key: Key<PathBuf>) -> Option<PathBuf> {
        flag.clone()
            .or_else(|| non_empty((self.env)(var)).map(PathBuf::from))
            .or_else(|| key(self.profile).clone())
            .or_else(|| key(self.base).clone())
    }

    /// Every endpoint, validated and built; every URL registered for scrubbing first, so
    /// that no error about one can show its password.
    fn endpoints(&self, g: &GlobalArgs) -> Result<Endpoints> {
        let database_raw = self.pick(
            &g.database_url,
            &["DLQ_DATABASE_URL", "DATABASE_URL"],
            |c| &c.database_url,
        );
        let amqp_url = self.pick(&g.amqp_url, &["DLQ_AMQP_URL", "AMQP_URL"], |c| &c.amqp_url);
        let management_url = self.pick(&g.management_url, &["DLQ_MANAGEMENT_URL"], |c| {
            &c.management_url
        });
        let broker_raw = self.pick(
            &g.broker_url,
            &["DLQ_BROKER_URL", "CELERY_BROKER_URL"],
            |c| &c.broker_url,
        );
        for u in [&database_raw, &amqp_url, &management_url, &broker_raw]
            .into_iter()
            .flatten()
        {
            redact::register_url(u);
        }
        let database = self.database(g, database_raw.as_deref())?;
        let vhost = self.pick(&g.vhost, &["DLQ_VHOST"], |c| &c.vhost);
        let rabbit_is_default = amqp_url.is_none() && management_url.is_none() && vhost.is_none();
        let amqp_url = amqp_url.unwrap_or_else(|| DEFAULT_AMQP_URL.to_string());
        validate_amqp_url(&amqp_url).map_err(usage)?;
        if let Some(m) = &management_url {
            validate_http_url(m).map_err(usage)?;
        }
        let tls_files = self.tls_files(g)?;
        let audit_log = self
            .path(&g.audit_log, "DLQ_AUDIT_LOG", |c| &c.audit_log)
            .or_else(|| default_audit_log(self.env));
        let rabbit = RabbitTarget::from_url(
            &amqp_url,
            vhost.as_deref(),
            &tls_files,
            management_url.as_deref(),
        )?;
        let celery = self.celery(g, broker_raw.as_deref(), &rabbit, tls_files)?;
        Ok(Endpoints {
            rabbit,
            rabbit_is_default,
            database,
            celery,
            mailbox: Mailbox::new(&self.control_exchange(g)?),
            audit_log,
        })
    }

    /// The database and its table (the table name is checked even without a database).
    fn database(&self, g: &GlobalArgs, raw: Option<&str>) -> Result<Option<Database>> {
        let url = raw.map(DatabaseUrl::parse).transpose().map_err(usage)?;
        let table_raw = self
            .pick(&g.table, &["DLQ_TABLE"], |c| &c.table)
            .unwrap_or_else(|| DEFAULT_TABLE.to_string());
        let table = TableName::parse(&table_raw).map_err(usage)?;
        Ok(url.map(|url| Database { url, table }))
    }

    fn tls_files(&self, g: &GlobalArgs) -> Result<TlsFiles> {
        let ca_file = self.path(&g.amqp_ca_file, "DLQ_AMQP_CA_FILE", |c| &c.amqp_ca_file);
        let client_cert = self.path(&g.amqp_client_cert, "DLQ_AMQP_CLIENT_CERT", |c| {
            &c.amqp_client_cert
        });
        let client_key = self.path(&g.amqp_client_key, "DLQ_AMQP_CLIENT_KEY", |c| {
            &c.amqp_client_key
        });
        tls_files(ca_file, client_cert, client_key)
    }

    /// Celery's broker: the RabbitMQ above unless `--broker-url` names another, or Redis
    /// (with kombu's transport options).
    fn celery(
        &self,
        g: &GlobalArgs,
        raw: Option<&str>,
        rabbit: &RabbitTarget,
        tls_files: TlsFiles,
    ) -> Result<CeleryBroker> {
        let key_prefix = self
            .pick(&g.redis_key_prefix, &["DLQ_REDIS_KEY_PREFIX"], |c| {
                &c.redis_key_prefix
            })
            .unwrap_or_default();
        let wait_replicas = g
            .redis_wait_replicas
            .or(self.profile.redis_wait_replicas)
            .or(self.base.redis_wait_replicas);
        let sep = self.pick(&g.redis_sep, &["DLQ_REDIS_SEP"], |c| &c.redis_sep);
        if sep.as_deref() == Some("") {
            return Err(usage(
                "--redis-sep must not be empty (kombu's default is \\x06\\x16; leave it unset to read it from the workers' bindings)",
            ));
        }
        Ok(match parse_broker_url(raw).map_err(usage)? {
            BrokerUrl::Same => CeleryBroker::Amqp(rabbit.clone()),
            BrokerUrl::Amqp(url) => {
                CeleryBroker::Amqp(RabbitTarget::from_url(&url, None, &tls_files, None)?)
            }
            BrokerUrl::Redis(url) => CeleryBroker::Redis(RedisBroker {
                url,
                tls_files,
                key_prefix,
                sep,
                wait_replicas,
            }),
        })
    }

    fn control_exchange(&self, g: &GlobalArgs) -> Result<String> {
        let name = self
            .pick(&g.control_exchange, &["DLQ_CONTROL_EXCHANGE"], |c| {
                &c.control_exchange
            })
            .unwrap_or_else(|| "celery".into());
        if name.is_empty() {
            return Err(usage(
                "--control-exchange must not be empty (Celery's default is celery)",
            ));
        }
        Ok(name)
    }
}

/// `--broker-url`, checked: which kind of broker Celery uses.
enum BrokerUrl {
    /// None given: the AMQP URL.
    Same,
    /// Another RabbitMQ: secret, never print.
    Amqp(String),
    /// Redis (`redis://`, `rediss://`, `redis+socket://`): secret, never print.
    Redis(String),
}

/// Accepts the schemes kombu's transports read; anything else names its scheme.
fn parse_broker_url(raw: Option<&str>) -> Result<BrokerUrl, String> {
    let Some(raw) = raw else {
        return Ok(BrokerUrl::Same);
    };
    let shown = redact::url(raw);
    let scheme = raw.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("amqp" | "amqps") => {
            validate_amqp_url(raw)?;
            Ok(BrokerUrl::Amqp(raw.to_string()))
        }
        Some("redis" | "rediss" | "redis+socket") => Ok(BrokerUrl::Redis(raw.to_string())),
        Some(other) => Err(format!(
            "invalid --broker-url {shown}: scheme {other}:// is not supported (amqp://, amqps://, redis://, rediss:// or redis+socket://)"
        )),
        None => Err(format!(
            "invalid --broker-url {shown}: expected a URL such as redis://host:6379/0"
        )),
    }
}

fn validate_amqp_url(raw: &str) -> Result<(), String> {
    let shown = redact::url(raw);
    let u = url::Url::parse(raw)
        .map_err(|e| format!("invalid AMQP URL {shown}: {e}{}", redact::encoding_hint(e)))?;
    if !matches!(u.scheme(), "amqp" | "amqps") {
        return Err(format!(
            "invalid AMQP URL {shown}: scheme must be amqp:// or amqps://"
        ));
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Err(format!("invalid AMQP URL {shown}: missing host"));
    }
    Ok(())
}

fn validate_http_url(raw: &str) -> Result<(), String> {
    let shown = redact::url(raw);
    let u = url::Url::parse(raw).map_err(|e| format!("invalid management URL {shown}: {e}"))?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(format!(
            "invalid management URL {shown}: scheme must be http:// or https://"
        ));
    }
    Ok(())
}

impl From<crate::cli::OutputArg> for OutputFormat {
    fn from(a: crate::cli::OutputArg) -> Self {
        use crate::output::OutputFormat as F;
        match a {
            crate::cli::OutputArg::Table => F::Table,
            crate::cli::OutputArg::Json => F::Json,
            crate::cli::OutputArg::Ndjson => F::Ndjson,
            crate::cli::OutputArg::Csv => F::Csv,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn build(g: &GlobalArgs, env: &[(&str, &str)]) -> Result<Settings> {
        let map: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::build(g, &move |k| map.get(k).cloned(), Terminal::default())
    }

    const DB: (&str, &str) = ("DATABASE_URL", "sqlite://x.db");

    fn table(s: &Settings) -> &str {
        &s.endpoints.database.as_ref().unwrap().table.name
    }

    #[test]
    fn precedence_flag_env_config_default() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("config.toml");
        std::fs::write(
            &cfg,
            "table = \"from_config\"\namqp_url = \"amqp://cfg/%2f\"\n[profiles.prod]\ntable = \"from_profile\"\n",
        )
        .unwrap();
        let cfg_s = cfg.to_str().unwrap();
        let s = build(&GlobalArgs::default(), &[("DLQ_CONFIG", cfg_s), DB]).unwrap();
        assert_eq!(table(&s), "from_config");
        assert_eq!(s.endpoints.rabbit.uri.authority.host, "cfg");
        let s = build(
            &GlobalArgs {
                profile: Some("prod".into()),
                ..Default::default()
            },
            &[("DLQ_CONFIG", cfg_s), DB],
        )
        .unwrap();
        assert_eq!(table(&s), "from_profile");
        let s = build(
            &GlobalArgs::default(),
            &[("DLQ_CONFIG", cfg_s), ("DLQ_TABLE", "from_env"), DB],
        )
        .unwrap();
        assert_eq!(table(&s), "from_env");
        let g = GlobalArgs {
            table: Some("from_flag".into()),
            ..Default::default()
        };
        let s = build(&g, &[("DLQ_CONFIG", cfg_s), ("DLQ_TABLE", "from_env"), DB]).unwrap();
        assert_eq!(table(&s), "from_flag");
        let s = build(&GlobalArgs::default(), &[DB]).unwrap();
        assert_eq!(table(&s), DEFAULT_TABLE);
        assert_eq!(
            s.endpoints.rabbit.shown,
            "amqp://guest:***@127.0.0.1:5672/%2f"
        );
        assert!(s.endpoints.rabbit_is_default);
    }

    #[test]
    fn database_url_env_fallback() {
        let s = build(
            &GlobalArgs::default(),
            &[("DATABASE_URL", "postgres://h/db")],
        )
        .unwrap();
        assert_eq!(
            s.endpoints.database.unwrap().url.dialect,
            crate::source::table::Dialect::Postgres
        );
        let s = build(
            &GlobalArgs::default(),
            &[
                ("DATABASE_URL", "postgres://h/db"),
                ("DLQ_DATABASE_URL", "mariadb://h/db"),
            ],
        )
        .unwrap();
        let db = s.endpoints.database.unwrap().url;
        assert_eq!(db.dialect, crate::source::table::Dialect::MySql);
        assert_eq!(db.url, "mysql://h/db");
    }

    #[test]
    fn bad_values_are_usage_errors_without_secrets() {
        let g = GlobalArgs {
            database_url: Some("oracle://u:topsecret@h/db".into()),
            ..Default::default()
        };
        let e = build(&g, &[]).unwrap_err();
        assert_eq!(crate::error::exit_for(&e), crate::error::Exit::Usage);
        assert!(!format!("{e:#}").contains("topsecret"), "{e:#}");
        let g = GlobalArgs {
            table: Some("x; drop table y".into()),
            ..Default::default()
        };
        assert!(format!("{:#}", build(&g, &[]).unwrap_err()).contains("invalid table name"));
        let g = GlobalArgs {
            amqp_url: Some("http://u:pw@h".into()),
            ..Default::default()
        };
        assert!(format!("{:#}", build(&g, &[]).unwrap_err()).contains("amqp://"));
        let g = GlobalArgs {
            profile: Some("nope".into()),
            ..Default::default()
        };
        assert!(format!("{:#}", build(&g, &[]).unwrap_err()).contains("unknown profile"));
    }

    #[test]
    fn unknown_config_key_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("c.toml");
        std::fs::write(&cfg, "tabel = \"x\"\n").unwrap();
        let e = build(
            &GlobalArgs::default(),
            &[("DLQ_CONFIG", cfg.to_str().unwrap())],
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("tabel"), "{e:#}");
    }
}
