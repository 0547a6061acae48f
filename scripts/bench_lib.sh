# Helpers the benchmark scripts share (bench.sh, bench_exchange.sh,
# bench_query.sh, bench_shards.sh, bench_growth.sh): sourced after the
# script sets `bench_name`, so that every benchmark logs, fails and computes
# its times and ratios the same way. Not a script of its own.
# shellcheck shell=bash

: "${bench_name:?set bench_name before sourcing bench_lib.sh}"

# A progress line on stderr, stamped with the time of day.
log() { printf '[%s %(%H:%M:%S)T] %s\n' "$bench_name" -1 "$*" >&2; }
# The run cannot go on: says why and exits 1.
die() {
    printf '%s.sh: error: %s\n' "$bench_name" "$*" >&2
    exit 1
}
# Wall clock in nanoseconds.
now_ns() { date +%s%N; }
# Seconds between two now_ns stamps.
seconds() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'; }
# Items per second, n/a for a zero time.
rate() { awk -v n="$1" -v s="$2" 'BEGIN { if (s > 0) printf "%.0f", n / s; else print "n/a" }'; }
# a / b to two decimals, n/a unless both are positive.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "n/a" }'; }
