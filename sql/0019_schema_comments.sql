-- pgnload schema: the schema explains itself (issue 28, item 4).
--
-- Every table, column, view and function says what it holds and how it is
-- coded (`\d+ games` in psql shows it), and SQL functions and two views
-- decode the coded columns for a SQL user: results, games.moves (UCI),
-- the moves rows' SAN, the explorer's speeds, months and moves.
-- tests/schema.rs fails when a table, column, view or function of the
-- schema has no comment: a later migration comments what it adds.
--
-- Nothing here touches a row or an index, so it applies as it is to a
-- database of any size, to one with an unfinished bulk load (which dropped
-- indexes, not tables or columns), and to the coordinator of a sharded
-- layout, whose partitioned tables take the comments of their columns
-- (src: crates/db/src/shards.rs copies them, and the views below, when it
-- rebuilds the tables; the shard-only objects are commented at the end).
-- The functions have string bodies, so that no table depends on them and
-- they survive that rebuild.

-- Types.
COMMENT ON TYPE game_variant IS 'The rules a game is played by: the Lichess variants (the Variant tag; standard when absent). chess960 also for a standard game whose FEN needs Chess960 castling.';
COMMENT ON TYPE game_termination IS 'How a game ended: the Lichess Termination tag (normal, time_forfeit, abandoned, rules_infraction, unterminated), other for any other value (the raw tag is in games.tags).';

-- positions
COMMENT ON TABLE positions IS 'One row per distinct position reached by an imported game (a capped import stores only the first plies: games.positions_max_ply).';
COMMENT ON COLUMN positions.id IS 'Position id, referenced by games.initial_position_id, games.final_position_id, moves.position_id, moves.position_after_id and explorer_moves.position_id (no foreign keys: see docs/schema.md).';
COMMENT ON COLUMN positions.normalized_fen IS 'The key: the first four FEN fields as python-chess 1.11 board.fen() writes them (placement with crazyhouse pockets, side to move, X-FEN castling rights, en passant square only when a capture is legal); no move counters.';
COMMENT ON COLUMN positions.fen_hash IS 'xxh64 (seed 0) of normalized_fen as a signed 64-bit integer: the lookup key (pgnload hash prints it for a FEN).';
COMMENT ON COLUMN positions.piece_placement IS 'The first FEN field of normalized_fen (board and crazyhouse pockets): finds a placement whatever the side to move or rights.';
COMMENT ON COLUMN positions.active_color IS 'Side to move: w or b.';
COMMENT ON COLUMN positions.castling IS 'Castling rights in X-FEN (KQkq, or rook files in Chess960), - for none.';
COMMENT ON COLUMN positions.en_passant IS 'En passant target square when an en passant capture is legal, else -.';

