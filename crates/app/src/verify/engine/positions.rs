//! `verify` of `positions` rows: streamed out with a binary COPY in
//! batches, through a bounded channel, to a checker thread running
//! [`crate::verify::check_position`] on the rayon pool. It reads, never
//! writes.

use crossbeam_channel::bounded;
use futures_util::StreamExt;
use rayon::prelude::*;
use tokio_postgres::{
    binary_copy::{BinaryCopyOutRow, BinaryCopyOutStream},
    types::Type,
};

use super::{Checked, Run, Selection, estimate, for_layout, selection_sql};
use crate::{
    error::Error,
    store::db::{self, db_err},
    verify::{Finding, MismatchKind, StoredPosition, check_position},
};

/// Rows per batch handed from the COPY stream to the checker.
const POSITION_BATCH: usize = 8192;

/// Rows per rayon task within a batch.
const POSITION_CHUNK: usize = 1024;

const POSITION_COLUMNS: &str =
    "id, normalized_fen, fen_hash, piece_placement, active_color, castling, en_passant";

/// How the COPY columns are decoded. The text columns are declared BYTEA:
/// in the binary COPY format both are the raw bytes (in the client
/// encoding, UTF-8), and reading bytes lets the split columns skip a UTF-8
/// validation each (they are only compared byte for byte with the FEN's
/// fields) and lets a FEN that is not UTF-8 (a `SQL_ASCII` database) be
/// reported instead of stopping the run.
const POSITION_TYPES: [Type; 7] = [
    Type::INT8,
    Type::BYTEA,
    Type::INT8,
    Type::BYTEA,
    Type::BYTEA,
    Type::BYTEA,
    Type::BYTEA,
];

/// The COPY of the positions `rows` selects. Always the query form: a
/// sharded layout's `positions` is a partitioned table, which only that
/// form can read (on a single node it costs the same seq scan).
fn positions_copy(rows: &Selection) -> String {
    format!(
        "COPY (SELECT {POSITION_COLUMNS} FROM positions{}) TO STDOUT (FORMAT binary)",
        selection_sql(rows, false)
    )
}

/// Checks one COPY row, appending its findings to `out`.
fn check_copy_row(
    row: &BinaryCopyOutRow,
    canonical: bool,
    out: &mut Vec<Finding>,
) -> Result<(), tokio_postgres::Error> {
    let id: i64 = row.try_get(0)?;
    let fen: &[u8] = row.try_get(1)?;
    let Ok(normalized_fen) = std::str::from_utf8(fen) else {
        out.push(Finding {
            id,
            normalized_fen: String::from_utf8_lossy(fen).into_owned(),
            stored: String::from_utf8_lossy(fen).into_owned(),
            expected: "UTF-8 text".into(),
            kind: MismatchKind::NotNormalized,
        });
        return Ok(());
    };
    let row = StoredPosition {
        id,
        normalized_fen,
        fen_hash: row.try_get(2)?,
        piece_placement: row.try_get(3)?,
        active_color: row.try_get(4)?,
        castling: row.try_get(5)?,
        en_passant: row.try_get(6)?,
    };
    check_position(&row, canonical, out);
    Ok(())
}

/// Checks one batch in parallel; findings come back in row order.
fn check_position_batch(
    batch: &[BinaryCopyOutRow],
    canonical: bool,
) -> Result<Vec<Finding>, Error> {
    let chunks: Vec<Vec<Finding>> = batch
        .par_chunks(POSITION_CHUNK)
        .map(|chunk| {
            let mut out = Vec::new();
            for row in chunk {
                check_copy_row(row, canonical, &mut out)
                    .map_err(db_err("decoding a positions row"))?;
            }
            Ok(out)
        })
        .collect::<Result<_, Error>>()?;
    Ok(chunks.into_iter().flatten().collect())
}

