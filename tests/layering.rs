//! The layering, checked where the compiler cannot: the crates of the
//! workspace are the layers (an arrow pointing up does not compile), and
//! this module checks what their manifests could still let in — a crate
//! that does I/O or concurrency deep in the chess core's dependency graph,
//! clap below the binary — plus the printing rules no type can express.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::Command,
};

/// The workspace root (this package's manifest directory).
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every crate in `package`'s dependency graph (normal dependencies,
/// transitively, for this platform; dev-dependencies and build scripts
/// left out), by name, as cargo resolves it (`cargo tree`).
fn dependencies_of(package: &str) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .current_dir(root())
        .args([
            "tree",
            "--locked",
            "--offline",
            "--edges",
            "normal",
            "--prefix",
            "none",
        ])
        .args(["--format", "{p}", "--package", package])
        .output()
        .expect("cargo runs the tests, so it can be run");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// Crates that must not appear below each layer: the chess core stays the
/// pure python-chess contract (no database, runtime, threads, terminal,
/// compression or CLI), the database crate knows nothing of chess or of the
/// application, and only the binary parses command lines.
const FORBIDDEN: &[(&str, &[&str])] = &[
    (
        "pgnload-chess",
        &[
            "tokio",
            "tokio-postgres",
            "postgres-protocol",
            "futures-util",
            "crossbeam-channel",
            "rayon",
            "indicatif",
            "clap",
            "nix",
            "zstd",
            "bzip2",
            "flate2",
            "rusqlite",
            "pgnload-db",
            "pgnload",
        ],
    ),
    (
        "pgnload-db",
        &["pgnload-chess", "pgnload", "clap", "indicatif"],
    ),
    ("pgnload", &["clap", "pgnload-cli"]),
];

#[test]
fn each_crate_depends_only_on_the_layers_below_it() {
    let graph: BTreeMap<&str, BTreeSet<String>> = ["pgnload-chess", "pgnload-db", "pgnload"]
        .into_iter()
        .map(|package| (package, dependencies_of(package)))
        .collect();
    assert!(
        graph["pgnload"].contains("pgnload-chess") && graph["pgnload"].contains("tokio-postgres"),
        "the graph is read transitively: {:?}",
        graph["pgnload"]
    );
    let mut broken = Vec::new();
    for (layer, forbidden) in FORBIDDEN {
        for name in forbidden
            .iter()
            .filter(|name| graph[*layer].contains(**name))
        {
            broken.push(format!("{layer} depends on {name}"));
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// The `.rs` files under `dir`, recursively.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The lines of `file` whose code, outside `//` comments, contains one of
/// `needles`, as `file:line: text`.
fn lines_naming(file: &Path, needles: &[&str]) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            let code = line.split("//").next().unwrap_or_default();
            needles.iter().any(|needle| code.contains(needle))
        })
        .map(|(n, line)| format!("{}:{}: {}", file.display(), n + 1, line.trim()))
        .collect()
}

/// The source directories of the workspace: the binary's and each crate's.
fn source_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![root().join("src")];
    for name in ["chess", "db", "app"] {
        dirs.push(root().join("crates").join(name).join("src"));
    }
    dirs
}

/// The chess core reads whatever `std::io::Read` it is given and touches
/// no file, socket, process, environment or thread itself; crates cannot
/// say that about the standard library, so its text is read.
#[test]
fn the_chess_core_reaches_outside_the_process_through_nothing() {
    let files = rust_files(&root().join("crates/chess/src"));
    assert!(
        files.len() >= 8,
        "crates/chess holds the chess core: {files:?}"
    );
    let reaching: Vec<String> = files
        .iter()
        .flat_map(|file| {
            lines_naming(
                file,
                &[
                    "std::fs",
                    "std::net",
                    "std::process",
                    "std::env",
                    "std::thread",
                ],
            )
        })
        .collect();
    assert!(reaching.is_empty(), "{}", reaching.join("\n"));
}

/// The standard library's print macros, which panic (exit code 101) when
/// their stream cannot be written: a full disk, or a reader gone (`| head`).
/// (`print!` also finds `eprint!`, `println!` also `eprintln!`.)
const PRINT_MACROS: [&str; 2] = ["print!", "println!"];

/// No command panics because its output cannot be written: stderr goes
/// through `stderr_line!`, which drops what it cannot write, and stdout
/// through `cmd::print` (or a writer whose errors are returned).
#[test]
fn nothing_prints_with_a_macro_that_panics_on_a_failed_write() {
    let printing: Vec<String> = source_dirs()
        .iter()
        .flat_map(|dir| rust_files(dir))
        .flat_map(|file| lines_naming(&file, &PRINT_MACROS))
        .collect();
    assert!(
        printing.is_empty(),
        "print with stderr_line! or cmd::print:\n{}",
        printing.join("\n")
    );
}

/// Files of the import that may print: the read thread of a named pipe says
/// it waits for a writer, and has no reporter to say it through (it
/// outlives none of the engine's borrows).
const INGEST_MAY_PRINT: &[&str] = &["source.rs"];

/// The import prints nothing itself: what it has to say goes to the front
/// end's `ingest::report::Reporter`, so that the binary (or another front
/// end) decides what is shown and `--quiet` means quiet.
#[test]
fn the_import_prints_nothing_itself() {
    let files = rust_files(&root().join("crates/app/src/ingest"));
    assert!(
        files.len() >= 10,
        "crates/app/src/ingest holds the import: {files:?}"
    );
    let mut needles = vec!["stderr_line!"];
    needles.extend(PRINT_MACROS);
    let printing: Vec<String> = files
        .iter()
        .filter(|file| {
            !file
                .file_name()
                .is_some_and(|name| INGEST_MAY_PRINT.iter().any(|may| name == *may))
        })
        .flat_map(|file| lines_naming(file, &needles))
        .collect();
    assert!(
        printing.is_empty(),
        "the import must tell its Reporter, not print:\n{}",
        printing.join("\n")
    );
}

/// The "Layout" of docs/architecture.md names every source file, so the map
/// of the tree a newcomer reads cannot fall behind the tree.
#[test]
fn the_layout_section_names_every_source_file() {
    let architecture = std::fs::read_to_string(root().join("docs/architecture.md"))
        .expect("docs/architecture.md is in the repository");
    let layout = architecture
        .split_once("### Layout")
        .expect("docs/architecture.md has a Layout section")
        .1;
    let missing: Vec<String> = source_dirs()
        .iter()
        .flat_map(|dir| rust_files(dir))
        .filter(|file| {
            let relative = file.strip_prefix(root()).expect("under the root");
            let name = relative
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            !layout.contains(name)
        })
        .map(|file| file.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "the Layout section does not name: {missing:?}"
    );
}
