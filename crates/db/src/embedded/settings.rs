//! The server's settings: sized from the machine's memory and free disk,
//! written as `postgresql.conf` lines that each say why.

use std::{fmt::Write as _, fs, path::Path, time::Duration};

use super::PORT;

/// Memory assumed when /proc/meminfo cannot be read.
const FALLBACK_MEMORY: u64 = 4 << 30;
const MIB: u64 = 1 << 20;
/// `max_wal_size` when the disk has room: 16 GiB.
const MAX_WAL_MB: u64 = 16 * 1024;
/// The smallest `max_wal_size` pgnload sets however full the disk is.
const MIN_MAX_WAL_MB: u64 = 256;

/// Server settings tuned for bulk loading, written to `pgnload.conf` at
/// every start (so they follow the machine's memory if it changes). Memory
/// sizes are in MiB. Users can still override any of them with
/// `ALTER SYSTEM`, whose file PostgreSQL reads after `pgnload.conf`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSettings {
    /// The memory the sizes were derived from, in bytes (for reports).
    pub total_memory: u64,
    /// `shared_buffers`: 1/8 of memory, at least 128 MiB (PostgreSQL's
    /// default) and at most 4 GiB: beyond that the OS page cache serves a
    /// load-then-index workload as well, and a larger pool only lengthens
    /// checkpoints.
    pub shared_buffers_mb: u64,
    /// `effective_cache_size`: 3/4 of memory. Only a planner hint (no
    /// allocation): most of the machine's memory caches table files.
    pub effective_cache_size_mb: u64,
    /// `maintenance_work_mem`: 1/8 of memory, 64 MiB to 1 GiB. Index builds
    /// after the bulk load sort in this memory; more memory means fewer
    /// external-sort passes.
    pub maintenance_work_mem_mb: u64,
    /// `autovacuum_work_mem`: 1/32 of memory, 64 to 256 MiB. Without it each
    /// of the three autovacuum workers could take `maintenance_work_mem`.
    pub autovacuum_work_mem_mb: u64,
    /// `work_mem`: 1/128 of memory, 4 to 64 MiB. Per sort or hash node of
    /// every query, so it stays moderate; pgnload's queries are simple.
    pub work_mem_mb: u64,
    /// `max_wal_size`: 16 GiB, so that bulk loading is not interrupted by
    /// checkpoints forced by WAL volume (each rewrites full pages into WAL);
    /// but at most 1/8 of the disk space free at server start (at least
    /// 256 MiB), because WAL up to this size stays on disk between
    /// checkpoints and must never be what fills the disk.
    pub max_wal_size_mb: u64,
    /// `min_wal_size`: a quarter of `max_wal_size`, 80 MiB (PostgreSQL's
    /// default) to 1 GiB: WAL segments kept for reuse instead of being
    /// deleted and recreated between checkpoints.
    pub min_wal_size_mb: u64,
    /// `checkpoint_timeout`: 30 minutes, for the same reason as
    /// `max_wal_size`: fewer checkpoints, fewer full-page images.
    pub checkpoint_timeout: Duration,
    /// `wal_compression`: compresses the full-page images that dominate the
    /// WAL of an incremental load (every index page first touched after a
    /// checkpoint), with lz4 when the server was built with it: pglz costs
    /// so much CPU that an incremental import ran 26% faster with lz4.
    pub wal_compression: WalCompression,
    /// `synchronous_commit`: off. A crash may lose the last few hundred
    /// milliseconds of commits but never corrupts anything; that is safe for
    /// pgnload because each batch commits its resume checkpoint together
    /// with its rows, so a lost commit is simply imported again.
    pub synchronous_commit: bool,
    /// `max_connections`: 50, room for several concurrent imports (one
    /// connection per writer) plus psql sessions, without the per-connection
    /// shared memory of the default 100.
    pub max_connections: u32,
}

/// How the server compresses full-page images in WAL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalCompression {
    /// Fast; only in servers built `--with-lz4` (Debian's are).
    Lz4,
    /// PostgreSQL's own compressor, always available.
    Pglz,
}

impl WalCompression {
    /// The `postgresql.conf` value.
    pub fn as_conf(self) -> &'static str {
        match self {
            WalCompression::Lz4 => "lz4",
            WalCompression::Pglz => "pglz",
        }
    }
}

impl ClusterSettings {
    /// Settings for this machine and a cluster in `data_dir`:
    /// [`ClusterSettings::for_resources`] of the total memory (from
    /// `/proc/meminfo`, lowered to the cgroup memory limit inside a
    /// container; 4 GiB when unreadable) and of the disk space free there.
    pub fn for_machine(data_dir: &Path) -> ClusterSettings {
        Self::for_resources(total_memory(), free_disk(data_dir))
    }

