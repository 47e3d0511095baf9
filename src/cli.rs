//! The command line: clap definitions only. `settings` turns these into validated
//! settings; nothing below that layer sees clap types.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

const EXIT_CODES: &str = "\
Exit codes:
  0  success (also when nothing matched)
  1  runtime failure (connection, permission, broker or database error)
  2  bad usage or bad input (nothing was changed)
  3  partial: some selected items could not be processed while the rest were
  130  interrupted by Ctrl-C or SIGTERM: a read, a plan being taken or an archive stops,
       gives back what it held and exits 130, as does a confirmation; a replay moving
       messages stops after the items in flight (exit 1); a second signal exits at once";

/// `dlq --help` after the options: the exit codes, then the environment variables, from the
/// settings reference (`reference::SETTINGS`).
fn after_help() -> String {
    format!("{EXIT_CODES}\n\n{}", crate::reference::environment_help())
}

const LIST_EXAMPLES: &str = "\
Examples:
  dlq list
  dlq list -Q matriculas.dlq --sample 0
  dlq list --exclude 'retry.*' -o json";

const INSPECT_EXAMPLES: &str = "\
Examples:
  dlq inspect --motivo IntegrityError
  dlq inspect -Q matriculas.dlq --id m-1 --full
  dlq inspect -e 'usuario_id' --since 2h -o ndjson";

const FILTER_EXAMPLES: &str = "\
Examples:
  dlq filter --group-by motivo
  dlq filter -Q matriculas.dlq --motivo KeyError --count
  dlq filter --task enviar_email -o ndjson > emails.ndjson";

const REPLAY_EXAMPLES: &str = "\
Examples:
  dlq replay --motivo IntegrityError --dry-run
  dlq replay --motivo IntegrityError --task-map liberar_acesso_curso=tasks.liberar_acesso_curso
  dlq replay -Q matriculas.dlq --motivo KeyError --canary 5 --yes";

const ARCHIVE_EXAMPLES: &str = "\
Examples:
  dlq archive --older-than 30d --include-replayed --to old.ndjson.gz --delete --dry-run
  dlq archive -Q matriculas.dlq --to dlq.ndjson
  dlq replay --from-file dlq.ndjson --dry-run";

const WORKERS_EXAMPLES: &str = "\
Examples:
  dlq workers
  dlq workers --full -o json
  dlq --broker-url redis://127.0.0.1:6379/0 workers";

const BROWSE_HELP: &str = "\
Keys:
  j/k, arrows   move        Enter  open          Esc  back       q  quit
  space         mark        /      pattern       :    selection (:motivo X, :task T,
  r             re-read     s      sort groups        :since 2h, :where JQ, :clear)
  R  replay     F  replay and follow each task (--follow --enable-events)
  A  archive (deletes once written)                   E  export to a file
  w  (detail) write the record to a file              ?  help

Replay and archive leave the screen for the same plan, confirmation, run and report as
`dlq replay` / `dlq archive`, and leave the same audit record. dlq browse needs a terminal:
it refuses to start when stdin or stdout is not one.

Examples:
  dlq browse
  dlq browse --read-only --refresh 10s
  dlq --profile prod browse -Q matriculas.dlq";

const AUDIT_EXAMPLES: &str = "\
Examples:
  dlq audit --since 24h
  dlq audit --run 5f0c... -o json";

