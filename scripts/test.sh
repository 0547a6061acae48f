#!/usr/bin/env bash
# The project's test command (README, .ci/run): formatting, lints, the whole
# test suite against a real PostgreSQL, and the benchmark in a small size so
# it cannot rot (times are printed, never asserted).
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo build --release --locked

# The database tests share one embedded cluster (tests/common), fresh for
# this run; stop and remove it whatever happens. 0755 so the `postgres`
# user can enter it when the tests run as root.
cluster_dir="$(mktemp -d /tmp/pgnload-test-cluster.XXXXXX)"
chmod 0755 "$cluster_dir"
export PGNLOAD_TEST_CLUSTER_DIR="$cluster_dir/data"
pgnload="${CARGO_TARGET_DIR:-target}/release/pgnload"
cleanup() {
    "$pgnload" --data-dir "$PGNLOAD_TEST_CLUSTER_DIR" db stop >/dev/null 2>&1 || true
    rm -rf "$cluster_dir"
}
trap cleanup EXIT

cargo test --workspace --locked -- --test-threads 2
