//! Position lookup by FEN: the FEN a user types is normalized exactly as
//! the importer normalized the positions it stored (python-chess's four
//! fields), then found by `positions.normalized_fen`.

use shakmaty::fen::Fen;
use tokio_postgres::Client;

use crate::{
    chess::{fen::canonical_fen, model::GameVariant},
    error::Error,
    store::db::db_err,
};

/// The id of the position `fen` describes under `variant`'s rules, or
/// `None` when no imported game reached it. A FEN that is not a legal
/// position of `variant` (including a FEN of another variant, such as
/// crazyhouse pockets under standard rules) is an [`Error::Input`] naming
/// the variant, so a typo is never answered with "no games".
pub async fn position_id(
    client: &Client,
    variant: GameVariant,
    fen: &str,
) -> Result<Option<i64>, Error> {
    let not_legal = |e: &dyn std::fmt::Display| Error::Input {
        file: "FEN".to_owned(),
        message: format!(
            "{e}: not a legal {} position (a FEN of another variant? pass --variant)",
            variant.as_db_label()
        ),
    };
    let normalized = canonical_fen(fen, variant.rules(), variant == GameVariant::Chess960)
        .map_err(|e| not_legal(&e))?;
    // The standard rules read a FEN with crazyhouse pockets or three-check
    // counters by ignoring them; a search must not silently drop part of
    // the position it was given.
    if let Ok(parsed) = Fen::from_ascii(fen.trim().as_bytes()) {
        let setup = parsed.into_setup();
        if setup.pockets.is_some() && variant != GameVariant::Crazyhouse {
            return Err(not_legal(&format!("{fen:?} has crazyhouse pockets")));
        }
        if setup.remaining_checks.is_some() && variant != GameVariant::ThreeCheck {
            return Err(not_legal(&format!("{fen:?} has three-check counters")));
        }
    }
    let row = client
        .query_opt(
            "SELECT id FROM positions WHERE normalized_fen = $1",
            &[&normalized],
        )
        .await
        .map_err(db_err("looking up a position"))?;
    Ok(row.map(|row| row.get(0)))
}
