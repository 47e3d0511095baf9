//! The settings reference: one row per setting, the single source of `docs/reference.md`
//! (written by `generated::files`) and of the "Environment:" text of `dlq --help`. Tests
//! below fail when a row and the code disagree: a global flag without a row, a row naming a
//! flag that does not exist, an environment variable or config key settings do not read (in
//! the order given), a `[env: ...]` in a flag's help that differs from its row.
//!
//! Precedence, for every row: flag > environment (in the order listed) > config profile >
//! config top level > default (`settings::Settings::build`).

/// One setting.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Setting {
    /// The global long flag, without `--` (`None`: config file only).
    pub(crate) flag: Option<&'static str>,
    /// Its short flag, if any.
    pub(crate) short: Option<char>,
    /// Environment variables, in precedence order.
    pub(crate) env: &'static [&'static str],
    /// Key in the config file (top level or a profile).
    pub(crate) config_key: Option<&'static str>,
    /// What applies when nothing sets it (Markdown).
    pub(crate) default: &'static str,
    /// What it is (Markdown).
    pub(crate) description: &'static str,
}

const fn row(
    flag: Option<&'static str>,
    env: &'static [&'static str],
    config_key: Option<&'static str>,
    default: &'static str,
    description: &'static str,
) -> Setting {
    Setting {
        flag,
        short: None,
        env,
        config_key,
        default,
        description,
    }
}

