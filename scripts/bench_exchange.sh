#!/usr/bin/env bash
# The exchange formats, measured: `pgnload export --format dcg|ocgdb` games/s
# on a generated corpus, next to the peer baseline `ocgdb -create -o moves2`
# on the same PGN in the same run, and `pgnload import --games-only` against
# that same baseline (issue 14, item 5). ocgdb is never built here: it is
# taken from $OCGDB or PATH, and without it the baseline lines are a note.
# See scripts/README.md ("bench_exchange.sh").
#
#   scripts/bench_exchange.sh [--games N] [--out DIR]
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: scripts/bench_exchange.sh [--games N] [--out DIR]

  --games N   games in the generated corpus (default 200000)
  --out DIR   work and result directory (default target/bench-exchange);
              holds the corpus, the exported files, DIR/cluster (recreated)
              and DIR/results.tsv

The peer baseline is `ocgdb -create -o moves2` on the same PGN, run when an
ocgdb binary is found in $OCGDB or PATH; otherwise a note says so.
EOF
}

games=200000
out=target/bench-exchange
while [[ $# -gt 0 ]]; do
    case $1 in
        --games) games=${2:?--games needs a value}; shift 2 ;;
        --out) out=${2:?--out needs a value}; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "bench_exchange.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done
if ! [[ $games =~ ^[0-9]+$ ]] || ((games < 10)); then
    echo "bench_exchange.sh: --games must be an integer >= 10" >&2
    exit 2
fi

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
mkdir -p "$out"
out=$(cd "$out" && pwd)
cluster=$out/cluster
target_dir=${CARGO_TARGET_DIR:-$root/target}
pgnload=$target_dir/release/pgnload
gen=$target_dir/release/examples/gen_corpus
psql=${PSQL:-psql}
results=$out/results.tsv
rm -f "$results"

bench_name=bench_exchange
# shellcheck source=scripts/bench_lib.sh
source "$root/scripts/bench_lib.sh"
record() { printf '%s\t%s\n' "$1" "$2" >>"$results"; }
# Games in the Games table of an ocgdb-schema file (sqlite3, else python3).
sqlite_games() {
    if command -v sqlite3 >/dev/null; then
        sqlite3 "$1" 'SELECT count(*) FROM Games' 2>/dev/null
    else
        python3 -c 'import sqlite3, sys
print(sqlite3.connect(sys.argv[1]).execute("SELECT count(*) FROM Games").fetchone()[0])' "$1" 2>/dev/null
    fi
}

cluster_started=0
cleanup() {
    if ((cluster_started)); then
        "$pgnload" --data-dir "$cluster" db stop >/dev/null 2>&1 ||
            echo "bench_exchange.sh: could not stop the cluster; run: $pgnload --data-dir $cluster db stop" >&2
    fi
}
trap cleanup EXIT

command -v "$psql" >/dev/null || die "psql not found (install postgresql-client or set PSQL)"

# The peer: $OCGDB, else `ocgdb` on PATH; none is a note, never a failure.
ocgdb=${OCGDB:-$(command -v ocgdb || true)}
if [[ -n $ocgdb && ! -x $ocgdb ]]; then
    log "OCGDB=$ocgdb is not an executable file: no peer baseline"
    ocgdb=
fi

log "building release binaries"
cargo build --release --quiet --bin pgnload --example gen_corpus
: >"$results"
record games "$games"
record commit "$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)"
record cores "$(nproc)"
record ocgdb "${ocgdb:-none}"

log "generating $games games"
"$gen" --games "$games" --seed 1 --out "$out/corpus.pgn" 2>"$out/gen.log" ||
    die "gen_corpus failed: $(tail -5 "$out/gen.log")"
record corpus_bytes "$(stat -c %s "$out/corpus.pgn")"

rm -rf "$cluster"
cluster_started=1
"$pgnload" --data-dir "$cluster" db start >/dev/null
url=$("$pgnload" --data-dir "$cluster" db url)
sql() { PGOPTIONS="-c client_min_messages=warning" "$psql" "$1" -XAtq -v ON_ERROR_STOP=1 -c "$2"; }
db_url() { sed "s#/[^/?]*\(?\|\$\)#/$1\1#" <<<"$url"; }
[[ $(db_url probe) == *"/probe"* ]] || die "cannot derive database URLs from $url"

log "importing the corpus (bulk) to export from"
start=$(now_ns)
"$pgnload" --database-url "$url" import --quiet --mode bulk "$out/corpus.pgn" >/dev/null 2>>"$out/imports.log" ||
    die "the import failed: $(tail -5 "$out/imports.log")"
end=$(now_ns)
record import_full_seconds "$(seconds "$start" "$end")"
imported=$(sql "$url" "SELECT count(*) FROM games")
((imported == games)) || die "imported $imported games of $games"