#[derive(Debug, Parser)]
#[command(
    name = "dlq",
    version,
    about = "List, inspect, filter, replay and archive dead letters from RabbitMQ DLQs and Celery failed-task tables",
    after_help = after_help(),
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    #[command(flatten, next_help_heading = "Global options")]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args, Default)]
pub struct GlobalArgs {
    /// Config file [env: DLQ_CONFIG] [default: $XDG_CONFIG_HOME/dlq/config.toml]
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Named profile from the config file [env: DLQ_PROFILE]
    #[arg(long, global = true, value_name = "NAME")]
    pub profile: Option<String>,
    /// Database holding the failed-task table: postgres://, mysql://, sqlite:// [env: DLQ_DATABASE_URL, DATABASE_URL]
    #[arg(long, global = true, value_name = "URL")]
    pub database_url: Option<String>,
    /// Failed-task table, optionally schema-qualified [env: DLQ_TABLE] [default: tasks_falhadas]
    #[arg(long, global = true, value_name = "NAME")]
    pub table: Option<String>,
    /// RabbitMQ AMQP URL [env: DLQ_AMQP_URL, AMQP_URL] [default: amqp://guest:guest@127.0.0.1:5672/%2f]
    #[arg(long, global = true, value_name = "URL")]
    pub amqp_url: Option<String>,
    /// RabbitMQ management API URL [env: DLQ_MANAGEMENT_URL] [default: the AMQP host on port 15672, AMQP credentials]
    #[arg(long, global = true, value_name = "URL")]
    pub management_url: Option<String>,
    /// CA certificates (PEM) to trust for amqps:// and an https management API, on top of the
    /// system's [env: DLQ_AMQP_CA_FILE]
    #[arg(long, global = true, value_name = "PATH")]
    pub amqp_ca_file: Option<PathBuf>,
    /// Client certificate (PEM) for amqps://, with --amqp-client-key [env: DLQ_AMQP_CLIENT_CERT]
    #[arg(long, global = true, value_name = "PATH")]
    pub amqp_client_cert: Option<PathBuf>,
    /// Unencrypted private key (PEM) of --amqp-client-cert [env: DLQ_AMQP_CLIENT_KEY]
    #[arg(long, global = true, value_name = "PATH")]
    pub amqp_client_key: Option<PathBuf>,
    /// RabbitMQ virtual host [env: DLQ_VHOST] [default: from the AMQP URL]
    #[arg(long, global = true, value_name = "VHOST")]
    pub vhost: Option<String>,
    /// Where Celery tasks are dispatched: amqp://, amqps://, redis://, rediss://,
    /// redis+socket:// [env: DLQ_BROKER_URL, CELERY_BROKER_URL] [default: the AMQP URL]
    #[arg(long, global = true, value_name = "URL")]
    pub broker_url: Option<String>,
    /// Redis: the app's `global_keyprefix` transport option [env: DLQ_REDIS_KEY_PREFIX]
    #[arg(long, global = true, value_name = "PREFIX")]
    pub redis_key_prefix: Option<String>,
    /// Redis: the app's `sep` transport option [env: DLQ_REDIS_SEP] [default: read from the
    /// workers' bindings, else kombu's \x06\x16]
    #[arg(long, global = true, value_name = "SEP")]
    pub redis_sep: Option<String>,
    /// Celery's `control_exchange`: workers answer on `<NAME>.pidbox` [env:
    /// DLQ_CONTROL_EXCHANGE] [default: celery]
    #[arg(long, global = true, value_name = "NAME")]
    pub control_exchange: Option<String>,
    /// Redis: after each group of pushes, `WAIT N` replicas before rows are marked
    #[arg(long, global = true, value_name = "N")]
    pub redis_wait_replicas: Option<u32>,
    /// Output format [default: table]
    #[arg(short, long, global = true, value_enum, value_name = "FORMAT")]
    pub output: Option<OutputArg>,
    /// Print only data and errors
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// More diagnostics on stderr (repeat for more)
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// When to use colour [default: auto; NO_COLOR is honoured]
    #[arg(long, global = true, value_enum, value_name = "WHEN")]
    pub color: Option<ColorChoice>,
    /// Never draw progress bars
    #[arg(long, global = true)]
    pub no_progress: bool,
    /// Audit trail (NDJSON) appended by every replay and archive --delete [env: DLQ_AUDIT_LOG]
    /// [default: $XDG_STATE_HOME/dlq/audit.ndjson, else ~/.local/state/dlq/audit.ndjson]
    #[arg(long, global = true, value_name = "PATH")]
    pub audit_log: Option<PathBuf>,
}

/// `-o`: the clap side of `output::OutputFormat` (settings maps one to the other).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputArg {
    Table,
    Json,
    Ndjson,
    Csv,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

