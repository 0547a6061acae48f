#!/usr/bin/env python3
"""Independent recount of `pgnload games` searches with python-chess 1.11.

    py_query.py [--player NAME] [--opponent NAME] [--color white|black]
                [--fen FEN [--variant VARIANT]] FILE...

Reads every game python-chess accepts (as ``py_digests.py`` does) and
prints one line per game that matches, sorted::

    white <TAB> black <TAB> result <TAB> plies

Names match case-insensitively for every source, after trimming, as
``--player`` finds them. ``--fen``
selects the games of ``--variant`` (standard by default) whose mainline
reaches the position, the initial and final positions included, comparing
the first four fields of python-chess's FEN (``board_key_fen``). Names in
the output are lowercased for Lichess games, whose stored spelling is the
first one pgnload saw.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import chess  # noqa: E402
import chess.pgn  # noqa: E402
import chess.variant  # noqa: E402

from py_digests import LICHESS_SITE_RE, board_key_fen, open_text  # noqa: E402

VARIANTS = {
    "standard": (chess.Board, False),
    "chess960": (chess.Board, True),
    "antichess": (chess.variant.AntichessBoard, False),
    "atomic": (chess.variant.AtomicBoard, False),
    "crazyhouse": (chess.variant.CrazyhouseBoard, False),
    "horde": (chess.variant.HordeBoard, False),
    "king_of_the_hill": (chess.variant.KingOfTheHillBoard, False),
    "racing_kings": (chess.variant.RacingKingsBoard, False),
    "three_check": (chess.variant.ThreeCheckBoard, False),
}


def variant_of(board):
    for name, (cls, chess960) in VARIANTS.items():
        if type(board) is cls and board.chess960 == chess960:
            return name
    return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--player")
    parser.add_argument("--opponent")
    parser.add_argument("--color", choices=["white", "black"])
    parser.add_argument("--fen")
    parser.add_argument("--variant", default="standard")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    target = None
    if args.fen is not None:
        cls, chess960 = VARIANTS[args.variant]
        target = board_key_fen(cls(args.fen, chess960=chess960))
    lines = []
    for path in args.files:
        handle = open_text(path)
        while True:
            game = chess.pgn.read_game(handle)
            if game is None:
                break
            if game.errors:
                continue
            headers = game.headers
            lichess = LICHESS_SITE_RE.match(headers.get("Site", "").strip()) is not None

            def key(name):
                name = (name or "").strip()
                return name.lower() if lichess else name

            white, black = key(headers.get("White")), key(headers.get("Black"))
            if args.player is not None:

                def named(name, wanted):
                    return wanted is None or name.lower() == wanted.strip().lower()

                as_white = named(white, args.player) and named(black, args.opponent)
                as_black = named(black, args.player) and named(white, args.opponent)
                if not {"white": as_white, "black": as_black, None: as_white or as_black}[args.color]:
                    continue
            board = game.board()
            plies = 0
            if target is not None:
                if variant_of(board) != args.variant:
                    continue
                reached = board_key_fen(board) == target
                for move in game.mainline_moves():
                    board.push(move)
                    reached = reached or board_key_fen(board) == target
                if not reached:
                    continue
            plies = sum(1 for _ in game.mainline_moves())
            lines.append(f"{white}\t{black}\t{headers.get('Result', '*')}\t{plies}")
    for line in sorted(lines):
        print(line)


if __name__ == "__main__":
    main()
