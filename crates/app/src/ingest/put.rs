//! Storing one game from a PGN file (`pgnload game put`): new, it is
//! inserted; already stored (the same identity an import recognizes: the
//! Lichess id, else the content digest), or named with `--replace`, it
//! replaces the stored game, keeping its id. Everything in one
//! transaction: the old game out of the explorer counters, its moves and
//! row deleted (the delete path, `remove_game`), the new one's positions,
//! players, event, row, moves and counters written (the writer's steps,
//! `prepare_game`).
//!
//! The game is read by the import's own reader and replay
//! ([`process_chunk`]), so a put game is stored exactly as importing the
//! same file would store it.

use tokio_postgres::{Client, Transaction};

use crate::{
    chess::{model::GameRef, reader::GameSplitter, replay::GameRecord},
    error::Error,
    explorer,
    ingest::{
        dedup::PositionKey,
        delete::{Located, locate, lock_for_one_game, remove_game},
        pipeline::{Outcome, PipelineConfig, process_chunk},
        source::open_input,
        writer::{legacy_holders, prepare_connection, prepare_game},
    },
    store::db::db_err,
};

/// Reads the one game of the PGN input `name` (a path, or `-` for stdin;
/// compressed or not, as `import` reads it) and replays it. A file with no
/// game, more than one, or a game the import would reject is an
/// [`Error::Input`] saying which.
pub fn read_one_game(name: &str, config: &PipelineConfig) -> Result<GameRecord, Error> {
    let input = open_input(name, config.source)?;
    let mut splitter = GameSplitter::new(input.reader, input.name, 0, 0, config.limits);
    let refuse = |message: String| Error::Input {
        file: name.to_owned(),
        message,
    };
    let broken = |e: std::io::Error| refuse(format!("cannot be read: {e}"));
    let first = splitter.next_chunk().map_err(broken)?.ok_or_else(|| {
        refuse("holds no game; `game put` stores exactly one game from a PGN file".to_owned())
    })?;
    if let Some(second) = splitter.next_chunk().map_err(broken)? {
        return Err(refuse(format!(
            "holds more than one game (game #2 starts at byte {}); `game put` stores exactly \
             one game: put each on its own, or use `pgnload import`",
            second.pos.byte_offset
        )));
    }
    match process_chunk(first, config.limits) {
        Outcome::Game(game) => Ok(*game),
        Outcome::Rejected(rejected) => Err(refuse(format!(
            "its game cannot be stored: {}",
            rejected.rejection.reason
        ))),
    }
}

/// What [`put_game`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutOutcome {
    /// The game was new: inserted.
    Stored,
    /// The game replaced the stored game `was` (the same id; its key may
    /// have changed), which had `old_moves` move rows.
    Replaced {
        /// The replaced game's key before.
        was: String,
        /// Its move rows.
        old_moves: u64,
    },
    /// The database already holds this game as it is: nothing was written.
    Unchanged,
}

/// The result of [`put_game`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Put {
    /// What happened.
    pub outcome: PutOutcome,
    /// `games.id` of the game now stored.
    pub id: i64,
    /// Its key, `SOURCE:EXTERNAL_ID`.
    pub key: String,
    /// Its move rows.
    pub moves: u64,
    /// Positions it added to `positions`.
    pub positions_new: u64,
}

