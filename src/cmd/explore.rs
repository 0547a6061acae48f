//! `pgnload verify --explorer`: the explorer counters against a recount
//! from games + moves.

use std::{io::Write, path::Path};

use crate::{
    config::Settings,
    error::{Error, ExitStatus},
    ingest::explorer,
    store::db::{self, db_err},
};

/// `pgnload verify --explorer`: recounts, writes every differing row to the
/// TSV `report` (`key, stored, expected`; `-` for a missing row), prints a
/// summary. Exit status as verify's: 0 clean, 1 differences.
pub fn verify(settings: &Settings, report: &Path) -> Result<ExitStatus, Error> {
    let runtime = db::runtime()?;
    let (total, differences) = runtime.block_on(async {
        let mut database = db::connect(&settings.target()).await?;
        db::migrate(&mut database.client).await?;
        // One snapshot for the counters and their recount.
        let tx = database
            .client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(db_err("starting the explorer recount"))?;
        let found = explorer::recount(&tx)
            .await
            .map_err(db_err("recounting the explorer counters"))?;
        tx.commit()
            .await
            .map_err(db_err("ending the explorer recount"))?;
        Ok::<_, Error>(found)
    })?;
    let mut text = String::from("key\tstored\texpected\n");
    for difference in &differences {
        let side = |value: &Option<String>| value.clone().unwrap_or_else(|| "-".to_owned());
        text.push_str(&format!(
            "{}\t{}\t{}\n",
            difference.key,
            side(&difference.stored),
            side(&difference.expected)
        ));
    }
    std::fs::File::create(report)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .map_err(|source| Error::Open {
            path: report.to_path_buf(),
            source,
        })?;
    if total == 0 {
        println!("explorer counters match a recount from games and moves: no mismatches");
        println!("report: {}", report.display());
        return Ok(ExitStatus::Clean);
    }
    println!(
        "{total} explorer counter rows differ from a recount from games and moves \
         (key: position_id variant speed rating_group month move; \
         counts: games white draws black rated_games rating_sum last_played)"
    );
    for difference in differences.iter().take(20) {
        println!(
            "  {}: stored {}, recount {}",
            difference.key,
            difference.stored.as_deref().unwrap_or("none"),
            difference.expected.as_deref().unwrap_or("none")
        );
    }
    println!(
        "report: {} (the first {} rows)",
        report.display(),
        differences.len()
    );
    Ok(ExitStatus::CompletedWithRejects)
}
