-- pgnload schema, version 7: append-only keys are packed full.
--
-- positions.id, games.id and moves (game_id, ply) only ever grow: new keys
-- go to the right edge of their B-tree, so the 10% of each leaf that the
-- default fillfactor (90) keeps free for inserts in the middle would stay
-- empty forever. (The keys whose inserts land anywhere, normalized_fen,
-- fen_hash, position_id, keep the default.)
--
-- The setting applies to pages built or split from now on: a bulk load's
-- rebuild, new rows. Existing pages are not rewritten here (at scale that
-- would hold the tables for a long time before an import); REINDEX INDEX
-- CONCURRENTLY repacks them when wanted.
--
-- A bulk load open while this runs has dropped positions' and moves' keys
-- and recorded how to recreate them: those records get the option too.

DO $$
DECLARE
    key text;
BEGIN
    FOREACH key IN ARRAY ARRAY['positions_pkey', 'games_pkey', 'moves_pkey'] LOOP
        IF to_regclass(key) IS NOT NULL THEN
            EXECUTE format('ALTER INDEX %I SET (fillfactor = 100)', key);
        END IF;
    END LOOP;
END
$$;

UPDATE import_bulk_objects
SET create_sql = create_sql || ' WITH (fillfactor=100)'
WHERE object_name IN ('positions_pkey', 'moves_pkey')
  AND kind = 'constraint'
  AND create_sql NOT LIKE '%WITH (%'
  AND load_id IN (SELECT id FROM import_bulk_loads WHERE state <> 'done');
