-- pgnload schema: each explorer counter row lists its most recent games
-- (issue 29).
--
-- `explore` lists a position's top games (by Lichess's rank of their
-- rating band and speed, then the most recent) and its recent games (the
-- most recent). At a million games, finding them cost most of an answer:
-- a position of a few thousand games was a scan of every one of them in
-- `games` (78% of the server's database time over a stream of new
-- questions; sql/0024_explorer_top_games_order.sql's walks serve the
-- frequent positions). The Lichess explorer keeps game ids with its
-- counters for this; the rows here kept the best-rated games
-- (sql/0013_explorer_top_games.sql), an order Lichess does not list
-- games in, and read only for the game of a move played once.
--
-- Each row now lists its 8 (pgnload's LISTED_PER_ROW, the most games
-- Lichess lists, top and recent together) most recent listable games
-- (a result, both ratings, a date), the most recent first, then the
-- highest id: ids, start times and both ratings added (what ranks a top
-- game: an average of 2800 or more is Lichess's 3200 band). The most
-- recent games of a position under any filter are each among the most
-- recent of their own row, and so are the first top games of a class
-- (rows split classes: speed and rating group), but for the 2800+ games
-- of a row of the 2500 group that lists only part of its games, where
-- `explore` walks instead. Kept as the lists before: merged by an
-- import's upsert (the most recent of both), recounted with the counts,
-- recomputed when a game listed is removed, folded on shards.
--
-- New column names, not new meanings under the old ones: a pgnload
-- built before this migration fails on the missing columns instead of
-- reading recent games as best-rated ones (its bulk load's held rows are
-- lost and recounted by the load's finish, as for 0021). Existing rows
-- are recounted here, as 0021 recounted them: a single node's lists row
-- by row from games + moves through the view (the games a running bulk
-- load holds, explorer_deferred, left out as there); a shard's rows
-- replaced by a recount of its games, one row per key anchored on the
-- lowest (the text of crates/app/src/explorer/sql.rs's counted! as of
-- this migration); the coordinator's rows are its shards'. As for 0018,
-- migrate each shard before the coordinator.

ALTER TABLE explorer_moves
    ADD COLUMN listed_game_ids     bigint[],
    ADD COLUMN listed_game_started timestamptz[],
    ADD COLUMN listed_game_ratings bigint[];

DO $$
BEGIN
    IF to_regclass('pgnload_shard_of') IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM explorer_moves) THEN
            DELETE FROM explorer_moves;
            INSERT INTO explorer_moves (position_id, variant, speed, rating_group, month, move,
                                        games, white, draws, black,
                                        mover_rated_games, mover_rating_sum, last_played,
                                        listed_game_ids, listed_game_started,
                                        listed_game_ratings, anchor_game_id)
            SELECT position_id, variant, speed, rating_group, month, move,
                   count(*)::integer, (count(*) FILTER (WHERE result = 1))::integer,
                   (count(*) FILTER (WHERE result = 0))::integer,
                   (count(*) FILTER (WHERE result = -1))::integer,
                   count(mover_rating)::integer, coalesce(sum(mover_rating), 0)::bigint,
                   max(started_at),
                   (array_agg(game_id ORDER BY started_at DESC, game_id DESC)
                      FILTER (WHERE result IS NOT NULL AND rating_sum IS NOT NULL
                                    AND month >= 0))[1:8],
                   (array_agg(started_at ORDER BY started_at DESC, game_id DESC)
                      FILTER (WHERE result IS NOT NULL AND rating_sum IS NOT NULL
                                    AND month >= 0))[1:8],
                   (array_agg(rating_sum ORDER BY started_at DESC, game_id DESC)
                      FILTER (WHERE result IS NOT NULL AND rating_sum IS NOT NULL
                                    AND month >= 0))[1:8],
                   min(game_id)
            FROM explorer_game_moves
            GROUP BY position_id, variant, speed, rating_group, month, move;
        END IF;
    ELSIF NOT EXISTS (SELECT 1 FROM pgnload_shards) THEN
        -- Only rows that can list a game (a rating group and a month).
        UPDATE explorer_moves e
        SET listed_game_ids = r.ids, listed_game_started = r.started,
            listed_game_ratings = r.ratings
        FROM (SELECT position_id, variant, speed, rating_group, month, move,
                     (array_agg(game_id ORDER BY started_at DESC, game_id DESC))[1:8] AS ids,
                     (array_agg(started_at ORDER BY started_at DESC, game_id DESC))[1:8]
                       AS started,
                     (array_agg(rating_sum ORDER BY started_at DESC, game_id DESC))[1:8]
                       AS ratings
              FROM explorer_game_moves v
              WHERE position_id IN (SELECT position_id FROM explorer_moves
                                    WHERE rating_group >= 0 AND month >= 0)
                AND result IS NOT NULL AND rating_sum IS NOT NULL AND month >= 0
                AND NOT EXISTS (SELECT 1 FROM explorer_deferred d
                                WHERE v.game_id BETWEEN d.first_game_id AND d.last_game_id)
              GROUP BY position_id, variant, speed, rating_group, month, move) r
        WHERE e.position_id = r.position_id AND e.variant = r.variant AND e.speed = r.speed
          AND e.rating_group = r.rating_group AND e.month = r.month AND e.move = r.move
          AND e.games > 0;
    END IF;
END
$$;

DROP VIEW explorer_moves_readable;
CREATE VIEW explorer_moves_readable AS
SELECT x.position_id, p.normalized_fen AS fen, x.variant, speed_name(x.speed) AS speed,
       x.rating_group, month_text(x.month) AS month, move_uci_lichess(x.move, x.variant) AS uci,
       x.games, x.white, x.draws, x.black,
       floor((2 * x.mover_rating_sum + x.mover_rated_games)::numeric
             / nullif(2 * x.mover_rated_games, 0))::bigint AS average_rating,
       x.last_played, x.listed_game_ids
FROM explorer_moves x
LEFT JOIN positions p ON p.id = x.position_id;

ALTER TABLE explorer_moves
    DROP CONSTRAINT explorer_moves_top_games_check,
    DROP COLUMN top_game_ratings,
    DROP COLUMN top_game_ids,
    -- NOT VALID, as 0013's: every row was just written by the statements
    -- above; new rows are checked.
    ADD CONSTRAINT explorer_moves_listed_games_check
        CHECK ((listed_game_ids IS NULL) = (listed_game_started IS NULL)
               AND (listed_game_ids IS NULL) = (listed_game_ratings IS NULL)
               AND cardinality(listed_game_ids) = cardinality(listed_game_started)
               AND cardinality(listed_game_ids) = cardinality(listed_game_ratings)) NOT VALID;

COMMENT ON COLUMN explorer_moves.listed_game_ids IS 'games.id of the most recent listable games counted (a result, both ratings, a date; at most pgnload''s LISTED_PER_ROW, 8), the most recent first, ties by highest id; NULL: none. Where explore finds a position''s top and recent games.';
COMMENT ON COLUMN explorer_moves.listed_game_started IS 'games.started_at of those games, in the same order.';
COMMENT ON COLUMN explorer_moves.listed_game_ratings IS 'white_elo + black_elo of those games, in the same order (an average of 2800 or more ranks in Lichess''s 3200 band).';
COMMENT ON VIEW explorer_moves_readable IS 'explorer_moves decoded: speed and month by name, the move in UCI as pgnload explore writes it, the position''s FEN. Sum a key''s rows (a sharded layout keeps several). pgnload explore answers with SAN and also counts queued positions.';
COMMENT ON COLUMN explorer_moves_readable.position_id IS 'positions.id.';
COMMENT ON COLUMN explorer_moves_readable.fen IS 'The position''s normalized FEN (positions.normalized_fen).';
COMMENT ON COLUMN explorer_moves_readable.variant IS 'The variant.';
COMMENT ON COLUMN explorer_moves_readable.speed IS 'ultraBullet ... correspondence.';
COMMENT ON COLUMN explorer_moves_readable.rating_group IS 'Rating band lower bound; -1 unrated.';
COMMENT ON COLUMN explorer_moves_readable.month IS 'YYYY-MM, NULL without a date.';
COMMENT ON COLUMN explorer_moves_readable.uci IS 'The move in UCI, castling king to rook (e1h1) as Lichess writes it (move_uci_lichess).';
COMMENT ON COLUMN explorer_moves_readable.games IS 'Games counted.';
COMMENT ON COLUMN explorer_moves_readable.white IS 'Won by White.';
COMMENT ON COLUMN explorer_moves_readable.draws IS 'Drawn.';
COMMENT ON COLUMN explorer_moves_readable.black IS 'Won by Black.';
COMMENT ON COLUMN explorer_moves_readable.average_rating IS 'The average rating of the player who played the move, over the games where that player has a rating, rounded half up (as pgnload explore and Lichess); NULL without one.';
COMMENT ON COLUMN explorer_moves_readable.last_played IS 'Latest start of the games counted.';
COMMENT ON COLUMN explorer_moves_readable.listed_game_ids IS 'games.id of the most recent listable games, the most recent first.';
