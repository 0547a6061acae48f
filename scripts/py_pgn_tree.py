#!/usr/bin/env python3
"""Check with python-chess 1.11 that the movetext pgnload writes is the source's.

    py_pgn_tree.py SOURCE.pgn WRITTEN.pgn

Reads both files game by game (games python-chess reads with errors in
SOURCE are skipped, as pgnload rejects them; WRITTEN must read without
errors) and compares each pair's game tree: the game's comment, then node
by node the move (UCI), its NAGs (a set, as python-chess keeps them), its
comment, its starting comment and its variations in order, to any depth.
Headers are py_pgn_same.py's business. Prints one line per difference and
exits 1 if there is any.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import chess.pgn  # noqa: E402

from py_digests import open_text  # noqa: E402


def games(path, strict):
    handle = open_text(path)
    number = 0
    while True:
        game = chess.pgn.read_game(handle)
        if game is None:
            return
        number += 1
        if game.errors and strict:
            raise SystemExit(f"{path}: game {number} read with errors: {game.errors}")
        if not game.errors:
            yield game


def compare(a, b, where, problems):
    """Appends to problems where the subtrees below nodes a and b differ.

    A loop over an explicit stack, depth first in the order written, not a
    recursion: a game nested thousands of variations deep is past Python's
    recursion limit."""
    # Pairs whose continuations are compared next, each with the pair of
    # the continuation whose fields were compared before it (None: the roots).
    stack = [(a, b, where, None)]
    while stack:
        a, b, where, fields = stack.pop()
        if fields is not None:
            x, y = fields
            for what, p, q in [
                ("move", x.move, y.move),
                ("NAGs", sorted(x.nags), sorted(y.nags)),
                ("comment", x.comment, y.comment),
                ("starting comment", x.starting_comment, y.starting_comment),
            ]:
                if p != q:
                    problems.append(f"{where}: {what} {p!r} != {q!r}")
        if len(a.variations) != len(b.variations):
            problems.append(
                f"{where}: {len(a.variations)} continuations != {len(b.variations)}: "
                f"{[v.san() for v in a.variations]} vs {[v.san() for v in b.variations]}"
            )
            continue
        pairs = list(enumerate(zip(a.variations, b.variations)))
        for i, (x, y) in reversed(pairs):
            here = f"{where} {'' if i == 0 else f'(var {i}) '}{x.san()}"
            stack.append((x, y, here, (x, y)))


def main() -> None:
    source, written = sys.argv[1], sys.argv[2]
    problems = []
    a_games = list(games(source, False))
    b_games = list(games(written, True))
    if len(a_games) != len(b_games):
        problems.append(f"{len(a_games)} games in {source}, {len(b_games)} written")
    nodes = 0
    for number, (a, b) in enumerate(zip(a_games, b_games), 1):
        where = f"game {number}"
        if a.comment != b.comment:
            problems.append(f"{where}: game comment {a.comment!r} != {b.comment!r}")
        compare(a, b, where, problems)
        nodes += sum(1 for _ in a.mainline())
    for line in problems:
        print(line)
    print(f"{len(a_games)} games, {nodes} mainline moves compared, {len(problems)} differences")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
