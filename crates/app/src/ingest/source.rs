//! Inputs: files or stdin, plain PGN or compressed, sniffed from the first
//! bytes rather than trusted from the file name (Lichess dumps get renamed,
//! and stdin has no name at all).
//!
//! It must not parse PGN: it hands out bytes and fingerprints, nothing
//! more.

use std::{
    fmt,
    fs::{File, OpenOptions},
    io::{self, BufReader, Read},
    os::{
        fd::{AsFd, BorrowedFd},
        unix::fs::OpenOptionsExt,
    },
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use nix::{
    errno::Errno,
    fcntl::{FcntlArg, OFlag, fcntl},
    poll::{PollFd, PollFlags, poll},
};

use crate::error::Error;

/// Formats pgnload reads: PGN, plain or compressed, and the exchange
/// formats' stored games.
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
    /// A SQLite database (`SQLite format 3\0`), read as ocgdb's schema
    /// (`ingest::exchange`), which it is refused for lacking.
    Sqlite,
    /// A Simple Chess Database, named by its index (`.dci`) or games
    /// (`.dcg`) file, the other four beside it (`ingest::exchange`).
    Dcg,
    /// A container or compression pgnload does not read (zip, 7z, xz, rar,
    /// lz4, tar), named: parsed as PGN it would only give garbage rejects,
    /// so the input fails with this name instead.
    Unsupported(&'static str),
}

/// Bytes of a stream's head that [`Compression::sniff`] looks at (tar's
/// magic is at offset 257).
pub const SNIFF_LEN: usize = 262;

impl Compression {
    /// Sniffs the format from the first bytes of a stream (up to
    /// [`SNIFF_LEN`]).
    pub fn sniff(head: &[u8]) -> Compression {
        const UNSUPPORTED: [(&[u8], &str); 7] = [
            (b"PK\x03\x04", "zip archive"),
            (b"PK\x05\x06", "zip archive"),
            (b"7z\xBC\xAF\x27\x1C", "7z archive"),
            (b"\xFD7zXZ\x00", "xz"),
            (b"Rar!\x1A\x07", "rar archive"),
            (b"\x04\x22\x4D\x18", "lz4"),
            (b"\x5D\x00\x00", "lzma"),
        ];
        if head.starts_with(b"SQLite format 3\0") {
            Compression::Sqlite
        } else if head.starts_with(b"SimpleCDbi") || head.starts_with(b"SimpleCDbg") {
            Compression::Dcg
        } else if head.starts_with(b"SimpleCDbn")
            || head.starts_with(b"SimpleCDbs")
            || head.starts_with(b"SimpleCDbe")
        {
            Compression::Unsupported(
                "a Simple Chess Database name, site or event file (import its .dci or .dcg)",
            )
        } else if head.starts_with(&[0x28, 0xB5, 0x2F, 0xFD]) {
            Compression::Zstd
        } else if head.starts_with(b"BZh") {
            Compression::Bzip2
        } else if head.starts_with(&[0x1F, 0x8B]) {
            Compression::Gzip
        } else if let Some((_, name)) = UNSUPPORTED
            .iter()
            .find(|(magic, _)| head.starts_with(magic))
        {
            Compression::Unsupported(name)
        } else if head.get(257..262) == Some(b"ustar") {
            Compression::Unsupported("tar archive")
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
            Compression::Sqlite => "sqlite",
            Compression::Dcg => "dcg",
            Compression::Unsupported(name) => name,
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
    /// Size on disk (compressed), when known.
    pub len: Option<u64>,
    /// The format its first bytes were sniffed as.
    pub compression: Compression,
    /// Bytes consumed from the underlying file so far (compressed bytes for
    /// compressed inputs): the progress bar's position.
    pub consumed: Arc<AtomicU64>,
    /// The decompressed PGN stream.
    pub reader: Box<dyn Read + Send>,
    /// The decompressed offset of `reader`'s first byte: 0, but for a
    /// stream read again after a failed attempt
    /// ([`crate::ingest::replay`]), which starts at its first byte no
    /// batch committed.
    pub start_offset: u64,
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
    open_input_interruptible(name, options, Arc::default())
}

/// [`open_input`], giving up (with an error for which [`is_cancelled`]
/// holds) once `interrupts` is non-zero while it waits for a stream's data: a
/// FIFO nobody writes to must not keep a signalled run from ending.
pub fn open_input_interruptible(
    name: &str,
    options: SourceOptions,
    interrupts: Arc<AtomicUsize>,
) -> Result<Input, Error> {
    let open_err = |source| Error::Open {
        path: PathBuf::from(name),
        source,
    };
    let (raw, len) = open_raw(name, interrupts).map_err(open_err)?;
    let consumed = Arc::new(AtomicU64::new(0));
    let mut counted = BufReader::with_capacity(
        1 << 20,
        Counting {
            inner: raw,
            consumed: Arc::clone(&consumed),
        },
    );
    let head = read_head(&mut counted, SNIFF_LEN).map_err(open_err)?;
    let compression = Compression::sniff(&head);
    let stream = io::Cursor::new(head).chain(counted);
    let reader = decompress(stream, compression, options).map_err(open_err)?;
    Ok(Input {
        name: Arc::from(name),
        len,
        compression,
        consumed,
        reader,
        start_offset: 0,
    })
}

/// `name` (a path, or `-` for stdin) opened as it is, with its length if
/// it is a regular file; a stream waits for data interruptibly
/// ([`Stream`]).
fn open_raw(
    name: &str,
    interrupts: Arc<AtomicUsize>,
) -> io::Result<(Box<dyn Read + Send>, Option<u64>)> {
    if name == "-" {
        // A duplicate of fd 0 rather than `io::stdin()`, whose own buffer
        // would hide data from the wait for readable data.
        let stdin = io::stdin().as_fd().try_clone_to_owned()?;
        let stream = Stream::new(Arc::from(name), File::from(stdin), interrupts);
        return Ok((Box::new(stream), None));
    }
    // Non-blocking: opening a FIFO for reading otherwise waits, beyond
    // the reach of any signal handler, until some process opens it for
    // writing. Reads block again once it is open.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(OFlag::O_NONBLOCK.bits())
        .open(name)?;
    let flags = fcntl(&file, FcntlArg::F_GETFL)?;
    fcntl(
        &file,
        FcntlArg::F_SETFL(OFlag::from_bits_retain(flags) & !OFlag::O_NONBLOCK),
    )?;
    let meta = file.metadata()?;
    if meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "is a directory",
        ));
    }
    if meta.is_file() {
        Ok((Box::new(file), Some(meta.len())))
    } else {
        let stream = Stream::new(Arc::from(name), file, interrupts);
        Ok((Box::new(stream), None))
    }
}

