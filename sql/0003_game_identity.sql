-- pgnload schema, version 3: where each game was read, games that collide
-- with an imported one, and recognition of non-Lichess games whatever
-- their source label.

-- Offset of the game's first byte in the decompressed stream of its input
-- (with import_file_id and game_number: where to find it again). NULL for
-- games imported before this migration.
ALTER TABLE games ADD COLUMN byte_offset bigint;

-- A game without a Lichess id is identified by a digest of its content,
-- whatever label (--source, or the file name in earlier versions) it was
-- imported under: this index answers "is this content already here?".
-- Bulk loads keep it (see bulk.rs), as they keep games' unique key.
CREATE INDEX games_external_id_not_lichess_idx ON games (external_id) WHERE source <> 'lichess';

-- Games read but not imported because their id was already taken by a
-- game with other moves (a Lichess id reused, or a corrupted copy): both
-- are located here, the one read and the one kept. Counted with the
-- games "already present".
CREATE TABLE import_conflicts (
    file_id              bigint NOT NULL REFERENCES import_files (id) ON DELETE CASCADE,
    game_number          bigint NOT NULL,
    byte_offset          bigint NOT NULL,
    source               text   NOT NULL,
    external_id          text   NOT NULL,
    -- The game kept: its id (NULL when it came earlier in the same batch
    -- and had none yet), input, number and offset.
    existing_game_id     bigint,
    existing_file_id     bigint,
    existing_game_number bigint,
    existing_byte_offset bigint,
    recorded_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (file_id, game_number)
);
