-- pgnload schema: statistics on a game's explorer categories (issue 29).
--
-- `explore` with a speed or rating filter (`--speeds`, `--ratings`, the
-- server's `speeds=`, `ratings=`) was ten times slower than without on
-- frequent positions: its walk to the recent games (RECENT_WALK in
-- crates/app/src/explorer/sql.rs) filters games on explorer_games' speed
-- and rating_group, CASE expressions over games' columns of which
-- PostgreSQL keeps no statistics. It took `speed = ANY('{2,3}') AND
-- rating_group = ANY('{1600,1800,2000}')` for a filter that keeps 1 game
-- in 20,000 (0.5% per value asked, multiplied) where it keeps 26%, so it
-- read and filtered every game and sorted them (206 ms for the start
-- position of 20,000 games, 17,940 buffers, and linear in games) instead
-- of walking games_newest_idx from the most recent game until 8 reached
-- the position (0.5 ms, 30 buffers).
--
-- These statistics are of the very expressions of the view
-- (sql/0021_explorer_mover_rating.sql's explorer_games: speed,
-- rating_group and month, with the subquery's average and year written
-- out as the planner flattens them): ANALYZE computes their values'
-- frequencies as it does for an indexed expression, and their joint
-- most common values (a speed and a band together). With them the
-- filter's estimate is 5,194 games of 20,000 (26%) and the walk is
-- chosen. The expressions must stay the view's: a test
-- (explorer::the_planner_knows_how_many_games_each_category_holds)
-- fails when either changes alone.
--
-- Built here by ANALYZE (a sample of games: seconds at a million), then
-- by every ANALYZE of games (a bulk load's finish, autovacuum). On a
-- sharded layout each shard has them (its games are a table, migrated as
-- a single node); the coordinator's games are partitions on the shards,
-- which it does not analyze: it gets none.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pgnload_shards) THEN
        CREATE STATISTICS games_explorer_categories ON
            ((CASE WHEN time_initial_s IS NULL OR time_increment_s IS NULL THEN 5
                   WHEN time_initial_s::bigint + 40 * time_increment_s::bigint < 30 THEN 0
                   WHEN time_initial_s::bigint + 40 * time_increment_s::bigint < 180 THEN 1
                   WHEN time_initial_s::bigint + 40 * time_increment_s::bigint < 480 THEN 2
                   WHEN time_initial_s::bigint + 40 * time_increment_s::bigint < 1500 THEN 3
                   WHEN time_initial_s::bigint + 40 * time_increment_s::bigint < 21600 THEN 4
                   ELSE 5 END)::smallint),
            ((CASE WHEN floor((white_elo::numeric + black_elo) / 2)::bigint IS NULL THEN -1
                   WHEN floor((white_elo::numeric + black_elo) / 2)::bigint >= 2500 THEN 2500
                   WHEN floor((white_elo::numeric + black_elo) / 2)::bigint >= 2200 THEN 2200
                   WHEN floor((white_elo::numeric + black_elo) / 2)::bigint >= 2000 THEN 2000
                   WHEN floor((white_elo::numeric + black_elo) / 2)::bigint >= 1800 THEN 1800
                   WHEN floor((white_elo::numeric + black_elo) / 2)::bigint >= 1600 THEN 1600
                   WHEN floor((white_elo::numeric + black_elo) / 2)::bigint >= 1400 THEN 1400
                   WHEN floor((white_elo::numeric + black_elo) / 2)::bigint >= 1200 THEN 1200
                   WHEN floor((white_elo::numeric + black_elo) / 2)::bigint >= 1000 THEN 1000
                   ELSE 0 END)::smallint),
            (CASE WHEN started_at IS NULL
                       OR (extract(year FROM started_at AT TIME ZONE 'UTC')
                           + CASE WHEN extract(year FROM started_at AT TIME ZONE 'UTC') < 0
                                  THEN 1 ELSE 0 END) NOT BETWEEN 0 AND 9999 THEN -1
                  ELSE ((extract(year FROM started_at AT TIME ZONE 'UTC')
                         + CASE WHEN extract(year FROM started_at AT TIME ZONE 'UTC') < 0
                                THEN 1 ELSE 0 END) * 12
                        + extract(month FROM started_at AT TIME ZONE 'UTC') - 1)::integer
             END)
        FROM games;
        COMMENT ON STATISTICS games_explorer_categories IS 'The explorer categories of a game as explorer_games computes them (speed, rating_group, month): how many games each holds, for the plans of explore''s filtered walks (migration 0023). Its expressions are the view''s.';
        ANALYZE games;
    END IF;
END
$$;