-- games
COMMENT ON TABLE games IS 'One row per imported game. Readable form: the view games_readable. Unique (source, external_id).';
COMMENT ON COLUMN games.id IS 'Game id (pgnload game show ID prints it as PGN).';
COMMENT ON COLUMN games.source IS 'lichess for games with a Lichess id (in their Site tag), else the import''s --source label (default pgn).';
COMMENT ON COLUMN games.external_id IS 'The Lichess game id (8 characters) when source = lichess, else a content digest of the tags and moves that recognizes the game when imported again.';
COMMENT ON COLUMN games.event_id IS 'events.id of the Event tag (NULL without one).';
COMMENT ON COLUMN games.site IS 'The Site tag.';
COMMENT ON COLUMN games.round IS 'The Round tag.';
COMMENT ON COLUMN games.white_player_id IS 'players.id of White (NULL when the White tag is absent).';
COMMENT ON COLUMN games.black_player_id IS 'players.id of Black (NULL when the Black tag is absent).';
COMMENT ON COLUMN games.white_elo IS 'The WhiteElo tag (NULL when absent or not a number).';
COMMENT ON COLUMN games.black_elo IS 'The BlackElo tag (NULL when absent or not a number).';
COMMENT ON COLUMN games.white_rating_diff IS 'The WhiteRatingDiff tag: White''s rating change (Lichess).';
COMMENT ON COLUMN games.black_rating_diff IS 'The BlackRatingDiff tag: Black''s rating change (Lichess).';
COMMENT ON COLUMN games.time_control IS 'The TimeControl tag as written (Lichess: initial+increment in seconds, - for correspondence).';
COMMENT ON COLUMN games.time_initial_s IS 'Initial clock in seconds, from time_control (NULL: no clock or not parsed). speed_code(time_initial_s, time_increment_s) gives the Lichess speed.';
COMMENT ON COLUMN games.time_increment_s IS 'Increment per move in seconds, from time_control (NULL: no clock or not parsed).';
COMMENT ON COLUMN games.variant IS 'The variant the moves are replayed by (game_variant).';
COMMENT ON COLUMN games.termination IS 'The Termination tag (game_termination); NULL without one.';
COMMENT ON COLUMN games.result IS 'Coded result: 1 White won (1-0), -1 Black won (0-1), 0 draw (1/2-1/2), NULL unknown or unfinished (*). result_text(result) decodes it.';
COMMENT ON COLUMN games.eco IS 'The ECO tag (opening code, e.g. B01).';
COMMENT ON COLUMN games.opening IS 'The Opening tag (opening name).';
COMMENT ON COLUMN games.started_at IS 'When the game began, from UTCDate and UTCTime, else Date, in UTC; NULL without a usable date.';
COMMENT ON COLUMN games.initial_position_id IS 'positions.id of the start position (ply 0).';
COMMENT ON COLUMN games.final_position_id IS 'positions.id after the last move, or after ply positions_max_ply when that is set (the last position stored).';
COMMENT ON COLUMN games.ply_count IS 'Number of half-moves of the mainline: length(moves) / 2.';
COMMENT ON COLUMN games.moves IS 'Every move of the mainline, 2 bytes per ply, big-endian: bits 0-5 from square (a1 = 0 ... h8 = 63), 6-11 to square, 12-14 promotion (2 N, 3 B, 4 R, 5 Q, 6 K) or 7 castling (to = the rook''s square), bit 15 a crazyhouse drop (from = to, 12-14 the piece, 1 P ... 5 Q); 0x0000 a null move. moves_uci(moves, variant) decodes it (docs/schema.md "Move encoding").';
COMMENT ON COLUMN games.start_fen IS 'The FEN tag when the game did not start from its variant''s start position, else NULL.';
COMMENT ON COLUMN games.tags IS 'The tags the typed columns cannot give back as read: tags no column holds, values in another form than the column would print, a partial Date, a tag given more than once ({"Name": "value"}, or an array of values); under the key ]order the order of the tags when it is not the columns'' (Lichess''s). {} for a Lichess game.';
COMMENT ON COLUMN games.annotations IS 'What the movetext says that the typed columns cannot (migration 0018): a JSON array of [ply, text] pairs, text being the PGN written after mainline ply ply (its NAGs, comment and variations; ply 0 the comment before the first move). NULL when the typed NAG, clock and eval of the moves give the movetext back (every plain Lichess game).';
COMMENT ON COLUMN games.import_file_id IS 'import_files.id of the input the game was read from; NULL when it came from none.';
COMMENT ON COLUMN games.game_number IS '1-based number of the game in that input.';
COMMENT ON COLUMN games.imported_at IS 'When the row was written.';
COMMENT ON COLUMN games.byte_offset IS 'Offset of the game''s first byte in the decompressed input (NULL for games imported before migration 0003).';
COMMENT ON COLUMN games.positions_max_ply IS 'NULL: every ply has its moves and positions rows. N: the import was capped (--positions-max-ply N, --games-only = 0): rows only for plies 1..N (positions 0..N); moves still holds every move.';

-- moves
COMMENT ON TABLE moves IS 'One row per ply of each game, for plies 1..ply_count (1..positions_max_ply when the import was capped; none with --games-only). games.moves holds every move in any case.';
COMMENT ON COLUMN moves.game_id IS 'games.id.';
COMMENT ON COLUMN moves.ply IS '1-based half-move number (1 = White''s first move in a game from the start position).';
COMMENT ON COLUMN moves.position_id IS 'positions.id before the move.';
COMMENT ON COLUMN moves.position_after_id IS 'positions.id after the move.';
COMMENT ON COLUMN moves.uci IS 'The move in UCI (e2e4, e7e8q, P@e4 for a drop; castling king to its destination, king to rook in Chess960 mode; 0000 a null move).';
COMMENT ON COLUMN moves.san IS 'The move in canonical SAN in its position, with + or # (-- a null move), also for games written in UCI.';
COMMENT ON COLUMN moves.clock_ms IS 'The mover''s clock after the move in milliseconds, from a [%clk h:mm:ss] comment; NULL without one.';
COMMENT ON COLUMN moves.eval_cp IS 'Engine evaluation after the move in centipawns, White''s point of view, from [%eval x]; NULL without one or when eval_mate is set.';
COMMENT ON COLUMN moves.eval_mate IS 'Mate in N after the move from [%eval #N]: positive White mates, negative Black mates.';
COMMENT ON COLUMN moves.nag IS 'The move''s first NAG ($1 = 1 good move, $2 = 2 mistake, ...); NULL without one.';

