-- pgnload schema: the games of a bulk load whose explorer counters are
-- held in the importer's memory, not yet in explorer_moves.
--
-- A bulk load adds its counter rows up across batches in memory and writes
-- them together (src/ingest/explorer/held.rs): per batch, the upserts cost
-- half the load's time again. Each batch whose rows are held records its
-- games here, as runs of consecutive ids, in the transaction that inserts
-- them; the write of the held rows deletes the records it covers in its
-- own. A crash or a lost connection drops the held rows but not the
-- records, and the finish of the load queues the positions of the games
-- still recorded for a recount (explorer_pending). While any are
-- recorded, `explore` and `verify --explorer` refuse: the counters lack
-- those games.
CREATE TABLE explorer_deferred (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    first_game_id bigint NOT NULL,
    last_game_id  bigint NOT NULL,
    CHECK (first_game_id <= last_game_id)
);
