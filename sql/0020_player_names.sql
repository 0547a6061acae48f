-- pgnload schema: player names compare case-insensitively in every source
-- (issue 28, item 5).
--
-- `--player` and `--opponent` (games, export) find a name whatever its
-- case, for every source: `lower(username) = lower($1)` (see
-- crates/app/src/query/filter.rs), served by this index. It replaces
-- players_username_key_idx (0005), which served the former lookup by
-- username_key (lowercase for Lichess, exact for other sources) and which
-- no query reads any more; the import's get-or-create keeps using the
-- unique key (source, username_key). lower() folds letters as the
-- database's LC_CTYPE says (ASCII only under the C locale of the embedded
-- cluster); a name that matches in no case gets suggestions from
-- players_username_trgm_idx instead.
DROP INDEX IF EXISTS players_username_key_idx;
CREATE INDEX players_username_lower_idx ON players (lower(username));
COMMENT ON INDEX players_username_lower_idx IS 'Finds a player by name whatever its case, in every source: lower(username) = lower($1) (pgnload games/export --player).';
