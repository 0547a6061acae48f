//! The layering rule, checked: the pure chess core (`src/chess/`) imports
//! nothing of the database, pipeline or command layers, and no crate that
//! does I/O or concurrency, so it stays the python-chess contract that
//! `verify`, the exports and a future crate of its own can use without
//! tokio-postgres. A `use` that breaks the rule fails `cargo test`.

use std::path::Path;

/// The project's modules the chess core may name (`crate::<module>`).
const CHESS_MAY_USE: &[&str] = &["chess", "error"];

/// Crates the chess core must never name: the database driver, the async
/// runtime, the pipeline's threads and channels, the terminal and the CLI.
const CHESS_MUST_NOT_USE: &[&str] = &[
    "tokio",
    "tokio_postgres",
    "postgres",
    "futures_util",
    "crossbeam_channel",
    "rayon",
    "indicatif",
    "clap",
    "nix",
    "zstd",
    "bzip2",
    "flate2",
];

/// Paths of the standard library that reach outside the process.
const CHESS_MUST_NOT_USE_STD: &[&str] = &["fs", "net", "process", "env", "thread"];

/// The rule's violations in one file's text, as `line: path` strings.
/// Comments are ignored (doc links may name any module); a `crate::{...}`
/// group is read across its lines.
fn violations(text: &str) -> Vec<String> {
    layer_violations(text, CHESS_MAY_USE, true)
}

/// The modules of the project each layer below `cmd` may name: its own,
/// and the layers under it (arrows point down only, docs/architecture.md "Layout").
const LAYERS: &[(&str, &[&str])] = &[
    ("chess", CHESS_MAY_USE),
    ("store", &["store", "chess", "error"]),
    ("query", &["query", "store", "chess", "error"]),
    ("export", &["export", "query", "store", "chess", "error"]),
];

/// The `crate::` paths of `text` that name a module outside `may_use`
/// and, when `pure`, the I/O and concurrency crates and `std` paths the
/// chess core must not use.
fn layer_violations(text: &str, may_use: &[&str], pure: bool) -> Vec<String> {
    let code: String = text
        .lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    let mut found = Vec::new();
    for (at, name, rest) in paths(&code) {
        let bad = match name {
            "crate" => group_items(rest)
                .into_iter()
                .find(|item| !may_use.contains(item))
                .map(|item| format!("crate::{item}")),
            "std" if pure => group_items(rest)
                .into_iter()
                .find(|item| CHESS_MUST_NOT_USE_STD.contains(item))
                .map(|item| format!("std::{item}")),
            _ if pure => CHESS_MUST_NOT_USE.contains(&name).then(|| name.to_owned()),
            _ => None,
        };
        if let Some(bad) = bad {
            let line = code[..at].matches('\n').count() + 1;
            found.push(format!("{line}: {bad}"));
        }
    }
    found
}

/// Every `name::rest` in the code, with `name` a whole identifier that
/// starts a path (not the middle of `a::name::b`), and where it is.
fn paths(code: &str) -> impl Iterator<Item = (usize, &str, &str)> {
    code.match_indices("::").filter_map(move |(at, _)| {
        let before = &code[..at];
        let start = before
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        let name = &before[start..];
        (!name.is_empty() && !before[..start].ends_with("::"))
            .then(|| (start, name, &code[at + 2..]))
    })
}

/// The first identifier of `text`, after any whitespace.
fn leading_ident(text: &str) -> &str {
    let text = text.trim_start();
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The modules named after `crate::` or `std::`: one, or the top-level
/// items of a `{...}` group.
fn group_items(rest: &str) -> Vec<&str> {
    let rest = rest.trim_start();
    let Some(group) = rest.strip_prefix('{') else {
        return vec![leading_ident(rest)];
    };
    let mut items = Vec::new();
    let mut depth = 0_usize;
    let mut at_item = true;
    for (i, c) in group.char_indices() {
        match c {
            '}' if depth == 0 => break,
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => at_item = true,
            c if at_item && depth == 0 && !c.is_whitespace() => {
                items.push(leading_ident(&group[i..]));
                at_item = false;
            }
            _ => {}
        }
    }
    items
}

/// Every `.rs` file under `dir`, depth first, in name order.
fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry of src/chess").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_chess_core_imports_no_database_pipeline_or_io_layer() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/chess");
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    assert!(
        files.len() >= 6,
        "src/chess holds the chess core: {files:?}"
    );
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        for v in violations(&text) {
            broken.push(format!("{}:{v}", file.display()));
        }
    }
    assert!(
        broken.is_empty(),
        "the chess core must not depend on the layers above it nor do I/O:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_checker_sees_every_way_of_naming_a_forbidden_layer() {
    let cases = [
        ("use crate::store::db;", "1: crate::store"),
        (
            "use crate::{\n    chess::fen,\n    ingest::pipeline::Batch,\n};",
            "1: crate::ingest",
        ),
        ("let r = tokio::runtime::Runtime::new();", "1: tokio"),
        ("fn f(c: &tokio_postgres::Client) {}", "1: tokio_postgres"),
        ("use std::{io, fs::File};", "1: std::fs"),
        ("let t = std::fs::read(p);", "1: std::fs"),
        ("x\ncrate::cmd::print(\"\")", "2: crate::cmd"),
    ];
    for (code, expected) in cases {
        let found = violations(code);
        let want: Vec<&str> = if expected.is_empty() {
            vec![]
        } else {
            vec![expected]
        };
        assert_eq!(found, want, "{code}");
    }
    assert!(violations("use crate::{chess::fen, error::RejectReason};").is_empty());
    assert!(violations("// use crate::store::db;").is_empty());
    assert!(violations("let m = shakmaty::Move::Put { role, to };").is_empty());
}

