#!/usr/bin/env bash
# The incremental import as the database outgrows the server's memory
# (issue 31, item 1): databases of N generated games each, then the same
# fixed batch of new games imported `--mode incremental` into each, with the
# server's memory capped, all in one run on one embedded cluster. Prints, per
# size: the batch's games/s, its ratio to the empty database under the same
# cap (measured in the same run), bytes per game, index and heap block reads
# per new position, the server's peak memory, and the per-table and
# per-index size split. See scripts/README.md ("bench_growth.sh").
#
# How the cap works (cgroup v1, run as root): the script creates a memory
# cgroup named bench_growth.<pid> under its own memory cgroup, sets its
# memory.limit_in_bytes, and starts the server from a shell that has moved
# itself into it, so the postmaster and every process it forks are in the
# cgroup from birth (checked before each measurement). Page cache the
# server's reads and writes bring in is charged to the cgroup and counts
# against the cap; the kernel reclaims it within the cgroup as it would on a
# machine with that much memory. The cgroup is removed on exit (trap).
#
# Honesty limits:
# * a page already cached when the capped server first reads it stays
#   charged to whoever read it first and is free to the server: so before
#   each capped start the server is stopped (a clean shutdown writes every
#   dirty page) and every file of the cluster is dropped from the page cache
#   (fsync, then posix_fadvise DONTNEED); each measurement starts cold;
# * pgnload sizes the server (shared_buffers, work_mem, ...) from the
#   machine's memory, not the cgroup's: the script sets the same sizes for a
#   machine with the cap's memory with ALTER SYSTEM before each capped
#   start (shared_buffers above the cap could not even be paged out without
#   swap), and resets them for the uncapped builds;
# * only the server is capped: the client (`pgnload import`, its in-memory
#   position cache included) runs outside the cgroup, as if it had a machine
#   of its own;
# * block reads are what pg_statio counts: blocks PostgreSQL asked the OS
#   for, from the disk or from the part of the page cache the cap leaves;
# * the base databases are built uncapped (`import --mode bulk`, the fast
#   way to get there), then VACUUMed; only the batch runs under the cap.
#
#   scripts/bench_growth.sh [--batch N] [--cap SIZE|none] [--out DIR]
#                           [--keep | --reuse] [--setup-sql FILE]
#                           [--binary PATH] [--quick] [SIZE...]
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: scripts/bench_growth.sh [--batch N] [--cap SIZE|none] [--out DIR]
                               [--keep | --reuse] [--setup-sql FILE]
                               [--binary PATH] [--quick] [SIZE...]

  SIZE...      games in the database before the batch, one database each,
               measured in ascending order (default: 0 250000 1000000 max);
               0 is always measured first (the other ratios need it); `max`
               is the most games (a multiple of 250,000 above the largest
               other size) whose estimated footprint fits the disk space
               free when its turn comes; a size that does not fit is
               skipped and said so
  --batch N    games in the fixed new batch (default 50000; seed 7, the
               databases use seed 1)
  --cap SIZE   the server's memory limit: bytes, or with K, M or G (binary
               units; default 1G); `none` for no cap
  --out DIR    work and result directory (default target/bench-growth);
               holds the corpora, the cluster (DIR/cluster, recreated), logs
               and DIR/results.tsv
  --keep       keep each size's database (growth_<N>) instead of dropping it
               once measured; they use the disk the estimate assumed free
  --reuse      keep the cluster and each size's base database
               (growth_base_<N>, built once, with the schema of the binary
               that built it) across runs: each measurement imports the
               batch into a copy of it (CREATE DATABASE ... TEMPLATE),
               migrated with `db migrate` first (timed, reported), so
               comparing two commits skips the builds; twice the disk of
               one database per size
  --setup-sql FILE
               run FILE with psql on each database after it is built (or
               copied and migrated) and before the batch, then VACUUM
               ANALYZE: to measure a schema change before writing it as a
               migration (timed, reported, not in games/s)
  --binary PATH
               measure this pgnload binary (a release build of another
               commit, kept aside) instead of building this checkout's; with
               --reuse, two commits are compared on the same base databases
               without checking either out; the report names the binary
  --quick      a check that the script runs end to end, in seconds: sizes
               0 and 2000, a 500-game batch, a 256M cap (no cap, said so, if
               the cgroup cannot be made)
EOF
}

