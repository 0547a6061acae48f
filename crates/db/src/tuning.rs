//! Advice on server settings for a database pgnload does not own.
//!
//! With `--database-url` pgnload changes no server setting (its sessions
//! only turn `synchronous_commit` off for themselves, which is safe because
//! each batch commits with its checkpoint). It reads the settings that cost
//! a load the most and says what it would change and why; the embedded
//! cluster gets the same values automatically (see [`crate::embedded`]).

use tokio_postgres::Client;

use crate::{db::db_err, error::Error};

/// The settings [`advise`] looks at.
const SETTINGS: [&str; 5] = [
    "shared_buffers",
    "max_wal_size",
    "maintenance_work_mem",
    "checkpoint_timeout",
    "wal_compression",
];

const MIB: u64 = 1 << 20;

/// A setting as `pg_settings` reports it: name, value, unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// `pg_settings.name`.
    pub name: String,
    /// `pg_settings.setting`.
    pub value: String,
    /// `pg_settings.unit` (`8kB`, `kB`, `MB`, `s`, …).
    pub unit: Option<String>,
}

impl Setting {
    /// The value in bytes or seconds, when numeric with a known unit.
    fn amount(&self) -> Option<u64> {
        let n: u64 = self.value.parse().ok()?;
        let scale = match self.unit.as_deref()? {
            "B" | "s" => 1,
            "kB" => 1 << 10,
            "8kB" => 8 << 10,
            "MB" => MIB,
            "GB" => 1 << 30,
            "min" => 60,
            _ => return None,
        };
        n.checked_mul(scale)
    }
}

/// One line of advice per setting that costs import throughput.
pub fn advise(settings: &[Setting]) -> Vec<String> {
    let mut out = Vec::new();
    for s in settings {
        let amount = s.amount();
        let line = match (s.name.as_str(), amount) {
            ("shared_buffers", Some(bytes)) if bytes < 1024 * MIB => format!(
                "shared_buffers is {} MiB: the positions index soon outgrows it and every new \
                 position becomes a read from the OS cache; 1/8 to 1/4 of memory (e.g. 4GB) keeps it hot",
                bytes / MIB
            ),
            ("max_wal_size", Some(bytes)) if bytes < 4096 * MIB => format!(
                "max_wal_size is {} MiB: a load forces a checkpoint (and full-page images) every \
                 few seconds; 16GB spaces them out",
                bytes / MIB
            ),
            ("maintenance_work_mem", Some(bytes)) if bytes < 512 * MIB => format!(
                "maintenance_work_mem is {} MiB: the index builds after a bulk load sort on disk; \
                 1GB sorts in memory",
                bytes / MIB
            ),
            ("checkpoint_timeout", Some(secs)) if secs < 15 * 60 => format!(
                "checkpoint_timeout is {secs} s: frequent checkpoints mean more full-page images \
                 in the WAL during a load; 30min is a common choice for loading"
            ),
            ("wal_compression", _) if s.value == "off" => {
                "wal_compression is off: lz4 (or on) shrinks the full-page images a load writes"
                    .to_owned()
            }
            ("wal_compression", _) if s.value == "on" || s.value == "pglz" => format!(
                "wal_compression is {}: pglz takes much of a core during an incremental load;                  lz4 compresses as well for a fraction of the CPU (if the server has lz4)",
                s.value
            ),
            _ => continue,
        };
        out.push(line);
    }
    out
}

/// Reads the settings from the server and advises on them.
pub async fn advice(client: &Client) -> Result<Vec<String>, Error> {
    let names: Vec<&str> = SETTINGS.to_vec();
    let rows = client
        .query(
            "SELECT name, setting, unit FROM pg_settings WHERE name = ANY($1) ORDER BY name",
            &[&names],
        )
        .await
        .map_err(db_err("reading server settings"))?;
    let settings: Vec<Setting> = rows
        .into_iter()
        .map(|row| Setting {
            name: row.get(0),
            value: row.get(1),
            unit: row.get(2),
        })
        .collect();
    Ok(advise(&settings))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setting(name: &str, value: &str, unit: Option<&str>) -> Setting {
        Setting {
            name: name.into(),
            value: value.into(),
            unit: unit.map(Into::into),
        }
    }

    /// PostgreSQL 15's defaults, as `pg_settings` reports them.
    fn defaults() -> Vec<Setting> {
        vec![
            setting("shared_buffers", "16384", Some("8kB")),
            setting("max_wal_size", "1024", Some("MB")),
            setting("maintenance_work_mem", "65536", Some("kB")),
            setting("checkpoint_timeout", "300", Some("s")),
            setting("wal_compression", "off", None),
        ]
    }

    #[test]
    fn default_settings_get_one_line_each_with_the_value() {
        let advice = advise(&defaults());
        assert_eq!(advice.len(), 5, "{advice:#?}");
        assert!(
            advice[0].starts_with("shared_buffers is 128 MiB"),
            "{}",
            advice[0]
        );
        assert!(
            advice[1].starts_with("max_wal_size is 1024 MiB"),
            "{}",
            advice[1]
        );
        assert!(
            advice[2].starts_with("maintenance_work_mem is 64 MiB"),
            "{}",
            advice[2]
        );
        assert!(
            advice[3].starts_with("checkpoint_timeout is 300 s"),
            "{}",
            advice[3]
        );
        assert!(
            advice[4].starts_with("wal_compression is off"),
            "{}",
            advice[4]
        );
    }

    #[test]
    fn tuned_settings_get_no_advice() {
        let tuned = vec![
            setting("shared_buffers", "524288", Some("8kB")),
            setting("max_wal_size", "16384", Some("MB")),
            setting("maintenance_work_mem", "1048576", Some("kB")),
            setting("checkpoint_timeout", "1800", Some("s")),
            setting("wal_compression", "lz4", None),
        ];
        assert_eq!(advise(&tuned), Vec::<String>::new());
    }

    #[test]
    fn pglz_gets_advice_to_use_lz4() {
        for value in ["on", "pglz"] {
            let advice = advise(&[setting("wal_compression", value, None)]);
            assert_eq!(advice.len(), 1, "{advice:#?}");
            assert!(
                advice[0].starts_with(&format!("wal_compression is {value}: pglz"))
                    && advice[0].contains("lz4"),
                "{}",
                advice[0]
            );
        }
    }

    #[test]
    fn unknown_units_and_values_are_ignored() {
        let odd = vec![
            setting("shared_buffers", "lots", Some("8kB")),
            setting("max_wal_size", "1", Some("parsecs")),
        ];
        assert_eq!(advise(&odd), Vec::<String>::new());
    }
}
