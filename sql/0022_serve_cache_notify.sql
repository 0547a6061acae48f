-- pgnload schema: writes that change an explorer answer are announced
-- (issue 29), so that `pgnload serve` can keep finished answers.
--
-- `pgnload serve` keeps the explorer's answers in memory (docs/serve.md,
-- "Cache") and must never give one after a write that changes it is
-- visible, whoever writes: an import (this or an older build), `psql` by
-- hand, `db explorer enable/disable/compact`, a bulk load, `game delete`.
-- So every table an answer reads announces each statement that changes
-- it, on the channel `pgnload_changes`, with the table's name as payload;
-- the server LISTENs there and forgets every answer on each notification.
-- PostgreSQL delivers a notification only when its transaction commits,
-- once per distinct payload and transaction, so a batch of an import is a
-- handful of notifications, not one per row.
--
-- The tables (what crates/app/src/explorer/sql.rs's answers read, through
-- the views explorer_games and explorer_game_moves too): positions (the
-- position asked), explorer_state and explorer_deferred (whether the
-- counters are usable), explorer_moves and explorer_pending (the counts,
-- and whether they are complete), games and moves (counts grouped from
-- games, the top and recent games, their moves), players and events (the
-- names and the mode of the listed games); and pgnload_shards, whose rows
-- make a database the coordinator of a sharded layout, on which the
-- server keeps nothing (a write straight to a shard reaches no listener
-- of the coordinator).
--
-- Statement-level triggers (FOR EACH STATEMENT): one call per COPY or
-- statement whatever its rows, TRUNCATE included. Nothing here reads or
-- writes a row, so it applies at once to a database of any size, to one
-- with an unfinished bulk load, and to a shard or the coordinator of a
-- sharded layout (a statement trigger on a partitioned table fires for
-- the statements on it).

CREATE FUNCTION pgnload_notify_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('pgnload_changes', TG_TABLE_NAME);
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION pgnload_notify_change() IS 'Trigger function: notifies the channel pgnload_changes, with the table''s name, of a statement that changed a table an explorer answer reads (delivered when its transaction commits): pgnload serve then forgets the answers it keeps (docs/serve.md, Cache).';

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['positions', 'games', 'moves', 'players', 'events',
                             'explorer_state', 'explorer_deferred', 'explorer_moves',
                             'explorer_pending', 'pgnload_shards'] LOOP
        EXECUTE format('CREATE TRIGGER pgnload_notify_change
                            AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON %I
                            FOR EACH STATEMENT EXECUTE FUNCTION pgnload_notify_change()', t);
        EXECUTE format('COMMENT ON TRIGGER pgnload_notify_change ON %I IS %L', t,
                       'Notifies pgnload_changes of each statement that changes ' || t
                       || ': an explorer answer reads it, and pgnload serve forgets the answers it keeps (sql/0022_serve_cache_notify.sql).');
    END LOOP;
END
$$;
