//! Which games of a batch are already in the database, or repeated in
//! the batch, by their identity; and the conflicts: an identity held by a
//! game with other moves. Both phases run it (phase two again, because
//! another importer may have committed a game since). It reads and never
//! writes.

use std::collections::{HashMap, HashSet};

use tokio_postgres::{Transaction, types::Json};

use super::{FileContext, to_i64};
use crate::{
    chess::{
        model::{GameResult, termination_label},
        replay::GameRecord,
    },
    ingest::pipeline::{Batch, Outcome},
};

/// Where a game that holds an identity is: in `games` (with its id), or
/// earlier in the same batch (no id yet).
#[derive(Debug, Clone, Default)]
pub struct Holder {
    /// `games.id`, if it is in the table.
    pub game_id: Option<i64>,
    /// Its input (`import_files.id`).
    pub file_id: Option<i64>,
    /// The input's path as recorded.
    pub path: Option<String>,
    /// Its number in that input.
    pub game_number: Option<i64>,
    /// Its byte offset in that input.
    pub byte_offset: Option<i64>,
}

/// A game of a batch not imported because its identity (a Lichess id) is
/// held by a game with other moves: reported with both locations, counted
/// with the games already present.
#[derive(Debug, Clone)]
pub struct Conflict {
    /// Index into the batch's outcomes.
    pub index: usize,
    /// Its identity.
    pub source: String,
    /// Its identity.
    pub external_id: String,
    /// The game that holds the identity.
    pub holder: Holder,
}

/// A game of a batch, as the existing-games check needs it.
pub(super) struct Candidate<'a> {
    pub(super) index: usize,
    pub(super) game: &'a GameRecord,
    pub(super) source: &'a str,
    pub(super) external_id: String,
    /// Set by [`classify`] when the game is present with fewer rows than
    /// this run stores: the rows to add (the backfill of a capped import).
    pub(super) extends: Option<Extension>,
    /// Sharded layout: the id its identity was claimed with for this input
    /// and game number (see [`super::sharded`]); this run writes it.
    pub(super) claimed: Option<i64>,
}

/// A game present in `games` under a positions cap that this run's cap
/// (or its absence) goes past: its rows past the stored cap are added
/// instead of the game being skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Extension {
    /// `games.id`.
    pub(super) game_id: i64,
    /// Its `positions_max_ply`: the plies it has rows for.
    pub(super) stored_cap: i32,
}

/// What the existing-games check found for one candidate.
#[derive(Debug)]
enum Found {
    /// Not in `games`.
    New,
    /// In `games`, the same game: already present, with its id and
    /// `positions_max_ply`.
    Present(i64, Option<i32>),
    /// In `games` with other moves: a conflict.
    Other(Holder),
    /// Sharded layout: its identity is claimed for this input and game
    /// number, with this id, and the game is not written yet.
    Claimed(i64),
}

/// How a game is recognized: a Lichess game by its id, any other game by
/// the digest of its content whatever its source label (so the same game
/// from two files, or imported under two labels, is stored once).
pub(super) fn identity<'a>(source: &str, external_id: &'a str) -> (bool, &'a str) {
    (source == LICHESS, external_id)
}

/// `games.source` of Lichess games.
const LICHESS: &str = "lichess";