/// Files of `src/ingest/` that may print: the read thread of a named pipe
/// says it waits for a writer, and has no reporter to say it through (it
/// outlives none of the engine's borrows).
const INGEST_MAY_PRINT: &[&str] = &["source.rs"];

/// The import prints nothing itself: what it has to say goes to the
/// front end's `ingest::report::Reporter`, so that `cmd::import` (or
/// another front end) decides what is shown and `--quiet` means quiet.
#[test]
fn the_import_prints_nothing_itself() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ingest");
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    assert!(files.len() >= 10, "src/ingest holds the import: {files:?}");
    let mut printing = Vec::new();
    for file in &files {
        if file
            .file_name()
            .is_some_and(|name| INGEST_MAY_PRINT.iter().any(|may| name == *may))
        {
            continue;
        }
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        printing.extend(lines_using(
            file,
            &text,
            &["stderr_line!", PRINT_MACROS[0], PRINT_MACROS[1]],
        ));
    }
    assert!(
        printing.is_empty(),
        "the import must tell its Reporter, not print:\n{}",
        printing.join("\n")
    );
}

/// The standard library's print macros, which panic (exit code 101) when
/// their stream cannot be written: a full disk, or a reader gone (`| head`).
const PRINT_MACROS: [&str; 2] = ["print!", "println!"];

/// The lines of `file` (its `text`) whose code, outside comments, names
/// one of `macros` (`print!` also finds `eprint!`, `println!` also
/// `eprintln!`).
fn lines_using(file: &Path, text: &str, macros: &[&str]) -> Vec<String> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            let code = line.split("//").next().unwrap_or_default();
            macros.iter().any(|m| code.contains(m))
        })
        .map(|(n, line)| format!("{}:{}: {}", file.display(), n + 1, line.trim()))
        .collect()
}

/// No command panics because its output cannot be written: stderr goes
/// through `stderr_line!`, which drops what it cannot write, and stdout
/// through `cmd::print` (or a writer whose errors are returned), never
/// through the standard print macros.
#[test]
fn nothing_prints_with_a_macro_that_panics_on_a_failed_write() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut printing = Vec::new();
    for file in files.iter().filter(|f| !f.ends_with("layers.rs")) {
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        printing.extend(lines_using(file, &text, &PRINT_MACROS));
    }
    assert!(
        printing.is_empty(),
        "print with stderr_line! or cmd::print:\n{}",
        printing.join("\n")
    );
}

/// Every layer names only itself and the layers below it: reading back
/// (`query`, `export`) never reaches into the import, and the database
/// layer into nothing but the chess core.
#[test]
fn each_layer_names_only_the_layers_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut broken = Vec::new();
    for (layer, may_use) in LAYERS {
        let mut files = Vec::new();
        rust_files(&src.join(layer), &mut files);
        assert!(!files.is_empty(), "src/{layer} holds a layer");
        for file in &files {
            let text = std::fs::read_to_string(file)
                .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
            for v in layer_violations(&text, may_use, false) {
                broken.push(format!("{}:{v}", file.display()));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "a layer names one above it:\n{}",
        broken.join("\n")
    );
    assert_eq!(
        layer_violations(
            "use crate::{query::games, ingest::writer};",
            LAYERS[3].1,
            false
        ),
        vec!["1: crate::ingest"]
    );
}

/// The "Layout" of docs/architecture.md names every source file, so the map of the tree
/// a newcomer reads cannot fall behind the tree.
#[test]
fn the_readme_layout_names_every_source_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("docs/architecture.md"))
        .expect("docs/architecture.md is in the repository");
    let layout = readme
        .split_once("### Layout")
        .expect("docs/architecture.md has a Layout section")
        .1;
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let missing: Vec<String> = files
        .iter()
        .filter_map(|file| {
            let name = file.file_name()?.to_str()?;
            (!layout.contains(name)).then(|| file.display().to_string())
        })
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md Layout does not name: {missing:?}"
    );
}
