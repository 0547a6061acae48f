#!/usr/bin/env python3
"""Reference implementation of the pgnload position-digest contract.

This script is the *contract reference* that the Rust ``pgnload`` code is
tested against.  It deliberately uses nothing but python-chess 1.11
(``pip install chess==1.11.2``) and the ``xxhash`` package, so that every
decision about PGN parsing, move legality, variants and FEN normalisation is
the one python-chess makes.  Whatever this script prints is, by definition,
the expected output; when the Rust side disagrees, the Rust side is wrong
(or the contract has to be changed here first, deliberately).

Modes
-----

``py_digests.py FILE... | -``
    Read every game of every file (``-`` = stdin) with ``chess.pgn.read_game``
    and print, for each accepted game, one line per position (ply 0 = the
    initial position, ply k = after the k-th mainline move)::

        game_key <TAB> ply <TAB> normalized_fen <TAB> signed_digest

    * Input may be plain PGN or zstd/gzip/bzip2 compressed; the format is
      detected from the magic bytes, not the file name.  gzip and bzip2 use
      the standard library (multi-member/multi-stream files are read to the
      end); zstd needs the optional ``zstandard`` module (all frames are read).
    * Text is decoded as UTF-8 with ``errors='replace'``; a leading UTF-8 BOM
      is stripped (codec ``utf-8-sig``).  Newlines are Python's universal
      newlines (``\\n``, ``\\r\\n`` and a lone ``\\r`` all end a line).
    * Games are numbered 1, 2, 3, ... per file, counting *every* object that
      ``read_game`` returns, including rejected ones.
    * The start position is ``game.board()``: it honours ``[Variant]`` (any
      alias known to ``chess.variant.find_variant``; ``Chess960``,
      ``Chess 960``, ``Fischerandom``, ``FischerRandom``, ``Fischer Random``
      and ``wild/*`` mean standard rules), ``[FEN]`` and switches to Chess960
      castling whenever the FEN's castling rights are only possible in
      Chess960.  ``[SetUp]`` is ignored, as python-chess ignores it.
    * A game is REJECTED when ``game.errors`` is non-empty: an illegal,
      ambiguous or syntactically invalid SAN token anywhere (mainline *or*
      side variation), an invalid FEN tag, an unknown variant.  For a
      rejected game nothing is printed on stdout and one line goes to
      stderr::

          REJECT <TAB> game_key <TAB> first error message

      (tabs/newlines inside the message are replaced by spaces).
    * normalized_fen = the first four space-separated fields of
      ``board.fen()`` (python-chess default ``en_passant="legal"``: the
      en-passant square is only shown if an en-passant capture is legal;
      castling is X-FEN, i.e. ``KQkq`` unless the castling rook is not the
      outermost one, then the rook's file letter; crazyhouse pockets and
      ``~`` promotion marks are part of field 1; three-check counters are
      field 5 and therefore dropped).
    * signed_digest = XXH64(normalized_fen as UTF-8, seed 0) reinterpreted as
      a signed two's-complement 64-bit integer.
    * game_key = the 8-character Lichess game id if the ``Site`` header
      matches ``^https?://lichess\\.org/([A-Za-z0-9]{8})(?:[/?#].*)?$``,
      otherwise the 1-based game number within its file.
    * Exit status: 0, or 2 if a file could not be opened/decompressed (an
      ``ERROR <TAB> file <TAB> message`` line is written to stderr and the
      remaining files are still processed).  Rejected games do not affect
      the exit status.

``py_digests.py --fens [--canonical [--variant NAME] [--chess960]] [FEN...]``
    FENs come from the arguments, or one per line from stdin when there are
    no FEN arguments (blank stdin lines are skipped).  For each FEN print::

        normalized_fen <TAB> signed <TAB> unsigned

    Without ``--canonical`` the *string normaliser* is used: take the first
    four whitespace-separated fields, pad missing ones with ``-``, join with
    single spaces.  No chess knowledge is involved.

    With ``--canonical`` the FEN is parsed as a position and the first four
    fields of ``board.fen()`` are emitted instead, i.e. exactly what the PGN
    mode would print for a game whose ``[FEN]`` tag is this FEN.  The board
    class is ``chess.Board`` or ``chess.variant.find_variant(NAME)``.
    Chess960 detection mirrors ``chess.pgn.Headers.board()``: parse with
    standard castling, then turn Chess960 on iff
    ``board.has_chess960_castling_rights()`` (castling rights that are only
    possible in Chess960, e.g. Shredder letters ``HAha`` with the king not on
    e1/e8).  ``--chess960`` forces Chess960 from the start, like a
    ``[Variant "Chess960"]`` tag.  A FEN that python-chess cannot parse gives
    ``ERROR <TAB> input <TAB> message`` on stderr; processing continues and
    the exit status is 1.  Positions that parse but are not legal chess
    positions (``board.is_valid()`` false) are *not* errors, just as they are
    not errors in PGN mode.
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import io
import logging
import os
import re
import sys
from typing import BinaryIO, Iterable, List, Optional

import chess
import chess.pgn
import chess.variant
import xxhash

# python-chess logs every parse error through the "chess.pgn" logger; without
# a handler Python's last-resort handler would print them on stderr and mix
# them into our REJECT lines.
logging.getLogger("chess.pgn").setLevel(logging.CRITICAL + 1)

LICHESS_SITE_RE = re.compile(r"^https?://lichess\.org/([A-Za-z0-9]{8})(?:[/?#].*)?$")

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
GZIP_MAGIC = b"\x1f\x8b"
BZIP2_MAGIC = b"BZh"

TWO_63 = 1 << 63
TWO_64 = 1 << 64

_xxh64 = xxhash.xxh64_intdigest


def digest_unsigned(normalized_fen: str) -> int:
    """XXH64 (seed 0) of the UTF-8 bytes of the normalized FEN."""
    return _xxh64(normalized_fen.encode("utf-8"))


def to_signed(d: int) -> int:
    """Reinterpret an unsigned 64-bit integer as two's-complement signed."""
    return d - TWO_64 if d >= TWO_63 else d


