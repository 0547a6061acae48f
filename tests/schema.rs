//! The schema explains itself (`sql/0019_schema_comments.sql`): every table,
//! column, view and function has a comment, and the SQL decoders read every
//! game as pgnload and python-chess do, with and without `--games-only`.

use std::collections::BTreeMap;

use crate::{
    bulk::bulk_import_under_way,
    common::{TestDb, data, data_pgns, fresh_db, migrated_db, python_script, run, stderr},
    explorer::{BEFORE_0021, BEFORE_0025},
    import::{assert_ok, import},
};

/// The objects of the public schema (not owned by an extension) without a
/// comment, one per line: `table games`, `column games.moves`, `function
/// f(integer)`, `trigger t on games`, `statistics s`. Empty when the schema
/// explains itself. The columns of a partition (a shard's foreign table) are
/// its table's, commented there; the triggers PostgreSQL makes for a foreign
/// key are its own.
const UNCOMMENTED: &str = "
WITH relations AS (
    SELECT c.oid, c.relname, c.relkind, c.relispartition FROM pg_class c
    WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
      AND NOT EXISTS (SELECT FROM pg_depend d
                      WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e'))
SELECT string_agg(what, E'\\n' ORDER BY what) FROM (
    SELECT 'table ' || relname AS what FROM relations
    WHERE obj_description(oid, 'pg_class') IS NULL
    UNION ALL
    SELECT 'column ' || r.relname || '.' || a.attname FROM relations r
    JOIN pg_attribute a ON a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped
    -- A partition's columns are its table's (a shard's foreign table).
    WHERE col_description(r.oid, a.attnum) IS NULL AND NOT r.relispartition
    UNION ALL
    SELECT 'function ' || p.oid::regprocedure::text FROM pg_proc p
    WHERE p.pronamespace = 'public'::regnamespace
      AND NOT EXISTS (SELECT FROM pg_depend d
                      WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
      AND obj_description(p.oid, 'pg_proc') IS NULL
    UNION ALL
    SELECT 'trigger ' || t.tgname || ' on ' || r.relname FROM relations r
    JOIN pg_trigger t ON t.tgrelid = r.oid AND NOT t.tgisinternal
    WHERE obj_description(t.oid, 'pg_trigger') IS NULL
    UNION ALL
    SELECT 'statistics ' || s.stxname FROM pg_statistic_ext s
    WHERE s.stxnamespace = 'public'::regnamespace
      AND obj_description(s.oid, 'pg_statistic_ext') IS NULL
) missing";

/// Fails, naming them, if any table, column, view, function, trigger or
/// statistics object of `db`'s schema has no comment.
pub fn assert_every_object_commented(db: &TestDb) {
    let missing = db.psql(UNCOMMENTED);
    assert!(
        missing.is_empty(),
        "without a comment (every migration comments what it adds, docs/schema.md):\n{missing}"
    );
}

/// The views of the schema, sorted.
fn views(db: &TestDb) -> Vec<String> {
    let listed = db.psql(
        "SELECT string_agg(viewname, ',' ORDER BY viewname) FROM pg_views
         WHERE schemaname = 'public'",
    );
    listed.split(',').map(str::to_owned).collect()
}

#[test]
fn every_table_column_view_and_function_has_a_comment() {
    let db = migrated_db("schema_comments");
    assert_every_object_commented(&db);
    // The check itself fails on what lacks one.
    db.psql("CREATE TABLE uncommented (x integer); COMMENT ON TABLE uncommented IS 'here'");
    assert_eq!(db.psql(UNCOMMENTED), "column uncommented.x");
    db.psql(
        "CREATE TRIGGER uncommented AFTER TRUNCATE ON uncommented \
         EXECUTE FUNCTION pgnload_notify_change()",
    );
    assert_eq!(
        db.psql(UNCOMMENTED),
        "column uncommented.x\ntrigger uncommented on uncommented"
    );
    db.psql("DROP TABLE uncommented");
    db.psql("CREATE STATISTICS uncommented ON (white_elo + black_elo) FROM games");
    assert_eq!(db.psql(UNCOMMENTED), "statistics uncommented");
    db.psql("DROP STATISTICS uncommented");
    // A sharded layout's rebuild recreates exactly these views.
    let mut expected: Vec<String> = pgnload::store::shards::VIEWS
        .iter()
        .map(|v| (*v).to_owned())
        .collect();
    expected.sort();
    assert_eq!(views(&db), expected);
    // With the explorer counters on (their tables exist either way).
    let on = db.quiet_ok(&["db", "explorer", "enable"]);
    assert!(on.contains("enabled"), "{on}");
    assert_every_object_commented(&db);
}

/// Per Lichess id: result, UCI and SAN (space-separated), as `line` of
/// `py_moves.py` or of the query below gives them.
fn by_id(lines: &str) -> BTreeMap<String, (String, String, String)> {
    lines
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            assert_eq!(fields.len(), 4, "{line:?}");
            (
                fields[0].to_owned(),
                (
                    fields[1].to_owned(),
                    fields[2].to_owned(),
                    fields[3].to_owned(),
                ),
            )
        })
        .collect()
}

/// What the SQL decoders say of every Lichess game: `id`, result, UCI and
/// SAN (`-` when `moves_san` is NULL).
const DECODED: &str = "
SELECT string_agg(concat_ws(E'\\t', external_id, result, array_to_string(moves_uci, ' '),
                            coalesce(array_to_string(moves_san, ' '), '-')),
                  E'\\n' ORDER BY external_id)
FROM games_readable WHERE source = 'lichess'";

/// `games --format json` of every game: per Lichess id, the result and the
/// players.
fn games_json(db: &TestDb) -> BTreeMap<String, (String, String, String)> {
    let out = db.quiet_ok(&["games", "--format", "json", "--limit", "100000"]);
    out.lines()
        .map(|line| {
            let game: serde_json::Value = serde_json::from_str(line).expect("JSON line");
            let text = |key: &str| game[key].as_str().unwrap_or("").to_owned();
            (
                text("external_id"),
                (text("result"), text("white"), text("black")),
            )
        })
        .collect()
}

#[test]
fn the_decoders_read_every_game_as_python_chess_and_pgnload_do() {
    let sample = data("lichess-2025-05-sample.pgn");
    let reference = run({
        let mut c = python_script("py_moves.py");
        c.arg(&sample);
        c
    });
    assert!(reference.status.success(), "{}", stderr(&reference));
    let reference = by_id(&String::from_utf8_lossy(&reference.stdout));
    assert!(reference.len() > 400, "{} games", reference.len());

    let full = fresh_db("schema_decode_full");
    assert_ok(&import(&full, &["-q"], std::slice::from_ref(&sample)), &[0]);
    assert_eq!(by_id(&full.psql(DECODED)), reference);

    // --games-only: no moves rows, so no SAN; UCI from games.moves.
    let games_only = fresh_db("schema_decode_games_only");
    assert_ok(
        &import(&games_only, &["-q", "--games-only"], &[sample]),
        &[0],
    );
    assert_eq!(games_only.psql("SELECT count(*) FROM moves"), "0");
    let without_san: BTreeMap<_, _> = reference
        .iter()
        .map(|(id, (result, uci, san))| {
            // A game without moves has all of its (none) in either case.
            let san = if uci.is_empty() { san } else { "-" };
            (id.clone(), (result.clone(), uci.clone(), san.to_owned()))
        })
        .collect();
    assert_eq!(by_id(&games_only.psql(DECODED)), without_san);

    // Names and results as `games --format json` prints them.
    let readable = |db: &TestDb| -> BTreeMap<String, (String, String, String)> {
        db.psql(
            "SELECT string_agg(concat_ws(E'\\t', external_id, result, white, black), E'\\n')
             FROM games_readable",
        )
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            (
                f[0].to_owned(),
                (f[1].to_owned(), f[2].to_owned(), f[3].to_owned()),
            )
        })
        .collect()
    };
    for db in [&full, &games_only] {
        let json = games_json(db);
        assert_eq!(json.len(), reference.len());
        assert_eq!(readable(db), json);
    }
}

