#!/usr/bin/env python3
"""Independent check of `pgnload export --format dcg|ocgdb`.

Usage: py_exchange.py dcg|ocgdb EXPORT SOURCE.pgn...

Decodes the export from the formats' descriptions alone (no pgnload code):
  ocgdb: SQLite; Games.Moves2 is 2 bytes a ply, little-endian,
         from | to << 6 | promotion << 12 (a1 = 0, N=2 B=3 R=4 Q=5),
         castling as the king's two-square move; Result text, * as NULL;
         names through Players/Events/Sites (row 1: empty placeholder);
         comments in Comments (GameID, 0-based Ply, Comment).
  dcg:   BASE.dci (10-byte magic, version, 8-byte default; 39-byte
         big-endian entries), BASE.dcn/.dcs/.dce (10-byte magic, 36-byte
         space-padded records, refs are byte offsets), BASE.dcg games
         (BER-TLV length, FEN marker, big-endian moves
         promotion << 12 | from << 6 | to, 0x86 comment, 0x87 NAGs,
         0x88 null move).
replays every move with python-chess (each must be legal), and compares
the games with python-chess's reading of the source PGN: players, result,
Elo, date, ply count, start FEN, moves, clocks (and NAGs for dcg).
Non-standard games of the source are counted as skipped.

Prints `games N skipped M` and exits 0 when every game matches; prints the
differences and exits 1 otherwise.
"""

import re
import sqlite3
import struct
import sys

import chess
import chess.pgn

PROMOTION = {0: None, 2: chess.KNIGHT, 3: chess.BISHOP, 4: chess.ROOK, 5: chess.QUEEN}
CLOCK = re.compile(r"\[%clk (\d+):(\d+):(\d+(?:\.\d+)?)\]")


def clock_of(comment):
    m = CLOCK.search(comment or "")
    if not m:
        return None
    h, mi, s = m.groups()
    return round((int(h) * 3600 + int(mi) * 60 + float(s)) * 1000)


def record(white, black, result, date, welo, belo, fen, moves, clocks, nags):
    return (
        (white or "").lower() or None,
        (black or "").lower() or None,
        result,
        date,
        welo,
        belo,
        len(moves),
        fen,
        tuple(moves),
        tuple(clocks),
        tuple(nags) if nags is not None else None,
    )


def replay(fen, codes):
    """UCI of each decoded move, checking legality. codes: (from, to, promo) or None for a null move."""
    board = chess.Board(fen) if fen else chess.Board()
    out = []
    for i, code in enumerate(codes):
        if code is None:
            move = chess.Move.null()
        else:
            f, t, p = code
            if p not in PROMOTION:
                raise ValueError(f"ply {i + 1}: promotion code {p}")
            move = chess.Move(f, t, PROMOTION[p])
            if move not in board.legal_moves:
                raise ValueError(f"ply {i + 1}: {move.uci()} is illegal in {board.fen()}")
        out.append(move.uci())
        board.push(move)
    return out


def date_text(y, m, d):
    if not (y or m or d):
        return None
    return "%s-%s-%s" % (
        "%04d" % y if y else "????",
        "%02d" % m if m else "??",
        "%02d" % d if d else "??",
    )


def source_games(paths, fmt):
    games, skipped = [], 0
    for path in paths:
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            while True:
                game = chess.pgn.read_game(f)
                if game is None:
                    break
                h = game.headers
                if h.get("Variant", "Standard").lower() not in ("standard", "from position", ""):
                    skipped += 1
                    continue
                board = game.board()
                fen = board.fen() if board.fen() != chess.STARTING_FEN else None
                moves, clocks, nags = [], [], []
                for node in game.mainline():
                    moves.append(node.move.uci())
                    clocks.append(clock_of(node.comment))
                    nags.append(min(node.nags) if node.nags else None)

                def name(tag):
                    v = h.get(tag, "?").strip()
                    if fmt == "dcg":  # 36-byte records, cut at a character boundary
                        v = v.encode("utf-8")[:36].decode("utf-8", errors="ignore").rstrip(" ")
                    return None if v in ("", "?") else v

                def elo(tag):
                    v = h.get(tag, "").strip()
                    return int(v) if v.isdigit() and 0 < int(v) < 65536 else None

                raw = h.get("UTCDate") or h.get("Date", "")
                parts = raw.split(".")
                nums = []
                for i, p in enumerate(parts[:3]):
                    nums.append(int(p) if p.isdigit() and len(p) == (4 if i == 0 else 2) else 0)
                nums += [0] * (3 - len(nums))
                result = h.get("Result")
                games.append(
                    record(
                        name("White"),
                        name("Black"),
                        result if result in ("1-0", "0-1", "1/2-1/2") else None,
                        date_text(*nums),
                        elo("WhiteElo"),
                        elo("BlackElo"),
                        fen,
                        moves,
                        clocks,
                        nags if fmt == "dcg" else None,
                    )
                )
    return games, skipped