def digest_signed(normalized_fen: str) -> int:
    return to_signed(digest_unsigned(normalized_fen))


def normalize_fen_string(fen: str) -> str:
    """The string normaliser: first four whitespace-separated fields, padded with '-'."""
    fields = fen.split()[:4]
    fields += ["-"] * (4 - len(fields))
    return " ".join(fields)


def board_key_fen(board: chess.Board) -> str:
    """First four fields of python-chess's default FEN (en_passant='legal')."""
    return " ".join(board.fen().split(" ")[:4])


def game_key(game: chess.pgn.Game, number: int) -> str:
    m = LICHESS_SITE_RE.match(game.headers.get("Site", ""))
    return m.group(1) if m else str(number)


def one_line(text: str) -> str:
    return text.replace("\t", " ").replace("\r", " ").replace("\n", " ")


# --------------------------------------------------------------------------
# Input handling
# --------------------------------------------------------------------------


class _PrefixedRaw(io.RawIOBase):
    """A raw stream that first yields `prefix`, then the rest of `inner`.

    Used to sniff magic bytes on non-seekable input (pipes) without losing them.
    """

    def __init__(self, prefix: bytes, inner: BinaryIO) -> None:
        self._prefix = prefix
        self._inner = inner

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]
        if self._prefix:
            n = min(len(b), len(self._prefix))
            b[:n] = self._prefix[:n]
            self._prefix = self._prefix[n:]
            return n
        data = self._inner.read(len(b))
        if not data:
            return 0
        n = len(data)
        b[:n] = data
        return n