    /// Settings for a machine with `total_bytes` of memory and, when known,
    /// `free_disk` bytes free where the cluster lives. Pure, so the sizing
    /// rules can be tested; each field's documentation says why.
    pub fn for_resources(total_bytes: u64, free_disk: Option<u64>) -> ClusterSettings {
        let mb = total_bytes / MIB;
        let max_wal_size_mb = free_disk.map_or(MAX_WAL_MB, |free| {
            (free / MIB / 8).clamp(MIN_MAX_WAL_MB, MAX_WAL_MB)
        });
        ClusterSettings {
            total_memory: total_bytes,
            shared_buffers_mb: (mb / 8).clamp(128, 4096),
            effective_cache_size_mb: (mb / 4 * 3).max(128),
            maintenance_work_mem_mb: (mb / 8).clamp(64, 1024),
            autovacuum_work_mem_mb: (mb / 32).clamp(64, 256),
            work_mem_mb: (mb / 128).clamp(4, 64),
            max_wal_size_mb,
            min_wal_size_mb: (max_wal_size_mb / 4).clamp(80, 1024),
            checkpoint_timeout: Duration::from_mins(30),
            wal_compression: WalCompression::Pglz,
            synchronous_commit: false,
            max_connections: 50,
        }
    }

    /// The `postgresql.conf` lines for these settings, with the socket in
    /// `socket_dir`. Besides the sized settings it fixes the ones that make
    /// the cluster private and bulk-load friendly, each with a comment
    /// saying why, so that a user reading `pgnload.conf` sees the reasons.
    pub fn to_conf(&self, socket_dir: &Path) -> String {
        let header = format!(
            "# pgnload's settings for bulk loading, written at every server start:\n\
             # edits here are overwritten. Override a setting with ALTER SYSTEM\n\
             # (postgresql.auto.conf is read after this file).\n\
             # Sized for {} MiB of memory.\n\n",
            self.total_memory / MIB
        );
        let mut conf = ConfText(header);
        self.connection_lines(&mut conf, socket_dir);
        self.memory_lines(&mut conf);
        self.wal_lines(&mut conf);
        self.durability_lines(&mut conf);
        conf.0
    }

    /// A private cluster: no TCP, a socket only its owner can open.
    fn connection_lines(&self, conf: &mut ConfText, socket_dir: &Path) {
        conf.line(
            "listen_addresses = ''",
            "No TCP: the cluster is private to pgnload and reached through its Unix socket only.",
        );
        conf.line(
            format!("port = {PORT}"),
            "Fixed: names the socket file; a PGPORT in the environment must not move it.",
        );
        conf.line(
            format!(
                "unix_socket_directories = {}",
                conf_quote(&list_quote(&socket_dir.to_string_lossy()))
            ),
            "The private socket directory (mode 0700).",
        );
        conf.line(
            "unix_socket_permissions = 0700",
            "Local connections use trust authentication: whoever opens the socket is a superuser.",
        );
        conf.line(
            format!("max_connections = {}", self.max_connections),
            "Several concurrent imports plus psql sessions; less shared memory than the default 100.",
        );
    }

    /// The sizes derived from memory (see each field).
    fn memory_lines(&self, conf: &mut ConfText) {
        conf.line(
            format!("shared_buffers = {}MB", self.shared_buffers_mb),
            "1/8 of memory, 128 MB to 4 GB: the OS page cache does the rest; more only lengthens checkpoints.",
        );
        conf.line(
            format!("effective_cache_size = {}MB", self.effective_cache_size_mb),
            "Planner hint only: most memory caches table files.",
        );
        conf.line(
            format!("maintenance_work_mem = {}MB", self.maintenance_work_mem_mb),
            "Index builds after the bulk load sort in this memory.",
        );
        conf.line(
            format!("autovacuum_work_mem = {}MB", self.autovacuum_work_mem_mb),
            "Otherwise each autovacuum worker may take maintenance_work_mem.",
        );
        conf.line(
            format!("work_mem = {}MB", self.work_mem_mb),
            "Per sort/hash node of every query: moderate.",
        );
    }

