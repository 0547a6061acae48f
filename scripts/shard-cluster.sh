#!/usr/bin/env bash
# shard-cluster.sh: a coordinator and N shard PostgreSQL servers on loopback,
# for trying and testing pgnload's sharded layout on one machine.
#
# Usage:
#   scripts/shard-cluster.sh start  DIR [N]   create (first time) and start the
#                                             clusters; print their URLs
#   scripts/shard-cluster.sh stop   DIR       stop them all (fast mode)
#   scripts/shard-cluster.sh status DIR       print each cluster's state
#   scripts/shard-cluster.sh url    DIR       print the URLs:
#       coordinator=postgresql://postgres@127.0.0.1:PORT/pgnload
#       shards=postgresql://postgres@127.0.0.1:PORT/pgnload,...
#
# DIR holds N+1 clusters (DIR/coordinator, DIR/shard1 .. DIR/shardN), their
# logs (DIR/<name>.log), their Unix sockets, the ports they were given
# (DIR/ports) and the number of shards (DIR/.shard-cluster). N (1-99) defaults
# to 2 for a new DIR; for an existing DIR it is the number it was created
# with, and a different N is an error. A given N must match for the other
# commands too. Each cluster listens on 127.0.0.1 only, on a TCP port picked
# at its first start (from SHARD_CLUSTER_PORT_BASE upwards, default a random
# port in 20000-29999, skipping ports another server holds) and kept for
# later starts, so the URLs do not change. Each has a database `pgnload`;
# the superuser is `postgres`. `start` on running clusters and `stop` on
# stopped ones change nothing. `url` prints what DIR recorded, running or
# not. A DIR that is not empty and was not made by this script is refused.
# The clusters are small (shared_buffers 128MB) but durable (fsync on): tests
# kill their processes.
#
# SECURITY: these are private clusters for trying and testing, never for
# production. Authentication is `trust` for Unix-socket and 127.0.0.1
# connections (no password): any user of this machine can connect to them as
# the superuser over loopback (the sockets are mode 0700, for their owner).
# Nothing listens on other addresses.
#
# When run as root, the servers run as the unprivileged user `postgres`
# (through runuser; PostgreSQL refuses to run as root): DIR is created if
# needed and handed to that user, who must be able to reach it (a DIR under
# /tmp or /var/tmp works; one under /root does not). The script re-runs itself
# as that user, so root never writes inside DIR.
#
# Environment:
#   PG_BIN                   directory holding initdb, pg_ctl and postgres
#                            (default: initdb on PATH, else the newest
#                            /usr/lib/postgresql/*/bin, as pgnload does)
#   SHARD_CLUSTER_PORT_BASE  first TCP port tried for a new cluster
#
# Exit codes:
#   0  done
#   1  failure (a server could not be created, started or stopped; DIR unusable)
#   2  usage error
#   3  `status` only: at least one cluster is not running
set -euo pipefail

readonly DB=pgnload
readonly SUPERUSER=postgres
readonly SERVICE_USER=postgres
readonly MARKER=.shard-cluster
# The socket path DIR/.s.PGSQL.NNNNN must fit in sun_path (107 bytes).
readonly MAX_DIR_LEN=92
readonly PORT_ATTEMPTS=50
readonly PG_CTL_TIMEOUT=600

usage() {
    {
        echo "shard-cluster.sh: $1"
        echo "usage: $0 start|stop|status|url DIR [N]   (N shards, 1-99, default 2)"
    } >&2
    exit 2
}

die() {
    echo "shard-cluster.sh: $*" >&2
    exit 1
}

(($# >= 2 && $# <= 3)) || usage "expected a command, a directory and optionally N"
cmd=$1
dir=$2
n_arg=${3-}
case $cmd in
start | stop | status | url) ;;
*) usage "unknown command '$cmd'" ;;
esac
[[ -n $dir ]] || usage "DIR is empty"
if [[ -n $n_arg && ! $n_arg =~ ^[1-9][0-9]?$ ]]; then
    usage "N must be a number of shards from 1 to 99, not '$n_arg'"
