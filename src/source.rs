//! Inputs: files or stdin, plain PGN or compressed, sniffed from the first
//! bytes rather than trusted from the file name (Lichess dumps get renamed,
//! and stdin has no name at all).

use std::{
    fmt,
    fs::File,
    io::{self, BufReader, Read},
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use crate::error::Error;

/// Compression formats pgnload reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Plain PGN text.
    None,
    /// Zstandard (Lichess monthly dumps, `.pgn.zst`).
    Zstd,
    /// bzip2 (older Lichess dumps), multi-stream aware.
    Bzip2,
    /// gzip, multi-member aware.
    Gzip,
}

impl Compression {
    /// Sniffs the format from the first bytes of a stream.
    pub fn sniff(head: &[u8]) -> Compression {
        if head.starts_with(&[0x28, 0xB5, 0x2F, 0xFD]) {
            Compression::Zstd
        } else if head.starts_with(b"BZh") {
            Compression::Bzip2
        } else if head.starts_with(&[0x1F, 0x8B]) {
            Compression::Gzip
        } else {
            Compression::None
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Compression::None => "plain",
            Compression::Zstd => "zstd",
            Compression::Bzip2 => "bzip2",
            Compression::Gzip => "gzip",
        })
    }
}

/// Options for opening inputs.
#[derive(Debug, Clone, Copy)]
pub struct SourceOptions {
    /// Largest zstd window accepted, as a power of two. 27 (128 MiB) is
    /// zstd's own default limit; a frame asking for more is refused instead
    /// of allocating whatever a hostile header demands.
    pub zstd_window_log_max: u32,
}

impl Default for SourceOptions {
    fn default() -> Self {
        SourceOptions {
            zstd_window_log_max: 27,
        }
    }
}

/// An opened input: the decompressed byte stream plus what progress
/// reporting needs.
pub struct Input {
    /// The input as the user named it (`-` for stdin).
    pub name: Arc<str>,
    /// The path, `None` for stdin.
    pub path: Option<PathBuf>,
    /// Detected compression.
    pub compression: Compression,
    /// Size on disk (compressed), when known.
    pub len: Option<u64>,
    /// Bytes consumed from the underlying file so far (compressed bytes for
    /// compressed inputs): the progress bar's position.
    pub consumed: Arc<AtomicU64>,
    /// The decompressed PGN stream.
    pub reader: Box<dyn Read + Send>,
}

/// Counts bytes as they are read from the raw (possibly compressed) source.
struct Counting<R> {
    inner: R,
    consumed: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.consumed.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Opens `name` (a path, or `-` for stdin) and sets up decompression.
pub fn open_input(name: &str, options: SourceOptions) -> Result<Input, Error> {
    let (raw, path, len): (Box<dyn Read + Send>, Option<PathBuf>, Option<u64>) = if name == "-" {
        (Box::new(io::stdin()), None, None)
    } else {
        let path = Path::new(name).to_path_buf();
        let open_err = |source| Error::Open {
            path: path.clone(),
            source,
        };
        let file = File::open(&path).map_err(open_err)?;
        let meta = file.metadata().map_err(open_err)?;
        if meta.is_dir() {
            return Err(open_err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "is a directory",
            )));
        }
        (Box::new(file), Some(path), Some(meta.len()))
    };
    let consumed = Arc::new(AtomicU64::new(0));
    let mut counted = BufReader::with_capacity(
        1 << 20,
        Counting {
            inner: raw,
            consumed: Arc::clone(&consumed),
        },
    );
    let open_err = |source| Error::Open {
        path: path.clone().unwrap_or_else(|| PathBuf::from(name)),
        source,
    };
    let head = read_head(&mut counted, 4).map_err(open_err)?;
    let compression = Compression::sniff(&head);
    let stream = io::Cursor::new(head).chain(counted);
    let reader: Box<dyn Read + Send> = match compression {
        Compression::None => Box::new(stream),
        Compression::Zstd => {
            let mut decoder = zstd::stream::read::Decoder::new(stream).map_err(open_err)?;
            decoder
                .window_log_max(options.zstd_window_log_max)
                .map_err(open_err)?;
            Box::new(decoder)
        }
        Compression::Bzip2 => Box::new(BufReader::with_capacity(
            1 << 16,
            bzip2::read::MultiBzDecoder::new(stream),
        )),
        Compression::Gzip => Box::new(BufReader::with_capacity(
            1 << 16,
            flate2::read::MultiGzDecoder::new(stream),
        )),
    };
    Ok(Input {
        name: Arc::from(name),
        path,
        compression,
        len,
        consumed,
        reader,
    })
}

