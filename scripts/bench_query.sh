#!/usr/bin/env bash
# Reading the data back, measured: `explore`, `games --player`, `games --fen`
# and `export` on a generated corpus in one fresh embedded cluster, each next
# to a baseline measured in the same run (the naive SQL a user would write,
# or PostgreSQL's own COPY of the same rows), and the cost of keeping the
# explorer counters during imports (an import with them against the same
# import without), and `pgnload serve` answering the explore questions to N
# concurrent loopback clients (examples/http_load.rs, bounded in requests
# and seconds) next to the CLI's answers to the same questions. Ratios, not absolute numbers, are what to compare across
# machines. See scripts/README.md ("bench_query.sh").
#
#   scripts/bench_query.sh [--games N] [--queries N] [--naive N] [--out DIR]
#                          [--cluster DIR] [--reuse] [--clients N]
#                          [--serve-seconds S] [--serve-requests N] [--serve-only]
#                          [--serve-args ARGS] [--pgnload BINARY] [--counters-first]
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: scripts/bench_query.sh [--games N] [--queries N] [--naive N] [--out DIR]
                              [--cluster DIR] [--reuse] [--clients N]
                              [--serve-seconds S] [--serve-requests N]
                              [--serve-only] [--serve-args ARGS]
                              [--pgnload BINARY] [--counters-first]

  --games N     games in the corpus searched (default 1000000)
  --queries N   explorer positions drawn from the games (default 1000; the
                player and position searches use a fifth as many each)
  --naive N     how many of those positions (the start position among them)
                the naive SQL baseline is timed on (default 100): each
                may run to its 30 s statement timeout, which is then
                recorded as 30 s and counted as a timeout
  --out DIR     work and result directory (default target/bench-query);
                holds the corpus, the cluster and DIR/bench_query.json
  --cluster DIR the embedded cluster (default DIR/cluster, recreated)
  --reuse       keep the cluster if it already holds the N imported games
                with their explorer counters (from an earlier run of this
                script, or the same corpus imported by hand): the corpus
                import and `db explorer enable` are then not measured again
  --clients N   concurrent clients of `pgnload serve` (default 16; one client
                is measured too)
  --serve-seconds S, --serve-requests N
                bound of each load run, whichever comes first (default 20 s,
                20000 requests)
  --serve-only  only the explorer: `explore` through the CLI and `serve`
                under load, on the same questions (no counters' import cost,
                naive SQL, games searches nor export: at a million games
                those take hours)
  --serve-args ARGS
                more options of `pgnload serve`, split on spaces (e.g.
                "--cache-size 0"); recorded with the results
  --pgnload BINARY
                measure this pgnload binary instead of building one (the
                corpus generator and the load generator are still built)
  --counters-first
                build the searched corpus's counters by enabling them in
                the empty database, so that its bulk import keeps them,
                instead of `db explorer enable` after the import (which
                counts every game again from its moves rows)
EOF
}

games=1000000
queries=1000
naive=100
out=target/bench-query
cluster=
reuse=0
clients=16
serve_seconds=20
serve_requests=20000
serve_only=0
serve_args=
given_binary=
counters_first=0
while [[ $# -gt 0 ]]; do
    case $1 in
        --games) games=${2:?--games needs a value}; shift 2 ;;
        --queries) queries=${2:?--queries needs a value}; shift 2 ;;
        --naive) naive=${2:?--naive needs a value}; shift 2 ;;
        --cluster) cluster=${2:?--cluster needs a value}; shift 2 ;;
        --reuse) reuse=1; shift ;;
        --serve-only) serve_only=1; shift ;;
        --serve-args) serve_args=${2?--serve-args needs a value}; shift 2 ;;
        --pgnload) given_binary=$(realpath "${2:?--pgnload needs a file}"); shift 2 ;;
        --counters-first) counters_first=1; shift ;;
        --clients) clients=${2:?--clients needs a value}; shift 2 ;;
        --serve-seconds) serve_seconds=${2:?--serve-seconds needs a value}; shift 2 ;;
        --serve-requests) serve_requests=${2:?--serve-requests needs a value}; shift 2 ;;
        --out) out=${2:?--out needs a value}; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "bench_query.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done
