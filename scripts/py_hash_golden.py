#!/usr/bin/env python3
"""Write tests/data/hash_golden.tsv: golden XXH64 digests of normalized FEN strings.

    py_hash_golden.py [--out tests/data/hash_golden.tsv]

Output: a header line ``# normalized_fen<TAB>signed<TAB>unsigned`` followed by
sorted, de-duplicated rows ``normalized_fen<TAB>signed<TAB>unsigned`` where

* ``unsigned`` = XXH64 (seed 0) of the UTF-8 bytes of ``normalized_fen``
  (Python ``xxhash``), and
* ``signed``   = the same 64 bits read as a two's-complement i64.

The hashing and normalisation functions are imported from ``py_digests.py``
(the contract reference), so this file and that script cannot drift apart.

Rows come from:

1. the first 40 plies (positions 0..40) of every accepted game of the small
   files in ``tests/data/*.pgn`` and of every 40th game of the larger ones,
   normalised exactly like ``py_digests.py`` does (python-chess FEN, first
   four fields, en passant only when legal);
2. hand-made positions: en passant legal / present-but-illegal (including a
   pinned en-passant pawn), Chess960 X-FEN castling letters where the rook is
   not the outermost one, crazyhouse pockets with ``~`` promoted pieces,
   three-check (counters dropped), the variants' start positions, no
   castling rights;
3. seeded random playouts (all variants, biased towards castling, en passant,
   promotions and drops, see ``gen_random_games.py``);
4. raw strings run through the *string* normaliser only (fewer than four
   fields padded with ``-``, extra fields and whitespace dropped, Shredder
   castling letters and a not-legal en-passant square kept verbatim).

The script checks that both negative and non-negative signed values occur
and that there are at least 300 rows.  Output is deterministic.
"""

from __future__ import annotations

import argparse
import glob
import os
import random
import sys
from typing import Iterable, List, Set

sys.dont_write_bytecode = True  # do not leave __pycache__ in scripts/
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import chess  # noqa: E402
import chess.pgn  # noqa: E402
import chess.variant  # noqa: E402

import gen_random_games  # noqa: E402
import py_digests  # noqa: E402
from py_digests import board_key_fen, digest_unsigned, normalize_fen_string, to_signed  # noqa: E402

REPO = os.path.dirname(HERE)
DATA_DIR = os.path.join(REPO, "tests", "data")
PLIES = 40
SMALL_FILE_GAMES = 20  # files with more games than this are sampled (every 40th game)


def pgn_positions() -> Iterable[str]:
    for path in sorted(glob.glob(os.path.join(DATA_DIR, "*.pgn"))):
        games = []
        with py_digests.open_text(path) as handle:
            while True:
                game = chess.pgn.read_game(handle)
                if game is None:
                    break
                games.append(game)
        if len(games) > SMALL_FILE_GAMES:
            games = games[::40]
        for game in games:
            if game.errors:
                continue
            board = game.board()
            yield board_key_fen(board)
            for ply, move in enumerate(game.mainline_moves(), start=1):
                if ply > PLIES:
                    break
                board.push(move)
                yield board_key_fen(board)


def from_moves(moves: str, board: chess.Board = None) -> List[str]:  # type: ignore[assignment]
    """Positions after each SAN move of `moves` (and the start)."""
    board = board.copy() if board is not None else chess.Board()
    out = [board_key_fen(board)]
    for san in moves.split():
        board.push_san(san)
        out.append(board_key_fen(board))
    return out


def canonical(fen: str, cls=chess.Board, chess960: bool = False) -> str:
    return py_digests.canonical_fen(fen, cls, chess960)


