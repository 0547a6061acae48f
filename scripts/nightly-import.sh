#!/usr/bin/env bash
# Nightly import of every new PGN dump in a directory (cron or systemd timer).
#
#   scripts/nightly-import.sh /data/lichess-dumps
#
# Imports every *.pgn, *.pgn.zst, *.pgn.bz2, *.pgn.gz in the directory, oldest
# first. Files already imported are recognized by a fingerprint of all their
# bytes and skipped (each costs one read of the file, about a `cat`), an
# interrupted import resumes from its checkpoint, and a
# second run started while one is going waits for the file it wants (pgnload
# locks each input), so it is safe to run as often as you like.
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

if [ "${#files[@]}" -eq 0 ]; then
    echo "nightly-import: no PGN files in $dir"
    exit 0
fi

echo "nightly-import: $(date -u +%FT%TZ): ${#files[@]} file(s) in $dir"
status=0
"$bin" import --rejects "$rejects" "${files[@]}" || status=$?
"$bin" status || true
exit "$status"
