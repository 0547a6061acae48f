#!/usr/bin/env python3
"""The mainline of every Lichess game of a PGN file, read with python-chess
1.11: what pgnload's SQL decoders (sql/0019_schema_comments.sql) must give.

    py_moves.py FILE

One line per game with a lichess.org Site, sorted by Lichess id::

    id <TAB> result <TAB> uci uci ... <TAB> san san ...

The result as PGN writes it (``*`` when unknown); UCI with castling king to
its destination (king to rook in Chess960), as python-chess writes it.
"""

import sys

import chess.pgn

LICHESS_PREFIX = "https://lichess.org/"


def main():
    lines = []
    with open(sys.argv[1], encoding="utf-8-sig") as f:
        while (game := chess.pgn.read_game(f)) is not None:
            site = game.headers.get("Site", "")
            if not site.startswith(LICHESS_PREFIX):
                continue
            board = game.board()
            ucis, sans = [], []
            for move in game.mainline_moves():
                ucis.append(board.uci(move))
                sans.append(board.san(move))
                board.push(move)
            result = game.headers.get("Result", "*")
            lines.append(f"{site[len(LICHESS_PREFIX):]}\t{result}\t{' '.join(ucis)}\t{' '.join(sans)}")
    lines.sort()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