def handmade_positions() -> Iterable[str]:
    # --- En passant: legal (shown) vs. only pseudo (hidden).
    yield from from_moves("e4 d5 e5 f5")          # f6 legal
    yield from from_moves("e4 Nf6 e5 d5")         # d6 legal
    yield from from_moves("e4 e6 d4 d5 Nc3 c5")   # c6 not capturable -> '-'
    yield from from_moves("a4 h5 a5 b5 axb6")     # b6 legal, then the capture
    yield from from_moves("h4 a5 h5 g5")          # g6 legal on the edge
    # Pinned en-passant pawn: bxc6 e.p. would expose the king on rank 5.
    yield canonical("8/8/8/KPp4r/8/8/8/7k w - c6 0 1")
    yield canonical("8/8/8/K1pP3r/8/8/8/7k w - c6 0 1")  # same pin, pawn on the other side
    yield canonical("8/8/8/1KPp3q/8/8/8/7k w - d6 0 1")  # cxd6 e.p. exposes the king to the queen -> '-'
    yield canonical("7k/8/8/8/3pP3/8/8/3K4 b - e3 0 1")  # black to capture: legal
    yield canonical("7k/8/8/8/3pP3/8/8/3KR3 b - e3 0 1")  # still legal (no pin on the d-pawn)
    yield canonical("4k3/8/8/8/3pP3/8/8/4R1K1 b - e3 0 1")  # legal: the capturing pawn lands on e3 and keeps the e-file closed
    yield canonical("4k3/8/8/8/3pP3/8/8/4K3 w - e3 0 1")   # e3 given with the wrong side to move -> '-'
    yield canonical("4k3/8/8/8/4P3/8/8/4K3 b - e3 0 1")    # no black pawn that could capture -> '-'
    yield canonical("rnbqkbnr/ppp1pppp/8/8/3pP3/8/PPPP1PPP/RNBQKBNR b KQkq e3 0 2")
    # --- No castling rights at all / partial rights.
    yield canonical("8/8/4k3/8/8/4K3/8/8 w - - 0 1")
    yield canonical("r3k2r/8/8/8/8/8/8/R3K2R b Kq - 0 1")
    yield canonical("r3k2r/8/8/8/8/8/8/R3K2R w KQkq - 0 1")
    yield canonical("r3k2r/8/8/8/8/8/8/4K2R w KQkq - 0 1")  # Q/q dropped where the rook is missing
    # --- Chess960: X-FEN letters when the castling rook is not the outermost one.
    for pos in (0, 1, 100, 254, 453, 518, 600, 959):
        yield board_key_fen(chess.Board.from_chess960_pos(pos))
    yield canonical("rk2r3/8/8/8/8/8/8/RK2R2R w EAea - 0 1")
    yield canonical("nbbrknrr/pppppppp/8/8/8/8/PPPPPPPP/NBBRKNRR w GDgd - 0 1")
    yield canonical("rrkrbbnn/pppppppp/8/8/8/8/PPPPPPPP/RRKRBBNN w BDbd - 0 1")
    yield canonical("1r1k1r1r/8/8/8/8/8/8/RR1K2RR w BGbf - 0 1")
    yield canonical("2r1kr1r/8/8/8/8/8/8/2R1KR1R w CFcf - 0 1")
    yield canonical("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w HAha - 0 1")  # Shredder on standard squares
    yield canonical("qrkrbbnn/pppppppp/8/8/8/8/PPPPPPPP/QRKRBBNN w KQkq - 0 1", chess960=True)
    # Chess960 castling where the king does not move (king g1, rook h1 -> f1).
    yield from from_moves("f4 f5 Rf2 Rf7 O-O O-O", chess.Board.from_chess960_pos(0))
    # --- Crazyhouse: pockets and promoted pieces.
    zh = chess.variant.CrazyhouseBoard
    yield canonical(zh.starting_fen, zh)
    yield canonical("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR[Qn] w KQkq - 0 1", zh)
    yield canonical("r3k2r/8/8/8/8/8/8/R3K2Q~[] w KQkq - 0 1", zh)
    yield canonical("r1b1k2r/ppp2ppp/2n5/3Q~4/8/8/PPP2PPP/R3K1NR[NBPPbnpp] b KQkq - 0 12", zh)
    yield canonical("4k3/8/8/8/8/8/8/N~B~R~Q~K3[PPNNBBRRQQppnnbbrrqq] w - - 0 1", zh)
    yield canonical("2kr1b1r/pppq1ppp/2n1bn2/3pp3/3PP3/2N1BN2/PPPQ1PPP/2KR1B1R/PNbp w - - 4 9", zh)
    zb = zh()
    for san in "e4 d5 exd5 Qxd5 Nc3 Qa5 d4 Nf6 Nf3 Bf5 Bc4 e6 O-O Bb4 Bd2 Bxc3 Bxc3".split():
        zb.push_san(san)
        yield board_key_fen(zb)
    for san in ["Qa4", "B@e4", "N@e5", "P@h6"]:
        zb.push_san(san)
        yield board_key_fen(zb)
    # --- Three-check: the counters are a fifth field and are dropped.
    tc = chess.variant.ThreeCheckBoard
    yield canonical("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 3+3 0 1", tc)
    yield canonical("rnb1kbnr/pppp1ppp/8/4p3/4P2q/8/PPPP1PPP/RNBQKBNR w KQkq - 2+3 0 3", tc)
    tb = tc()
    for san in "e4 e5 Bc4 Nc6 Bxf7+ Kxf7 Qh5+".split():
        tb.push_san(san)
        yield board_key_fen(tb)
    # --- Other variants' start positions.
    for cls in (chess.variant.AntichessBoard, chess.variant.AtomicBoard, chess.variant.HordeBoard,
                chess.variant.KingOfTheHillBoard, chess.variant.RacingKingsBoard):
        yield board_key_fen(cls())
    yield from from_moves("e4 d5 exd5 Qxd5", chess.variant.AtomicBoard())
    yield from from_moves("e3 b5 Bxb5 Bb7 Bxd7", chess.variant.AntichessBoard())