// Parsed once per run: the size of the biggest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Overview of every dead-letter source: counts, oldest, top reasons
    #[command(after_help = LIST_EXAMPLES)]
    List(ListArgs),
    /// Show individual dead letters (default --limit 20; --full shows everything)
    #[command(after_help = INSPECT_EXAMPLES)]
    Inspect(InspectArgs),
    /// Evaluate a selection: group it, count it, or export its records (-o ndjson)
    #[command(after_help = FILTER_EXAMPLES)]
    Filter(FilterArgs),
    /// Re-dispatch selected dead letters (table rows as Celery tasks, queue messages to where they died)
    #[command(after_help = REPLAY_EXAMPLES)]
    Replay(ReplayArgs),
    /// Write selected dead letters to an NDJSON archive, optionally deleting them from the source
    #[command(after_help = ARCHIVE_EXAMPLES)]
    Archive(ArchiveArgs),
    /// Create the failed-task table with the right columns and index
    Init(InitArgs),
    /// The live Celery workers: the queues each consumes and the tasks each registers
    #[command(after_help = WORKERS_EXAMPLES)]
    Workers(WorkersArgs),
    /// Nagios-style check: OK / WARNING / CRITICAL / UNKNOWN from pending dead letters, the
    /// age of the oldest and how many arrived lately (exit 0 / 1 / 2 / 3)
    #[command(after_help = CHECK_HELP)]
    Check(CheckArgs),
    /// Prometheus metrics of every dead-letter source: on stdout, in a textfile for
    /// node_exporter, or served on GET /metrics
    #[command(after_help = METRICS_HELP)]
    Metrics(MetricsArgs),
    /// The incident browser: sources, reason groups, records and one record's detail in the
    /// terminal, with replay, archive and export on what is marked
    #[command(after_help = BROWSE_HELP)]
    Browse(BrowseArgs),
    /// Print a shell completion script
    Completions(CompletionsArgs),
    /// The audit trail: who replayed, restored or archived (--delete) what, when, and how
    /// it ended
    #[command(after_help = AUDIT_EXAMPLES)]
    Audit(AuditArgs),
}

/// Where dead letters come from: the table (default) or RabbitMQ queues.
#[derive(Debug, Args, Default, Clone)]
pub struct SourceArgs {
    /// Act on this RabbitMQ dead-letter queue instead of the table (repeatable)
    #[arg(short = 'Q', long = "queue", value_name = "NAME")]
    pub queues: Vec<String>,
    /// Extra message header holding the error text, used for motivo (repeatable)
    #[arg(long, value_name = "NAME")]
    pub motivo_header: Vec<String>,
    /// Read a quorum queue even where that could push messages over its delivery limit
    /// (also needed when the queue type cannot be checked: management API unavailable)
    #[arg(long)]
    pub force: bool,
}

/// The selection flags, identical on every command that acts on dead letters.
#[derive(Debug, Args, Default, Clone)]
pub struct SelectionArgs {
    /// Reason contains TEXT (case-sensitive, like SQL LIKE '%TEXT%')
    #[arg(long, value_name = "TEXT")]
    pub motivo: Option<String>,
    /// Make --motivo case-insensitive
    #[arg(short = 'i', long)]
    pub ignore_case: bool,
    /// Regex over reason, task name and payload text
    #[arg(short = 'e', long, value_name = "REGEX")]
    pub pattern: Option<String>,
    /// Task name (Celery task, or for queues the queue it goes back to) (repeatable)
    #[arg(long, value_name = "NAME")]
    pub task: Vec<String>,
    /// Created at or after WHEN (RFC 3339, YYYY-MM-DD, or a duration ago like 2h)
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Created before WHEN (RFC 3339, YYYY-MM-DD, or a duration ago like 2h)
    #[arg(long, value_name = "WHEN")]
    pub until: Option<String>,
    /// Created more than DURATION ago (90m, 7d) or before an RFC 3339 time
    #[arg(long, value_name = "DURATION")]
    pub older_than: Option<String>,
    /// jq expression over the record's JSON; selected when its first output is truthy
    #[arg(long = "where", value_name = "JQ")]
    pub where_: Option<String>,
    /// Only this id (repeatable)
    #[arg(long, value_name = "ID")]
    pub id: Vec<String>,
    /// Also select rows already marked reprocessada
    #[arg(long, conflicts_with = "only_replayed")]
    pub include_replayed: bool,
    /// Select only rows already marked reprocessada
    #[arg(long)]
    pub only_replayed: bool,
    /// At most N dead letters
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
}

