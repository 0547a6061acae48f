-- pgnload schema: the merge of the best-rated games is written inline.
--
-- explorer_top_games (0013) merged a counter row's list with a batch's in
-- every upsert that met an existing row. A SQL function like it is run by
-- the function executor once per row, which cost twice the same SELECT
-- written inline in the upsert (measured on 400,000 conflicting rows:
-- 6.9 µs a row against 3.3), so src/ingest/explorer.rs now writes it
-- inline, and nothing calls the function any more.
DROP FUNCTION explorer_top_games(bigint[], bigint[], integer);