sizes=()
batch=50000
cap=1G
out=target/bench-growth
keep=0
reuse=0
setup_sql=
binary=
quick=0
while [[ $# -gt 0 ]]; do
    case $1 in
        --batch) batch=${2:?--batch needs a value}; shift 2 ;;
        --cap) cap=${2:?--cap needs a value}; shift 2 ;;
        --out) out=${2:?--out needs a value}; shift 2 ;;
        --keep) keep=1; shift ;;
        --reuse) reuse=1; shift ;;
        --setup-sql) setup_sql=$(realpath "${2:?--setup-sql needs a file}"); shift 2 ;;
        --binary) binary=$(realpath "${2:?--binary needs a file}"); shift 2 ;;
        --quick) quick=1; shift ;;
        -h | --help) usage; exit 0 ;;
        -*) echo "bench_growth.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
        *) sizes+=("$1"); shift ;;
    esac
done
if ((quick)); then
    sizes=(0 2000)
    batch=500
    cap=256M
fi
((${#sizes[@]})) || sizes=(0 250000 1000000 max)
for s in "${sizes[@]}"; do
    [[ $s =~ ^[0-9]+$ || $s == max ]] || { echo "bench_growth.sh: a size is an integer or max: $s" >&2; exit 2; }
done
if ! [[ $batch =~ ^[0-9]+$ ]] || ((batch < 1)); then
    echo "bench_growth.sh: --batch must be a positive integer" >&2
    exit 2
fi
cap_bytes=0
if [[ $cap != none ]]; then
    [[ $cap =~ ^([0-9]+)([kKmMgG]?)$ ]] ||
        { echo "bench_growth.sh: --cap is bytes, or a number with K, M or G, or none: $cap" >&2; exit 2; }
    case ${BASH_REMATCH[2]} in
        '') cap_bytes=${BASH_REMATCH[1]} ;;
        [kK]) cap_bytes=$((BASH_REMATCH[1] << 10)) ;;
        [mM]) cap_bytes=$((BASH_REMATCH[1] << 20)) ;;
        *) cap_bytes=$((BASH_REMATCH[1] << 30)) ;;
    esac
fi
if [[ $cap != none ]] && ((cap_bytes < 256 << 20)); then
    echo "bench_growth.sh: --cap must be at least 256M (the server's floor settings need ~200 MiB)" >&2
    exit 2
fi

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
mkdir -p "$out"
out=$(cd "$out" && pwd)
cluster=$out/cluster
target_dir=${CARGO_TARGET_DIR:-$root/target}
pgnload=${binary:-$target_dir/release/pgnload}
gen=$target_dir/release/examples/gen_corpus
psql=${PSQL:-psql}
results=$out/results.tsv
rm -f "$results"
seed_base=1
seed_batch=7
# Disk a database of N games needs while it is built, per game (the
# database at ~29 KB a game plus its PGN and WAL), and a fixed margin.
est_bytes_per_game=34000
est_margin=$((4 * 1024 * 1024 * 1024))

bench_name=bench_growth
# shellcheck source=scripts/bench_lib.sh
source "$root/scripts/bench_lib.sh"
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$results"; }

# ---------------------------------------------------------------- cleanup
cgroup=
cluster_started=0
cleanup() {
    local status=$?
    if ((cluster_started)); then
        "$pgnload" --data-dir "$cluster" db stop >/dev/null 2>&1 ||
            echo "bench_growth.sh: could not stop the cluster; run: $pgnload --data-dir $cluster db stop" >&2
    fi
    if [[ -n $cgroup && -d $cgroup ]]; then
        # Empty once the server has stopped; a leftover process is moved to
        # the parent so the directory can go.
        local pid
        while read -r pid; do
            echo "$pid" >"$cgroup/../cgroup.procs" 2>/dev/null || true
        done <"$cgroup/cgroup.procs"
        rmdir "$cgroup" 2>/dev/null || echo "bench_growth.sh: could not remove the cgroup $cgroup" >&2
    fi
    if ((!keep && !reuse)) && [[ -d $cluster ]]; then
        rm -rf -- "$cluster"
    fi
    # A base corpus left by an interrupted build (up to GBs).
    rm -f "$out/base.pgn"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- checks
command -v "$psql" >/dev/null || die "psql not found (install postgresql-client or set PSQL)"
command -v python3 >/dev/null || die "python3 not found: needed to drop the cluster's files from the page cache"
command -v pgrep >/dev/null || die "pgrep not found (apt-get install procps)"
if [[ -n $binary ]]; then
    [[ -x $binary ]] || die "--binary $binary is not an executable file"
    log "building the corpus generator (measuring $binary)"
    cargo build --release --quiet --locked --example gen_corpus
else
    log "building release binaries"
    cargo build --release --quiet --locked --bin pgnload --example gen_corpus
fi

# ---------------------------------------------------------------- the cgroup
if ((cap_bytes > 0)); then
    own=$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup)
    parent=/sys/fs/cgroup/memory$own
    if [[ -n $own && -w $parent ]] && mkdir "$parent/bench_growth.$$" 2>/dev/null; then
        cgroup=$parent/bench_growth.$$
        echo "$cap_bytes" >"$cgroup/memory.limit_in_bytes" || die "cannot set $cgroup/memory.limit_in_bytes"
        log "server memory capped at $cap ($cap_bytes bytes) by the cgroup $cgroup"
    elif ((quick)); then
        log "cannot create a memory cgroup under $parent (cgroup v1 and root needed): --quick runs without a cap"
        cap=none
        cap_bytes=0
    else
        die "cannot create a memory cgroup under $parent (cgroup v1 and root needed); use --cap none to run uncapped"
    fi
