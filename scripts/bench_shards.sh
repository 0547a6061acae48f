#!/usr/bin/env bash
# The sharded layout's overhead, measured (issue 11, item 6): the same
# generated corpus imported (`--mode incremental`) into one node and into a
# coordinator with N postgres_fdw shards, all servers on this machine and
# started by scripts/shard-cluster.sh, in one run; then by 2 concurrent
# importers into a second sharded layout. Prints games/s, each sharded time
# against the single-node time of the same run, where the CPU went (the
# coordinator's and the shards' server processes, pgnload), the statements
# each server ran (≈ round trips) and the rows on each shard.
# See scripts/README.md ("bench_shards.sh").
#
#   scripts/bench_shards.sh [--games N] [--shards N] [--out DIR]
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: scripts/bench_shards.sh [--games N] [--shards N] [--out DIR]

  --games N    games in the generated corpus (default 20000)
  --shards N   shard servers besides the coordinator (1-99, default 2)
  --out DIR    work and result directory (default target/bench-shards);
               holds the corpus and its halves, the servers in DIR/shards
               (recreated; run as root, the user postgres must be able to
               reach DIR), the logs and DIR/results.tsv

Runs, each into a fresh database, timed: pgnload import --mode incremental
of the corpus into database `single` on the coordinator's server (the
single-node baseline); into the sharded coordinator (`pgnload`, after
`pgnload db migrate --shards`); by 2 concurrent importers, one half of the
corpus each, into a second sharded layout (`pgnload2` on every server).
EOF
}

games=20000
shards=2
out=target/bench-shards
while [[ $# -gt 0 ]]; do
    case $1 in
        --games) games=${2:?--games needs a value}; shift 2 ;;
        --shards) shards=${2:?--shards needs a value}; shift 2 ;;
        --out) out=${2:?--out needs a value}; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "bench_shards.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done
if ! [[ $games =~ ^[0-9]+$ ]] || ((games < 10)); then
    echo "bench_shards.sh: --games must be an integer >= 10" >&2
    exit 2
fi
if ! [[ $shards =~ ^[1-9][0-9]?$ ]]; then
    echo "bench_shards.sh: --shards must be an integer from 1 to 99" >&2
    exit 2
fi

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
mkdir -p "$out"
out=$(cd "$out" && pwd)
cluster=$out/shards
target_dir=${CARGO_TARGET_DIR:-$root/target}
pgnload=$target_dir/release/pgnload
gen=$target_dir/release/examples/gen_corpus
shard_cluster=$root/scripts/shard-cluster.sh
psql=${PSQL:-psql}
results=$out/results.tsv
rm -f "$results"

bench_name=bench_shards
# shellcheck source=scripts/bench_lib.sh
source "$root/scripts/bench_lib.sh"
record() { printf '%s\t%s\n' "$1" "$2" >>"$results"; }

importers=()
cluster_started=0
cleanup() {
    local pid
    for pid in "${importers[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    if ((cluster_started)); then
        "$shard_cluster" stop "$cluster" >/dev/null 2>&1 ||
            echo "bench_shards.sh: could not stop the servers; run: $shard_cluster stop $cluster" >&2
    fi
}
trap cleanup EXIT

command -v "$psql" >/dev/null || die "psql not found (install postgresql-client or set PSQL)"
[[ -x /usr/bin/time ]] || die "/usr/bin/time not found (Debian package time)"
ticks_per_s=$(getconf CLK_TCK) || die "getconf CLK_TCK failed"

log "building release binaries"
cargo build --release --quiet --locked --bin pgnload --example gen_corpus
: >"$results"
record games "$games"
record shards "$shards"
record commit "$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)"
record cores "$(nproc)"

# ------------------------------------------------ the corpus, and its halves
log "generating $games games"
"$gen" --games "$games" --seed 1 --out "$out/corpus.pgn" 2>"$out/gen.log" ||
    die "gen_corpus failed: $(tail -5 "$out/gen.log")"
