-- pgnload schema, version 17: every index of positions is written in one
-- key order, so that an incremental import into a database much larger than
-- the server's memory reads each index page once per batch, not once per new
-- position (issue 31).
--
-- An incremental batch inserts its new positions sorted by normalized_fen.
-- Before this migration only the unique index on normalized_fen followed
-- that order: the hash index on piece_placement and the B-tree on fen_hash
-- took each new position on a random page, so once the database outgrew
-- memory every new position cost a disk read in each (measured with
-- scripts/bench_growth.sh: 2.55 index block reads per new position at 13.8x
-- the server's memory, the import at 0.08x its speed into an empty database).
--
-- * piece_placement: a B-tree again (0006 made it a hash index to save
--   38 bytes per position). normalized_fen begins with piece_placement and a
--   space, so both B-trees order rows alike and a sorted batch walks both
--   from left to right. Equality queries use it as before.
-- * fen_hash: a GIN index (btree_gin; fastupdate is GIN's default): new
--   entries are appended to a pending list, which PostgreSQL merges into the
--   index sorted, page by page, when it outgrows the inserting session's
--   gin_pending_list_limit (pgnload's import sessions set 64 MiB, and
--   work_mem 64 MiB so that a merge sorts the whole list at once) and at
--   each VACUUM; pgnload merges it at the end of every import, so that
--   lookups by fen_hash after an import do not scan a pending list.
--   `WHERE fen_hash = $1` is answered by it as by the B-tree.
--
-- * normalized_fen: its unique index also carries id (INCLUDE), so that the
--   batch's lookup of the positions already stored is answered from the
--   index alone (an index-only scan on the pages the sorted batch walks):
--   without it, each stored position the batch meets costs a read of the
--   table page holding it, a random read once the table outgrows memory
--   (0.36 heap block reads per new position at 15x, 20,000-game batch).
--   The batch then inserts only the positions the lookup did not find.
--
-- A bulk load open while this runs has dropped the indexes and recorded how
-- to recreate them (import_bulk_objects): those records are updated instead.
-- A sharded coordinator holds no local positions index: nothing to do there
-- (each shard is migrated as a single node).

CREATE EXTENSION IF NOT EXISTS btree_gin;

DO $$
BEGIN
    IF to_regclass('positions_piece_placement_idx') IS NOT NULL THEN
        DROP INDEX positions_piece_placement_idx;
        CREATE INDEX positions_piece_placement_idx ON positions (piece_placement);
    END IF;
    IF EXISTS (SELECT FROM pg_constraint
               WHERE conrelid = 'positions'::regclass
                 AND conname = 'positions_normalized_fen_key') THEN
        ALTER TABLE positions
            DROP CONSTRAINT positions_normalized_fen_key,
            ADD CONSTRAINT positions_normalized_fen_key UNIQUE (normalized_fen) INCLUDE (id);
    END IF;
    IF to_regclass('positions_fen_hash_idx') IS NOT NULL THEN
        DROP INDEX positions_fen_hash_idx;
        CREATE INDEX positions_fen_hash_idx ON positions USING gin (fen_hash);
    END IF;
END
$$;

UPDATE import_bulk_objects
SET create_sql = 'CREATE INDEX positions_piece_placement_idx ON public.positions USING btree (piece_placement)'
WHERE object_name = 'positions_piece_placement_idx'
  AND load_id IN (SELECT id FROM import_bulk_loads WHERE state <> 'done');

UPDATE import_bulk_objects
SET create_sql = 'CREATE INDEX positions_fen_hash_idx ON public.positions USING gin (fen_hash)'
WHERE object_name = 'positions_fen_hash_idx'
  AND load_id IN (SELECT id FROM import_bulk_loads WHERE state <> 'done');

UPDATE import_bulk_objects
SET create_sql = 'ALTER TABLE positions ADD CONSTRAINT positions_normalized_fen_key UNIQUE (normalized_fen) INCLUDE (id)'
WHERE object_name = 'positions_normalized_fen_key'
  AND load_id IN (SELECT id FROM import_bulk_loads WHERE state <> 'done');