#[test]
fn the_decoders_agree_with_the_stored_moves_and_categories_in_every_variant() {
    let db = fresh_db("schema_decode_variants");
    assert_ok(&import(&db, &["-q"], &data_pgns()), &[0, 1]);
    let variants = db.psql("SELECT count(DISTINCT variant) FROM games");
    assert!(variants.parse::<u32>().expect("count") >= 3, "{variants}");
    // UCI decoded from games.moves = moves.uci written by the import, for
    // every ply of every game (drops, promotions, Chess960 castling, null
    // moves), and SAN = moves.san.
    assert_eq!(
        db.psql(
            "SELECT count(*) FROM games g
             WHERE moves_uci(g.moves, g.variant)
                   IS DISTINCT FROM (SELECT coalesce(array_agg(uci ORDER BY ply), '{}')
                                     FROM moves m WHERE m.game_id = g.id)
                OR coalesce(moves_san(g.id), '{}')
                   IS DISTINCT FROM (SELECT coalesce(array_agg(san ORDER BY ply), '{}')
                                     FROM moves m WHERE m.game_id = g.id)"
        ),
        "0"
    );
    // The data holds the codes that need more than two squares.
    assert_eq!(
        db.psql(
            "SELECT count(*) FILTER (WHERE code >= 32768) > 0
                   AND count(*) FILTER (WHERE variant = 'chess960' AND (code >> 12) & 7 = 7) > 0
                   AND count(*) FILTER (WHERE variant = 'standard' AND (code >> 12) & 7 = 7) > 0
             FROM (SELECT g.variant, get_byte(g.moves, 2 * i) * 256 + get_byte(g.moves, 2 * i + 1) AS code
                   FROM games g, generate_series(0, g.ply_count - 1) i) c"
        ),
        "t",
        "drops, Chess960 and standard castling"
    );
    // The categories: as explorer_games codes them, and back.
    assert_eq!(
        db.psql(
            "SELECT count(*) FROM games g JOIN explorer_games e ON e.game_id = g.id
             WHERE speed_code(g.time_initial_s, g.time_increment_s) <> e.speed
                OR (e.month >= 0 AND month_code(g.started_at) <> e.month)
                OR (e.month >= 0 AND month_text(e.month) <> to_char(g.started_at AT TIME ZONE 'UTC', 'YYYY-MM'))"
        ),
        "0"
    );
    assert_eq!(
        db.psql(
            "SELECT string_agg(coalesce(speed_name(s::smallint), '-'), ',' ORDER BY s)
             FROM generate_series(0, 6) s"
        ),
        "ultraBullet,bullet,blitz,rapid,classical,correspondence,-"
    );
    assert_eq!(
        db.psql(
            "SELECT concat_ws(',', month_text(24304), month_code('2025-05-31 23:59:59+00'),
                              coalesce(month_text(-1), 'null'), result_text(1::smallint),
                              result_text(-1::smallint), result_text(0::smallint),
                              result_text(NULL))"
        ),
        "2025-05,24304,null,1-0,0-1,1/2-1/2,*"
    );
}

