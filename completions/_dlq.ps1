
using namespace System.Management.Automation
using namespace System.Management.Automation.Language

Register-ArgumentCompleter -Native -CommandName 'dlq' -ScriptBlock {
    param($wordToComplete, $commandAst, $cursorPosition)

    $commandElements = $commandAst.CommandElements
    $command = @(
        'dlq'
        for ($i = 1; $i -lt $commandElements.Count; $i++) {
            $element = $commandElements[$i]
            if ($element -isnot [StringConstantExpressionAst] -or
                $element.StringConstantType -ne [StringConstantType]::BareWord -or
                $element.Value.StartsWith('-') -or
                $element.Value -eq $wordToComplete) {
                break
        }
        $element.Value
    }) -join ';'

    $completions = @(switch ($command) {
        'dlq' {
            [CompletionResult]::new('--config', '--config', [CompletionResultType]::ParameterName, 'Config file [env: DLQ_CONFIG] [default: $XDG_CONFIG_HOME/dlq/config.toml]')
            [CompletionResult]::new('--profile', '--profile', [CompletionResultType]::ParameterName, 'Named profile from the config file [env: DLQ_PROFILE]')
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'Database holding the failed-task table: postgres://, mysql://, sqlite:// [env: DLQ_DATABASE_URL, DATABASE_URL]')
            [CompletionResult]::new('--table', '--table', [CompletionResultType]::ParameterName, 'Failed-task table, optionally schema-qualified [env: DLQ_TABLE] [default: tasks_falhadas]')
            [CompletionResult]::new('--amqp-url', '--amqp-url', [CompletionResultType]::ParameterName, 'RabbitMQ AMQP URL [env: DLQ_AMQP_URL, AMQP_URL] [default: amqp://guest:guest@127.0.0.1:5672/%2f]')
            [CompletionResult]::new('--management-url', '--management-url', [CompletionResultType]::ParameterName, 'RabbitMQ management API URL [env: DLQ_MANAGEMENT_URL] [default: the AMQP host on port 15672, AMQP credentials]')
            [CompletionResult]::new('--amqp-ca-file', '--amqp-ca-file', [CompletionResultType]::ParameterName, 'CA certificates (PEM) to trust for amqps:// and an https management API, on top of the system''s [env: DLQ_AMQP_CA_FILE]')
            [CompletionResult]::new('--amqp-client-cert', '--amqp-client-cert', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for amqps://, with --amqp-client-key [env: DLQ_AMQP_CLIENT_CERT]')
            [CompletionResult]::new('--amqp-client-key', '--amqp-client-key', [CompletionResultType]::ParameterName, 'Unencrypted private key (PEM) of --amqp-client-cert [env: DLQ_AMQP_CLIENT_KEY]')
            [CompletionResult]::new('--vhost', '--vhost', [CompletionResultType]::ParameterName, 'RabbitMQ virtual host [env: DLQ_VHOST] [default: from the AMQP URL]')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format [default: table]')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format [default: table]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to use colour [default: auto; NO_COLOR is honoured]')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only data and errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only data and errors')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More diagnostics on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More diagnostics on stderr (repeat for more)')
            [CompletionResult]::new('--no-progress', '--no-progress', [CompletionResultType]::ParameterName, 'Never draw progress bars')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'Overview of every dead-letter source: counts, oldest, top reasons')
            [CompletionResult]::new('inspect', 'inspect', [CompletionResultType]::ParameterValue, 'Show individual dead letters (default --limit 20; --full shows everything)')
            [CompletionResult]::new('filter', 'filter', [CompletionResultType]::ParameterValue, 'Evaluate a selection: group it, count it, or export its records (-o ndjson)')
            [CompletionResult]::new('replay', 'replay', [CompletionResultType]::ParameterValue, 'Re-dispatch selected dead letters (table rows as Celery tasks, queue messages to where they died)')
            [CompletionResult]::new('archive', 'archive', [CompletionResultType]::ParameterValue, 'Write selected dead letters to an NDJSON archive, optionally deleting them from the source')
            [CompletionResult]::new('init', 'init', [CompletionResultType]::ParameterValue, 'Create the failed-task table with the right columns and index')
            [CompletionResult]::new('completions', 'completions', [CompletionResultType]::ParameterValue, 'Print a shell completion script')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'dlq;list' {
            [CompletionResult]::new('-Q', '-Q ', [CompletionResultType]::ParameterName, 'Also list this queue (repeatable; works without the management API)')
            [CompletionResult]::new('--queue', '--queue', [CompletionResultType]::ParameterName, 'Also list this queue (repeatable; works without the management API)')
            [CompletionResult]::new('--top', '--top', [CompletionResultType]::ParameterName, 'How many top reasons to show per source')
            [CompletionResult]::new('--sample', '--sample', [CompletionResultType]::ParameterName, 'Messages read (and given back) at the head of each DLQ for its oldest message and top reasons; 0 reads none [default: 100, fewer with many DLQs: about 4000 in all, at least 20 each]')
            [CompletionResult]::new('--motivo-header', '--motivo-header', [CompletionResultType]::ParameterName, 'Extra message header holding the error text, used for reasons (repeatable)')
            [CompletionResult]::new('--config', '--config', [CompletionResultType]::ParameterName, 'Config file [env: DLQ_CONFIG] [default: $XDG_CONFIG_HOME/dlq/config.toml]')
            [CompletionResult]::new('--profile', '--profile', [CompletionResultType]::ParameterName, 'Named profile from the config file [env: DLQ_PROFILE]')
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'Database holding the failed-task table: postgres://, mysql://, sqlite:// [env: DLQ_DATABASE_URL, DATABASE_URL]')
            [CompletionResult]::new('--table', '--table', [CompletionResultType]::ParameterName, 'Failed-task table, optionally schema-qualified [env: DLQ_TABLE] [default: tasks_falhadas]')
            [CompletionResult]::new('--amqp-url', '--amqp-url', [CompletionResultType]::ParameterName, 'RabbitMQ AMQP URL [env: DLQ_AMQP_URL, AMQP_URL] [default: amqp://guest:guest@127.0.0.1:5672/%2f]')
            [CompletionResult]::new('--management-url', '--management-url', [CompletionResultType]::ParameterName, 'RabbitMQ management API URL [env: DLQ_MANAGEMENT_URL] [default: the AMQP host on port 15672, AMQP credentials]')
            [CompletionResult]::new('--amqp-ca-file', '--amqp-ca-file', [CompletionResultType]::ParameterName, 'CA certificates (PEM) to trust for amqps:// and an https management API, on top of the system''s [env: DLQ_AMQP_CA_FILE]')
            [CompletionResult]::new('--amqp-client-cert', '--amqp-client-cert', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for amqps://, with --amqp-client-key [env: DLQ_AMQP_CLIENT_CERT]')
            [CompletionResult]::new('--amqp-client-key', '--amqp-client-key', [CompletionResultType]::ParameterName, 'Unencrypted private key (PEM) of --amqp-client-cert [env: DLQ_AMQP_CLIENT_KEY]')
            [CompletionResult]::new('--vhost', '--vhost', [CompletionResultType]::ParameterName, 'RabbitMQ virtual host [env: DLQ_VHOST] [default: from the AMQP URL]')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format [default: table]')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format [default: table]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to use colour [default: auto; NO_COLOR is honoured]')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only data and errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only data and errors')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More diagnostics on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More diagnostics on stderr (repeat for more)')
            [CompletionResult]::new('--no-progress', '--no-progress', [CompletionResultType]::ParameterName, 'Never draw progress bars')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'dlq;inspect' {
            [CompletionResult]::new('-Q', '-Q ', [CompletionResultType]::ParameterName, 'Act on this RabbitMQ dead-letter queue instead of the table (repeatable)')
            [CompletionResult]::new('--queue', '--queue', [CompletionResultType]::ParameterName, 'Act on this RabbitMQ dead-letter queue instead of the table (repeatable)')
            [CompletionResult]::new('--motivo-header', '--motivo-header', [CompletionResultType]::ParameterName, 'Extra message header holding the error text, used for motivo (repeatable)')
            [CompletionResult]::new('--motivo', '--motivo', [CompletionResultType]::ParameterName, 'Reason contains TEXT (case-sensitive, like SQL LIKE ''%TEXT%'')')
            [CompletionResult]::new('-e', '-e', [CompletionResultType]::ParameterName, 'Regex over reason, task name and payload text')
            [CompletionResult]::new('--pattern', '--pattern', [CompletionResultType]::ParameterName, 'Regex over reason, task name and payload text')
            [CompletionResult]::new('--task', '--task', [CompletionResultType]::ParameterName, 'Task name (Celery task, or for queues the queue it first died in) (repeatable)')
            [CompletionResult]::new('--since', '--since', [CompletionResultType]::ParameterName, 'Created at or after WHEN (RFC 3339, YYYY-MM-DD, or a duration ago like 2h)')
            [CompletionResult]::new('--until', '--until', [CompletionResultType]::ParameterName, 'Created before WHEN (RFC 3339, YYYY-MM-DD, or a duration ago like 2h)')
            [CompletionResult]::new('--older-than', '--older-than', [CompletionResultType]::ParameterName, 'Created more than DURATION ago (90m, 7d) or before an RFC 3339 time')
            [CompletionResult]::new('--where', '--where', [CompletionResultType]::ParameterName, 'jq expression over the record''s JSON; selected when its first output is truthy')
            [CompletionResult]::new('--id', '--id', [CompletionResultType]::ParameterName, 'Only this id (repeatable)')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'At most N dead letters')
            [CompletionResult]::new('--config', '--config', [CompletionResultType]::ParameterName, 'Config file [env: DLQ_CONFIG] [default: $XDG_CONFIG_HOME/dlq/config.toml]')
            [CompletionResult]::new('--profile', '--profile', [CompletionResultType]::ParameterName, 'Named profile from the config file [env: DLQ_PROFILE]')
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'Database holding the failed-task table: postgres://, mysql://, sqlite:// [env: DLQ_DATABASE_URL, DATABASE_URL]')
            [CompletionResult]::new('--table', '--table', [CompletionResultType]::ParameterName, 'Failed-task table, optionally schema-qualified [env: DLQ_TABLE] [default: tasks_falhadas]')
            [CompletionResult]::new('--amqp-url', '--amqp-url', [CompletionResultType]::ParameterName, 'RabbitMQ AMQP URL [env: DLQ_AMQP_URL, AMQP_URL] [default: amqp://guest:guest@127.0.0.1:5672/%2f]')
            [CompletionResult]::new('--management-url', '--management-url', [CompletionResultType]::ParameterName, 'RabbitMQ management API URL [env: DLQ_MANAGEMENT_URL] [default: the AMQP host on port 15672, AMQP credentials]')
            [CompletionResult]::new('--amqp-ca-file', '--amqp-ca-file', [CompletionResultType]::ParameterName, 'CA certificates (PEM) to trust for amqps:// and an https management API, on top of the system''s [env: DLQ_AMQP_CA_FILE]')
            [CompletionResult]::new('--amqp-client-cert', '--amqp-client-cert', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for amqps://, with --amqp-client-key [env: DLQ_AMQP_CLIENT_CERT]')
            [CompletionResult]::new('--amqp-client-key', '--amqp-client-key', [CompletionResultType]::ParameterName, 'Unencrypted private key (PEM) of --amqp-client-cert [env: DLQ_AMQP_CLIENT_KEY]')
            [CompletionResult]::new('--vhost', '--vhost', [CompletionResultType]::ParameterName, 'RabbitMQ virtual host [env: DLQ_VHOST] [default: from the AMQP URL]')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format [default: table]')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format [default: table]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to use colour [default: auto; NO_COLOR is honoured]')
            [CompletionResult]::new('--force', '--force', [CompletionResultType]::ParameterName, 'Read a quorum queue even where that could push messages over its delivery limit (also needed when the queue type cannot be checked: management API unavailable)')
            [CompletionResult]::new('-i', '-i', [CompletionResultType]::ParameterName, 'Make --motivo case-insensitive')
            [CompletionResult]::new('--ignore-case', '--ignore-case', [CompletionResultType]::ParameterName, 'Make --motivo case-insensitive')
            [CompletionResult]::new('--include-replayed', '--include-replayed', [CompletionResultType]::ParameterName, 'Also select rows already marked reprocessada')
            [CompletionResult]::new('--only-replayed', '--only-replayed', [CompletionResultType]::ParameterName, 'Select only rows already marked reprocessada')
            [CompletionResult]::new('--full', '--full', [CompletionResultType]::ParameterName, 'Show every field of every record, reasons in full')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only data and errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only data and errors')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More diagnostics on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More diagnostics on stderr (repeat for more)')
            [CompletionResult]::new('--no-progress', '--no-progress', [CompletionResultType]::ParameterName, 'Never draw progress bars')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'dlq;filter' {
            [CompletionResult]::new('-Q', '-Q ', [CompletionResultType]::ParameterName, 'Act on this RabbitMQ dead-letter queue instead of the table (repeatable)')
            [CompletionResult]::new('--queue', '--queue', [CompletionResultType]::ParameterName, 'Act on this RabbitMQ dead-letter queue instead of the table (repeatable)')
            [CompletionResult]::new('--motivo-header', '--motivo-header', [CompletionResultType]::ParameterName, 'Extra message header holding the error text, used for motivo (repeatable)')
            [CompletionResult]::new('--motivo', '--motivo', [CompletionResultType]::ParameterName, 'Reason contains TEXT (case-sensitive, like SQL LIKE ''%TEXT%'')')
            [CompletionResult]::new('-e', '-e', [CompletionResultType]::ParameterName, 'Regex over reason, task name and payload text')
            [CompletionResult]::new('--pattern', '--pattern', [CompletionResultType]::ParameterName, 'Regex over reason, task name and payload text')
            [CompletionResult]::new('--task', '--task', [CompletionResultType]::ParameterName, 'Task name (Celery task, or for queues the queue it first died in) (repeatable)')
            [CompletionResult]::new('--since', '--since', [CompletionResultType]::ParameterName, 'Created at or after WHEN (RFC 3339, YYYY-MM-DD, or a duration ago like 2h)')
            [CompletionResult]::new('--until', '--until', [CompletionResultType]::ParameterName, 'Created before WHEN (RFC 3339, YYYY-MM-DD, or a duration ago like 2h)')
            [CompletionResult]::new('--older-than', '--older-than', [CompletionResultType]::ParameterName, 'Created more than DURATION ago (90m, 7d) or before an RFC 3339 time')
            [CompletionResult]::new('--where', '--where', [CompletionResultType]::ParameterName, 'jq expression over the record''s JSON; selected when its first output is truthy')
            [CompletionResult]::new('--id', '--id', [CompletionResultType]::ParameterName, 'Only this id (repeatable)')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'At most N dead letters')
            [CompletionResult]::new('--group-by', '--group-by', [CompletionResultType]::ParameterName, 'Group the selection and count each group')
            [CompletionResult]::new('--config', '--config', [CompletionResultType]::ParameterName, 'Config file [env: DLQ_CONFIG] [default: $XDG_CONFIG_HOME/dlq/config.toml]')
            [CompletionResult]::new('--profile', '--profile', [CompletionResultType]::ParameterName, 'Named profile from the config file [env: DLQ_PROFILE]')
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'Database holding the failed-task table: postgres://, mysql://, sqlite:// [env: DLQ_DATABASE_URL, DATABASE_URL]')
            [CompletionResult]::new('--table', '--table', [CompletionResultType]::ParameterName, 'Failed-task table, optionally schema-qualified [env: DLQ_TABLE] [default: tasks_falhadas]')
            [CompletionResult]::new('--amqp-url', '--amqp-url', [CompletionResultType]::ParameterName, 'RabbitMQ AMQP URL [env: DLQ_AMQP_URL, AMQP_URL] [default: amqp://guest:guest@127.0.0.1:5672/%2f]')
            [CompletionResult]::new('--management-url', '--management-url', [CompletionResultType]::ParameterName, 'RabbitMQ management API URL [env: DLQ_MANAGEMENT_URL] [default: the AMQP host on port 15672, AMQP credentials]')
            [CompletionResult]::new('--amqp-ca-file', '--amqp-ca-file', [CompletionResultType]::ParameterName, 'CA certificates (PEM) to trust for amqps:// and an https management API, on top of the system''s [env: DLQ_AMQP_CA_FILE]')
            [CompletionResult]::new('--amqp-client-cert', '--amqp-client-cert', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for amqps://, with --amqp-client-key [env: DLQ_AMQP_CLIENT_CERT]')
            [CompletionResult]::new('--amqp-client-key', '--amqp-client-key', [CompletionResultType]::ParameterName, 'Unencrypted private key (PEM) of --amqp-client-cert [env: DLQ_AMQP_CLIENT_KEY]')
            [CompletionResult]::new('--vhost', '--vhost', [CompletionResultType]::ParameterName, 'RabbitMQ virtual host [env: DLQ_VHOST] [default: from the AMQP URL]')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format [default: table]')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format [default: table]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to use colour [default: auto; NO_COLOR is honoured]')
            [CompletionResult]::new('--force', '--force', [CompletionResultType]::ParameterName, 'Read a quorum queue even where that could push messages over its delivery limit (also needed when the queue type cannot be checked: management API unavailable)')
            [CompletionResult]::new('-i', '-i', [CompletionResultType]::ParameterName, 'Make --motivo case-insensitive')
            [CompletionResult]::new('--ignore-case', '--ignore-case', [CompletionResultType]::ParameterName, 'Make --motivo case-insensitive')
            [CompletionResult]::new('--include-replayed', '--include-replayed', [CompletionResultType]::ParameterName, 'Also select rows already marked reprocessada')
            [CompletionResult]::new('--only-replayed', '--only-replayed', [CompletionResultType]::ParameterName, 'Select only rows already marked reprocessada')
            [CompletionResult]::new('--count', '--count', [CompletionResultType]::ParameterName, 'Print only the number of selected dead letters')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only data and errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only data and errors')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More diagnostics on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More diagnostics on stderr (repeat for more)')
            [CompletionResult]::new('--no-progress', '--no-progress', [CompletionResultType]::ParameterName, 'Never draw progress bars')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'dlq;replay' {
            [CompletionResult]::new('-Q', '-Q ', [CompletionResultType]::ParameterName, 'Act on this RabbitMQ dead-letter queue instead of the table (repeatable)')
            [CompletionResult]::new('--queue', '--queue', [CompletionResultType]::ParameterName, 'Act on this RabbitMQ dead-letter queue instead of the table (repeatable)')
            [CompletionResult]::new('--motivo-header', '--motivo-header', [CompletionResultType]::ParameterName, 'Extra message header holding the error text, used for motivo (repeatable)')
            [CompletionResult]::new('--motivo', '--motivo', [CompletionResultType]::ParameterName, 'Reason contains TEXT (case-sensitive, like SQL LIKE ''%TEXT%'')')
            [CompletionResult]::new('-e', '-e', [CompletionResultType]::ParameterName, 'Regex over reason, task name and payload text')
            [CompletionResult]::new('--pattern', '--pattern', [CompletionResultType]::ParameterName, 'Regex over reason, task name and payload text')
            [CompletionResult]::new('--task', '--task', [CompletionResultType]::ParameterName, 'Task name (Celery task, or for queues the queue it first died in) (repeatable)')
            [CompletionResult]::new('--since', '--since', [CompletionResultType]::ParameterName, 'Created at or after WHEN (RFC 3339, YYYY-MM-DD, or a duration ago like 2h)')
            [CompletionResult]::new('--until', '--until', [CompletionResultType]::ParameterName, 'Created before WHEN (RFC 3339, YYYY-MM-DD, or a duration ago like 2h)')
            [CompletionResult]::new('--older-than', '--older-than', [CompletionResultType]::ParameterName, 'Created more than DURATION ago (90m, 7d) or before an RFC 3339 time')
            [CompletionResult]::new('--where', '--where', [CompletionResultType]::ParameterName, 'jq expression over the record''s JSON; selected when its first output is truthy')
            [CompletionResult]::new('--id', '--id', [CompletionResultType]::ParameterName, 'Only this id (repeatable)')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'At most N dead letters')
            [CompletionResult]::new('--to-queue', '--to-queue', [CompletionResultType]::ParameterName, 'Publish to this queue (table default: celery; queue default: where each message died)')
            [CompletionResult]::new('--to-exchange', '--to-exchange', [CompletionResultType]::ParameterName, 'Publish to this exchange instead')
            [CompletionResult]::new('--routing-key', '--routing-key', [CompletionResultType]::ParameterName, 'Routing key with --to-exchange')
            [CompletionResult]::new('--rate', '--rate', [CompletionResultType]::ParameterName, 'At most N messages per second')
            [CompletionResult]::new('--window', '--window', [CompletionResultType]::ParameterName, 'Publishes in flight at once; also the most that a killed run can leave published but not yet marked/acked (the duplicate window)')
            [CompletionResult]::new('--from-file', '--from-file', [CompletionResultType]::ParameterName, 'Replay from an archive written by `dlq archive`')
            [CompletionResult]::new('--max-replays', '--max-replays', [CompletionResultType]::ParameterName, 'Refuse messages already replayed this many times')
            [CompletionResult]::new('--canary', '--canary', [CompletionResultType]::ParameterName, 'Replay N messages first and stop if any of them dies again')
            [CompletionResult]::new('--canary-wait', '--canary-wait', [CompletionResultType]::ParameterName, 'How long to watch the canary messages')
            [CompletionResult]::new('--config', '--config', [CompletionResultType]::ParameterName, 'Config file [env: DLQ_CONFIG] [default: $XDG_CONFIG_HOME/dlq/config.toml]')
            [CompletionResult]::new('--profile', '--profile', [CompletionResultType]::ParameterName, 'Named profile from the config file [env: DLQ_PROFILE]')
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'Database holding the failed-task table: postgres://, mysql://, sqlite:// [env: DLQ_DATABASE_URL, DATABASE_URL]')
            [CompletionResult]::new('--table', '--table', [CompletionResultType]::ParameterName, 'Failed-task table, optionally schema-qualified [env: DLQ_TABLE] [default: tasks_falhadas]')
            [CompletionResult]::new('--amqp-url', '--amqp-url', [CompletionResultType]::ParameterName, 'RabbitMQ AMQP URL [env: DLQ_AMQP_URL, AMQP_URL] [default: amqp://guest:guest@127.0.0.1:5672/%2f]')
            [CompletionResult]::new('--management-url', '--management-url', [CompletionResultType]::ParameterName, 'RabbitMQ management API URL [env: DLQ_MANAGEMENT_URL] [default: the AMQP host on port 15672, AMQP credentials]')
            [CompletionResult]::new('--amqp-ca-file', '--amqp-ca-file', [CompletionResultType]::ParameterName, 'CA certificates (PEM) to trust for amqps:// and an https management API, on top of the system''s [env: DLQ_AMQP_CA_FILE]')
            [CompletionResult]::new('--amqp-client-cert', '--amqp-client-cert', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for amqps://, with --amqp-client-key [env: DLQ_AMQP_CLIENT_CERT]')
            [CompletionResult]::new('--amqp-client-key', '--amqp-client-key', [CompletionResultType]::ParameterName, 'Unencrypted private key (PEM) of --amqp-client-cert [env: DLQ_AMQP_CLIENT_KEY]')
            [CompletionResult]::new('--vhost', '--vhost', [CompletionResultType]::ParameterName, 'RabbitMQ virtual host [env: DLQ_VHOST] [default: from the AMQP URL]')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format [default: table]')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format [default: table]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to use colour [default: auto; NO_COLOR is honoured]')
            [CompletionResult]::new('--force', '--force', [CompletionResultType]::ParameterName, 'Read a quorum queue even where that could push messages over its delivery limit (also needed when the queue type cannot be checked: management API unavailable)')
            [CompletionResult]::new('-i', '-i', [CompletionResultType]::ParameterName, 'Make --motivo case-insensitive')
            [CompletionResult]::new('--ignore-case', '--ignore-case', [CompletionResultType]::ParameterName, 'Make --motivo case-insensitive')
            [CompletionResult]::new('--include-replayed', '--include-replayed', [CompletionResultType]::ParameterName, 'Also select rows already marked reprocessada')
            [CompletionResult]::new('--only-replayed', '--only-replayed', [CompletionResultType]::ParameterName, 'Select only rows already marked reprocessada')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'Print the plan and what would be done, change nothing')
            [CompletionResult]::new('-y', '-y', [CompletionResultType]::ParameterName, 'Do not ask for confirmation')
            [CompletionResult]::new('--yes', '--yes', [CompletionResultType]::ParameterName, 'Do not ask for confirmation')
            [CompletionResult]::new('--plan-first', '--plan-first', [CompletionResultType]::ParameterName, 'Queue replay with --yes: take and select everything before moving anything (as without --yes), so a missing destination refuses the whole run')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only data and errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only data and errors')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More diagnostics on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More diagnostics on stderr (repeat for more)')
            [CompletionResult]::new('--no-progress', '--no-progress', [CompletionResultType]::ParameterName, 'Never draw progress bars')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'dlq;archive' {
            [CompletionResult]::new('-Q', '-Q ', [CompletionResultType]::ParameterName, 'Act on this RabbitMQ dead-letter queue instead of the table (repeatable)')
            [CompletionResult]::new('--queue', '--queue', [CompletionResultType]::ParameterName, 'Act on this RabbitMQ dead-letter queue instead of the table (repeatable)')
            [CompletionResult]::new('--motivo-header', '--motivo-header', [CompletionResultType]::ParameterName, 'Extra message header holding the error text, used for motivo (repeatable)')
            [CompletionResult]::new('--motivo', '--motivo', [CompletionResultType]::ParameterName, 'Reason contains TEXT (case-sensitive, like SQL LIKE ''%TEXT%'')')
            [CompletionResult]::new('-e', '-e', [CompletionResultType]::ParameterName, 'Regex over reason, task name and payload text')
            [CompletionResult]::new('--pattern', '--pattern', [CompletionResultType]::ParameterName, 'Regex over reason, task name and payload text')
            [CompletionResult]::new('--task', '--task', [CompletionResultType]::ParameterName, 'Task name (Celery task, or for queues the queue it first died in) (repeatable)')
            [CompletionResult]::new('--since', '--since', [CompletionResultType]::ParameterName, 'Created at or after WHEN (RFC 3339, YYYY-MM-DD, or a duration ago like 2h)')
            [CompletionResult]::new('--until', '--until', [CompletionResultType]::ParameterName, 'Created before WHEN (RFC 3339, YYYY-MM-DD, or a duration ago like 2h)')
            [CompletionResult]::new('--older-than', '--older-than', [CompletionResultType]::ParameterName, 'Created more than DURATION ago (90m, 7d) or before an RFC 3339 time')
            [CompletionResult]::new('--where', '--where', [CompletionResultType]::ParameterName, 'jq expression over the record''s JSON; selected when its first output is truthy')
            [CompletionResult]::new('--id', '--id', [CompletionResultType]::ParameterName, 'Only this id (repeatable)')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'At most N dead letters')
            [CompletionResult]::new('--to', '--to', [CompletionResultType]::ParameterName, 'Archive file (NDJSON; gzip when it ends in .gz; - for stdout)')
            [CompletionResult]::new('--config', '--config', [CompletionResultType]::ParameterName, 'Config file [env: DLQ_CONFIG] [default: $XDG_CONFIG_HOME/dlq/config.toml]')
            [CompletionResult]::new('--profile', '--profile', [CompletionResultType]::ParameterName, 'Named profile from the config file [env: DLQ_PROFILE]')
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'Database holding the failed-task table: postgres://, mysql://, sqlite:// [env: DLQ_DATABASE_URL, DATABASE_URL]')
            [CompletionResult]::new('--table', '--table', [CompletionResultType]::ParameterName, 'Failed-task table, optionally schema-qualified [env: DLQ_TABLE] [default: tasks_falhadas]')
            [CompletionResult]::new('--amqp-url', '--amqp-url', [CompletionResultType]::ParameterName, 'RabbitMQ AMQP URL [env: DLQ_AMQP_URL, AMQP_URL] [default: amqp://guest:guest@127.0.0.1:5672/%2f]')
            [CompletionResult]::new('--management-url', '--management-url', [CompletionResultType]::ParameterName, 'RabbitMQ management API URL [env: DLQ_MANAGEMENT_URL] [default: the AMQP host on port 15672, AMQP credentials]')
            [CompletionResult]::new('--amqp-ca-file', '--amqp-ca-file', [CompletionResultType]::ParameterName, 'CA certificates (PEM) to trust for amqps:// and an https management API, on top of the system''s [env: DLQ_AMQP_CA_FILE]')
            [CompletionResult]::new('--amqp-client-cert', '--amqp-client-cert', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for amqps://, with --amqp-client-key [env: DLQ_AMQP_CLIENT_CERT]')
            [CompletionResult]::new('--amqp-client-key', '--amqp-client-key', [CompletionResultType]::ParameterName, 'Unencrypted private key (PEM) of --amqp-client-cert [env: DLQ_AMQP_CLIENT_KEY]')
            [CompletionResult]::new('--vhost', '--vhost', [CompletionResultType]::ParameterName, 'RabbitMQ virtual host [env: DLQ_VHOST] [default: from the AMQP URL]')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format [default: table]')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format [default: table]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to use colour [default: auto; NO_COLOR is honoured]')
            [CompletionResult]::new('--force', '--force', [CompletionResultType]::ParameterName, 'Read a quorum queue even where that could push messages over its delivery limit (also needed when the queue type cannot be checked: management API unavailable)')
            [CompletionResult]::new('-i', '-i', [CompletionResultType]::ParameterName, 'Make --motivo case-insensitive')
            [CompletionResult]::new('--ignore-case', '--ignore-case', [CompletionResultType]::ParameterName, 'Make --motivo case-insensitive')
            [CompletionResult]::new('--include-replayed', '--include-replayed', [CompletionResultType]::ParameterName, 'Also select rows already marked reprocessada')
            [CompletionResult]::new('--only-replayed', '--only-replayed', [CompletionResultType]::ParameterName, 'Select only rows already marked reprocessada')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'Print the plan and what would be done, change nothing')
            [CompletionResult]::new('-y', '-y', [CompletionResultType]::ParameterName, 'Do not ask for confirmation')
            [CompletionResult]::new('--yes', '--yes', [CompletionResultType]::ParameterName, 'Do not ask for confirmation')
            [CompletionResult]::new('--delete', '--delete', [CompletionResultType]::ParameterName, 'Remove archived dead letters from their source once the archive is on disk')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only data and errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only data and errors')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More diagnostics on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More diagnostics on stderr (repeat for more)')
            [CompletionResult]::new('--no-progress', '--no-progress', [CompletionResultType]::ParameterName, 'Never draw progress bars')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'dlq;init' {
            [CompletionResult]::new('--config', '--config', [CompletionResultType]::ParameterName, 'Config file [env: DLQ_CONFIG] [default: $XDG_CONFIG_HOME/dlq/config.toml]')
            [CompletionResult]::new('--profile', '--profile', [CompletionResultType]::ParameterName, 'Named profile from the config file [env: DLQ_PROFILE]')
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'Database holding the failed-task table: postgres://, mysql://, sqlite:// [env: DLQ_DATABASE_URL, DATABASE_URL]')
            [CompletionResult]::new('--table', '--table', [CompletionResultType]::ParameterName, 'Failed-task table, optionally schema-qualified [env: DLQ_TABLE] [default: tasks_falhadas]')
            [CompletionResult]::new('--amqp-url', '--amqp-url', [CompletionResultType]::ParameterName, 'RabbitMQ AMQP URL [env: DLQ_AMQP_URL, AMQP_URL] [default: amqp://guest:guest@127.0.0.1:5672/%2f]')
            [CompletionResult]::new('--management-url', '--management-url', [CompletionResultType]::ParameterName, 'RabbitMQ management API URL [env: DLQ_MANAGEMENT_URL] [default: the AMQP host on port 15672, AMQP credentials]')
            [CompletionResult]::new('--amqp-ca-file', '--amqp-ca-file', [CompletionResultType]::ParameterName, 'CA certificates (PEM) to trust for amqps:// and an https management API, on top of the system''s [env: DLQ_AMQP_CA_FILE]')
            [CompletionResult]::new('--amqp-client-cert', '--amqp-client-cert', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for amqps://, with --amqp-client-key [env: DLQ_AMQP_CLIENT_CERT]')
            [CompletionResult]::new('--amqp-client-key', '--amqp-client-key', [CompletionResultType]::ParameterName, 'Unencrypted private key (PEM) of --amqp-client-cert [env: DLQ_AMQP_CLIENT_KEY]')
            [CompletionResult]::new('--vhost', '--vhost', [CompletionResultType]::ParameterName, 'RabbitMQ virtual host [env: DLQ_VHOST] [default: from the AMQP URL]')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format [default: table]')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format [default: table]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to use colour [default: auto; NO_COLOR is honoured]')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'Print the SQL instead of running it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only data and errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only data and errors')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More diagnostics on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More diagnostics on stderr (repeat for more)')
            [CompletionResult]::new('--no-progress', '--no-progress', [CompletionResultType]::ParameterName, 'Never draw progress bars')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'dlq;completions' {
            [CompletionResult]::new('--config', '--config', [CompletionResultType]::ParameterName, 'Config file [env: DLQ_CONFIG] [default: $XDG_CONFIG_HOME/dlq/config.toml]')
            [CompletionResult]::new('--profile', '--profile', [CompletionResultType]::ParameterName, 'Named profile from the config file [env: DLQ_PROFILE]')
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'Database holding the failed-task table: postgres://, mysql://, sqlite:// [env: DLQ_DATABASE_URL, DATABASE_URL]')
            [CompletionResult]::new('--table', '--table', [CompletionResultType]::ParameterName, 'Failed-task table, optionally schema-qualified [env: DLQ_TABLE] [default: tasks_falhadas]')
            [CompletionResult]::new('--amqp-url', '--amqp-url', [CompletionResultType]::ParameterName, 'RabbitMQ AMQP URL [env: DLQ_AMQP_URL, AMQP_URL] [default: amqp://guest:guest@127.0.0.1:5672/%2f]')
            [CompletionResult]::new('--management-url', '--management-url', [CompletionResultType]::ParameterName, 'RabbitMQ management API URL [env: DLQ_MANAGEMENT_URL] [default: the AMQP host on port 15672, AMQP credentials]')
            [CompletionResult]::new('--amqp-ca-file', '--amqp-ca-file', [CompletionResultType]::ParameterName, 'CA certificates (PEM) to trust for amqps:// and an https management API, on top of the system''s [env: DLQ_AMQP_CA_FILE]')
            [CompletionResult]::new('--amqp-client-cert', '--amqp-client-cert', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for amqps://, with --amqp-client-key [env: DLQ_AMQP_CLIENT_CERT]')
            [CompletionResult]::new('--amqp-client-key', '--amqp-client-key', [CompletionResultType]::ParameterName, 'Unencrypted private key (PEM) of --amqp-client-cert [env: DLQ_AMQP_CLIENT_KEY]')
            [CompletionResult]::new('--vhost', '--vhost', [CompletionResultType]::ParameterName, 'RabbitMQ virtual host [env: DLQ_VHOST] [default: from the AMQP URL]')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format [default: table]')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format [default: table]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to use colour [default: auto; NO_COLOR is honoured]')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only data and errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only data and errors')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More diagnostics on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More diagnostics on stderr (repeat for more)')
            [CompletionResult]::new('--no-progress', '--no-progress', [CompletionResultType]::ParameterName, 'Never draw progress bars')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'dlq;help' {
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'Overview of every dead-letter source: counts, oldest, top reasons')
            [CompletionResult]::new('inspect', 'inspect', [CompletionResultType]::ParameterValue, 'Show individual dead letters (default --limit 20; --full shows everything)')
            [CompletionResult]::new('filter', 'filter', [CompletionResultType]::ParameterValue, 'Evaluate a selection: group it, count it, or export its records (-o ndjson)')
            [CompletionResult]::new('replay', 'replay', [CompletionResultType]::ParameterValue, 'Re-dispatch selected dead letters (table rows as Celery tasks, queue messages to where they died)')
            [CompletionResult]::new('archive', 'archive', [CompletionResultType]::ParameterValue, 'Write selected dead letters to an NDJSON archive, optionally deleting them from the source')
            [CompletionResult]::new('init', 'init', [CompletionResultType]::ParameterValue, 'Create the failed-task table with the right columns and index')
            [CompletionResult]::new('completions', 'completions', [CompletionResultType]::ParameterValue, 'Print a shell completion script')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'dlq;help;list' {
            break
        }
        'dlq;help;inspect' {
            break
        }
        'dlq;help;filter' {
            break
        }
        'dlq;help;replay' {
            break
        }
        'dlq;help;archive' {
            break
        }
        'dlq;help;init' {
            break
        }
        'dlq;help;completions' {
            break
        }
        'dlq;help;help' {
            break
        }
    })

    $completions.Where{ $_.CompletionText -like "$wordToComplete*" } |
        Sort-Object -Property ListItemText
}
