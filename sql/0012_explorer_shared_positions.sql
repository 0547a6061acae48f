-- pgnload schema: explorer counters for shared positions only.
--
-- Four in five counter rows counted a position that one game alone
-- reached (measured on 30,000 generated games: 1.49M of 1.85M rows), and
-- writing them cost imports about 45% of their time again. Such a
-- position's answer is read from its one game's moves row as cheaply as
-- from a counter row. So a position's rows in explorer_moves are either
-- COMPLETE (they count every game that reached it) or the position is
-- QUEUED here, or it has NO ROWS; in the last two cases `explore` groups
-- its games from the view explorer_game_moves, as `verify --explorer` and
-- `db explorer enable` count them.
--
-- Who gives a position rows (src/ingest/explorer.rs):
-- * an import batch (either mode) adds its games to positions that have
--   rows, and writes rows for the positions it created and reached with
--   two games or more, after claiming each by queueing it here and taking
--   it out again in its transaction (an import that reached one meanwhile
--   queued it first, and it stays queued); it queues the other positions
--   that two games may have reached;
-- * the queue is recounted from games + moves with the import lock held
--   exclusively (no import adds games meanwhile): at the end of an import
--   run that is alone, and by `pgnload db explorer compact`;
-- * `db explorer enable` counts the positions two games or more reached
--   (with the lock held exclusively);
-- * a bulk load queues every position it merged duplicates into, whose
--   games were counted apart, and drops their rows.
-- A position's rows are never removed while imports run: taking a game
-- out (`game delete`, `game put`, a backfill) leaves a row at zero games
-- rather than deleting it, so an import that saw rows keeps finding them.
CREATE TABLE explorer_pending (
    position_id bigint PRIMARY KEY
);

ALTER TABLE explorer_moves
    DROP CONSTRAINT explorer_moves_games_check,
    ADD CONSTRAINT explorer_moves_games_check CHECK (games >= 0);

-- Advanced when queued positions are counted or the counters are filled
-- (`pgnload db explorer compact|enable`, an import run's end): a batch
-- that created positions trusts that nobody gave them rows since only if
-- it reads the same value before creating them and before counting.
CREATE SEQUENCE explorer_rows_epoch;