for value in "$games" "$queries" "$naive"; do
    if ! [[ $value =~ ^[0-9]+$ ]] || ((value < 10)); then
        echo "bench_query.sh: --games, --queries and --naive must be integers >= 10" >&2
        exit 2
    fi
done
for value in "$clients" "$serve_seconds" "$serve_requests"; do
    if ! [[ $value =~ ^[0-9]+$ ]] || ((value < 1)); then
        echo "bench_query.sh: --clients, --serve-seconds and --serve-requests must be positive integers" >&2
        exit 2
    fi
done

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
mkdir -p "$out"
out=$(cd "$out" && pwd)
cluster=${cluster:-$out/cluster}
target_dir=${CARGO_TARGET_DIR:-$root/target}
pgnload=${given_binary:-$target_dir/release/pgnload}
gen=$target_dir/release/examples/gen_corpus
http_load=$target_dir/release/examples/http_load
psql=${PSQL:-psql}
results=$out/results.tsv
rm -f "$results" "$out/bench_query.json"
# The counters' import cost is measured on a smaller corpus, in rounds of a
# pair (without, then with) per mode: the median of the rounds' ratios, since
# on a noisy machine two rounds could not tell 1.15x from 1.30x.
cost_rounds=3
cost_games=$((games / 10 < 50000 ? games / 10 : 50000))
cost_games=$((cost_games < 10 ? 10 : cost_games))
searches=$((queries / 5 < 10 ? 10 : queries / 5))

bench_name=bench_query
# shellcheck source=scripts/bench_lib.sh
source "$root/scripts/bench_lib.sh"
record() { printf '%s\t%s\n' "$1" "$2" >>"$results"; }

cluster_started=0
serve_pid=
cleanup() {
    if [[ -n $serve_pid ]]; then
        kill -TERM "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null
    fi
    if ((cluster_started)); then
        "$pgnload" --data-dir "$cluster" db stop >/dev/null 2>&1 ||
            echo "bench_query.sh: could not stop the cluster; run: $pgnload --data-dir $cluster db stop" >&2
    fi
}
trap cleanup EXIT

if [[ -n $given_binary ]]; then
    [[ -x $given_binary ]] || die "--pgnload $given_binary is not an executable file"
    log "building the corpus and load generators; measuring $given_binary"
    cargo build --release --quiet --example gen_corpus --example http_load
else
    log "building release binaries"
    cargo build --release --quiet --bin pgnload --example gen_corpus --example http_load
fi
read -r -a serve_options <<<"$serve_args"
: >"$results"
record games "$games"
record queries "$queries"
record cost_rounds "$cost_rounds"
record clients "$clients"
record serve_requests "$serve_requests"
record serve_seconds "$serve_seconds"
record serve_only "$serve_only"
record serve_args "$serve_args"
record counters_first "$counters_first"
record load "$(cut -d' ' -f1-3 /proc/loadavg)"
if [[ -n $given_binary ]]; then
    record commit "binary $given_binary"
else
    record commit "$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)"
fi

if ((!serve_only)); then
log "generating $cost_games games for the counters' cost"
"$gen" --games "$cost_games" --seed 3 --out "$out/cost.pgn" 2>"$out/gen_cost.log" ||
    die "gen_corpus failed: $(tail -5 "$out/gen_cost.log")"
fi

if ((!reuse)); then
    rm -rf "$cluster"
fi
cluster_started=1
"$pgnload" --data-dir "$cluster" db start >/dev/null
url=$("$pgnload" --data-dir "$cluster" db url)
sql() { "$psql" "$1" -XAtq -v ON_ERROR_STOP=1 -c "$2"; }
db_url() { sed "s#/[^/?]*\(?\|\$\)#/$1\1#" <<<"$url"; }
# A URL's database name is its path; the cluster's default database keeps its own.
[[ $(db_url probe) == *"/probe"* ]] || die "cannot derive database URLs from $url"

