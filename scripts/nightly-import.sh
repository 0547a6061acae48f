#!/usr/bin/env bash
# Nightly import of every new PGN dump in a directory (cron or systemd timer).
#
#   scripts/nightly-import.sh DIR [-- IMPORT_OPTION...]
#
# Imports every *.pgn, *.pgn.zst, *.pgn.bz2, *.pgn.gz in DIR, oldest first.
# DIR may be a symbolic link to the directory, and a dump may be a symbolic
# link to a file elsewhere: it is imported as the file it leads to (pgnload
# records that file's path), and tracked by that file's size and times.
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
# DIR/.pgnload-done holds one record per file, each ended by a NUL byte (the
# one byte no file name holds), after a first record `pgnload-done 2`: a
# name may hold any other byte (a newline, a tab, a backslash). A list in
# the earlier format (a record a line) is read as it is, and rewritten in
# this one the first time a run records a file.
#
# A file still being written is left for a later run, and said so:
#   - a file beside which a download's partial file lies (FILE.part,
#     FILE.crdownload, FILE.download, FILE.tmp, FILE.aria2; a partial file
#     itself never matches the names above), and
#   - a file whose size, modification or change time moves during the
#     settle interval: PGNLOAD_SETTLE_SECONDS (whole seconds from 0 to
#     86400, default 60; 0 skips the check) between two looks at every
#     candidate. The wait is said, with its length, before it begins.
# Skipped files do not change the exit code (they are no error: the next
# run takes them); each is named on stderr, every run until it is imported.
# A file that vanishes before it is passed is said, and not imported.
#
# A file this script cannot pass to pgnload is named on stderr and makes the
# run end with exit 2 (at least), after the other files are imported: a
# symbolic link to nothing or in a loop, a directory or another thing that is
# not a regular file under a dump's name, and a name that is not UTF-8
# (pgnload keeps names as text and would refuse its whole command line;
# rename the file). So does a DIR that cannot be listed (nothing imported)
# and a list of imported files that cannot be written.
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
# command line or environment, no binary, a DIR that cannot be listed, or a
# file that cannot be passed (above) — cron mails on non-zero.
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
# find would take a directory named `-x` for an option.
case "$dir" in
    -*) dir="./$dir" ;;
esac
if ! [ -d "$dir" ]; then
    if [ -e "$dir" ]; then
        echo "nightly-import: $dir is not a directory" >&2
    else
        echo "nightly-import: the directory $dir does not exist" >&2
    fi
    exit 2
fi
rejects="${PGNLOAD_REJECTS:-$dir/rejects.pgn}"

# The settle interval, checked before anything is done. Bounded: a wait of
# more than a day would still be going when the next night's run starts;
# and a number too large for the shell's arithmetic is refused here, by its
# length, rather than compared (the comparison would fail, and the wait be
# skipped without a word).
settle_given="${PGNLOAD_SETTLE_SECONDS:-60}"
settle_max=86400
bad_settle() {
    echo "nightly-import: PGNLOAD_SETTLE_SECONDS must be a whole number of seconds from 0 to" \
        "$settle_max, not '$settle_given'" >&2
    exit 2
}
case "$settle_given" in
    '' | *[!0-9]*) bad_settle ;;
esac
# Without its leading zeros (and so never read as octal).
settle="${settle_given#"${settle_given%%[!0]*}"}"
settle="${settle:-0}"
if [ "${#settle}" -gt "${#settle_max}" ] || [ "$settle" -gt "$settle_max" ]; then
    bad_settle
fi

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

# Whether a name is UTF-8, as pgnload requires of an input's name (it
# refuses the whole command line otherwise). grep in the C.UTF-8 locale
# refuses what Rust refuses (surrogates, overlong forms, code points above
# U+10FFFF); iconv keeps the check should that locale be missing.
utf8() {
    printf '%s\0' "$1" | LC_ALL=C.UTF-8 grep -zxa '.*' >/dev/null \
        && printf '%s' "$1" | iconv -f UTF-8 -t UTF-8 >/dev/null 2>&1
}

# A name as messages show it: as it is, or, when it holds a control
# character (a newline would forge a line of the log) or is not UTF-8,
# quoted as bash reads it back ($'...').
shown() {
    if [[ "$1" != *[[:cntrl:]]* ]] && utf8 "$1"; then
        printf '%s' "$1"
    else
        printf '%q' "$1"
    fi
}

# Every entry under a dump's name, with its type after following a symbolic
# link (-H follows DIR itself when it is one): f a file, N a link to
# nothing, L a link in a loop, d a directory, and so on. A listing that
# fails (DIR unreadable, removed meanwhile) ends the run: importing "nothing
# new" from a directory that was never read would be a silent exit 0.
names=()
types=()
while IFS= read -r -d '' entry; do
    types+=("${entry%% *}")
    names+=("${entry#* }")
done < <(find -H "$dir" -mindepth 1 -maxdepth 1 \
    \( -name '*.pgn' -o -name '*.pgn.zst' -o -name '*.pgn.bz2' -o -name '*.pgn.gz' \) \
    ! -name "$(basename -- "$rejects")" -printf '%Y %p\0')
if ! wait "$!"; then
    echo "nightly-import: cannot list the directory $(shown "$dir") (above); nothing imported" >&2
    exit 2
fi

# What identifies a file as unchanged since a run finished it: size,
# modification and change times, inode and name (as listed) of the file a
# symbolic link leads to (the fields of the list's earlier format, so its
# records still match), after the modification time as a number to order
# the files by. Fails when the file is gone.
look() { stat -L -c '%.9Y %s|%y|%z|%i|%n' -- "$1" 2>/dev/null; }