fi

# ---------------------------------------------------------------- cluster
if [[ -e $cluster ]]; then
    if [[ -n $(ls -A "$cluster") && ! -d $cluster/pgdata ]]; then
        die "$cluster exists and is not a pgnload data directory; refusing to delete it"
    fi
    "$pgnload" --data-dir "$cluster" db stop >/dev/null 2>&1 || true
    ((reuse)) || rm -rf -- "$cluster"
fi
q() { PGOPTIONS='-c client_min_messages=warning' "$psql" "$1" -X -q -v ON_ERROR_STOP=1 -At -c "$2"; }
postmaster_pid() { "$pgnload" --data-dir "$cluster" db status | sed -n 's/^running, pid \([0-9]*\).*/\1/p'; }
# Starts the server: uncapped, or (with "capped") from a shell that first
# moves itself into the cgroup, so that the postmaster and all it forks are
# born there; then checks every server process is.
start_server() {
    if [[ ${1:-} == capped && -n $cgroup ]]; then
        (
            echo "$BASHPID" >"$cgroup/cgroup.procs"
            exec "$pgnload" --data-dir "$cluster" db start
        ) >/dev/null
        local pid pm
        pm=$(postmaster_pid)
        [[ -n $pm ]] || die "cannot find the server's pid in 'pgnload db status'"
        # shellcheck disable=SC2046 # one pid per word
        for pid in "$pm" $(pgrep -P "$pm" || true); do
            grep -qx "$pid" "$cgroup/cgroup.procs" || die "server process $pid is not in $cgroup"
        done
    else
        "$pgnload" --data-dir "$cluster" db start >/dev/null
    fi
    cluster_started=1
}
stop_server() {
    "$pgnload" --data-dir "$cluster" db stop >/dev/null
    cluster_started=0
}
# Drops every file of the cluster from the page cache (after a clean stop,
# so nothing is dirty): what the capped server reads, it reads itself.
evict_cluster() {
    python3 - "$cluster" <<'PY'
import os, sys
for top, _, files in os.walk(sys.argv[1]):
    for name in files:
        path = os.path.join(top, name)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
PY
}
# The sizes pgnload gives a machine of the cap's memory
# (ClusterSettings::for_resources), applied with ALTER SYSTEM (read after
# pgnload.conf) for the capped start; "reset" undoes them.
size_server_for_cap() {
    local sql
    if [[ $1 == reset ]]; then
        sql="ALTER SYSTEM RESET ALL"
    else
        local mb=$((cap_bytes >> 20))
        clamp() { local v=$1; ((v < $2)) && v=$2; ((v > $3)) && v=$3; echo "$v"; }
        sql="ALTER SYSTEM SET shared_buffers = '$(clamp $((mb / 8)) 128 4096)MB';
ALTER SYSTEM SET effective_cache_size = '$(clamp $((mb * 3 / 4)) 128 $((1 << 40)))MB';
ALTER SYSTEM SET maintenance_work_mem = '$(clamp $((mb / 8)) 64 1024)MB';
ALTER SYSTEM SET autovacuum_work_mem = '$(clamp $((mb / 32)) 64 256)MB';
ALTER SYSTEM SET work_mem = '$(clamp $((mb / 128)) 4 64)MB';"
    fi
    "$psql" "$url" -X -q -v ON_ERROR_STOP=1 <<<"$sql"
}