    /// WAL for bulk loading: few checkpoints, compressed full pages, none
    /// at all for a COPY into a table created in the same transaction.
    fn wal_lines(&self, conf: &mut ConfText) {
        conf.line(
            format!("max_wal_size = {}MB", self.max_wal_size_mb),
            "Bulk loading should not be interrupted by checkpoints forced by WAL volume; at most 1/8 of the free disk.",
        );
        conf.line(
            format!("min_wal_size = {}MB", self.min_wal_size_mb),
            "Recycle WAL segments rather than delete and recreate them.",
        );
        conf.line(
            format!(
                "checkpoint_timeout = {}s",
                self.checkpoint_timeout.as_secs()
            ),
            "Fewer checkpoints, fewer full-page images in WAL.",
        );
        conf.line(
            "checkpoint_completion_target = 0.9",
            "Spread checkpoint writes over the interval.",
        );
        conf.line(
            format!("wal_compression = {}", self.wal_compression.as_conf()),
            "Compress full-page images; lz4 when the server has it, at a fraction of pglz's CPU.",
        );
        conf.line(
            "wal_level = minimal\nmax_wal_senders = 0\narchive_mode = off",
            "No replication or archiving for a private cluster; with wal_level minimal, COPY into a \
             table created or truncated in the same transaction skips WAL entirely.",
        );
    }

    /// Durability (never off, but commits asynchronous) and the upkeep
    /// after a load.
    fn durability_lines(&self, conf: &mut ConfText) {
        let on = |b: bool| if b { "on" } else { "off" };
        conf.line(
            format!("synchronous_commit = {}", on(self.synchronous_commit)),
            "A crash may lose the last commits but never corrupts: pgnload commits each batch's \
             resume checkpoint with its rows, so a lost commit is simply imported again.",
        );
        conf.line(
            "fsync = on\nfull_page_writes = on",
            "Stay on: turning them off risks a corrupt cluster after a power loss.",
        );
        conf.line(
            "autovacuum = on",
            "Keeps statistics current after the load for the queries that follow.",
        );
        conf.line(
            "jit = off",
            "JIT compilation costs more than it saves on pgnload's short queries.",
        );
    }
}

/// `pgnload.conf` being written: each setting after a comment saying why.
struct ConfText(String);

impl ConfText {
    fn line(&mut self, setting: impl std::fmt::Display, why: &str) {
        // Writing into a String cannot fail.
        let _ = writeln!(self.0, "# {why}\n{setting}\n");
    }
}

/// Quotes a value for postgresql.conf (single quotes; `'` doubled and `\`
/// escaped, since the parser processes backslash escapes).
fn conf_quote(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "''"))
}

/// Quotes one element of a comma-separated GUC list (double quotes, `"`
/// doubled), so that a directory containing a comma stays one element.
fn list_quote(value: &str) -> String {
    format!("\"{}\"", value.replace('"', "\"\""))
}

/// Total memory in bytes: `MemTotal`, lowered to the cgroup limit (containers
/// see the host's `MemTotal`), 4 GiB if /proc/meminfo is unreadable.
fn total_memory() -> u64 {
    let meminfo = fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| parse_meminfo(&text));
    let cgroup = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .filter_map(|p| fs::read_to_string(p).ok())
    .filter_map(|text| text.trim().parse::<u64>().ok())
    .min();
    match (meminfo, cgroup) {
        (Some(m), Some(c)) => m.min(c),
        (Some(m), None) => m,
        (None, Some(c)) if c < (1 << 50) => c,
        _ => FALLBACK_MEMORY,
    }
}

/// Bytes available to unprivileged users on the file system holding
/// `path` (or its nearest existing ancestor), if it can be read.
fn free_disk(path: &Path) -> Option<u64> {
    let existing = path.ancestors().find(|p| p.exists())?;
    let stat = nix::sys::statvfs::statvfs(existing).ok()?;
    stat.blocks_available().checked_mul(stat.fragment_size())
}