# ------------------------------------------------ 1. the counters' import cost
# The same corpus into fresh databases with and without the counters, in both
# modes, alternating so that the machine's drift hits both sides alike.
import_seconds() { # URL MODE
    local start end
    start=$(now_ns)
    "$pgnload" --database-url "$1" import --quiet --mode "$2" "$out/cost.pgn" >/dev/null 2>>"$out/imports.log" ||
        die "the import of $out/cost.pgn failed: $(tail -3 "$out/imports.log")"
    end=$(now_ns)
    awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'
}
for mode in incremental bulk; do
    ((serve_only)) && break
    for round in $(seq "$cost_rounds"); do
        for counters in off on; do
            name="cost_${mode}_${counters}_$round"
            PGOPTIONS="-c client_min_messages=warning" sql "$url" "DROP DATABASE IF EXISTS $name"
            sql "$url" "CREATE DATABASE $name"
            "$pgnload" --database-url "$(db_url "$name")" db migrate >/dev/null
            if [[ $counters == on ]]; then
                "$pgnload" --database-url "$(db_url "$name")" db explorer enable >/dev/null
            fi
            seconds=$(import_seconds "$(db_url "$name")" "$mode")
            record "import_${mode}_counters_${counters}_$round" "$seconds"
            log "import of $cost_games games, $mode, counters $counters: ${seconds}s"
            sql "$url" "DROP DATABASE $name"
        done
    done
done

# ------------------------------------------------ 2. the searched corpus
"$pgnload" --database-url "$url" db migrate >/dev/null
held=$(sql "$url" "SELECT count(*) FROM games")
if ((reuse)) && [[ $held == "$games" && $(sql "$url" "SELECT enabled FROM explorer_state") == t ]]; then
    log "reusing the $games games and explorer counters already in $cluster"
else
    ((held == 0)) || die "$cluster holds $held games, not $games with their counters: drop --reuse"
    log "generating $games games"
    "$gen" --games "$games" --seed 1 --out "$out/corpus.pgn" 2>"$out/gen.log" ||
        die "gen_corpus failed: $(tail -5 "$out/gen.log")"
    if ((counters_first)); then
        log "enabling the explorer counters, then importing $games games (bulk) with them"
        "$pgnload" --database-url "$url" db explorer enable >/dev/null
    else
        log "importing $games games (bulk), then building the explorer counters"
    fi
    start=$(now_ns)
    "$pgnload" --database-url "$url" import --quiet --mode bulk "$out/corpus.pgn" >/dev/null 2>>"$out/imports.log" ||
        die "the import of $out/corpus.pgn failed: $(tail -3 "$out/imports.log")"
    end=$(now_ns)
    record import_seconds "$(seconds "$start" "$end")"
    if ((!counters_first)); then
        start=$(now_ns)
        "$pgnload" --database-url "$url" db explorer enable >/dev/null
        end=$(now_ns)
        record explorer_enable_seconds "$(seconds "$start" "$end")"
    fi
fi
sql "$url" "ANALYZE"

log "drawing $queries positions, $searches players and $searches positions to search"
# Positions as the games reach them (a uniformly drawn ply of a uniformly
# drawn game, so frequent positions come up as often as they are played),
# plus the start position.
sql "$url" "SELECT p.normalized_fen
            FROM (SELECT id FROM games ORDER BY random() LIMIT $((queries - 1))) g
            CROSS JOIN LATERAL (SELECT position_id FROM moves m WHERE m.game_id = g.id
                                ORDER BY random() LIMIT 1) m
            JOIN positions p ON p.id = m.position_id" >"$out/positions.txt"