def random_playout_positions(seed: int = 20250501) -> Iterable[str]:
    """Seeded random games (biased to special moves), a few per variant kind."""
    rng = random.Random(seed)
    for kind, _ in gen_random_games.KINDS:
        for _ in range(3):
            game = chess.pgn.Game()
            board = gen_random_games.start_board(rng, kind, game)
            yield board_key_fen(board)
            for _ in range(rng.randint(20, 120)):
                if board.is_game_over():
                    break
                board.push(gen_random_games.choose_move(rng, board))
                if rng.random() < 0.2 or board.promoted or board.ep_square is not None:
                    yield board_key_fen(board)


def raw_strings() -> Iterable[str]:
    raws = [
        "8/8/8/8/8/8/8/8 w",
        "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR",
        "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR b",
        "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq",
        "  rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR \t b   KQkq   e3   0   1  ",
        "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w HAha - 0 1",
        "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR[] w KQkq - 0 1",
        "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 3+3 0 1",
        "8/8/8/KPp4r/8/8/8/7k w - c6 0 1",
        "4k3/8/8/8/8/8/8/4K3 w - - 99 200",
    ]
    for raw in raws:
        yield normalize_fen_string(raw)


def main(argv: List[str] = None) -> int:  # type: ignore[assignment]
    parser = argparse.ArgumentParser(description="Write the golden FEN hash table.")
    parser.add_argument("--out", default=os.path.join(DATA_DIR, "hash_golden.tsv"))
    ns = parser.parse_args(argv)

    fens: Set[str] = set()
    for source in (pgn_positions(), handmade_positions(), random_playout_positions(), raw_strings()):
        fens.update(source)

    rows = []
    for fen in sorted(fens):
        u = digest_unsigned(fen)
        rows.append((fen, to_signed(u), u))

    negatives = sum(1 for _, s, _ in rows if s < 0)
    if len(rows) < 300 or negatives == 0 or negatives == len(rows):
        raise SystemExit(f"golden table too weak: {len(rows)} rows, {negatives} negative")

    with open(ns.out, "w", encoding="utf-8", newline="\n") as out:
        out.write("# normalized_fen\tsigned\tunsigned\n")
        for fen, s, u in rows:
            out.write(f"{fen}\t{s}\t{u}\n")
    print(f"wrote {ns.out}: {len(rows)} rows ({negatives} with negative signed value)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
