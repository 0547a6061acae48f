//! Finding a position's row from a FEN someone typed.

use tokio_postgres::Client;

use crate::{
    chess::{fen::canonical_fen, model::GameVariant},
    error::Error,
    store::db::db_err,
};

/// The `positions.id` of the position `fen` describes in `variant`, or
/// none if no imported game reached it. The FEN is read as python-chess
/// reads a `[FEN]` tag and normalized as the import stores positions, so
/// any spelling of a position (move counters, an en passant square that
/// cannot be taken) finds its row; a FEN that is not a legal position of
/// `variant` is an [`Error::Request`].
pub async fn position_id(
    client: &Client,
    variant: GameVariant,
    fen: &str,
) -> Result<Option<i64>, Error> {
    let normalized = canonical_fen(fen, variant.rules(), variant == GameVariant::Chess960)
        .map_err(|e| Error::Request(format!("{e} (variant {})", variant.as_db_label())))?;
    Ok(client
        .query_opt(
            "SELECT id FROM positions WHERE normalized_fen = $1",
            &[&normalized],
        )
        .await
        .map_err(db_err("looking the position up"))?
        .map(|row| row.get(0)))
}