echo "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq -" >>"$out/positions.txt"
sql "$url" "SELECT username FROM players ORDER BY random() LIMIT $searches" >"$out/players.txt"
shuf -n "$searches" --random-source=<(yes) "$out/positions.txt" >"$out/search_positions.txt"
# The naive baseline's positions: the start position, and the first drawn.
{
    tail -n 1 "$out/positions.txt"
    head -n $((naive - 1)) "$out/positions.txt"
} >"$out/naive_positions.txt"

# Runs one command per line of a file (the line is the last argument) and
# writes each one's wall time in milliseconds to OUT.
time_each() { # FILE OUT COMMAND...
    local file=$1 times=$2 line start end
    shift 2
    : >"$times"
    while IFS= read -r line; do
        start=$(now_ns)
        "$@" "$line" >/dev/null 2>"$out/last_error.log" ||
            die "$* '$line' failed: $(tail -3 "$out/last_error.log")"
        end=$(now_ns)
        echo $(((end - start) / 1000)) >>"$times"
    done <"$file"
}
# As time_each, for the naive SQL: a query stopped by its statement timeout
# is recorded with the time it ran (the timeout), and counted in OUT.timeouts.
time_each_naive() { # FILE OUT COMMAND...
    local file=$1 times=$2 line start end
    shift 2
    : >"$times"
    : >"$times.timeouts"
    while IFS= read -r line; do
        start=$(now_ns)
        if ! "$@" "$line" >/dev/null 2>"$out/last_error.log"; then
            grep -q "statement timeout" "$out/last_error.log" ||
                die "$* '$line' failed: $(tail -3 "$out/last_error.log")"
            echo "$line" >>"$times.timeouts"
        fi
        end=$(now_ns)
        echo $(((end - start) / 1000)) >>"$times"
    done <"$file"
}
naive_explore() { # FEN: the GROUP BY over moves joined to games a user would write
    sql "$url" "SET statement_timeout = '30s';
        SELECT m.uci, count(*), count(*) FILTER (WHERE g.result = 1),
               count(*) FILTER (WHERE g.result = 0), count(*) FILTER (WHERE g.result = -1),
               avg((g.white_elo + g.black_elo) / 2)
        FROM positions p JOIN moves m ON m.position_id = p.id JOIN games g ON g.id = m.game_id
        WHERE p.normalized_fen = '$1' AND g.variant = 'standard' $naive_filter
        GROUP BY m.uci ORDER BY count(*) DESC LIMIT 12"
}
naive_filter=""
explore_plain() { "$pgnload" --database-url "$url" explore --json "$1"; }
explore_filtered() {
    "$pgnload" --database-url "$url" explore --json --speeds blitz,rapid --ratings 1600,1800,2000 "$1"
}
naive_filtered() {
    naive_filter="AND g.time_initial_s + 40 * g.time_increment_s BETWEEN 180 AND 1499
                  AND (g.white_elo + g.black_elo) / 2 BETWEEN 1600 AND 2199"
    naive_explore "$1"
    naive_filter=""
}
games_player() { "$pgnload" --database-url "$url" games --limit 100 --format json --player "$1"; }
games_fen() { "$pgnload" --database-url "$url" games --limit 100 --format json --fen "$1"; }
naive_player() {
    sql "$url" "SELECT g.id FROM games g JOIN players w ON w.id = g.white_player_id
                JOIN players b ON b.id = g.black_player_id
                WHERE w.username = '$1' OR b.username = '$1'
                ORDER BY g.started_at DESC NULLS LAST, g.id DESC LIMIT 100"
}
naive_fen() {
    sql "$url" "SET statement_timeout = '30s';
                SELECT DISTINCT g.id, g.started_at FROM positions p
                JOIN moves m ON m.position_id = p.id JOIN games g ON g.id = m.game_id
                WHERE p.normalized_fen = '$1'
                ORDER BY g.started_at DESC NULLS LAST, g.id DESC LIMIT 100"
}
# A process that connects and does nothing: what every measured command
# pays before its query (the naive side pays psql's own start).
noop() { "$pgnload" --database-url "$url" games --limit 0 --player "$1"; }

