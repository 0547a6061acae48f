-- pgnload schema: the explorer's categories of a game as a view of their
-- own, and an index that lists games by average rating.
--
-- `explore` lists the top-rated games that reached a position. Through
-- explorer_game_moves that reads every moves row of the position: 365 ms
-- for the start position of 20,000 games, and linear in games beyond. For
-- a frequent position it is cheaper to walk games from the best rated down
-- and keep those with a moves row at the position (src/query/explorer.rs
-- says when each is used). That walk filters on the categories, so they
-- are defined once, here, in a view the planner flattens into the walk
-- (plain expressions over one table: its ORDER BY reaches the index
-- below), and explorer_game_moves is the same view as before, read from it.

-- One row per game: its explorer categories (speed: the Lichess estimate
-- initial + 40 × increment, as Speed::from_clock; rating_group: the band
-- of floor((white + black) / 2), as RatingGroup; month: year * 12 +
-- month - 1 of the UTC start, as Month).
CREATE VIEW explorer_games AS
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
       -- Both ratings added: orders games as their exact average does,
       -- and cheaply (explore's top games, games_rating_sum_idx).
       g.white_elo::bigint + g.black_elo AS rating_sum
FROM (SELECT id, variant, time_initial_s, time_increment_s, result, started_at, moves,
             white_elo, black_elo,
             floor((white_elo::numeric + black_elo) / 2)::bigint AS average,
             -- The proleptic year as Rust's Month counts it (PostgreSQL
             -- has no year 0: its -1 is 1 BC, chrono's 0).
             extract(year FROM started_at AT TIME ZONE 'UTC')
               + CASE WHEN extract(year FROM started_at AT TIME ZONE 'UTC') < 0 THEN 1 ELSE 0 END
               AS year
      FROM games) g;

-- The same rows and columns as version 4's definition, and rating_sum.
CREATE OR REPLACE VIEW explorer_game_moves AS
SELECT gm.position_id, gm.game_id,
       (c.code - CASE WHEN c.code >= 32768 THEN 65536 ELSE 0 END)::smallint AS move,
       e.variant, e.speed, e.rating_group, e.month, e.result, e.average, e.started_at,
       e.rating_sum
FROM (SELECT DISTINCT ON (m.game_id, m.position_id) m.game_id, m.position_id, m.ply
      FROM moves m ORDER BY m.game_id, m.position_id, m.ply DESC) gm
JOIN explorer_games e ON e.game_id = gm.game_id
CROSS JOIN LATERAL (SELECT get_byte(e.moves, 2 * gm.ply - 2) * 256
                           + get_byte(e.moves, 2 * gm.ply - 1) AS code) c;

-- Games by both ratings added, best first (ties by id, as explore lists
-- them); unrated games last. The expression is explorer_games.rating_sum
-- (integer arithmetic: the numeric average costs a seq scan 10x more), so
-- a walk down this index stops after the games it returns.
CREATE INDEX games_rating_sum_idx
    ON games ((white_elo::bigint + black_elo) DESC NULLS LAST, id);