/// Flags every mutating command has.
#[derive(Debug, Args, Default, Clone)]
pub struct SafetyArgs {
    /// Print the plan and what would be done, change nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Do not ask for confirmation
    #[arg(short = 'y', long)]
    pub yes: bool,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Also list this queue (repeatable; works without the management API)
    #[arg(short = 'Q', long = "queue", value_name = "NAME")]
    pub queues: Vec<String>,
    /// How many top reasons to show per source
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub top: usize,
    /// Messages read (and given back) at the head of each DLQ for its oldest message and
    /// top reasons; 0 reads none [default: 100, fewer with many DLQs: about 4000 in all, at
    /// least 20 each]
    #[arg(long, value_name = "N")]
    pub sample: Option<u64>,
    /// Extra message header holding the error text, used for reasons (repeatable)
    #[arg(long, value_name = "NAME")]
    pub motivo_header: Vec<String>,
    /// Leave out discovered DLQs whose name matches this glob (`*`, `?`; repeatable)
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    #[command(flatten, next_help_heading = "Source")]
    pub source: SourceArgs,
    #[command(flatten, next_help_heading = "Selection")]
    pub selection: SelectionArgs,
    /// Show every field of every record, reasons in full
    #[arg(long)]
    pub full: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GroupBy {
    Motivo,
    Task,
    Day,
}

#[derive(Debug, Args)]
pub struct FilterArgs {
    #[command(flatten, next_help_heading = "Source")]
    pub source: SourceArgs,
    #[command(flatten, next_help_heading = "Selection")]
    pub selection: SelectionArgs,
    /// Group the selection and count each group
    #[arg(long, value_enum, value_name = "KEY", conflicts_with = "count")]
    pub group_by: Option<GroupBy>,
    /// Print only the number of selected dead letters
    #[arg(long)]
    pub count: bool,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    #[command(flatten, next_help_heading = "Source")]
    pub source: SourceArgs,
    #[command(flatten, next_help_heading = "Selection")]
    pub selection: SelectionArgs,
    #[command(flatten, next_help_heading = "Safety")]
    pub safety: SafetyArgs,
    /// Publish to this queue (table default: celery; queue default: where each message died)
    #[arg(
        long,
        value_name = "QUEUE",
        conflicts_with = "to_exchange",
        help_heading = "Target"
    )]
    pub to_queue: Option<String>,
    /// Publish to this exchange instead
    #[arg(long, value_name = "EXCHANGE", help_heading = "Target")]
    pub to_exchange: Option<String>,
    /// Routing key with --to-exchange
    #[arg(
        long,
        value_name = "KEY",
        requires = "to_exchange",
        help_heading = "Target"
    )]
    pub routing_key: Option<String>,
    /// At most N messages per second
    #[arg(long, value_name = "N", help_heading = "Replay")]
    pub rate: Option<f64>,
    /// Publishes in flight at once; also the most that a killed run can leave published but
    /// not yet marked/acked (the duplicate window). Default: 64 for table rows and archives;
    /// a queue replay adapts it from 64 up to 1024 to what the broker sustains
    #[arg(long, value_name = "N", help_heading = "Replay")]
    pub window: Option<usize>,
    /// Replay from an archive written by `dlq archive`
    #[arg(long, value_name = "FILE", help_heading = "Replay")]
    pub from_file: Option<PathBuf>,
    /// Refuse messages already replayed this many times
    #[arg(long, value_name = "N", default_value_t = 3, help_heading = "Replay")]
    pub max_replays: u32,
    /// Replay N first and stop if any of them fails again (a message back in its DLQ; a row
    /// the app stored again: same task, same args)
    #[arg(long, value_name = "N", help_heading = "Replay")]
    pub canary: Option<u64>,
    /// How long to watch the canary messages
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "30s",
        requires = "canary",
        help_heading = "Replay"
    )]
    pub canary_wait: String,
    /// Queue replay with --yes: take and select everything before moving anything (as
    /// without --yes), so a missing destination refuses the whole run
    #[arg(long, help_heading = "Replay")]
    pub plan_first: bool,
    /// jq program over each selected record's JSON (as --where sees it); its output, the
    /// edited record, gives the new .payload (and, for queue messages, .headers)
    #[arg(long, value_name = "JQ", help_heading = "Replay")]
    pub transform: Option<String>,
    #[command(flatten, next_help_heading = "Follow")]
    pub follow: FollowArgs,
    #[command(flatten, next_help_heading = "Celery workers")]
    pub workers: WorkerCheckArgs,
}