/// Stores `game` (non-Lichess games under the label `source`), in one
/// transaction: inserted if no stored game has its identity; else it
/// replaces that game, or, with `replace`, the game `replace` names (then
/// no other game may hold its identity: a conflict). A game stored exactly
/// as it is changes nothing ([`PutOutcome::Unchanged`]). Refused (a
/// conflict) because of a bulk load, and waits for the import lock
/// otherwise (`waiting` is called first), as a delete does
/// (`lock_for_one_game`).
pub async fn put_game(
    client: &mut Client,
    game: &GameRecord,
    source: &str,
    replace: Option<&GameRef>,
    waiting: &dyn Fn(),
) -> Result<Put, Error> {
    prepare_connection(client).await?;
    let source = game.source(source);
    let external_id = game.external_id();
    let key = format!("{source}:{external_id}");
    let keys: Vec<PositionKey> = game
        .positions
        .iter()
        .map(|(fen, _)| PositionKey::of(fen))
        .collect();
    let tx = client
        .transaction()
        .await
        .map_err(db_err("starting the put"))?;
    lock_for_one_game(&tx, "put games", waiting).await?;
    // FOR SHARE, as a delete: the counters stay on or off until the commit.
    let explorer = explorer::enabled(&tx, true).await?;
    let target = target_of(&tx, game, source, &external_id, replace).await?;
    let prepared = prepare_game(&tx, game, &keys, source, external_id).await?;
    let (outcome, id) = match target {
        Some(target) if prepared.same_as(&tx, target.id).await? => {
            // Nothing to write; what preparing touched (a player's title)
            // is rolled back with the transaction.
            let moves = u64::try_from(game.plies.len())
                .map_err(|_| Error::bug("a game's ply count does not fit in 64 bits"))?;
            return Ok(Put {
                outcome: PutOutcome::Unchanged,
                id: target.id,
                key: format!("{}:{}", target.source, target.external_id),
                moves,
                positions_new: 0,
            });
        }
        Some(target) => {
            let old_moves = remove_game(&tx, target.id, explorer).await?;
            let was = format!("{}:{}", target.source, target.external_id);
            (PutOutcome::Replaced { was, old_moves }, Some(target.id))
        }
        None => (PutOutcome::Stored, None),
    };
    let inserted = prepared.insert(&tx, id, explorer).await?.ok_or_else(|| {
        Error::Conflict(format!(
            "another process stored a game {key} meanwhile; nothing was written"
        ))
    })?;
    tx.commit().await.map_err(db_err("committing the put"))?;
    Ok(Put {
        outcome,
        id: inserted.id,
        key,
        moves: inserted.moves,
        positions_new: prepared.positions_new,
    })
}

/// The stored game the put writes over, locked: the game `replace` names
/// (an error if there is none, or if the game put is stored as another),
/// else the holder of the game's identity, if any.
async fn target_of(
    tx: &Transaction<'_>,
    game: &GameRecord,
    source: &str,
    external_id: &str,
    replace: Option<&GameRef>,
) -> Result<Option<Located>, Error> {
    let mut holder = holder_of(tx, source, external_id).await?;
    // Stored by a version before the v2 digest: found by its old one, as an
    // import finds it, and re-keyed by the put rather than stored twice.
    if holder.is_none()
        && let [Some((id, _))] = legacy_holders(tx, &[game])
            .await
            .map_err(db_err("looking up the game's legacy identity"))?[..]
    {
        holder = locate(tx, &GameRef::Id(id)).await?;
    }
    let Some(named) = replace else {
        return Ok(holder);
    };
    let target = locate(tx, named).await?.ok_or_else(|| {
        Error::Request(format!(
            "no game {named} in the database: nothing to replace"
        ))
    })?;
    if let Some(holder) = holder.filter(|h| h.id != target.id) {
        return Err(Error::Conflict(format!(
            "the game put is already stored as game {} ({}:{}), not as game {named}; \
             replace game {} instead, or delete one of them first",
            holder.id, holder.source, holder.external_id, holder.id
        )));
    }
    Ok(Some(target))
}

/// The stored game with the identity of a game keyed `(source,
/// external_id)`, as an import recognizes it (see
/// `writer::existing`): a Lichess game by its id, any other by its content
/// digest whatever its label (the same label first). Locked `FOR UPDATE`.
async fn holder_of(
    tx: &Transaction<'_>,
    source: &str,
    external_id: &str,
) -> Result<Option<Located>, Error> {
    if source == "lichess" {
        return locate(
            tx,
            &GameRef::Key {
                source: source.to_owned(),
                external_id: external_id.to_owned(),
            },
        )
        .await;
    }
    let row = tx
        .query_opt(
            "SELECT id, source, external_id FROM games
             WHERE source <> 'lichess' AND external_id = $1
             ORDER BY source = $2 DESC, id LIMIT 1 FOR UPDATE",
            &[&external_id, &source],
        )
        .await
        .map_err(db_err("looking up the game's identity"))?;
    Ok(row.map(|row| Located {
        id: row.get(0),
        source: row.get(1),
        external_id: row.get(2),
    }))
}
