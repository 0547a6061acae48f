#!/usr/bin/env python3
"""Check with python-chess 1.11 that PGN written by pgnload is the source.

    py_pgn_same.py SOURCE.pgn WRITTEN.pgn

Reads both files game by game (games python-chess rejects in SOURCE are
skipped, as pgnload rejects them) and checks, pair by pair: the rules
(board class, Chess960 flag), the start position, the mainline moves
(UCI), each move's NAGs, ``%clk`` and ``%eval``, and the headers:
``dict(headers)`` of both must be equal,
each value exactly (python-chess keeps the last value of a name written
twice, and gives the Seven Tag Roster's placeholders to a game without
them), except a source ``Result`` of ``*`` (also the placeholder of a
missing tag, for which pgnload writes the movetext's result). Written values
are read with PGN's ``\\x`` escapes undone, which python-chess does not do.
Also checks that each written game gives the whole roster first, in
order. Prints one line per difference and exits 1 if there is any.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import chess.pgn  # noqa: E402

from py_digests import open_text  # noqa: E402

ROSTER = ["Event", "Site", "Date", "Round", "White", "Black", "Result"]
TAG = re.compile(r'^\[([^\s"]+)\s+"')


def written_tag_blocks(path):
    """Each written game's tags as (name, value) lines, in file order."""
    blocks, current = [], []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            match = TAG.match(line)
            if match:
                current.append((match.group(1), line))
            elif current:
                blocks.append(current)
                current = []
    if current:
        blocks.append(current)
    return blocks


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
        source_headers = dict(a.headers)
        if source_headers["Result"] == "*":
            # Also python-chess's placeholder for a missing tag, for which
            # pgnload writes the movetext's result.
            source_headers["Result"] = written_headers.get("Result")
        for name in sorted(set(source_headers) | set(written_headers)):
            got, value = written_headers.get(name), source_headers.get(name)
            if got != value:
                problems.append(f"{where}: {name} {value!r} written as {got!r}")
    for number, text in enumerate(written_tag_blocks(written), 1):
        names = [name for name, _ in text]
        roster = [n for n in names if n in ROSTER]
        if names[: len(roster)] != roster or roster != sorted(roster, key=ROSTER.index):
            problems.append(f"written game {number}: the roster is not first, in order: {names}")
        if set(ROSTER) - set(names):
            problems.append(f"written game {number}: roster tags missing: {names}")
    for problem in problems:
        print(problem)
    print(f"{pairs} games compared, {len(problems)} differences", file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
