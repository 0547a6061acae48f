#!/usr/bin/env bash
# Nightly import of every new PGN dump in a directory (cron or systemd timer).
#
#   scripts/nightly-import.sh DIR [-- IMPORT_OPTION...]
#
# Imports every *.pgn, *.pgn.zst, *.pgn.bz2, *.pgn.gz in DIR, oldest first.
# Options after `--` are passed to `pgnload import` as they are (e.g.
# `-- --mode incremental`, `-- --restart`, `-- --source mysite`).
#
# pgnload recognizes a file already imported by a fingerprint of all its
# bytes (one read of the file, about a `cat`); so that a directory of years
# of 30 GB dumps is not read again every night, this script remembers the
# files a run finished (in DIR/.pgnload-done: size, modification and change
# times, inode and path, as they were BEFORE the run read them) and passes
# only new or changed ones. A file written to during or after its import so
# differs from what was recorded, and is passed again the next night, where
# pgnload's fingerprint decides (a file that only grew continues from where
# its import stopped). An interrupted import resumes from its checkpoint,
# and a second run started while one is going waits for the file it wants
# (pgnload locks each input), so it is safe to run as often as you like.
#
# A file still being written is left for a later run, and said so:
#   - a file beside which a download's partial file lies (FILE.part,
#     FILE.crdownload, FILE.download, FILE.tmp, FILE.aria2; a partial file
#     itself never matches the names above), and
#   - a file whose size, modification or change time moves during the
#     settle interval: PGNLOAD_SETTLE_SECONDS (default 60; 0 skips the check)
#     between two looks at every candidate.
# Skipped files do not change the exit code (they are no error: the next
# run takes them); each is named on stderr, every run until it is imported.
#
# The pgnload binary: PGNLOAD_BIN, else `pgnload` on PATH, else
# ${CARGO_HOME:-$HOME/.cargo}/bin/pgnload (where `cargo install --path .
# --locked` puts it; cron's PATH does not hold it), else target/release/pgnload
# of the checkout this script is in. None of them: exit 2, said.
#
# Environment: DATABASE_URL (else the embedded cluster in PGNLOAD_DATA_DIR,
# default ./pgnload-data — relative to the directory cron starts in, your
# home: set it to an absolute path), PGNLOAD_REJECTS (default:
# DIR/rejects.pgn), PGNLOAD_SETTLE_SECONDS (above).
#
# Exit code: pgnload's (0 clean, 1 some games rejected, 2 failed,
# 3 interrupted, 4 too many rejects); 0 when nothing is new; 2 for a bad
# command line or no binary — cron mails on non-zero.
#
# Install and crontab (03:00 every night, one run at a time via flock):
#   git clone ... ~/pgnload && cd ~/pgnload && cargo install --path . --locked
#   crontab -e, then:
#   0 3 * * *  PGNLOAD_DATA_DIR=$HOME/pgnload-data flock -n /tmp/pgnload-nightly.lock $HOME/pgnload/scripts/nightly-import.sh $HOME/lichess-dumps >> $HOME/pgnload-nightly.log 2>&1
#
# systemd: a oneshot service running this script, and a timer with
#   OnCalendar=*-*-* 03:00:00  Persistent=true
set -euo pipefail

usage() {
    echo "usage: nightly-import.sh DIRECTORY [-- IMPORT_OPTION...]" >&2
    exit 2
}
[ "$#" -ge 1 ] || usage
dir="$1"
shift
import_options=()
if [ "$#" -gt 0 ]; then
    [ "$1" = "--" ] || usage
    shift
    import_options=("$@")
fi
[ -d "$dir" ] || { echo "nightly-import: $dir is not a directory" >&2; exit 2; }
rejects="${PGNLOAD_REJECTS:-$dir/rejects.pgn}"
settle="${PGNLOAD_SETTLE_SECONDS:-60}"
case "$settle" in
    '' | *[!0-9]*)
        echo "nightly-import: PGNLOAD_SETTLE_SECONDS must be a whole number of seconds, not '$settle'" >&2
        exit 2
        ;;