/// The `MemTotal:` line of /proc/meminfo, in bytes.
fn parse_meminfo(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut fields = line["MemTotal:".len()..].split_whitespace();
    let value: u64 = fields.next()?.parse().ok()?;
    match fields.next() {
        Some("kB") => value.checked_mul(1024),
        None => Some(value),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    #[test]
    fn settings_for_a_large_machine_hit_the_caps() {
        let s = ClusterSettings::for_resources(64 * GIB, None);
        assert_eq!(s.shared_buffers_mb, 4096);
        assert_eq!(s.maintenance_work_mem_mb, 1024);
        assert_eq!(s.autovacuum_work_mem_mb, 256);
        assert_eq!(s.work_mem_mb, 64);
        assert_eq!(s.effective_cache_size_mb, 48 * 1024);
        assert_eq!(s.max_wal_size_mb, 16 * 1024);
        assert_eq!(s.checkpoint_timeout, Duration::from_mins(30));
        assert_eq!(s.max_connections, 50);
        assert_eq!(s.wal_compression, WalCompression::Pglz);
        assert!(!s.synchronous_commit);
    }

    #[test]
    fn settings_scale_with_memory() {
        let s = ClusterSettings::for_resources(8 * GIB, None);
        assert_eq!(s.shared_buffers_mb, 1024);
        assert_eq!(s.maintenance_work_mem_mb, 1024);
        assert_eq!(s.autovacuum_work_mem_mb, 256);
        assert_eq!(s.work_mem_mb, 64);
        assert_eq!(s.effective_cache_size_mb, 6 * 1024);

        let s = ClusterSettings::for_resources(4 * GIB, None);
        assert_eq!(s.shared_buffers_mb, 512);
        assert_eq!(s.maintenance_work_mem_mb, 512);
        assert_eq!(s.autovacuum_work_mem_mb, 128);
        assert_eq!(s.work_mem_mb, 32);
    }

    #[test]
    fn settings_for_a_tiny_machine_keep_the_floors() {
        for total in [0, 256 << 20, GIB] {
            let s = ClusterSettings::for_resources(total, None);
            assert_eq!(s.shared_buffers_mb, 128, "{total}");
            assert_eq!(
                s.maintenance_work_mem_mb,
                64.max(total / MIB / 8),
                "{total}"
            );
            assert_eq!(s.autovacuum_work_mem_mb, 64, "{total}");
            assert!(s.work_mem_mb >= 4, "{total}");
            assert!(s.effective_cache_size_mb >= 128, "{total}");
        }
    }

    #[test]
    fn settings_are_monotonic_in_memory() {
        let mut prev = ClusterSettings::for_resources(0, None);
        for gib in 1..=256 {
            let s = ClusterSettings::for_resources(gib * GIB, None);
            assert!(s.shared_buffers_mb >= prev.shared_buffers_mb);
            assert!(s.maintenance_work_mem_mb >= prev.maintenance_work_mem_mb);
            assert!(s.work_mem_mb >= prev.work_mem_mb);
            assert!(s.shared_buffers_mb * MIB <= (gib * GIB / 8).max(128 * MIB));
            prev = s;
        }
    }

    #[test]
    fn conf_has_the_fixed_settings() {
        let conf =
            ClusterSettings::for_resources(16 * GIB, None).to_conf(Path::new("/d/it's,here/run"));
        for expected in [
            "listen_addresses = ''",
            "port = 5432",
            r#"unix_socket_directories = '"/d/it''s,here/run"'"#,
            "shared_buffers = 2048MB",
            "maintenance_work_mem = 1024MB",
            "work_mem = 64MB",
            "max_wal_size = 16384MB",
            "checkpoint_timeout = 1800s",
            "wal_compression = pglz",
            "wal_level = minimal",
            "max_wal_senders = 0",
            "synchronous_commit = off",
            "fsync = on",
            "full_page_writes = on",
            "autovacuum = on",
            "max_connections = 50",
            "jit = off",
        ] {
            assert!(
                conf.lines().any(|l| l == expected),
                "missing {expected:?} in\n{conf}"
            );
        }
    }

    #[test]
    fn conf_quote_escapes() {
        assert_eq!(conf_quote(r"a'b\c"), r"'a''b\\c'");
        assert_eq!(list_quote(r#"a"b"#), r#""a""b""#);
    }

    #[test]
    fn wal_size_follows_free_disk() {
        let roomy = ClusterSettings::for_resources(8 * GIB, Some(500 * GIB));
        assert_eq!(
            (roomy.max_wal_size_mb, roomy.min_wal_size_mb),
            (16 * 1024, 1024)
        );
        let s = ClusterSettings::for_resources(8 * GIB, Some(8 * GIB));
        assert_eq!((s.max_wal_size_mb, s.min_wal_size_mb), (1024, 256));
        let full = ClusterSettings::for_resources(8 * GIB, Some(100 * MIB));
        assert_eq!((full.max_wal_size_mb, full.min_wal_size_mb), (256, 80));
        assert!(free_disk(Path::new("/no/such/dir/under/root")).is_some_and(|b| b > 0));
    }

    #[test]
    fn meminfo_parsing() {
        let text = "MemTotal:       24684084 kB\nMemFree:  1 kB\n";
        assert_eq!(parse_meminfo(text), Some(24_684_084 * 1024));
        assert_eq!(parse_meminfo("MemFree: 1 kB\n"), None);
        assert!(total_memory() > 0);
    }
}
