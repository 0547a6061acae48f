-- pgnload schema: import scope (`import --rated-only`, `--min-rating`,
-- `--speeds`, `--variants`, `--since/--until`, `--exclude-bots`).
--
-- Games read but left out by the scope are a fourth term of the accounting:
-- games read = imported + present + rejected + filtered.
ALTER TABLE import_files ADD COLUMN games_filtered bigint NOT NULL DEFAULT 0;
ALTER TABLE import_runs ADD COLUMN games_filtered bigint NOT NULL DEFAULT 0;

-- The scope an input was imported under, as `Scope::identity` writes it
-- (empty: every game). A rerun under another scope is refused unless it
-- passes --restart, so a finished input never silently stands for games
-- it left out.
ALTER TABLE import_files ADD COLUMN scope text NOT NULL DEFAULT '';