log "explore: $queries positions, without and with filters, and the naive SQL on $naive"
time_each "$out/positions.txt" "$out/explore.ms" explore_plain
time_each "$out/positions.txt" "$out/explore_filtered.ms" explore_filtered
if ((!serve_only)); then
    time_each_naive "$out/naive_positions.txt" "$out/naive_explore.ms" naive_explore
    time_each_naive "$out/naive_positions.txt" "$out/naive_explore_filtered.ms" naive_filtered
    log "games --player and --fen: $searches each, and the naive SQL"
    time_each "$out/players.txt" "$out/games_player.ms" games_player
    time_each "$out/players.txt" "$out/naive_player.ms" naive_player
    time_each "$out/search_positions.txt" "$out/games_fen.ms" games_fen
    time_each_naive "$out/search_positions.txt" "$out/naive_fen.ms" naive_fen
fi
time_each "$out/players.txt" "$out/startup.ms" noop

# ------------------------------------------------ 3. serve under load
# The explore questions above, asked of `pgnload serve` by concurrent
# keep-alive clients; the CLI's times for the same questions (one process
# each, start and connection included) are explore.ms and explore_filtered.ms.
log "serve: the same $queries positions to 1 and $clients concurrent clients"
python3 - "$out/positions.txt" "$out" <<'PY'
import sys, urllib.parse
fens = [line.strip() for line in open(sys.argv[1]) if line.strip()]
with open(f"{sys.argv[2]}/serve_plain.paths", "w") as plain, \
        open(f"{sys.argv[2]}/serve_filtered.paths", "w") as filtered:
    for fen in fens:
        path = "/lichess?fen=" + urllib.parse.quote(fen)
        print(path, file=plain)
        print(path + "&speeds=blitz,rapid&ratings=1600,1800,2000", file=filtered)
PY
# Starts `pgnload serve` with ARGS on a free port: $serve_pid, $address.
start_serve() { # ARGS...
    "$pgnload" --database-url "$url" serve --listen 127.0.0.1:0 "$@" \
        >"$out/serve.out" 2>>"$out/serve.log" &
    serve_pid=$!
    for _ in $(seq 300); do
        grep -q 'http://' "$out/serve.out" 2>/dev/null && break
        kill -0 "$serve_pid" 2>/dev/null || die "pgnload serve did not start: $(tail -3 "$out/serve.log")"
        sleep 0.1
    done
    address=$(grep -o 'http://[^/]*' "$out/serve.out" | head -n 1 | sed 's#http://##')
    [[ -n $address ]] || die "pgnload serve printed no address: $(tail -3 "$out/serve.log")"
}
stop_serve() {
    kill -TERM "$serve_pid"
    wait "$serve_pid" || die "pgnload serve did not exit 0 on SIGTERM: $(tail -3 "$out/serve.log")"
    serve_pid=
}
# One load run: KIND's questions from CLIENTS clients, at most REQUESTS
# requests or --serve-seconds, into serve_KIND_RUN.json.
load_run() { # KIND RUN CLIENTS REQUESTS
    "$http_load" --address "$address" --paths "$out/serve_$1.paths" --clients "$3" \
        --requests "$4" --seconds "$serve_seconds" >"$out/serve_$1_$2.json" ||
        die "http_load failed"
    log "serve, $1, run $2, $3 clients: $(cat "$out/serve_$1_$2.json")"
}
# First each question once, the first time it is asked (the server keeps
# no answer to it yet: a stream of new questions, on a server just
# started), from all the clients; then the same questions again, from 1
# and from all the clients.
: >"$out/serve.log"
start_serve "${serve_options[@]}"
for kind in plain filtered; do
    load_run "$kind" new "$clients" "$(wc -l <"$out/serve_$kind.paths")"
    for n in 1 "$clients"; do
        load_run "$kind" "$n" "$n" "$serve_requests"
    done