/// The PGN of `stream` (whose head was sniffed as `compression`):
/// decompressed, or an error for a format read only from a file or not at
/// all.
fn decompress(
    stream: impl Read + Send + 'static,
    compression: Compression,
    options: SourceOptions,
) -> io::Result<Box<dyn Read + Send>> {
    Ok(match compression {
        Compression::None => Box::new(stream),
        Compression::Zstd => {
            let mut decoder = zstd::stream::read::Decoder::new(stream)?;
            decoder.window_log_max(options.zstd_window_log_max)?;
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
        Compression::Sqlite | Compression::Dcg => {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "{compression} database: pgnload import reads it from a file, not from a \
                     stream nor as PGN"
                ),
            ));
        }
        Compression::Unsupported(format) => {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "unsupported format: {format} (pgnload reads plain PGN, zstd, bzip2 and gzip; \
                     extract or recompress it first)"
                ),
            ));
        }
    })
}

/// Why reading stopped: the run was interrupted (see [`is_cancelled`]).
/// Not [`io::ErrorKind::Interrupted`], which `std`'s read loops retry.
#[derive(Debug, thiserror::Error)]
#[error("interrupted while waiting for data")]
struct Cancelled;

/// The error of a read given up because the run was interrupted: one for
/// which [`is_cancelled`] holds (the exchange readers stop SQLite with it).
pub fn cancelled() -> io::Error {
    io::Error::other(Cancelled)
}

/// Whether `error` means the run was interrupted while an input was being
/// fingerprinted, waited for or read, rather than that the input is broken.
#[expect(
    clippy::redundant_closure_for_method_calls,
    reason = "the method's path would spell out the trait object's whole type"
)]
pub fn is_cancelled(error: &Error) -> bool {
    match error {
        Error::Open { source, .. } | Error::InputBroken { source, .. } => source
            .get_ref()
            .is_some_and(|inner| inner.is::<Cancelled>()),
        _ => false,
    }
}

/// A non-seekable input (stdin, a pipe, a FIFO, a character device): before
/// each read it waits for data in slices, so that a run interrupted while
/// the writer is silent (or not there yet) still ends.
struct Stream {
    name: Arc<str>,
    file: File,
    interrupts: Arc<AtomicUsize>,
    /// Whether the "waiting" notice was printed (once per input).
    told: bool,
}

