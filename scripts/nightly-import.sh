#!/usr/bin/env bash
# Nightly import of every new PGN dump in a directory (cron or systemd timer).
#
#   scripts/nightly-import.sh /data/lichess-dumps
#
# Imports every *.pgn, *.pgn.zst, *.pgn.bz2, *.pgn.gz in the directory, oldest
# first. pgnload recognizes a file already imported by a fingerprint of all
# its bytes (one read of the file, about a `cat`); so that a directory of
# years of 30 GB dumps is not read again every night, this script remembers
# the files a run finished (in DIR/.pgnload-done: size, modification and
# change times, inode and path) and passes only new or changed ones. A file
# written to since has a new change time, so it is passed and pgnload's
# fingerprint decides. An interrupted import resumes from its checkpoint, and
# a second run started while one is going waits for the file it wants
# (pgnload locks each input), so it is safe to run as often as you like.
#
# Environment: DATABASE_URL (else the embedded cluster in PGNLOAD_DATA_DIR,
# default ./pgnload-data), PGNLOAD_BIN (default: pgnload on PATH),
# PGNLOAD_REJECTS (default: <dir>/rejects.pgn).
#
# Exit code: pgnload's (0 clean, 1 some games rejected, 2 failed,
# 3 interrupted, 4 too many rejects) — cron mails on non-zero.
#
# crontab (03:00 every night, one run at a time via flock):
#   0 3 * * *  flock -n /tmp/pgnload-nightly.lock /opt/pgnload/scripts/nightly-import.sh /data/lichess-dumps >> /var/log/pgnload.log 2>&1
#
# systemd: a oneshot service running this script, and a timer with
#   OnCalendar=*-*-* 03:00:00  Persistent=true
set -euo pipefail

dir="${1:?usage: nightly-import.sh DIRECTORY}"
bin="${PGNLOAD_BIN:-pgnload}"
rejects="${PGNLOAD_REJECTS:-$dir/rejects.pgn}"

shopt -s nullglob
files=()
while IFS= read -r -d '' file; do
    files+=("$file")
done < <(find "$dir" -maxdepth 1 -type f \
    \( -name '*.pgn' -o -name '*.pgn.zst' -o -name '*.pgn.bz2' -o -name '*.pgn.gz' \) \
    ! -name "$(basename "$rejects")" -printf '%T@ %p\0' | sort -z -n | cut -z -d' ' -f2-)

# What identifies a file as unchanged since a run finished it.
done_list="$dir/.pgnload-done"
stat_line() { stat -c '%s|%y|%z|%i|%n' -- "$1"; }

new_files=()
for file in "${files[@]}"; do
    if [ -f "$done_list" ] && grep -qxF -- "$(stat_line "$file")" "$done_list"; then
        continue
    fi
    new_files+=("$file")
done

if [ "${#new_files[@]}" -eq 0 ]; then
    echo "nightly-import: $(date -u +%FT%TZ): nothing new among ${#files[@]} PGN file(s) in $dir"
    exit 0
fi

echo "nightly-import: $(date -u +%FT%TZ): ${#new_files[@]} new or changed of ${#files[@]} file(s) in $dir"
status=0
"$bin" import --rejects "$rejects" "${new_files[@]}" || status=$?
# Exit 0 or 1: every input was imported to its end (or found imported).
if [ "$status" -le 1 ]; then
    for file in "${new_files[@]}"; do
        stat_line "$file"
    done >> "$done_list"
fi
"$bin" status || true
exit "$status"