done
stop_serve
# Then a server that keeps no answer (--cache-size 0, in place of any
# given), warmed by one pass of the questions: every answer computed, at a
# steady state (the connections open, their statements planned), from all
# the clients.
computed_options=()
for ((i = 0; i < ${#serve_options[@]}; i++)); do
    case ${serve_options[i]} in
    --cache-size) ((i++)) ;;
    --cache-size=*) ;;
    *) computed_options+=("${serve_options[i]}") ;;
    esac
done
start_serve "${computed_options[@]}" --cache-size 0
for kind in plain filtered; do
    load_run "$kind" warm "$clients" "$(wc -l <"$out/serve_$kind.paths")"
    load_run "$kind" computed "$clients" "$serve_requests"
done
stop_serve

if ((!serve_only)); then
log "export of every game, and PostgreSQL's COPY of its games and moves tables"
start=$(now_ns)
"$pgnload" --database-url "$url" --quiet export -o "$out/export.pgn" >/dev/null
end=$(now_ns)
record export_seconds "$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')"
record export_bytes "$(stat -c %s "$out/export.pgn")"
rm -f "$out/export.pgn"
start=$(now_ns)
sql "$url" "COPY games TO STDOUT" >/dev/null
sql "$url" "COPY moves TO STDOUT" >/dev/null
end=$(now_ns)
record copy_seconds "$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')"
fi

# ------------------------------------------------ report
python3 - "$out" "$results" <<'PY'
import json, statistics, sys
out, results = sys.argv[1], sys.argv[2]
meta = dict(line.rstrip("\n").split("\t", 1) for line in open(results))
def ms(name):
    values = sorted(int(v) / 1000 for v in open(f"{out}/{name}.ms"))
    pick = lambda q: values[min(len(values) - 1, int(q * len(values)))]
    stats = {"n": len(values), "p50": pick(0.50), "p95": pick(0.95), "max": values[-1]}
    try:
        stats["timeouts"] = sum(1 for _ in open(f"{out}/{name}.ms.timeouts"))
    except FileNotFoundError:
        pass
    return stats
report = {"meta": {k: meta[k] for k in ("games", "queries", "clients", "load", "commit",
                                        "serve_args")}}
serve_only = meta.get("serve_only") == "1"
rows = [
    ("explore", "explore", "naive_explore"),
    ("explore with filters", "explore_filtered", "naive_explore_filtered"),
    ("games --player (first 100)", "games_player", "naive_player"),
    ("games --fen (first 100)", "games_fen", "naive_fen"),
][:2 if serve_only else 4]
startup = ms("startup")
print(f"\nqueries on {int(meta['games']):,} games (ms, whole process; pgnload start + connect p50 {startup['p50']:.1f})")
print(f"{'query':32} {'n':>5} {'p50':>8} {'p95':>8} {'max':>8} {'naive n':>8} {'naive p50':>10} {'naive p95':>10} {'timeouts':>9} {'p95 ratio':>10}")
for label, ours, naive in rows:
    a = ms(ours)
    b = {"n": 0, "p50": float("nan"), "p95": float("nan")} if serve_only else ms(naive)
    ratio = a["p95"] / b["p95"] if b["p95"] else float("nan")
    report[ours] = {**a, "naive": b, "p95_ratio_to_naive": ratio}
    print(f"{label:32} {a['n']:>5} {a['p50']:>8.1f} {a['p95']:>8.1f} {a['max']:>8.1f} {b['n']:>8} {b['p50']:>10.1f} {b['p95']:>10.1f} {b.get('timeouts', 0):>9} {ratio:>10.3f}")
print("(naive: not measured, --serve-only)" if serve_only else
      "(naive: the SQL a user would write, on the first positions drawn; a timeout counts as its 30 s)")