impl Stream {
    /// How long a read waits in silence before saying so.
    const NOTICE_AFTER: Duration = Duration::from_secs(2);

    fn new(name: Arc<str>, file: File, interrupts: Arc<AtomicUsize>) -> Stream {
        Stream {
            name,
            file,
            interrupts,
            told: false,
        }
    }

    /// Returns once the stream is readable (data, end of stream or an
    /// error for `read` to report), or fails when the run is interrupted.
    fn wait_readable(&mut self) -> io::Result<()> {
        let started = Instant::now();
        loop {
            if self.interrupts.load(Ordering::SeqCst) > 0 {
                return Err(cancelled());
            }
            if poll_readable(self.file.as_fd())? {
                return Ok(());
            }
            if !self.told && started.elapsed() >= Self::NOTICE_AFTER {
                self.told = true;
                stderr_line!(
                    "pgnload: {}: waiting for data (a named pipe waits for a writer)",
                    self.name
                );
            }
        }
    }
}

/// Whether `fd` is readable within a short slice of time.
fn poll_readable(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    match poll(&mut fds, 200u16) {
        Ok(ready) => Ok(ready > 0),
        Err(Errno::EINTR) => Ok(false),
        Err(errno) => Err(errno.into()),
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.wait_readable()?;
        self.file.read(buf)
    }
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
        assert_eq!(Compression::sniff(compressed), expected);
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

    /// A temporary directory holding `bytes` as `input`.
    fn dir_with(bytes: &[u8]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("input"), bytes).expect("write temp file");
        dir
    }

    #[test]
    fn archives_and_unsupported_compressions_are_named() {
        let cases: [(&[u8], &str); 7] = [
            (b"PK\x03\x04\x14\x00", "zip archive"),
            (b"7z\xBC\xAF\x27\x1C\x00", "7z archive"),
            (b"\xFD7zXZ\x00\x00", "xz"),
            (b"Rar!\x1A\x07\x01\x00", "rar archive"),
            (b"\x04\x22\x4D\x18\x64", "lz4"),
            (b"\x5D\x00\x00\x80\x00", "lzma"),
            (b"PK\x05\x06\x00\x00", "zip archive"),
        ];
        for (head, name) in cases {
            assert_eq!(Compression::sniff(head), Compression::Unsupported(name));
        }
        let mut tar = b"games.pgn".to_vec();
        tar.resize(257, 0);
        tar.extend_from_slice(b"ustar\x0000");
        assert_eq!(
            Compression::sniff(&tar),
            Compression::Unsupported("tar archive")
        );
        assert_eq!(
            Compression::sniff(b"SQLite format 3\0\x10\x00"),
            Compression::Sqlite
        );
        assert_eq!(Compression::sniff(b"SimpleCDbi\0"), Compression::Dcg);
        assert_eq!(Compression::sniff(b"SimpleCDbg"), Compression::Dcg);
        assert!(matches!(
            Compression::sniff(b"SimpleCDbn"),
            Compression::Unsupported(_)
        ));
        assert_eq!(Compression::sniff(b"SQLite format 2"), Compression::None);
        let db = dir_with(b"SQLite format 3\0\x10\x00");
        let err = open_input(
            db.path().join("input").to_str().expect("utf-8 temp path"),
            SourceOptions::default(),
        )
        .err()
        .expect("a database is no PGN stream");
        assert!(err.to_string().contains("sqlite database"), "{err}");
        // A PGN is not mistaken for one.
        assert_eq!(Compression::sniff(PGN), Compression::None);
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("games.zip");
        std::fs::write(&path, b"PK\x03\x04\x14\x00[Event \"x\"]").expect("write");
        let err = open_input(
            path.to_str().expect("utf-8 temp path"),
            SourceOptions::default(),
        )
        .err()
        .expect("a zip is refused");
        let text = err.to_string();
        assert!(
            text.contains("games.zip: unsupported format: zip archive"),
            "{text}"
        );
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

/// Whether `name` is read as a stream: stdin (`-`), or anything but a
/// regular file or directory (a FIFO, `/dev/fd/N` of a pipe, a character
/// device). A stream is read once, wholly: reading it to fingerprint it
/// would consume it, so it has no identity across runs and cannot resume.
/// Decided with `stat`, which never opens (nor blocks on) a FIFO.
pub fn is_stream(name: &str) -> bool {
    name == "-" || std::fs::metadata(name).is_ok_and(|m| !m.is_file() && !m.is_dir())
}

/// How much a compressed dump grows when decompressed, roughly (a Lichess
/// month's `.pgn.zst` is about a fifth of its PGN).
const COMPRESSION_RATIO: u64 = 5;

/// The PGN bytes a file of `size` bytes in `compression` holds, roughly:
/// its size, times [`COMPRESSION_RATIO`] if it is compressed. Estimates
/// only: they size things (`--mode auto`, small inputs' batches), never
/// decide what is read.
fn plain_estimate(size: u64, compression: Compression) -> u64 {
    match compression {
        Compression::None => size,
        _ => size.saturating_mul(COMPRESSION_RATIO),
    }
}

/// [`plain_estimate`] of a named input before it is opened; `None` for a
/// stream (unknown until read) or a path that cannot be read (opening it
/// reports why).
pub fn estimated_plain_bytes(name: &str) -> Option<u64> {
    if is_stream(name) {
        return None;
    }
    let path = Path::new(name);
    let size = std::fs::metadata(path).ok()?.len();
    Some(plain_estimate(
        size,
        sniff_file(path).unwrap_or(Compression::None),
    ))
}

impl Input {
    /// [`plain_estimate`] of this opened input, from what opening it
    /// learnt; `None` for a stream.
    pub fn estimated_plain_len(&self) -> Option<u64> {
        self.len.map(|len| plain_estimate(len, self.compression))
    }
}

/// The format of a regular file, from its first bytes; `None` for a stream
/// (see [`is_stream`]), which must not be opened twice, or for a file that
/// cannot be read (opening it reports why).
pub fn sniff_file(path: &Path) -> Option<Compression> {
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return None;
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(OFlag::O_NONBLOCK.bits())
        .open(path)
        .ok()?;
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return None;
    }
    let head = read_head(&mut &file, SNIFF_LEN).ok()?;
    Some(Compression::sniff(&head))
}

