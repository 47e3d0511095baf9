# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_dlq_global_optspecs
    string join \n config= profile= database-url= table= amqp-url= management-url= amqp-ca-file= amqp-client-cert= amqp-client-key= vhost= broker-url= redis-key-prefix= redis-sep= control-exchange= redis-wait-replicas= o/output= q/quiet v/verbose color= no-progress audit-log= h/help V/version
end

function __fish_dlq_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_dlq_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_dlq_using_subcommand
    set -l cmd (__fish_dlq_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c dlq -n "__fish_dlq_needs_command" -l config -d 'Config file [env: DLQ_CONFIG] [default: $XDG_CONFIG_HOME/dlq/config.toml]' -r -F
complete -c dlq -n "__fish_dlq_needs_command" -l profile -d 'Named profile from the config file [env: DLQ_PROFILE]' -r
complete -c dlq -n "__fish_dlq_needs_command" -l database-url -d 'Database holding the failed-task table: postgres://, mysql://, sqlite:// [env: DLQ_DATABASE_URL, DATABASE_URL]' -r
complete -c dlq -n "__fish_dlq_needs_command" -l table -d 'Failed-task table, optionally schema-qualified [env: DLQ_TABLE] [default: tasks_falhadas]' -r
complete -c dlq -n "__fish_dlq_needs_command" -l amqp-url -d 'RabbitMQ AMQP URL [env: DLQ_AMQP_URL, AMQP_URL] [default: amqp://guest:guest@127.0.0.1:5672/%2f]' -r
complete -c dlq -n "__fish_dlq_needs_command" -l management-url -d 'RabbitMQ management API URL [env: DLQ_MANAGEMENT_URL] [default: the AMQP host on port 15672, AMQP credentials]' -r
complete -c dlq -n "__fish_dlq_needs_command" -l amqp-ca-file -d 'CA certificates (PEM) to trust for amqps:// and an https management API, on top of the system\'s [env: DLQ_AMQP_CA_FILE]' -r -F
complete -c dlq -n "__fish_dlq_needs_command" -l amqp-client-cert -d 'Client certificate (PEM) for amqps://, with --amqp-client-key [env: DLQ_AMQP_CLIENT_CERT]' -r -F
complete -c dlq -n "__fish_dlq_needs_command" -l amqp-client-key -d 'Unencrypted private key (PEM) of --amqp-client-cert [env: DLQ_AMQP_CLIENT_KEY]' -r -F
complete -c dlq -n "__fish_dlq_needs_command" -l vhost -d 'RabbitMQ virtual host [env: DLQ_VHOST] [default: from the AMQP URL]' -r
complete -c dlq -n "__fish_dlq_needs_command" -l broker-url -d 'Where Celery tasks are dispatched: amqp://, amqps://, redis://, rediss://, redis+socket:// [env: DLQ_BROKER_URL, CELERY_BROKER_URL] [default: the AMQP URL]' -r
complete -c dlq -n "__fish_dlq_needs_command" -l redis-key-prefix -d 'Redis: the app\'s `global_keyprefix` transport option [env: DLQ_REDIS_KEY_PREFIX]' -r
complete -c dlq -n "__fish_dlq_needs_command" -l redis-sep -d 'Redis: the app\'s `sep` transport option [env: DLQ_REDIS_SEP] [default: read from the workers\' bindings, else kombu\'s \\x06\\x16]' -r
complete -c dlq -n "__fish_dlq_needs_command" -l control-exchange -d 'Celery\'s `control_exchange`: workers answer on `<NAME>.pidbox` [env: DLQ_CONTROL_EXCHANGE] [default: celery]' -r
complete -c dlq -n "__fish_dlq_needs_command" -l redis-wait-replicas -d 'Redis: after each group of pushes, `WAIT N` replicas before rows are marked' -r
complete -c dlq -n "__fish_dlq_needs_command" -s o -l output -d 'Output format [default: table]' -r -f -a "table\t''
json\t''
ndjson\t''
csv\t''"
complete -c dlq -n "__fish_dlq_needs_command" -l color -d 'When to use colour [default: auto; NO_COLOR is honoured]' -r -f -a "auto\t''
always\t''
never\t''"
complete -c dlq -n "__fish_dlq_needs_command" -l audit-log -d 'Audit trail (NDJSON) appended by every replay and archive --delete [env: DLQ_AUDIT_LOG] [default: $XDG_STATE_HOME/dlq/audit.ndjson, else ~/.local/state/dlq/audit.ndjson]' -r -F
complete -c dlq -n "__fish_dlq_needs_command" -s q -l quiet -d 'Print only data and errors'
complete -c dlq -n "__fish_dlq_needs_command" -s v -l verbose -d 'More diagnostics on stderr (repeat for more)'
complete -c dlq -n "__fish_dlq_needs_command" -l no-progress -d 'Never draw progress bars'
complete -c dlq -n "__fish_dlq_needs_command" -s h -l help -d 'Print help'
complete -c dlq -n "__fish_dlq_needs_command" -s V -l version -d 'Print version'
complete -c dlq -n "__fish_dlq_needs_command" -f -a "list" -d 'Overview of every dead-letter source: counts, oldest, top reasons'
complete -c dlq -n "__fish_dlq_needs_command" -f -a "inspect" -d 'Show individual dead letters (default --limit 20; --full shows everything)'
complete -c dlq -n "__fish_dlq_needs_command" -f -a "filter" -d 'Evaluate a selection: group it, count it, or export its records (-o ndjson)'
complete -c dlq -n "__fish_dlq_needs_command" -f -a "replay" -d 'Re-dispatch selected dead letters (table rows as Celery tasks, queue messages to where they died)'
complete -c dlq -n "__fish_dlq_needs_command" -f -a "archive" -d 'Write selected dead letters to an NDJSON archive, optionally deleting them from the source'
complete -c dlq -n "__fish_dlq_needs_command" -f -a "init" -d 'Create the failed-task table with the right columns and index'
complete -c dlq -n "__fish_dlq_needs_command" -f -a "workers" -d 'The live Celery workers: the queues each consumes and the tasks each registers'
complete -c dlq -n "__fish_dlq_needs_command" -f -a "check" -d 'Nagios-style check: OK / WARNING / CRITICAL / UNKNOWN from pending dead letters, the age of the oldest and how many arrived lately (exit 0 / 1 / 2 / 3)'
complete -c dlq -n "__fish_dlq_needs_command" -f -a "metrics" -d 'Prometheus metrics of every dead-letter source: on stdout, in a textfile for node_exporter, or served on GET /metrics'
complete -c dlq -n "__fish_dlq_needs_command" -f -a "browse" -d 'The incident browser: sources, reason groups, records and one record\'s detail in the terminal, with replay, archive and export on what is marked'
complete -c dlq -n "__fish_dlq_needs_command" -f -a "completions" -d 'Print a shell completion script'
complete -c dlq -n "__fish_dlq_needs_command" -f -a "audit" -d 'The audit trail: who replayed, restored or archived (--delete) what, when, and how it ended'
complete -c dlq -n "__fish_dlq_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c dlq -n "__fish_dlq_using_subcommand list" -s Q -l queue -d 'Also list this queue (repeatable; works without the management API)' -r
complete -c dlq -n "__fish_dlq_using_subcommand list" -l top -d 'How many top reasons to show per source' -r
complete -c dlq -n "__fish_dlq_using_subcommand list" -l sample -d 'Messages read (and given back) at the head of each DLQ for its oldest message and top reasons; 0 reads none [default: 100, fewer with many DLQs: about 4000 in all, at least 20 each]' -r
complete -c dlq -n "__fish_dlq_using_subcommand list" -l motivo-header -d 'Extra message header holding the error text, used for reasons (repeatable)' -r
complete -c dlq -n "__fish_dlq_using_subcommand list" -l exclude -d 'Leave out discovered DLQs whose name matches this glob (`*`, `?`; repeatable)' -r
complete -c dlq -n "__fish_dlq_using_subcommand list" -l config -d 'Config file [env: DLQ_CONFIG] [default: $XDG_CONFIG_HOME/dlq/config.toml]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand list" -l profile -d 'Named profile from the config file [env: DLQ_PROFILE]' -r
complete -c dlq -n "__fish_dlq_using_subcommand list" -l database-url -d 'Database holding the failed-task table: postgres://, mysql://, sqlite:// [env: DLQ_DATABASE_URL, DATABASE_URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand list" -l table -d 'Failed-task table, optionally schema-qualified [env: DLQ_TABLE] [default: tasks_falhadas]' -r
complete -c dlq -n "__fish_dlq_using_subcommand list" -l amqp-url -d 'RabbitMQ AMQP URL [env: DLQ_AMQP_URL, AMQP_URL] [default: amqp://guest:guest@127.0.0.1:5672/%2f]' -r
complete -c dlq -n "__fish_dlq_using_subcommand list" -l management-url -d 'RabbitMQ management API URL [env: DLQ_MANAGEMENT_URL] [default: the AMQP host on port 15672, AMQP credentials]' -r
complete -c dlq -n "__fish_dlq_using_subcommand list" -l amqp-ca-file -d 'CA certificates (PEM) to trust for amqps:// and an https management API, on top of the system\'s [env: DLQ_AMQP_CA_FILE]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand list" -l amqp-client-cert -d 'Client certificate (PEM) for amqps://, with --amqp-client-key [env: DLQ_AMQP_CLIENT_CERT]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand list" -l amqp-client-key -d 'Unencrypted private key (PEM) of --amqp-client-cert [env: DLQ_AMQP_CLIENT_KEY]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand list" -l vhost -d 'RabbitMQ virtual host [env: DLQ_VHOST] [default: from the AMQP URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand list" -l broker-url -d 'Where Celery tasks are dispatched: amqp://, amqps://, redis://, rediss://, redis+socket:// [env: DLQ_BROKER_URL, CELERY_BROKER_URL] [default: the AMQP URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand list" -l redis-key-prefix -d 'Redis: the app\'s `global_keyprefix` transport option [env: DLQ_REDIS_KEY_PREFIX]' -r
complete -c dlq -n "__fish_dlq_using_subcommand list" -l redis-sep -d 'Redis: the app\'s `sep` transport option [env: DLQ_REDIS_SEP] [default: read from the workers\' bindings, else kombu\'s \\x06\\x16]' -r
complete -c dlq -n "__fish_dlq_using_subcommand list" -l control-exchange -d 'Celery\'s `control_exchange`: workers answer on `<NAME>.pidbox` [env: DLQ_CONTROL_EXCHANGE] [default: celery]' -r
complete -c dlq -n "__fish_dlq_using_subcommand list" -l redis-wait-replicas -d 'Redis: after each group of pushes, `WAIT N` replicas before rows are marked' -r
complete -c dlq -n "__fish_dlq_using_subcommand list" -s o -l output -d 'Output format [default: table]' -r -f -a "table\t''
json\t''
ndjson\t''
csv\t''"
complete -c dlq -n "__fish_dlq_using_subcommand list" -l color -d 'When to use colour [default: auto; NO_COLOR is honoured]' -r -f -a "auto\t''
always\t''
never\t''"
complete -c dlq -n "__fish_dlq_using_subcommand list" -l audit-log -d 'Audit trail (NDJSON) appended by every replay and archive --delete [env: DLQ_AUDIT_LOG] [default: $XDG_STATE_HOME/dlq/audit.ndjson, else ~/.local/state/dlq/audit.ndjson]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand list" -s q -l quiet -d 'Print only data and errors'
complete -c dlq -n "__fish_dlq_using_subcommand list" -s v -l verbose -d 'More diagnostics on stderr (repeat for more)'
complete -c dlq -n "__fish_dlq_using_subcommand list" -l no-progress -d 'Never draw progress bars'
complete -c dlq -n "__fish_dlq_using_subcommand list" -s h -l help -d 'Print help'
complete -c dlq -n "__fish_dlq_using_subcommand list" -s V -l version -d 'Print version'
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -s Q -l queue -d 'Act on this RabbitMQ dead-letter queue instead of the table (repeatable)' -r
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l motivo-header -d 'Extra message header holding the error text, used for motivo (repeatable)' -r
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l motivo -d 'Reason contains TEXT (case-sensitive, like SQL LIKE \'%TEXT%\')' -r
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -s e -l pattern -d 'Regex over reason, task name and payload text' -r
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l task -d 'Task name (Celery task, or for queues the queue it goes back to) (repeatable)' -r
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l since -d 'Created at or after WHEN (RFC 3339, YYYY-MM-DD, or a duration ago like 2h)' -r
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l until -d 'Created before WHEN (RFC 3339, YYYY-MM-DD, or a duration ago like 2h)' -r
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l older-than -d 'Created more than DURATION ago (90m, 7d) or before an RFC 3339 time' -r
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l where -d 'jq expression over the record\'s JSON; selected when its first output is truthy' -r
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l id -d 'Only this id (repeatable)' -r
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l limit -d 'At most N dead letters' -r
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l config -d 'Config file [env: DLQ_CONFIG] [default: $XDG_CONFIG_HOME/dlq/config.toml]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l profile -d 'Named profile from the config file [env: DLQ_PROFILE]' -r
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l database-url -d 'Database holding the failed-task table: postgres://, mysql://, sqlite:// [env: DLQ_DATABASE_URL, DATABASE_URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l table -d 'Failed-task table, optionally schema-qualified [env: DLQ_TABLE] [default: tasks_falhadas]' -r
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l amqp-url -d 'RabbitMQ AMQP URL [env: DLQ_AMQP_URL, AMQP_URL] [default: amqp://guest:guest@127.0.0.1:5672/%2f]' -r
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l management-url -d 'RabbitMQ management API URL [env: DLQ_MANAGEMENT_URL] [default: the AMQP host on port 15672, AMQP credentials]' -r
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l amqp-ca-file -d 'CA certificates (PEM) to trust for amqps:// and an https management API, on top of the system\'s [env: DLQ_AMQP_CA_FILE]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l amqp-client-cert -d 'Client certificate (PEM) for amqps://, with --amqp-client-key [env: DLQ_AMQP_CLIENT_CERT]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l amqp-client-key -d 'Unencrypted private key (PEM) of --amqp-client-cert [env: DLQ_AMQP_CLIENT_KEY]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l vhost -d 'RabbitMQ virtual host [env: DLQ_VHOST] [default: from the AMQP URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l broker-url -d 'Where Celery tasks are dispatched: amqp://, amqps://, redis://, rediss://, redis+socket:// [env: DLQ_BROKER_URL, CELERY_BROKER_URL] [default: the AMQP URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l redis-key-prefix -d 'Redis: the app\'s `global_keyprefix` transport option [env: DLQ_REDIS_KEY_PREFIX]' -r
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l redis-sep -d 'Redis: the app\'s `sep` transport option [env: DLQ_REDIS_SEP] [default: read from the workers\' bindings, else kombu\'s \\x06\\x16]' -r
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l control-exchange -d 'Celery\'s `control_exchange`: workers answer on `<NAME>.pidbox` [env: DLQ_CONTROL_EXCHANGE] [default: celery]' -r
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l redis-wait-replicas -d 'Redis: after each group of pushes, `WAIT N` replicas before rows are marked' -r
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -s o -l output -d 'Output format [default: table]' -r -f -a "table\t''
json\t''
ndjson\t''
csv\t''"
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l color -d 'When to use colour [default: auto; NO_COLOR is honoured]' -r -f -a "auto\t''
always\t''
never\t''"
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l audit-log -d 'Audit trail (NDJSON) appended by every replay and archive --delete [env: DLQ_AUDIT_LOG] [default: $XDG_STATE_HOME/dlq/audit.ndjson, else ~/.local/state/dlq/audit.ndjson]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l force -d 'Read a quorum queue even where that could push messages over its delivery limit (also needed when the queue type cannot be checked: management API unavailable)'
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -s i -l ignore-case -d 'Make --motivo case-insensitive'
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l include-replayed -d 'Also select rows already marked reprocessada'
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l only-replayed -d 'Select only rows already marked reprocessada'
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l full -d 'Show every field of every record, reasons in full'
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -s q -l quiet -d 'Print only data and errors'
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -s v -l verbose -d 'More diagnostics on stderr (repeat for more)'
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -l no-progress -d 'Never draw progress bars'
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -s h -l help -d 'Print help'
complete -c dlq -n "__fish_dlq_using_subcommand inspect" -s V -l version -d 'Print version'
complete -c dlq -n "__fish_dlq_using_subcommand filter" -s Q -l queue -d 'Act on this RabbitMQ dead-letter queue instead of the table (repeatable)' -r
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l motivo-header -d 'Extra message header holding the error text, used for motivo (repeatable)' -r
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l motivo -d 'Reason contains TEXT (case-sensitive, like SQL LIKE \'%TEXT%\')' -r
complete -c dlq -n "__fish_dlq_using_subcommand filter" -s e -l pattern -d 'Regex over reason, task name and payload text' -r
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l task -d 'Task name (Celery task, or for queues the queue it goes back to) (repeatable)' -r
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l since -d 'Created at or after WHEN (RFC 3339, YYYY-MM-DD, or a duration ago like 2h)' -r
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l until -d 'Created before WHEN (RFC 3339, YYYY-MM-DD, or a duration ago like 2h)' -r
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l older-than -d 'Created more than DURATION ago (90m, 7d) or before an RFC 3339 time' -r
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l where -d 'jq expression over the record\'s JSON; selected when its first output is truthy' -r
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l id -d 'Only this id (repeatable)' -r
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l limit -d 'At most N dead letters' -r
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l group-by -d 'Group the selection and count each group' -r -f -a "motivo\t''
task\t''
day\t''"
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l config -d 'Config file [env: DLQ_CONFIG] [default: $XDG_CONFIG_HOME/dlq/config.toml]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l profile -d 'Named profile from the config file [env: DLQ_PROFILE]' -r
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l database-url -d 'Database holding the failed-task table: postgres://, mysql://, sqlite:// [env: DLQ_DATABASE_URL, DATABASE_URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l table -d 'Failed-task table, optionally schema-qualified [env: DLQ_TABLE] [default: tasks_falhadas]' -r
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l amqp-url -d 'RabbitMQ AMQP URL [env: DLQ_AMQP_URL, AMQP_URL] [default: amqp://guest:guest@127.0.0.1:5672/%2f]' -r
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l management-url -d 'RabbitMQ management API URL [env: DLQ_MANAGEMENT_URL] [default: the AMQP host on port 15672, AMQP credentials]' -r
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l amqp-ca-file -d 'CA certificates (PEM) to trust for amqps:// and an https management API, on top of the system\'s [env: DLQ_AMQP_CA_FILE]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l amqp-client-cert -d 'Client certificate (PEM) for amqps://, with --amqp-client-key [env: DLQ_AMQP_CLIENT_CERT]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l amqp-client-key -d 'Unencrypted private key (PEM) of --amqp-client-cert [env: DLQ_AMQP_CLIENT_KEY]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l vhost -d 'RabbitMQ virtual host [env: DLQ_VHOST] [default: from the AMQP URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l broker-url -d 'Where Celery tasks are dispatched: amqp://, amqps://, redis://, rediss://, redis+socket:// [env: DLQ_BROKER_URL, CELERY_BROKER_URL] [default: the AMQP URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l redis-key-prefix -d 'Redis: the app\'s `global_keyprefix` transport option [env: DLQ_REDIS_KEY_PREFIX]' -r
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l redis-sep -d 'Redis: the app\'s `sep` transport option [env: DLQ_REDIS_SEP] [default: read from the workers\' bindings, else kombu\'s \\x06\\x16]' -r
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l control-exchange -d 'Celery\'s `control_exchange`: workers answer on `<NAME>.pidbox` [env: DLQ_CONTROL_EXCHANGE] [default: celery]' -r
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l redis-wait-replicas -d 'Redis: after each group of pushes, `WAIT N` replicas before rows are marked' -r
complete -c dlq -n "__fish_dlq_using_subcommand filter" -s o -l output -d 'Output format [default: table]' -r -f -a "table\t''
json\t''
ndjson\t''
csv\t''"
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l color -d 'When to use colour [default: auto; NO_COLOR is honoured]' -r -f -a "auto\t''
always\t''
never\t''"
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l audit-log -d 'Audit trail (NDJSON) appended by every replay and archive --delete [env: DLQ_AUDIT_LOG] [default: $XDG_STATE_HOME/dlq/audit.ndjson, else ~/.local/state/dlq/audit.ndjson]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l force -d 'Read a quorum queue even where that could push messages over its delivery limit (also needed when the queue type cannot be checked: management API unavailable)'
complete -c dlq -n "__fish_dlq_using_subcommand filter" -s i -l ignore-case -d 'Make --motivo case-insensitive'
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l include-replayed -d 'Also select rows already marked reprocessada'
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l only-replayed -d 'Select only rows already marked reprocessada'
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l count -d 'Print only the number of selected dead letters'
complete -c dlq -n "__fish_dlq_using_subcommand filter" -s q -l quiet -d 'Print only data and errors'
complete -c dlq -n "__fish_dlq_using_subcommand filter" -s v -l verbose -d 'More diagnostics on stderr (repeat for more)'
complete -c dlq -n "__fish_dlq_using_subcommand filter" -l no-progress -d 'Never draw progress bars'
complete -c dlq -n "__fish_dlq_using_subcommand filter" -s h -l help -d 'Print help'
complete -c dlq -n "__fish_dlq_using_subcommand filter" -s V -l version -d 'Print version'
complete -c dlq -n "__fish_dlq_using_subcommand replay" -s Q -l queue -d 'Act on this RabbitMQ dead-letter queue instead of the table (repeatable)' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l motivo-header -d 'Extra message header holding the error text, used for motivo (repeatable)' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l motivo -d 'Reason contains TEXT (case-sensitive, like SQL LIKE \'%TEXT%\')' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -s e -l pattern -d 'Regex over reason, task name and payload text' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l task -d 'Task name (Celery task, or for queues the queue it goes back to) (repeatable)' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l since -d 'Created at or after WHEN (RFC 3339, YYYY-MM-DD, or a duration ago like 2h)' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l until -d 'Created before WHEN (RFC 3339, YYYY-MM-DD, or a duration ago like 2h)' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l older-than -d 'Created more than DURATION ago (90m, 7d) or before an RFC 3339 time' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l where -d 'jq expression over the record\'s JSON; selected when its first output is truthy' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l id -d 'Only this id (repeatable)' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l limit -d 'At most N dead letters' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l to-queue -d 'Publish to this queue (table default: celery; queue default: where each message died)' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l to-exchange -d 'Publish to this exchange instead' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l routing-key -d 'Routing key with --to-exchange' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l rate -d 'At most N messages per second' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l window -d 'Publishes in flight at once; also the most that a killed run can leave published but not yet marked/acked (the duplicate window). Default: 64 for table rows and archives; a queue replay adapts it from 64 up to 1024 to what the broker sustains' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l from-file -d 'Replay from an archive written by `dlq archive`' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l max-replays -d 'Refuse messages already replayed this many times' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l canary -d 'Replay N first and stop if any of them fails again (a message back in its DLQ; a row the app stored again: same task, same args)' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l canary-wait -d 'How long to watch the canary messages' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l transform -d 'jq program over each selected record\'s JSON (as --where sees it); its output, the edited record, gives the new .payload (and, for queue messages, .headers)' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l follow-timeout -d 'How long to wait for the outcomes after the last task was sent' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l task-map -d 'Send rows stored under task OLD as task NEW (repeatable; config key task_map)' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l worker-timeout -d 'How long to wait for the workers\' answers (Celery remote control)' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l config -d 'Config file [env: DLQ_CONFIG] [default: $XDG_CONFIG_HOME/dlq/config.toml]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l profile -d 'Named profile from the config file [env: DLQ_PROFILE]' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l database-url -d 'Database holding the failed-task table: postgres://, mysql://, sqlite:// [env: DLQ_DATABASE_URL, DATABASE_URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l table -d 'Failed-task table, optionally schema-qualified [env: DLQ_TABLE] [default: tasks_falhadas]' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l amqp-url -d 'RabbitMQ AMQP URL [env: DLQ_AMQP_URL, AMQP_URL] [default: amqp://guest:guest@127.0.0.1:5672/%2f]' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l management-url -d 'RabbitMQ management API URL [env: DLQ_MANAGEMENT_URL] [default: the AMQP host on port 15672, AMQP credentials]' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l amqp-ca-file -d 'CA certificates (PEM) to trust for amqps:// and an https management API, on top of the system\'s [env: DLQ_AMQP_CA_FILE]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l amqp-client-cert -d 'Client certificate (PEM) for amqps://, with --amqp-client-key [env: DLQ_AMQP_CLIENT_CERT]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l amqp-client-key -d 'Unencrypted private key (PEM) of --amqp-client-cert [env: DLQ_AMQP_CLIENT_KEY]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l vhost -d 'RabbitMQ virtual host [env: DLQ_VHOST] [default: from the AMQP URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l broker-url -d 'Where Celery tasks are dispatched: amqp://, amqps://, redis://, rediss://, redis+socket:// [env: DLQ_BROKER_URL, CELERY_BROKER_URL] [default: the AMQP URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l redis-key-prefix -d 'Redis: the app\'s `global_keyprefix` transport option [env: DLQ_REDIS_KEY_PREFIX]' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l redis-sep -d 'Redis: the app\'s `sep` transport option [env: DLQ_REDIS_SEP] [default: read from the workers\' bindings, else kombu\'s \\x06\\x16]' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l control-exchange -d 'Celery\'s `control_exchange`: workers answer on `<NAME>.pidbox` [env: DLQ_CONTROL_EXCHANGE] [default: celery]' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l redis-wait-replicas -d 'Redis: after each group of pushes, `WAIT N` replicas before rows are marked' -r
complete -c dlq -n "__fish_dlq_using_subcommand replay" -s o -l output -d 'Output format [default: table]' -r -f -a "table\t''
json\t''
ndjson\t''
csv\t''"
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l color -d 'When to use colour [default: auto; NO_COLOR is honoured]' -r -f -a "auto\t''
always\t''
never\t''"
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l audit-log -d 'Audit trail (NDJSON) appended by every replay and archive --delete [env: DLQ_AUDIT_LOG] [default: $XDG_STATE_HOME/dlq/audit.ndjson, else ~/.local/state/dlq/audit.ndjson]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l force -d 'Read a quorum queue even where that could push messages over its delivery limit (also needed when the queue type cannot be checked: management API unavailable)'
complete -c dlq -n "__fish_dlq_using_subcommand replay" -s i -l ignore-case -d 'Make --motivo case-insensitive'
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l include-replayed -d 'Also select rows already marked reprocessada'
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l only-replayed -d 'Select only rows already marked reprocessada'
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l dry-run -d 'Print the plan and what would be done, change nothing'
complete -c dlq -n "__fish_dlq_using_subcommand replay" -s y -l yes -d 'Do not ask for confirmation'
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l plan-first -d 'Queue replay with --yes: take and select everything before moving anything (as without --yes), so a missing destination refuses the whole run'
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l follow -d 'Follow every replayed task to its outcome (succeeded, failed again, retried, not seen) through Celery\'s task events; exit 3 unless every one succeeded'
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l enable-events -d 'Turn task events on for the run where the workers have them off (Celery\'s enable_events), and off again at the end'
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l mark-on-success -d 'Mark a row reprocessada only once its task succeeded (rows whose task failed again or was not seen stay pending)'
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l no-worker-check -d 'Send Celery tasks without asking the workers first: you accept that a worker discards a task it does not register'
complete -c dlq -n "__fish_dlq_using_subcommand replay" -s q -l quiet -d 'Print only data and errors'
complete -c dlq -n "__fish_dlq_using_subcommand replay" -s v -l verbose -d 'More diagnostics on stderr (repeat for more)'
complete -c dlq -n "__fish_dlq_using_subcommand replay" -l no-progress -d 'Never draw progress bars'
complete -c dlq -n "__fish_dlq_using_subcommand replay" -s h -l help -d 'Print help'
complete -c dlq -n "__fish_dlq_using_subcommand replay" -s V -l version -d 'Print version'
complete -c dlq -n "__fish_dlq_using_subcommand archive" -s Q -l queue -d 'Act on this RabbitMQ dead-letter queue instead of the table (repeatable)' -r
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l motivo-header -d 'Extra message header holding the error text, used for motivo (repeatable)' -r
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l motivo -d 'Reason contains TEXT (case-sensitive, like SQL LIKE \'%TEXT%\')' -r
complete -c dlq -n "__fish_dlq_using_subcommand archive" -s e -l pattern -d 'Regex over reason, task name and payload text' -r
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l task -d 'Task name (Celery task, or for queues the queue it goes back to) (repeatable)' -r
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l since -d 'Created at or after WHEN (RFC 3339, YYYY-MM-DD, or a duration ago like 2h)' -r
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l until -d 'Created before WHEN (RFC 3339, YYYY-MM-DD, or a duration ago like 2h)' -r
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l older-than -d 'Created more than DURATION ago (90m, 7d) or before an RFC 3339 time' -r
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l where -d 'jq expression over the record\'s JSON; selected when its first output is truthy' -r
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l id -d 'Only this id (repeatable)' -r
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l limit -d 'At most N dead letters' -r
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l to -d 'Archive file (NDJSON; gzip when it ends in .gz; - for stdout)' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l config -d 'Config file [env: DLQ_CONFIG] [default: $XDG_CONFIG_HOME/dlq/config.toml]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l profile -d 'Named profile from the config file [env: DLQ_PROFILE]' -r
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l database-url -d 'Database holding the failed-task table: postgres://, mysql://, sqlite:// [env: DLQ_DATABASE_URL, DATABASE_URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l table -d 'Failed-task table, optionally schema-qualified [env: DLQ_TABLE] [default: tasks_falhadas]' -r
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l amqp-url -d 'RabbitMQ AMQP URL [env: DLQ_AMQP_URL, AMQP_URL] [default: amqp://guest:guest@127.0.0.1:5672/%2f]' -r
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l management-url -d 'RabbitMQ management API URL [env: DLQ_MANAGEMENT_URL] [default: the AMQP host on port 15672, AMQP credentials]' -r
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l amqp-ca-file -d 'CA certificates (PEM) to trust for amqps:// and an https management API, on top of the system\'s [env: DLQ_AMQP_CA_FILE]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l amqp-client-cert -d 'Client certificate (PEM) for amqps://, with --amqp-client-key [env: DLQ_AMQP_CLIENT_CERT]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l amqp-client-key -d 'Unencrypted private key (PEM) of --amqp-client-cert [env: DLQ_AMQP_CLIENT_KEY]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l vhost -d 'RabbitMQ virtual host [env: DLQ_VHOST] [default: from the AMQP URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l broker-url -d 'Where Celery tasks are dispatched: amqp://, amqps://, redis://, rediss://, redis+socket:// [env: DLQ_BROKER_URL, CELERY_BROKER_URL] [default: the AMQP URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l redis-key-prefix -d 'Redis: the app\'s `global_keyprefix` transport option [env: DLQ_REDIS_KEY_PREFIX]' -r
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l redis-sep -d 'Redis: the app\'s `sep` transport option [env: DLQ_REDIS_SEP] [default: read from the workers\' bindings, else kombu\'s \\x06\\x16]' -r
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l control-exchange -d 'Celery\'s `control_exchange`: workers answer on `<NAME>.pidbox` [env: DLQ_CONTROL_EXCHANGE] [default: celery]' -r
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l redis-wait-replicas -d 'Redis: after each group of pushes, `WAIT N` replicas before rows are marked' -r
complete -c dlq -n "__fish_dlq_using_subcommand archive" -s o -l output -d 'Output format [default: table]' -r -f -a "table\t''
json\t''
ndjson\t''
csv\t''"
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l color -d 'When to use colour [default: auto; NO_COLOR is honoured]' -r -f -a "auto\t''
always\t''
never\t''"
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l audit-log -d 'Audit trail (NDJSON) appended by every replay and archive --delete [env: DLQ_AUDIT_LOG] [default: $XDG_STATE_HOME/dlq/audit.ndjson, else ~/.local/state/dlq/audit.ndjson]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l force -d 'Read a quorum queue even where that could push messages over its delivery limit (also needed when the queue type cannot be checked: management API unavailable)'
complete -c dlq -n "__fish_dlq_using_subcommand archive" -s i -l ignore-case -d 'Make --motivo case-insensitive'
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l include-replayed -d 'Also select rows already marked reprocessada'
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l only-replayed -d 'Select only rows already marked reprocessada'
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l dry-run -d 'Print the plan and what would be done, change nothing'
complete -c dlq -n "__fish_dlq_using_subcommand archive" -s y -l yes -d 'Do not ask for confirmation'
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l delete -d 'Remove archived dead letters from their source once the archive is on disk'
complete -c dlq -n "__fish_dlq_using_subcommand archive" -s q -l quiet -d 'Print only data and errors'
complete -c dlq -n "__fish_dlq_using_subcommand archive" -s v -l verbose -d 'More diagnostics on stderr (repeat for more)'
complete -c dlq -n "__fish_dlq_using_subcommand archive" -l no-progress -d 'Never draw progress bars'
complete -c dlq -n "__fish_dlq_using_subcommand archive" -s h -l help -d 'Print help'
complete -c dlq -n "__fish_dlq_using_subcommand archive" -s V -l version -d 'Print version'
complete -c dlq -n "__fish_dlq_using_subcommand init" -l config -d 'Config file [env: DLQ_CONFIG] [default: $XDG_CONFIG_HOME/dlq/config.toml]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand init" -l profile -d 'Named profile from the config file [env: DLQ_PROFILE]' -r
complete -c dlq -n "__fish_dlq_using_subcommand init" -l database-url -d 'Database holding the failed-task table: postgres://, mysql://, sqlite:// [env: DLQ_DATABASE_URL, DATABASE_URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand init" -l table -d 'Failed-task table, optionally schema-qualified [env: DLQ_TABLE] [default: tasks_falhadas]' -r
complete -c dlq -n "__fish_dlq_using_subcommand init" -l amqp-url -d 'RabbitMQ AMQP URL [env: DLQ_AMQP_URL, AMQP_URL] [default: amqp://guest:guest@127.0.0.1:5672/%2f]' -r
complete -c dlq -n "__fish_dlq_using_subcommand init" -l management-url -d 'RabbitMQ management API URL [env: DLQ_MANAGEMENT_URL] [default: the AMQP host on port 15672, AMQP credentials]' -r
complete -c dlq -n "__fish_dlq_using_subcommand init" -l amqp-ca-file -d 'CA certificates (PEM) to trust for amqps:// and an https management API, on top of the system\'s [env: DLQ_AMQP_CA_FILE]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand init" -l amqp-client-cert -d 'Client certificate (PEM) for amqps://, with --amqp-client-key [env: DLQ_AMQP_CLIENT_CERT]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand init" -l amqp-client-key -d 'Unencrypted private key (PEM) of --amqp-client-cert [env: DLQ_AMQP_CLIENT_KEY]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand init" -l vhost -d 'RabbitMQ virtual host [env: DLQ_VHOST] [default: from the AMQP URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand init" -l broker-url -d 'Where Celery tasks are dispatched: amqp://, amqps://, redis://, rediss://, redis+socket:// [env: DLQ_BROKER_URL, CELERY_BROKER_URL] [default: the AMQP URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand init" -l redis-key-prefix -d 'Redis: the app\'s `global_keyprefix` transport option [env: DLQ_REDIS_KEY_PREFIX]' -r
complete -c dlq -n "__fish_dlq_using_subcommand init" -l redis-sep -d 'Redis: the app\'s `sep` transport option [env: DLQ_REDIS_SEP] [default: read from the workers\' bindings, else kombu\'s \\x06\\x16]' -r
complete -c dlq -n "__fish_dlq_using_subcommand init" -l control-exchange -d 'Celery\'s `control_exchange`: workers answer on `<NAME>.pidbox` [env: DLQ_CONTROL_EXCHANGE] [default: celery]' -r
complete -c dlq -n "__fish_dlq_using_subcommand init" -l redis-wait-replicas -d 'Redis: after each group of pushes, `WAIT N` replicas before rows are marked' -r
complete -c dlq -n "__fish_dlq_using_subcommand init" -s o -l output -d 'Output format [default: table]' -r -f -a "table\t''
json\t''
ndjson\t''
csv\t''"
complete -c dlq -n "__fish_dlq_using_subcommand init" -l color -d 'When to use colour [default: auto; NO_COLOR is honoured]' -r -f -a "auto\t''
always\t''
never\t''"
complete -c dlq -n "__fish_dlq_using_subcommand init" -l audit-log -d 'Audit trail (NDJSON) appended by every replay and archive --delete [env: DLQ_AUDIT_LOG] [default: $XDG_STATE_HOME/dlq/audit.ndjson, else ~/.local/state/dlq/audit.ndjson]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand init" -l dry-run -d 'Print the SQL instead of running it'
complete -c dlq -n "__fish_dlq_using_subcommand init" -s q -l quiet -d 'Print only data and errors'
complete -c dlq -n "__fish_dlq_using_subcommand init" -s v -l verbose -d 'More diagnostics on stderr (repeat for more)'
complete -c dlq -n "__fish_dlq_using_subcommand init" -l no-progress -d 'Never draw progress bars'
complete -c dlq -n "__fish_dlq_using_subcommand init" -s h -l help -d 'Print help'
complete -c dlq -n "__fish_dlq_using_subcommand init" -s V -l version -d 'Print version'
complete -c dlq -n "__fish_dlq_using_subcommand workers" -l worker-timeout -d 'How long to wait for the workers\' answers' -r
complete -c dlq -n "__fish_dlq_using_subcommand workers" -l config -d 'Config file [env: DLQ_CONFIG] [default: $XDG_CONFIG_HOME/dlq/config.toml]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand workers" -l profile -d 'Named profile from the config file [env: DLQ_PROFILE]' -r
complete -c dlq -n "__fish_dlq_using_subcommand workers" -l database-url -d 'Database holding the failed-task table: postgres://, mysql://, sqlite:// [env: DLQ_DATABASE_URL, DATABASE_URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand workers" -l table -d 'Failed-task table, optionally schema-qualified [env: DLQ_TABLE] [default: tasks_falhadas]' -r
complete -c dlq -n "__fish_dlq_using_subcommand workers" -l amqp-url -d 'RabbitMQ AMQP URL [env: DLQ_AMQP_URL, AMQP_URL] [default: amqp://guest:guest@127.0.0.1:5672/%2f]' -r
complete -c dlq -n "__fish_dlq_using_subcommand workers" -l management-url -d 'RabbitMQ management API URL [env: DLQ_MANAGEMENT_URL] [default: the AMQP host on port 15672, AMQP credentials]' -r
complete -c dlq -n "__fish_dlq_using_subcommand workers" -l amqp-ca-file -d 'CA certificates (PEM) to trust for amqps:// and an https management API, on top of the system\'s [env: DLQ_AMQP_CA_FILE]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand workers" -l amqp-client-cert -d 'Client certificate (PEM) for amqps://, with --amqp-client-key [env: DLQ_AMQP_CLIENT_CERT]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand workers" -l amqp-client-key -d 'Unencrypted private key (PEM) of --amqp-client-cert [env: DLQ_AMQP_CLIENT_KEY]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand workers" -l vhost -d 'RabbitMQ virtual host [env: DLQ_VHOST] [default: from the AMQP URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand workers" -l broker-url -d 'Where Celery tasks are dispatched: amqp://, amqps://, redis://, rediss://, redis+socket:// [env: DLQ_BROKER_URL, CELERY_BROKER_URL] [default: the AMQP URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand workers" -l redis-key-prefix -d 'Redis: the app\'s `global_keyprefix` transport option [env: DLQ_REDIS_KEY_PREFIX]' -r
complete -c dlq -n "__fish_dlq_using_subcommand workers" -l redis-sep -d 'Redis: the app\'s `sep` transport option [env: DLQ_REDIS_SEP] [default: read from the workers\' bindings, else kombu\'s \\x06\\x16]' -r
complete -c dlq -n "__fish_dlq_using_subcommand workers" -l control-exchange -d 'Celery\'s `control_exchange`: workers answer on `<NAME>.pidbox` [env: DLQ_CONTROL_EXCHANGE] [default: celery]' -r
complete -c dlq -n "__fish_dlq_using_subcommand workers" -l redis-wait-replicas -d 'Redis: after each group of pushes, `WAIT N` replicas before rows are marked' -r
complete -c dlq -n "__fish_dlq_using_subcommand workers" -s o -l output -d 'Output format [default: table]' -r -f -a "table\t''
json\t''
ndjson\t''
csv\t''"
complete -c dlq -n "__fish_dlq_using_subcommand workers" -l color -d 'When to use colour [default: auto; NO_COLOR is honoured]' -r -f -a "auto\t''
always\t''
never\t''"
complete -c dlq -n "__fish_dlq_using_subcommand workers" -l audit-log -d 'Audit trail (NDJSON) appended by every replay and archive --delete [env: DLQ_AUDIT_LOG] [default: $XDG_STATE_HOME/dlq/audit.ndjson, else ~/.local/state/dlq/audit.ndjson]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand workers" -l full -d 'List every registered task of each worker'
complete -c dlq -n "__fish_dlq_using_subcommand workers" -s q -l quiet -d 'Print only data and errors'
complete -c dlq -n "__fish_dlq_using_subcommand workers" -s v -l verbose -d 'More diagnostics on stderr (repeat for more)'
complete -c dlq -n "__fish_dlq_using_subcommand workers" -l no-progress -d 'Never draw progress bars'
complete -c dlq -n "__fish_dlq_using_subcommand workers" -s h -l help -d 'Print help'
complete -c dlq -n "__fish_dlq_using_subcommand workers" -s V -l version -d 'Print version'
complete -c dlq -n "__fish_dlq_using_subcommand check" -s Q -l queue -d 'Act on this RabbitMQ dead-letter queue instead of the table (repeatable)' -r
complete -c dlq -n "__fish_dlq_using_subcommand check" -l motivo-header -d 'Extra message header holding the error text, used for motivo (repeatable)' -r
complete -c dlq -n "__fish_dlq_using_subcommand check" -l warn-pending -d 'WARNING when more than N dead letters are pending (table rows / ready messages)' -r
complete -c dlq -n "__fish_dlq_using_subcommand check" -l crit-pending -d 'CRITICAL when more than N dead letters are pending' -r
complete -c dlq -n "__fish_dlq_using_subcommand check" -l warn-age -d 'WARNING when the oldest pending dead letter is older than DURATION (30m, 2h, 7d)' -r
complete -c dlq -n "__fish_dlq_using_subcommand check" -l crit-age -d 'CRITICAL when the oldest pending dead letter is older than DURATION' -r
complete -c dlq -n "__fish_dlq_using_subcommand check" -l warn-new -d 'WARNING when more than N dead letters arrived within --new-within (queues: in the head sample)' -r
complete -c dlq -n "__fish_dlq_using_subcommand check" -l crit-new -d 'CRITICAL when more than N dead letters arrived within --new-within' -r
complete -c dlq -n "__fish_dlq_using_subcommand check" -l new-within -d 'The window of --warn-new / --crit-new' -r
complete -c dlq -n "__fish_dlq_using_subcommand check" -l sample -d 'Messages read (and given back) at the head of each DLQ for age and new; 0 reads none [default: as `list`: 100, fewer with many DLQs]' -r
complete -c dlq -n "__fish_dlq_using_subcommand check" -l config -d 'Config file [env: DLQ_CONFIG] [default: $XDG_CONFIG_HOME/dlq/config.toml]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand check" -l profile -d 'Named profile from the config file [env: DLQ_PROFILE]' -r
complete -c dlq -n "__fish_dlq_using_subcommand check" -l database-url -d 'Database holding the failed-task table: postgres://, mysql://, sqlite:// [env: DLQ_DATABASE_URL, DATABASE_URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand check" -l table -d 'Failed-task table, optionally schema-qualified [env: DLQ_TABLE] [default: tasks_falhadas]' -r
complete -c dlq -n "__fish_dlq_using_subcommand check" -l amqp-url -d 'RabbitMQ AMQP URL [env: DLQ_AMQP_URL, AMQP_URL] [default: amqp://guest:guest@127.0.0.1:5672/%2f]' -r
complete -c dlq -n "__fish_dlq_using_subcommand check" -l management-url -d 'RabbitMQ management API URL [env: DLQ_MANAGEMENT_URL] [default: the AMQP host on port 15672, AMQP credentials]' -r
complete -c dlq -n "__fish_dlq_using_subcommand check" -l amqp-ca-file -d 'CA certificates (PEM) to trust for amqps:// and an https management API, on top of the system\'s [env: DLQ_AMQP_CA_FILE]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand check" -l amqp-client-cert -d 'Client certificate (PEM) for amqps://, with --amqp-client-key [env: DLQ_AMQP_CLIENT_CERT]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand check" -l amqp-client-key -d 'Unencrypted private key (PEM) of --amqp-client-cert [env: DLQ_AMQP_CLIENT_KEY]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand check" -l vhost -d 'RabbitMQ virtual host [env: DLQ_VHOST] [default: from the AMQP URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand check" -l broker-url -d 'Where Celery tasks are dispatched: amqp://, amqps://, redis://, rediss://, redis+socket:// [env: DLQ_BROKER_URL, CELERY_BROKER_URL] [default: the AMQP URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand check" -l redis-key-prefix -d 'Redis: the app\'s `global_keyprefix` transport option [env: DLQ_REDIS_KEY_PREFIX]' -r
complete -c dlq -n "__fish_dlq_using_subcommand check" -l redis-sep -d 'Redis: the app\'s `sep` transport option [env: DLQ_REDIS_SEP] [default: read from the workers\' bindings, else kombu\'s \\x06\\x16]' -r
complete -c dlq -n "__fish_dlq_using_subcommand check" -l control-exchange -d 'Celery\'s `control_exchange`: workers answer on `<NAME>.pidbox` [env: DLQ_CONTROL_EXCHANGE] [default: celery]' -r
complete -c dlq -n "__fish_dlq_using_subcommand check" -l redis-wait-replicas -d 'Redis: after each group of pushes, `WAIT N` replicas before rows are marked' -r
complete -c dlq -n "__fish_dlq_using_subcommand check" -s o -l output -d 'Output format [default: table]' -r -f -a "table\t''
json\t''
ndjson\t''
csv\t''"
complete -c dlq -n "__fish_dlq_using_subcommand check" -l color -d 'When to use colour [default: auto; NO_COLOR is honoured]' -r -f -a "auto\t''
always\t''
never\t''"
complete -c dlq -n "__fish_dlq_using_subcommand check" -l audit-log -d 'Audit trail (NDJSON) appended by every replay and archive --delete [env: DLQ_AUDIT_LOG] [default: $XDG_STATE_HOME/dlq/audit.ndjson, else ~/.local/state/dlq/audit.ndjson]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand check" -l force -d 'Read a quorum queue even where that could push messages over its delivery limit (also needed when the queue type cannot be checked: management API unavailable)'
complete -c dlq -n "__fish_dlq_using_subcommand check" -s q -l quiet -d 'Print only data and errors'
complete -c dlq -n "__fish_dlq_using_subcommand check" -s v -l verbose -d 'More diagnostics on stderr (repeat for more)'
complete -c dlq -n "__fish_dlq_using_subcommand check" -l no-progress -d 'Never draw progress bars'
complete -c dlq -n "__fish_dlq_using_subcommand check" -s h -l help -d 'Print help'
complete -c dlq -n "__fish_dlq_using_subcommand check" -s V -l version -d 'Print version'
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -s Q -l queue -d 'Act on this RabbitMQ dead-letter queue instead of the table (repeatable)' -r
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -l motivo-header -d 'Extra message header holding the error text, used for motivo (repeatable)' -r
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -l sample -d 'Read (and give back) the first N messages of each DLQ for its age and reasons [default: read none]' -r
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -l textfile -d 'Write the metrics to PATH atomically (node_exporter\'s textfile collector: *.prom)' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -l listen -d 'Serve GET /metrics on ADDR (e.g. 127.0.0.1:9419) until SIGINT / SIGTERM' -r
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -l interval -d 'With --listen: ask the sources at most this often, whatever the scrape rate' -r
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -l config -d 'Config file [env: DLQ_CONFIG] [default: $XDG_CONFIG_HOME/dlq/config.toml]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -l profile -d 'Named profile from the config file [env: DLQ_PROFILE]' -r
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -l database-url -d 'Database holding the failed-task table: postgres://, mysql://, sqlite:// [env: DLQ_DATABASE_URL, DATABASE_URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -l table -d 'Failed-task table, optionally schema-qualified [env: DLQ_TABLE] [default: tasks_falhadas]' -r
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -l amqp-url -d 'RabbitMQ AMQP URL [env: DLQ_AMQP_URL, AMQP_URL] [default: amqp://guest:guest@127.0.0.1:5672/%2f]' -r
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -l management-url -d 'RabbitMQ management API URL [env: DLQ_MANAGEMENT_URL] [default: the AMQP host on port 15672, AMQP credentials]' -r
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -l amqp-ca-file -d 'CA certificates (PEM) to trust for amqps:// and an https management API, on top of the system\'s [env: DLQ_AMQP_CA_FILE]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -l amqp-client-cert -d 'Client certificate (PEM) for amqps://, with --amqp-client-key [env: DLQ_AMQP_CLIENT_CERT]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -l amqp-client-key -d 'Unencrypted private key (PEM) of --amqp-client-cert [env: DLQ_AMQP_CLIENT_KEY]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -l vhost -d 'RabbitMQ virtual host [env: DLQ_VHOST] [default: from the AMQP URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -l broker-url -d 'Where Celery tasks are dispatched: amqp://, amqps://, redis://, rediss://, redis+socket:// [env: DLQ_BROKER_URL, CELERY_BROKER_URL] [default: the AMQP URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -l redis-key-prefix -d 'Redis: the app\'s `global_keyprefix` transport option [env: DLQ_REDIS_KEY_PREFIX]' -r
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -l redis-sep -d 'Redis: the app\'s `sep` transport option [env: DLQ_REDIS_SEP] [default: read from the workers\' bindings, else kombu\'s \\x06\\x16]' -r
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -l control-exchange -d 'Celery\'s `control_exchange`: workers answer on `<NAME>.pidbox` [env: DLQ_CONTROL_EXCHANGE] [default: celery]' -r
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -l redis-wait-replicas -d 'Redis: after each group of pushes, `WAIT N` replicas before rows are marked' -r
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -s o -l output -d 'Output format [default: table]' -r -f -a "table\t''
json\t''
ndjson\t''
csv\t''"
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -l color -d 'When to use colour [default: auto; NO_COLOR is honoured]' -r -f -a "auto\t''
always\t''
never\t''"
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -l audit-log -d 'Audit trail (NDJSON) appended by every replay and archive --delete [env: DLQ_AUDIT_LOG] [default: $XDG_STATE_HOME/dlq/audit.ndjson, else ~/.local/state/dlq/audit.ndjson]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -l force -d 'Read a quorum queue even where that could push messages over its delivery limit (also needed when the queue type cannot be checked: management API unavailable)'
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -s q -l quiet -d 'Print only data and errors'
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -s v -l verbose -d 'More diagnostics on stderr (repeat for more)'
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -l no-progress -d 'Never draw progress bars'
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -s h -l help -d 'Print help'
complete -c dlq -n "__fish_dlq_using_subcommand metrics" -s V -l version -d 'Print version'
complete -c dlq -n "__fish_dlq_using_subcommand browse" -s Q -l queue -d 'Also list this queue (repeatable; works without the management API)' -r
complete -c dlq -n "__fish_dlq_using_subcommand browse" -l motivo-header -d 'Extra message header holding the error text, used for motivo (repeatable)' -r
complete -c dlq -n "__fish_dlq_using_subcommand browse" -l exclude -d 'Leave out discovered DLQs whose name matches this glob (`*`, `?`; repeatable)' -r
complete -c dlq -n "__fish_dlq_using_subcommand browse" -l refresh -d 'Re-read the sources screen every DURATION while it is shown (0 never; `r` re-reads at once)' -r
complete -c dlq -n "__fish_dlq_using_subcommand browse" -l task-map -d 'Send rows stored under task OLD as task NEW (repeatable; config key task_map)' -r
complete -c dlq -n "__fish_dlq_using_subcommand browse" -l worker-timeout -d 'How long to wait for the workers\' answers (Celery remote control)' -r
complete -c dlq -n "__fish_dlq_using_subcommand browse" -l config -d 'Config file [env: DLQ_CONFIG] [default: $XDG_CONFIG_HOME/dlq/config.toml]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand browse" -l profile -d 'Named profile from the config file [env: DLQ_PROFILE]' -r
complete -c dlq -n "__fish_dlq_using_subcommand browse" -l database-url -d 'Database holding the failed-task table: postgres://, mysql://, sqlite:// [env: DLQ_DATABASE_URL, DATABASE_URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand browse" -l table -d 'Failed-task table, optionally schema-qualified [env: DLQ_TABLE] [default: tasks_falhadas]' -r
complete -c dlq -n "__fish_dlq_using_subcommand browse" -l amqp-url -d 'RabbitMQ AMQP URL [env: DLQ_AMQP_URL, AMQP_URL] [default: amqp://guest:guest@127.0.0.1:5672/%2f]' -r
complete -c dlq -n "__fish_dlq_using_subcommand browse" -l management-url -d 'RabbitMQ management API URL [env: DLQ_MANAGEMENT_URL] [default: the AMQP host on port 15672, AMQP credentials]' -r
complete -c dlq -n "__fish_dlq_using_subcommand browse" -l amqp-ca-file -d 'CA certificates (PEM) to trust for amqps:// and an https management API, on top of the system\'s [env: DLQ_AMQP_CA_FILE]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand browse" -l amqp-client-cert -d 'Client certificate (PEM) for amqps://, with --amqp-client-key [env: DLQ_AMQP_CLIENT_CERT]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand browse" -l amqp-client-key -d 'Unencrypted private key (PEM) of --amqp-client-cert [env: DLQ_AMQP_CLIENT_KEY]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand browse" -l vhost -d 'RabbitMQ virtual host [env: DLQ_VHOST] [default: from the AMQP URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand browse" -l broker-url -d 'Where Celery tasks are dispatched: amqp://, amqps://, redis://, rediss://, redis+socket:// [env: DLQ_BROKER_URL, CELERY_BROKER_URL] [default: the AMQP URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand browse" -l redis-key-prefix -d 'Redis: the app\'s `global_keyprefix` transport option [env: DLQ_REDIS_KEY_PREFIX]' -r
complete -c dlq -n "__fish_dlq_using_subcommand browse" -l redis-sep -d 'Redis: the app\'s `sep` transport option [env: DLQ_REDIS_SEP] [default: read from the workers\' bindings, else kombu\'s \\x06\\x16]' -r
complete -c dlq -n "__fish_dlq_using_subcommand browse" -l control-exchange -d 'Celery\'s `control_exchange`: workers answer on `<NAME>.pidbox` [env: DLQ_CONTROL_EXCHANGE] [default: celery]' -r
complete -c dlq -n "__fish_dlq_using_subcommand browse" -l redis-wait-replicas -d 'Redis: after each group of pushes, `WAIT N` replicas before rows are marked' -r
complete -c dlq -n "__fish_dlq_using_subcommand browse" -s o -l output -d 'Output format [default: table]' -r -f -a "table\t''
json\t''
ndjson\t''
csv\t''"
complete -c dlq -n "__fish_dlq_using_subcommand browse" -l color -d 'When to use colour [default: auto; NO_COLOR is honoured]' -r -f -a "auto\t''
always\t''
never\t''"
complete -c dlq -n "__fish_dlq_using_subcommand browse" -l audit-log -d 'Audit trail (NDJSON) appended by every replay and archive --delete [env: DLQ_AUDIT_LOG] [default: $XDG_STATE_HOME/dlq/audit.ndjson, else ~/.local/state/dlq/audit.ndjson]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand browse" -l force -d 'Read a quorum queue even where that could push messages over its delivery limit'
complete -c dlq -n "__fish_dlq_using_subcommand browse" -l read-only -d 'Look only: replay, archive and export are refused'
complete -c dlq -n "__fish_dlq_using_subcommand browse" -l no-worker-check -d 'Send Celery tasks without asking the workers first: you accept that a worker discards a task it does not register'
complete -c dlq -n "__fish_dlq_using_subcommand browse" -s q -l quiet -d 'Print only data and errors'
complete -c dlq -n "__fish_dlq_using_subcommand browse" -s v -l verbose -d 'More diagnostics on stderr (repeat for more)'
complete -c dlq -n "__fish_dlq_using_subcommand browse" -l no-progress -d 'Never draw progress bars'
complete -c dlq -n "__fish_dlq_using_subcommand browse" -s h -l help -d 'Print help'
complete -c dlq -n "__fish_dlq_using_subcommand browse" -s V -l version -d 'Print version'
complete -c dlq -n "__fish_dlq_using_subcommand completions" -l config -d 'Config file [env: DLQ_CONFIG] [default: $XDG_CONFIG_HOME/dlq/config.toml]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand completions" -l profile -d 'Named profile from the config file [env: DLQ_PROFILE]' -r
complete -c dlq -n "__fish_dlq_using_subcommand completions" -l database-url -d 'Database holding the failed-task table: postgres://, mysql://, sqlite:// [env: DLQ_DATABASE_URL, DATABASE_URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand completions" -l table -d 'Failed-task table, optionally schema-qualified [env: DLQ_TABLE] [default: tasks_falhadas]' -r
complete -c dlq -n "__fish_dlq_using_subcommand completions" -l amqp-url -d 'RabbitMQ AMQP URL [env: DLQ_AMQP_URL, AMQP_URL] [default: amqp://guest:guest@127.0.0.1:5672/%2f]' -r
complete -c dlq -n "__fish_dlq_using_subcommand completions" -l management-url -d 'RabbitMQ management API URL [env: DLQ_MANAGEMENT_URL] [default: the AMQP host on port 15672, AMQP credentials]' -r
complete -c dlq -n "__fish_dlq_using_subcommand completions" -l amqp-ca-file -d 'CA certificates (PEM) to trust for amqps:// and an https management API, on top of the system\'s [env: DLQ_AMQP_CA_FILE]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand completions" -l amqp-client-cert -d 'Client certificate (PEM) for amqps://, with --amqp-client-key [env: DLQ_AMQP_CLIENT_CERT]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand completions" -l amqp-client-key -d 'Unencrypted private key (PEM) of --amqp-client-cert [env: DLQ_AMQP_CLIENT_KEY]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand completions" -l vhost -d 'RabbitMQ virtual host [env: DLQ_VHOST] [default: from the AMQP URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand completions" -l broker-url -d 'Where Celery tasks are dispatched: amqp://, amqps://, redis://, rediss://, redis+socket:// [env: DLQ_BROKER_URL, CELERY_BROKER_URL] [default: the AMQP URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand completions" -l redis-key-prefix -d 'Redis: the app\'s `global_keyprefix` transport option [env: DLQ_REDIS_KEY_PREFIX]' -r
complete -c dlq -n "__fish_dlq_using_subcommand completions" -l redis-sep -d 'Redis: the app\'s `sep` transport option [env: DLQ_REDIS_SEP] [default: read from the workers\' bindings, else kombu\'s \\x06\\x16]' -r
complete -c dlq -n "__fish_dlq_using_subcommand completions" -l control-exchange -d 'Celery\'s `control_exchange`: workers answer on `<NAME>.pidbox` [env: DLQ_CONTROL_EXCHANGE] [default: celery]' -r
complete -c dlq -n "__fish_dlq_using_subcommand completions" -l redis-wait-replicas -d 'Redis: after each group of pushes, `WAIT N` replicas before rows are marked' -r
complete -c dlq -n "__fish_dlq_using_subcommand completions" -s o -l output -d 'Output format [default: table]' -r -f -a "table\t''
json\t''
ndjson\t''
csv\t''"
complete -c dlq -n "__fish_dlq_using_subcommand completions" -l color -d 'When to use colour [default: auto; NO_COLOR is honoured]' -r -f -a "auto\t''
always\t''
never\t''"
complete -c dlq -n "__fish_dlq_using_subcommand completions" -l audit-log -d 'Audit trail (NDJSON) appended by every replay and archive --delete [env: DLQ_AUDIT_LOG] [default: $XDG_STATE_HOME/dlq/audit.ndjson, else ~/.local/state/dlq/audit.ndjson]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand completions" -s q -l quiet -d 'Print only data and errors'
complete -c dlq -n "__fish_dlq_using_subcommand completions" -s v -l verbose -d 'More diagnostics on stderr (repeat for more)'
complete -c dlq -n "__fish_dlq_using_subcommand completions" -l no-progress -d 'Never draw progress bars'
complete -c dlq -n "__fish_dlq_using_subcommand completions" -s h -l help -d 'Print help'
complete -c dlq -n "__fish_dlq_using_subcommand completions" -s V -l version -d 'Print version'
complete -c dlq -n "__fish_dlq_using_subcommand audit" -l since -d 'Records at or after WHEN (RFC 3339, YYYY-MM-DD, or a duration ago like 2h)' -r
complete -c dlq -n "__fish_dlq_using_subcommand audit" -l run -d 'Only the records of this run (its run_id, the replay id stamped on what it sent)' -r
complete -c dlq -n "__fish_dlq_using_subcommand audit" -l config -d 'Config file [env: DLQ_CONFIG] [default: $XDG_CONFIG_HOME/dlq/config.toml]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand audit" -l profile -d 'Named profile from the config file [env: DLQ_PROFILE]' -r
complete -c dlq -n "__fish_dlq_using_subcommand audit" -l database-url -d 'Database holding the failed-task table: postgres://, mysql://, sqlite:// [env: DLQ_DATABASE_URL, DATABASE_URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand audit" -l table -d 'Failed-task table, optionally schema-qualified [env: DLQ_TABLE] [default: tasks_falhadas]' -r
complete -c dlq -n "__fish_dlq_using_subcommand audit" -l amqp-url -d 'RabbitMQ AMQP URL [env: DLQ_AMQP_URL, AMQP_URL] [default: amqp://guest:guest@127.0.0.1:5672/%2f]' -r
complete -c dlq -n "__fish_dlq_using_subcommand audit" -l management-url -d 'RabbitMQ management API URL [env: DLQ_MANAGEMENT_URL] [default: the AMQP host on port 15672, AMQP credentials]' -r
complete -c dlq -n "__fish_dlq_using_subcommand audit" -l amqp-ca-file -d 'CA certificates (PEM) to trust for amqps:// and an https management API, on top of the system\'s [env: DLQ_AMQP_CA_FILE]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand audit" -l amqp-client-cert -d 'Client certificate (PEM) for amqps://, with --amqp-client-key [env: DLQ_AMQP_CLIENT_CERT]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand audit" -l amqp-client-key -d 'Unencrypted private key (PEM) of --amqp-client-cert [env: DLQ_AMQP_CLIENT_KEY]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand audit" -l vhost -d 'RabbitMQ virtual host [env: DLQ_VHOST] [default: from the AMQP URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand audit" -l broker-url -d 'Where Celery tasks are dispatched: amqp://, amqps://, redis://, rediss://, redis+socket:// [env: DLQ_BROKER_URL, CELERY_BROKER_URL] [default: the AMQP URL]' -r
complete -c dlq -n "__fish_dlq_using_subcommand audit" -l redis-key-prefix -d 'Redis: the app\'s `global_keyprefix` transport option [env: DLQ_REDIS_KEY_PREFIX]' -r
complete -c dlq -n "__fish_dlq_using_subcommand audit" -l redis-sep -d 'Redis: the app\'s `sep` transport option [env: DLQ_REDIS_SEP] [default: read from the workers\' bindings, else kombu\'s \\x06\\x16]' -r
complete -c dlq -n "__fish_dlq_using_subcommand audit" -l control-exchange -d 'Celery\'s `control_exchange`: workers answer on `<NAME>.pidbox` [env: DLQ_CONTROL_EXCHANGE] [default: celery]' -r
complete -c dlq -n "__fish_dlq_using_subcommand audit" -l redis-wait-replicas -d 'Redis: after each group of pushes, `WAIT N` replicas before rows are marked' -r
complete -c dlq -n "__fish_dlq_using_subcommand audit" -s o -l output -d 'Output format [default: table]' -r -f -a "table\t''
json\t''
ndjson\t''
csv\t''"
complete -c dlq -n "__fish_dlq_using_subcommand audit" -l color -d 'When to use colour [default: auto; NO_COLOR is honoured]' -r -f -a "auto\t''
always\t''
never\t''"
complete -c dlq -n "__fish_dlq_using_subcommand audit" -l audit-log -d 'Audit trail (NDJSON) appended by every replay and archive --delete [env: DLQ_AUDIT_LOG] [default: $XDG_STATE_HOME/dlq/audit.ndjson, else ~/.local/state/dlq/audit.ndjson]' -r -F
complete -c dlq -n "__fish_dlq_using_subcommand audit" -s q -l quiet -d 'Print only data and errors'
complete -c dlq -n "__fish_dlq_using_subcommand audit" -s v -l verbose -d 'More diagnostics on stderr (repeat for more)'
complete -c dlq -n "__fish_dlq_using_subcommand audit" -l no-progress -d 'Never draw progress bars'
complete -c dlq -n "__fish_dlq_using_subcommand audit" -s h -l help -d 'Print help'
complete -c dlq -n "__fish_dlq_using_subcommand audit" -s V -l version -d 'Print version'
complete -c dlq -n "__fish_dlq_using_subcommand help; and not __fish_seen_subcommand_from list inspect filter replay archive init workers check metrics browse completions audit help" -f -a "list" -d 'Overview of every dead-letter source: counts, oldest, top reasons'
complete -c dlq -n "__fish_dlq_using_subcommand help; and not __fish_seen_subcommand_from list inspect filter replay archive init workers check metrics browse completions audit help" -f -a "inspect" -d 'Show individual dead letters (default --limit 20; --full shows everything)'
complete -c dlq -n "__fish_dlq_using_subcommand help; and not __fish_seen_subcommand_from list inspect filter replay archive init workers check metrics browse completions audit help" -f -a "filter" -d 'Evaluate a selection: group it, count it, or export its records (-o ndjson)'
complete -c dlq -n "__fish_dlq_using_subcommand help; and not __fish_seen_subcommand_from list inspect filter replay archive init workers check metrics browse completions audit help" -f -a "replay" -d 'Re-dispatch selected dead letters (table rows as Celery tasks, queue messages to where they died)'
complete -c dlq -n "__fish_dlq_using_subcommand help; and not __fish_seen_subcommand_from list inspect filter replay archive init workers check metrics browse completions audit help" -f -a "archive" -d 'Write selected dead letters to an NDJSON archive, optionally deleting them from the source'
complete -c dlq -n "__fish_dlq_using_subcommand help; and not __fish_seen_subcommand_from list inspect filter replay archive init workers check metrics browse completions audit help" -f -a "init" -d 'Create the failed-task table with the right columns and index'
complete -c dlq -n "__fish_dlq_using_subcommand help; and not __fish_seen_subcommand_from list inspect filter replay archive init workers check metrics browse completions audit help" -f -a "workers" -d 'The live Celery workers: the queues each consumes and the tasks each registers'
complete -c dlq -n "__fish_dlq_using_subcommand help; and not __fish_seen_subcommand_from list inspect filter replay archive init workers check metrics browse completions audit help" -f -a "check" -d 'Nagios-style check: OK / WARNING / CRITICAL / UNKNOWN from pending dead letters, the age of the oldest and how many arrived lately (exit 0 / 1 / 2 / 3)'
complete -c dlq -n "__fish_dlq_using_subcommand help; and not __fish_seen_subcommand_from list inspect filter replay archive init workers check metrics browse completions audit help" -f -a "metrics" -d 'Prometheus metrics of every dead-letter source: on stdout, in a textfile for node_exporter, or served on GET /metrics'
complete -c dlq -n "__fish_dlq_using_subcommand help; and not __fish_seen_subcommand_from list inspect filter replay archive init workers check metrics browse completions audit help" -f -a "browse" -d 'The incident browser: sources, reason groups, records and one record\'s detail in the terminal, with replay, archive and export on what is marked'
complete -c dlq -n "__fish_dlq_using_subcommand help; and not __fish_seen_subcommand_from list inspect filter replay archive init workers check metrics browse completions audit help" -f -a "completions" -d 'Print a shell completion script'
complete -c dlq -n "__fish_dlq_using_subcommand help; and not __fish_seen_subcommand_from list inspect filter replay archive init workers check metrics browse completions audit help" -f -a "audit" -d 'The audit trail: who replayed, restored or archived (--delete) what, when, and how it ended'
complete -c dlq -n "__fish_dlq_using_subcommand help; and not __fish_seen_subcommand_from list inspect filter replay archive init workers check metrics browse completions audit help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