report["startup"] = startup
clients = int(meta["clients"])
serve_args = f", serve {meta['serve_args']}" if meta["serve_args"] else ""
print(f"\nserve: the explore questions over HTTP (ms per request, keep-alive; machine load {meta['load']}{serve_args})")
print(f"{'questions':28} {'clients':>7} {'requests':>8} {'not 200':>7} {'p50':>8} {'p95':>8} {'p99':>8} {'req/s':>8}   CLI (one process each): p50, p95, req/s")
report["serve"] = {}
for kind, cli in (("plain", "explore"), ("filtered", "explore_filtered")):
    values = [int(v) / 1000 for v in open(f"{out}/{cli}.ms")]
    c = ms(cli)
    cli_rate = len(values) / (sum(values) / 1000)
    for run, n, label in (("new", clients, kind + ", new"), (1, 1, kind), (clients, clients, kind),
                          ("computed", clients, kind + ", computed")):
        s = json.load(open(f"{out}/serve_{kind}_{run}.json"))
        report["serve"][f"{kind}_{run}"] = s
        print(f"{'explore ' + label:28} {n:>7} {s['requests']:>8} {s['not_ok']:>7} {s['p50']:>8.2f} {s['p95']:>8.2f} {s['p99']:>8.2f} {s['per_s']:>8.1f}   {c['p50']:.1f}, {c['p95']:.1f}, {cli_rate:.1f}")
    report["serve"][f"{kind}_cli_per_s"] = cli_rate
print(f"(new: each question once, the first time it is asked, on a server just started; then the same questions again, which the server may keep: see --serve-args;")
print(f" computed: a server that keeps no answer, warmed by one pass: every answer computed, its connections open)")
print(f"(target: p95 <= 20 ms at 16 clients on a 2-core machine; one load run stops at {meta.get('serve_requests', '?')} requests or {meta.get('serve_seconds', '?')} s)")
if "import_seconds" not in meta:
    print("\nthe searched corpus's import and counters: not measured (--reuse)")
elif "explorer_enable_seconds" in meta:
    enable_s, import_s = float(meta["explorer_enable_seconds"]), float(meta["import_seconds"])
    report["explorer_enable"] = {"seconds": enable_s, "import_seconds": import_s,
                                 "ratio_to_import": enable_s / import_s}
    print(f"\nthe searched corpus: bulk import {import_s:.0f} s, then db explorer enable "
          f"{enable_s:.0f} s ({enable_s / import_s:.2f}x the import's time)")
else:
    report["import_with_counters_seconds"] = float(meta["import_seconds"])
    print(f"\nthe searched corpus: bulk import with the counters kept (--counters-first) "
          f"{float(meta['import_seconds']):.0f} s")
if serve_only:
    json.dump(report, open(f"{out}/bench_query.json", "w"), indent=2)
    sys.exit(0)
games = int(meta["games"])
export_s, copy_s = float(meta["export_seconds"]), float(meta["copy_seconds"])
report["export"] = {"seconds": export_s, "games_per_s": games / export_s,
                    "copy_seconds": copy_s, "ratio_to_copy": export_s / copy_s}
print(f"\nexport: {games / export_s:,.0f} games/s, {export_s / copy_s:.2f}x the time of COPY of the games and moves tables")
def cost(mode):
    rounds = range(1, int(meta["cost_rounds"]) + 1)
    off = [float(meta[f"import_{mode}_counters_off_{r}"]) for r in rounds]
    on = [float(meta[f"import_{mode}_counters_on_{r}"]) for r in rounds]
    ratios = [b / a for a, b in zip(off, on)]
    return {"off_s": off, "on_s": on, "ratios": ratios, "ratio": statistics.median(ratios)}
report["counters_cost"] = {mode: cost(mode) for mode in ("incremental", "bulk")}
for mode, c in report["counters_cost"].items():
    each = ", ".join(f"{r:.2f}x" for r in c["ratios"])
    print(f"import with explorer counters, {mode}: {c['ratio']:.2f}x the same import without "
          f"(median of the rounds: {each})")
json.dump(report, open(f"{out}/bench_query.json", "w"), indent=2)
PY
log "results in $out/bench_query.json"