/// Looks the candidates up in `games` by their identity (see [`identity`]):
/// one index probe each, through games' unique key for Lichess games and
/// the partial index on the digest for the others. A game found with
/// other moves or another start position is a conflict.
async fn existing_games(
    tx: &Transaction<'_>,
    candidates: &[Candidate<'_>],
    file: &FileContext,
) -> Result<Vec<Found>, tokio_postgres::Error> {
    if file.shards.is_some() {
        return claimed_games(tx, candidates, file).await;
    }
    let sources: Vec<&str> = candidates.iter().map(|c| c.source).collect();
    let ids: Vec<&str> = candidates.iter().map(|c| c.external_id.as_str()).collect();
    let moves: Vec<Vec<u8>> = candidates.iter().map(|c| c.game.encoded_moves()).collect();
    let start_fens: Vec<Option<&str>> = candidates
        .iter()
        .map(|c| c.game.start_fen.as_deref())
        .collect();
    let rows = tx
        .query(
            "WITH k AS (
                 SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::text[])
                     WITH ORDINALITY AS k(source, external_id, moves, start_fen, i)
             ), found AS (
                 SELECT k.i, g.id, g.moves = k.moves AND g.start_fen IS NOT DISTINCT FROM k.start_fen AS same,
                        g.import_file_id, g.game_number, g.byte_offset, g.positions_max_ply
                 FROM k JOIN games g ON g.source = 'lichess' AND g.external_id = k.external_id
                 WHERE k.source = 'lichess'
                 UNION ALL
                 SELECT k.i, g.id, g.moves = k.moves AND g.start_fen IS NOT DISTINCT FROM k.start_fen,
                        g.import_file_id, g.game_number, g.byte_offset, g.positions_max_ply
                 FROM k JOIN games g ON g.source <> 'lichess' AND g.external_id = k.external_id
                 WHERE k.source <> 'lichess'
             )
             -- The holder's path is only reported for a conflict: a rerun,
             -- where every game is present, looks up no input.
             SELECT found.*, f.path FROM found
             LEFT JOIN import_files f ON f.id = found.import_file_id AND NOT found.same",
            &[&sources, &ids, &moves, &start_fens],
        )
        .await?;
    let mut found: Vec<Found> = candidates.iter().map(|_| Found::New).collect();
    for row in rows {
        let ordinality: i64 = row.get("i");
        let Some(slot) = usize::try_from(ordinality - 1)
            .ok()
            .and_then(|i| found.get_mut(i))
        else {
            continue;
        };
        let same: bool = row.get("same");
        *slot = match (&slot, same) {
            // Several rows can hold one digest (labels of earlier
            // versions): the same game anywhere makes it present.
            (Found::Present(..), _) => continue,
            (_, true) => Found::Present(row.get("id"), row.get("positions_max_ply")),
            _ => Found::Other(Holder {
                game_id: row.get("id"),
                file_id: row.get("import_file_id"),
                game_number: row.get("game_number"),
                byte_offset: row.get("byte_offset"),
                path: row.get("path"),
            }),
        };
    }
    Ok(found)
}

