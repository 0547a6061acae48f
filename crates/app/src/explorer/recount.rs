//! `pgnload verify --explorer` without the CLI: the counters recounted
//! from `games` + `moves` through the view that defines them, in one
//! snapshot with the rows they are compared with, every differing row
//! written to a TSV report.

use std::{fmt::Write as _, io::Write as _, path::Path};

use tokio::runtime::Runtime;
use tokio_postgres::{GenericClient, IsolationLevel};

use super::{admin, sql};
use crate::{
    config::Settings,
    error::Error,
    progress::{Step, Steps},
    store::db::{self, db_err},
};

/// A counter row that differs from its recount: `stored` or `expected` is
/// `None` when the row is missing on that side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The key, as `position_id variant speed rating_group month move`.
    pub key: String,
    /// The stored counts ([`sql::COUNTS`], space-separated).
    pub stored: Option<String>,
    /// What the recount says.
    pub expected: Option<String>,
}

/// How many differences [`recount`] returns at most (it counts them all).
pub const DIFFERENCES_SHOWN: i64 = 1000;

/// Recounts the counters from `games` + `moves` and compares, for every
/// position not queued in `explorer_pending`: its rows, if it has any or
/// two games reached it (it must have them then, see the module doc).
/// Returns the number of rows that differ, and the first
/// [`DIFFERENCES_SHOWN`] of them.
///
/// # Panics
///
/// Never: `count(*)` is not negative.
pub async fn recount(client: &impl GenericClient) -> Result<(u64, Vec<Difference>), Error> {
    // A sharded layout's counters are added rows: a key's rows summed.
    let sql = match crate::store::shards::layout(client).await? {
        None => sql::RECOUNT_SINGLE,
        Some(_) => sql::RECOUNT_SHARDED,
    };
    let rows = client
        .query(sql, &[&DIFFERENCES_SHOWN])
        .await
        .map_err(crate::store::db::db_err("recounting the explorer counters"))?;
    let total = rows.first().map_or(0, |row| row.get::<_, i64>(3));
    let differences = rows
        .iter()
        .map(|row| Difference {
            key: row.get(0),
            stored: row.get(1),
            expected: row.get(2),
        })
        .collect();
    Ok((
        u64::try_from(total).expect("count(*) is never negative"),
        differences,
    ))
}

/// What [`verify`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recounted {
    /// How many rows differ.
    pub total: u64,
    /// The first [`DIFFERENCES_SHOWN`] of them, by key.
    pub differences: Vec<Difference>,
}

/// Recounts the counters of the database of `settings` in one read-only
/// snapshot (refused unless they are kept and complete:
/// [`admin::require_usable`]), and writes every difference returned to
/// the TSV `report` (`key, stored, expected`; `-` for a missing row; just
/// the header when they match). The recount, one query PostgreSQL
/// reports no progress of, is a phase of `steps`.
pub fn verify(
    settings: &Settings,
    runtime: &Runtime,
    report: &Path,
    steps: Steps<'_>,
) -> Result<Recounted, Error> {
    let (total, differences) = runtime.block_on(async {
        let mut database = db::connect(&settings.target()).await?;
        db::migrate(&mut database.client).await?;
        // One snapshot for the counters and their recount.
        let tx = database
            .client
            .build_transaction()
            .isolation_level(IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(db_err("starting the explorer recount"))?;
        admin::require_usable(&tx).await?;
        steps(Step::Phase(
            "recounting the explorer counters from games and moves",
        ));
        let found = recount(&tx).await?;
        tx.commit()
            .await
            .map_err(db_err("ending the explorer recount"))?;
        Ok::<_, Error>(found)
    })?;
    write_report(report, &differences)?;
    Ok(Recounted { total, differences })
}

/// Writes `differences` to the TSV `report`, overwritten.
fn write_report(report: &Path, differences: &[Difference]) -> Result<(), Error> {
    let mut text = String::from("key\tstored\texpected\n");
    for difference in differences {
        let side = |value: &Option<String>| value.clone().unwrap_or_else(|| "-".to_owned());
        // Writing into a String cannot fail.
        let _ = writeln!(
            text,
            "{}\t{}\t{}",
            difference.key,
            side(&difference.stored),
            side(&difference.expected)
        );
    }
    std::fs::File::create(report)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .map_err(|source| Error::Open {
            path: report.to_path_buf(),
            source,
        })
}
