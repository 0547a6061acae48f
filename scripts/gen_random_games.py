#!/usr/bin/env python3
"""Write a seeded PGN file of random *legal* games for the Rust/Python parity test.

    gen_random_games.py --seed 42 --games 3000 --out FILE

Every game is played with python-chess (1.11), so every move is legal under
the game's rules, and the movetext is written by python-chess's own exporter
(``str(game)``).  The output is fully determined by ``--seed`` and
``--games`` (and the python-chess version).

Mix of games (weights, roughly percent):

* 34  standard chess from the initial position (5 % of them carry an
      explicit ``[Variant "Standard"]`` tag),
*  8  standard chess from a ``[FEN]``/``[SetUp "1"]`` midgame position (taken
      from a random game 6..70 plies in; the FEN tag sometimes carries the
      "pseudo" en-passant square that python-chess's default FEN would hide),
* 10  Chess960 (``[Variant "Chess960"]`` + ``[FEN]`` + ``[SetUp "1"]``, start
      position ``chess.Board.from_chess960_pos(0..959)``; the FEN tag's
      castling field is X-FEN (``KQkq``) or Shredder-FEN (``HAha``) at random;
      in 30 % of them a back-rank piece outside a castling rook becomes a
      rook, so the castling rook is not the outermost one (X-FEN letters like
      ``Gkq``); 15 % carry no Variant tag, only ``[FEN]``/``[SetUp]``),
*  7  each Lichess variant with its Lichess tag name: Antichess, Atomic,
      Crazyhouse, Horde, King of the Hill, Racing Kings, Three-check (Horde and
      Racing Kings get an explicit ``[FEN]`` of their start position half of
      the time, as Lichess exports do).

Move choice is biased towards the interesting rules: when "special" moves are
available (castling, en-passant captures, promotions including
underpromotions, double pawn pushes that make an en-passant capture legal)
one of them is played with probability 1/2; crazyhouse drops are picked with
probability 1/3 when available; otherwise the move is uniform among the legal
moves.  Each game lasts a random 0..200 plies or until the game is over
(``board.is_game_over()``, variant endings included); the Result tag is
``board.result()`` for finished games and a random result otherwise.
python-chess exports pawn drops as ``@e4``; in every second crazyhouse game
(even ``GameNo``) they are rewritten to Lichess's ``P@e4`` so that both
spellings occur.

To exercise the PGN parser about a third of the moves get a ``{ [%clk ...] }``
comment (sometimes with ``[%eval ...]``), some get NAGs, and a few get short
side variations (``add_variation``), possibly with a comment inside.  Roughly
half the games have a unique ``[Site "https://lichess.org/XXXXXXXX"]``, the
others ``[Site "?"]``.
"""

from __future__ import annotations

import argparse
import random
import re
import string
import sys
from typing import List, Optional

import chess
import chess.pgn
import chess.variant

ALNUM = string.ascii_letters + string.digits

# (kind, weight). kind is "standard", "standard-fen", "chess960" or a Lichess variant tag name.
KINDS = [
    ("standard", 34),
    ("standard-fen", 8),
    ("chess960", 10),
    ("Antichess", 7),
    ("Atomic", 7),
    ("Crazyhouse", 7),
    ("Horde", 7),
    ("King of the Hill", 7),
    ("Racing Kings", 7),
    ("Three-check", 7),
]

LICHESS_VARIANT_CLASSES = {
    "Antichess": chess.variant.AntichessBoard,
    "Atomic": chess.variant.AtomicBoard,
    "Crazyhouse": chess.variant.CrazyhouseBoard,
    "Horde": chess.variant.HordeBoard,
    "King of the Hill": chess.variant.KingOfTheHillBoard,
    "Racing Kings": chess.variant.RacingKingsBoard,
    "Three-check": chess.variant.ThreeCheckBoard,
}

EVENTS = ["Rated Blitz game", "Rated Bullet game", "Casual Rapid game", "Rated Classical game"]
RESULTS = ["1-0", "0-1", "1/2-1/2", "*"]
NAGS = [1, 2, 3, 4, 5, 6, 10, 13, 14, 15, 16, 17, 18, 19, 22, 32, 36, 40, 132, 146]