-- players, events
COMMENT ON TABLE players IS 'One row per player name per source.';
COMMENT ON COLUMN players.id IS 'Player id (games.white_player_id, games.black_player_id).';
COMMENT ON COLUMN players.source IS 'The games.source of the games the name was read from.';
COMMENT ON COLUMN players.username IS 'The name as written in a White or Black tag.';
COMMENT ON COLUMN players.username_key IS 'What identifies the player within source: lower(username) for lichess (case-insensitive names), else username.';
COMMENT ON COLUMN players.title IS 'The last WhiteTitle/BlackTitle tag seen (GM, IM, BOT, ...); a game without one keeps it.';
COMMENT ON COLUMN players.is_bot IS 'Whether a BOT title was ever seen for the player.';
COMMENT ON COLUMN players.created_at IS 'When the player was first seen.';
COMMENT ON COLUMN players.updated_at IS 'When title or is_bot last changed.';
COMMENT ON TABLE events IS 'One row per event (tournament) per source.';
COMMENT ON COLUMN events.id IS 'Event id (games.event_id).';
COMMENT ON COLUMN events.source IS 'The games.source of its games.';
COMMENT ON COLUMN events.event_key IS 'What identifies it within source: the arena or swiss id when the Event tag links one, else the name.';
COMMENT ON COLUMN events.external_id IS 'Lichess arena or swiss id, when linked.';
COMMENT ON COLUMN events.name IS 'The Event tag.';
COMMENT ON COLUMN events.kind IS 'arena or swiss for a linked Lichess tournament, else NULL.';

