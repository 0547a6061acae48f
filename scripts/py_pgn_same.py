#!/usr/bin/env python3
"""Check with python-chess 1.11 that PGN written by pgnload is the source.

    py_pgn_same.py SOURCE.pgn WRITTEN.pgn

Reads both files game by game (games python-chess rejects in SOURCE are
skipped, as pgnload rejects them) and checks, pair by pair: the rules
(board class, Chess960 flag; the ``Variant`` tag itself is written under
its canonical name), the start position, the mainline moves (UCI), each move's NAGs, ``%clk`` and
``%eval``, and the headers. A source header with a value must be in the
written game with the same value (python-chess keeps the last value of a
name written twice); a header whose value is a placeholder (``?``,
``????.??.??``, ``-``, empty) may be absent or a placeholder; the written
game may add only placeholders, ``SetUp``, and ``UTCDate``/``UTCTime``
equal to the source's ``Date`` at midnight. Written values are read with
PGN's ``\\x`` escapes undone, which python-chess does not do. Prints one line per difference
and exits 1 if there is any.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import chess.pgn  # noqa: E402

from py_digests import open_text  # noqa: E402

PLACEHOLDERS = {"", "?", "-", "????.??.??"}


def games(path):
    handle = open_text(path)
    while True:
        game = chess.pgn.read_game(handle)
        if game is None:
            return
        if not game.errors:
            yield game


def moves(game):
    out = []
    for node in game.mainline():
        clock = node.clock()
        ev = node.eval()
        ev = None if ev is None else (ev.white().mate(), ev.white().score())
        out.append((node.move.uci(), sorted(node.nags)[:1], clock, ev))
    return out


def main() -> None:
    source, written = sys.argv[1], sys.argv[2]
    problems = []
    pairs = 0
    a_games, b_games = list(games(source)), list(games(written))
    if len(a_games) != len(b_games):
        problems.append(f"{len(a_games)} games in {source}, {len(b_games)} written")
    for number, (a, b) in enumerate(zip(a_games, b_games), 1):
        pairs += 1
        where = f"game {number}"
        a_rules = (type(a.board()).__name__, a.board().chess960)
        b_rules = (type(b.board()).__name__, b.board().chess960)
        if a_rules != b_rules:
            problems.append(f"{where}: rules {a_rules} != {b_rules}")
        if a.board().fen() != b.board().fen():
            problems.append(f"{where}: start {a.board().fen()} != {b.board().fen()}")
        if moves(a) != moves(b):
            problems.append(f"{where}: mainline differs:\n  {moves(a)}\n  {moves(b)}")
        # python-chess does not undo PGN's tag escapes (pgnload writes them).
        written_headers = {k: re.sub(r"\\(.)", r"\1", v) for k, v in b.headers.items()}
        for name, value in a.headers.items():
            if name == "Variant":
                continue  # compared as the rules above: pgnload writes the canonical name
            value = value.strip()
            got = written_headers.get(name)
            if value in PLACEHOLDERS:
                if got is not None and got.strip() not in PLACEHOLDERS:
                    problems.append(f"{where}: {name} {value!r} written as {got!r}")
            elif got is None or got.strip() != value:
                problems.append(f"{where}: {name} {value!r} written as {got!r}")
        date = a.headers.get("Date", "")
        for name, value in written_headers.items():
            if name in a.headers or value in PLACEHOLDERS or name == "SetUp":
                continue
            if name == "UTCDate" and value == date or name == "UTCTime" and value == "00:00:00":
                continue
            problems.append(f"{where}: {name} {value!r} added")
    for problem in problems:
        print(problem)
    print(f"{pairs} games compared, {len(problems)} differences", file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
