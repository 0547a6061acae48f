//! A game's comments, NAGs and variations (issue 27): kept by `import` and
//! `game put`, written back by `game show` and `export` so that
//! python-chess reads the same game tree from the export as from the
//! source (`scripts/py_pgn_tree.py`); a Lichess game keeps none of them
//! apart (its comments are its typed clocks and evaluations); a variation
//! with an illegal move rejects the game, as python-chess records an error
//! for it; and the exchange formats say what they could not carry.

use std::{fmt::Write as _, path::Path};

use crate::{
    common::{data, migrated_db, python_script, run, scratch_dir, with_usual_stack},
    import::{assert_ok, import},
};

/// `py_pgn_tree.py SOURCE WRITTEN` must find no difference.
pub fn assert_same_trees(source: &Path, written: &Path) {
    let out = run({
        let mut c = python_script("py_pgn_tree.py");
        c.arg(source).arg(written);
        c
    });
    assert!(
        out.status.success(),
        "{} read back with another game tree:\n{}{}",
        source.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn annotated_games_are_imported_put_and_written_back_whole() {
    let dir = scratch_dir("pgnload-annotations-");
    let source = data("annotated-games.pgn");
    let db = migrated_db("annotations_import");
    assert_ok(&import(&db, &["-q"], std::slice::from_ref(&source)), &[0]);
    let exported = dir.path().join("exported.pgn");
    db.quiet_ok(&["export", "-o", &exported.display().to_string()]);
    assert_same_trees(&source, &exported);
    // The Lichess-like game keeps only what its typed columns cannot say:
    // its second comment and its variation, not its clocks and evals.
    let lichess =
        db.psql("SELECT annotations::text FROM games WHERE site = 'https://lichess.org/abcdefgh'");
    assert_eq!(
        lichess,
        r#"[[6, "$4 { [%eval #3] [%clk 0:02:50] } ( 3... Qe7 { [%eval -0.3] } )"], [7, "$4 { [%eval -2.5] [%clk 0:02:40] A\nsecond comment. }"]]"#
    );

    // `game put` of each game keeps it all too, and says so.
    let text = std::fs::read_to_string(&source).expect("read the annotated games");
    let put_db = migrated_db("annotations_put");
    let mut shown = String::new();
    for (i, game) in crate::common::games_of(&text).iter().enumerate() {
        let file = dir.path().join(format!("game{i}.pgn"));
        std::fs::write(&file, game).expect("write one game");
        let stored = put_db.quiet_ok(&["game", "put", &file.display().to_string()]);
        assert!(stored.starts_with("stored as game "), "{stored}");
        let id = put_db.psql("SELECT max(id) FROM games");
        shown.push_str(&put_db.quiet_ok(&["game", "show", &id]));
    }
    let shown_file = dir.path().join("shown.pgn");
    std::fs::write(&shown_file, &shown).expect("write the shown games");
    assert_same_trees(&source, &shown_file);
}

/// python-chess gives a NAG written before a variation's first move to the
/// variation's parent (the move before the one it replaces), at any depth;
/// and an export imported into another database comes out the same again.
#[test]
fn nags_before_a_variation_and_a_second_import_keep_the_tree() {
    let dir = scratch_dir("pgnload-annotations-nags-");
    let source = dir.path().join("nags.pgn");
    std::fs::write(
        &source,
        "[Event \"depth 1\"]\n\n1. e4 e5 2. Nf3 ( $2 2. Bc4 ) 2... Nc6 *\n\n\
         [Event \"depth 2\"]\n\n1. e4 e5 (1... c5 ( $2 1... e6 ) 2. Nf3) 2. Nf3 *\n\n\
         [Event \"depth 3, first move\"]\n\n1. d4 d5 2. c4 (2. Nf3 (2. Bf4 ( $6 $14 2. e3 ) 2... c5)) 2... e6 *\n\n",
    )
    .expect("write the games");
    let db = migrated_db("annotations_nags");
    assert_ok(&import(&db, &["-q"], std::slice::from_ref(&source)), &[0]);
    assert_eq!(db.psql("SELECT count(*) FROM games"), "3");
    let exported = dir.path().join("exported.pgn");
    db.quiet_ok(&["export", "-o", &exported.display().to_string()]);
    assert_same_trees(&source, &exported);

    let again = migrated_db("annotations_nags_again");
    assert_ok(
        &import(&again, &["-q"], std::slice::from_ref(&exported)),
        &[0],
    );
    let exported_again = dir.path().join("exported-again.pgn");
    again.quiet_ok(&["export", "-o", &exported_again.display().to_string()]);
    assert_same_trees(&source, &exported_again);
}

#[test]
fn a_lichess_game_keeps_no_annotations_apart() {
    let db = migrated_db("annotations_lichess");
    assert_ok(
        &import(&db, &["-q"], &[data("lichess-2025-05-sample.pgn")]),
        &[0],
    );
    assert_eq!(
        db.psql("SELECT count(*) > 400, count(annotations) FROM games"),
        "t|0",
        "every comment of the sample is its typed clock and evaluation"
    );
}

#[test]
fn a_variation_with_an_illegal_move_rejects_the_game() {
    let dir = scratch_dir("pgnload-annotations-illegal-");
    let file = dir.path().join("illegal.pgn");
    std::fs::write(
        &file,
        "[Event \"legal\"]\n\n1. e4 e5 (1... d5 2. exd5) 2. Nf3 *\n\n\
         [Event \"illegal\"]\n\n1. e4 e5 (1... d5 2. Qxd5) 2. Nf3 *\n\n\
         [Event \"nested illegal\"]\n\n1. d4 (1. e4 e5 (1... c5 2. Bxf7) 2. Nf3) 1... d5 *\n\n",
    )
    .expect("write the games");
    let db = migrated_db("annotations_illegal");
    assert_ok(&import(&db, &["-q"], &[file]), &[1]);
    assert_eq!(db.psql("SELECT count(*) FROM games"), "1");
    assert_eq!(
        db.psql("SELECT reason FROM import_rejects ORDER BY game_number"),
        "illegal move \"Qxd5\" in a variation of ply 2: illegal move\n\
         illegal move \"Bxf7\" in a variation of ply 1: illegal move"
    );
}

/// What `export --format dcg -o BASE` of `db` says it could not carry
/// (the line after its summary).
fn not_carried_by_dcg(db: &crate::common::TestDb, base: &Path) -> String {
    let out = db.quiet_ok(&[
        "export",
        "--format",
        "dcg",
        "-o",
        &base.display().to_string(),
    ]);
    out.lines()
        .nth(1)
        .unwrap_or_else(|| panic!("no second line: {out}"))
        .to_owned()
}

#[test]
fn exchange_exports_say_what_they_could_not_carry() {
    let dir = scratch_dir("pgnload-annotations-exchange-");
    let db = migrated_db("annotations_exchange");
    assert_ok(&import(&db, &["-q"], &[data("annotated-games.pgn")]), &[0]);
    // Kept per mainline move: its comment and its NAGs. Dropped: the two
    // starting comments, and the 11 variations with their 6 comments and 6
    // NAGs.
    assert_eq!(
        not_carried_by_dcg(&db, &dir.path().join("annotated")),
        "not carried by the dcg format: 8 comments, 11 variations, 6 NAGs \
         (`export --format pgn` keeps them)"
    );
    let file = dir.path().join("annotated.ocgdb.db3");
    let ocgdb = db.quiet_ok(&[
        "export",
        "--format",
        "ocgdb",
        "-o",
        &file.display().to_string(),
    ]);
    // The same, and the 15 NAGs of mainline moves: ocgdb has no table for them.
    assert_eq!(
        ocgdb.lines().nth(1),
        Some(
            "not carried by the ocgdb format: 8 comments, 11 variations, 21 NAGs \
             (`export --format pgn` keeps them)"
        ),
        "{ocgdb}"
    );
}

/// A game nested `depth` variations deep: the mainline `Nf3 a6`, the
/// variation replacing its second move, `Nf6 a3`, the one replacing that
/// line's second move, and so on (knights back and forth, each line's
/// second move a pawn's). Returns its PGN, written without move numbers
/// (about 11 bytes a level), and its movetext as python-chess writes it
/// (`1. Nf3 a6 ( 1... Nf6 2. a3 ( 2. Ng1 a6 ( … ) ) ) *`).
pub fn nested_game(depth: usize) -> (String, String) {
    const KNIGHTS: [&str; 4] = ["Nf3", "Nf6", "Ng1", "Ng8"];
    let pawn = |ply: usize| if ply.is_multiple_of(2) { "a3" } else { "a6" };
    let mut written = String::from("[Event \"nested\"]\n[Result \"*\"]\n\nNf3 a6");
    let mut canonical = String::from("1. Nf3 a6");
    for level in 1..=depth {
        // This line's moves are plies `level` and `level + 1` (0-based).
        let (knight, pawn) = (KNIGHTS[level % 4], pawn(level + 1));
        let _ = write!(written, " ( {knight} {pawn}");
        let number = level / 2 + 1;
        let dots = if level.is_multiple_of(2) { "." } else { "..." };
        let _ = write!(canonical, " ( {number}{dots} {knight}");
        if !level.is_multiple_of(2) {
            let _ = write!(canonical, " {}.", number + 1);
        }
        let _ = write!(canonical, " {pawn}");
    }
    written.push_str(&" )".repeat(depth));
    written.push_str(" *\n\n");
    canonical.push_str(&" )".repeat(depth));
    canonical.push_str(" *");
    (written, canonical)
}

/// The movetext of the one game of a PGN text, its lines joined by spaces.
fn one_movetext(pgn: &str) -> String {
    let (_, movetext) = pgn.split_once("\n\n").expect("tags, then the movetext");
    movetext.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `pgnload ARGS` on `db` with the usual stack; its stdout, exit 0 required.
fn deep_ok(db: &crate::common::TestDb, args: &[&str]) -> String {
    let mut cmd = db.pgnload();
    cmd.arg("-q").args(args);
    let out = run(with_usual_stack(&cmd));
    assert_ok(&out, &[0]);
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// Item 1 of issue 45: a game nested 3,000 and 20,000 variations deep
/// (which python-chess reads, in 55 s at 3,000) aborted pgnload with a
/// stack overflow in `positions`, `import`, `game put`, the import of an
/// En Croissant file and the re-import of an export. Each now reads it
/// whole, into the game tree python-chess writes for it.
#[test]
fn a_game_nested_thousands_of_variations_deep_goes_through_every_entry_point() {
    let dir = scratch_dir("pgnload-annotations-deep-");
    for depth in [3_000, 20_000] {
        let (pgn, canonical) = nested_game(depth);
        let file = dir.path().join(format!("nested-{depth}.pgn"));
        std::fs::write(&file, &pgn).expect("write the game");
        let path = file.display().to_string();

        let mut positions = crate::common::pgnload();
        positions.args(["positions", &path]);
        let out = run(with_usual_stack(&positions));
        assert_ok(&out, &[0]);
        assert_eq!(out.stdout.split(|&b| b == b'\n').count(), 4, "{depth}");

        let db = migrated_db("annotations_deep");
        deep_ok(&db, &["import", &path]);
        let exported = dir.path().join(format!("exported-{depth}.pgn"));
        let exported_path = exported.display().to_string();
        deep_ok(&db, &["export", "-o", &exported_path]);
        let text = std::fs::read_to_string(&exported).expect("read the export");
        assert_eq!(one_movetext(&text), canonical, "{depth}: export");

        let again = migrated_db("annotations_deep_again");
        deep_ok(&again, &["import", &exported_path]);
        assert_eq!(
            one_movetext(&deep_ok(&again, &["games", "--format", "pgn"])),
            canonical,
            "{depth}: export imported again"
        );

        let put = migrated_db("annotations_deep_put");
        deep_ok(&put, &["game", "put", &path]);
        let id = put.psql("SELECT max(id) FROM games");
        assert_eq!(
            one_movetext(&deep_ok(&put, &["game", "show", &id])),
            canonical,
            "{depth}: game put"
        );

        let encroissant = dir.path().join(format!("nested-{depth}.db3"));
        let encroissant_path = encroissant.display().to_string();
        deep_ok(
            &db,
            &["export", "--format", "encroissant", "-o", &encroissant_path],
        );
        let from_encroissant = migrated_db("annotations_deep_encroissant");
        deep_ok(&from_encroissant, &["import", &encroissant_path]);
        assert_eq!(
            one_movetext(&deep_ok(&from_encroissant, &["games", "--format", "pgn"])),
            canonical,
            "{depth}: En Croissant file imported"
        );
    }
}

/// python-chess reads the export of a game nested past Python's own
/// recursion limit (1,000) into the source's tree: node by node, with
/// `py_pgn_tree.py`, which walks the trees in a loop.
#[test]
fn python_chess_reads_the_export_of_a_deep_game_as_its_source() {
    let dir = scratch_dir("pgnload-annotations-deep-python-");
    let (pgn, _) = nested_game(1_200);
    let source = dir.path().join("nested.pgn");
    std::fs::write(&source, &pgn).expect("write the game");
    let db = migrated_db("annotations_deep_python");
    assert_ok(&import(&db, &["-q"], std::slice::from_ref(&source)), &[0]);
    let exported = dir.path().join("exported.pgn");
    db.quiet_ok(&["export", "-o", &exported.display().to_string()]);
    assert_same_trees(&source, &exported);
}

/// Games with NAGs above 255 (`$256`, `$99999`, one nested in a variation,
/// one written `$0256`, one a variation's parent's), each with NAGs up to
/// 255 beside them.
const LARGE_NAGS: &str = "[Event \"large NAGs\"]\n\n1. e4 $256 e5 $99999 2. Nf3 $1 $300 \
     ( 2. Nc3 $1000 ( $4000000000 2. d4 ) ) 2... Nc6 $0256 3. Bb5 $7 *\n\n\
     [Event \"a large NAG, then a typed one\"]\n\n1. e4 $300 e5 $2 *\n\n\
     [Event \"small and large\"]\n\n1. e4 $7 $8 e5 $256 *\n\n";

/// Item 14 of issue 45: NAGs above 255 were dropped (pgn-reader reads a
/// NAG into a byte), so an export no longer matched python-chess, which
/// keeps any; and the En Croissant import rejected `$99999`. They are now
/// kept, from PGN and through an En Croissant file, into the tree
/// python-chess reads; the formats that store a NAG in a byte say they
/// could not carry them; and a NAG above 4,294,967,295 rejects its game
/// with the same reason from PGN and from En Croissant.
#[test]
fn nags_above_255_are_kept_as_python_chess_keeps_them() {
    let dir = scratch_dir("pgnload-annotations-large-nags-");
    let source = dir.path().join("nags.pgn");
    std::fs::write(&source, LARGE_NAGS).expect("write the games");
    let db = migrated_db("annotations_large_nags");
    assert_ok(&import(&db, &["-q"], std::slice::from_ref(&source)), &[0]);
    assert_eq!(db.psql("SELECT count(*) FROM games"), "3");
    let exported = dir.path().join("exported.pgn");
    db.quiet_ok(&["export", "-o", &exported.display().to_string()]);
    assert_same_trees(&source, &exported);

    let encroissant = dir.path().join("nags.db3");
    let encroissant_path = encroissant.display().to_string();
    db.quiet_ok(&["export", "--format", "encroissant", "-o", &encroissant_path]);
    let again = migrated_db("annotations_large_nags_encroissant");
    assert_ok(
        &import(&again, &["-q"], std::slice::from_ref(&encroissant)),
        &[0],
    );
    let exported_again = dir.path().join("exported-again.pgn");
    again.quiet_ok(&["export", "-o", &exported_again.display().to_string()]);
    assert_same_trees(&source, &exported_again);

    // dcg keeps $1, $7, $2, $7 and $8; not the seven NAGs above 255 of the
    // mainlines, nor the variation's $1000.
    assert_eq!(
        not_carried_by_dcg(&db, &dir.path().join("nags")),
        "not carried by the dcg format: 0 comments, 2 variations, 8 NAGs \
         (`export --format pgn` keeps them)"
    );

    // Past u32: the same reject from PGN and from an En Croissant `Moves`
    // blob (e4, the NAG, e5).
    let reason = "NAG $4294967296 is above 4294967295, the largest pgnload keeps";
    let overflow = dir.path().join("overflow.pgn");
    std::fs::write(
        &overflow,
        "[Event \"overflow\"]\n\n1. e4 $4294967296 e5 *\n\n",
    )
    .expect("write the game");
    let rejected = migrated_db("annotations_nag_overflow");
    assert_ok(&import(&rejected, &["-q"], &[overflow]), &[1]);
    let crafted = dir.path().join("overflow.db3");
    let connection = rusqlite::Connection::open(&crafted).expect("create");
    connection
        .execute_batch(pgnload::export::encroissant::SCHEMA)
        .expect("En Croissant's schema");
    let mut blob = vec![12, pgnload::export::encroissant::NAG_MARKER, 11, 0];
    blob.extend_from_slice(b"$4294967296");
    blob.push(12);
    connection
        .execute(
            "INSERT INTO Games (ID, EventID, SiteID, WhiteID, BlackID, Result, Moves) \
             VALUES (1, 0, 0, 0, 0, '*', ?1)",
            [blob],
        )
        .expect("a game");
    drop(connection);
    assert_ok(&import(&rejected, &["-q"], &[crafted]), &[1]);
    assert_eq!(
        rejected.psql("SELECT string_agg(reason, E'\\n') FROM import_rejects"),
        format!("syntax error: {reason}\nsyntax error: {reason}")
    );
}