/// Identifies an input file by content, not name: its size and an xxh3-128
/// digest of all its bytes, so that a renamed file resumes and any change
/// (even one byte in the middle, size kept) makes it another input. Costs
/// one read of the file (`scripts/bench.sh` reports it against `cat`).
/// Returns the fingerprint and the size; fails with an error for which
/// [`is_cancelled`] holds once `interrupts` is non-zero.
///
/// Fingerprints written by pgnload before this one (`SIZE:DIGEST` of the
/// first and last MiB only) never equal one of these (`xxh3-128:…`).
pub fn fingerprint(path: &Path, interrupts: &AtomicUsize) -> Result<(String, u64), Error> {
    digest_file(path, None, interrupts)
        .map(|(size, digest)| (format_fingerprint(size, digest), size))
        .map_err(|source| Error::Open {
            path: path.to_path_buf(),
            source,
        })
}

/// The text of a fingerprint of `size` bytes with `digest`.
fn format_fingerprint(size: u64, digest: u128) -> String {
    format!("xxh3-128:{size}:{digest:032x}")
}

/// The size `old` (an earlier [`fingerprint`] of the file at `path`) was
/// taken at, if the file begins with those very bytes and is longer now:
/// it only grew since (a download or an append finished after an import of
/// its first part). `None` for an `old` not of this kind, a file not longer
/// than it, or one whose first bytes changed. Reads the first `old`-size
/// bytes once; fails as [`fingerprint`] does.
pub fn grown_from(path: &Path, old: &str, interrupts: &AtomicUsize) -> Result<Option<u64>, Error> {
    let Some(old_size) = old
        .strip_prefix("xxh3-128:")
        .and_then(|rest| rest.split_once(':'))
        .and_then(|(size, _)| size.parse::<u64>().ok())
    else {
        return Ok(None);
    };
    let grown = || -> io::Result<Option<u64>> {
        if std::fs::metadata(path)?.len() <= old_size {
            return Ok(None);
        }
        let (size, digest) = digest_file(path, Some(old_size), interrupts)?;
        Ok((format_fingerprint(size, digest) == old).then_some(old_size))
    };
    grown().map_err(|source| Error::Open {
        path: path.to_path_buf(),
        source,
    })
}

/// The size and xxh3-128 digest of `path`'s first `limit` bytes (all of
/// them when `None`), read once: what [`fingerprint`] identifies a file by,
/// what [`grown_from`] compares, and what the exchange inputs combine over
/// every file they are read from. Fails with an error for which
/// [`is_cancelled`] holds once `interrupts` is non-zero, when the file
/// holds fewer than `limit` bytes, and when it changes size while read
/// whole.
pub fn digest_file(
    path: &Path,
    limit: Option<u64>,
    interrupts: &AtomicUsize,
) -> io::Result<(u64, u128)> {
    let file = File::open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut file = file.take(limit.unwrap_or(u64::MAX));
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        if interrupts.load(Ordering::SeqCst) > 0 {
            return Err(cancelled());
        }
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    let expected = limit.unwrap_or(meta.len());
    if size != expected {
        return Err(io::Error::other(format!(
            "changed while being fingerprinted ({expected} bytes expected, {size} read)"
        )));
    }
    Ok((size, hasher.digest128()))
}