-- import bookkeeping
COMMENT ON TABLE import_files IS 'One row per input imported: its checkpoint (committed with the rows it covers) and counts. pgnload status reads it.';
COMMENT ON COLUMN import_files.id IS 'Input id (games.import_file_id, import_rejects.file_id).';
COMMENT ON COLUMN import_files.fingerprint IS 'What identifies the input: its size and digests of its head and tail.';
COMMENT ON COLUMN import_files.path IS 'The input as last named on the command line (- for stdin).';
COMMENT ON COLUMN import_files.size_bytes IS 'Its size in bytes as stored (compressed), when known.';
COMMENT ON COLUMN import_files.compression IS 'plain, zstd, bzip2, gzip, or an exchange format, sniffed from its first bytes.';
COMMENT ON COLUMN import_files.state IS 'running, interrupted (a rerun resumes it), done, failed (last_error says why).';
COMMENT ON COLUMN import_files.games_done IS 'Checkpoint: games read up to the last committed batch.';
COMMENT ON COLUMN import_files.bytes_done IS 'Checkpoint: decompressed bytes consumed up to the last committed batch.';
COMMENT ON COLUMN import_files.games_imported IS 'Games of the input written to games.';
COMMENT ON COLUMN import_files.games_present IS 'Games of the input that were already in games.';
COMMENT ON COLUMN import_files.games_rejected IS 'Games of the input rejected (import_rejects).';
COMMENT ON COLUMN import_files.last_error IS 'Why the import of the input failed (state failed), else NULL.';
COMMENT ON COLUMN import_files.started_at IS 'When its import began.';
COMMENT ON COLUMN import_files.updated_at IS 'When its checkpoint last changed.';
COMMENT ON COLUMN import_files.finished_at IS 'When its import ended (done or failed).';
COMMENT ON COLUMN import_files.games_filtered IS 'Games left out by the import''s scope (--rated-only, --min-rating, --speeds, ...): read = imported + present + rejected + filtered.';
COMMENT ON COLUMN import_files.scope IS 'The scope it was imported under (empty: every game); a rerun under another scope needs --restart.';
COMMENT ON TABLE import_runs IS 'One row per pgnload import invocation.';
COMMENT ON COLUMN import_runs.id IS 'Run id.';
COMMENT ON COLUMN import_runs.started_at IS 'When the run began.';
COMMENT ON COLUMN import_runs.finished_at IS 'When it ended (NULL while running, or when killed).';
COMMENT ON COLUMN import_runs.status IS 'running, then how it ended (its exit status, docs/errors.md), or skipped.';
COMMENT ON COLUMN import_runs.pgnload_version IS 'The pgnload version that ran it.';
COMMENT ON COLUMN import_runs.host IS 'The host it ran on.';
COMMENT ON COLUMN import_runs.pid IS 'Its process id.';
COMMENT ON COLUMN import_runs.games_read IS 'Games read by the run: imported + present + rejected + filtered.';
COMMENT ON COLUMN import_runs.games_imported IS 'Games it wrote.';
COMMENT ON COLUMN import_runs.games_present IS 'Games it found already stored.';
COMMENT ON COLUMN import_runs.games_rejected IS 'Games it rejected.';
COMMENT ON COLUMN import_runs.games_filtered IS 'Games its scope left out.';
COMMENT ON TABLE import_rejects IS 'Rejected games, verbatim, with where they were and why.';
COMMENT ON COLUMN import_rejects.id IS 'Reject id.';
COMMENT ON COLUMN import_rejects.file_id IS 'import_files.id of the input.';
COMMENT ON COLUMN import_rejects.game_number IS '1-based number of the game in the input.';
COMMENT ON COLUMN import_rejects.byte_offset IS 'Offset of its first byte in the decompressed input.';
COMMENT ON COLUMN import_rejects.reason IS 'Why it was rejected, as pgnload printed it (illegal move ..., bad FEN tag ..., ...).';
COMMENT ON COLUMN import_rejects.raw IS 'The game''s bytes as read (only the head of a game over the size limit).';
COMMENT ON COLUMN import_rejects.raw_length IS 'The game''s length in bytes (raw may be shorter).';
COMMENT ON COLUMN import_rejects.rejected_at IS 'When it was rejected.';
COMMENT ON TABLE import_conflicts IS 'Games read but not imported because their id was already held by a game with other moves; counted as already present.';
COMMENT ON COLUMN import_conflicts.file_id IS 'import_files.id of the game read.';
COMMENT ON COLUMN import_conflicts.game_number IS 'Its number in that input.';
COMMENT ON COLUMN import_conflicts.byte_offset IS 'Its offset in the decompressed input.';
COMMENT ON COLUMN import_conflicts.source IS 'The identity it claimed: games.source ...';
COMMENT ON COLUMN import_conflicts.external_id IS '... and games.external_id.';
COMMENT ON COLUMN import_conflicts.existing_game_id IS 'games.id of the game kept (NULL when it came earlier in the same batch).';
COMMENT ON COLUMN import_conflicts.existing_file_id IS 'import_files.id of the game kept.';
COMMENT ON COLUMN import_conflicts.existing_game_number IS 'Its number in its input.';
COMMENT ON COLUMN import_conflicts.existing_byte_offset IS 'Its offset in its decompressed input.';
COMMENT ON COLUMN import_conflicts.recorded_at IS 'When the conflict was recorded.';
COMMENT ON TABLE import_bulk_loads IS 'Bulk loads (import --mode bulk): at most one unfinished; while one is, positions and moves have no indexes.';
COMMENT ON COLUMN import_bulk_loads.id IS 'Load id.';
COMMENT ON COLUMN import_bulk_loads.state IS 'loading (rows going in, indexes absent), finishing (merging duplicates, rebuilding), done.';
COMMENT ON COLUMN import_bulk_loads.needs_dedup IS 'Whether positions may hold a normalized_fen twice, to merge before the unique index is rebuilt.';
COMMENT ON COLUMN import_bulk_loads.runs IS 'Import runs that worked on the load.';
COMMENT ON COLUMN import_bulk_loads.started_at IS 'When it began.';
COMMENT ON COLUMN import_bulk_loads.updated_at IS 'When it last changed state.';
COMMENT ON COLUMN import_bulk_loads.finished_at IS 'When it was done.';
COMMENT ON COLUMN import_bulk_loads.duplicates_merged IS 'Duplicate positions its finish merged.';
COMMENT ON COLUMN import_bulk_loads.finish_seconds IS 'Seconds its finish took.';
COMMENT ON TABLE import_bulk_objects IS 'The indexes and constraints a bulk load dropped, with the statements that drop and recreate them, in rebuild order.';
COMMENT ON COLUMN import_bulk_objects.load_id IS 'import_bulk_loads.id.';
COMMENT ON COLUMN import_bulk_objects.position IS 'Rebuild order.';
COMMENT ON COLUMN import_bulk_objects.table_name IS 'The table it belongs to.';
COMMENT ON COLUMN import_bulk_objects.object_name IS 'The index or constraint.';
COMMENT ON COLUMN import_bulk_objects.kind IS 'constraint or index.';
COMMENT ON COLUMN import_bulk_objects.drop_sql IS 'The statement that drops it.';
COMMENT ON COLUMN import_bulk_objects.create_sql IS 'The statement that recreates it.';
COMMENT ON TABLE pgnload_migrations IS 'The migrations of sql/ applied to this database, with checksums: a changed file is refused.';
COMMENT ON COLUMN pgnload_migrations.version IS 'The migration''s number.';
COMMENT ON COLUMN pgnload_migrations.name IS 'Its file name in sql/.';
COMMENT ON COLUMN pgnload_migrations.checksum IS 'xxh3 of its text, hex.';
COMMENT ON COLUMN pgnload_migrations.applied_at IS 'When it was applied.';
COMMENT ON TABLE pgnload_shards IS 'Empty on a single node; on the coordinator of a sharded layout, one row per shard server (docs/scaling-out.md).';
COMMENT ON COLUMN pgnload_shards.shard IS 'Shard number, 0-based: partition shard of each sharded table.';
COMMENT ON COLUMN pgnload_shards.server IS 'The postgres_fdw server its partitions are on.';
COMMENT ON COLUMN pgnload_shards.host IS 'Its host (or socket directory).';
COMMENT ON COLUMN pgnload_shards.port IS 'Its port.';
COMMENT ON COLUMN pgnload_shards.dbname IS 'Its database.';
COMMENT ON COLUMN pgnload_shards.created_at IS 'When the layout was built.';

