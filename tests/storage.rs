//! The storage migrations (0006, 0007, 0014, 0017, 0024): an existing database,
//! with rows or with a bulk load left open, ends up with the same index
//! kinds and options as a fresh one, and with the same rows; an incremental
//! import's rows go in key order, and it leaves no `fen_hash` index entries
//! pending.

use std::{path::PathBuf, process::Output};

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};

use crate::{
    bulk::bulk_import_under_way,
    common::{TestDb, migrated_db, run, scratch_dir},
    import::{assert_ok, content_dump, import},
    resume::corpus_with_copies,
};

/// Access method and options of every index of positions, moves and
/// games, whether it carries columns beyond its key (INCLUDE), and its
/// definition.
fn index_kinds(db: &TestDb) -> String {
    db.psql(
        "SELECT string_agg(c.relname || ' ' || am.amname || ' '
                           || coalesce(array_to_string(c.reloptions, ','), '-')
                           || CASE WHEN i.indnkeyatts < i.indnatts THEN ' include' ELSE '' END
                           || ': ' || pg_get_indexdef(i.indexrelid),
                           E'\\n' ORDER BY c.relname)
         FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am am ON am.oid = c.relam
         WHERE i.indrelid IN ('positions'::regclass, 'moves'::regclass, 'games'::regclass)",
    )
}

/// Puts the objects the storage migrations (0006, 0007, 0014, 0017, 0024)
/// change back as 0001, 0003 and 0009 left them, and forgets those
/// migrations: a database from before them. Other migrations stay recorded, as they are
/// not undone here.
const BEFORE_STORAGE: &str = "
DROP INDEX moves_position_game_idx;
CREATE INDEX moves_position_id_idx ON moves (position_id);
DROP INDEX positions_piece_placement_idx;
CREATE INDEX positions_piece_placement_idx ON positions (piece_placement);
DROP INDEX positions_fen_hash_idx;
CREATE INDEX positions_fen_hash_idx ON positions (fen_hash);
ALTER TABLE positions
    DROP CONSTRAINT positions_normalized_fen_key,
    ADD CONSTRAINT positions_normalized_fen_key UNIQUE (normalized_fen);
ALTER INDEX positions_pkey RESET (fillfactor);
ALTER INDEX games_pkey RESET (fillfactor);
ALTER INDEX moves_pkey RESET (fillfactor);
DROP INDEX games_top_idx;
CREATE INDEX games_rating_sum_idx ON games ((white_elo::bigint + black_elo) DESC NULLS LAST, id);
DELETE FROM pgnload_migrations WHERE version IN (6, 7, 14, 17, 24)";

/// The statements an open bulk load recorded before the storage migrations
/// (0006, 0007, 0014, 0017, 0024), which are forgotten again. Then a key was one
/// record (`ADD CONSTRAINT` building its index), not its index's build and
/// then `ADD CONSTRAINT … USING INDEX`.
const RECORDED_BEFORE_STORAGE: &str = "
DELETE FROM import_bulk_objects i
WHERE kind = 'index' AND EXISTS (SELECT FROM import_bulk_objects k
                                 WHERE k.load_id = i.load_id AND k.kind = 'constraint'
                                   AND k.object_name = i.object_name);
UPDATE import_bulk_objects
SET create_sql = 'ALTER TABLE positions ADD CONSTRAINT positions_pkey PRIMARY KEY (id)'
WHERE object_name = 'positions_pkey';
UPDATE import_bulk_objects
SET create_sql = 'ALTER TABLE moves ADD CONSTRAINT moves_pkey PRIMARY KEY (game_id, ply)'
WHERE object_name = 'moves_pkey';
UPDATE import_bulk_objects
SET object_name = 'moves_position_id_idx', drop_sql = 'DROP INDEX moves_position_id_idx',
    create_sql = 'CREATE INDEX moves_position_id_idx ON public.moves USING btree (position_id)'
WHERE object_name = 'moves_position_game_idx';
UPDATE import_bulk_objects
SET create_sql = 'CREATE INDEX positions_piece_placement_idx ON public.positions USING btree (piece_placement)'
WHERE object_name = 'positions_piece_placement_idx';
UPDATE import_bulk_objects
SET create_sql = 'CREATE INDEX positions_fen_hash_idx ON public.positions USING btree (fen_hash)'
WHERE object_name = 'positions_fen_hash_idx';
UPDATE import_bulk_objects
SET create_sql = 'ALTER TABLE positions ADD CONSTRAINT positions_normalized_fen_key UNIQUE (normalized_fen)'
WHERE object_name = 'positions_normalized_fen_key';
UPDATE import_bulk_objects
SET object_name = 'games_rating_sum_idx', drop_sql = 'DROP INDEX IF EXISTS games_rating_sum_idx',
    create_sql = 'CREATE INDEX games_rating_sum_idx ON public.games USING btree ((((white_elo)::bigint + black_elo)) DESC NULLS LAST, id)'
WHERE object_name = 'games_top_idx';
DELETE FROM pgnload_migrations WHERE version IN (6, 7, 14, 17, 24)";

fn migrate(db: &TestDb) -> Output {
    run({
        let mut c = db.pgnload();
        c.args(["db", "migrate"]);
        c
    })
}

fn files(dir: &std::path::Path) -> Vec<PathBuf> {
    corpus_with_copies(dir, 1)
}