def is_special(board: chess.Board, move: chess.Move) -> bool:
    if move.promotion:
        return True
    from_bb = chess.BB_SQUARES[move.from_square]
    if board.kings & from_bb:
        return board.is_castling(move)
    if not board.pawns & from_bb:
        return False
    if board.is_en_passant(move):
        return True
    # A double pawn push that leaves a legal en-passant capture for the opponent.
    if abs(move.to_square - move.from_square) == 16:
        to_file = chess.square_file(move.to_square)
        neighbours = 0
        if to_file > 0:
            neighbours |= chess.BB_SQUARES[move.to_square - 1]
        if to_file < 7:
            neighbours |= chess.BB_SQUARES[move.to_square + 1]
        if board.pawns & board.occupied_co[not board.turn] & neighbours:
            board.push(move)
            try:
                return board.has_legal_en_passant()
            finally:
                board.pop()
    return False


def choose_move(rng: random.Random, board: chess.Board) -> chess.Move:
    moves = list(board.legal_moves)
    drops = [m for m in moves if m.drop]
    if drops and rng.random() < 1 / 3:
        return rng.choice(drops)
    normal = [m for m in moves if not m.drop]
    if not normal:
        return rng.choice(moves)
    special = [m for m in normal if is_special(board, m)]
    if special and rng.random() < 0.5:
        return rng.choice(special)
    return rng.choice(normal)


def clock_comment(rng: random.Random) -> str:
    secs = rng.randrange(0, 3 * 3600)
    text = f"[%clk {secs // 3600}:{secs % 3600 // 60:02d}:{secs % 60:02d}]"
    r = rng.random()
    if r < 0.15:
        text = f"[%eval {rng.uniform(-9, 9):.2f}] " + text
    elif r < 0.2:
        text = f"[%eval #{rng.choice([-1, 1]) * rng.randint(1, 12)}] " + text
    elif r < 0.25:
        text += " good move (really)"
    return text


def random_site(rng: random.Random, used: set) -> str:
    if rng.random() < 0.5:
        return "?"
    while True:
        gid = "".join(rng.choice(ALNUM) for _ in range(8))
        if gid not in used:
            used.add(gid)
            suffix = rng.choice(["", "", "", "", "/black", "#12"])
            return f"https://lichess.org/{gid}{suffix}"


def random_midgame_board(rng: random.Random) -> chess.Board:
    """A standard position some plies into a random game (not game over if possible)."""
    for _ in range(20):
        board = chess.Board()
        for _ in range(rng.randint(6, 70)):
            if board.is_game_over():
                break
            board.push(choose_move(rng, board))
        if not board.is_game_over():
            break
    return chess.Board(board.fen(en_passant="fen"))  # forget the move stack, keep any ep square


def add_outer_rooks(rng: random.Random, board: chess.Board) -> None:
    """Turn a back-rank piece outside a castling rook into a rook (per side, at random).

    The castling rook is then no longer the outermost rook on its side, so the
    X-FEN castling field needs a file letter (e.g. ``Gkq`` instead of ``KQkq``).
    """
    for color in chess.COLORS:
        if rng.random() < 0.3:
            continue
        back_rank = 0 if color == chess.WHITE else 7
        king_file = chess.square_file(board.king(color))  # type: ignore[arg-type]
        rook_files = [chess.square_file(sq) for sq in chess.SquareSet(board.castling_rights & chess.BB_RANKS[back_rank])]
        outer = []
        for rf in rook_files:
            files = range(rf + 1, 8) if rf > king_file else range(0, rf)
            outer += [f for f in files if board.piece_type_at(chess.square(f, back_rank)) not in (None, chess.ROOK, chess.KING)]
        if outer:
            board.set_piece_at(chess.square(rng.choice(outer), back_rank), chess.Piece(chess.ROOK, color))
            # A third rook must have come from a promotion: take a pawn away so
            # the position stays possible (shakmaty rejects "too much material").
            pawn_rank = 1 if color == chess.WHITE else 6
            board.remove_piece_at(chess.square(rng.randrange(8), pawn_rank))


