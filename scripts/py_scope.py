#!/usr/bin/env python3
"""Independent recount of `pgnload import` scope filters (tests/scope.rs).

Reads PGN files with python-chess (headers only) and prints, for each scope
option the test uses, how many games that option alone leaves out, as
`option<TAB>count` lines, then `total<TAB>games`. The rules are docs/import.md's
("Scope and backfill"), written again from the text, not from pgnload's code:

- rated: Event's first word "Rated" is rated, "Casual" is not; otherwise
  rated when both WhiteElo and BlackElo are integers;
- min rating: both Elos are integers >= N;
- speed: TimeControl "a+b" (or "a") as integers, a + 40*b seconds against
  Lichess's bounds; anything else is correspondence;
- variant: python-chess's variant of the headers (chess960 from the headers);
- days: UTCDate, else Date, as YYYY.MM.DD: that day; else a Date with an
  unknown month (YYYY.??.DD or YYYY.??.??): its year, or with an unknown
  day only (YYYY.MM.??): its month; none otherwise (an unknown year, year
  0000). A game is in the period when all its days are;
- bots: WhiteTitle or BlackTitle is BOT.

Usage: py_scope.py MIN_RATING SPEEDS VARIANTS SINCE UNTIL FILE...
"""
import datetime
import re
import sys

import chess.pgn

SPEEDS = [("ultraBullet", 30), ("bullet", 180), ("blitz", 480), ("rapid", 1500), ("classical", 21600)]
UCI_LABELS = {
    "chess": "standard",
    "antichess": "antichess",
    "atomic": "atomic",
    "crazyhouse": "crazyhouse",
    "horde": "horde",
    "kingofthehill": "king_of_the_hill",
    "racingkings": "racing_kings",
    "3check": "three_check",
}


def elo(headers, side):
    value = headers.get(side + "Elo", "")
    return int(value) if re.fullmatch(r"[+-]?\d+", value) else None


def rated(headers):
    words = headers.get("Event", "").split()
    if words and words[0].lower() == "rated":
        return True
    if words and words[0].lower() == "casual":
        return False
    return elo(headers, "White") is not None and elo(headers, "Black") is not None


def speed(headers):
    tc = headers.get("TimeControl", "")
    m = re.fullmatch(r"(\d+)(?:\+(\d+))?", tc)
    if not m:
        return "correspondence"
    estimate = int(m.group(1)) + 40 * int(m.group(2) or 0)
    for name, bound in SPEEDS:
        if estimate < bound:
            return name
    return "correspondence"


def variant(headers):
    if headers.is_chess960():
        return "chess960"
    return UCI_LABELS[headers.variant().uci_variant]


def days(headers):
    """The first and last day the game's date stands for, or None."""
    for tag in ("UTCDate", "Date"):
        value = headers.get(tag, "")
        if re.fullmatch(r"\d{4}\.\d{2}\.\d{2}", value):
            try:
                d = datetime.date(*map(int, value.split(".")))
                return d, d
            except ValueError:
                pass
    m = re.fullmatch(r"(\d{4})\.(\d{2}|\?\?)\.(\d{2}|\?\?)", headers.get("Date", "").strip())
    if not m or m[1] == "0000":
        return None
    year = int(m[1])
    if m[2] == "??":
        return datetime.date(year, 1, 1), datetime.date(year, 12, 31)
    if m[3] != "??" or not 1 <= int(m[2]) <= 12:
        return None
    first = datetime.date(year, int(m[2]), 1)
    following = datetime.date(year + int(m[2]) // 12, int(m[2]) % 12 + 1, 1)
    return first, following - datetime.timedelta(days=1)


def main():
    min_rating = int(sys.argv[1])
    speeds = set(sys.argv[2].split(","))
    variants = set(sys.argv[3].split(","))
    since = datetime.date.fromisoformat(sys.argv[4])
    until = datetime.date.fromisoformat(sys.argv[5])
    counts = {"rated-only": 0, "min-rating": 0, "speeds": 0, "variants": 0, "dates": 0, "exclude-bots": 0}
    total = 0
    for path in sys.argv[6:]:
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            while (headers := chess.pgn.read_headers(f)) is not None:
                total += 1
                counts["rated-only"] += not rated(headers)
                w, b = elo(headers, "White"), elo(headers, "Black")
                counts["min-rating"] += not (w is not None and b is not None and w >= min_rating and b >= min_rating)
                counts["speeds"] += speed(headers) not in speeds
                counts["variants"] += variant(headers) not in variants
                d = days(headers)
                counts["dates"] += d is None or d[0] < since or d[1] > until
                counts["exclude-bots"] += "BOT" in (headers.get("WhiteTitle"), headers.get("BlackTitle"))
    for name, count in counts.items():
        print(f"{name}\t{count}")
    print(f"total\t{total}")


if __name__ == "__main__":
    main()