#[test]
fn the_explorer_view_reads_as_explore_answers() {
    let db = fresh_db("schema_explorer");
    assert_ok(
        &import(&db, &["-q"], &[data("lichess-2025-05-sample.pgn")]),
        &[0],
    );
    let on = db.quiet_ok(&["db", "explorer", "enable"]);
    assert!(on.contains("enabled"), "{on}");
    // Every row's move is a move played there, castling written king to
    // rook as `explore` writes it (moves.uci: king to its destination).
    assert_eq!(
        db.psql(
            "SELECT count(*) FROM explorer_moves_readable x
             WHERE NOT EXISTS (SELECT FROM moves m
                               WHERE m.position_id = x.position_id
                                 AND (m.uci = x.uci
                                      OR (m.uci, x.uci) IN (('e1g1', 'e1h1'), ('e1c1', 'e1a1'),
                                                            ('e8g8', 'e8h8'), ('e8c8', 'e8a8'))))"
        ),
        "0"
    );
    assert_eq!(
        db.psql(
            "SELECT count(*) FILTER (WHERE uci IN ('e1h1', 'e8h8')) > 0,
                    count(*) FILTER (WHERE uci IN ('e1g1', 'e1c1', 'e8g8', 'e8c8'))
             FROM explorer_moves_readable"
        ),
        "t|0"
    );
    // The start position's moves, summed over the categories, as `explore
    // --json` answers (no position is queued after `enable`).
    let start = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq -";
    let sql = db.psql(&format!(
        "SELECT string_agg(concat_ws(' ', uci, w, d, b), ',' ORDER BY uci) FROM (
             SELECT uci, sum(white) w, sum(draws) d, sum(black) b FROM explorer_moves_readable
             WHERE fen = '{start}' AND variant = 'standard' GROUP BY uci) t"
    ));
    let answer: serde_json::Value =
        serde_json::from_str(&db.quiet_ok(&["explore", "--json", "--top", "100", start]))
            .expect("JSON");
    let mut moves: Vec<String> = answer["moves"]
        .as_array()
        .expect("moves")
        .iter()
        .map(|m| format!("{} {} {} {}", m["uci"], m["white"], m["draws"], m["black"]))
        .map(|line| line.replace('"', ""))
        .collect();
    moves.sort();
    assert!(!moves.is_empty());
    assert_eq!(sql, moves.join(","));
}