log "starting ${reuse:+the }cluster in $cluster"
start_server
url=$("$pgnload" --data-dir "$cluster" db url)
# A cluster kept by --reuse may have been stopped by an interrupted run
# while it ran capped.
if ((reuse)); then
    size_server_for_cap reset
    stop_server
    start_server
fi
db_url() { printf '%s' "${url/\/\/\/pgnload\?/\/\/\/$1?}"; }

if [[ -n $binary ]]; then
    record meta commit "binary $binary"
else
    record meta commit "$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)"
fi
record meta batch "$batch"
record meta cap_bytes "$cap_bytes"
record meta cores "$(nproc)"
record meta mem_kb "$(awk '/^MemTotal:/ { print $2 }' /proc/meminfo)"

# ---------------------------------------------------------------- the batch
log "generating the batch ($batch games, seed $seed_batch)"
"$gen" --games "$batch" --seed "$seed_batch" --out "$out/batch.pgn" 2>"$out/gen_batch.log" ||
    die "gen_corpus failed for the batch: $(tail -5 "$out/gen_batch.log")"

# ---------------------------------------------------------------- one size
# Sizes in ascending order, 0 first and once; `max` after them all.
want_max=0
[[ " ${sizes[*]} " == *" max "* ]] && want_max=1
mapfile -t sizes < <(printf '%s\n' 0 "${sizes[@]}" | grep -vx max | sort -n -u)

# Free bytes where the cluster lives.
free_bytes() { df -PB1 "$out" | awk 'NR == 2 { print $4 }'; }
# Prints the snapshot the batch's deltas come from: positions, games,
# summed index block reads, summed heap+TOAST block reads.
statio() {
    q "$1" "SELECT (SELECT count(*) FROM positions), (SELECT count(*) FROM games),
        (SELECT coalesce(sum(idx_blks_read), 0) FROM pg_statio_user_indexes),
        (SELECT coalesce(sum(heap_blks_read + coalesce(toast_blks_read, 0)), 0) FROM pg_statio_user_tables)" |
        tr '|' ' '
}
per_index() {
    q "$1" "SELECT relname || '.' || indexrelname, idx_blks_read FROM pg_statio_user_indexes ORDER BY relname || '.' || indexrelname COLLATE \"C\""
}