# ------------------------------------------------ exports
# Times `pgnload export --format FORMAT -o TARGET` of every game; checks that
# the summary says every game was exported (the corpus is standard chess
# without null moves) and records seconds and games/s under NAME.
export_run() { # NAME FORMAT TARGET
    local name=$1 format=$2 target=$3 start end secs n
    start=$(now_ns)
    "$pgnload" --database-url "$url" export --format "$format" -o "$target" >"$out/export_$name.log" 2>&1 ||
        die "export --format $format failed: $(tail -5 "$out/export_$name.log")"
    end=$(now_ns)
    secs=$(seconds "$start" "$end")
    n=$(sed -n 's/^exported \([0-9]*\) games.*/\1/p' "$out/export_$name.log" | tail -1)
    [[ $n == "$games" ]] || die "export --format $format wrote ${n:-?} games of $games: $(tail -3 "$out/export_$name.log")"
    record "export_${name}_seconds" "$secs"
    record "export_${name}_games_per_s" "$(rate "$games" "$secs")"
    log "export --format $format: ${secs}s, $(rate "$games" "$secs") games/s"
}
rm -rf "$out/export" && mkdir -p "$out/export"
export_run dcg dcg "$out/export/corpus"
export_run ocgdb ocgdb "$out/export/corpus.ocgdb.db3"
[[ $(sqlite_games "$out/export/corpus.ocgdb.db3") == "$games" ]] ||
    die "the ocgdb export does not hold $games games"

# ------------------------------------------------ the peer: ocgdb -create
# One run on the same PGN. A crash or a short database is reported as a note
# (ocgdb Beta 8 can crash on the last game of a file: its last block is
# processed without waiting for the thread pool), never timed as a result.
ocgdb_rate=
ocgdb_note=
if [[ -z $ocgdb ]]; then
    ocgdb_note="no ocgdb binary (set OCGDB=/path/to/ocgdb or put ocgdb on PATH): no peer baseline"
else
    log "baseline: $ocgdb -create -o moves2 on the same PGN"
    rm -f "$out/peer.ocgdb.db3"
    start=$(now_ns)
    if "$ocgdb" -create -pgn "$out/corpus.pgn" -db "$out/peer.ocgdb.db3" -o moves2 >"$out/ocgdb.log" 2>&1; then
        end=$(now_ns)
        peer_games=$(sqlite_games "$out/peer.ocgdb.db3" || true)
        if [[ $peer_games == "$games" ]]; then
            secs=$(seconds "$start" "$end")
            ocgdb_rate=$(rate "$games" "$secs")
            record ocgdb_create_seconds "$secs"
            record ocgdb_create_games_per_s "$ocgdb_rate"
        else
            ocgdb_note="ocgdb -create wrote ${peer_games:-no} games of $games (see $out/ocgdb.log): no peer baseline"
        fi
    else
        ocgdb_note="ocgdb -create failed with status $? (see $out/ocgdb.log): no peer baseline"
    fi
fi
[[ -z $ocgdb_note ]] || record ocgdb_note "$ocgdb_note"

# ------------------------------------------------ import --games-only (#14.5)
games_only_rate=
games_only_note=
if "$pgnload" import --help 2>/dev/null | grep -q -- '--games-only'; then
    log "import --games-only into a fresh database"
    sql "$url" "DROP DATABASE IF EXISTS games_only" >/dev/null
    sql "$url" "CREATE DATABASE games_only"
    "$pgnload" --database-url "$(db_url games_only)" db migrate >/dev/null
    start=$(now_ns)
    "$pgnload" --database-url "$(db_url games_only)" import --quiet --games-only "$out/corpus.pgn" \
        >/dev/null 2>>"$out/imports.log" || die "import --games-only failed: $(tail -5 "$out/imports.log")"
    end=$(now_ns)
    n=$(sql "$(db_url games_only)" "SELECT count(*) FROM games")
    ((n == games)) || die "import --games-only stored $n games of $games"
    secs=$(seconds "$start" "$end")
    games_only_rate=$(rate "$games" "$secs")
    record import_games_only_seconds "$secs"
    record import_games_only_games_per_s "$games_only_rate"
    sql "$url" "DROP DATABASE games_only"
else
    games_only_note="this pgnload's import has no --games-only: no games-only line"
    record games_only_note "$games_only_note"
fi

# ------------------------------------------------ report
value() { awk -F'\t' -v k="$1" '$1 == k { v = $2 } END { print v }' "$results"; }
dcg_rate=$(value export_dcg_games_per_s)
ocgdb_export_rate=$(value export_ocgdb_games_per_s)
echo
echo "bench_exchange: $games generated games ($(value corpus_bytes) bytes of PGN), $(nproc) cores, commit $(value commit)"
printf '  %-44s %10s games/s\n' "pgnload export --format dcg" "$dcg_rate"
printf '  %-44s %10s games/s\n' "pgnload export --format ocgdb" "$ocgdb_export_rate"
if [[ -n $ocgdb_rate ]]; then
    printf '  %-44s %10s games/s\n' "ocgdb -create -o moves2 (peer, same PGN)" "$ocgdb_rate"
    printf '  %-44s %10sx\n' "export ocgdb / ocgdb -create" "$(ratio "$ocgdb_export_rate" "$ocgdb_rate")"
    printf '  %-44s %10sx\n' "export dcg / ocgdb -create" "$(ratio "$dcg_rate" "$ocgdb_rate")"
else
    echo "  note: $ocgdb_note"
fi
if [[ -n $games_only_rate ]]; then
    printf '  %-44s %10s games/s\n' "pgnload import --games-only" "$games_only_rate"
    if [[ -n $ocgdb_rate ]]; then
        printf '  %-44s %10sx\n' "import --games-only / ocgdb -create" "$(ratio "$games_only_rate" "$ocgdb_rate")"
    else
        echo "  note: import --games-only has no peer line: $ocgdb_note"
    fi
else
    echo "  note: $games_only_note"
fi
echo "  results: $results"
