-- pgnload schema, version 5: indexes for reading games back
-- (`pgnload games`, `export`, `game show`).
--
-- A player's games, newest first, from either side: one index per side,
-- each ordered by start time, so `--player` with `--since`/`--until` and a
-- limit reads only the rows it returns.
CREATE INDEX games_white_player_started_idx ON games (white_player_id, started_at);
CREATE INDEX games_black_player_started_idx ON games (black_player_id, started_at);
-- "Games that reached a position" includes the final one, which is in no
-- moves row (moves.position_id is the position before each move).
CREATE INDEX games_final_position_idx ON games (final_position_id);
-- A name is looked up in every source at once (Lichess keys it lowercased,
-- other sources as written); the unique key leads with the source.
CREATE INDEX players_username_key_idx ON players (username_key);
-- Searches list the newest games first: a search for a frequent position
-- walks this index and stops at its limit (see query/filter.rs).
CREATE INDEX games_newest_idx ON games (started_at DESC NULLS LAST, id DESC);
