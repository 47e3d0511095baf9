_dlq() {
    local i cur prev opts cmd
    COMPREPLY=()
    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
        cur="$2"
    else
        cur="${COMP_WORDS[COMP_CWORD]}"
    fi
    prev="$3"
    cmd=""
    opts=""

    for i in "${COMP_WORDS[@]:0:COMP_CWORD}"
    do
        case "${cmd},${i}" in
            ",$1")
                cmd="dlq"
                ;;
            dlq,archive)
                cmd="dlq__subcmd__archive"
                ;;
            dlq,audit)
                cmd="dlq__subcmd__audit"
                ;;
            dlq,browse)
                cmd="dlq__subcmd__browse"
                ;;
            dlq,check)
                cmd="dlq__subcmd__check"
                ;;
            dlq,completions)
                cmd="dlq__subcmd__completions"
                ;;
            dlq,filter)
                cmd="dlq__subcmd__filter"
                ;;
            dlq,help)
                cmd="dlq__subcmd__help"
                ;;
            dlq,init)
                cmd="dlq__subcmd__init"
                ;;
            dlq,inspect)
                cmd="dlq__subcmd__inspect"
                ;;
            dlq,list)
                cmd="dlq__subcmd__list"
                ;;
            dlq,metrics)
                cmd="dlq__subcmd__metrics"
                ;;
            dlq,replay)
                cmd="dlq__subcmd__replay"
                ;;
            dlq,workers)
                cmd="dlq__subcmd__workers"
                ;;
            dlq__subcmd__help,archive)
                cmd="dlq__subcmd__help__subcmd__archive"
                ;;
            dlq__subcmd__help,audit)
                cmd="dlq__subcmd__help__subcmd__audit"
                ;;
            dlq__subcmd__help,browse)
                cmd="dlq__subcmd__help__subcmd__browse"
                ;;
            dlq__subcmd__help,check)
                cmd="dlq__subcmd__help__subcmd__check"
                ;;
            dlq__subcmd__help,completions)
                cmd="dlq__subcmd__help__subcmd__completions"
                ;;
            dlq__subcmd__help,filter)
                cmd="dlq__subcmd__help__subcmd__filter"
                ;;
            dlq__subcmd__help,help)
                cmd="dlq__subcmd__help__subcmd__help"
                ;;
            dlq__subcmd__help,init)
                cmd="dlq__subcmd__help__subcmd__init"
                ;;
            dlq__subcmd__help,inspect)
                cmd="dlq__subcmd__help__subcmd__inspect"
                ;;
            dlq__subcmd__help,list)
                cmd="dlq__subcmd__help__subcmd__list"
                ;;
            dlq__subcmd__help,metrics)
                cmd="dlq__subcmd__help__subcmd__metrics"
                ;;
            dlq__subcmd__help,replay)
                cmd="dlq__subcmd__help__subcmd__replay"
                ;;
            dlq__subcmd__help,workers)
                cmd="dlq__subcmd__help__subcmd__workers"
                ;;
            *)
                ;;
        esac
    done

    case "${cmd}" in
        dlq)
            opts="-o -q -v -h -V --config --profile --database-url --table --amqp-url --management-url --amqp-ca-file --amqp-client-cert --amqp-client-key --vhost --broker-url --redis-key-prefix --redis-sep --control-exchange --redis-wait-replicas --output --quiet --verbose --color --no-progress --audit-log --help --version list inspect filter replay archive init workers check metrics browse completions audit help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 1 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --profile)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --database-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --table)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --management-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-ca-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-client-cert)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-client-key)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --vhost)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --broker-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-key-prefix)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-sep)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --control-exchange)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-wait-replicas)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "table json ndjson csv" -- "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -W "table json ndjson csv" -- "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --audit-log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        dlq__subcmd__archive)
            opts="-Q -i -e -y -o -q -v -h -V --queue --motivo-header --force --motivo --ignore-case --pattern --task --since --until --older-than --where --id --include-replayed --only-replayed --limit --dry-run --yes --to --delete --config --profile --database-url --table --amqp-url --management-url --amqp-ca-file --amqp-client-cert --amqp-client-key --vhost --broker-url --redis-key-prefix --redis-sep --control-exchange --redis-wait-replicas --output --quiet --verbose --color --no-progress --audit-log --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --queue)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -Q)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --motivo-header)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --motivo)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pattern)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -e)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --task)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --since)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --until)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --older-than)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --where)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --id)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --limit)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --to)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --profile)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --database-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --table)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --management-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-ca-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-client-cert)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-client-key)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --vhost)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --broker-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-key-prefix)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-sep)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --control-exchange)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-wait-replicas)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "table json ndjson csv" -- "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -W "table json ndjson csv" -- "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --audit-log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        dlq__subcmd__audit)
            opts="-o -q -v -h -V --since --run --config --profile --database-url --table --amqp-url --management-url --amqp-ca-file --amqp-client-cert --amqp-client-key --vhost --broker-url --redis-key-prefix --redis-sep --control-exchange --redis-wait-replicas --output --quiet --verbose --color --no-progress --audit-log --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --since)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --run)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --profile)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --database-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --table)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --management-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-ca-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-client-cert)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-client-key)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --vhost)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --broker-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-key-prefix)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-sep)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --control-exchange)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-wait-replicas)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "table json ndjson csv" -- "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -W "table json ndjson csv" -- "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --audit-log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        dlq__subcmd__browse)
            opts="-Q -o -q -v -h -V --queue --motivo-header --force --exclude --refresh --read-only --task-map --worker-timeout --no-worker-check --config --profile --database-url --table --amqp-url --management-url --amqp-ca-file --amqp-client-cert --amqp-client-key --vhost --broker-url --redis-key-prefix --redis-sep --control-exchange --redis-wait-replicas --output --quiet --verbose --color --no-progress --audit-log --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --queue)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -Q)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --motivo-header)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --exclude)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --refresh)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --task-map)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --worker-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --profile)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --database-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --table)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --management-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-ca-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-client-cert)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-client-key)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --vhost)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --broker-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-key-prefix)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-sep)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --control-exchange)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-wait-replicas)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "table json ndjson csv" -- "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -W "table json ndjson csv" -- "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --audit-log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        dlq__subcmd__check)
            opts="-Q -o -q -v -h -V --queue --motivo-header --force --warn-pending --crit-pending --warn-age --crit-age --warn-new --crit-new --new-within --sample --config --profile --database-url --table --amqp-url --management-url --amqp-ca-file --amqp-client-cert --amqp-client-key --vhost --broker-url --redis-key-prefix --redis-sep --control-exchange --redis-wait-replicas --output --quiet --verbose --color --no-progress --audit-log --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --queue)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -Q)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --motivo-header)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --warn-pending)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --crit-pending)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --warn-age)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --crit-age)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --warn-new)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --crit-new)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --new-within)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --sample)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --profile)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --database-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --table)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --management-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-ca-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-client-cert)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-client-key)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --vhost)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --broker-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-key-prefix)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-sep)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --control-exchange)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-wait-replicas)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "table json ndjson csv" -- "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -W "table json ndjson csv" -- "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --audit-log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        dlq__subcmd__completions)
            opts="-o -q -v -h -V --config --profile --database-url --table --amqp-url --management-url --amqp-ca-file --amqp-client-cert --amqp-client-key --vhost --broker-url --redis-key-prefix --redis-sep --control-exchange --redis-wait-replicas --output --quiet --verbose --color --no-progress --audit-log --help --version bash elvish fish powershell zsh"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --profile)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --database-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --table)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --management-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-ca-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-client-cert)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-client-key)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --vhost)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --broker-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-key-prefix)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-sep)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --control-exchange)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-wait-replicas)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "table json ndjson csv" -- "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -W "table json ndjson csv" -- "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --audit-log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        dlq__subcmd__filter)
            opts="-Q -i -e -o -q -v -h -V --queue --motivo-header --force --motivo --ignore-case --pattern --task --since --until --older-than --where --id --include-replayed --only-replayed --limit --group-by --count --config --profile --database-url --table --amqp-url --management-url --amqp-ca-file --amqp-client-cert --amqp-client-key --vhost --broker-url --redis-key-prefix --redis-sep --control-exchange --redis-wait-replicas --output --quiet --verbose --color --no-progress --audit-log --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --queue)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -Q)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --motivo-header)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --motivo)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pattern)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -e)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --task)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --since)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --until)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --older-than)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --where)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --id)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --limit)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --group-by)
                    COMPREPLY=($(compgen -W "motivo task day" -- "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --profile)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --database-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --table)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --management-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-ca-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-client-cert)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-client-key)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --vhost)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --broker-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-key-prefix)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-sep)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --control-exchange)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-wait-replicas)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "table json ndjson csv" -- "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -W "table json ndjson csv" -- "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --audit-log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        dlq__subcmd__help)
            opts="list inspect filter replay archive init workers check metrics browse completions audit help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        dlq__subcmd__help__subcmd__archive)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        dlq__subcmd__help__subcmd__audit)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        dlq__subcmd__help__subcmd__browse)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        dlq__subcmd__help__subcmd__check)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        dlq__subcmd__help__subcmd__completions)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        dlq__subcmd__help__subcmd__filter)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        dlq__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        dlq__subcmd__help__subcmd__init)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        dlq__subcmd__help__subcmd__inspect)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        dlq__subcmd__help__subcmd__list)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        dlq__subcmd__help__subcmd__metrics)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        dlq__subcmd__help__subcmd__replay)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        dlq__subcmd__help__subcmd__workers)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        dlq__subcmd__init)
            opts="-o -q -v -h -V --dry-run --config --profile --database-url --table --amqp-url --management-url --amqp-ca-file --amqp-client-cert --amqp-client-key --vhost --broker-url --redis-key-prefix --redis-sep --control-exchange --redis-wait-replicas --output --quiet --verbose --color --no-progress --audit-log --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --profile)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --database-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --table)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --management-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-ca-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-client-cert)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-client-key)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --vhost)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --broker-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-key-prefix)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-sep)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --control-exchange)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-wait-replicas)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "table json ndjson csv" -- "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -W "table json ndjson csv" -- "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --audit-log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        dlq__subcmd__inspect)
            opts="-Q -i -e -o -q -v -h -V --queue --motivo-header --force --motivo --ignore-case --pattern --task --since --until --older-than --where --id --include-replayed --only-replayed --limit --full --config --profile --database-url --table --amqp-url --management-url --amqp-ca-file --amqp-client-cert --amqp-client-key --vhost --broker-url --redis-key-prefix --redis-sep --control-exchange --redis-wait-replicas --output --quiet --verbose --color --no-progress --audit-log --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --queue)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -Q)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --motivo-header)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --motivo)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pattern)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -e)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --task)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --since)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --until)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --older-than)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --where)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --id)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --limit)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --profile)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --database-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --table)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --management-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-ca-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-client-cert)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-client-key)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --vhost)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --broker-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-key-prefix)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-sep)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --control-exchange)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-wait-replicas)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "table json ndjson csv" -- "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -W "table json ndjson csv" -- "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --audit-log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        dlq__subcmd__list)
            opts="-Q -o -q -v -h -V --queue --top --sample --motivo-header --exclude --config --profile --database-url --table --amqp-url --management-url --amqp-ca-file --amqp-client-cert --amqp-client-key --vhost --broker-url --redis-key-prefix --redis-sep --control-exchange --redis-wait-replicas --output --quiet --verbose --color --no-progress --audit-log --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --queue)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -Q)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --top)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --sample)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --motivo-header)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --exclude)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --profile)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --database-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --table)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --management-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-ca-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-client-cert)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-client-key)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --vhost)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --broker-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-key-prefix)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-sep)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --control-exchange)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-wait-replicas)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "table json ndjson csv" -- "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -W "table json ndjson csv" -- "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --audit-log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        dlq__subcmd__metrics)
            opts="-Q -o -q -v -h -V --queue --motivo-header --force --sample --textfile --listen --interval --config --profile --database-url --table --amqp-url --management-url --amqp-ca-file --amqp-client-cert --amqp-client-key --vhost --broker-url --redis-key-prefix --redis-sep --control-exchange --redis-wait-replicas --output --quiet --verbose --color --no-progress --audit-log --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --queue)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -Q)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --motivo-header)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --sample)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --textfile)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --listen)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --profile)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --database-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --table)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --management-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-ca-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-client-cert)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-client-key)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --vhost)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --broker-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-key-prefix)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-sep)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --control-exchange)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-wait-replicas)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "table json ndjson csv" -- "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -W "table json ndjson csv" -- "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --audit-log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        dlq__subcmd__replay)
            opts="-Q -i -e -y -o -q -v -h -V --queue --motivo-header --force --motivo --ignore-case --pattern --task --since --until --older-than --where --id --include-replayed --only-replayed --limit --dry-run --yes --to-queue --to-exchange --routing-key --rate --window --from-file --max-replays --canary --canary-wait --plan-first --transform --follow --follow-timeout --enable-events --mark-on-success --task-map --worker-timeout --no-worker-check --config --profile --database-url --table --amqp-url --management-url --amqp-ca-file --amqp-client-cert --amqp-client-key --vhost --broker-url --redis-key-prefix --redis-sep --control-exchange --redis-wait-replicas --output --quiet --verbose --color --no-progress --audit-log --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --queue)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -Q)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --motivo-header)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --motivo)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pattern)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -e)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --task)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --since)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --until)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --older-than)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --where)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --id)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --limit)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --to-queue)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --to-exchange)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --routing-key)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --rate)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --window)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --from-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-replays)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --canary)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --canary-wait)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --transform)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --follow-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --task-map)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --worker-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --profile)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --database-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --table)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --management-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-ca-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-client-cert)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-client-key)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --vhost)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --broker-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-key-prefix)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-sep)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --control-exchange)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-wait-replicas)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "table json ndjson csv" -- "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -W "table json ndjson csv" -- "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --audit-log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        dlq__subcmd__workers)
            opts="-o -q -v -h -V --full --worker-timeout --config --profile --database-url --table --amqp-url --management-url --amqp-ca-file --amqp-client-cert --amqp-client-key --vhost --broker-url --redis-key-prefix --redis-sep --control-exchange --redis-wait-replicas --output --quiet --verbose --color --no-progress --audit-log --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --worker-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --profile)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --database-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --table)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --management-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-ca-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-client-cert)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --amqp-client-key)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --vhost)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --broker-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-key-prefix)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-sep)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --control-exchange)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --redis-wait-replicas)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "table json ndjson csv" -- "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -W "table json ndjson csv" -- "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --audit-log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
    esac
}

if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _dlq -o nosort -o bashdefault -o default dlq
else
    complete -F _dlq -o bashdefault -o default dlq
fi
