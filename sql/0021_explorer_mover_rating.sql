-- pgnload schema: the explorer's average rating is the mover's (issue 29).
--
-- The Lichess explorer's `averageRating` of a move is the average rating
-- of the player who played it (lila-openingexplorer sums the mover's
-- rating per game), where pgnload's counters summed floor((white + black)
-- / 2) of the games with both ratings (1.a4 in the Lichess sample: 741
-- here, 464 by Lichess's rule). The counters now sum the mover's rating:
--
-- * explorer_games gains each game's ratings and which side moves first
--   (the FEN tag's second field: sides alternate in every variant), and
--   explorer_game_moves the mover's rating at each position
--   (mover_rating: White's when White moves at that ply, else Black's);
-- * explorer_moves' rated_games / rating_sum (games with both ratings,
--   their averages added) are replaced by mover_rated_games /
--   mover_rating_sum (games whose mover has a rating, those ratings
--   added). New names, not new meanings under old names: a pgnload built
--   before this migration that still runs (an import, a server) fails on
--   the missing columns instead of writing or reading averages of the
--   other kind, and a bulk load of such a build that held counter rows
--   loses them, which its explorer_deferred records make the load's
--   finish recount (sql/0016_explorer_deferred.sql).
--
-- Existing rows are recounted here, in this migration's transaction, from
-- games + moves through the view: nothing reads a wrong average after
-- it. On a single node, each row's mover counters are those of the games
-- it counts (every game of its key but a running bulk load's, whose rows
-- are held elsewhere: explorer_deferred): one grouping of the moves rows
-- of the positions with rows, about the time of `pgnload db explorer
-- enable`. A shard of a sharded layout (pgnload_shard_of) keeps rows of
-- counts added per batch, which cannot be recounted one by one: its rows
-- are replaced by one row per key counting its own games, anchored on
-- the lowest of them, as `db explorer enable` writes them there (the
-- text of crates/app/src/explorer/sql.rs's counted! as of this
-- migration). The coordinator's partitions are foreign tables: its
-- columns change here, its rows on the shards. As for 0018, migrate each
-- shard (`pgnload --url <shard> db migrate`) before the coordinator.

CREATE OR REPLACE VIEW explorer_games AS
SELECT g.id AS game_id, g.variant,
       (CASE WHEN g.time_initial_s IS NULL OR g.time_increment_s IS NULL THEN 5
             WHEN g.time_initial_s::bigint + 40 * g.time_increment_s::bigint < 30 THEN 0
             WHEN g.time_initial_s::bigint + 40 * g.time_increment_s::bigint < 180 THEN 1
             WHEN g.time_initial_s::bigint + 40 * g.time_increment_s::bigint < 480 THEN 2
             WHEN g.time_initial_s::bigint + 40 * g.time_increment_s::bigint < 1500 THEN 3
             WHEN g.time_initial_s::bigint + 40 * g.time_increment_s::bigint < 21600 THEN 4
             ELSE 5 END)::smallint AS speed,
       (CASE WHEN g.average IS NULL THEN -1
             WHEN g.average >= 2500 THEN 2500 WHEN g.average >= 2200 THEN 2200
             WHEN g.average >= 2000 THEN 2000 WHEN g.average >= 1800 THEN 1800
             WHEN g.average >= 1600 THEN 1600 WHEN g.average >= 1400 THEN 1400
             WHEN g.average >= 1200 THEN 1200 WHEN g.average >= 1000 THEN 1000
             ELSE 0 END)::smallint AS rating_group,
       CASE WHEN g.started_at IS NULL OR g.year NOT BETWEEN 0 AND 9999 THEN -1
            ELSE (g.year * 12 + extract(month FROM g.started_at AT TIME ZONE 'UTC') - 1)::integer
       END AS month,
       g.result, g.average, g.started_at, g.moves,
       g.white_elo::bigint + g.black_elo AS rating_sum,
       g.white_elo, g.black_elo,
       -- The FEN tag's side to move (its second field; the tag is stored
       -- trimmed, as the game was replayed from it); White without one.
       CASE WHEN g.start_fen IS NULL THEN true
            ELSE (regexp_split_to_array(g.start_fen, '\s+'))[2] IS DISTINCT FROM 'b'
       END AS white_starts
FROM (SELECT id, variant, time_initial_s, time_increment_s, result, started_at, moves,
             white_elo, black_elo, start_fen,
             floor((white_elo::numeric + black_elo) / 2)::bigint AS average,
             extract(year FROM started_at AT TIME ZONE 'UTC')
               + CASE WHEN extract(year FROM started_at AT TIME ZONE 'UTC') < 0 THEN 1 ELSE 0 END
               AS year
      FROM games) g;

CREATE OR REPLACE VIEW explorer_game_moves AS
SELECT gm.position_id, gm.game_id,
       (c.code - CASE WHEN c.code >= 32768 THEN 65536 ELSE 0 END)::smallint AS move,
       e.variant, e.speed, e.rating_group, e.month, e.result, e.average, e.started_at,
       e.rating_sum,
       -- Ply 1 is the first side's move.
       CASE WHEN (gm.ply % 2 = 1) = e.white_starts THEN e.white_elo ELSE e.black_elo END
         AS mover_rating
FROM (SELECT DISTINCT ON (m.game_id, m.position_id) m.game_id, m.position_id, m.ply
      FROM moves m ORDER BY m.game_id, m.position_id, m.ply DESC) gm
JOIN explorer_games e ON e.game_id = gm.game_id
CROSS JOIN LATERAL (SELECT get_byte(e.moves, 2 * gm.ply - 2) * 256
                           + get_byte(e.moves, 2 * gm.ply - 1) AS code) c;