/// Takes back what migration 0019 added (its views, functions and every
/// comment) and forgets it: a database from before it.
const BEFORE_0019: &str = "
DROP VIEW games_readable, explorer_moves_readable;
DROP FUNCTION result_text(smallint), move_uci(integer, game_variant), moves_uci(bytea, game_variant),
    moves_san(bigint), speed_code(integer, integer), speed_name(smallint), month_text(integer),
    month_code(timestamptz), square_name(integer);
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT c.oid::regclass AS rel, c.relkind, a.attname
             FROM pg_class c LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0
                                           AND NOT a.attisdropped
             WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'v')
    LOOP
        IF r.attname IS NOT NULL THEN
            EXECUTE format('COMMENT ON COLUMN %s.%I IS NULL', r.rel, r.attname);
        END IF;
        EXECUTE format('COMMENT ON %s %s IS NULL',
                       CASE r.relkind WHEN 'v' THEN 'VIEW' ELSE 'TABLE' END, r.rel);
    END LOOP;
END
$$;
DELETE FROM pgnload_migrations WHERE version = 19";

#[test]
fn the_migration_applies_to_a_database_with_games_and_an_unfinished_bulk_load() {
    let db = migrated_db("schema_upgrade");
    let sample = data("lichess-2025-05-sample.pgn");
    let child = bulk_import_under_way(&db, std::slice::from_ref(&sample));
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid fits"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(db.psql("SELECT state FROM import_bulk_loads"), "loading");
    // 0021 changed columns 0019's views read: taken back first.
    db.psql(BEFORE_0025);
    db.psql(BEFORE_0021);
    db.psql(BEFORE_0019);
    assert_ne!(db.psql(UNCOMMENTED), "");

    let migrated = db.quiet_ok(&["db", "migrate"]);
    assert!(
        migrated.contains("applied 0019_schema_comments.sql")
            && migrated.contains("applied 0021_explorer_mover_rating.sql"),
        "{migrated}"
    );
    assert_every_object_commented(&db);
    assert_eq!(db.psql("SELECT state FROM import_bulk_loads"), "loading");
    let stored = db.psql("SELECT count(*) FROM games_readable WHERE moves_uci IS NOT NULL");
    assert_ne!(stored, "0");
    // The load finishes as before, and every game reads.
    assert_ok(&import(&db, &["-q"], &[sample]), &[0]);
    assert_eq!(db.psql("SELECT state FROM import_bulk_loads"), "done");
    assert_eq!(
        db.psql(
            "SELECT count(*) FROM games_readable
             WHERE cardinality(moves_uci) = ply_count AND cardinality(moves_san) = ply_count"
        ),
        db.psql("SELECT count(*) FROM games")
    );
}
