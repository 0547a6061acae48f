//! Players and events of a batch's new games, get-or-created through
//! staging tables in both modes (they are few, and their unique keys stay
//! during a bulk load), so that games refer to them by id.
//!
//! It must not write games or positions: it only returns the ids of the
//! rows games refer to.

use std::collections::HashMap;

use tokio_postgres::Transaction;

use super::{
    TableRow,
    copy::{WriteError, copy_rows},
    games::NewGame,
    rows::{EventRow, PlayerRow},
};
use crate::chess::{model::username_key, replay::GameRecord};

pub(super) fn event_key<'a>(game: &'a GameRecord, name: &'a str) -> &'a str {
    game.meta
        .event_ref
        .as_ref()
        .map_or(name, |e| e.external_id.as_str())
}

pub(super) async fn get_or_create_players<'a>(
    tx: &Transaction<'_>,
    games: &[NewGame<'a>],
) -> Result<HashMap<(&'a str, String), i64>, WriteError> {
    let mut rows: HashMap<(&str, String), PlayerRow<'a>> = HashMap::new();
    for new in games {
        for side in [&new.game.meta.white, &new.game.meta.black] {
            let Some(name) = side.name.as_deref() else {
                continue;
            };
            let key = username_key(new.source, name);
            rows.entry((new.source, key.clone()))
                .or_insert_with(|| PlayerRow {
                    source: new.source,
                    username: name,
                    username_key: key,
                    title: side.title.as_deref(),
                    is_bot: side.is_bot(),
                });
        }
    }
    let rows: Vec<PlayerRow<'a>> = rows.into_values().collect();
    let columns = PlayerRow::columns_except(&[]);
    staged_get_or_create(
        tx,
        &rows,
        StagedSql {
            copy: PlayerRow::copy_into("stage_players"),
            insert: format!(
                "INSERT INTO players ({columns}) SELECT {columns}
                 FROM stage_players ORDER BY source, username_key
                 ON CONFLICT (source, username_key) DO UPDATE
                     SET title = COALESCE(EXCLUDED.title, players.title),
                         is_bot = players.is_bot OR EXCLUDED.is_bot,
                         updated_at = now()
                     WHERE (EXCLUDED.title IS NOT NULL AND players.title IS DISTINCT FROM EXCLUDED.title)
                        OR (EXCLUDED.is_bot AND NOT players.is_bot)"
            ),
            select: "SELECT p.id, p.source, p.username_key AS key FROM stage_players s
                 JOIN players p ON p.source = s.source AND p.username_key = s.username_key",
        },
        games,
    )
    .await
}

/// The statements of a staged get-or-create.
struct StagedSql {
    /// `COPY` into the staging table.
    copy: String,
    /// Inserts the staged rows that are new (`ON CONFLICT`).
    insert: String,
    /// Reads back `id`, `source` and `key` for every staged row.
    select: &'static str,
}

/// Players and events: the rows are `COPY`ed into their staging table,
/// the new ones inserted, and every id read back, keyed by `(source, key)`.
async fn staged_get_or_create<'a, const N: usize, R: TableRow<N> + Sync>(
    tx: &Transaction<'_>,
    rows: &[R],
    sql: StagedSql,
    games: &[NewGame<'a>],
) -> Result<HashMap<(&'a str, String), i64>, WriteError> {
    let mut ids = HashMap::with_capacity(rows.len());
    if rows.is_empty() {
        return Ok(ids);
    }
    copy_rows(tx, &sql.copy, rows).await?;
    tx.execute(&sql.insert, &[]).await?;
    let found = tx.query(sql.select, &[]).await?;
    collect_ids(&mut ids, found, games);
    Ok(ids)
}

/// Maps `id`, `source`, `key` rows back to `(source, key) → id`, with the
/// source borrowed from the batch so the map outlives the rows.
fn collect_ids<'a>(
    ids: &mut HashMap<(&'a str, String), i64>,
    rows: Vec<tokio_postgres::Row>,
    games: &[NewGame<'a>],
) {
    let sources: HashMap<&str, &'a str> = games.iter().map(|g| (g.source, g.source)).collect();
    for row in rows {
        let source: &str = row.get("source");
        if let Some(&source) = sources.get(source) {
            ids.insert((source, row.get::<_, String>("key")), row.get("id"));
        }
    }
}

pub(super) async fn get_or_create_events<'a>(
    tx: &Transaction<'_>,
    games: &[NewGame<'a>],
) -> Result<HashMap<(&'a str, String), i64>, WriteError> {
    let mut rows: HashMap<(&str, &str), EventRow<'a>> = HashMap::new();
    for new in games {
        let Some(name) = new.game.meta.event.as_deref() else {
            continue;
        };
        let key = event_key(new.game, name);
        let event_ref = new.game.meta.event_ref.as_ref();
        rows.entry((new.source, key)).or_insert_with(|| EventRow {
            source: new.source,
            event_key: key,
            external_id: event_ref.map(|e| e.external_id.as_str()),
            name,
            kind: event_ref.map(|e| e.kind),
        });
    }
    let rows: Vec<EventRow<'a>> = rows.into_values().collect();
    let columns = EventRow::columns_except(&[]);
    staged_get_or_create(
        tx,
        &rows,
        StagedSql {
            copy: EventRow::copy_into("stage_events"),
            insert: format!(
                "INSERT INTO events ({columns}) SELECT {columns}
                 FROM stage_events ORDER BY source, event_key
                 ON CONFLICT (source, event_key) DO NOTHING"
            ),
            select: "SELECT e.id, e.source, e.event_key AS key FROM stage_events s
                 JOIN events e ON e.source = s.source AND e.event_key = s.event_key",
        },
        games,
    )
    .await
}