-- explorer
COMMENT ON TABLE explorer_moves IS 'Opening explorer counters (opt-in: pgnload db explorer enable): per position, move, variant, speed, rating group and month, the games that played the move there (at their last visit) and how they ended. Readable form: explorer_moves_readable. A position queued in explorer_pending, or without rows, is counted from explorer_game_moves instead.';
COMMENT ON COLUMN explorer_moves.position_id IS 'positions.id where the move was played.';
COMMENT ON COLUMN explorer_moves.variant IS 'The games'' variant.';
COMMENT ON COLUMN explorer_moves.speed IS 'Lichess speed code of initial + 40 x increment seconds: 0 ultraBullet (< 30), 1 bullet (< 180), 2 blitz (< 480), 3 rapid (< 1500), 4 classical (< 21600), 5 correspondence (longer, or no clock). speed_name(speed) decodes it.';
COMMENT ON COLUMN explorer_moves.rating_group IS 'Lower bound of the band of floor((white_elo + black_elo) / 2): 0, 1000, 1200, 1400, 1600, 1800, 2000, 2200, 2500; -1 when a rating is missing.';
COMMENT ON COLUMN explorer_moves.month IS 'Month of the UTC start: year x 12 + month - 1 (2025-05 = 24304); -1 without a date. month_text(month) decodes it, month_code(timestamptz) codes one.';
COMMENT ON COLUMN explorer_moves.move IS 'The move, coded as one ply of games.moves (its 16 bits as a signed smallint). move_uci(move, variant) decodes it.';
COMMENT ON COLUMN explorer_moves.games IS 'Games counted (0 after removals: rows are not deleted while imports run).';
COMMENT ON COLUMN explorer_moves.white IS 'Of those, won by White.';
COMMENT ON COLUMN explorer_moves.draws IS 'Of those, drawn.';
COMMENT ON COLUMN explorer_moves.black IS 'Of those, won by Black (games - white - draws - black had no result).';
COMMENT ON COLUMN explorer_moves.rated_games IS 'Of those, games with both ratings.';
COMMENT ON COLUMN explorer_moves.rating_sum IS 'Sum of floor((white_elo + black_elo) / 2) over the rated games: rating_sum / rated_games is the average rating.';
COMMENT ON COLUMN explorer_moves.last_played IS 'The latest started_at of the games counted.';
COMMENT ON COLUMN explorer_moves.top_game_ratings IS 'white_elo + black_elo of the best-rated games counted (at most pgnload''s TOP_GAMES, best first, ties by lowest id); NULL: no rated game.';
COMMENT ON COLUMN explorer_moves.top_game_ids IS 'games.id of those games, in the same order.';
COMMENT ON TABLE explorer_pending IS 'Positions whose explorer counters are counted from explorer_game_moves until the next import run alone or pgnload db explorer compact writes their rows.';
COMMENT ON COLUMN explorer_pending.position_id IS 'positions.id queued.';
COMMENT ON TABLE explorer_state IS 'One row: whether this database keeps the explorer counters.';
COMMENT ON COLUMN explorer_state.singleton IS 'Always true: keeps the table at one row.';
COMMENT ON COLUMN explorer_state.enabled IS 'Whether the counters are kept (pgnload db explorer enable / disable).';
COMMENT ON COLUMN explorer_state.changed_at IS 'When enabled last changed.';
COMMENT ON TABLE explorer_deferred IS 'Games of a bulk load whose explorer counter rows are still held in the importer''s memory (runs of consecutive ids); explore refuses while any are recorded.';
COMMENT ON COLUMN explorer_deferred.id IS 'Record id.';
COMMENT ON COLUMN explorer_deferred.first_game_id IS 'First games.id of the run.';
COMMENT ON COLUMN explorer_deferred.last_game_id IS 'Last games.id of the run.';
COMMENT ON VIEW explorer_games IS 'Each game''s explorer categories, as explorer_moves codes them.';
COMMENT ON COLUMN explorer_games.game_id IS 'games.id.';
COMMENT ON COLUMN explorer_games.variant IS 'games.variant.';
COMMENT ON COLUMN explorer_games.speed IS 'Speed code 0-5 (see explorer_moves.speed).';
COMMENT ON COLUMN explorer_games.rating_group IS 'Rating band (see explorer_moves.rating_group).';
COMMENT ON COLUMN explorer_games.month IS 'Month code (see explorer_moves.month).';
COMMENT ON COLUMN explorer_games.result IS 'games.result (1, -1, 0, NULL).';
COMMENT ON COLUMN explorer_games.average IS 'floor((white_elo + black_elo) / 2); NULL when a rating is missing.';
COMMENT ON COLUMN explorer_games.started_at IS 'games.started_at.';
COMMENT ON COLUMN explorer_games.moves IS 'games.moves.';
COMMENT ON COLUMN explorer_games.rating_sum IS 'white_elo + black_elo (orders games as average does).';
COMMENT ON VIEW explorer_game_moves IS 'What each game contributes to explorer_moves: one row per (game, position it continued from), with the move of its last visit there. Needs moves rows: a capped game contributes its first plies only.';
COMMENT ON COLUMN explorer_game_moves.position_id IS 'positions.id.';
COMMENT ON COLUMN explorer_game_moves.game_id IS 'games.id.';
COMMENT ON COLUMN explorer_game_moves.move IS 'Move code (see explorer_moves.move).';
COMMENT ON COLUMN explorer_game_moves.variant IS 'games.variant.';
COMMENT ON COLUMN explorer_game_moves.speed IS 'Speed code 0-5.';
COMMENT ON COLUMN explorer_game_moves.rating_group IS 'Rating band.';
COMMENT ON COLUMN explorer_game_moves.month IS 'Month code.';
COMMENT ON COLUMN explorer_game_moves.result IS 'games.result.';
COMMENT ON COLUMN explorer_game_moves.average IS 'Average rating, floored.';
COMMENT ON COLUMN explorer_game_moves.started_at IS 'games.started_at.';
COMMENT ON COLUMN explorer_game_moves.rating_sum IS 'white_elo + black_elo.';