pub(super) fn verify_positions(canonical: bool, run: Run<'_>) -> Result<Checked, Error> {
    let Run {
        selection,
        settings,
        runtime,
        interrupt,
        meter,
        report,
    } = run;
    let Some(database) = runtime
        .block_on(interrupt.or_stop(db::connect(&settings.target())))
        .transpose()?
    else {
        return Ok(Checked::stopped());
    };
    let selection = &runtime.block_on(for_layout(&database.client, selection))?;
    meter.set_total(runtime.block_on(estimate(&database.client, "positions", selection)));
    let copy = positions_copy(selection);
    let (tx, rx) = bounded::<Vec<BinaryCopyOutRow>>(settings.pipeline.channel_capacity.max(1));
    // Each side says whether it went to the end; a signal stops both at
    // their next batch (the checker dropping `rx` also ends a blocked send).
    let (streamed, checked) = std::thread::scope(|scope| {
        let check_thread = scope.spawn(move || -> Result<bool, Error> {
            for batch in rx {
                if interrupt.requested() {
                    return Ok(false);
                }
                let findings = check_position_batch(&batch, canonical)?;
                report.write_all(&findings)?;
                meter.add(batch.len() as u64, report.counts.total());
            }
            Ok(true)
        });
        // The COPY is read on this thread; `send` blocks it when the checker
        // falls behind, which is the backpressure (the connection task runs
        // on the runtime's own worker thread, so blocking here is harmless).
        let streamed = runtime.block_on(interrupt.or_stop(async {
            let stream = database
                .client
                .copy_out(copy.as_str())
                .await
                .map_err(db_err("starting COPY of positions"))?;
            let rows = BinaryCopyOutStream::new(stream, &POSITION_TYPES);
            futures_util::pin_mut!(rows);
            let mut batch = Vec::with_capacity(POSITION_BATCH);
            while let Some(row) = rows.next().await {
                batch.push(row.map_err(db_err("reading positions"))?);
                if batch.len() == POSITION_BATCH {
                    let full = std::mem::replace(&mut batch, Vec::with_capacity(POSITION_BATCH));
                    // A send error means the checker stopped: its error, or
                    // a signal, is what it reports.
                    if interrupt.requested() || tx.send(full).is_err() {
                        return Ok(false);
                    }
                }
            }
            Ok::<bool, Error>(batch.is_empty() || tx.send(batch).is_ok())
        }));
        drop(tx);
        // A panic in the checker is a bug: let it surface as one.
        let checked = check_thread
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (streamed, checked)
    });
    let checked = checked?;
    let streamed = streamed.transpose()?.unwrap_or(false);
    database.close()?;
    Ok(Checked {
        extra: Vec::new(),
        complete: streamed && checked,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::IdRange;

    #[test]
    fn the_selection_becomes_sql() {
        let rows = Selection {
            sample: Some(0.25),
            id_range: Some(IdRange { start: 10, end: 20 }),
            limit: Some(5),
            sharded: false,
        };
        assert_eq!(
            positions_copy(&rows),
            "COPY (SELECT id, normalized_fen, fen_hash, piece_placement, active_color, castling, \
             en_passant FROM positions TABLESAMPLE BERNOULLI (25) WHERE id BETWEEN 10 AND 20 \
             ORDER BY id LIMIT 5) TO STDOUT (FORMAT binary)"
        );
        // Shards: PostgreSQL would ignore TABLESAMPLE on foreign partitions.
        assert_eq!(
            selection_sql(
                &Selection {
                    sharded: true,
                    ..rows
                },
                false
            ),
            " WHERE random() < 0.25 AND id BETWEEN 10 AND 20 ORDER BY id LIMIT 5"
        );
        assert_eq!(
            positions_copy(&Selection::default()),
            "COPY (SELECT id, normalized_fen, fen_hash, piece_placement, active_color, castling, \
             en_passant FROM positions) TO STDOUT (FORMAT binary)"
        );
        let rows = Selection {
            limit: Some(9_223_372_036_854_775_807),
            ..Selection::default()
        };
        assert!(selection_sql(&rows, false).ends_with("LIMIT 9223372036854775807"));
        assert_eq!(selection_sql(&Selection::default(), true), " ORDER BY id");
    }
}
