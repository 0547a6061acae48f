-- pgnload schema: the positions cap (`import --positions-max-ply N`,
-- `--games-only` = a cap of 0).
--
-- A capped game keeps every move in games.moves but has moves rows only
-- for plies 1..=N and positions for plies 0..=N (the start position is
-- ply 0); its final_position_id is the position after ply N, the last one
-- stored. NULL: every ply has its rows (no cap, or a game no longer than
-- its cap), so `positions_max_ply IS NULL` means "complete".
-- `import --restart` of the same input without the cap (or with a larger
-- one) fills the rest in and lowers or clears this.
ALTER TABLE games ADD COLUMN positions_max_ply integer
    CONSTRAINT games_positions_max_ply_check
    CHECK (positions_max_ply >= 0 AND positions_max_ply < ply_count);