#[test]
fn storage_migrations_convert_an_existing_database_in_place() {
    let dir = scratch_dir("pgnload-storage-");
    let files = files(dir.path());
    let fresh = migrated_db("storage_fresh");
    let db = migrated_db("storage_existing");
    assert_ok(&import(&db, &["-q", "--mode", "incremental"], &files), &[0]);
    let rows = content_dump(&db);
    let board = "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR";
    let by_board = format!("SELECT count(*) FROM positions WHERE piece_placement = '{board}'");
    let found = db.psql(&by_board);
    assert_ne!(found, "0", "the corpus has 1. e4 games");

    db.psql(BEFORE_STORAGE);
    assert_ne!(index_kinds(&db), index_kinds(&fresh));
    assert_ok(&migrate(&db), &[0]);
    assert_eq!(index_kinds(&db), index_kinds(&fresh));
    for kind in [
        "positions_piece_placement_idx btree -",
        "positions_fen_hash_idx gin -",
        "positions_normalized_fen_key btree - include",
    ] {
        assert!(
            index_kinds(&fresh).contains(kind),
            "{kind}: {}",
            index_kinds(&fresh)
        );
    }
    assert_eq!(content_dump(&db), rows);
    // Answered by the new indexes, with the same rows.
    let by_hash = format!(
        "SELECT count(*) FROM positions WHERE fen_hash = \
         (SELECT fen_hash FROM positions WHERE piece_placement = '{board}' ORDER BY id LIMIT 1)"
    );
    let found_by_hash = db.psql(&by_hash);
    assert_eq!(found_by_hash, "1");
    let fen = db.psql(&format!(
        "SELECT normalized_fen FROM positions WHERE piece_placement = '{board}' ORDER BY id LIMIT 1"
    ));
    let by_fen = format!("SELECT id FROM positions WHERE normalized_fen = '{fen}'");
    let found_by_fen = db.psql(&by_fen);
    assert!(!found_by_fen.is_empty());
    // An index-only scan is planned once the visibility map says the
    // table's pages are all visible, as it does after any vacuum.
    db.psql("VACUUM positions");
    for (query, rows, index) in [
        (&by_board, &found, "positions_piece_placement_idx"),
        (&by_hash, &found_by_hash, "positions_fen_hash_idx"),
        (
            &by_fen,
            &found_by_fen,
            "Index Only Scan using positions_normalized_fen_key",
        ),
    ] {
        assert_eq!(
            &db.psql(&format!("SET enable_seqscan = off; {query}")),
            rows
        );
        assert!(
            db.psql(&format!("SET enable_seqscan = off; EXPLAIN {query}"))
                .contains(index),
            "{query} not answered by {index}"
        );
    }
}

#[test]
fn storage_migrations_update_what_an_open_bulk_load_will_rebuild() {
    let dir = scratch_dir("pgnload-storage-bulk-");
    let files = files(dir.path());
    let reference = migrated_db("storage_ref");
    assert_ok(
        &import(&reference, &["-q", "--mode", "incremental"], &files),
        &[0],
    );

    let db = migrated_db("storage_open_bulk");
    let child = bulk_import_under_way(&db, &files);
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid fits"));
    kill(pid, Signal::SIGTERM).expect("SIGTERM");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(db.psql("SELECT state FROM import_bulk_loads"), "loading");
    db.psql(RECORDED_BEFORE_STORAGE);

    // The import migrates first, then continues and finishes the load.
    assert_ok(&import(&db, &["-q", "--mode", "auto"], &files), &[0]);
    assert_eq!(db.psql("SELECT state FROM import_bulk_loads"), "done");
    for kind in [
        "moves_position_game_idx btree -",
        "positions_piece_placement_idx btree -",
        "positions_fen_hash_idx gin -",
        "positions_pkey btree fillfactor=100",
        "moves_pkey btree fillfactor=100",
        "games_pkey btree fillfactor=100",
        "games_top_idx btree -",
    ] {
        assert!(
            index_kinds(&db).contains(kind),
            "{kind}: {}",
            index_kinds(&db)
        );
    }
    assert_eq!(index_kinds(&db), index_kinds(&reference));
    assert_eq!(content_dump(&db), content_dump(&reference));
}

#[test]
fn an_incremental_import_writes_moves_in_key_order_and_leaves_no_index_entries_pending() {
    // Rows appended in (game_id, ply) order fill the primary key's leaves
    // at its right edge; out of order they split leaves in the middle.
    let dir = scratch_dir("pgnload-storage-order-");
    let files = files(dir.path());
    let db = migrated_db("storage_moves_order");
    assert_ok(&import(&db, &["-q", "--mode", "incremental"], &files), &[0]);
    let games: u64 = db
        .psql("SELECT count(DISTINCT game_id) FROM moves")
        .parse()
        .expect("a count");
    assert!(games > 10, "{games} games");
    assert_eq!(
        db.psql(
            "SELECT count(*) FROM (SELECT game_id < lag(game_id) OVER (ORDER BY ctid) AS back
                                   FROM moves) m
             WHERE back"
        ),
        "0"
    );
    // The import merged the entries it left pending in the fen_hash index:
    // nothing is left for the next lookup to scan.
    assert_eq!(
        db.psql("SELECT gin_clean_pending_list('positions_fen_hash_idx')"),
        "0"
    );
}

#[test]
fn a_bulk_load_rebuilds_its_keys_with_their_options() {
    let dir = scratch_dir("pgnload-storage-options-");
    let files = files(dir.path());
    let fresh = migrated_db("storage_options_fresh");
    let db = migrated_db("storage_options");
    assert_ok(&import(&db, &["-q", "--mode", "bulk"], &files), &[0]);
    assert_eq!(db.psql("SELECT state FROM import_bulk_loads"), "done");
    // The rebuilt keys are packed full, as the fresh schema's are.
    assert!(
        index_kinds(&db).contains("moves_pkey btree fillfactor=100"),
        "{}",
        index_kinds(&db)
    );
    assert_eq!(index_kinds(&db), index_kinds(&fresh));
}