/// [`existing_games`] on a sharded layout, where `games` has no unique key
/// across shards: the identities are looked up in `game_keys` (one
/// pushed-down probe per shard), then the games they name by id. A key
/// whose game is not written is this input's to write when it claimed it
/// at this game number (an earlier attempt stopped between the claim and
/// the write, see [`super::sharded`]), and another import's game
/// otherwise: present, as that import or its rerun writes it.
async fn claimed_games(
    tx: &Transaction<'_>,
    candidates: &[Candidate<'_>],
    file: &FileContext,
) -> Result<Vec<Found>, tokio_postgres::Error> {
    let ids: Vec<&str> = candidates.iter().map(|c| c.external_id.as_str()).collect();
    let keys = super::sharded::game_keys(tx, &ids).await?;
    let game_ids: Vec<i64> = keys.values().map(|key| key.game_id).collect();
    let rows = tx
        .query(
            "SELECT g.id, g.moves, g.start_fen, g.import_file_id, g.game_number, g.byte_offset,
                    g.positions_max_ply
             FROM games g WHERE g.id = ANY($1)",
            &[&game_ids],
        )
        .await?;
    let games: HashMap<i64, &tokio_postgres::Row> = rows
        .iter()
        .map(|row| (row.get::<_, i64>("id"), row))
        .collect();
    let mut found = Vec::with_capacity(candidates.len());
    let mut holders_without_path = Vec::new();
    let mut orphans = Vec::new();
    for (i, candidate) in candidates.iter().enumerate() {
        let (lichess, id) = identity(candidate.source, &candidate.external_id);
        let Some(key) = keys.get(&(id.to_owned(), lichess)) else {
            found.push(Found::New);
            continue;
        };
        let Some(row) = games.get(&key.game_id) else {
            let ours = key.import_file_id == Some(file.file_id)
                && key.game_number == Some(to_i64(candidate.game.pos.game_number));
            if !ours {
                orphans.push((i, *key));
            }
            found.push(if ours {
                Found::Claimed(key.game_id)
            } else {
                Found::Present(key.game_id, None)
            });
            continue;
        };
        let moves: &[u8] = row.get("moves");
        let start_fen: Option<&str> = row.get("start_fen");
        if moves == candidate.game.encoded_moves()
            && start_fen == candidate.game.start_fen.as_deref()
        {
            found.push(Found::Present(key.game_id, row.get("positions_max_ply")));
        } else {
            holders_without_path.push(i);
            found.push(Found::Other(Holder {
                game_id: Some(key.game_id),
                file_id: row.get("import_file_id"),
                path: None,
                game_number: row.get("game_number"),
                byte_offset: row.get("byte_offset"),
            }));
        }
    }
    take_over_orphans(tx, candidates, file, &orphans, &mut found).await?;
    // The holder's path is only reported for a conflict.
    for i in holders_without_path {
        if let Some(Found::Other(holder)) = found.get_mut(i)
            && let Some(file_id) = holder.file_id
        {
            holder.path = tx
                .query_opt("SELECT path FROM import_files WHERE id = $1", &[&file_id])
                .await?
                .map(|row| row.get("path"));
        }
    }
    Ok(found)
}

/// Marks present the candidates not found by their digest that an earlier
/// version stored under its own (see [`legacy_holders`]), so that
/// re-importing a file imported then changes nothing.
async fn recognize_legacy(
    tx: &Transaction<'_>,
    candidates: &[Candidate<'_>],
    found: &mut [Found],
) -> Result<(), tokio_postgres::Error> {
    let unknown: Vec<usize> = found
        .iter()
        .enumerate()
        .filter(|(i, f)| matches!(f, Found::New) && candidates[*i].source != LICHESS)
        .map(|(i, _)| i)
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    let games: Vec<&GameRecord> = unknown.iter().map(|&i| candidates[i].game).collect();
    for (&index, holder) in unknown.iter().zip(legacy_holders(tx, &games).await?) {
        if let (Some((id, cap)), Some(slot)) = (holder, found.get_mut(index)) {
            *slot = Found::Present(id, cap);
        }
    }
    Ok(())
}

/// For each non-Lichess game, the stored game (`games.id` and
/// `positions_max_ply`) that an earlier version stored under its digest
/// ([`GameRecord::legacy_external_id`]), if that stored game is this one.
/// That digest left out Result, the Elos, the rating diffs, Variant,
/// Termination, Opening and the kept raw tags, and games differing only in
/// those shared it: the stored game counts only if it holds the game's
/// values for every one of them (and its moves and start position);
/// another game under the legacy digest is another game.
pub(crate) async fn legacy_holders(
    tx: &Transaction<'_>,
    games: &[&GameRecord],
) -> Result<Vec<Option<(i64, Option<i32>)>>, tokio_postgres::Error> {
    let mut holders = vec![None; games.len()];
    let ids: Vec<String> = games.iter().map(|g| g.legacy_external_id()).collect();
    let rows = tx
        .query(
            "SELECT k.i, g.id, g.positions_max_ply, g.moves, g.start_fen, g.result, g.white_elo,
                    g.black_elo, g.white_rating_diff, g.black_rating_diff, g.variant::text,
                    g.termination::text, g.opening, g.tags
             FROM unnest($1::text[]) WITH ORDINALITY AS k(external_id, i)
             JOIN games g ON g.source <> 'lichess' AND g.external_id = k.external_id",
            &[&ids],
        )
        .await?;
    for row in rows {
        let ordinality: i64 = row.get("i");
        let Some(index) = usize::try_from(ordinality - 1)
            .ok()
            .filter(|&i| i < games.len())
        else {
            continue;
        };
        let game = games[index];
        let meta = &game.meta;
        let tags: Json<serde_json::Value> = row.get("tags");
        let same = game.meta.lichess_id.is_none()
            && row.get::<_, &[u8]>("moves") == game.encoded_moves().as_slice()
            && row.get::<_, Option<&str>>("start_fen") == game.start_fen.as_deref()
            && row.get::<_, Option<i16>>("result") == game.result.and_then(GameResult::score)
            && row.get::<_, Option<i32>>("white_elo") == meta.white.elo
            && row.get::<_, Option<i32>>("black_elo") == meta.black.elo
            && row.get::<_, Option<i32>>("white_rating_diff") == meta.white.rating_diff
            && row.get::<_, Option<i32>>("black_rating_diff") == meta.black.rating_diff
            && row.get::<_, &str>("variant") == game.variant.as_db_label()
            && row.get::<_, Option<&str>>("termination")
                == meta.termination.as_deref().map(termination_label)
            && row.get::<_, Option<&str>>("opening") == meta.opening.as_deref()
            && tags.0 == serde_json::Value::Object(meta.tags_json());
        if same && holders[index].is_none() {
            holders[index] = Some((row.get("id"), row.get("positions_max_ply")));
        }
    }
    Ok(holders)
}

/// Claims that another input holds without its game written, taken over
/// for `file` when no process is importing that input (its lock is free:
/// it was interrupted, or it changed and was restarted under a new
/// fingerprint, and may never be read again). Otherwise the game would
/// count as present here and be written by nobody. The other input's lock
/// is held until this transaction ends, and the claim moves only if it
/// is still the one read, so the game is written by exactly one of them:
/// that input's rerun finds the claim taken and the game present.
async fn take_over_orphans(
    tx: &Transaction<'_>,
    candidates: &[Candidate<'_>],
    file: &FileContext,
    orphans: &[(usize, super::sharded::GameKey)],
    found: &mut [Found],
) -> Result<(), tokio_postgres::Error> {
    let holders: Vec<i64> = orphans
        .iter()
        .filter_map(|(_, key)| key.import_file_id)
        .collect();
    if holders.is_empty() {
        return Ok(());
    }
    let mut idle = HashSet::new();
    for row in tx
        .query(
            "SELECT id, fingerprint FROM import_files WHERE id = ANY($1) ORDER BY id",
            &[&holders],
        )
        .await?
    {
        let fingerprint: &str = row.get("fingerprint");
        let free: bool = tx
            .query_one(
                "SELECT pg_try_advisory_xact_lock($1) AS free",
                &[&crate::ingest::engine::lock_key(fingerprint)],
            )
            .await?
            .get("free");
        if free {
            idle.insert(row.get::<_, i64>("id"));
        }
    }
    for (i, key) in orphans {
        let (Some(holder), Some(number)) = (key.import_file_id, key.game_number) else {
            continue;
        };
        if !idle.contains(&holder) {
            continue;
        }
        let candidate = &candidates[*i];
        let (lichess, external_id) = identity(candidate.source, &candidate.external_id);
        let moved = tx
            .execute(
                "UPDATE game_keys SET import_file_id = $1, game_number = $2
                 WHERE external_id = $3 AND lichess = $4 AND game_id = $5
                   AND import_file_id = $6 AND game_number = $7",
                &[
                    &file.file_id,
                    &to_i64(candidate.game.pos.game_number),
                    &external_id,
                    &lichess,
                    &key.game_id,
                    &holder,
                    &number,
                ],
            )
            .await?;
        if moved == 1 {
            found[*i] = Found::Claimed(key.game_id);
        }
    }
    Ok(())
}

/// Splits `candidates` into the games to import, the present ones and the
/// conflicts: the database decides first, then the batch itself (the
/// first of two games with one identity wins; a later one with other
/// moves is a conflict, with the same moves it is present). A present game
/// stored under a cap that `file`'s cap goes past is returned with the
/// games to import, its [`Candidate::extends`] set (once per stored game).
pub(super) async fn classify<'a>(
    tx: &Transaction<'_>,
    candidates: Vec<Candidate<'a>>,
    file: &FileContext,
) -> Result<(Vec<Candidate<'a>>, Vec<Conflict>), tokio_postgres::Error> {
    let mut found = existing_games(tx, &candidates, file).await?;
    recognize_legacy(tx, &candidates, &mut found).await?;
    let mut first_of: HashMap<(bool, String), usize> = HashMap::with_capacity(candidates.len());
    let mut extended: HashSet<i64> = HashSet::new();
    let mut new = Vec::with_capacity(candidates.len());
    let mut conflicts = Vec::new();
    for (candidate, found) in candidates.into_iter().zip(found) {
        let conflict = |holder: Holder| Conflict {
            index: candidate.index,
            source: candidate.source.to_owned(),
            external_id: candidate.external_id.clone(),
            holder,
        };
        match found {
            Found::Present(game_id, Some(stored_cap))
                if goes_past(file.positions_max_ply, stored_cap) && extended.insert(game_id) =>
            {
                new.push(Candidate {
                    extends: Some(Extension {
                        game_id,
                        stored_cap,
                    }),
                    ..candidate
                });
            }
            Found::Present(..) => {}
            Found::Other(holder) => conflicts.push(conflict(holder)),
            Found::Claimed(game_id) => new.push(Candidate {
                claimed: Some(game_id),
                ..candidate
            }),
            Found::New => {
                let (lichess, id) = identity(candidate.source, &candidate.external_id);
                match first_of.get(&(lichess, id.to_owned())) {
                    None => {
                        first_of.insert((lichess, id.to_owned()), new.len());
                        new.push(candidate);
                    }
                    Some(&earlier) => {
                        let first: &Candidate<'_> = &new[earlier];
                        let same = first.game.encoded_moves() == candidate.game.encoded_moves()
                            && first.game.start_fen == candidate.game.start_fen;
                        if !same {
                            conflicts.push(conflict(Holder {
                                game_id: None,
                                file_id: Some(file.file_id),
                                path: None,
                                game_number: Some(to_i64(first.game.pos.game_number)),
                                byte_offset: Some(to_i64(first.game.pos.byte_offset)),
                            }));
                        }
                    }
                }
            }
        }
    }
    Ok((new, conflicts))
}

/// Whether a run under `cap` stores more plies than a game stored under
/// `stored_cap` has rows for (no cap stores every ply).
fn goes_past(cap: Option<u32>, stored_cap: i32) -> bool {
    cap.is_none_or(|cap| i64::from(cap) > i64::from(stored_cap))
}

/// The games of `batch` that are not in the database and not repeated
/// within the batch, and the conflicts found.
pub(super) async fn games_to_import<'b>(
    tx: &Transaction<'_>,
    batch: &'b Batch,
    file: &'b FileContext,
) -> Result<(Vec<Candidate<'b>>, Vec<Conflict>), tokio_postgres::Error> {
    let candidates: Vec<Candidate<'b>> = batch
        .outcomes
        .iter()
        .enumerate()
        .filter_map(|(index, outcome)| match outcome {
            Outcome::Game(game) => Some(Candidate {
                index,
                game,
                source: game.source(&file.source),
                external_id: game.external_id(),
                extends: None,
                claimed: None,
            }),
            Outcome::Rejected(_) => None,
        })
        .collect();
    classify(tx, candidates, file).await
}