def ocgdb_games(path):
    db = sqlite3.connect(path)
    info = dict(db.execute("SELECT Name, Value FROM Info"))
    for key in ("Data Structure Version", "Version", "License", "Description", "Variant",
                "GameCount", "PlayerCount", "EventCount", "SiteCount", "CommentCount"):
        assert key in info, f"Info lacks {key}"
    assert info["Data Structure Version"] == "0.6", info
    for table in ("Players", "Events", "Sites"):
        assert db.execute(f"SELECT Name FROM {table} WHERE ID = 1").fetchone() == ("",), table
        assert int(info[table[:-1] + "Count"]) == db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    assert int(info["GameCount"]) == db.execute("SELECT count(*) FROM Games").fetchone()[0]
    assert int(info["CommentCount"]) == db.execute("SELECT count(*) FROM Comments").fetchone()[0]
    comments = {}
    for gid, ply, text in db.execute("SELECT GameID, Ply, Comment FROM Comments"):
        comments.setdefault(gid, {})[ply] = text
    games = []
    rows = db.execute(
        "SELECT g.ID, w.Name, b.Name, g.Result, g.Date, g.WhiteElo, g.BlackElo, g.PlyCount, g.FEN, g.Moves2 "
        "FROM Games g JOIN Players w ON w.ID = g.WhiteID JOIN Players b ON b.ID = g.BlackID ORDER BY g.ID"
    )
    for gid, white, black, result, date, welo, belo, plies, fen, blob in rows:
        blob = blob or b""
        assert len(blob) % 2 == 0, gid
        codes = []
        for (code,) in struct.iter_unpack("<H", blob):
            codes.append((code & 63, (code >> 6) & 63, code >> 12))
        moves = replay(fen, codes)
        assert plies == len(moves), (gid, plies, len(moves))
        fen = chess.Board(fen).fen() if fen else None
        clocks = [clock_of(comments.get(gid, {}).get(i)) for i in range(len(moves))]
        games.append(record(white, black, result, date, welo, belo, fen, moves, clocks, None))
    return games


def dcg_games(base):
    def read(ext):
        with open(base + "." + ext, "rb") as f:
            return f.read()

    index, data = read("dci"), read("dcg")
    dicts = {ext: read(ext) for ext in ("dcn", "dcs", "dce")}
    assert index[:10] == b"SimpleCDbi" and index[10] == 0, index[:11]
    assert data[:10] == b"SimpleCDbg"
    for ext, magic in (("dcn", b"SimpleCDbn"), ("dcs", b"SimpleCDbs"), ("dce", b"SimpleCDbe")):
        body = dicts[ext]
        assert body[:10] == magic and (len(body) - 10) % 36 == 0, ext
        names = [body[i:i + 36].decode("utf-8").rstrip(" ") for i in range(10, len(body), 36)]
        assert names == sorted(names, key=lambda n: n.encode("utf-16-be")), f"{ext} not sorted"
    body = index[19:]
    assert len(body) % 39 == 0, len(index)

    def name(ext, ref):
        assert ref >= 10 and (ref - 10) % 36 == 0, (ext, ref)
        v = dicts[ext][ref:ref + 36].decode("utf-8").rstrip(" ")
        return None if v == "?" else v

    def length(buf, i):
        b = buf[i]
        if b < 0x80:
            return b, i + 1
        n = b - 0x80
        assert 1 <= n <= 4, b
        return int.from_bytes(buf[i + 1:i + 1 + n], "big"), i + 1 + n

    games = []
    for k in range(0, len(body), 39):
        (status, offset, w, b, rnd, site, event, welo, belo, res, eco, y, m, d) = struct.unpack(
            ">BQIIHIIHHB3sHBB", body[k:k + 39]
        )
        assert status == 0
        name("dcs", site)
        name("dce", event)
        glen, i = length(data, offset)
        end = i + glen
        fen = None
        if data[i] == 1:
            flen, i = length(data, i + 1)
            fen = data[i:i + flen].decode("utf-8")
            i += flen
        else:
            assert data[i] == 0
            i += 1
        codes, clocks, nags = [], [], []
        while i < end:
            t = data[i]
            if t == 0x86:
                clen, i = length(data, i + 1)
                clocks[-1] = clock_of(data[i:i + clen].decode("utf-8"))
                i += clen
            elif t == 0x87:
                nlen, i = length(data, i + 1)
                assert nlen >= 1
                nags[-1] = data[i]
                i += nlen
            elif t == 0x88:
                codes.append(None)
                clocks.append(None)
                nags.append(None)
                i += 1
            else:
                assert t < 0x80, hex(t)
                code = int.from_bytes(data[i:i + 2], "big")
                codes.append(((code >> 6) & 63, code & 63, code >> 12))
                clocks.append(None)
                nags.append(None)
                i += 2
        assert i == end, (offset, i, end)
        moves = replay(fen, codes)
        fen = chess.Board(fen).fen() if fen else None
        result = {0: None, 1: "1-0", 2: "0-1", 3: "1/2-1/2"}[res]
        games.append(
            record(name("dcn", w), name("dcn", b), result, date_text(y, m, d),
                   welo or None, belo or None, fen, moves, clocks, nags)
        )
    return games


def main():
    fmt, export, sources = sys.argv[1], sys.argv[2], sys.argv[3:]
    exported = ocgdb_games(export) if fmt == "ocgdb" else dcg_games(export)
    expected, skipped = source_games(sources, fmt)
    got, want = sorted(set(exported), key=repr), sorted(set(expected), key=repr)
    if got != want:
        for g in [g for g in got if g not in set(want)][:3]:
            print("only in the export:", g)
        for g in [g for g in want if g not in set(got)][:3]:
            print("only in the source:", g)
        sys.exit(1)
    print(f"games {len(exported)} skipped {skipped}")


if __name__ == "__main__":
    main()