# Builds the database of N games (uncapped), imports the batch into it under
# the cap, records what it measured and drops it (unless --keep).
measure_size() {
    local n=$1 db=growth_$1 dburl need free rc=0 start end
    need=$((n * est_bytes_per_game + est_margin))
    free=$(free_bytes)
    if ((n > 0 && need > free)); then
        log "size $n skipped: needs ~$((need >> 30)) GiB of disk, $((free >> 30)) GiB free"
        record "$n" skipped "disk"
        return 0
    fi
    q "$url" "DROP DATABASE IF EXISTS $db" >/dev/null
    local built=$db
    ((reuse && n > 0)) && built=growth_base_$n
    # A base kept by --reuse is complete only once its comment says so.
    if [[ $built == "$db" || $(q "$url" "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = '$built'") != built ]]; then
        q "$url" "DROP DATABASE IF EXISTS $built" >/dev/null
        q "$url" "CREATE DATABASE $built" >/dev/null
        dburl=$(db_url "$built")
        "$pgnload" --database-url "$dburl" db migrate >/dev/null
        if ((n > 0)); then
            log "size $n: generating its games (seed $seed_base)"
            "$gen" --games "$n" --seed "$seed_base" --out "$out/base.pgn" 2>"$out/gen_$n.log" ||
                die "gen_corpus failed for $n games: $(tail -5 "$out/gen_$n.log")"
            log "size $n: import --mode bulk (uncapped, not measured)"
            start=$(now_ns)
            "$pgnload" --database-url "$dburl" import --mode bulk --quiet "$out/base.pgn" \
                >"$out/build_$n.out" 2>"$out/build_$n.log" || rc=$?
            end=$(now_ns)
            ((rc == 0 || rc == 1)) || die "the bulk build of $n games failed (exit $rc); see $out/build_$n.log"
            rm -f "$out/base.pgn"
            record "$n" build_s "$(seconds "$start" "$end")"
            log "size $n: VACUUM ANALYZE (not measured)"
            q "$dburl" "VACUUM ANALYZE"
        fi
        [[ $built == "$db" ]] || q "$url" "COMMENT ON DATABASE $built IS 'built'"
    fi
    dburl=$(db_url "$db")
    if [[ $built != "$db" ]]; then
        log "size $n: copying $built, then db migrate (uncapped, timed, not in games/s)"
        q "$url" "CREATE DATABASE $db TEMPLATE $built" >/dev/null
        start=$(now_ns)
        "$pgnload" --database-url "$dburl" db migrate >"$out/migrate_$n.log" 2>&1 ||
            die "db migrate of the copy of $built failed; see $out/migrate_$n.log"
        end=$(now_ns)
        record "$n" migrate_s "$(seconds "$start" "$end")"
    fi
    if [[ -n $setup_sql ]]; then
        log "size $n: running $setup_sql (uncapped, timed, not in games/s)"
        start=$(now_ns)
        "$psql" "$dburl" -X -q -v ON_ERROR_STOP=1 -f "$setup_sql" >"$out/setup_$n.log" 2>&1 ||
            die "$setup_sql failed on $db; see $out/setup_$n.log"
        end=$(now_ns)
        record "$n" setup_s "$(seconds "$start" "$end")"
        q "$dburl" "VACUUM ANALYZE"
    fi
    local before after
    before=$(statio "$dburl")
    per_index "$dburl" >"$out/idx_before_$n.txt"
    # A cold, capped server: settings for the cap, clean stop, page cache
    # dropped, started inside the cgroup with its peak usage reset.
    ((cap_bytes == 0)) || size_server_for_cap set
    stop_server
    evict_cluster
    if [[ -n $cgroup ]]; then
        echo 0 >"$cgroup/memory.max_usage_in_bytes"
        echo 0 >"$cgroup/memory.failcnt"
    fi
    start_server capped
    log "size $n: import --mode incremental of the batch${cgroup:+ (server capped at $cap)}"
    rc=0
    start=$(now_ns)
    "$pgnload" --database-url "$dburl" import --mode incremental --quiet "$out/batch.pgn" \
        >"$out/batch_$n.out" 2>"$out/batch_$n.log" || rc=$?
    end=$(now_ns)
    # The machine's 1-minute load average as the batch ends: on a shared
    # machine, what else competed for the cores.
    record "$n" load "$(cut -d' ' -f1 /proc/loadavg)"
    ((rc == 0 || rc == 1)) || die "the batch into $n games failed (exit $rc); see $out/batch_$n.log"
    ((rc == 0)) || log "warning: the batch into $n games exited 1 (rejected games); see $out/batch_$n.log"
    if [[ -n $cgroup ]]; then
        record "$n" server_peak_bytes "$(cat "$cgroup/memory.max_usage_in_bytes")"
        record "$n" cap_failcnt "$(cat "$cgroup/memory.failcnt")"
    fi
    after=$(statio "$dburl")
    per_index "$dburl" >"$out/idx_after_$n.txt"
    local -a b a
    read -r -a b <<<"$before"
    read -r -a a <<<"$after"
    record "$n" games_before "${b[1]}"
    record "$n" games_after "${a[1]}"
    record "$n" new_games $((a[1] - b[1]))
    record "$n" new_positions $((a[0] - b[0]))
    record "$n" batch_s "$(seconds "$start" "$end")"
    record "$n" idx_reads $((a[2] - b[2]))
    record "$n" heap_reads $((a[3] - b[3]))
    record "$n" db_bytes "$(q "$dburl" "SELECT pg_database_size(current_database())")"
    # The size split: every table (heap, the rest of pg_table_size, its
    # indexes, total) and every index.
    q "$dburl" "
SELECT 'table', c.relname, pg_relation_size(c.oid), pg_table_size(c.oid) - pg_relation_size(c.oid),
       pg_indexes_size(c.oid), pg_total_relation_size(c.oid)
FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p')
UNION ALL
SELECT 'index', t.relname || '.' || i.relname, pg_relation_size(i.oid), 0, 0, pg_relation_size(i.oid)
FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
WHERE t.relnamespace = 'public'::regnamespace
ORDER BY 1 DESC, 6 DESC" >"$out/sizes_$n.txt"
    # Back to an uncapped server with pgnload's own settings for the next build.
    ((cap_bytes == 0)) || size_server_for_cap reset
    stop_server
    start_server
    if ((!keep)); then
        q "$url" "DROP DATABASE $db" >/dev/null
    fi
}

largest=0
for n in "${sizes[@]}"; do
    measure_size "$n"
    largest=$n
