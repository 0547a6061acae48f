-- pgnload schema, version 4: the opening explorer's counters.
--
-- One row per (position, move played from it, variant, speed, rating
-- group, month): how many games played that move there and how they
-- ended, so that "which moves were played here, and how did they score"
-- reads a few hundred rows instead of every moves row of the position.
-- A game counts once per position it reached and continued from, with the
-- move it played at its LAST visit there (as the Lichess explorer counts,
-- so that a repetition does not count a game twice). Opt-in per database
-- (explorer_state below): keeping them costs imports about half their
-- time again, which users who only import should not pay. Once
-- `pgnload db explorer enable` has filled them, they are kept by the
-- import in the same transaction as the games they count (both modes; a
-- bulk load's merge of duplicate positions merges their counters), and by
-- `pgnload game delete`; `pgnload verify --explorer` recounts them from
-- games + moves.
-- Citus: distribute by position_id.
CREATE TABLE explorer_moves (
    position_id  bigint       NOT NULL,
    variant      game_variant NOT NULL,
    -- Speed code 0-5 (ultraBullet … correspondence; no clock = correspondence).
    speed        smallint     NOT NULL CHECK (speed BETWEEN 0 AND 5),
    -- Lower bound of the band of the average rating (0, 1000, … 2500);
    -- -1: a rating is missing (such games count in no --ratings filter).
    rating_group smallint     NOT NULL,
    -- Months since year 0 (year * 12 + month - 1); -1: no date.
    month        integer      NOT NULL,
    -- The move's 2-byte code (src/chess/encoding.rs), its bits as a signed smallint.
    move         smallint     NOT NULL,
    games        integer      NOT NULL CHECK (games > 0),
    white        integer      NOT NULL,
    draws        integer      NOT NULL,
    black        integer      NOT NULL,
    -- Games with both ratings, and the sum of their average ratings.
    rated_games  integer      NOT NULL,
    rating_sum   bigint       NOT NULL,
    last_played  timestamptz,
    -- Named: `db explorer enable` drops it while it fills the table.
    CONSTRAINT explorer_moves_pkey PRIMARY KEY (position_id, variant, speed, rating_group, month, move)
);

-- What each game contributes to explorer_moves, one row per (game, position
-- it continued from): the categories of the game and the move of its last
-- visit. `game delete` and `verify --explorer` group this view
-- (src/ingest/explorer.rs); import batches count the same in memory with
-- src/chess/category.rs, which verify --explorer checks. A filter on game_id or position_id reaches
-- the moves index (both are DISTINCT ON columns).
-- speed: the Lichess estimate initial + 40 × increment (Speed::from_clock);
-- rating_group: the band of floor((white + black) / 2) (RatingGroup).
CREATE VIEW explorer_game_moves AS
SELECT gm.position_id, gm.game_id,
       (c.code - CASE WHEN c.code >= 32768 THEN 65536 ELSE 0 END)::smallint AS move,
       g.variant,
       (CASE WHEN g.time_initial_s IS NULL OR g.time_increment_s IS NULL THEN 5
             WHEN g.time_initial_s::bigint + 40 * g.time_increment_s::bigint < 30 THEN 0
             WHEN g.time_initial_s::bigint + 40 * g.time_increment_s::bigint < 180 THEN 1
             WHEN g.time_initial_s::bigint + 40 * g.time_increment_s::bigint < 480 THEN 2
             WHEN g.time_initial_s::bigint + 40 * g.time_increment_s::bigint < 1500 THEN 3
             WHEN g.time_initial_s::bigint + 40 * g.time_increment_s::bigint < 21600 THEN 4
             ELSE 5 END)::smallint AS speed,
       (CASE WHEN r.average IS NULL THEN -1
             WHEN r.average >= 2500 THEN 2500 WHEN r.average >= 2200 THEN 2200
             WHEN r.average >= 2000 THEN 2000 WHEN r.average >= 1800 THEN 1800
             WHEN r.average >= 1600 THEN 1600 WHEN r.average >= 1400 THEN 1400
             WHEN r.average >= 1200 THEN 1200 WHEN r.average >= 1000 THEN 1000
             ELSE 0 END)::smallint AS rating_group,
       CASE WHEN g.started_at IS NULL OR d.year NOT BETWEEN 0 AND 9999 THEN -1
            ELSE (d.year * 12 + d.month - 1)::integer
       END AS month,
       g.result, r.average, g.started_at
FROM (SELECT DISTINCT ON (m.game_id, m.position_id) m.game_id, m.position_id, m.ply
      FROM moves m ORDER BY m.game_id, m.position_id, m.ply DESC) gm
JOIN games g ON g.id = gm.game_id
CROSS JOIN LATERAL (SELECT get_byte(g.moves, 2 * gm.ply - 2) * 256
                           + get_byte(g.moves, 2 * gm.ply - 1) AS code) c
CROSS JOIN LATERAL (SELECT floor((g.white_elo::numeric + g.black_elo) / 2)::bigint AS average) r
-- The proleptic year as Rust's Month counts it (PostgreSQL has no year 0:
-- its -1 is 1 BC, chrono's 0).
CROSS JOIN LATERAL (SELECT y + CASE WHEN y < 0 THEN 1 ELSE 0 END AS year, m AS month
                    FROM (SELECT extract(year FROM g.started_at AT TIME ZONE 'UTC') AS y,
                                 extract(month FROM g.started_at AT TIME ZONE 'UTC') AS m) x) d;

-- Whether this database keeps the counters: one row, changed only by
-- `pgnload db explorer enable|disable` in the transaction that fills or
-- empties explorer_moves, so the flag and the table never disagree. An
-- import reads it once, under the import lock those commands take
-- exclusively; `game delete` reads it FOR SHARE in its transaction.
CREATE TABLE explorer_state (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    enabled    boolean NOT NULL DEFAULT false,
    changed_at timestamptz
);
INSERT INTO explorer_state DEFAULT VALUES;