def start_board(rng: random.Random, kind: str, game: chess.pgn.Game) -> chess.Board:
    """Create the start board for `kind` and set the matching headers on `game`."""
    h = game.headers
    if kind == "standard":
        if rng.random() < 0.05:
            h["Variant"] = "Standard"
        return chess.Board()
    if kind == "standard-fen":
        board = random_midgame_board(rng)
        h["FEN"] = board.fen(en_passant=rng.choice(["legal", "fen"]))
        h["SetUp"] = "1"
        return board
    if kind == "chess960":
        board = chess.Board.from_chess960_pos(rng.randrange(960))
        if rng.random() < 0.3:
            add_outer_rooks(rng, board)
        # Usually tagged; sometimes only the FEN tells (python-chess then
        # switches to Chess960 iff the castling rights need it).
        if rng.random() < 0.85:
            h["Variant"] = "Chess960"
        h["FEN"] = board.fen(shredder=rng.random() < 0.3)
        h["SetUp"] = "1"
        return board
    cls = LICHESS_VARIANT_CLASSES[kind]
    h["Variant"] = kind
    board = cls()
    if kind in ("Horde", "Racing Kings") and rng.random() < 0.5:
        h["FEN"] = board.fen()
        h["SetUp"] = "1"
    return board


def add_sideline(rng: random.Random, node: chess.pgn.GameNode, board: chess.Board, main_move: chess.Move) -> None:
    """Add a short side variation at `node` (whose position is `board`) avoiding `main_move`."""
    alternatives = [m for m in board.legal_moves if m != main_move]
    if not alternatives:
        return
    side_board = board.copy(stack=False)
    move = rng.choice(alternatives)
    side = node.add_variation(move)
    side_board.push(move)
    if rng.random() < 0.3:
        side.comment = "sideline"
    for _ in range(rng.randint(0, 4)):
        if side_board.is_game_over():
            break
        move = choose_move(rng, side_board)
        side = side.add_variation(move)
        side_board.push(move)
    if rng.random() < 0.2:
        side.nags.add(rng.choice(NAGS))


PAWN_DROP_RE = re.compile(r"(?<![A-Za-z])@([a-h][1-8])")


def render(game: chess.pgn.Game, explicit_pawn_drops: bool) -> str:
    """python-chess's export; optionally rewrite pawn drops '@e4' to Lichess's 'P@e4'."""
    text = str(game)
    if explicit_pawn_drops:
        head, sep, movetext = text.partition("\n\n")
        text = head + sep + PAWN_DROP_RE.sub(r"P@\1", movetext)
    return text


def make_game(rng: random.Random, index: int, used_ids: set) -> chess.pgn.Game:
    game = chess.pgn.Game()
    kind = rng.choices([k for k, _ in KINDS], weights=[w for _, w in KINDS])[0]
    h = game.headers
    h["Event"] = rng.choice(EVENTS)
    h["Site"] = random_site(rng, used_ids)
    h["Date"] = f"2025.{rng.randint(1, 12):02d}.{rng.randint(1, 28):02d}"
    h["Round"] = "-"
    h["White"] = f"player{rng.randrange(10000)}"
    h["Black"] = f"player{rng.randrange(10000)}"
    board = start_board(rng, kind, game)
    h["GameNo"] = str(index)

    node: chess.pgn.GameNode = game
    for _ in range(rng.randint(0, 200)):
        if board.is_game_over():
            break
        move = choose_move(rng, board)
        child = node.add_variation(move)  # first variation = mainline
        if rng.random() < 0.03:
            add_sideline(rng, node, board, move)
        if rng.random() < 1 / 3:
            child.comment = clock_comment(rng)
        if rng.random() < 0.04:
            child.nags.add(rng.choice(NAGS))
        board.push(move)
        node = child

    h["Result"] = board.result() if board.is_game_over() else rng.choice(RESULTS)
    game.headers["Termination"] = "Normal"
    return game


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="Write a seeded PGN of random legal games (python-chess).")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--games", type=int, default=3000)
    parser.add_argument("--out", default="-", help="output file ('-' = stdout)")
    ns = parser.parse_args(argv)

    rng = random.Random(ns.seed)
    used_ids: set = set()
    out = sys.stdout if ns.out == "-" else open(ns.out, "w", encoding="utf-8", newline="\n")
    try:
        for i in range(1, ns.games + 1):
            game = make_game(rng, i, used_ids)
            # python-chess writes pawn drops as "@e4"; Lichess writes "P@e4". Use both.
            explicit = game.headers.get("Variant") == "Crazyhouse" and i % 2 == 0
            out.write(render(game, explicit))
            out.write("\n\n")
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
