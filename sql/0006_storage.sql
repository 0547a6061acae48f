-- pgnload schema, version 6: positions.piece_placement gets a hash index.
--
-- piece_placement is only ever compared for equality ("every position with
-- this board"): a hash index answers that from a 4-byte hash code per row,
-- where the B-tree kept the ~45-byte text. Measured on the benchmark corpus
-- (README "Schema"): 71 -> 33 bytes per position after a bulk load.
--
-- A bulk load open while this runs has dropped the index and recorded how
-- to recreate it (import_bulk_objects): that record is updated instead, so
-- that the load's finish builds the hash index.

DO $$
BEGIN
    IF to_regclass('positions_piece_placement_idx') IS NOT NULL THEN
        DROP INDEX positions_piece_placement_idx;
        CREATE INDEX positions_piece_placement_idx ON positions USING hash (piece_placement);
    END IF;
END
$$;

UPDATE import_bulk_objects
SET create_sql = 'CREATE INDEX positions_piece_placement_idx ON public.positions USING hash (piece_placement)'
WHERE object_name = 'positions_piece_placement_idx'
  AND load_id IN (SELECT id FROM import_bulk_loads WHERE state <> 'done');
