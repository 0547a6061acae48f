-- pgnload schema: moves indexed by (position_id, game_id) instead of
-- position_id alone.
--
-- `games --fen FEN --limit N` walks the games newest first for a frequent
-- position and asks of each whether it reached the position
-- (src/query/filter.rs). With only moves (position_id) and the primary key
-- (game_id, ply), PostgreSQL answered that by AND-ing two bitmaps for every
-- game walked, one of them every moves row of the position: it estimates
-- 18 times too many rows per game_id (n_distinct is sampled), so it took
-- the game's rows for the dearer side. At 1,000,000 generated games, four
-- of 200 searched positions took 6 to 17 s, warm as cold.
--
-- With game_id in the index the question is one lookup that reads only the
-- index, among entries of one position that sit together. Measured at 1M
-- games on the same 200 positions: the slowest 0.14-0.2 s warm; cold p95
-- 0.17-0.23 s, against 0.3-0.36 s when the walk is instead forced through
-- the primary key. A search that collects every game of a rarer position
-- reads their ids from the index alone, and `explore`'s top-games walk can
-- make the same lookup. The index is 1.8 times the size of the one it
-- replaces (2.1 GB against 1.2 GB at 1M games: position_id alone was
-- deduplicated).
--
-- A bulk load drops and rebuilds it like every index of moves
-- (src/ingest/bulk.rs lists them from the catalog). A bulk load open while
-- this runs has dropped the old index and recorded how to recreate it
-- (import_bulk_objects): that record is changed instead, so that the
-- load's finish builds the new index.

DO $$
BEGIN
    IF to_regclass('moves_position_id_idx') IS NOT NULL THEN
        DROP INDEX moves_position_id_idx;
        CREATE INDEX moves_position_game_idx ON moves (position_id, game_id);
    END IF;
END
$$;

UPDATE import_bulk_objects
SET object_name = 'moves_position_game_idx',
    drop_sql = replace(drop_sql, 'moves_position_id_idx', 'moves_position_game_idx'),
    create_sql = 'CREATE INDEX moves_position_game_idx ON public.moves USING btree (position_id, game_id)'
WHERE object_name = 'moves_position_id_idx'
  AND load_id IN (SELECT id FROM import_bulk_loads WHERE state <> 'done');