#[cfg(test)]
mod fingerprint_tests {
    use super::*;

    #[test]
    fn fingerprint_follows_content_not_name() {
        let never = AtomicUsize::new(0);
        let dir = tempfile::tempdir().expect("temp dir");
        let a = dir.path().join("a.pgn");
        let b = dir.path().join("b.pgn");
        let fp = |path: &Path| fingerprint(path, &never).expect("fingerprint").0;
        std::fs::write(&a, b"1. e4 *\n").expect("write");
        std::fs::write(&b, b"1. e4 *\n").expect("write");
        assert_eq!(fp(&a), fp(&b));
        std::fs::write(&b, b"1. d4 *\n").expect("write");
        assert_ne!(fp(&a), fp(&b));
        // One byte changed in the middle of a 3 MiB file, size kept.
        let big: Vec<u8> = (0..3u32 << 20).map(|i| (i % 251) as u8).collect();
        std::fs::write(&a, &big).expect("write");
        let before = fp(&a);
        assert!(before.starts_with("xxh3-128:3145728:"), "{before}");
        let mut changed = big.clone();
        changed[big.len() / 2] ^= 1;
        std::fs::write(&a, &changed).expect("write");
        assert_ne!(before, fp(&a));
    }

    #[test]
    fn a_file_that_only_grew_is_told_from_a_changed_one() {
        let never = AtomicUsize::new(0);
        let dir = tempfile::tempdir().expect("temp dir");
        let a = dir.path().join("a.pgn");
        std::fs::write(&a, b"1. e4 *\n").expect("write");
        let old = fingerprint(&a, &never).expect("fingerprint").0;
        assert_eq!(grown_from(&a, &old, &never).expect("same file"), None);
        std::fs::write(&a, b"1. e4 *\n1. d4 *\n").expect("write");
        assert_eq!(grown_from(&a, &old, &never).expect("grown"), Some(8));
        std::fs::write(&a, b"1. c4 *\n1. d4 *\n").expect("write");
        assert_eq!(grown_from(&a, &old, &never).expect("changed"), None);
        std::fs::write(&a, b"1. e4").expect("write");
        assert_eq!(grown_from(&a, &old, &never).expect("shorter"), None);
        assert_eq!(grown_from(&a, "1234:abcd", &never).expect("old kind"), None);
    }

    #[test]
    fn fingerprinting_stops_when_interrupted() {
        let dir = tempfile::tempdir().expect("temp dir");
        let a = dir.path().join("a.pgn");
        std::fs::write(&a, b"1. e4 *\n").expect("write");
        let err = fingerprint(&a, &AtomicUsize::new(1)).expect_err("interrupted");
        assert!(is_cancelled(&err), "{err}");
        let missing =
            fingerprint(&dir.path().join("none"), &AtomicUsize::new(0)).expect_err("missing file");
        assert!(!is_cancelled(&missing), "{missing}");
    }

    #[test]
    fn streams_are_told_apart_without_opening_them() {
        let dir = tempfile::tempdir().expect("temp dir");
        let fifo = dir.path().join("p");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600))
            .expect("mkfifo");
        let fifo = fifo.to_str().expect("utf-8 temp path");
        // A FIFO without a writer: opening it for reading would block.
        assert!(is_stream(fifo));
        assert_eq!(sniff_file(Path::new(fifo)), None);
        assert!(is_stream("-"));
        assert!(is_stream("/dev/null"));
        let file = dir.path().join("f.pgn");
        std::fs::write(&file, b"1. e4 *\n").expect("write");
        assert!(!is_stream(file.to_str().expect("utf-8 temp path")));
        assert_eq!(sniff_file(&file), Some(Compression::None));
    }

    #[test]
    fn an_interrupted_wait_for_a_fifo_writer_gives_up() {
        let dir = tempfile::tempdir().expect("temp dir");
        let fifo = dir.path().join("p");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600))
            .expect("mkfifo");
        let interrupts = Arc::new(AtomicUsize::new(1));
        let err = open_input_interruptible(
            fifo.to_str().expect("utf-8 temp path"),
            SourceOptions::default(),
            interrupts,
        )
        .err()
        .expect("no writer, interrupted");
        assert!(is_cancelled(&err), "{err}");
    }
}
