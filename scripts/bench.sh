#!/usr/bin/env bash
# The project's one benchmark: pgnload bulk and incremental imports against
# PostgreSQL's own binary COPY of the same rows and against the Python
# reference, all measured in one run on one fresh embedded cluster, so the
# ratios hold even on a noisy machine. See scripts/README.md ("bench.sh").
#
#   scripts/bench.sh [--games N] [--out DIR] [--pgnload BINARY] [--no-import]
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: scripts/bench.sh [--games N] [--out DIR] [--no-import]

  --games N     games in corpus A (default 200000); corpus B has N/4
  --out DIR     work and result directory (default target/bench); holds the
                corpora, logs, DIR/cluster (recreated) and DIR/bench.json
  --no-import   skip the pgnload import runs and fill the database from
                `pgnload positions` with SQL instead, to test the rest of the
                script (raw COPY, Python baseline, report) without `import`
EOF
}

games=200000
out=target/bench
no_import=0
given_binary=
while [[ $# -gt 0 ]]; do
    case $1 in
        --games) games=${2:?--games needs a value}; shift 2 ;;
        --out) out=${2:?--out needs a value}; shift 2 ;;
        --pgnload) given_binary=$(realpath "${2:?--pgnload needs a file}"); shift 2 ;;
        --no-import) no_import=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "bench.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done
if ! [[ $games =~ ^[0-9]+$ ]] || ((games < 4)); then
    echo "bench.sh: --games must be an integer >= 4" >&2
    exit 2
fi

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
mkdir -p "$out"
out=$(cd "$out" && pwd)
cluster=$out/cluster
target_dir=${CARGO_TARGET_DIR:-$root/target}
pgnload=${given_binary:-$target_dir/release/pgnload}
gen=$target_dir/release/examples/gen_corpus
psql=${PSQL:-psql}
results=$out/results.tsv
# A failed run must not leave an earlier run's results looking current.
rm -f "$results" "$out/bench.json"
b_games=$((games / 4))
py_games=$((games < 5000 ? games : 5000))
seed_a=1
seed_b=2

bench_name=bench
# shellcheck source=scripts/bench_lib.sh
source "$root/scripts/bench_lib.sh"
# Records one measurement for the report: run, key, value.
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$results"; }