/// After Celery tasks are sent: what became of each (Celery's task events).
#[derive(Debug, Args, Default, Clone)]
pub struct FollowArgs {
    /// Follow every replayed task to its outcome (succeeded, failed again, retried, not
    /// seen) through Celery's task events; exit 3 unless every one succeeded
    #[arg(long)]
    pub follow: bool,
    /// How long to wait for the outcomes after the last task was sent
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "5m",
        requires = "follow"
    )]
    pub follow_timeout: String,
    /// Turn task events on for the run where the workers have them off (Celery's
    /// enable_events), and off again at the end
    #[arg(long, requires = "follow")]
    pub enable_events: bool,
    /// Mark a row reprocessada only once its task succeeded (rows whose task failed again
    /// or was not seen stay pending)
    #[arg(long, requires = "follow")]
    pub mark_on_success: bool,
}

/// Before Celery tasks are sent: which live workers will run them.
#[derive(Debug, Args, Default, Clone)]
pub struct WorkerCheckArgs {
    /// Send rows stored under task OLD as task NEW (repeatable; config key task_map)
    #[arg(long, value_name = "OLD=NEW")]
    pub task_map: Vec<String>,
    /// How long to wait for the workers' answers (Celery remote control)
    #[arg(long, value_name = "DURATION", default_value = "2s")]
    pub worker_timeout: String,
    /// Send Celery tasks without asking the workers first: you accept that a worker
    /// discards a task it does not register
    #[arg(long)]
    pub no_worker_check: bool,
}

#[derive(Debug, Args)]
pub struct WorkersArgs {
    /// List every registered task of each worker
    #[arg(long)]
    pub full: bool,
    /// How long to wait for the workers' answers
    #[arg(long, value_name = "DURATION", default_value = "2s")]
    pub worker_timeout: String,
}

#[derive(Debug, Args)]
pub struct ArchiveArgs {
    #[command(flatten, next_help_heading = "Source")]
    pub source: SourceArgs,
    #[command(flatten, next_help_heading = "Selection")]
    pub selection: SelectionArgs,
    #[command(flatten, next_help_heading = "Safety")]
    pub safety: SafetyArgs,
    /// Archive file (NDJSON; gzip when it ends in .gz; - for stdout)
    #[arg(long, value_name = "FILE")]
    pub to: PathBuf,
    /// Remove archived dead letters from their source once the archive is on disk
    #[arg(long)]
    pub delete: bool,
}

