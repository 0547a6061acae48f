//! The binary COPY encoder and the rows each phase copies.
//!
//! Apart from the phases because it is the one place that knows the wire
//! format (`PGCOPY` header, tuple framing, `postgres-types` encoding) and
//! the column order of every table the writer copies into (but
//! `explorer_moves`, whose columns the explorer module names). It must not
//! decide what is written: the phases build the rows.

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::{SinkExt, pin_mut};
use rayon::prelude::*;
use tokio_postgres::{
    Transaction,
    types::{IsNull, Json, ToSql, Type},
};

use crate::{chess::replay::GameRecord, ingest::dedup::PositionKey};

/// A failed write step: the database refused, or a row could not be
/// encoded for COPY (a value out of range for its column type).
#[derive(Debug, thiserror::Error)]
pub(crate) enum WriteError {
    #[error(transparent)]
    Database(#[from] tokio_postgres::Error),
    #[error("encoding a row for COPY: {0}")]
    Encode(Box<dyn std::error::Error + Send + Sync>),
}

/// A row of a binary COPY: its column types and values, encoded by
/// `postgres-types`.
pub(crate) trait CopyRow<const N: usize> {
    const TYPES: [Type; N];
    fn fields(&self) -> [&(dyn ToSql + Sync); N];
}

/// The binary COPY header: signature, flags, header extension length.
pub(super) const COPY_HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";
/// The binary COPY trailer: a field count of -1.
pub(super) const COPY_TRAILER: &[u8] = &[0xff, 0xff];
/// Rows encoded per rayon task.
pub(super) const ROWS_PER_CHUNK: usize = 4096;
/// Chunks encoded ahead of sending: bounds what one COPY holds encoded (a
/// few MiB) whatever the number of rows.
pub(super) const CHUNKS_AHEAD: usize = 8;

/// `COPY … FROM STDIN (FORMAT binary)` of `rows`. The rows are encoded on
/// all cores, a few chunks at a time, and sent in large chunks. Why not
/// tokio-postgres's `BinaryCopyInWriter`: it encodes on the writer thread
/// and awaits the connection every 4 KiB, so the writer thread, which
/// serves both write phases, became the bottleneck of a bulk load (half of
/// its CPU).
pub(crate) async fn copy_rows<const N: usize, R: CopyRow<N> + Sync>(
    tx: &Transaction<'_>,
    statement: &str,
    rows: &[R],
) -> Result<u64, WriteError> {
    let sink = tx.copy_in::<_, Bytes>(statement).await?;
    pin_mut!(sink);
    sink.send(Bytes::from_static(COPY_HEADER)).await?;
    for group in rows.chunks(ROWS_PER_CHUNK * CHUNKS_AHEAD) {
        let chunks = group
            .par_chunks(ROWS_PER_CHUNK)
            .map(encode_rows)
            .collect::<Result<Vec<Bytes>, WriteError>>()?;
        for chunk in chunks {
            sink.send(chunk).await?;
        }
    }
    sink.send(Bytes::from_static(COPY_TRAILER)).await?;
    Ok(sink.as_mut().finish().await?)
}

/// Rows in the binary COPY tuple format: a field count, then each field as
/// a length (-1 for NULL) and its binary value.
pub(super) fn encode_rows<const N: usize, R: CopyRow<N>>(rows: &[R]) -> Result<Bytes, WriteError> {
    let field_count = i16::try_from(N).map_err(|e| WriteError::Encode(e.into()))?;
    let mut buf = BytesMut::with_capacity(rows.len() * (2 + N * 12));
    for row in rows {
        buf.put_i16(field_count);
        for (value, ty) in row.fields().into_iter().zip(&R::TYPES) {
            let start = buf.len();
            buf.put_i32(0);
            let length = match value.to_sql_checked(ty, &mut buf) {
                Ok(IsNull::Yes) => -1,
                Ok(IsNull::No) => i32::try_from(buf.len() - start - 4)
                    .map_err(|_| WriteError::Encode("a value over 2 GiB".into()))?,
                Err(e) => return Err(WriteError::Encode(e)),
            };
            buf[start..start + 4].copy_from_slice(&length.to_be_bytes());
        }
    }
    Ok(buf.freeze())
}

pub(super) struct PositionRow<'a> {
    pub(super) fen: &'a str,
    pub(super) hash: i64,
    pub(super) placement: &'a str,
    pub(super) color: &'a str,
    pub(super) castling: &'a str,
    pub(super) en_passant: &'a str,
}