ALTER TABLE explorer_moves
    ADD COLUMN mover_rated_games integer NOT NULL DEFAULT 0,
    ADD COLUMN mover_rating_sum  bigint  NOT NULL DEFAULT 0;

-- The rows recounted: a shard's replaced by a recount of its games; a
-- single node's mover counters recounted row by row (rows no game of the
-- recount reaches keep 0: rows left at zero games by removals); the
-- coordinator's rows are its shards'. (PL/pgSQL plans each statement
-- when it runs: the coordinator plans neither.)
DO $$
BEGIN
    IF to_regclass('pgnload_shard_of') IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM explorer_moves) THEN
            DELETE FROM explorer_moves;
            INSERT INTO explorer_moves (position_id, variant, speed, rating_group, month, move,
                                        games, white, draws, black,
                                        mover_rated_games, mover_rating_sum, last_played,
                                        top_game_ratings, top_game_ids, anchor_game_id)
            SELECT position_id, variant, speed, rating_group, month, move,
                   count(*)::integer, (count(*) FILTER (WHERE result = 1))::integer,
                   (count(*) FILTER (WHERE result = 0))::integer,
                   (count(*) FILTER (WHERE result = -1))::integer,
                   count(mover_rating)::integer, coalesce(sum(mover_rating), 0)::bigint,
                   max(started_at),
                   (array_agg(rating_sum ORDER BY rating_sum DESC, game_id)
                      FILTER (WHERE rating_sum IS NOT NULL))[1:4],
                   (array_agg(game_id ORDER BY rating_sum DESC, game_id)
                      FILTER (WHERE rating_sum IS NOT NULL))[1:4],
                   min(game_id)
            FROM explorer_game_moves
            GROUP BY position_id, variant, speed, rating_group, month, move;
        END IF;
    ELSIF NOT EXISTS (SELECT 1 FROM pgnload_shards) THEN
        UPDATE explorer_moves e
        SET mover_rated_games = r.mover_rated_games, mover_rating_sum = r.mover_rating_sum
        FROM (SELECT position_id, variant, speed, rating_group, month, move,
                     count(mover_rating)::integer AS mover_rated_games,
                     coalesce(sum(mover_rating), 0)::bigint AS mover_rating_sum
              FROM explorer_game_moves v
              WHERE position_id IN (SELECT position_id FROM explorer_moves)
                AND NOT EXISTS (SELECT 1 FROM explorer_deferred d
                                WHERE v.game_id BETWEEN d.first_game_id AND d.last_game_id)
              GROUP BY position_id, variant, speed, rating_group, month, move) r
        WHERE e.position_id = r.position_id AND e.variant = r.variant AND e.speed = r.speed
          AND e.rating_group = r.rating_group AND e.month = r.month AND e.move = r.move;
    END IF;
END
$$;

ALTER TABLE explorer_moves
    ALTER COLUMN mover_rated_games DROP DEFAULT,
    ALTER COLUMN mover_rating_sum DROP DEFAULT;

-- Explore's UCI: castling king to rook in every variant, as Lichess
-- writes it (move_uci writes standard castling as moves.uci does).
CREATE FUNCTION move_uci_lichess(code integer, variant game_variant) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
AS $$
SELECT CASE WHEN code & 32768 = 0 AND (code >> 12) & 7 = 7
            THEN square_name(code & 63) || square_name((code >> 6) & 63)
            ELSE move_uci(code, variant)
       END
$$;

CREATE OR REPLACE VIEW explorer_moves_readable AS
SELECT x.position_id, p.normalized_fen AS fen, x.variant, speed_name(x.speed) AS speed,
       x.rating_group, month_text(x.month) AS month, move_uci_lichess(x.move, x.variant) AS uci,
       x.games, x.white, x.draws, x.black,
       floor((2 * x.mover_rating_sum + x.mover_rated_games)::numeric
             / nullif(2 * x.mover_rated_games, 0))::bigint AS average_rating,
       x.last_played, x.top_game_ids
FROM explorer_moves x
LEFT JOIN positions p ON p.id = x.position_id;

ALTER TABLE explorer_moves DROP COLUMN rated_games, DROP COLUMN rating_sum;

COMMENT ON COLUMN explorer_moves.mover_rated_games IS 'Of the games counted, those whose player to move at the position (who played the move) has a rating.';
COMMENT ON COLUMN explorer_moves.mover_rating_sum IS 'Those players'' ratings added: mover_rating_sum / mover_rated_games is the move''s average rating as Lichess computes it (the mover''s).';
COMMENT ON COLUMN explorer_games.white_elo IS 'games.white_elo.';
COMMENT ON COLUMN explorer_games.black_elo IS 'games.black_elo.';
COMMENT ON COLUMN explorer_games.white_starts IS 'Whether White plays the first move (ply 1): the side to move of games.start_fen, White without one.';
COMMENT ON COLUMN explorer_game_moves.mover_rating IS 'The rating of the player who played the move (White''s at an odd ply when White starts); NULL when unknown.';
COMMENT ON FUNCTION move_uci_lichess(integer, game_variant) IS 'move_uci, but castling written king to rook (e1h1) in every variant, as the Lichess explorer and pgnload explore write it.';
COMMENT ON VIEW explorer_moves_readable IS 'explorer_moves decoded: speed and month by name, the move in UCI as pgnload explore writes it, the position''s FEN. Sum a key''s rows (a sharded layout keeps several). pgnload explore answers with SAN and also counts queued positions.';
COMMENT ON COLUMN explorer_moves_readable.uci IS 'The move in UCI, castling king to rook (e1h1) as Lichess writes it (move_uci_lichess).';
COMMENT ON COLUMN explorer_moves_readable.average_rating IS 'The average rating of the player who played the move, over the games where that player has a rating, rounded half up (as pgnload explore and Lichess); NULL without one.';