#[derive(Debug, Args)]
pub struct BrowseArgs {
    /// Also list this queue (repeatable; works without the management API)
    #[arg(short = 'Q', long = "queue", value_name = "NAME")]
    pub queues: Vec<String>,
    /// Extra message header holding the error text, used for motivo (repeatable)
    #[arg(long, value_name = "NAME")]
    pub motivo_header: Vec<String>,
    /// Read a quorum queue even where that could push messages over its delivery limit
    #[arg(long)]
    pub force: bool,
    /// Leave out discovered DLQs whose name matches this glob (`*`, `?`; repeatable)
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,
    /// Re-read the sources screen every DURATION while it is shown (0 never; `r` re-reads
    /// at once)
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    pub refresh: String,
    /// Look only: replay, archive and export are refused
    #[arg(long)]
    pub read_only: bool,
    #[command(flatten, next_help_heading = "Worker check")]
    pub workers: WorkerCheckArgs,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// Print the SQL instead of running it
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// Shell to generate completions for
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// The clap command, for completions, man pages and the drift test.
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

const CHECK_HELP: &str = "\
Sources: the table whenever a database is configured, plus every DLQ discovered through the
management API (and the config file's `queues`), or only the queues named with -Q.

What the levels read (a figure above a level alerts):
  pending  table: pending rows (COUNT). queue: ready messages (passive declare), nothing read
  age      table: the oldest pending criada_em. queue: the oldest death time in a sample of
           the queue's head, read and given back as `inspect` does (nothing changes)
  new      table: pending rows with criada_em within --new-within. queue: messages of that
           head sample that died within --new-within (a lower bound on a longer queue)
A queue that must not be read (quorum queue with a delivery limit, type unknown without the
management API; --force reads it) has no age or new; the first line says so.

Exit codes (the Nagios plugin convention; other dlq commands use 0 / 1 / 2 / 3 differently):
  0  OK        1  WARNING        2  CRITICAL
  3  UNKNOWN   a source unreachable, a named queue missing, a bad level (garbage, negative,
               warn above crit), nothing to check
Output: `DLQ <STATUS> - <worst sources> | <perfdata>`, then one line per source; -o json gives
status, pending, oldest_age_seconds, new and the levels per source.";

const METRICS_HELP: &str = "\
Gauges: dlq_dead_letters, dlq_oldest_age_seconds, dlq_dead_letters_by_reason (reason = the
fingerprint; the table's top 20 and `other`), dlq_replayed (table), each labelled
source=\"table|queue\", location=\"...\".
Queue depth comes from passive declare and the management API: by default no queue message is
read, so queues have no age or reasons; --sample N reads (and gives back) the first N.
Exit codes: 0 success, 1 a source unreachable (with --listen: that scrape answers 503),
2 bad usage.";

#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten, next_help_heading = "Source")]
    pub source: SourceArgs,
    /// WARNING when more than N dead letters are pending (table rows / ready messages)
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub warn_pending: Option<String>,
    /// CRITICAL when more than N dead letters are pending
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub crit_pending: Option<String>,
    /// WARNING when the oldest pending dead letter is older than DURATION (30m, 2h, 7d)
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    pub warn_age: Option<String>,
    /// CRITICAL when the oldest pending dead letter is older than DURATION
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    pub crit_age: Option<String>,
    /// WARNING when more than N dead letters arrived within --new-within (queues: in the
    /// head sample)
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub warn_new: Option<String>,
    /// CRITICAL when more than N dead letters arrived within --new-within
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub crit_new: Option<String>,
    /// The window of --warn-new / --crit-new
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "1h",
        allow_hyphen_values = true
    )]
    pub new_within: String,
    /// Messages read (and given back) at the head of each DLQ for age and new; 0 reads none
    /// [default: as `list`: 100, fewer with many DLQs]
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub sample: Option<String>,
}

#[derive(Debug, Args)]
pub struct MetricsArgs {
    #[command(flatten, next_help_heading = "Source")]
    pub source: SourceArgs,
    /// Read (and give back) the first N messages of each DLQ for its age and reasons
    /// [default: read none]
    #[arg(long, value_name = "N")]
    pub sample: Option<u64>,
    /// Write the metrics to PATH atomically (node_exporter's textfile collector: *.prom)
    #[arg(long, value_name = "PATH", conflicts_with = "listen")]
    pub textfile: Option<PathBuf>,
    /// Serve GET /metrics on ADDR (e.g. 127.0.0.1:9419) until SIGINT / SIGTERM
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// With --listen: ask the sources at most this often, whatever the scrape rate
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "30s",
        requires = "listen"
    )]
    pub interval: String,
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Records at or after WHEN (RFC 3339, YYYY-MM-DD, or a duration ago like 2h)
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Only the records of this run (its run_id, the replay id stamped on what it sent)
    #[arg(long, value_name = "ID")]
    pub run: Option<String>,
}