# The files already recorded, from the list in either format.
done_list="$dir/.pgnload-done"
done_header='pgnload-done 2'
done_format=0
declare -A recorded=()
if [ -e "$done_list" ]; then
    if ! [ -r "$done_list" ]; then
        echo "nightly-import: cannot read $(shown "$done_list")" >&2
        exit 2
    fi
    if IFS= read -r -d '' record <"$done_list" && [ "$record" = "$done_header" ]; then
        done_format=2
        # The header, then the records; a last record without its NUL was
        # cut by a crash while it was written, and is left out.
        while IFS= read -r -d '' record; do
            if [ -n "$record" ] && [ "$record" != "$done_header" ]; then
                recorded[$record]=1
            fi
        done <"$done_list"
    else
        done_format=1
        while IFS= read -r record || [ -n "$record" ]; do
            if [ -n "$record" ]; then
                recorded[$record]=1
            fi
        done <"$done_list"
    fi
fi

# Records the files given (in the current format), rewriting a list in the
# earlier format whole, through a new file renamed over it.
record_done() {
    local last tmp
    if [ "$done_format" = 2 ]; then
        # A record cut by a crash is ended first, so it cannot swallow the
        # first one written now.
        last="$(tail -c 1 -- "$done_list" | od -An -tx1 | tr -d ' \n')" || return 1
        if [ "$last" != 00 ]; then
            printf '\0' >>"$done_list" || return 1
        fi
        printf '%s\0' "$@" >>"$done_list" || return 1
    else
        tmp="$(mktemp -- "$done_list.XXXXXX")" || return 1
        if ! {
            printf '%s\0' "$done_header" &&
                if [ "${#recorded[@]}" -gt 0 ]; then printf '%s\0' "${!recorded[@]}"; fi &&
                printf '%s\0' "$@"
        } >"$tmp" || ! mv -f -- "$tmp" "$done_list"; then
            rm -f -- "$tmp"
            return 1
        fi
    fi
}

refused=0
refuse() {
    echo "nightly-import: not imported $(shown "$1"): $2" >&2
    refused=$((refused + 1))
}
skip() { echo "nightly-import: skipped $(shown "$1"): $2; a later run imports it" >&2; }
vanished() { echo "nightly-import: $(shown "$1") vanished $2; not imported" >&2; }

files=0
candidates=()
looks=()
for i in "${!names[@]}"; do
    file="${names[$i]}"
    case "${types[$i]}" in
        f) ;;
        N)
            refuse "$file" "it is a symbolic link to nothing"
            continue
            ;;
        L)
            refuse "$file" "it is a symbolic link in a loop"
            continue
            ;;
        d)
            refuse "$file" "it is a directory"
            continue
            ;;
        *)
            refuse "$file" "it is not a regular file (find's type ${types[$i]})"
            continue
            ;;
    esac
    files=$((files + 1))
    if ! seen="$(look "$file")"; then
        vanished "$file" "while the script listed the directory"
        continue
    fi
    if [ -n "${recorded[${seen#* }]+x}" ]; then
        continue
    fi
    if ! utf8 "$file"; then
        refuse "$file" "its name is not UTF-8, which pgnload refuses; rename it"
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
        skip "$file" "still downloading ($(shown "$partial") is beside it)"
        continue
    fi
    candidates+=("$file")
    looks+=("$seen")
done

# Oldest first (C locale: the times' decimal point is a dot).
order=()
if [ "${#candidates[@]}" -gt 0 ]; then
    while read -r _ i; do
        order+=("$i")
    done < <(for i in "${!candidates[@]}"; do printf '%s %s\n' "${looks[$i]%% *}" "$i"; done |
        LC_ALL=C sort -s -n)
fi

# Settle: a file whose stat moves between two looks is still being written.
new_files=()
stats=()
if [ "${#order[@]}" -gt 0 ]; then
    if [ "$settle" -gt 0 ]; then
        echo "nightly-import: waiting $settle s (PGNLOAD_SETTLE_SECONDS) to see that the" \
            "${#order[@]} new or changed file(s) are no longer being written"
        sleep "$settle"
    fi
    for i in "${order[@]}"; do
        file="${candidates[$i]}"
        if ! now="$(look "$file")"; then
            vanished "$file" "during the settle wait"
            continue
        fi
        if [ "${now#* }" != "${looks[$i]#* }" ]; then
            skip "$file" "still being written (it changed within $settle s)"
            continue
        fi
        new_files+=("$file")
        stats+=("${now#* }")
    done
fi

# What this script could not pass makes the exit code at least 2.
finish() {
    local status="$1"
    if [ "$refused" -gt 0 ]; then
        echo "nightly-import: $refused file(s) not imported (said above)" >&2
        if [ "$status" -lt 2 ]; then
            status=2
        fi
    fi
    exit "$status"
}

if [ "${#new_files[@]}" -eq 0 ]; then
    echo "nightly-import: $(date -u +%FT%TZ): nothing new among $files PGN file(s) in $(shown "$dir")"
    finish 0
fi

echo "nightly-import: $(date -u +%FT%TZ): ${#new_files[@]} new or changed of $files file(s) in $(shown "$dir") ($bin)"
status=0
"$bin" import --rejects "$rejects" "${import_options[@]}" "${new_files[@]}" || status=$?
# Exit 0 or 1: every input was imported to its end (or found imported).
# What is recorded is each file as it was before the import read it: one
# written to meanwhile no longer matches, and the next run passes it again.
if [ "$status" -le 1 ] && ! record_done "${stats[@]}"; then
    echo "nightly-import: could not record the imported files in $(shown "$done_list");" \
        "the next run passes them again" >&2
    status=2
fi
"$bin" status || true
finish "$status"