/// Every setting, in the order of `dlq --help`'s global options.
pub(crate) const SETTINGS: &[Setting] = &[
    row(
        Some("config"),
        &["DLQ_CONFIG"],
        None,
        "`$XDG_CONFIG_HOME/dlq/config.toml`, else `~/.config/dlq/config.toml` (may be absent)",
        "Config file; one named with the flag or the variable must exist",
    ),
    row(
        Some("profile"),
        &["DLQ_PROFILE"],
        None,
        "none: the top level alone",
        "Named profile of the config file (`[profiles.NAME]`), overlaid on its top level",
    ),
    row(
        Some("database-url"),
        &["DLQ_DATABASE_URL", "DATABASE_URL"],
        Some("database_url"),
        "none",
        "Database holding the failed-task table: `postgres://`, `mysql://`, `mariadb://`, `sqlite://`",
    ),
    row(
        Some("table"),
        &["DLQ_TABLE"],
        Some("table"),
        "`tasks_falhadas`",
        "Failed-task table, optionally schema-qualified",
    ),
    row(
        Some("amqp-url"),
        &["DLQ_AMQP_URL", "AMQP_URL"],
        Some("amqp_url"),
        "`amqp://guest:guest@127.0.0.1:5672/%2f`",
        "RabbitMQ AMQP URL (`amqps://` for TLS)",
    ),
    row(
        Some("management-url"),
        &["DLQ_MANAGEMENT_URL"],
        Some("management_url"),
        "the AMQP host on port 15672 (`https` on 15671 for `amqps://`), with the AMQP credentials",
        "RabbitMQ management API URL",
    ),
    row(
        Some("amqp-ca-file"),
        &["DLQ_AMQP_CA_FILE"],
        Some("amqp_ca_file"),
        "none: the system's roots only",
        "CA certificates (PEM) trusted for `amqps://`, `rediss://` and an https management API, on top of the system's ([TLS](CONFIGURATION.md#tls))",
    ),
    row(
        Some("amqp-client-cert"),
        &["DLQ_AMQP_CLIENT_CERT"],
        Some("amqp_client_cert"),
        "none",
        "Client certificate (PEM, leaf first) for `amqps://` and `rediss://`, with `--amqp-client-key`",
    ),
    row(
        Some("amqp-client-key"),
        &["DLQ_AMQP_CLIENT_KEY"],
        Some("amqp_client_key"),
        "none",
        "Unencrypted private key (PEM) of `--amqp-client-cert`",
    ),
    row(
        Some("vhost"),
        &["DLQ_VHOST"],
        Some("vhost"),
        "from the AMQP URL",
        "RabbitMQ virtual host, for AMQP and the management API",
    ),
    row(
        Some("broker-url"),
        &["DLQ_BROKER_URL", "CELERY_BROKER_URL"],
        Some("broker_url"),
        "the AMQP URL",
        "Where Celery tasks are dispatched: `amqp://`, `amqps://`, `redis://`, `rediss://`, `redis+socket://` ([Redis](REDIS.md))",
    ),
    row(
        Some("redis-key-prefix"),
        &["DLQ_REDIS_KEY_PREFIX"],
        Some("redis_key_prefix"),
        "none",
        "Redis: the app's `global_keyprefix` transport option",
    ),
    row(
        Some("redis-sep"),
        &["DLQ_REDIS_SEP"],
        Some("redis_sep"),
        "read from the workers' bindings, else kombu's `\\x06\\x16`",
        "Redis: the app's `sep` transport option",
    ),
    row(
        Some("control-exchange"),
        &["DLQ_CONTROL_EXCHANGE"],
        Some("control_exchange"),
        "`celery`",
        "Celery's `control_exchange`: workers answer on `NAME.pidbox`",
    ),
    row(
        Some("redis-wait-replicas"),
        &[],
        Some("redis_wait_replicas"),
        "none: no `WAIT`",
        "Redis: after each group of pushes, `WAIT N` replicas before rows are marked",
    ),
    Setting {
        short: Some('o'),
        ..row(
            Some("output"),
            &[],
            Some("output"),
            "`table`",
            "Output format: `table`, `json`, `ndjson`, `csv`",
        )
    },
    Setting {
        short: Some('q'),
        ..row(
            Some("quiet"),
            &[],
            None,
            "off",
            "Print only data and errors",
        )
    },
    Setting {
        short: Some('v'),
        ..row(
            Some("verbose"),
            &[],
            None,
            "off",
            "More diagnostics on stderr (`-vv` for more)",
        )
    },
    row(
        Some("color"),
        &[],
        Some("color"),
        "`auto`: colour on a terminal unless `NO_COLOR` is set",
        "When to use colour: `auto`, `always`, `never`",
    ),
    row(
        Some("no-progress"),
        &[],
        None,
        "progress bars on a terminal",
        "Never draw progress bars",
    ),
    row(
        Some("audit-log"),
        &["DLQ_AUDIT_LOG"],
        Some("audit_log"),
        "`$XDG_STATE_HOME/dlq/audit.ndjson`, else `~/.local/state/dlq/audit.ndjson`",
        "Audit trail (NDJSON) appended by every replay and `archive --delete` ([audit](ARCHIVE.md#audit-trail))",
    ),
    row(
        None,
        &[],
        Some("queues"),
        "none",
        "DLQs to list and read even without the management API (a list)",
    ),
    row(
        None,
        &[],
        Some("task_map"),
        "none",
        "Stored Celery task name -> the name to send (a table); `replay --task-map OLD=NEW` adds to it",
    ),
];

/// Environment variables read outside the settings above.
pub(crate) const OTHER_ENV: &[(&str, &str)] = &[
    (
        "NO_COLOR",
        "set and not empty: no colour under `--color auto`",
    ),
    (
        "COLUMNS",
        "the width tables are sized to, instead of the terminal's",
    ),
    (
        "DLQ_HOLD_BUDGET",
        "bytes of selected queue messages a planned replay keeps in memory (default 192 MiB; [replay](REPLAY.md))",
    ),
];

