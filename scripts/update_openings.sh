#!/usr/bin/env bash
# Replaces the opening table pgnload ships (crates/app/data/chess-openings/)
# with lichess-org/chess-openings at COMMIT (CC0): its five TSV files and
# licence, byte for byte. Update the commit named in NOTICE.md with it.
#
# Usage: scripts/update_openings.sh COMMIT
set -euo pipefail
commit=${1:?usage: update_openings.sh COMMIT}
dir=$(cd "$(dirname "$0")/.." && pwd)/crates/app/data/chess-openings
base=https://raw.githubusercontent.com/lichess-org/chess-openings/$commit
for file in a.tsv b.tsv c.tsv d.tsv e.tsv COPYING.txt; do
    curl --fail --silent --show-error --location "$base/$file" -o "$dir/$file.new"
    mv "$dir/$file.new" "$dir/$file"
done
echo "updated $dir to $commit: now name that commit in NOTICE.md"