impl CopyRow<6> for &PositionRow<'_> {
    const TYPES: [Type; 6] = [
        Type::TEXT,
        Type::INT8,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
    ];
    fn fields(&self) -> [&(dyn ToSql + Sync); 6] {
        [
            &self.fen,
            &self.hash,
            &self.placement,
            &self.color,
            &self.castling,
            &self.en_passant,
        ]
    }
}

/// A bulk-mode position row, with the id the importer gave it.
pub(super) struct NewPosition<'a> {
    pub(super) id: i64,
    pub(super) row: &'a PositionRow<'a>,
}

impl CopyRow<7> for NewPosition<'_> {
    /// `bigint` id, then the staging row's types.
    const TYPES: [Type; 7] = [
        Type::INT8,
        Type::TEXT,
        Type::INT8,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
    ];
    fn fields(&self) -> [&(dyn ToSql + Sync); 7] {
        let [fen, hash, placement, color, castling, en_passant] = self.row.fields();
        [&self.id, fen, hash, placement, color, castling, en_passant]
    }
}

pub(super) struct PlayerRow<'a> {
    pub(super) source: &'a str,
    pub(super) username: &'a str,
    pub(super) key: String,
    pub(super) title: Option<&'a str>,
    pub(super) is_bot: bool,
}

impl CopyRow<5> for PlayerRow<'_> {
    const TYPES: [Type; 5] = [Type::TEXT, Type::TEXT, Type::TEXT, Type::TEXT, Type::BOOL];
    fn fields(&self) -> [&(dyn ToSql + Sync); 5] {
        [
            &self.source,
            &self.username,
            &self.key,
            &self.title,
            &self.is_bot,
        ]
    }
}

pub(super) struct EventRow<'a> {
    pub(super) source: &'a str,
    pub(super) key: &'a str,
    pub(super) external_id: Option<&'a str>,
    pub(super) name: &'a str,
    pub(super) kind: Option<&'static str>,
}

impl CopyRow<5> for EventRow<'_> {
    const TYPES: [Type; 5] = [Type::TEXT, Type::TEXT, Type::TEXT, Type::TEXT, Type::TEXT];
    fn fields(&self) -> [&(dyn ToSql + Sync); 5] {
        [
            &self.source,
            &self.key,
            &self.external_id,
            &self.name,
            &self.kind,
        ]
    }
}

pub(super) struct GameRow<'a> {
    /// Set in bulk mode; incremental mode lets the table's identity decide.
    pub(super) id: Option<i64>,
    /// The game's position keys (not a column).
    pub(super) keys: &'a [PositionKey],
    pub(super) game: &'a GameRecord,
    pub(super) source: &'a str,
    pub(super) external_id: String,
    pub(super) event_id: Option<i64>,
    pub(super) white_id: Option<i64>,
    pub(super) black_id: Option<i64>,
    pub(super) initial_id: i64,
    pub(super) final_id: i64,
    pub(super) ply_count: i32,
    pub(super) moves: Vec<u8>,
    pub(super) variant: &'static str,
    pub(super) termination: Option<&'static str>,
    pub(super) result: Option<i16>,
    pub(super) initial_s: Option<i32>,
    pub(super) increment_s: Option<i32>,
    pub(super) tags: Json<serde_json::Value>,
    /// Where the game was read (input, game number, byte offset): `None`
    /// for a game stored by `game put`, which comes from no import.
    pub(super) file_id: Option<i64>,
    pub(super) game_number: Option<i64>,
    pub(super) byte_offset: Option<i64>,
    /// `positions_max_ply`: see [`crate::chess::scope::recorded_cap`].
    pub(super) positions_max_ply: Option<i32>,
}

impl CopyRow<31> for GameRow<'_> {
    const TYPES: [Type; 31] = [
        Type::INT8,
        Type::TEXT,
        Type::TEXT,
        Type::INT8,
        Type::TEXT,
        Type::TEXT,
        Type::INT8,
        Type::INT8,
        Type::INT4,
        Type::INT4,
        Type::INT4,
        Type::INT4,
        Type::TEXT,
        Type::INT4,
        Type::INT4,
        Type::TEXT,
        Type::TEXT,
        Type::INT2,
        Type::TEXT,
        Type::TEXT,
        Type::TIMESTAMPTZ,
        Type::INT8,
        Type::INT8,
        Type::INT4,
        Type::BYTEA,
        Type::TEXT,
        Type::JSONB,
        Type::INT8,
        Type::INT8,
        Type::INT8,
        Type::INT4,
    ];
    fn fields(&self) -> [&(dyn ToSql + Sync); 31] {
        let meta = &self.game.meta;
        [
            &self.id,
            &self.source,
            &self.external_id,
            &self.event_id,
            &meta.site,
            &meta.round,
            &self.white_id,
            &self.black_id,
            &meta.white.elo,
            &meta.black.elo,
            &meta.white.rating_diff,
            &meta.black.rating_diff,
            &meta.time_control,
            &self.initial_s,
            &self.increment_s,
            &self.variant,
            &self.termination,
            &self.result,
            &meta.eco,
            &meta.opening,
            &meta.started_at,
            &self.initial_id,
            &self.final_id,
            &self.ply_count,
            &self.moves,
            &self.game.start_fen,
            &self.tags,
            &self.file_id,
            &self.game_number,
            &self.byte_offset,
            &self.positions_max_ply,
        ]
    }
}