-- Decoders.
CREATE FUNCTION result_text(result smallint) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT CASE result WHEN 1 THEN '1-0' WHEN -1 THEN '0-1' WHEN 0 THEN '1/2-1/2' ELSE '*' END
$$;
COMMENT ON FUNCTION result_text(smallint) IS 'games.result as PGN writes it: 1-0, 0-1, 1/2-1/2, and * for NULL.';

CREATE FUNCTION square_name(square integer) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
AS $$
SELECT chr(97 + (square & 7)) || ((square >> 3) & 7) + 1
$$;
COMMENT ON FUNCTION square_name(integer) IS 'A square number of the move code (a1 = 0, b1 = 1, ... h8 = 63) as its name.';

CREATE FUNCTION move_uci(code integer, variant game_variant) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
AS $$
SELECT CASE
    WHEN c = 0 THEN '0000'
    WHEN c & 32768 <> 0 THEN substr('?PNBRQK?', field + 1, 1) || '@' || square_name(dest)
    WHEN field = 7 THEN square_name(origin) || CASE
        -- Chess960 castling mode: king to rook, as Lichess writes it.
        WHEN variant = 'chess960' OR origin & 7 <> 4 OR dest & 7 NOT IN (0, 7) THEN square_name(dest)
        -- Standard: king to its destination, g or c file.
        ELSE square_name((origin & 56) + CASE WHEN dest & 7 = 7 THEN 6 ELSE 2 END)
    END
    WHEN field BETWEEN 2 AND 6 THEN square_name(origin) || square_name(dest) || substr('??nbrqk', field + 1, 1)
    ELSE square_name(origin) || square_name(dest)
END
FROM (SELECT code & 65535 AS c, code & 63 AS origin, (code >> 6) & 63 AS dest, (code >> 12) & 7 AS field) m
$$;
COMMENT ON FUNCTION move_uci(integer, game_variant) IS 'One move code (a ply of games.moves, 0-65535, or explorer_moves.move, a signed smallint) as UCI: e2e4, e7e8q, P@e4 (drop), 0000 (null move); castling as moves.uci writes it: king to its destination, king to rook in chess960 (and wherever standard castling geometry is impossible).';

CREATE FUNCTION moves_uci(moves bytea, variant game_variant) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
AS $$
SELECT coalesce(array_agg(move_uci(get_byte(moves, 2 * i) * 256 + get_byte(moves, 2 * i + 1), variant)
                          ORDER BY i), '{}')
FROM generate_series(0, length(moves) / 2 - 1) AS i
$$;
COMMENT ON FUNCTION moves_uci(bytea, game_variant) IS 'Every move of games.moves as UCI (move_uci), ply 1 first: readable for every game, also those imported with --games-only. Call as moves_uci(g.moves, g.variant).';

CREATE FUNCTION moves_san(game bigint) RETURNS text[]
LANGUAGE sql STABLE PARALLEL SAFE STRICT
AS $$
SELECT CASE WHEN g.positions_max_ply = 0 THEN NULL
            ELSE coalesce((SELECT array_agg(m.san ORDER BY m.ply) FROM moves m WHERE m.game_id = g.id), '{}')
       END
FROM games g WHERE g.id = game
$$;
COMMENT ON FUNCTION moves_san(bigint) IS 'The SAN of a game''s moves rows, ply 1 first: every move unless games.positions_max_ply is set, then its first positions_max_ply moves; NULL for a game imported with --games-only (no moves rows; SAN needs the rules of chess, which SQL has not: pgnload game show ID prints the game as PGN).';