/// The Markdown reference, `docs/reference.md`.
pub(crate) fn markdown() -> String {
    let mut out = String::from(
        "<!-- Generated from src/reference.rs by `DLQ_BLESS=1 cargo test --test it generated`; do not edit. -->\n\
         # Configuration reference\n\n\
         Every setting, with its flag, environment variables and config file key. Precedence is\n\
         flag > environment (in the order listed) > config profile > config top level > default.\n\
         The config file and profiles: [CONFIGURATION.md](CONFIGURATION.md#config-file).\n\n\
         | flag | environment | config key | default | description |\n\
         |---|---|---|---|---|\n",
    );
    for s in SETTINGS {
        let flag = match (s.short, s.flag) {
            (Some(c), Some(l)) => format!("`-{c}`, `--{l}`"),
            (None, Some(l)) => format!("`--{l}`"),
            _ => String::new(),
        };
        let env = s
            .env
            .iter()
            .map(|e| format!("`{e}`"))
            .collect::<Vec<_>>()
            .join(", then ");
        let key = s.config_key.map(|k| format!("`{k}`")).unwrap_or_default();
        out.push_str(&format!(
            "| {flag} | {env} | {key} | {} | {} |\n",
            s.default.replace('|', "\\|"),
            s.description.replace('|', "\\|")
        ));
    }
    out.push_str("\nAlso read from the environment:\n\n| variable | effect |\n|---|---|\n");
    for (name, effect) in OTHER_ENV {
        out.push_str(&format!("| `{name}` | {effect} |\n"));
    }
    out
}