done
if ((want_max)); then
    # The most games (a multiple of 250,000) whose estimate fits the disk now.
    m=$((($(free_bytes) - est_margin) / est_bytes_per_game / 250000 * 250000))
    if ((m > largest)); then
        log "size max: $m games fit the free disk"
        measure_size "$m"
        sizes+=("$m")
    else
        log "size max skipped: the free disk holds no more than $largest games"
    fi
fi

# ---------------------------------------------------------------- report
val() { awk -F'\t' -v r="$1" -v k="$2" '$1 == r && $2 == k { print $3 }' "$results"; }
human() { awk -v b="$1" 'BEGIN { if (b == "") print "n/a"; else if (b >= 2^30) printf "%.1f GiB", b / 2^30; else printf "%.0f MiB", b / 2^20 }'; }
per() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 > 0) printf "%.2f", a / b; else print "n/a" }'; }
empty_rate=$(rate "$(val 0 new_games)" "$(val 0 batch_s)")
{
    echo
    echo "bench_growth: a $batch-game batch imported --mode incremental into databases of N games"
    echo "commit $(val meta commit); server memory cap: $cap; $(nproc) cores, $(($(val meta mem_kb) >> 20)) GiB RAM"
    echo "(db size after the batch; load: the 1-minute load average as the batch ended)"
    echo
    printf '%-10s %-10s %-7s %-9s %-9s %-8s %-10s %-11s %-11s %-10s %s\n' \
        "games" "db size" "db/cap" "games/s" "vs empty" "B/game" "new pos" "idx rd/pos" "heap rd/pos" "peak mem" "load"
    for n in "${sizes[@]}"; do
        if [[ -n $(val "$n" skipped) ]]; then
            printf '%-10s skipped (disk)\n' "$n"
            continue
        fi
        r=$(rate "$(val "$n" new_games)" "$(val "$n" batch_s)")
        printf '%-10s %-10s %-7s %-9s %-9s %-8s %-10s %-11s %-11s %-10s %s\n' \
            "$n" "$(human "$(val "$n" db_bytes)")" "$(per "$(val "$n" db_bytes)" "$cap_bytes")" \
            "$r" "$(ratio "$r" "$empty_rate")" \
            "$(awk -v b="$(val "$n" db_bytes)" -v g="$(val "$n" games_after)" 'BEGIN { printf "%.0f", b / g }')" \
            "$(val "$n" new_positions)" "$(per "$(val "$n" idx_reads)" "$(val "$n" new_positions)")" \
            "$(per "$(val "$n" heap_reads)" "$(val "$n" new_positions)")" "$(human "$(val "$n" server_peak_bytes)")" \
            "$(val "$n" load)"
    done
    for n in "${sizes[@]}"; do
        [[ -z $(val "$n" migrate_s) ]] || echo "size $n: db migrate of the copy of growth_base_$n took $(val "$n" migrate_s) s"
        [[ -z $(val "$n" setup_s) ]] || echo "size $n: $setup_sql took $(val "$n" setup_s) s"
    done
    for n in "${sizes[@]}"; do
        [[ -f $out/sizes_$n.txt ]] || continue
        echo
        echo "size split after the batch, database of $n games + the batch ($(val "$n" games_after) games):"
        # Relations of at least 1% of the database each; the rest summed.
        awk -F'|' -v g="$(val "$n" games_after)" -v db="$(val "$n" db_bytes)" '
            $6 < db / 100 { rest[$1] += $6; few[$1]++; next }
            $1 == "table" { printf "  table %-22s heap %9.1f MiB  other %7.1f MiB  indexes %9.1f MiB  total %9.1f MiB  %7.0f B/game\n",
                            $2, $3 / 2^20, $4 / 2^20, $5 / 2^20, $6 / 2^20, $6 / g }
            $1 == "index" { printf "  index %-44s %9.1f MiB  %7.0f B/game\n", $2, $3 / 2^20, $3 / g }
            END { for (k in few) printf "  %d other %s, under 1%% each: %.1f MiB together, %.0f B/game\n",
                                         few[k], k == "table" ? "tables" : "indexes", rest[k] / 2^20, rest[k] / g }' "$out/sizes_$n.txt"
        echo "  index block reads per new position during the batch (those of at least 0.001):"
        LC_ALL=C join -t'|' "$out/idx_before_$n.txt" "$out/idx_after_$n.txt" |
            awk -F'|' -v p="$(val "$n" new_positions)" '
                p > 0 && ($3 - $2) / p >= 0.0005 { printf "    %-48s %.3f\n", $1, ($3 - $2) / p }' | sort -k2,2rn
    done
} | tee "$out/report.txt"