CREATE FUNCTION speed_code(initial_s integer, increment_s integer) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT (CASE WHEN initial_s IS NULL OR increment_s IS NULL THEN 5
             WHEN initial_s::bigint + 40 * increment_s::bigint < 30 THEN 0
             WHEN initial_s::bigint + 40 * increment_s::bigint < 180 THEN 1
             WHEN initial_s::bigint + 40 * increment_s::bigint < 480 THEN 2
             WHEN initial_s::bigint + 40 * increment_s::bigint < 1500 THEN 3
             WHEN initial_s::bigint + 40 * increment_s::bigint < 21600 THEN 4
             ELSE 5 END)::smallint
$$;
COMMENT ON FUNCTION speed_code(integer, integer) IS 'The Lichess speed code (0-5, see explorer_moves.speed) of a clock: speed_code(games.time_initial_s, games.time_increment_s).';

CREATE FUNCTION speed_name(speed smallint) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
AS $$
SELECT (ARRAY['ultraBullet', 'bullet', 'blitz', 'rapid', 'classical', 'correspondence'])[speed + 1]
$$;
COMMENT ON FUNCTION speed_name(smallint) IS 'A speed code as the Lichess explorer names it: 0 ultraBullet, 1 bullet, 2 blitz, 3 rapid, 4 classical, 5 correspondence.';

CREATE FUNCTION month_text(month integer) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
AS $$
SELECT CASE WHEN month >= 0
            THEN lpad((month / 12)::text, 4, '0') || '-' || lpad((month % 12 + 1)::text, 2, '0')
       END
$$;
COMMENT ON FUNCTION month_text(integer) IS 'A month code (year x 12 + month - 1) as YYYY-MM; NULL for -1 (no date).';

CREATE FUNCTION month_code(at timestamptz) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
AS $$
SELECT (extract(year FROM at AT TIME ZONE 'UTC') * 12 + extract(month FROM at AT TIME ZONE 'UTC') - 1)::integer
$$;
COMMENT ON FUNCTION month_code(timestamptz) IS 'The month code of a time in UTC, as explorer_moves.month: WHERE month >= month_code(''2025-01-01'').';

-- Readable views.
CREATE VIEW games_readable AS
SELECT g.id, g.source, g.external_id,
       CASE WHEN g.source = 'lichess' THEN 'https://lichess.org/' || g.external_id END AS url,
       w.username AS white, w.title AS white_title, g.white_elo,
       b.username AS black, b.title AS black_title, g.black_elo,
       result_text(g.result) AS result, g.termination, g.variant,
       g.time_control, speed_name(speed_code(g.time_initial_s, g.time_increment_s)) AS speed,
       g.eco, g.opening, e.name AS event, g.site, g.round, g.started_at, g.ply_count,
       moves_uci(g.moves, g.variant) AS moves_uci, moves_san(g.id) AS moves_san,
       g.positions_max_ply, g.start_fen
FROM games g
LEFT JOIN players w ON w.id = g.white_player_id
LEFT JOIN players b ON b.id = g.black_player_id
LEFT JOIN events e ON e.id = g.event_id;
COMMENT ON VIEW games_readable IS 'games with names, readable result, speed and moves. Columns not selected are not computed: SELECT white, black, result FROM games_readable reads no moves.';
COMMENT ON COLUMN games_readable.id IS 'games.id (pgnload game show ID).';
COMMENT ON COLUMN games_readable.source IS 'games.source.';
COMMENT ON COLUMN games_readable.external_id IS 'games.external_id (the Lichess id for source lichess).';
COMMENT ON COLUMN games_readable.url IS 'https://lichess.org/ID for a Lichess game, else NULL.';
COMMENT ON COLUMN games_readable.white IS 'White''s name.';
COMMENT ON COLUMN games_readable.white_title IS 'White''s title (GM, BOT, ...).';
COMMENT ON COLUMN games_readable.white_elo IS 'White''s rating.';
COMMENT ON COLUMN games_readable.black IS 'Black''s name.';
COMMENT ON COLUMN games_readable.black_title IS 'Black''s title.';
COMMENT ON COLUMN games_readable.black_elo IS 'Black''s rating.';
COMMENT ON COLUMN games_readable.result IS '1-0, 0-1, 1/2-1/2 or *.';
COMMENT ON COLUMN games_readable.termination IS 'How it ended (game_termination).';
COMMENT ON COLUMN games_readable.variant IS 'The variant.';
COMMENT ON COLUMN games_readable.time_control IS 'The TimeControl tag (initial+increment in seconds).';
COMMENT ON COLUMN games_readable.speed IS 'ultraBullet, bullet, blitz, rapid, classical or correspondence.';
COMMENT ON COLUMN games_readable.eco IS 'ECO code.';
COMMENT ON COLUMN games_readable.opening IS 'Opening name.';
COMMENT ON COLUMN games_readable.event IS 'The event''s name.';
COMMENT ON COLUMN games_readable.site IS 'The Site tag.';
COMMENT ON COLUMN games_readable.round IS 'The Round tag.';
COMMENT ON COLUMN games_readable.started_at IS 'When it began (UTC).';
COMMENT ON COLUMN games_readable.ply_count IS 'Half-moves.';
COMMENT ON COLUMN games_readable.moves_uci IS 'Every move in UCI (moves_uci): always complete, also with --games-only.';
COMMENT ON COLUMN games_readable.moves_san IS 'The moves in SAN from the moves rows (moves_san): complete when positions_max_ply is NULL, its first positions_max_ply moves otherwise, NULL with --games-only.';
COMMENT ON COLUMN games_readable.positions_max_ply IS 'NULL when moves_san is complete, else how many moves it holds.';
COMMENT ON COLUMN games_readable.start_fen IS 'The FEN the game started from, when not its variant''s start.';

