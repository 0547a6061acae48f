//! The binary COPY encoder, and [`copy_row!`], which declares a row.
//!
//! Apart from the phases because it is the one place that knows the wire
//! format (`PGCOPY` header, tuple framing, `postgres-types` encoding). It
//! must not decide what is written: the phases build the rows, declared in
//! [`super::rows`].

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::{SinkExt, pin_mut};
use rayon::prelude::*;
use tokio_postgres::{
    Transaction,
    types::{IsNull, ToSql, Type},
};

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
/// `postgres-types`. [`copy_row!`] implements it (with [`TableRow`]); the
/// explorer's counter rows implement it by hand.
pub(crate) trait CopyRow<const N: usize> {
    const TYPES: [Type; N];
    fn fields(&self) -> [&(dyn ToSql + Sync); N];
}

/// A borrowed row copies as the row (staging a batch's rows without
/// moving them out of what holds them).
impl<const N: usize, R: CopyRow<N>> CopyRow<N> for &R {
    const TYPES: [Type; N] = R::TYPES;
    fn fields(&self) -> [&(dyn ToSql + Sync); N] {
        (**self).fields()
    }
}

/// A row declared by [`copy_row!`]: its columns' names, in the order of
/// [`CopyRow::TYPES`] and [`CopyRow::fields`], so that every statement
/// naming them (the `COPY`, the staging table, the `INSERT … SELECT` from
/// it) is written from the declaration.
pub(crate) trait TableRow<const N: usize>: CopyRow<N> {
    /// The columns, by name.
    const COLUMNS: [&'static str; N];
    /// The column's type in a staging table when it is not its binary
    /// type's name (an enum, copied as its label's text).
    const STAGED: [Option<&'static str>; N];

    /// The columns but `skip`, comma-separated: the column list of a
    /// statement.
    fn columns_except(skip: &[&str]) -> String {
        let kept = Self::COLUMNS.iter().filter(|c| !skip.contains(c));
        kept.copied().collect::<Vec<_>>().join(", ")
    }

    /// `COPY table (every column) FROM STDIN (FORMAT binary)`.
    fn copy_into(table: &str) -> String {
        format!(
            "COPY {table} ({}) FROM STDIN (FORMAT binary)",
            Self::columns_except(&[])
        )
    }

    /// The temporary table `table` with a column of each, emptied at
    /// commit (created once per connection).
    fn staging_table(table: &str) -> String {
        let columns = Self::COLUMNS
            .iter()
            .zip(Self::TYPES.iter().zip(Self::STAGED))
            .map(|(column, (ty, staged))| format!("{column} {}", staged.unwrap_or(ty.name())))
            .collect::<Vec<_>>()
            .join(", ");
        format!("CREATE TEMP TABLE IF NOT EXISTS {table} ({columns}) ON COMMIT DELETE ROWS;\n")
    }
}

/// Declares a row the writer `COPY`s: the struct, and from the one list of
/// its columns their names, binary types and values, in order
/// ([`CopyRow`], [`TableRow`]), so that adding a column is one line here
/// (and its migration, and filling it where the row is built).
///
/// Each column is `name: RustType = TYPE`, `TYPE` a
/// [`Type`](tokio_postgres::types::Type) constant, optionally followed by
/// `in "sql type"`: its type in a staging table when that is not `TYPE`'s
/// name. The field is named as the column. Fields that are not columns
/// (what later steps need of the row) follow in `also { … }`. Fields have
/// the struct's visibility.
macro_rules! copy_row {
    (
        $(#[$attr:meta])*
        $vis:vis struct $name:ident $(<$lt:lifetime>)? {
            $(
                $(#[$column_attr:meta])*
                $column:ident : $ty:ty = $pg:ident $(in $staged:literal)?
            ),+ $(,)?
        }
        $(also {
            $(
                $(#[$extra_attr:meta])*
                $extra:ident : $extra_ty:ty
            ),+ $(,)?
        })?
    ) => {
        $(#[$attr])*
        $vis struct $name $(<$lt>)? {
            $($(#[$column_attr])* $vis $column: $ty,)+
            $($($(#[$extra_attr])* $vis $extra: $extra_ty,)+)?
        }

        impl $(<$lt>)? $crate::ingest::writer::CopyRow<{ [$(stringify!($column)),+].len() }>
            for $name $(<$lt>)?
        {
            const TYPES: [::tokio_postgres::types::Type; [$(stringify!($column)),+].len()] =
                [$(::tokio_postgres::types::Type::$pg),+];
            fn fields(
                &self,
            ) -> [&(dyn ::tokio_postgres::types::ToSql + Sync); [$(stringify!($column)),+].len()] {
                [$(&self.$column),+]
            }
        }

        impl $(<$lt>)? $crate::ingest::writer::TableRow<{ [$(stringify!($column)),+].len() }>
            for $name $(<$lt>)?
        {
            const COLUMNS: [&'static str; [$(stringify!($column)),+].len()] =
                [$(stringify!($column)),+];
            const STAGED: [Option<&'static str>; [$(stringify!($column)),+].len()] =
                [$($crate::ingest::writer::copy::staged_type(&[$($staged)?])),+];
        }
    };
}
pub(super) use copy_row;

/// A column's `in "sql type"` of [`copy_row!`], if it has one.
pub(super) const fn staged_type(declared: &[&'static str]) -> Option<&'static str> {
    match declared {
        [staged] => Some(staged),
        _ => None,
    }
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

/// The fields of binary COPY tuples as [`encode_rows`] frames them: each
/// row's values (`None` for NULL), for tests to compare with a row's
/// declaration.
#[cfg(test)]
pub(super) fn decode_rows(mut bytes: &[u8]) -> Vec<Vec<Option<Vec<u8>>>> {
    fn take<'b>(bytes: &mut &'b [u8], n: usize) -> &'b [u8] {
        let (head, rest) = bytes.split_at(n);
        *bytes = rest;
        head
    }
    let mut rows = Vec::new();
    while !bytes.is_empty() {
        let count = i16::from_be_bytes(take(&mut bytes, 2).try_into().expect("two bytes"));
        let row = (0..count)
            .map(|_| {
                let length = i32::from_be_bytes(take(&mut bytes, 4).try_into().expect("four"));
                usize::try_from(length)
                    .ok()
                    .map(|n| take(&mut bytes, n).to_vec())
            })
            .collect();
        rows.push(row);
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::writer::rows::MoveRow;

    /// Big-endian length-prefixed field, as binary COPY frames it.
    fn field(bytes: &[u8]) -> Vec<u8> {
        let mut out = i32::try_from(bytes.len())
            .expect("small")
            .to_be_bytes()
            .to_vec();
        out.extend_from_slice(bytes);
        out
    }

    copy_row! {
        /// A row with each kind of column the macro takes.
        struct Sample<'a> {
            id: Option<i64> = INT8,
            /// A documented column.
            name: &'a str = TEXT,
            variant: &'static str = TEXT in "game_variant",
        }
        also {
            /// Not a column.
            note: u8,
        }
    }

    #[test]
    fn a_declared_row_has_its_columns_types_and_values_in_one_order() {
        assert_eq!(Sample::COLUMNS, ["id", "name", "variant"]);
        assert_eq!(Sample::TYPES, [Type::INT8, Type::TEXT, Type::TEXT]);
        assert_eq!(
            Sample::copy_into("t"),
            "COPY t (id, name, variant) FROM STDIN (FORMAT binary)"
        );
        assert_eq!(Sample::columns_except(&["id"]), "name, variant");
        assert_eq!(
            Sample::staging_table("stage_t"),
            "CREATE TEMP TABLE IF NOT EXISTS stage_t (id int8, name text, variant game_variant) \
             ON COMMIT DELETE ROWS;\n"
        );
        let row = Sample {
            id: None,
            name: "x",
            variant: "standard",
            note: 7,
        };
        assert_eq!(row.note, 7);
        let encoded = encode_rows(&[&row]).expect("encodes");
        let mut expected = 3i16.to_be_bytes().to_vec();
        expected.extend((-1i32).to_be_bytes());
        expected.extend(field(b"x"));
        expected.extend(field(b"standard"));
        assert_eq!(&encoded[..], &expected[..]);
        assert_eq!(
            decode_rows(&encoded),
            [vec![None, Some(b"x".to_vec()), Some(b"standard".to_vec())]]
        );
    }

    #[test]
    fn rows_encode_in_the_binary_copy_tuple_format() {
        let row = MoveRow {
            game_id: 7,
            ply: 1,
            position_id: -2,
            position_after_id: 3,
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
