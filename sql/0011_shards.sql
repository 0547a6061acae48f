-- pgnload schema: the shards of a sharded layout (`pgnload db migrate
-- --shards URL,URL,…`, README "Scaling out").
--
-- Empty on a single node, which this migration leaves as it was. On a
-- coordinator, one row per shard server: positions, games, moves and the
-- game_keys table are hash-partitioned there, partition `shard` of each
-- being a postgres_fdw foreign table on server `server`. Written once, by
-- the command that builds the layout, in the transaction that builds it,
-- so the rows and the tables never disagree; every command reads it to
-- know which layout it works on.
CREATE TABLE pgnload_shards (
    shard      integer PRIMARY KEY CHECK (shard >= 0),
    -- The postgres_fdw server (CREATE SERVER) the partitions live on.
    server     text    NOT NULL UNIQUE,
    -- Where it is, without user or password (those are in the user mapping).
    host       text    NOT NULL,
    port       integer NOT NULL,
    dbname     text    NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