/// Reads up to `n` bytes (fewer only at end of stream), coping with short
/// reads from pipes.
fn read_head(reader: &mut impl Read, n: usize) -> io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(n);
    reader.take(n as u64).read_to_end(&mut head)?;
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const PGN: &[u8] = b"[Event \"x\"]\n\n1. e4 e5 *\n";

    fn round_trip(compressed: &[u8], expected: Compression) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("input.bin");
        std::fs::write(&path, compressed).expect("write temp file");
        let mut input = open_input(
            path.to_str().expect("utf-8 temp path"),
            SourceOptions::default(),
        )
        .expect("opens");
        assert_eq!(input.compression, expected);
        let mut out = Vec::new();
        input.reader.read_to_end(&mut out).expect("decompresses");
        assert_eq!(out, PGN);
        assert_eq!(
            input.consumed.load(Ordering::Relaxed),
            compressed.len() as u64
        );
    }

    #[test]
    fn formats_are_sniffed_from_magic_bytes() {
        round_trip(PGN, Compression::None);
        round_trip(&zstd::encode_all(PGN, 3).expect("zstd"), Compression::Zstd);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(PGN).expect("gzip");
        round_trip(&gz.finish().expect("gzip"), Compression::Gzip);
        let mut bz = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
        bz.write_all(PGN).expect("bzip2");
        round_trip(&bz.finish().expect("bzip2"), Compression::Bzip2);
    }

    #[test]
    fn tiny_and_empty_files_are_plain() {
        assert_eq!(Compression::sniff(b""), Compression::None);
        assert_eq!(Compression::sniff(b"\x28"), Compression::None);
    }

    #[test]
    fn missing_file_names_the_path() {
        let err = open_input("/nonexistent/x.pgn", SourceOptions::default())
            .err()
            .expect("missing file fails");
        assert!(err.to_string().contains("/nonexistent/x.pgn"));
    }
}

/// Identifies an input file by content, not name: its size plus an xxh3-128
/// digest of its first and last MiB. A renamed file resumes; a changed
/// (rewritten, truncated, appended) file does not.
pub fn fingerprint(path: &Path) -> io::Result<String> {
    use std::io::{Seek, SeekFrom};
    const SPAN: u64 = 1 << 20;
    let mut file = File::open(path)?;
    let len = file.metadata()?.len();
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut buf = Vec::with_capacity(SPAN as usize);
    (&mut file).take(SPAN).read_to_end(&mut buf)?;
    hasher.update(&buf);
    if len > SPAN {
        buf.clear();
        file.seek(SeekFrom::Start(len.saturating_sub(SPAN).max(SPAN)))?;
        file.take(SPAN).read_to_end(&mut buf)?;
        hasher.update(&buf);
    }
    Ok(format!("{len}:{:032x}", hasher.digest128()))
}

#[cfg(test)]
mod fingerprint_tests {
    use super::*;

    #[test]
    fn fingerprint_follows_content_not_name() {
        let dir = tempfile::tempdir().expect("temp dir");
        let a = dir.path().join("a.pgn");
        let b = dir.path().join("b.pgn");
        std::fs::write(&a, b"1. e4 *\n").expect("write");
        std::fs::write(&b, b"1. e4 *\n").expect("write");
        assert_eq!(fingerprint(&a).expect("a"), fingerprint(&b).expect("b"));
        std::fs::write(&b, b"1. d4 *\n").expect("write");
        assert_ne!(fingerprint(&a).expect("a"), fingerprint(&b).expect("b"));
        let big: Vec<u8> = (0..3u32 << 20).map(|i| (i % 251) as u8).collect();
        std::fs::write(&a, &big).expect("write");
        let before = fingerprint(&a).expect("a");
        let mut changed = big.clone();
        let last = changed.len() - 1;
        changed[last] ^= 1;
        std::fs::write(&a, &changed).expect("write");
        assert_ne!(before, fingerprint(&a).expect("a"));
    }
}
