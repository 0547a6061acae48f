#!/usr/bin/env python3
"""Independent recount of `pgnload explore --json` from PGN files.

Reads the PGN files with python-chess 1.11 (as scripts/py_digests.py does:
a game with errors is skipped, positions are the first four FEN fields of
python-chess's own FEN), counts the games that continued from the asked
position, and prints the Lichess explorer shape without SAN and top games:

    {"white": W, "draws": D, "black": B, "opening": {"eco", "name"} | null,
     "moves": [{"uci", "averageRating", "white", "draws", "black", "games",
                "opening"}]}

Counted the way the Lichess explorer counts: a game once per position, with
the move it played at its last visit there; speed from TimeControl
(initial + 40 * increment: <30 s ultraBullet, <180 bullet, <480 blitz,
<1500 rapid, <21600 classical, else or without a clock correspondence);
rating group of floor((WhiteElo + BlackElo) / 2) in the bands 0, 1000, 1200,
1400, 1600, 1800, 2000, 2200, 2500 (games missing a rating are in no group);
month from UTCDate, else Date. A Lichess game id counts once. Castling is
written king to rook (e1h1); averageRating is the average rating of the
player who played the move (WhiteElo when White was to move, else BlackElo)
over the games where that player has one, rounded half up, and left out
without such a game, as Lichess does. Opening names: the rows of the
shipped chess-openings table (crates/app/data/chess-openings), each line's
SAN played with python-chess and matched by EPD; the position's is the last
named on the way (the FEN, then after each --play move), a move's the one
after it (standard, crazyhouse with empty pockets, three-check before any
check, king of the hill only). --play moves are UCI or SAN.

Usage: py_explorer.py [--variant V] [--fen FEN] [--play UCI,...]
       [--speeds S,...] [--ratings R,...] [--since YYYY-MM] [--until YYYY-MM] FILE...
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys

import chess
import chess.pgn
import chess.variant

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from py_digests import LICHESS_SITE_RE, board_key_fen, open_text  # noqa: E402

SPEEDS = [("ultraBullet", 30), ("bullet", 180), ("blitz", 480), ("rapid", 1500), ("classical", 21600)]
BANDS = [2500, 2200, 2000, 1800, 1600, 1400, 1200, 1000, 0]
INT_RE = re.compile(r"^\+?-?[0-9]+$")


def speed(tc: str) -> str:
    initial, _, increment = tc.partition("+")
    try:
        estimate = int(initial) + 40 * int(increment or "0")
    except ValueError:
        return "correspondence"
    for name, bound in SPEEDS:
        if estimate < bound:
            return name
    return "correspondence"


def elo(value):
    return int(value.lstrip("+")) if value and INT_RE.match(value) else None


def rating_average(headers):
    white, black = elo(headers.get("WhiteElo")), elo(headers.get("BlackElo"))
    if white is None or black is None:
        return None
    return (white + black) // 2


def band(average):
    return next(b for b in BANDS if average >= b or b == 0)


def month(headers):
    for tag in ("UTCDate", "Date"):
        try:
            day = datetime.datetime.strptime(headers.get(tag, ""), "%Y.%m.%d")
        except ValueError:
            continue
        return day.year * 12 + day.month - 1
    return None


def parse_month(text):
    year, mon = text.split("-")
    return int(year) * 12 + int(mon) - 1


def variant_name(board) -> str:
    if board.chess960:
        return "chess960"
    return {
        "chess": "standard", "antichess": "antichess", "atomic": "atomic",
        "crazyhouse": "crazyhouse", "horde": "horde", "kingofthehill": "king_of_the_hill",
        "racingkings": "racing_kings", "3check": "three_check",
    }[board.uci_variant]


def opening_table():
    here = os.path.dirname(os.path.abspath(__file__))
    data = os.path.join(here, "..", "crates", "app", "data", "chess-openings")
    table = {}
    for volume in "abcde":
        with open(os.path.join(data, volume + ".tsv"), encoding="utf-8") as f:
            next(f)
            for line in f:
                eco, name, pgn = line.rstrip("\n").split("\t")
                board = chess.Board()
                for token in pgn.split(" "):
                    if not token.endswith("."):
                        board.push_san(token)
                table[board.epd()] = {"eco": eco, "name": name}
    return table


def opening_of(table, board):
    variant = board.uci_variant
    if board.chess960 or variant not in ("chess", "crazyhouse", "3check", "kingofthehill"):
        return None
    if variant == "crazyhouse" and any(len(p) for p in board.pockets):
        return None
    if variant == "3check" and list(board.remaining_checks) != [3, 3]:
        return None
    return table.get(chess.Board.epd(board))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", default="standard")
    ap.add_argument("--fen")
    ap.add_argument("--play", default="")
    ap.add_argument("--speeds", default="")
    ap.add_argument("--ratings", default="")
    ap.add_argument("--since")
    ap.add_argument("--until")
    ap.add_argument("files", nargs="+")
    ns = ap.parse_args()

    board_cls = chess.Board if ns.variant in ("standard", "chess960") else chess.variant.find_variant(ns.variant)
    start = board_cls(ns.fen, chess960=ns.variant == "chess960") if ns.fen else board_cls()
    table = opening_table()
    opening = opening_of(table, start)
    for text in filter(None, ns.play.split(",")):
        try:
            start.push_uci(text)
        except ValueError:
            start.push_san(text)
        opening = opening_of(table, start) or opening
    target = board_key_fen(start)
    speeds = set(filter(None, ns.speeds.split(",")))
    ratings = {int(r) for r in ns.ratings.split(",") if r}
    since = parse_month(ns.since) if ns.since else None
    until = parse_month(ns.until) if ns.until else None

    seen = set()
    moves = {}
    for path in ns.files:
        handle = open_text(path)
        while True:
            game = chess.pgn.read_game(handle)
            if game is None:
                break
            if game.errors:
                continue
            site = LICHESS_SITE_RE.match(game.headers.get("Site", ""))
            if site:
                if site.group(1) in seen:
                    continue
                seen.add(site.group(1))
            board = game.board()
            if variant_name(board) != ns.variant:
                continue
            headers = game.headers
            if speeds and speed(headers.get("TimeControl", "-")) not in speeds:
                continue
            average = rating_average(headers)
            if ratings and (average is None or band(average) not in ratings):
                continue
            played = month(headers)
            if (since is not None or until is not None) and played is None:
                continue
            if since is not None and played < since:
                continue
            if until is not None and played > until:
                continue
            last = None
            mover = None
            for move in game.mainline_moves():
                if board_key_fen(board) == target:
                    last = board.uci(move, chess960=True)
                    mover = elo(headers.get("WhiteElo" if board.turn == chess.WHITE else "BlackElo"))
                board.push(move)
            if last is None:
                continue
            result = {"1-0": "white", "0-1": "black", "1/2-1/2": "draws"}.get(headers.get("Result"))
            entry = moves.setdefault(last, {"uci": last, "white": 0, "draws": 0, "black": 0,
                                            "games": 0, "rated": 0, "sum": 0})
            entry["games"] += 1
            if result:
                entry[result] += 1
            if mover is not None:
                entry["rated"] += 1
                entry["sum"] += mover
        handle.close()

    out_moves = []
    for entry in sorted(moves.values(), key=lambda e: (-e["games"], e["uci"])):
        after = start.copy()
        after.push(after.parse_uci(entry["uci"]))
        out = {
            "uci": entry["uci"],
            "white": entry["white"], "draws": entry["draws"], "black": entry["black"],
            "games": entry["games"],
            "opening": opening_of(table, after),
        }
        if entry["rated"]:
            out["averageRating"] = (2 * entry["sum"] + entry["rated"]) // (2 * entry["rated"])
        out_moves.append(out)
    total = {k: sum(m[k] for m in out_moves) for k in ("white", "draws", "black")}
    print(json.dumps({**total, "opening": opening, "moves": out_moves}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