CREATE VIEW explorer_moves_readable AS
SELECT x.position_id, p.normalized_fen AS fen, x.variant, speed_name(x.speed) AS speed,
       x.rating_group, month_text(x.month) AS month, move_uci(x.move, x.variant) AS uci,
       x.games, x.white, x.draws, x.black,
       x.rating_sum / nullif(x.rated_games, 0) AS average_rating, x.last_played, x.top_game_ids
FROM explorer_moves x
LEFT JOIN positions p ON p.id = x.position_id;
COMMENT ON VIEW explorer_moves_readable IS 'explorer_moves decoded: speed and month by name, the move in UCI, the position''s FEN. Sum a key''s rows (a sharded layout keeps several). pgnload explore answers with SAN and also counts queued positions.';
COMMENT ON COLUMN explorer_moves_readable.position_id IS 'positions.id.';
COMMENT ON COLUMN explorer_moves_readable.fen IS 'The position''s normalized FEN (positions.normalized_fen).';
COMMENT ON COLUMN explorer_moves_readable.variant IS 'The variant.';
COMMENT ON COLUMN explorer_moves_readable.speed IS 'ultraBullet ... correspondence.';
COMMENT ON COLUMN explorer_moves_readable.rating_group IS 'Rating band lower bound; -1 unrated.';
COMMENT ON COLUMN explorer_moves_readable.month IS 'YYYY-MM, NULL without a date.';
COMMENT ON COLUMN explorer_moves_readable.uci IS 'The move in UCI.';
COMMENT ON COLUMN explorer_moves_readable.games IS 'Games counted.';
COMMENT ON COLUMN explorer_moves_readable.white IS 'Won by White.';
COMMENT ON COLUMN explorer_moves_readable.draws IS 'Drawn.';
COMMENT ON COLUMN explorer_moves_readable.black IS 'Won by Black.';
COMMENT ON COLUMN explorer_moves_readable.average_rating IS 'Average of the rated games'' average ratings, floored; NULL without one.';
COMMENT ON COLUMN explorer_moves_readable.last_played IS 'Latest start of the games counted.';
COMMENT ON COLUMN explorer_moves_readable.top_game_ids IS 'games.id of the best-rated games, best first.';

-- The objects of a sharded layout built before this migration (built
-- after it, crates/db/src/shards.rs comments them).
DO $$
DECLARE part record;
BEGIN
    IF to_regclass('game_keys') IS NOT NULL THEN
        COMMENT ON TABLE game_keys IS 'Sharded layout: one row per game identity, claimed before the game is written (games cannot keep (source, external_id) unique across shards).';
        COMMENT ON COLUMN game_keys.external_id IS 'games.external_id.';
        COMMENT ON COLUMN game_keys.lichess IS 'Whether games.source is lichess.';
        COMMENT ON COLUMN game_keys.game_id IS 'The games.id the game gets.';
        COMMENT ON COLUMN game_keys.import_file_id IS 'import_files.id of the input that claimed it.';
        COMMENT ON COLUMN game_keys.game_number IS 'Its number in that input.';
    END IF;
    IF EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'explorer_moves'::regclass
                                          AND attname = 'anchor_game_id' AND NOT attisdropped) THEN
        COMMENT ON COLUMN explorer_moves.anchor_game_id IS 'Sharded layout: a game the row counts, whose shard holds the row (a key may have several rows: sum them).';
    END IF;
    FOR part IN
        SELECT c.oid::regclass AS partition, i.inhparent::regclass AS parent
        FROM pg_class c JOIN pg_inherits i ON i.inhrelid = c.oid
        WHERE c.relkind = 'f' AND c.relnamespace = current_schema()::regnamespace
    LOOP
        EXECUTE format('COMMENT ON FOREIGN TABLE %s IS %L', part.partition,
                       format('Partition of %s on a shard server (postgres_fdw): query %s.',
                              part.parent, part.parent));
    END LOOP;
END
$$;