/// The environment part of `dlq --help`'s text after the options (`cli::command`): the
/// variables of the rows above, wrapped, then those read elsewhere.
pub(crate) fn environment_help() -> String {
    let mut names: Vec<String> = Vec::new();
    for s in SETTINGS {
        if let Some((first, rest)) = s.env.split_first() {
            names.push(if rest.is_empty() {
                first.to_string()
            } else {
                format!("{first} (then {})", rest.join(", then "))
            });
        }
    }
    names.extend(OTHER_ENV.iter().map(|(n, _)| n.to_string()));
    let mut text = String::new();
    let mut line = String::from("Environment:");
    for (i, name) in names.iter().enumerate() {
        let sep = if i + 1 == names.len() { '.' } else { ',' };
        let item = format!("{name}{sep}");
        if line.len() + 1 + item.len() > 92 {
            text.push_str(&line);
            text.push('\n');
            line = item;
        } else {
            line.push(' ');
            line.push_str(&item);
        }
    }
    text.push_str(&line);
    text.push_str(
        "\nConfig file: $XDG_CONFIG_HOME/dlq/config.toml (precedence: flag > env > config > default).",
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{Settings, Terminal};
    use clap::Parser;
    use std::collections::{BTreeSet, HashMap};

    /// Where a value comes from.
    #[derive(Debug, Clone, Copy)]
    enum Layer {
        Flag,
        Env(&'static str),
        Profile,
        Top,
    }

    /// How to give a setting a value and see it arrive: the raw value for value number `i`
    /// (0 or 1), the same as a TOML value, and what the outcome (`Settings`' debug text, or
    /// the error) shows when that value arrived.
    struct Probe {
        value: fn(usize) -> String,
        toml: fn(&str) -> String,
        shows: fn(&str) -> String,
    }

    fn quoted(v: &str) -> String {
        format!("{v:?}")
    }

    fn itself(v: &str) -> String {
        v.to_string()
    }

    fn word(i: usize) -> String {
        ["probezero", "probeone"][i].to_string()
    }

    fn probe(name: &str) -> Probe {
        let p = |value, shows| Probe {
            value,
            toml: quoted,
            shows,
        };
        match name {
            "config" => p(|i| format!("/nonexistent/{}.toml", word(i)), itself),
            "profile" => p(word, |v| format!("unknown profile {v:?}")),
            "database_url" => p(|i| format!("postgres://{}/db", word(i)), itself),
            "amqp_url" => p(|i| format!("amqp://{}/%2f", word(i)), itself),
            "management_url" => p(|i| format!("http://{}:15672/", word(i)), itself),
            "broker_url" => p(|i| format!("redis://{}:6379/0", word(i)), itself),
            "amqp_ca_file" | "amqp_client_cert" | "amqp_client_key" => {
                p(|i| format!("/nonexistent/{}.pem", word(i)), itself)
            }
            "audit_log" => p(|i| format!("/nonexistent/{}.ndjson", word(i)), itself),
            "table" | "vhost" | "redis_key_prefix" | "redis_sep" => p(word, quoted),
            "control_exchange" => p(word, |v| format!("\"{v}.pidbox\"")),
            "redis_wait_replicas" => Probe {
                value: |i| (11 + i).to_string(),
                toml: itself,
                shows: |v| format!("wait_replicas: Some({v})"),
            },
            "output" => p(
                |i| ["json", "ndjson"][i].to_string(),
                |v| format!("output: {}", if v == "json" { "Json" } else { "Ndjson" }),
            ),
            "color" => p(
                |i| ["always", "never"][i].to_string(),
                |v| format!("color: {}", v == "always"),
            ),
            "queues" => Probe {
                value: word,
                toml: |v| format!("[{v:?}]"),
                shows: |v| format!("config_queues: [{v:?}]"),
            },
            "task_map" => Probe {
                value: word,
                toml: |v| format!("{{ old = {v:?} }}"),
                shows: |v| format!("\"old={v}\""),
            },
            other => panic!("no probe for the setting {other:?}: add one here"),
        }
    }

    fn name(s: &Setting) -> &'static str {
        s.config_key.or(s.flag).unwrap()
    }

    /// Builds settings with each of `given` (a layer and its value) and nothing else, and
    /// returns what came out: the settings' debug text, or the error.
    fn outcome(s: &Setting, given: &[(Layer, String)], dir: &std::path::Path) -> String {
        let pr = probe(name(s));
        let mut argv = vec!["dlq".to_string()];
        let mut env: HashMap<String, String> = HashMap::new();
        let (mut top, mut profile) = (String::new(), String::new());
        for (layer, v) in given {
            match layer {
                Layer::Flag => argv.extend([format!("--{}", s.flag.unwrap()), v.clone()]),
                Layer::Env(var) => {
                    env.insert(var.to_string(), v.clone());
                }
                Layer::Top => top = format!("{} = {}\n", s.config_key.unwrap(), (pr.toml)(v)),
                Layer::Profile => {
                    profile = format!("{} = {}\n", s.config_key.unwrap(), (pr.toml)(v));
                    argv.extend(["--profile".into(), "p".into()]);
                }
            }
        }
        if !top.is_empty() || !profile.is_empty() {
            let path = dir.join("config.toml");
            std::fs::write(&path, format!("{top}[profiles.p]\n{profile}")).unwrap();
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
            }
            env.insert("DLQ_CONFIG".into(), path.to_str().unwrap().into());
        }
        // A client certificate and its key are read together: give the other one.
        match s.flag {
            Some("amqp-client-cert") => argv.extend([
                "--amqp-client-key".into(),
                "/nonexistent/companion.pem".into(),
            ]),
            Some("amqp-client-key") => {
                let own = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
                let cert = dir.join("companion-cert.pem");
                std::fs::write(&cert, own.cert.pem()).unwrap();
                argv.extend(["--amqp-client-cert".into(), cert.to_str().unwrap().into()]);
            }
            _ => {}
        }
        // The table is part of the database endpoint, kombu's Redis options of a Redis
        // broker: give them one.
        if name(s) == "table" {
            env.insert("DLQ_DATABASE_URL".into(), "sqlite://probe.db".into());
        }
        if name(s).starts_with("redis_") {
            env.insert("DLQ_BROKER_URL".into(), "redis://probe:6379/0".into());
        }
        argv.push("list".into());
        let cli = crate::cli::Cli::try_parse_from(&argv).unwrap();
        match Settings::build(
            &cli.global,
            &move |k| env.get(k).cloned(),
            Terminal::default(),
        ) {
            Ok(settings) => format!("{settings:?}"),
            Err(e) => format!("{e:#}"),
        }
    }

    fn layers(s: &Setting) -> Vec<Layer> {
        let mut out = Vec::new();
        if s.flag.is_some() {
            out.push(Layer::Flag);
        }
        out.extend(s.env.iter().map(|e| Layer::Env(e)));
        if s.config_key.is_some() {
            out.extend([Layer::Profile, Layer::Top]);
        }
        out
    }

    /// Every way a row says a setting can be given works alone, and each beats the next
    /// one in the documented order.
    #[test]
    fn every_flag_variable_and_config_key_arrives_in_the_documented_order() {
        let dir = tempfile::tempdir().unwrap();
        for s in SETTINGS {
            if s.env.is_empty() && s.config_key.is_none() {
                continue; // a bare flag: the clap test below covers it
            }
            let pr = probe(name(s));
            let (v0, v1) = ((pr.value)(0), (pr.value)(1));
            let (shows0, shows1) = ((pr.shows)(&v0), (pr.shows)(&v1));
            let baseline = outcome(s, &[], dir.path());
            assert!(
                !baseline.contains(&shows0),
                "{}: baseline shows {shows0}",
                name(s)
            );
            let ls = layers(s);
            for l in &ls {
                let got = outcome(s, &[(*l, v0.clone())], dir.path());
                assert!(
                    got.contains(&shows0),
                    "{}: given through {l:?}, {v0:?} did not arrive: {got}",
                    name(s)
                );
            }
            for pair in ls.windows(2) {
                let got = outcome(
                    s,
                    &[(pair[0], v0.clone()), (pair[1], v1.clone())],
                    dir.path(),
                );
                assert!(
                    got.contains(&shows0) && !got.contains(&shows1),
                    "{}: {:?} should beat {:?}: {got}",
                    name(s),
                    pair[0],
                    pair[1]
                );
            }
        }
    }

    fn global_args() -> Vec<clap::Arg> {
        crate::cli::command()
            .get_arguments()
            .filter(|a| a.is_global_set())
            .cloned()
            .collect()
    }

    /// Every global flag has a row and every row's flag is a global flag, with the same
    /// short flag; a flag's help names exactly its row's variables as `[env: ...]`.
    #[test]
    fn global_flags_and_rows_match() {
        let args = global_args();
        let flags: BTreeSet<&str> = args.iter().filter_map(|a| a.get_long()).collect();
        let rows: BTreeSet<&str> = SETTINGS.iter().filter_map(|s| s.flag).collect();
        assert_eq!(
            flags, rows,
            "global flags (left) vs rows of src/reference.rs (right)"
        );
        for s in SETTINGS {
            let Some(long) = s.flag else { continue };
            let arg = args.iter().find(|a| a.get_long() == Some(long)).unwrap();
            assert_eq!(arg.get_short(), s.short, "--{long}: short flag");
            let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
            if s.env.is_empty() {
                assert!(
                    !help.contains("[env:"),
                    "--{long}: help names [env: ...]: {help}"
                );
            } else {
                let want = format!("[env: {}]", s.env.join(", "));
                assert!(help.contains(&want), "--{long}: help lacks {want}: {help}");
            }
        }
    }

    /// A config file section accepts exactly the keys of the rows (its error for an unknown
    /// key lists the keys it knows).
    #[test]
    fn config_keys_and_rows_match() {
        let err = toml::from_str::<crate::settings::ConfigSection>("no_such_key_x = 1")
            .unwrap_err()
            .to_string();
        let expected = err
            .split("expected one of")
            .nth(1)
            .unwrap_or_else(|| panic!("unexpected error: {err}"));
        let known: BTreeSet<&str> = expected.split('`').skip(1).step_by(2).collect();
        let rows: BTreeSet<&str> = SETTINGS.iter().filter_map(|s| s.config_key).collect();
        assert_eq!(known, rows, "config file keys (left) vs rows (right)");
    }

    /// The variables read outside settings are read somewhere in src/.
    #[test]
    fn other_variables_are_read_somewhere() {
        let mut text = String::new();
        let mut dirs = vec![std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    dirs.push(p);
                } else if p.extension().is_some_and(|x| x == "rs") && !p.ends_with("reference.rs") {
                    text.push_str(&std::fs::read_to_string(&p).unwrap());
                }
            }
        }
        for (name, _) in OTHER_ENV {
            assert!(
                text.contains(&format!("\"{name}\"")),
                "{name} is not read in src/"
            );
        }
    }

    #[test]
    fn help_names_every_variable() {
        let help = crate::cli::command().render_long_help().to_string();
        for s in SETTINGS {
            for e in s.env {
                assert!(help.contains(e), "{e} missing from --help");
            }
        }
    }
}
