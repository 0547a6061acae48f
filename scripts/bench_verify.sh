#!/usr/bin/env bash
# Throughput of `pgnload verify` (positions mode) against a bare binary COPY
# of the same columns from the same table, in one fresh embedded cluster.
#
#   scripts/bench_verify.sh [GAMES]        # default 20000 games ≈ 1.09M distinct positions
#
# Environment: RUNS (timed runs of each side, best kept; default 3),
# SEED (corpus seed; default 11), KEEP=1 (keep the work directory).
#
# The positions are real: games from examples/gen_corpus.rs (random legal
# continuations of real openings), replayed by `pgnload positions`, distinct
# FENs with their digests and split columns loaded with \copy, then
# VACUUM (FREEZE, ANALYZE) so neither side pays for hint bits. Each side is
# run once untimed to warm the cache. Target: ≥ 1,000,000 positions/s or
# ≥ 70 % of the bare COPY rate. Can be sourced into scripts/bench.sh; it
# prints `verify_positions_per_s`, `copy_positions_per_s` and `verify_copy_ratio`
# lines at the end for scripts to grep.
set -euo pipefail
cd "$(dirname "$0")/.."

games="${1:-20000}"
runs="${RUNS:-3}"
seed="${SEED:-11}"

cargo build --release --locked --quiet --bin pgnload --example gen_corpus
bin="$PWD/target/release/pgnload"
gen="$PWD/target/release/examples/gen_corpus"

# Under /tmp and 0755 so the `postgres` user can enter it when run as root.
work="$(mktemp -d /tmp/pgnload-bench-verify.XXXXXX)"
chmod 0755 "$work"
data="$work/data"
cleanup() {
    "$bin" --data-dir "$data" db stop >/dev/null 2>&1 || true
    if [ "${KEEP:-0}" = 1 ]; then echo "kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

echo "generating $games games (seed $seed)…" >&2
"$gen" --games "$games" --seed "$seed" --out "$work/corpus.pgn" 2>/dev/null
# game_key ply fen digest → id fen digest placement color castling ep, first occurrence only.
"$bin" positions "$work/corpus.pgn" \
    | awk -F'\t' -v OFS='\t' '!seen[$3]++ { split($3, f, " "); print ++n, $3, $4, f[1], f[2], f[3], f[4] }' \
    > "$work/positions.tsv"
rows=$(wc -l < "$work/positions.tsv")
echo "$rows distinct positions" >&2

"$bin" --data-dir "$data" db start >/dev/null
DATABASE_URL="$("$bin" --data-dir "$data" db url)"
export DATABASE_URL
"$bin" db migrate >/dev/null
sql() { psql -X -q -v ON_ERROR_STOP=1 "$DATABASE_URL" "$@"; }
columns="id, normalized_fen, fen_hash, piece_placement, active_color, castling, en_passant"
echo "loading…" >&2
sql -c "\\copy positions ($columns) FROM '$work/positions.tsv'"
sql -c "VACUUM (FREEZE, ANALYZE) positions"
echo "table: $(sql -A -t -c "SELECT pg_size_pretty(pg_table_size('positions'))")" >&2

seconds() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4f", b - a }'; }
min() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "" || b < a) ? b : a }'; }

bare_copy() { sql -c "\\copy positions ($columns) TO '/dev/null' (FORMAT binary)"; }
run_verify() {
    "$bin" --quiet verify --report "$work/report.tsv" >"$work/verify.out" || {
        echo "verify failed (exit $?):" >&2
        cat "$work/verify.out" >&2
        exit 1
    }
}

bare_copy
run_verify
best_copy=""
best_verify=""
for _ in $(seq "$runs"); do
    t0=$(seconds); bare_copy; t1=$(seconds)
    best_copy=$(min "$best_copy" "$(elapsed "$t0" "$t1")")
    t0=$(seconds); run_verify; t1=$(seconds)
    best_verify=$(min "$best_verify" "$(elapsed "$t0" "$t1")")
done
grep -q "^verified $rows positions" "$work/verify.out" || {
    echo "verify did not check every row:" >&2
    cat "$work/verify.out" >&2
    exit 1
}

# For context: the server alone writing the same COPY to /dev/null (no
# client at all; needs a superuser, which the embedded cluster's user is),
# and verify with --canonical (every FEN parsed and re-emitted).
server_copy=""
if [ "$(sql -A -t -c "SELECT rolsuper FROM pg_roles WHERE rolname = current_user")" = t ]; then
    for _ in $(seq "$runs"); do
        t0=$(seconds)
        sql -c "COPY positions ($columns) TO '/dev/null' (FORMAT binary)"
        t1=$(seconds)
        server_copy=$(min "$server_copy" "$(elapsed "$t0" "$t1")")
    done
fi
t0=$(seconds)
"$bin" --quiet verify --canonical --report "$work/report.tsv" >"$work/verify.out"
t1=$(seconds)
canonical=$(elapsed "$t0" "$t1")

awk -v rows="$rows" -v c="$best_copy" -v v="$best_verify" -v s="$server_copy" -v k="$canonical" \
    -v cores="$(nproc)" 'BEGIN {
    printf "rows: %d, cores: %d, best of %s runs (wall clock, process start to exit)\n", rows, cores, ENVIRON["RUNS"] ? ENVIRON["RUNS"] : 3
    printf "bare COPY (psql \\copy … TO /dev/null, binary): %7.3f s  %10.0f positions/s\n", c, rows / c
    if (s != "")
        printf "server-side COPY … TO '"'"'/dev/null'"'"' (no client): %6.3f s  %10.0f positions/s\n", s, rows / s
    printf "pgnload verify:                                %7.3f s  %10.0f positions/s\n", v, rows / v
    printf "pgnload verify --canonical (one run):          %7.3f s  %10.0f positions/s\n", k, rows / k
    printf "verify_positions_per_s %.0f\n", rows / v
    printf "copy_positions_per_s %.0f\n", rows / c
    printf "verify_copy_ratio %.2f\n", c / v
}'