esac

# The binary, found without relying on cron's PATH.
script_dir="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"
cargo_bin="${CARGO_HOME:-${HOME:-/nonexistent}/.cargo}/bin/pgnload"
if [ -n "${PGNLOAD_BIN:-}" ]; then
    bin="$PGNLOAD_BIN"
elif command -v pgnload >/dev/null 2>&1; then
    bin="$(command -v pgnload)"
elif [ -x "$cargo_bin" ]; then
    bin="$cargo_bin"
elif [ -x "$script_dir/../target/release/pgnload" ]; then
    bin="$script_dir/../target/release/pgnload"
else
    echo "nightly-import: no pgnload binary: set PGNLOAD_BIN, put pgnload on PATH, or install it" \
        "(cargo install --path . --locked) or build it (cargo build --release) in $script_dir/.." >&2
    exit 2
fi
if ! [ -x "$bin" ] && ! command -v "$bin" >/dev/null 2>&1; then
    echo "nightly-import: PGNLOAD_BIN=$bin is not an executable" >&2
    exit 2
fi

files=()
while IFS= read -r -d '' file; do
    files+=("$file")
done < <(find "$dir" -maxdepth 1 -type f \
    \( -name '*.pgn' -o -name '*.pgn.zst' -o -name '*.pgn.bz2' -o -name '*.pgn.gz' \) \
    ! -name "$(basename "$rejects")" -printf '%T@ %p\0' | sort -z -n | cut -z -d' ' -f2-)

# What identifies a file as unchanged since a run finished it.
done_list="$dir/.pgnload-done"
stat_line() { stat -c '%s|%y|%z|%i|%n' -- "$1"; }

skip() { echo "nightly-import: skipped $1: $2; a later run imports it" >&2; }

candidates=()
for file in "${files[@]}"; do
    if [ -f "$done_list" ] && grep -qxF -- "$(stat_line "$file")" "$done_list"; then
        continue
    fi
    partial=""
    for suffix in .part .crdownload .download .tmp .aria2; do
        if [ -e "$file$suffix" ]; then
            partial="$file$suffix"
            break
        fi
    done
    if [ -n "$partial" ]; then
        skip "$file" "still downloading ($partial is beside it)"
        continue
    fi
    candidates+=("$file")
done

# Settle: a file whose stat moves between two looks is still being written.
new_files=()
stats=()
if [ "${#candidates[@]}" -gt 0 ]; then
    before=()
    for file in "${candidates[@]}"; do
        before+=("$(stat_line "$file")")
    done
    if [ "$settle" -gt 0 ]; then
        sleep "$settle"
    fi
    for i in "${!candidates[@]}"; do
        file="${candidates[$i]}"
        now="$(stat_line "$file")"
        if [ "$now" != "${before[$i]}" ]; then
            skip "$file" "still being written (it changed within $settle s)"
            continue
        fi
        new_files+=("$file")
        stats+=("$now")
    done
fi

if [ "${#new_files[@]}" -eq 0 ]; then
    echo "nightly-import: $(date -u +%FT%TZ): nothing new among ${#files[@]} PGN file(s) in $dir"
    exit 0
fi

echo "nightly-import: $(date -u +%FT%TZ): ${#new_files[@]} new or changed of ${#files[@]} file(s) in $dir ($bin)"
status=0
"$bin" import --rejects "$rejects" "${import_options[@]}" "${new_files[@]}" || status=$?
# Exit 0 or 1: every input was imported to its end (or found imported).
# What is recorded is each file as it was before the import read it: one
# written to meanwhile no longer matches, and the next run passes it again.
if [ "$status" -le 1 ]; then
    printf '%s\n' "${stats[@]}" >> "$done_list"
fi
"$bin" status || true
exit "$status"