pub(super) struct MoveRow<'a> {
    pub(super) game_id: i64,
    pub(super) ply: i32,
    pub(super) before: i64,
    pub(super) after: i64,
    pub(super) uci: &'a str,
    pub(super) san: &'a str,
    pub(super) clock_ms: Option<i32>,
    pub(super) eval_cp: Option<i32>,
    pub(super) eval_mate: Option<i32>,
    pub(super) nag: Option<i16>,
}

impl CopyRow<10> for MoveRow<'_> {
    const TYPES: [Type; 10] = [
        Type::INT8,
        Type::INT4,
        Type::INT8,
        Type::INT8,
        Type::TEXT,
        Type::TEXT,
        Type::INT4,
        Type::INT4,
        Type::INT4,
        Type::INT2,
    ];
    fn fields(&self) -> [&(dyn ToSql + Sync); 10] {
        [
            &self.game_id,
            &self.ply,
            &self.before,
            &self.after,
            &self.uci,
            &self.san,
            &self.clock_ms,
            &self.eval_cp,
            &self.eval_mate,
            &self.nag,
        ]
    }
}

pub(super) struct RejectRow<'a> {
    pub(super) file_id: i64,
    pub(super) game_number: i64,
    pub(super) byte_offset: i64,
    pub(super) reason: String,
    pub(super) raw: &'a [u8],
    pub(super) raw_length: i64,
}

impl CopyRow<6> for RejectRow<'_> {
    const TYPES: [Type; 6] = [
        Type::INT8,
        Type::INT8,
        Type::INT8,
        Type::TEXT,
        Type::BYTEA,
        Type::INT8,
    ];
    fn fields(&self) -> [&(dyn ToSql + Sync); 6] {
        [
            &self.file_id,
            &self.game_number,
            &self.byte_offset,
            &self.reason,
            &self.raw,
            &self.raw_length,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Big-endian length-prefixed field, as binary COPY frames it.
    fn field(bytes: &[u8]) -> Vec<u8> {
        let mut out = i32::try_from(bytes.len())
            .expect("small")
            .to_be_bytes()
            .to_vec();
        out.extend_from_slice(bytes);
        out
    }

    #[test]
    fn rows_encode_in_the_binary_copy_tuple_format() {
        let row = MoveRow {
            game_id: 7,
            ply: 1,
            before: -2,
            after: 3,
            uci: "e2e4",
            san: "e4",
            clock_ms: Some(300_000),
            eval_cp: None,
            eval_mate: None,
            nag: Some(1),
        };
        let encoded = encode_rows(&[row]).expect("encodes");
        let mut expected = 10i16.to_be_bytes().to_vec();
        expected.extend(field(&7i64.to_be_bytes()));
        expected.extend(field(&1i32.to_be_bytes()));
        expected.extend(field(&(-2i64).to_be_bytes()));
        expected.extend(field(&3i64.to_be_bytes()));
        expected.extend(field(b"e2e4"));
        expected.extend(field(b"e4"));
        expected.extend(field(&300_000i32.to_be_bytes()));
        expected.extend((-1i32).to_be_bytes());
        expected.extend((-1i32).to_be_bytes());
        expected.extend(field(&1i16.to_be_bytes()));
        assert_eq!(&encoded[..], &expected[..]);
    }

    #[test]
    fn the_copy_header_is_the_signature_and_two_zero_words() {
        assert_eq!(COPY_HEADER.len(), 19);
        assert!(COPY_HEADER.starts_with(b"PGCOPY\n\xff\r\n\0"));
        assert!(COPY_HEADER[11..].iter().all(|&b| b == 0));
        assert_eq!(COPY_TRAILER, (-1i16).to_be_bytes());
    }
}