def _read_exact_prefix(stream: BinaryIO, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = stream.read(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return buf


def open_binary(path: str) -> BinaryIO:
    """Open `path` (or stdin for '-') and transparently decompress by magic bytes."""
    raw: BinaryIO = sys.stdin.buffer if path == "-" else open(path, "rb")
    prefix = _read_exact_prefix(raw, 4)
    stream: BinaryIO = io.BufferedReader(_PrefixedRaw(prefix, raw), buffer_size=1 << 16)  # type: ignore[arg-type]
    if prefix.startswith(ZSTD_MAGIC):
        try:
            import zstandard  # type: ignore
        except ImportError:
            raise RuntimeError(
                "input is zstd-compressed but the Python module 'zstandard' is not installed "
                "(pip install zstandard)"
            ) from None
        reader = zstandard.ZstdDecompressor().stream_reader(stream, read_across_frames=True)
        return io.BufferedReader(reader, buffer_size=1 << 16)  # type: ignore[arg-type]
    if prefix.startswith(GZIP_MAGIC):
        return gzip.GzipFile(fileobj=stream, mode="rb")  # type: ignore[return-value]
    if prefix.startswith(BZIP2_MAGIC):
        return bz2.BZ2File(stream, mode="rb")  # type: ignore[return-value]
    return stream


def open_text(path: str) -> io.TextIOWrapper:
    # utf-8-sig == utf-8 that drops one leading BOM (python-chess would also
    # strip it from the first line of a game, but not if e.g. a '%' comment
    # line comes first).
    return io.TextIOWrapper(open_binary(path), encoding="utf-8-sig", errors="replace")


# --------------------------------------------------------------------------
# PGN mode
# --------------------------------------------------------------------------


def process_pgn(path: str, out_write, err_write) -> None:
    handle = open_text(path)
    try:
        number = 0
        while True:
            game = chess.pgn.read_game(handle)
            if game is None:
                break
            number += 1
            key = game_key(game, number)
            if game.errors:
                err_write(f"REJECT\t{key}\t{one_line(str(game.errors[0]))}\n")
                continue
            try:
                board = game.board()
            except ValueError as error:  # cannot happen when errors is empty; defensive
                err_write(f"REJECT\t{key}\t{one_line(str(error))}\n")
                continue
            lines: List[str] = []
            append = lines.append
            fen = board_key_fen(board)
            append(f"{key}\t0\t{fen}\t{digest_signed(fen)}\n")
            ply = 0
            for move in game.mainline_moves():
                board.push(move)
                ply += 1
                fen = " ".join(board.fen().split(" ")[:4])
                d = _xxh64(fen.encode("utf-8"))
                if d >= TWO_63:
                    d -= TWO_64
                append(f"{key}\t{ply}\t{fen}\t{d}\n")
            out_write("".join(lines))
    finally:
        handle.close()


# --------------------------------------------------------------------------
# FEN mode
# --------------------------------------------------------------------------


def canonical_fen(fen: str, board_cls, force_chess960: bool) -> str:
    board = board_cls(fen, chess960=force_chess960)
    board.chess960 = board.chess960 or board.has_chess960_castling_rights()
    return board_key_fen(board)


def iter_fens(args_fens: List[str]) -> Iterable[str]:
    if args_fens:
        yield from args_fens
    else:
        for line in sys.stdin:
            line = line.rstrip("\r\n").lstrip("\ufeff")
            if line.strip():
                yield line


def run_fens(ns: argparse.Namespace, out_write, err_write) -> int:
    status = 0
    board_cls = chess.Board
    if ns.variant:
        board_cls = chess.variant.find_variant(ns.variant)
    for raw in iter_fens(ns.fen):
        if ns.canonical:
            try:
                norm = canonical_fen(raw.strip(), board_cls, ns.chess960)
            except ValueError as error:
                err_write(f"ERROR\t{one_line(raw)}\t{one_line(str(error))}\n")
                status = 1
                continue
        else:
            norm = normalize_fen_string(raw)
        u = digest_unsigned(norm)
        out_write(f"{norm}\t{to_signed(u)}\t{u}\n")
    return status


# --------------------------------------------------------------------------


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        description="Reference (python-chess) implementation of pgnload's position digests.",
    )
    parser.add_argument("--fens", action="store_true", help="FEN mode: hash FEN strings instead of reading PGN")
    parser.add_argument("--canonical", action="store_true", help="(--fens) parse each FEN and re-emit python-chess's FEN")
    parser.add_argument("--variant", metavar="NAME", help="(--fens --canonical) variant board class, e.g. Crazyhouse")
    parser.add_argument("--chess960", action="store_true", help="(--fens --canonical) force Chess960 castling rules")
    parser.add_argument("inputs", nargs="*", metavar="FILE|FEN", help="PGN files ('-' = stdin), or FENs with --fens")
    ns = parser.parse_args(argv)

    if not ns.fens and (ns.canonical or ns.variant or ns.chess960):
        parser.error("--canonical/--variant/--chess960 only make sense with --fens")
    if ns.fens and (ns.variant or ns.chess960) and not ns.canonical:
        parser.error("--variant/--chess960 require --canonical")
    if ns.variant:
        try:
            chess.variant.find_variant(ns.variant)
        except ValueError as error:
            parser.error(str(error))

    if not chess.__version__.startswith("1.11."):
        sys.stderr.write(
            f"WARNING\tpython-chess {chess.__version__} is installed; the contract is defined on 1.11.2 "
            "(pip install chess==1.11.2)\n"
        )

    out = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", newline="\n", write_through=False)
    out_write = out.write

    def err_write(s: str) -> None:
        out.flush()  # keep stdout/stderr ordering sane when both go to a terminal
        sys.stderr.write(s)
        sys.stderr.flush()

    status = 0
    try:
        if ns.fens:
            ns.fen = ns.inputs
            status = run_fens(ns, out_write, err_write)
        else:
            if not ns.inputs:
                parser.error("no input files (use '-' for stdin)")
            for path in ns.inputs:
                try:
                    process_pgn(path, out_write, err_write)
                except BrokenPipeError:
                    raise
                except Exception as error:  # unreadable file, corrupt compressed stream, ...
                    err_write(f"ERROR\t{path}\t{one_line(str(error))}\n")
                    status = 2
        out.flush()
    except BrokenPipeError:
        # Reader went away (e.g. `| head`): exit quietly, and point stdout at
        # /dev/null so that the flush at interpreter shutdown cannot fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main())