record corpus_bytes "$(stat -c %s "$out/corpus.pgn")"
# Every generated game opens with its [Event] tag: the first games/2 go to
# half1, the others to half2.
awk -v half=$((games / 2)) -v a="$out/half1.pgn" -v b="$out/half2.pgn" '
    /^\[Event / { n++ }
    { print > (n <= half ? a : b) }' "$out/corpus.pgn"
events() { grep -c '^\[Event ' "$1" || true; }
[[ $(events "$out/corpus.pgn") == "$games" ]] || die "the corpus does not hold $games [Event] tags"
(($(events "$out/half1.pgn") + $(events "$out/half2.pgn") == games)) || die "the halves do not add up to the corpus"

# ------------------------------------------------ the servers
# Servers a killed earlier run left running are stopped before their
# directory goes.
if [[ -e $cluster/.shard-cluster ]]; then
    "$shard_cluster" stop "$cluster" 2>>"$out/shard-cluster.log" ||
        die "could not stop the servers left in $cluster: $(tail -5 "$out/shard-cluster.log")"
fi
rm -rf "$cluster"
cluster_started=1
log "starting a coordinator and $shards shard servers in $cluster"
start_servers() {
    local urls
    urls=$("$shard_cluster" start "$cluster" "$shards" 2>>"$out/shard-cluster.log") ||
        die "shard-cluster.sh start failed: $(tail -5 "$out/shard-cluster.log")"
    coordinator=$(sed -n 's/^coordinator=//p' <<<"$urls")
    shard_list=$(sed -n 's/^shards=//p' <<<"$urls")
    [[ -n $coordinator && -n $shard_list ]] || die "shard-cluster.sh printed no URLs: $urls"
}
start_servers
IFS=, read -ra shard_urls <<<"$shard_list"
((${#shard_urls[@]} == shards)) || die "shard-cluster.sh gave ${#shard_urls[@]} shard URLs, not $shards"
servers=("$coordinator" "${shard_urls[@]}")
datadirs=("$cluster/coordinator")
for ((i = 1; i <= shards; i++)); do
    datadirs+=("$cluster/shard$i")
done

sql() { PGOPTIONS="-c client_min_messages=warning" "$psql" "$1" -XAtq -v ON_ERROR_STOP=1 -c "$2"; }
# The URL of database $2 on the server of URL $1 (shard-cluster.sh URLs end
# in /pgnload and carry no parameters).
db_on() { echo "${1%/*}/$2"; }
[[ $coordinator == */pgnload ]] || die "unexpected coordinator URL: $coordinator"

# Statements per server (≈ round trips: each is at least one), from
# pg_stat_statements when this PostgreSQL has it. It needs a restart to load,
# given to every server alike before any run, so the runs compare as before.
statements=0
if [[ $(sql "$(db_on "$coordinator" postgres)" \
    "SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_stat_statements'") == 1 ]]; then
    for url in "${servers[@]}"; do
        sql "$(db_on "$url" postgres)" "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'"
    done
    "$shard_cluster" stop "$cluster" 2>>"$out/shard-cluster.log" ||
        die "shard-cluster.sh stop failed: $(tail -5 "$out/shard-cluster.log")"
    start_servers
    for url in "${servers[@]}"; do
        sql "$(db_on "$url" postgres)" "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"
    done
    statements=1
else
    record statements_note "no pg_stat_statements in this PostgreSQL: no statement counts"
fi
record statements_counted "$statements"

# CPU ticks (user + system) of every process of the server in datadir $1:
# the postmaster and its live children, plus what the postmaster reaped
# (a backend that exited during the run counts in its cutime/cstime).
server_ticks() {
    local pm
    pm=$(head -n 1 "$1/postmaster.pid") || die "no postmaster.pid in $1"
    { cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v pm="$pm" '
        {
            pid = $1
            rest = $0
            sub(/^.*\) /, "", rest)   # after "pid (comm) ": state ppid ...
            split(rest, f, " ")
            if (pid == pm || f[2] == pm) ticks += f[12] + f[13] + f[14] + f[15]
        }
        END { printf "%d\n", ticks }'
}
# Ticks of the coordinator's server, then of all shard servers together.
cpu_sample() {
    local i shard_ticks=0
    coordinator_ticks=$(server_ticks "${datadirs[0]}")
    for ((i = 1; i <= shards; i++)); do
        shard_ticks=$((shard_ticks + $(server_ticks "${datadirs[i]}")))
    done
    shards_ticks=$shard_ticks
}
stat_reset() {
    local url
    ((statements)) || return 0
    for url in "${servers[@]}"; do
        sql "$(db_on "$url" postgres)" "SELECT pg_stat_statements_reset()" >/dev/null
    done
}
# Statements run on the server of URL $1 since stat_reset, in any database
# but `postgres` (where this script's own bookkeeping runs); a note when
# pg_stat_statements had to evict entries (the count is then a lower bound).
stat_calls() {
    local calls evicted
    calls=$(sql "$(db_on "$1" postgres)" "SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s
        JOIN pg_database d ON d.oid = s.dbid WHERE d.datname <> 'postgres'")
    evicted=$(sql "$(db_on "$1" postgres)" "SELECT dealloc FROM pg_stat_statements_info")
    ((evicted == 0)) || record statements_note "pg_stat_statements evicted entries on $1: counts are lower bounds"
    echo "$calls"
}
# Every server flushes what earlier runs left (a checkpoint) before a run.
checkpoint_all() {
    local url
    for url in "${servers[@]}"; do
        sql "$(db_on "$url" postgres)" "CHECKPOINT"
    done
}

# Runs `pgnload -q import --mode incremental FILE` into each URL:FILE pair
# given, all at once, and records under NAME the wall time, the CPU of the
# servers and of the importers, and the statements each server ran. Any
# exit status but 0 stops the script: a failed import is never timed.
timed_import() { # NAME DB_URL FILE [DB_URL FILE ...]
    local name=$1 start end secs c0 s0 rc i k user system cpu=0 coord_stmts=0 shard_stmts=0 url
    shift
    local -a pids=() files=()
    checkpoint_all
    stat_reset
    cpu_sample
    c0=$coordinator_ticks s0=$shards_ticks
    start=$(now_ns)
    for ((i = 0; $# > 0; i++)); do
        files+=("$2")
        /usr/bin/time -f '%U %S' -o "$out/$name.$i.time" \
            "$pgnload" --database-url "$1" -q import --mode incremental "$2" \
            >"$out/$name.$i.out" 2>"$out/$name.$i.log" &
        pids+=("$!")
        importers+=("$!")
        shift 2
    done
    for i in "${!pids[@]}"; do
        rc=0
        wait "${pids[i]}" || rc=$?
        ((rc == 0)) || die "$name: the import of ${files[i]} exited with $rc: $(tail -5 "$out/$name.$i.log")"
    done
    end=$(now_ns)
    importers=()
    cpu_sample
    secs=$(seconds "$start" "$end")
    for i in "${!pids[@]}"; do
        read -r user system <"$out/$name.$i.time" || die "$name: no CPU times in $out/$name.$i.time"
        cpu=$(awk -v a="$cpu" -v u="$user" -v s="$system" 'BEGIN { printf "%.2f", a + u + s }')
    done
    record "${name}_seconds" "$secs"
    record "${name}_games_per_s" "$(rate "$games" "$secs")"
    record "${name}_importers" "${#pids[@]}"
    record "${name}_coordinator_cpu_s" "$(awk -v t=$((coordinator_ticks - c0)) -v hz="$ticks_per_s" 'BEGIN { printf "%.2f", t / hz }')"
    record "${name}_shards_cpu_s" "$(awk -v t=$((shards_ticks - s0)) -v hz="$ticks_per_s" 'BEGIN { printf "%.2f", t / hz }')"
    record "${name}_pgnload_cpu_s" "$cpu"
    if ((statements)); then
        coord_stmts=$(stat_calls "$coordinator")
        for url in "${shard_urls[@]}"; do
            k=$(stat_calls "$url")
            shard_stmts=$((shard_stmts + k))
        done
        record "${name}_coordinator_statements" "$coord_stmts"
        record "${name}_shards_statements" "$shard_stmts"
    fi
    log "$name: ${secs}s, $(rate "$games" "$secs") games/s"
}

# Rows of table $2 in database URL $1.
rows() { sql "$1" "SELECT count(*) FROM $2"; }

# Per-shard rows of a sharded layout (database $1 on every server) must add
# up to what its coordinator shows, and its positions, games and moves to
# the single-node import's; recorded under NAME.
check_rows() { # NAME DATABASE
    local name=$1 database=$2 table i n sum total
    for table in positions games moves game_keys; do
        sum=0
        for i in "${!shard_urls[@]}"; do
            n=$(rows "$(db_on "${shard_urls[i]}" "$database")" "$table")
            record "${name}_shard$((i + 1))_$table" "$n"
            sum=$((sum + n))
        done
        total=$(rows "$(db_on "$coordinator" "$database")" "$table")
        record "${name}_coordinator_$table" "$total"
        ((sum == total)) || die "$name: $table: the shards hold $sum rows, the coordinator shows $total"
        if [[ $table != game_keys ]]; then
            n=$(value "single_$table")
            ((total == n)) || die "$name: $table: $total rows, the single-node import has $n"
        fi
    done
    n=$(value "${name}_coordinator_games")
    ((n == games)) || die "$name: $n games of $games"
}

# `pgnload verify --games --sample 0.01` on database $1 must find nothing.
verify_clean() { # NAME DATABASE
    local name=$1 database=$2
    "$pgnload" --database-url "$(db_on "$coordinator" "$database")" -q verify --games --sample 0.01 \
        --report "$out/$name.verify.tsv" >"$out/$name.verify.out" 2>&1 ||
        die "$name: verify --games failed: $(tail -5 "$out/$name.verify.out")"
    grep -qx 'no mismatches' "$out/$name.verify.out" ||
        die "$name: verify --games did not say 'no mismatches': $(tail -5 "$out/$name.verify.out")"
    record "${name}_verified_games" "$(sed -n 's/^verified \([0-9]*\) games.*/\1/p' "$out/$name.verify.out")"
}

value() { awk -F'\t' -v k="$1" '$1 == k { v = $2 } END { print v }' "$results"; }

# VACUUM (ANALYZE) after a load, not measured, on the servers that hold its
# rows, so that autovacuum does not run in the next measured run. (On a
# sharded coordinator it would skip the foreign partitions and fetch every
# row of them to ANALYZE the partitioned tables: the shards are vacuumed.)
vacuum() { # DATABASE URL...
    local database=$1 url
    shift
    for url in "$@"; do
        sql "$(db_on "$url" "$database")" "VACUUM (ANALYZE)"
    done
}

# ------------------------------------------------ single node: database `single`
sql "$coordinator" "CREATE DATABASE single"
"$pgnload" --database-url "$(db_on "$coordinator" single)" -q db migrate >/dev/null
log "single node: import into database single on the coordinator's server"
timed_import single "$(db_on "$coordinator" single)" "$out/corpus.pgn"
for table in positions games moves; do
    record "single_$table" "$(rows "$(db_on "$coordinator" single)" "$table")"
done
(($(value single_games) == games)) || die "single: $(value single_games) games of $games"
vacuum single "$coordinator"

# ------------------------------------------------ sharded, one importer: database `pgnload`
"$pgnload" --database-url "$coordinator" -q db migrate --shards "$shard_list" >"$out/migrate.out" ||
    die "db migrate --shards failed: $(tail -5 "$out/migrate.out")"
log "sharded: one importer through the coordinator"
timed_import sharded "$coordinator" "$out/corpus.pgn"
check_rows sharded pgnload
vacuum pgnload "${shard_urls[@]}"

# ------------------------------------------------ sharded, two importers: database `pgnload2`
second=()
for url in "${servers[@]}"; do
    sql "$(db_on "$url" postgres)" "CREATE DATABASE pgnload2"
done
for url in "${shard_urls[@]}"; do
    second+=("$(db_on "$url" pgnload2)")
done
coordinator2=$(db_on "$coordinator" pgnload2)
"$pgnload" --database-url "$coordinator2" -q db migrate --shards "$(IFS=,; echo "${second[*]}")" \
    >"$out/migrate2.out" || die "db migrate --shards (pgnload2) failed: $(tail -5 "$out/migrate2.out")"
log "sharded: two concurrent importers, one half of the corpus each"
timed_import sharded2 "$coordinator2" "$out/half1.pgn" "$coordinator2" "$out/half2.pgn"
check_rows sharded2 pgnload2

log "verify --games --sample 0.01 on both sharded layouts"
verify_clean sharded pgnload
verify_clean sharded2 pgnload2

# ------------------------------------------------ report
or_na() { echo "${1:-n/a}"; }
share() { awk -v c="$1" -v s="$2" 'BEGIN { if (s > 0) printf "%.2f", c / s; else print "n/a" }'; }
single_s=$(value single_seconds)
echo
echo "bench_shards: $games generated games ($(value corpus_bytes) bytes of PGN), coordinator + $shards shards on one machine, $(nproc) cores, commit $(value commit)"
row() { printf '  %-30s %7s %8s %8s  %6s %6s %7s %6s  %10s %10s\n' "$@"; }
row run "wall s" games/s "x single" coord shards pgnload all "statements" "statements"
row "" "" "" "(time)" CPU CPU CPU CPU "coord" "shards"
for run in single sharded sharded2; do
    case $run in
        single) label="single node" ;;
        sharded) label="sharded, 1 importer" ;;
        sharded2) label="sharded, 2 importers (halves)" ;;
    esac
    secs=$(value "${run}_seconds")
    coord_cpu=$(value "${run}_coordinator_cpu_s")
    shards_cpu=$(value "${run}_shards_cpu_s")
    pgnload_cpu=$(value "${run}_pgnload_cpu_s")
    row "$label" "$secs" "$(value "${run}_games_per_s")" "$(ratio "$secs" "$single_s")" \
        "$(share "$coord_cpu" "$secs")" "$(share "$shards_cpu" "$secs")" "$(share "$pgnload_cpu" "$secs")" \
        "$(share "$(awk -v a="$coord_cpu" -v b="$shards_cpu" -v c="$pgnload_cpu" 'BEGIN { print a + b + c }')" "$secs")" \
        "$(or_na "$(value "${run}_coordinator_statements")")" "$(or_na "$(value "${run}_shards_statements")")"
done
echo "  (x single: wall time / the single-node run's; CPU: CPU seconds of the coordinator's server processes,"
echo "   of all shard servers', of pgnload, and all three, over the run's wall time: 1.00 = one core busy"
echo "   throughout; all below $(nproc) (the cores) = they waited on each other or the disk, or others ran;"
if ((statements)); then
    echo "   statements: run on the coordinator (those pgnload sent) and on all shards (those the"
    echo "   coordinator's postgres_fdw sent), from pg_stat_statements; each is at least one round trip)"
else
    echo "   statements: n/a, this PostgreSQL has no pg_stat_statements)"
fi
[[ -z $(value statements_note) ]] || echo "  note: $(value statements_note)"
for run in sharded sharded2; do
    echo
    if [[ $run == sharded ]]; then
        echo "  rows per shard, sharded (1 importer):"
    else
        echo "  rows per shard, sharded (2 importers):"
    fi
    header=$(printf '    %-10s' table)
    for ((i = 1; i <= shards; i++)); do
        header+=$(printf ' %12s' "shard$i")
    done
    echo "$header$(printf ' %12s %12s' 'sum' 'coordinator')"
    for table in positions games moves game_keys; do
        line=$(printf '    %-10s' "$table")
        sum=0
        for ((i = 1; i <= shards; i++)); do
            n=$(value "${run}_shard${i}_$table")
            sum=$((sum + n))
            line+=$(printf ' %12s' "$n")
        done
        echo "$line$(printf ' %12s %12s' "$sum" "$(value "${run}_coordinator_$table")")"
    done
    echo "    verify --games --sample 0.01: $(value "${run}_verified_games") games replayed, no mismatches"
done
echo "  results: $results"
