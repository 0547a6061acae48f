-- pgnload schema: the best-rated games of each explorer counter row.
--
-- `explore` lists the top-rated games that reached a position. Found at
-- query time (src/query/explorer.rs: a scan of the position's moves rows,
-- or a walk of games by rating probing moves), that read costs a random
-- read of `games` or `moves` per game passed; at 1,000,000 games (a
-- database larger than memory) it made the 95th percentile of `explore`
-- 300 ms cold, against 10 ms without top games. As the Lichess explorer
-- keeps game ids with its counters, each counter row now keeps its own
-- best games: the top-rated games of that (position, variant, speed,
-- rating group, month, move) are among the best of the rows a filter
-- selects, so the union of those rows' lists, sorted, holds the answer of
-- any filter, and `explore` reads a few games instead of walking them.
--
-- A row keeps the games with both ratings (the only ones listed), at
-- most pgnload's TOP_GAMES of them (src/store/counts.rs), ordered by both
-- ratings added, best first, ties by lowest id: top_game_ratings holds
-- white_elo + black_elo of each, top_game_ids their ids, in one order.
-- NULL: the row counts no rated game. Kept like the counts: by import
-- batches (merged into the row by explorer_top_games below), recounted
-- from the view with the counts, and recomputed by a removal of a game
-- that is in the list.
ALTER TABLE explorer_moves
    ADD COLUMN top_game_ratings bigint[],
    ADD COLUMN top_game_ids     bigint[],
    -- NOT VALID: every existing row has both NULL; new rows are checked.
    ADD CONSTRAINT explorer_moves_top_games_check
        CHECK ((top_game_ratings IS NULL) = (top_game_ids IS NULL)
               AND cardinality(top_game_ratings) = cardinality(top_game_ids)) NOT VALID;

-- The best `top` of the games given as two arrays (ratings added, ids;
-- one order, any order), in explore's order: what a row keeps when a
-- batch's games are merged into it. NULL when given none.
CREATE FUNCTION explorer_top_games(candidate_ratings bigint[], candidate_ids bigint[], top integer,
                                   OUT top_game_ratings bigint[], OUT top_game_ids bigint[])
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT array_agg(r ORDER BY r DESC, g), array_agg(g ORDER BY r DESC, g)
FROM (SELECT r, g FROM unnest(candidate_ratings, candidate_ids) AS u(r, g)
      ORDER BY r DESC, g LIMIT top) t
$$;

-- The rows already stored have no lists yet: on a single node their
-- positions are queued (sql/0012_explorer_shared_positions.sql), so
-- `explore` answers them from the games until the queue is counted, at
-- the end of the next import run alone or by `pgnload db explorer
-- compact`, which writes their rows again with lists. (A sharded layout
-- migrates its shards when it is built; see README "Scaling out".)
INSERT INTO explorer_pending (position_id)
SELECT DISTINCT position_id FROM explorer_moves
WHERE NOT EXISTS (SELECT 1 FROM pgnload_shards)
ORDER BY position_id
ON CONFLICT DO NOTHING;