fi
if [[ $cmd == start ]]; then
    # The first port tried for a new cluster; later ones count up from it.
    next_port=${SHARD_CLUSTER_PORT_BASE:-$((20000 + RANDOM % 10000))}
    if [[ ! $next_port =~ ^[1-9][0-9]{3,4}$ ]] || ((next_port < 1024 || next_port > 65000)); then
        usage "SHARD_CLUSTER_PORT_BASE must be a port from 1024 to 65000, not '$next_port'"
    fi
fi

has_tools() {
    local tool
    for tool in initdb pg_ctl postgres; do
        [[ -f $1/$tool && -x $1/$tool ]] || return 1
    done
}

# The PostgreSQL server programs: PG_BIN, else initdb on PATH (links
# resolved), else the newest /usr/lib/postgresql/*/bin.
locate_bin() {
    if [[ -n ${PG_BIN-} ]]; then
        has_tools "$PG_BIN" || die "PG_BIN=$PG_BIN lacks initdb, pg_ctl or postgres"
        echo "$PG_BIN"
        return
    fi
    local entry real version
    local -a entries
    IFS=: read -ra entries <<<"${PATH-}"
    for entry in "${entries[@]}"; do
        [[ -n $entry && -x $entry/initdb ]] || continue
        real=$(dirname "$(readlink -f "$entry/initdb")")
        if has_tools "$real"; then
            echo "$real"
            return
        fi
    done
    while read -r version; do
        if has_tools "/usr/lib/postgresql/$version/bin"; then
            echo "/usr/lib/postgresql/$version/bin"
            return
        fi
    done < <(
        for entry in /usr/lib/postgresql/*/; do
            version=$(basename "$entry")
            [[ $version =~ ^[0-9]+(\.[0-9]+)*$ ]] && echo "$version"
        done | sort -rV
    )
    die "PostgreSQL server programs (initdb, pg_ctl, postgres) not found on PATH or in" \
        "/usr/lib/postgresql/*/bin; install them (apt-get install postgresql) or set PG_BIN"
}

# A DIR that exists, is not empty and was not made by this script is refused:
# it may be anything, and root would hand it to the postgres user.
check_ours() {
    if [[ -d $1 && ! -e $1/$MARKER && -n $(ls -A "$1") ]]; then
        die "$1 is not empty and holds no shard clusters (no $MARKER); use a new or empty directory"
    fi
}

bin=$(locate_bin)

if ((EUID == 0)); then
    id "$SERVICE_USER" >/dev/null 2>&1 ||
        die "running as root, the servers must run as user '$SERVICE_USER', which does not exist;" \
            "create it (useradd --system $SERVICE_USER) or run this script as an unprivileged user"
    created=
    if [[ $cmd == start ]]; then
        check_ours "$dir"
        [[ -d $dir ]] || created=1
        mkdir -p -- "$dir"
    fi
    [[ -d $dir ]] || die "$dir does not exist: nothing to $cmd (run start first)"
    dir=$(cd -- "$dir" && pwd -P)
    if [[ $cmd == start ]]; then
        chown "$SERVICE_USER:" "$dir"
    elif [[ ! -e $dir/$MARKER ]]; then
        die "$dir holds no shard clusters (no $MARKER): nothing to $cmd (run start first)"
    fi
    runuser -u "$SERVICE_USER" -- test -x "$bin/pg_ctl" ||
        die "user $SERVICE_USER cannot run $bin/pg_ctl"
    if ! runuser -u "$SERVICE_USER" -- test -w "$dir" -a -x "$dir"; then
        [[ -z $created ]] || rmdir -- "$dir"
        die "user $SERVICE_USER cannot enter and write $dir (it needs o+x on every directory" \
            "above it, and to own it); use a DIR under /tmp or /var/tmp"
    fi
    script=$(cat -- "${BASH_SOURCE[0]}")
    cd /
    exec runuser -u "$SERVICE_USER" -- env PG_BIN="$bin" \
        bash -c "$script" shard-cluster.sh "$cmd" "$dir" ${n_arg:+"$n_arg"}
fi

# From here on: the user the servers run as. PG* variables (PGDATA, PGPORT,
# PGHOST ...) would redirect the tools.
# shellcheck disable=SC2046 # the names are identifiers
unset $(compgen -e | grep '^PG' || true)

psql_bin=$bin/psql
if [[ ! -x $psql_bin ]]; then
    psql_bin=$(command -v psql) || die "psql not found in $bin or on PATH"
fi

if [[ $cmd == start ]]; then
    check_ours "$dir"
    mkdir -p -- "$dir"
fi
[[ -d $dir ]] || die "$dir does not exist: nothing to $cmd (run start first)"
dir=$(cd -- "$dir" && pwd -P)
[[ $dir =~ ^[A-Za-z0-9._/+-]+$ ]] ||
    die "$dir: DIR may hold only letters, digits and . _ - + / (it is written into postgresql.conf)"
((${#dir} <= MAX_DIR_LEN)) ||
    die "$dir is longer than $MAX_DIR_LEN bytes: the Unix socket path in it would be too long"
if [[ $cmd != start && ! -e $dir/$MARKER ]]; then
    die "$dir holds no shard clusters (no $MARKER): nothing to $cmd (run start first)"
fi
[[ -w $dir ]] || die "$dir is not writable by $(id -un)"

# One invocation at a time per DIR. The descriptor is closed for pg_ctl, or
# the servers would hold the lock forever.
exec 9>>"$dir/.lock"
flock 9

if [[ -e $dir/$MARKER ]]; then
    shards=$(sed -n 's/^shards=\([0-9][0-9]*\)$/\1/p' "$dir/$MARKER")
    [[ -n $shards ]] || die "$dir/$MARKER is damaged (no shards=N line)"
    if [[ -n $n_arg && $n_arg != "$shards" ]]; then
        die "$dir holds $shards shard(s), not $n_arg; give N=$shards or use another DIR"
    fi
else
    shards=${n_arg:-2}
    echo "shards=$shards" >"$dir/$MARKER"
fi

names=(coordinator)
for ((i = 1; i <= shards; i++)); do
    names+=("shard$i")
done

# The port recorded for a cluster at its first successful start, or nothing.
recorded_port() {
    [[ -f $dir/ports ]] || return 0
    awk -v name="$1" '$1 == name { print $2 }' "$dir/ports"
}

is_recorded_elsewhere() {
    [[ -f $dir/ports ]] && awk -v port="$1" '$2 == port { found = 1 } END { exit !found }' "$dir/ports"
}

is_running() {
    [[ -f $dir/$1/PG_VERSION ]] && "$bin/pg_ctl" status -D "$dir/$1" >/dev/null 2>&1
}

url_of() {
    echo "postgresql://$SUPERUSER@127.0.0.1:$1/$DB"
}

init_cluster() {
    local name=$1
    local pgdata=$dir/$name
    local init=$pgdata.init
    local log=$dir/$name.log
    # A leftover of an interrupted first start (initdb starts no server).
    rm -rf -- "$init"
    echo "initializing $name" >&2
    "$bin/initdb" -D "$init" -U "$SUPERUSER" --auth=trust -E UTF8 --locale=C >>"$log" 2>&1 ||
        die "initdb failed for $name; last lines of $log:"$'\n'"$(tail -n 20 "$log")"
    cat >"$init/pg_hba.conf" <<'EOF'
# shard-cluster.sh: a private cluster for trying and testing. No password:
# the Unix socket and 127.0.0.1 only, trust authentication.
local all all trust
host  all all 127.0.0.1/32 trust
EOF
    cat >>"$init/postgresql.conf" <<EOF

# shard-cluster.sh: a private cluster for trying and testing (see
# scripts/shard-cluster.sh); loopback only, trust authentication.
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
unix_socket_permissions = 0700
shared_buffers = 128MB
fsync = on
# The TCP port, picked at the first start and kept.
include = 'port.conf'
EOF
    mv -- "$init" "$pgdata"
}

# Starts cluster $1 on port $2. Returns 10 when the port is taken (the server
# could not bind it); any other failure ends the script with the log's tail.
try_start() {
    local name=$1 port=$2
    local pgdata=$dir/$name
    local log=$dir/$name.log
    local offset output
    echo "port = $port" >"$pgdata/port.conf"
    offset=$(stat -c %s -- "$log" 2>/dev/null || echo 0)
    if output=$("$bin/pg_ctl" start -w -s -t "$PG_CTL_TIMEOUT" -D "$pgdata" -l "$log" 2>&1 9>&-); then
        return 0
    fi
    if tail -c "+$((offset + 1))" -- "$log" | grep -q 'could not bind IPv4 address "127.0.0.1": Address already in use'; then
        return 10
    fi
    die "could not start $name on port $port: $output"$'\n'"last lines of $log:"$'\n'"$(tail -c "+$((offset + 1))" -- "$log" | tail -n 20)"
}

ensure_database() {
    local name=$1 port=$2 exists
    exists=$("$psql_bin" -X -q -A -t -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U "$SUPERUSER" -d postgres \
        -c "SELECT 1 FROM pg_database WHERE datname = '$DB'" 9>&-) ||
        die "could not query $name on port $port"
    if [[ -z $exists ]]; then
        "$psql_bin" -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U "$SUPERUSER" -d postgres \
            -c "CREATE DATABASE $DB" 9>&- || die "could not create database $DB on $name"
    fi
}

start_cluster() {
    local name=$1 port rc attempt
    [[ -f $dir/$name/PG_VERSION ]] || init_cluster "$name"
    port=$(recorded_port "$name")
    if is_running "$name"; then
        if [[ -z $port ]]; then
            # Started by a run that ended before recording the port.
            port=$(sed -n 's/^port = \([0-9][0-9]*\)$/\1/p' "$dir/$name/port.conf")
            [[ -n $port ]] || die "$name runs but $dir/$name/port.conf names no port"
            echo "$name $port" >>"$dir/ports"
        fi
        echo "$name already running on 127.0.0.1:$port" >&2
    elif [[ -n $port ]]; then
        rc=0
        try_start "$name" "$port" || rc=$?
        ((rc == 0)) || die "port $port, which $name was given at its first start, is taken by" \
            "another process now; free it, or stop these clusters and start in a new DIR"
        echo "started $name on 127.0.0.1:$port" >&2
    else
        for ((attempt = 1; ; attempt++)); do
            ((attempt <= PORT_ATTEMPTS)) ||
                die "no free port for $name after $PORT_ATTEMPTS attempts (up to $port)"
            port=$next_port
            next_port=$((next_port + 1))
            ! is_recorded_elsewhere "$port" || continue
            rc=0
            try_start "$name" "$port" || rc=$?
            ((rc == 0)) && break
        done
        echo "$name $port" >>"$dir/ports"
        echo "started $name on 127.0.0.1:$port" >&2
    fi
    ensure_database "$name" "$port"
}

print_urls() {
    local name port shard_urls=()
    for name in "${names[@]}"; do
        port=$(recorded_port "$name")
        [[ -n $port ]] || die "$name in $dir was never started: run start first"
        if [[ $name == coordinator ]]; then
            echo "coordinator=$(url_of "$port")"
        else
            shard_urls+=("$(url_of "$port")")
        fi
    done
    local IFS=,
    echo "shards=${shard_urls[*]}"
}

case $cmd in
start)
    for name in "${names[@]}"; do
        start_cluster "$name"
    done
    print_urls
    ;;
stop)
    for name in "${names[@]}"; do
        if is_running "$name"; then
            "$bin/pg_ctl" stop -w -s -m fast -t "$PG_CTL_TIMEOUT" -D "$dir/$name" ||
                die "could not stop $name; see $dir/$name.log"
            echo "stopped $name" >&2
        fi
    done
    ;;
status)
    all_running=1
    for name in "${names[@]}"; do
        port=$(recorded_port "$name")
        if [[ ! -f $dir/$name/PG_VERSION ]]; then
            echo "$name: not initialized"
            all_running=0
        elif is_running "$name"; then
            echo "$name: running on 127.0.0.1:$port (pid $(head -n 1 "$dir/$name/postmaster.pid"))"
        else
            echo "$name: stopped${port:+ (port $port)}"
            all_running=0
        fi
    done
    ((all_running)) || exit 3
    ;;
url)
    print_urls
    ;;
esac