# ---------------------------------------------------------------- cleanup
cluster_started=0
sampler_pid=
cleanup() {
    local status=$?
    if [[ -n $sampler_pid ]]; then
        kill "$sampler_pid" 2>/dev/null || true
        wait "$sampler_pid" 2>/dev/null || true
        sampler_pid=
    fi
    if ((cluster_started)); then
        if "$pgnload" --data-dir "$cluster" db stop >/dev/null 2>&1; then
            log "cluster stopped"
        else
            echo "bench.sh: could not stop the cluster; run: $pgnload --data-dir $cluster db stop" >&2
        fi
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- checks
command -v "$psql" >/dev/null || die "psql not found (install postgresql-client or set PSQL)"
[[ -x /usr/bin/time ]] || die "/usr/bin/time not found (apt-get install time): needed for peak RSS"
command -v pgrep >/dev/null || die "pgrep not found (apt-get install procps)"
python3 -c 'import chess, xxhash' 2>/dev/null ||
    die "python3 with chess and xxhash is needed for the baseline: pip install chess==1.11.2 xxhash"

# ---------------------------------------------------------------- 1. build
if [[ -n $given_binary ]]; then
    [[ -x $given_binary ]] || die "--pgnload $given_binary is not an executable file"
    log "building the corpus generator; measuring $given_binary"
    cargo build --release --quiet --example gen_corpus
else
    log "building release binaries"
    cargo build --release --quiet --bin pgnload --example gen_corpus
fi
# Until bulk and incremental modes land, both runs use the one import path
# (reported as such); with --mode they are the two modes.
mode_flag=1
if ((!no_import)) && ! "$pgnload" import --help 2>/dev/null | grep -q -- '--mode'; then
    mode_flag=0
    log "this pgnload's import has no --mode: both import runs use its single mode"
fi

: >"$results"
record meta games "$games"
record meta b_games "$b_games"
record meta py_games "$py_games"
if [[ -n $given_binary ]]; then
    record meta commit "binary $given_binary"
else
    record meta commit "$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)"
fi
record meta cores "$(nproc)"
record meta mem_kb "$(awk '/^MemTotal:/ { print $2 }' /proc/meminfo)"
record meta no_import "$no_import"
record meta import_modes "$mode_flag"

# ---------------------------------------------------------------- 2. corpora
# Parses gen_corpus's summary (stderr) into results.
record_corpus() {
    local name=$1 logfile=$2
    record "corpus_$name" games "$(sed -n 's/^games written: //p' "$logfile")"
    record "corpus_$name" plies "$(sed -n 's/^plies: //p' "$logfile")"
    record "corpus_$name" avg_plies "$(sed -n 's/^average plies: //p' "$logfile")"
    record "corpus_$name" gen_games_per_s "$(sed -n 's/^elapsed: .*(\([0-9.]*\) games\/s)/\1/p' "$logfile")"
    record "corpus_$name" distinct "$(sed -n 's/^positions: .*distinct: \([0-9]*\).*/\1/p' "$logfile")"
    record "corpus_$name" known_pct "$(sed -n 's/^known in .*: \([0-9.]*\)% of positions.*/\1/p' "$logfile")"
    record "corpus_$name" known_distinct_pct "$(sed -n 's/^known in .*, \([0-9.]*\)% of distinct.*/\1/p' "$logfile")"
    record "corpus_$name" bytes "$(stat -c %s "$out/$name.pgn")"
    record "corpus_$name" zst_bytes "$(zst_size "$out/$name.pgn")"
}
# Bytes of FILE compressed with zstd level 3 (what `zstd` does by default and
# about what the Lichess dumps use), streamed, nothing written: the `zstd`
# binary, else python's zstandard module, else "n/a".
zst_size() {
    if command -v zstd >/dev/null; then
        zstd -3 -q -c -- "$1" | wc -c
    elif python3 -c 'import zstandard' 2>/dev/null; then
        python3 -c '
import sys, zstandard
with open(sys.argv[1], "rb") as f:
    r = zstandard.ZstdCompressor(level=3).stream_reader(f)
    n = 0
    while chunk := r.read(1 << 20):
        n += len(chunk)
print(n)' "$1"
    else
        echo n/a
    fi
}
log "generating corpus A ($games games)"
"$gen" --games "$games" --seed "$seed_a" --out "$out/A.pgn" --stats 2>"$out/gen_A.log" ||
    die "gen_corpus failed for A: $(tail -5 "$out/gen_A.log")"
record_corpus A "$out/gen_A.log"
log "generating corpus B ($b_games games, half of their positions from A)"
"$gen" --games "$b_games" --seed "$seed_b" --out "$out/B.pgn" --stats \
    --known-seed "$seed_a" --known-games "$games" --known-fraction 0.5 2>"$out/gen_B.log" ||
    die "gen_corpus failed for B: $(tail -5 "$out/gen_B.log")"
record_corpus B "$out/gen_B.log"

# ---------------------------------------------------------------- cluster
if [[ -e $cluster ]]; then
    if [[ -n $(ls -A "$cluster") && ! -d $cluster/pgdata ]]; then
        die "$cluster exists and is not a pgnload data directory; refusing to delete it"
    fi
    "$pgnload" --data-dir "$cluster" db stop >/dev/null 2>&1 || true
    rm -rf -- "$cluster"
fi
log "starting a fresh cluster in $cluster"
cluster_started=1
"$pgnload" --data-dir "$cluster" db start >/dev/null
url=$("$pgnload" --data-dir "$cluster" db url)
postmaster=$("$pgnload" --data-dir "$cluster" db status | sed -n 's/^running, pid \([0-9]*\).*/\1/p')
[[ -n $postmaster ]] || die "cannot find the server's pid in 'pgnload db status'"
# URL of another database on the same cluster.
db_url() { printf '%s' "${url/\/\/\/pgnload\?/\/\/\/$1?}"; }
# A fresh, migrated database named $1; prints its URL.
fresh_db() {
    q "$url" "DROP DATABASE IF EXISTS $1" >/dev/null
    q "$url" "CREATE DATABASE $1" >/dev/null
    "$pgnload" --database-url "$(db_url "$1")" db migrate >/dev/null
    db_url "$1"
}
q() { PGOPTIONS='-c client_min_messages=warning' "$psql" "$1" -X -q -v ON_ERROR_STOP=1 -At -c "$2"; }

# Row counts of the five data tables, space-separated.
tables=(positions games moves players events)
counts() {
    q "$1" "SELECT (SELECT count(*) FROM positions), (SELECT count(*) FROM games),
        (SELECT count(*) FROM moves), (SELECT count(*) FROM players), (SELECT count(*) FROM events)" |
        tr '|' ' '
}

# Server memory: every 0.5 s, the summed Rss and Pss of the postmaster and
# its children (Rss counts shared buffers once per process; Pss splits them).
start_sampler() {
    local file=$1
    : >"$file"
    (
        while kill -0 "$postmaster" 2>/dev/null; do
            # shellcheck disable=SC2046 # one pid per word
            for pid in "$postmaster" $(pgrep -P "$postmaster" || true); do
                cat "/proc/$pid/smaps_rollup" 2>/dev/null || true
            done | awk '$1 == "Rss:" { r += $2 } $1 == "Pss:" { p += $2 } END { print r + 0, p + 0 }' >>"$file"
            sleep 0.5
        done
    ) &
    sampler_pid=$!
}
stop_sampler() {
    local run=$1 file=$2 peaks
    kill "$sampler_pid" 2>/dev/null || true
    wait "$sampler_pid" 2>/dev/null || true
    sampler_pid=
    peaks=$(awk '$1 > r { r = $1 } $2 > p { p = $2 } END { print r + 0, p + 0 }' "$file")
    record "$run" server_rss_kb "${peaks% *}"
    record "$run" server_pss_kb "${peaks#* }"
}
client_rss() { sed -n 's/^[[:space:]]*Maximum resident set size (kbytes): //p' "$1"; }

# Runs "$@" timed, with the client under /usr/bin/time and (unless
# sample_server=0) the server sampled; records wall seconds, peak RSS and the
# exit code. Stdout goes to DIR/<run>.out, stderr to DIR/<run>.log.
sample_server=1
measure() {
    local run=$1 start end rc=0
    shift
    ((!sample_server)) || start_sampler "$out/$run.server"
    start=$(now_ns)
    /usr/bin/time -v -o "$out/$run.time" "$@" >"$out/$run.out" 2>"$out/$run.log" || rc=$?
    end=$(now_ns)
    ((!sample_server)) || stop_sampler "$run" "$out/$run.server"
    record "$run" wall_s "$(seconds "$start" "$end")"
    record "$run" client_rss_kb "$(client_rss "$out/$run.time")"
    record "$run" exit_code "$rc"
    return "$rc"
}
# Records the row deltas of a run: "before" and "after" as printed by counts.
record_rows() {
    local run=$1 i
    local -a old new
    read -r -a old <<<"$2"
    read -r -a new <<<"$3"
    for i in "${!tables[@]}"; do
        record "$run" "rows_${tables[$i]}" $((new[i] - old[i]))
    done
}

# Bytes on disk of run $1's database (URL $2), which holds corpus $3 (A, or
# A+B): every table of the public schema with its heap (main fork), the rest
# of pg_table_size (TOAST, free space and visibility maps), its indexes
# summed, its total (pg_total_relation_size), and every index on its own;
# plus pg_database_size (catalogs included), and the bytes and games of
# games.annotations (what the typed columns cannot say: NULL for a Lichess
# game). DIR/sizes_<run>.txt keeps the
# rows; the report divides them by the rows each table holds.
record_sizes() {
    local run=$1 db=$2 corpus=$3 rows_of t
    q "$db" "
SELECT 'table', c.relname, pg_relation_size(c.oid), pg_table_size(c.oid) - pg_relation_size(c.oid),
       pg_indexes_size(c.oid), pg_total_relation_size(c.oid)
FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p')
UNION ALL
SELECT 'index', t.relname || '.' || i.relname, pg_relation_size(i.oid), 0, 0, pg_relation_size(i.oid)
FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
WHERE t.relnamespace = 'public'::regnamespace
UNION ALL
SELECT 'database', current_database(), pg_database_size(current_database()), 0, 0,
       pg_database_size(current_database())
UNION ALL
SELECT 'annotations', 'games.annotations', coalesce(sum(pg_column_size(annotations)), 0),
       count(annotations), 0, 0 FROM games" >"$out/sizes_$run.txt"
    rows_of=$(counts "$db")
    read -r -a rows_of <<<"$rows_of"
    for t in "${!tables[@]}"; do
        record "$run" "stored_${tables[$t]}" "${rows_of[$t]}"
    done
    record "$run" sizes_corpus "$corpus"
}

bulk_url=$url
"$pgnload" --data-dir "$cluster" db migrate >/dev/null

# VACUUM (unmeasured) after a load into a database that stays, so that the
# autovacuum the load triggers does not run during the next measured step.
settle() {
    log "VACUUM (not measured), so that no autovacuum overlaps the next run"
    q "$1" "VACUUM"
}

# pgnload import, checked: exit 1 means rejected games (reported, not fatal).
# Into the cluster's own database, or into database $5 when given.
import_run() {
    local run=$1 mode=$2 file=$3 games_in=$4 db=${5:-} before after rc=0 hit
    local target_url=$bulk_url target_args=(--data-dir "$cluster")
    if [[ -n $db ]]; then
        target_url=$(db_url "$db")
        target_args=(--database-url "$target_url")
    fi
    before=$(counts "$target_url")
    local mode_args=()
    ((mode_flag)) && mode_args=(--mode "$mode")
    log "pgnload import ${mode_args[*]} $(basename "$file")${db:+ into database $db}"
    measure "$run" "$pgnload" "${target_args[@]}" import "${mode_args[@]}" --quiet "$file" || rc=$?
    if ((rc != 0 && rc != 1)); then
        die "pgnload import --mode $mode failed (exit $rc); last lines of $out/$run.log:
$(tail -15 "$out/$run.log")"
    fi
    ((rc == 0)) || log "warning: pgnload import --mode $mode exited 1 (rejected games); see $out/$run.log"
    after=$(counts "$target_url")
    record_rows "$run" "$before" "$after"
    record "$run" games "$games_in"
    hit=$(grep -i 'resolved in memory' "$out/$run.log" | tail -1 |
        sed -n 's/.* \([0-9][0-9.]*%\) resolved in memory.*/\1/p')
    record "$run" cache_hit_rate "${hit:-n/a}"
}

# Test mode: fill the database like an import would, from `pgnload positions`
# (positions deduplicated, one games row per game, one moves row per ply).
fill_without_import() {
    log "--no-import: filling the database from 'pgnload positions' with SQL"
    "$pgnload" positions "$out/A.pgn" >"$out/fill_positions.tsv" 2>"$out/fill_positions.log"
    "$psql" "$bulk_url" -X -q -v ON_ERROR_STOP=1 <<SQL
CREATE TEMP TABLE p (game_key text, ply int, fen text, digest bigint);
\copy p FROM '$out/fill_positions.tsv'
INSERT INTO positions (normalized_fen, fen_hash, piece_placement, active_color, castling, en_passant)
SELECT fen, min(digest), split_part(fen, ' ', 1), split_part(fen, ' ', 2),
       split_part(fen, ' ', 3), split_part(fen, ' ', 4)
FROM p GROUP BY fen;
CREATE TEMP TABLE pp AS
SELECT p.game_key, p.ply, s.id FROM p JOIN positions s ON s.normalized_fen = p.fen;
INSERT INTO games (source, external_id, variant, initial_position_id, final_position_id, ply_count, moves)
SELECT 'lichess', game_key, 'standard', min(id) FILTER (WHERE ply = 0),
       (array_agg(id ORDER BY ply DESC))[1], max(ply), ''::bytea
FROM pp GROUP BY game_key;
INSERT INTO moves (game_id, ply, position_id, position_after_id, uci, san)
SELECT g.id, b.ply, a.id, b.id, '', ''
FROM pp b JOIN pp a ON a.game_key = b.game_key AND a.ply = b.ply - 1
JOIN games g ON g.source = 'lichess' AND g.external_id = b.game_key;
SQL
    rm -f "$out/fill_positions.tsv"
}

# ---------------------------------------------------------------- 3. bulk
if ((no_import)); then
    fill_without_import
else
    import_run pgnload_bulk bulk "$out/A.pgn" "$games"
    settle "$bulk_url"
    record_sizes pgnload_bulk "$bulk_url" A
fi

# ------------------------------------------------- 3a. recognizing an input
# An input is identified by a digest of all its bytes, so even skipping an
# imported file reads it once: a no-op rerun of the bulk load's input (start,
# connect, fingerprint, skip), against `cat` of the same file, both from the
# page cache the bulk load left warm.
if ((!no_import)); then
    sample_server=0
    log "cat A.pgn, then a no-op rerun of its import (fingerprint + skip)"
    measure cat_A sh -c 'cat "$1" >/dev/null' sh "$out/A.pgn" || die "cat of A.pgn failed"
    rerun_mode=()
    ((mode_flag)) && rerun_mode=(--mode incremental)
    measure pgnload_noop_rerun "$pgnload" --data-dir "$cluster" import "${rerun_mode[@]}" --quiet "$out/A.pgn" ||
        die "the no-op rerun failed; see $out/pgnload_noop_rerun.log"
    grep -q 'already imported, skipped' "$out/pgnload_noop_rerun.log" ||
        die "the rerun of A.pgn was not a no-op; see $out/pgnload_noop_rerun.log"
    sample_server=1
fi

# ---------------------------------------------------------------- 5a. export
# The rows as they stand after the bulk import, in COPY's binary format,
# in foreign-key order; import_files only because games reference it.
copy_tables=(import_files events players positions games moves)
log "exporting the loaded rows (binary COPY)"
mkdir -p "$out/raw"
for t in "${copy_tables[@]}"; do
    q "$bulk_url" "\\copy $t TO '$out/raw/$t.bin' (FORMAT binary)"
done

# ------------------------------------------------------- 3b. bulk, warm cluster
# The first bulk load also creates every WAL segment file of the fresh
# cluster; the raw runs later reuse them. The same load into a second empty
# database, now, pays what the raw runs pay, so the ratios compare like
# with like (the first run's time is reported too).
if ((!no_import && mode_flag)); then
    fresh_db bench_bulk >/dev/null
    import_run pgnload_bulk_warm bulk "$out/A.pgn" "$games" bench_bulk
    record_sizes pgnload_bulk_warm "$(db_url bench_bulk)" A
    q "$url" "DROP DATABASE bench_bulk"
fi

# ---------------------------------------------------------------- 4. incremental
if ((!no_import)); then
    # What corpus B adds is exported afterwards, for the raw incremental run:
    # every row with an id above A's (moves by their game).
    a_max=$(q "$bulk_url" "SELECT (SELECT coalesce(max(id), 0) FROM import_files),
        (SELECT coalesce(max(id), 0) FROM events), (SELECT coalesce(max(id), 0) FROM players),
        (SELECT coalesce(max(id), 0) FROM positions), (SELECT coalesce(max(id), 0) FROM games)" |
        tr '|' ' ')
    # Both incremental runs, pgnload's and the raw one, start right after a
    # checkpoint, so both write a full-page image of every page they touch.
    q "$bulk_url" "CHECKPOINT"
    import_run pgnload_incremental incremental "$out/B.pgn" "$b_games"
    settle "$bulk_url"
    record_sizes pgnload_incremental "$bulk_url" A+B
    read -r max_file max_event max_player max_position max_game <<<"$a_max"
    declare -A b_rows=(
        [import_files]="id > $max_file" [events]="id > $max_event" [players]="id > $max_player"
        [positions]="id > $max_position" [games]="id > $max_game" [moves]="game_id > $max_game"
    )
    for t in "${copy_tables[@]}"; do
        q "$bulk_url" "\\copy (SELECT * FROM $t WHERE ${b_rows[$t]}) TO '$out/raw/B_$t.bin' (FORMAT binary)"
    done
fi

# ---------------------------------------------------------------- 5b. raw limit
# psql commands loading exported rows: `copy_script` A's, `copy_script B_` B's.
copy_script() {
    local prefix=${1:-} t
    for t in "${copy_tables[@]}"; do
        printf "\\\\copy %s FROM '%s' (FORMAT binary)\n" "$t" "$out/raw/$prefix$t.bin"
    done
}

# (a) COPY into the schema as migrated, every index and constraint in place.
log "raw COPY into the schema as-is"
raw_url=$(fresh_db bench_raw)
copy_script >"$out/raw/copy.sql"
before=$(counts "$raw_url")
measure raw_copy_indexed "$psql" "$raw_url" -X -q -v ON_ERROR_STOP=1 -f "$out/raw/copy.sql" ||
    die "raw COPY failed; see $out/raw_copy_indexed.log"
after=$(counts "$raw_url")
record_rows raw_copy_indexed "$before" "$after"
settle "$raw_url"
record_sizes raw_copy_indexed "$raw_url" A
if ((!no_import)); then
    log "raw COPY of B's rows into A's, indexes kept"
    copy_script B_ >"$out/raw/copy_B.sql"
    q "$raw_url" "CHECKPOINT"
    measure raw_copy_incremental "$psql" "$raw_url" -X -q -v ON_ERROR_STOP=1 -f "$out/raw/copy_B.sql" ||
        die "raw COPY of B failed; see $out/raw_copy_incremental.log"
    record_rows raw_copy_incremental "$after" "$(counts "$raw_url")"
    record raw_copy_incremental games "$b_games"
    record_sizes raw_copy_incremental "$raw_url" A+B
fi
q "$url" "DROP DATABASE bench_raw"

# (b) Drop primary keys, unique and foreign keys and secondary indexes,
# COPY, then build them again: the best a bulk load can do with this schema.
log "raw COPY with indexes and constraints dropped and rebuilt"
raw_url=$(fresh_db bench_raw)
q "$raw_url" "
SELECT format('ALTER TABLE %s DROP CONSTRAINT %I;', conrelid::regclass, conname)
FROM pg_constraint
WHERE connamespace = 'public'::regnamespace AND contype IN ('p', 'u', 'f')
  AND conrelid <> 'pgnload_migrations'::regclass
ORDER BY contype = 'f' DESC;
SELECT format('DROP INDEX %s;', indexrelid::regclass)
FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
WHERE c.relnamespace = 'public'::regnamespace AND c.relname <> 'pgnload_migrations'
  AND NOT EXISTS (SELECT FROM pg_constraint k WHERE k.conindid = i.indexrelid AND k.contype IN ('p', 'u', 'x'));
" >"$out/raw/drop.sql"
q "$raw_url" "
SELECT format('ALTER TABLE %s ADD CONSTRAINT %I %s;', conrelid::regclass, conname, pg_get_constraintdef(oid))
FROM pg_constraint
WHERE connamespace = 'public'::regnamespace AND contype IN ('p', 'u')
  AND conrelid <> 'pgnload_migrations'::regclass;
SELECT pg_get_indexdef(indexrelid) || ';'
FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
WHERE c.relnamespace = 'public'::regnamespace AND c.relname <> 'pgnload_migrations'
  AND NOT EXISTS (SELECT FROM pg_constraint k WHERE k.conindid = i.indexrelid AND k.contype IN ('p', 'u', 'x'));
SELECT format('ALTER TABLE %s ADD CONSTRAINT %I %s;', conrelid::regclass, conname, pg_get_constraintdef(oid))
FROM pg_constraint
WHERE connamespace = 'public'::regnamespace AND contype = 'f';
" >"$out/raw/rebuild.sql"
# psql runs the backquoted `date` when it reaches each mark: phase times.
# shellcheck disable=SC2016
phase_mark() { printf '\\echo phase %s `date +%%s%%N`\n' "$1"; }
{
    phase_mark drop
    cat "$out/raw/drop.sql"
    phase_mark copy
    copy_script
    phase_mark rebuild
    cat "$out/raw/rebuild.sql"
    phase_mark end
} >"$out/raw/copy_rebuild.sql"
before=$(counts "$raw_url")
measure raw_copy_rebuild "$psql" "$raw_url" -X -q -v ON_ERROR_STOP=1 -f "$out/raw/copy_rebuild.sql" ||
    die "raw COPY with rebuild failed; see $out/raw_copy_rebuild.log"
after=$(counts "$raw_url")
record_rows raw_copy_rebuild "$before" "$after"
record_sizes raw_copy_rebuild "$raw_url" A
phase() { sed -n "s/^phase $1 //p" "$out/raw_copy_rebuild.out"; }
record raw_copy_rebuild copy_s "$(seconds "$(phase copy)" "$(phase rebuild)")"
record raw_copy_rebuild rebuild_s "$(seconds "$(phase rebuild)" "$(phase end)")"
q "$url" "DROP DATABASE bench_raw"
rm -f "$out"/raw/*.bin

# ---------------------------------------------------------------- 6. Python
log "Python baseline on the first $py_games games of A"
awk -v n="$py_games" '/^\[Event / { if (++g > n) exit } { print }' "$out/A.pgn" >"$out/slice.pgn"
sample_server=0
measure python python3 "$root/scripts/py_digests.py" "$out/slice.pgn" ||
    die "py_digests.py failed; see $out/python.log"
sample_server=1
record python games "$py_games"
record python positions_replayed "$(wc -l <"$out/python.out")"
rm -f "$out/python.out" "$out/slice.pgn"

# ---------------------------------------------------------------- 7. report
python3 - "$results" "$out/bench.json" "$out" <<'PY'
"""Turns results.tsv into the table (stdout) and bench.json."""
import json
import sys

results, json_path, out_dir = sys.argv[1], sys.argv[2], sys.argv[3]
data = {}
for line in open(results, encoding="utf-8"):
    run, key, value = line.rstrip("\n").split("\t", 2)
    data.setdefault(run, {})[key] = value


def num(value):
    try:
        return float(value) if "." in value else int(value)
    except (TypeError, ValueError):
        return None if value in (None, "", "n/a") else value


meta = {k: v if k == "commit" else num(v) for k, v in data.pop("meta").items()}
corpora = {k[len("corpus_"):]: {kk: num(vv) for kk, vv in v.items()}
           for k, v in data.items() if k.startswith("corpus_")}
TABLES = ["positions", "games", "moves", "players", "events"]
MODES = bool(meta.get("import_modes"))
LABELS = {
    "pgnload_bulk": "pgnload bulk (A), fresh cluster" if MODES else "pgnload import (A, empty db)",
    "pgnload_bulk_warm": "pgnload bulk (A), warm cluster",
    "pgnload_incremental": "pgnload incremental (B)" if MODES else "pgnload import (B, loaded db)",
    "raw_copy_indexed": "raw COPY, indexes kept",
    "raw_copy_rebuild": "raw COPY, indexes rebuilt",
    "raw_copy_incremental": "raw COPY of B into A, indexed",
    "python": "python-chess (slice, no DB)",
}
runs = {}
for name in LABELS:
    raw = data.get(name)
    if raw is None:
        runs[name] = {"status": "skipped"}
        continue
    r = {k: num(v) for k, v in raw.items()}
    wall = r["wall_s"] or 1e-9
    rows = {t: r.get(f"rows_{t}") for t in TABLES if f"rows_{t}" in r}
    # The raw runs load games rows rather than read games.
    games = r.get("games") or (rows or {}).get("games")
    run = {
        "status": "ok",
        "games": games,
        "wall_s": r["wall_s"],
        "games_per_s": games / wall if games else None,
        "rows": rows or None,
        "positions_per_s": rows["positions"] / wall if rows else None,
        "rows_per_s": sum(rows.values()) / wall if rows else None,
        "client_peak_rss_kb": r.get("client_rss_kb"),
        "server_peak_rss_kb": r.get("server_rss_kb"),
        "server_peak_pss_kb": r.get("server_pss_kb"),
        "cache_hit_rate": r.get("cache_hit_rate"),
        "exit_code": r.get("exit_code"),
    }
    for extra in ("copy_s", "rebuild_s", "positions_replayed"):
        if extra in r:
            run[extra] = r[extra]
    if name == "python":
        run["positions_per_s"] = r["positions_replayed"] / wall
        run["note"] = "positions/s counts positions replayed, not rows"
    runs[name] = run


def ratio(a, b):
    return a / b if a is not None and b else None


# Bytes on disk per run (record_sizes), against the PGN and .zst of the
# corpora the database holds; per row for each table.
PER_ROW = {"games": "games_row", "positions": "per_position", "moves": "per_ply"}
for name in LABELS:
    raw = data.get(name, {})
    if "sizes_corpus" not in raw:
        continue
    parts = raw["sizes_corpus"].split("+")
    tables, indexes, database, annotations = {}, {}, None, (0, 0)
    for line in open(f"{out_dir}/sizes_{name}.txt", encoding="utf-8"):
        kind, rel, heap, rest, idx, total = line.rstrip("\n").split("|")
        heap, rest, idx, total = int(heap), int(rest), int(idx), int(total)
        if kind == "annotations":
            annotations = (heap, rest)
        elif kind == "table":
            tables[rel] = {"heap": heap, "toast_fsm_vm": rest, "indexes": idx, "total": total,
                           "index_detail": {}}
        elif kind == "index":
            indexes[rel] = total
        else:
            database = total
    for rel, size in indexes.items():
        table, index = rel.split(".", 1)
        tables[table]["index_detail"][index] = size
    for t in TABLES:
        rows = num(raw.get(f"stored_{t}"))
        tables[t]["rows"] = rows
        tables[t]["total_per_row"] = ratio(tables[t]["total"], rows)
    stored_games = tables["games"]["rows"]
    public = sum(t["total"] for t in tables.values())
    pgn = sum(corpora[p]["bytes"] for p in parts)
    zst = [corpora[p].get("zst_bytes") for p in parts]
    zst = sum(zst) if all(isinstance(z, int) for z in zst) else None
    sizes = {
        "corpus": raw["sizes_corpus"],
        "games": stored_games,
        "pgn_bytes": pgn,
        "zst_bytes": zst,
        "public_bytes": public,
        "database_bytes": database,
        "per_game": ratio(public, stored_games),
        "annotations_bytes": annotations[0],
        "annotated_games": annotations[1],
        "annotations_per_game": ratio(annotations[0], stored_games),
        "vs_pgn": ratio(public, pgn),
        "vs_zst": ratio(public, zst),
        "tables": tables,
    }
    for t, key in PER_ROW.items():
        sizes[key] = tables[t]["total_per_row"]
    runs[name]["bytes"] = sizes


# Against the raw runs, the bulk load on the cluster in the same state.
bulk = runs["pgnload_bulk_warm"] if runs["pgnload_bulk_warm"]["status"] == "ok" else runs["pgnload_bulk"]
ratios = {}
for raw in ("raw_copy_indexed", "raw_copy_rebuild"):
    if bulk["status"] == "ok" and runs[raw]["status"] == "ok":
        ratios[f"bulk_vs_{raw}"] = {
            "time": ratio(bulk["wall_s"], runs[raw]["wall_s"]),
            "rows_per_s": ratio(bulk["rows_per_s"], runs[raw]["rows_per_s"]),
        }
incremental = runs["pgnload_incremental"]
if incremental["status"] == "ok" and runs["raw_copy_incremental"]["status"] == "ok":
    ratios["incremental_vs_raw_copy_incremental"] = {
        "time": ratio(incremental["wall_s"], runs["raw_copy_incremental"]["wall_s"]),
        "rows_per_s": ratio(incremental["rows_per_s"], runs["raw_copy_incremental"]["rows_per_s"]),
    }
# What recognizing an imported input costs (reported, never asserted).
noop, cat = data.get("pgnload_noop_rerun"), data.get("cat_A")
if noop and cat:
    noop_s, cat_s = num(noop["wall_s"]), num(cat["wall_s"])
    runs["pgnload_noop_rerun"] = {"status": "ok", "wall_s": noop_s}
    runs["cat_A"] = {"status": "ok", "wall_s": cat_s}
    ratios["noop_rerun_vs_cat_time"] = ratio(noop_s, cat_s)
    if runs["pgnload_bulk"]["status"] == "ok":
        ratios["noop_rerun_vs_bulk_time"] = ratio(noop_s, runs["pgnload_bulk"]["wall_s"])
for name in ("pgnload_bulk", "pgnload_bulk_warm", "pgnload_incremental"):
    if runs[name]["status"] == "ok":
        ratios[f"{name}_vs_python_games_per_s"] = ratio(
            runs[name]["games_per_s"], runs["python"]["games_per_s"])


def print_table(header, rows):
    """Columns padded to their widest cell: the first left-aligned, the rest right."""
    widths = [max(len(str(row[i])) for row in rows + [header]) for i in range(len(header))]
    for i, row in enumerate([header] + rows):
        print("  ".join(str(c).ljust(w) if j == 0 else str(c).rjust(w)
                        for j, (c, w) in enumerate(zip(row, widths))).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))


def fmt(value, digits=0, scale=1.0):
    if value is None:
        return "n/a"
    if isinstance(value, str):
        return value
    return f"{value / scale:,.{digits}f}"


a, b = corpora["A"], corpora["B"]
print()
print(f"pgnload benchmark: {meta['games']:,} games (A) + {meta['b_games']:,} (B), "
      f"commit {meta['commit']}, {meta['cores']} cores, {meta['mem_kb'] / 2**20:.0f} GiB")
print(f"corpus A: {a['plies']:,} plies ({a['avg_plies']} per game), {a['distinct']:,} distinct positions, "
      f"{a['bytes'] / 2**20:.0f} MiB, generated at {fmt(a['gen_games_per_s'])} games/s")
print(f"corpus B: {b['plies']:,} plies, {fmt(b['known_pct'], 1)}% of its positions "
      f"({fmt(b['known_distinct_pct'], 1)}% of distinct ones) already in A")
header = ["run", "games", "wall s", "games/s", "positions/s", "rows/s",
          "client RSS MB", "server RSS/PSS MB", "cache hit"]
rows = []
for name, label in LABELS.items():
    r = runs[name]
    if r["status"] != "ok":
        rows.append([label, "skipped"] + [""] * (len(header) - 2))
        continue
    rows.append([label, fmt(r["games"]), fmt(r["wall_s"], 2), fmt(r["games_per_s"]),
                 fmt(r["positions_per_s"]), fmt(r["rows_per_s"]),
                 fmt(r["client_peak_rss_kb"], 0, 1024),
                 "" if name == "python" else
                 f'{fmt(r["server_peak_rss_kb"], 0, 1024)}/{fmt(r["server_peak_pss_kb"], 0, 1024)}',
                 fmt(r["cache_hit_rate"]) if name.startswith("pgnload") else ""])
print_table(header, rows)
if runs["raw_copy_rebuild"]["status"] == "ok":
    r = runs["raw_copy_rebuild"]
    print(f"(rebuilt: COPY {r['copy_s']:.2f} s + indexes and constraints {r['rebuild_s']:.2f} s; "
          "python positions/s = positions replayed)")
print()
sized = [(n, runs[n]["bytes"]) for n in LABELS if runs[n].get("bytes")]
if sized:
    print("database bytes (public schema: heap + TOAST + indexes), against the same games' PGN "
          "and .zst (zstd -3)")
    header = ["run", "corpus", "games", "PGN MiB", ".zst MiB", "DB MiB", "DB/PGN", "DB/zst",
              "B/game", "annotations B/game", "annotated games", "positions B/row",
              "moves B/ply", "games B/row", "pg_database_size MiB"]
    rows = [[LABELS[n], b["corpus"], fmt(b["games"]), fmt(b["pgn_bytes"], 1, 2**20),
             fmt(b["zst_bytes"], 1, 2**20), fmt(b["public_bytes"], 1, 2**20),
             fmt(b["vs_pgn"], 2), fmt(b["vs_zst"], 1), fmt(b["per_game"]),
             fmt(b["annotations_per_game"], 1), fmt(b["annotated_games"]), fmt(b["per_position"]), fmt(b["per_ply"]), fmt(b["games_row"]),
             fmt(b["database_bytes"], 1, 2**20)] for n, b in sized]
    print_table(header, rows)
    print()
    print("bytes per row of each table and index (KiB totals in parentheses)")
    short = {n: n.replace("pgnload_", "").replace("raw_copy_", "raw_") for n, _ in sized}
    header = ["relation"] + [short[n] for n, _ in sized]
    rows = []
    for t in sorted(TABLES, key=lambda t: -sized[0][1]["tables"][t]["total"]):
        def cell(b, value_of):
            info = b["tables"].get(t)
            if info is None:
                return "-"
            value = value_of(info)
            if value is None:
                return "-"
            return f"{fmt(ratio(value, info['rows']), 1)} ({fmt(value, 0, 1024)})"
        rows.append([f"{t} total"] + [cell(b, lambda i: i["total"]) for _, b in sized])
        rows.append(["  heap"] + [cell(b, lambda i: i["heap"]) for _, b in sized])
        rows.append(["  TOAST+maps"] + [cell(b, lambda i: i["toast_fsm_vm"]) for _, b in sized])
        names = sorted({ix for _, b in sized for ix in b["tables"].get(t, {}).get("index_detail", {})})
        for ix in names:
            rows.append([f"  {ix}"]
                        + [cell(b, lambda i, ix=ix: i["index_detail"].get(ix)) for _, b in sized])
    rows.append(["other tables (bookkeeping)"]
                + [f"({fmt(sum(i['total'] for t, i in b['tables'].items() if t not in TABLES), 0, 1024)})"
                   for _, b in sized])
    print_table(header, rows)
    print("(bytes per row of the table the relation belongs to; all tables in bench.json)")
    print()
if "noop_rerun_vs_cat_time" in ratios:
    print(f"recognizing imported A.pgn (no-op rerun: start, connect, fingerprint every byte, skip): "
          f"{fmt(runs['pgnload_noop_rerun']['wall_s'], 2)} s = x{fmt(ratios['noop_rerun_vs_cat_time'], 2)} "
          f"cat's {fmt(runs['cat_A']['wall_s'], 3)} s"
          + (f", x{fmt(ratios['noop_rerun_vs_bulk_time'], 4)} the bulk import's time"
             if "noop_rerun_vs_bulk_time" in ratios else ""))
if not ratios:
    print("ratios: n/a (pgnload import runs skipped)")
for key, value in ratios.items():
    if key.startswith("noop_rerun_"):
        continue
    if isinstance(value, dict):
        print(f"{key}: time x{fmt(value['time'], 2)}, rows/s x{fmt(value['rows_per_s'], 3)}")
    else:
        print(f"{key}: x{fmt(value, 1)}")

with open(json_path, "w", encoding="utf-8") as f:
    def rounded(value):
        if isinstance(value, float):
            return round(value, 3)
        if isinstance(value, dict):
            return {k: rounded(v) for k, v in value.items()}
        return value

    json.dump(rounded({"meta": meta, "corpora": corpora, "runs": runs, "ratios": ratios}),
              f, indent=2)
    f.write("\n")
print(f"\nwritten: {json_path}")
PY
