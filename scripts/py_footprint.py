#!/usr/bin/env python3
"""Independent recount of what `pgnload import --positions-max-ply N` stores
(tests/footprint.rs).

Replays every game of the files with python-chess, through the contract
reference `py_digests.py` (its normalized FEN of ply 0 = the start position
and of each mainline ply), and prints, for each cap given (`all` for none):

    cap <TAB> positions <TAB> moves <TAB> games

- positions: distinct normalized FENs over plies 0..=min(cap, plies) of
  every game (the `positions` table is one row per distinct FEN);
- moves: the sum of min(cap, plies) (one `moves` row per stored ply);
- games: the games replayed (each game of the files once: the files given
  must hold no game twice, as the importer stores a game once).

The rule is docs/import.md's ("Scope and backfill": the start position is
ply 0), written
again from the text, not from pgnload's code.

Usage: py_footprint.py CAP[,CAP...] FILE...
"""
import sys

import py_digests


def main(argv):
    caps = [None if c == "all" else int(c) for c in argv[1].split(",")]
    games = {}
    for path in argv[2:]:
        lines = []
        py_digests.process_pgn(path, lines.append, sys.stderr.write)
        for chunk in lines:
            for line in chunk.splitlines():
                key, ply, fen, _ = line.split("\t")
                games.setdefault((path, key), []).append((int(ply), fen))
    for cap in caps:
        fens = set()
        moves = 0
        for plies in games.values():
            kept = [fen for ply, fen in plies if cap is None or ply <= cap]
            fens.update(kept)
            moves += len(kept) - 1
        label = "all" if cap is None else str(cap)
        print(f"{label}\t{len(fens)}\t{moves}\t{len(games)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
