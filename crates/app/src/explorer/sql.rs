//! Every SQL text of the explorer counters, each a complete statement
//! fixed at compile time: the pieces they share (the key, the counts, how
//! a view's rows are counted, how two rows' best games merge) are written
//! once as macros and joined by `concat!`, so the import, `explore`, the
//! recount and the admin commands cannot count apart, and no text is
//! rewritten at run time. (Only a sharded layout's shard expression and
//! per-shard table names are known at run time: [`insert_by_shard`] and
//! [`compact_shard`] put them into otherwise complete texts.)
//!
//! What a game contributes is defined by the view `explorer_game_moves` of
//! `sql/0004_explorer.sql` (its categories and the move of its last visit
//! to each position); [`super::Counts`] is the same arithmetic in Rust.

/// A list of [`counter_columns!`] as SQL text: the names, comma-separated,
/// each after `$alias.` if an alias is given.
macro_rules! names {
    (() $first:ident : $_ty:ident = $_value:tt $(, $name:ident : $ty:ident = $value:tt)* $(,)?) => {
        concat!(stringify!($first) $(, ", ", stringify!($name))*)
    };
    (($alias:literal) $first:ident : $_ty:ident = $_value:tt
        $(, $name:ident : $ty:ident = $value:tt)* $(,)?) => {
        concat!($alias, ".", stringify!($first) $(, ", ", $alias, ".", stringify!($name))*)
    };
}

/// The `$part` (`key`, `counts` or `anchor`) of [`counter_columns!`], as
/// [`names!`] with `$alias`.
macro_rules! part {
    (key $alias:tt key [$($key:tt)*] counts $_counts:tt anchor $_anchor:tt) => {
        names!($alias $($key)*)
    };
    (counts $alias:tt key $_key:tt counts [$($counts:tt)*] anchor $_anchor:tt) => {
        names!($alias $($counts)*)
    };
    (anchor $alias:tt key $_key:tt counts $_counts:tt anchor [$($anchor:tt)*]) => {
        names!($alias $($anchor)*)
    };
}

/// The key columns of a counter row, in primary-key order.
macro_rules! key {
    () => {
        counter_columns!(part!(key()))
    };
}

/// The value columns of a counter row, in the order every text gives them.
macro_rules! counts {
    () => {
        counter_columns!(part!(counts()))
    };
}

/// The column of a sharded layout's counter row that anchors it on a
/// game of its shard.
macro_rules! anchor {
    () => {
        counter_columns!(part!(anchor()))
    };
}

/// How many of its most recent listable games a row lists, as SQL
/// text: the one definition of [`super::LISTED_PER_ROW`].
macro_rules! listed_per_row {
    () => {
        "8"
    };
}

/// The games `explore` lists (top games, recent games, a move's only
/// game) have every field a Lichess explorer game has: a result, both
/// ratings, a date (conditions on `explorer_games` and the views read
/// from it).
macro_rules! listable {
    () => {
        "result IS NOT NULL AND rating_sum IS NOT NULL AND month >= 0"
    };
}

/// The counts of the view's rows in one group: [`counts!`]. (Counts are
/// cast to `integer`: a count past it is an error, never a clamp.) The
/// rating summed is the view's `mover_rating`, the rating of the player
/// who played the move (Lichess's `averageRating`); the games listed are
/// the [`listed_per_row!`] most recent of the [`listable!`] ones.
macro_rules! counted {
    () => {
        concat!(
            "count(*)::integer AS games, (count(*) FILTER (WHERE result = 1))::integer AS white, \
             (count(*) FILTER (WHERE result = 0))::integer AS draws, \
             (count(*) FILTER (WHERE result = -1))::integer AS black, \
             count(mover_rating)::integer AS mover_rated_games, \
             coalesce(sum(mover_rating), 0)::bigint AS mover_rating_sum, \
             max(started_at) AS last_played, ",
            listed_of!("game_id", "listed_game_ids"),
            ", ",
            listed_of!("started_at", "listed_game_started"),
            ", ",
            listed_of!("rating_sum", "listed_game_ratings")
        )
    };
}

/// `$value` of the view's [`listable!`] games of a group, the
/// [`listed_per_row!`] most recent first, as the column `$column`.
macro_rules! listed_of {
    ($value:tt, $column:tt) => {
        concat!(
            "(array_agg(",
            $value,
            " ORDER BY started_at DESC, game_id DESC) FILTER (WHERE ",
            listable!(),
            "))[1:",
            listed_per_row!(),
            "] AS ",
            $column
        )
    };
}

/// The counters of the view's rows matching `$filter` (a condition on
/// `game_id` or `position_id`, which reach the moves indexes), grouped by
/// key: [`key!`] then [`counts!`].
macro_rules! grouped {
    ($filter:tt) => {
        concat!(
            "SELECT ",
            key!(),
            ", ",
            counted!(),
            " FROM explorer_game_moves WHERE ",
            $filter,
            " GROUP BY ",
            key!()
        )
    };
}

/// [`grouped!`] restricted to the positions that two games or more
/// reached: what a single node keeps rows for (the others are counted
/// from the view when asked), inserted into `explorer_moves`.
macro_rules! insert_shared {
    ($filter:tt) => {
        concat!(
            "INSERT INTO explorer_moves (",
            key!(),
            ", ",
            counts!(),
            ") SELECT ",
            key!(),
            ", ",
            counts!(),
            " FROM (SELECT *, sum(games) OVER (PARTITION BY position_id) AS position_games \
                    FROM (",
            grouped!($filter),
            ") g) s WHERE position_games >= 2"
        )
    };
}

/// The rows of a sharded layout's counters (`$rows`, a `FROM` item with
/// their columns) folded into one per key: [`key!`], [`counts!`] (summed;
/// the games listed, the most recent of the rows' lists together), then
/// `$anchor` (the anchor column selected, if any) computed by
/// `$min_anchor`.
macro_rules! folded {
    ($rows:tt, $anchor:tt, $min_anchor:tt) => {
        concat!(
            "SELECT ",
            key!(),
            ", s.games, s.white, s.draws, s.black, s.mover_rated_games, s.mover_rating_sum, \
               s.last_played, t.listed_game_ids, t.listed_game_started, t.listed_game_ratings",
            $anchor,
            " FROM (SELECT ",
            key!(),
            ", sum(games)::integer AS games, sum(white)::integer AS white, \
               sum(draws)::integer AS draws, sum(black)::integer AS black, \
               sum(mover_rated_games)::integer AS mover_rated_games, \
               sum(mover_rating_sum)::bigint AS mover_rating_sum, \
               max(last_played) AS last_played",
            $min_anchor,
            " FROM ",
            $rows,
            " GROUP BY ",
            key!(),
            ") s LEFT JOIN (SELECT ",
            key!(),
            ", (array_agg(g ORDER BY s DESC, g DESC))[1:",
            listed_per_row!(),
            "] AS listed_game_ids, (array_agg(s ORDER BY s DESC, g DESC))[1:",
            listed_per_row!(),
            "] AS listed_game_started, (array_agg(r ORDER BY s DESC, g DESC))[1:",
            listed_per_row!(),
            "] AS listed_game_ratings FROM ",
            $rows,
            " f, unnest(f.listed_game_ids, f.listed_game_started, f.listed_game_ratings) \
               AS t(g, s, r) GROUP BY ",
            key!(),
            ") t USING (",
            key!(),
            ")"
        )
    };
}

/// The upsert's value of `$column` (one of the three lists, `$pick`
/// naming it in the subquery: `g`, `s` or `r`) when a row's listed games
/// (`explorer_moves`) meet a batch's (`excluded`): the [`listed_per_row!`]
/// most recent of both. Both lists are sorted, so when one's oldest game
/// is more recent than the other's newest (mostly: a batch of games
/// played after the row's), they are concatenated; otherwise sorted by a
/// subquery, written inline (`sql/0015_explorer_inline_top_games.sql`
/// says why). A game is compared as (started, id): a larger one is listed
/// first.
macro_rules! merged_listed {
    ($column:tt, $pick:tt) => {
        concat!(
            "CASE WHEN excluded.listed_game_ids IS NULL THEN explorer_moves.",
            $column,
            " WHEN explorer_moves.listed_game_ids IS NULL THEN excluded.",
            $column,
            " WHEN (excluded.listed_game_started[1], excluded.listed_game_ids[1]) \
                 < (explorer_moves.listed_game_started[cardinality(explorer_moves.listed_game_ids)], \
                    explorer_moves.listed_game_ids[cardinality(explorer_moves.listed_game_ids)]) \
               THEN (explorer_moves.",
            $column,
            " || excluded.",
            $column,
            ")[1:",
            listed_per_row!(),
            "] WHEN (explorer_moves.listed_game_started[1], explorer_moves.listed_game_ids[1]) \
                 < (excluded.listed_game_started[cardinality(excluded.listed_game_ids)], \
                    excluded.listed_game_ids[cardinality(excluded.listed_game_ids)]) \
               THEN (excluded.",
            $column,
            " || explorer_moves.",
            $column,
            ")[1:",
            listed_per_row!(),
            "] ELSE (SELECT array_agg(",
            $pick,
            " ORDER BY s DESC, g DESC) \
               FROM (SELECT g, s, r \
                     FROM unnest(explorer_moves.listed_game_ids || excluded.listed_game_ids, \
                                 explorer_moves.listed_game_started || excluded.listed_game_started, \
                                 explorer_moves.listed_game_ratings || excluded.listed_game_ratings) \
                       AS u(g, s, r) \
                     ORDER BY s DESC, g DESC LIMIT ",
            listed_per_row!(),
            ") t) END"
        )
    };
}

/// The key columns of a counter row, in primary-key order.
pub const KEY: &str = key!();

/// The value columns of a counter row.
pub const COUNTS: &str = counts!();

/// A decimal literal of these texts as a number (checked at compile time).
const fn decimal(text: &str) -> u32 {
    let digits = text.as_bytes();
    let mut value = 0u32;
    let mut at = 0;
    while at < digits.len() {
        assert!(digits[at].is_ascii_digit(), "a decimal number");
        value = value * 10 + (digits[at] - b'0') as u32;
        at += 1;
    }
    value
}

/// [`listed_per_row!`] as a number.
pub(super) const LISTED_PER_ROW: usize = decimal(listed_per_row!()) as usize;

// Counting (a batch of the import).

/// The `COPY` of a batch's counter rows into the connection's
/// `stage_explorer` (`crate::ingest::writer::prepare_connection` creates
/// it), anchors included: `key!`, `counts!`, `anchor!`.
pub const COPY_STAGE: &str = concat!(
    "COPY stage_explorer (",
    key!(),
    ", ",
    counts!(),
    ", ",
    anchor!(),
    ") FROM STDIN (FORMAT binary)"
);

/// The `COPY` of counter rows without anchors straight into a single
/// node's `explorer_moves` (the first rows of their positions).
pub const COPY_NEW_ROWS: &str = concat!(
    "COPY explorer_moves (",
    key!(),
    ", ",
    counts!(),
    ") FROM STDIN (FORMAT binary)"
);

/// Adds the staged rows to a single node's `explorer_moves`, in key order
/// (so that concurrent importers lock rows in the same order): counts
/// summed, `last_played` the later, the listed games of both merged
/// (`merged_listed!`). The SQL twin of [`super::Counts::merge`].
pub const ADD_STAGED: &str = concat!(
    "INSERT INTO explorer_moves (",
    key!(),
    ", ",
    counts!(),
    ") SELECT * FROM (SELECT ",
    key!(),
    ", ",
    counts!(),
    " FROM stage_explorer ORDER BY ",
    key!(),
    ") d ON CONFLICT (",
    key!(),
    ") DO UPDATE SET \
       games = explorer_moves.games + excluded.games, \
       white = explorer_moves.white + excluded.white, \
       draws = explorer_moves.draws + excluded.draws, \
       black = explorer_moves.black + excluded.black, \
       mover_rated_games = explorer_moves.mover_rated_games + excluded.mover_rated_games, \
       mover_rating_sum = explorer_moves.mover_rating_sum + excluded.mover_rating_sum, \
       last_played = greatest(explorer_moves.last_played, excluded.last_played), \
       listed_game_ids = ",
    merged_listed!("listed_game_ids", "g"),
    ", listed_game_started = ",
    merged_listed!("listed_game_started", "s"),
    ", listed_game_ratings = ",
    merged_listed!("listed_game_ratings", "r")
);

/// Adds the staged rows to a sharded layout's `explorer_moves` as rows of
/// their own, never updating one (no row of another importer to wait for).
pub const INSERT_STAGED_SHARDED: &str = concat!(
    "INSERT INTO explorer_moves (",
    key!(),
    ", ",
    counts!(),
    ", ",
    anchor!(),
    ") SELECT ",
    key!(),
    ", ",
    counts!(),
    ", ",
    anchor!(),
    " FROM stage_explorer"
);

/// Each game `$1` (an array of ids) with its shard on a sharded layout
/// (`shard_of_id`, an expression of `id` from
/// [`crate::store::shards::Shards::shard_of`]).
pub fn shards_of_games(shard_of_id: &str) -> String {
    format!("SELECT id, {shard_of_id} FROM unnest($1::bigint[]) AS id")
}

/// Queues the positions a bulk load merged duplicates into
/// (`pgnload_position_remap`'s `keep_id`s) for a recount.
pub const QUEUE_MERGED: &str = "INSERT INTO explorer_pending (position_id) \
     SELECT DISTINCT keep_id FROM pgnload_position_remap ORDER BY keep_id \
     ON CONFLICT DO NOTHING";

/// Drops the rows of the positions a bulk load merged, both the
/// duplicates and the position kept.
pub const DELETE_MERGED: &str = "DELETE FROM explorer_moves e USING pgnload_position_remap r \
     WHERE e.position_id = r.old_id OR e.position_id = r.keep_id";

// Counting from the view (admin, recount, removal).

/// Counts every game into a single node's `explorer_moves`: the rows of
/// the positions two games or more reached.
pub const INSERT_SHARED_ALL: &str = insert_shared!("true");

/// Builds a single node's primary key of `explorer_moves` again, after
/// [`INSERT_SHARED_ALL`] filled the table without it.
pub const ADD_PRIMARY_KEY: &str = concat!(
    "ALTER TABLE explorer_moves ADD CONSTRAINT explorer_moves_pkey PRIMARY KEY (",
    key!(),
    ")"
);

/// Counts the positions `$1` (an array) into a single node's
/// `explorer_moves`, those two games or more reached.
pub const INSERT_SHARED_OF_POSITIONS: &str = insert_shared!("position_id = ANY($1)");

/// Counts every game into a sharded layout's `explorer_moves`: per shard
/// of the games counted (`shard_of_game`, an expression of `game_id` from
/// [`crate::store::shards::Shards::shard_of`]), with the lowest of their
/// ids as each row's `anchor_game_id` (a sharded layout's counters live on
/// the shard of the games they count).
pub fn insert_by_shard(shard_of_game: &str) -> String {
    format!(
        concat!(
            "INSERT INTO explorer_moves (",
            key!(),
            ", ",
            counts!(),
            ", ",
            anchor!(),
            ") SELECT ",
            key!(),
            ", ",
            counted!(),
            ", min(game_id) AS anchor_game_id FROM explorer_game_moves GROUP BY {shard}, ",
            key!()
        ),
        shard = shard_of_game
    )
}

/// Folds the counter rows of `table` (a shard's part of a sharded
/// `explorer_moves`, or any table of its columns) into one per key, in
/// place: its rows deleted and their sums inserted back, anchored on the
/// lowest of their anchors. The SQL twin of [`super::Counts::merge`] for
/// rows of one key.
pub fn compact_shard(table: &str) -> String {
    format!(
        concat!(
            "WITH d AS (DELETE FROM {table} RETURNING *) INSERT INTO {table} (",
            key!(),
            ", ",
            counts!(),
            ", ",
            anchor!(),
            ") ",
            folded!(
                "d",
                ", s.anchor_game_id",
                ", min(anchor_game_id) AS anchor_game_id"
            )
        ),
        table = table
    )
}

/// Counts the games `$1` (an array) into the temporary table
/// `explorer_delta`, for their removal.
pub const CREATE_DELTA: &str = concat!(
    "CREATE TEMP TABLE explorer_delta ON COMMIT DROP AS ",
    grouped!("game_id = ANY($1)")
);

/// Takes `explorer_delta` out of the rows it counts in: a row left at zero
/// games keeps no `last_played` nor best games.
pub const DECREMENT: &str = "UPDATE explorer_moves e SET games = e.games - d.games, \
       white = e.white - d.white, draws = e.draws - d.draws, black = e.black - d.black, \
       mover_rated_games = e.mover_rated_games - d.mover_rated_games, \
       mover_rating_sum = e.mover_rating_sum - d.mover_rating_sum, \
       last_played = CASE WHEN e.games = d.games THEN NULL ELSE e.last_played END, \
       listed_game_ids = CASE WHEN e.games = d.games THEN NULL ELSE e.listed_game_ids END, \
       listed_game_started = CASE WHEN e.games = d.games THEN NULL ELSE e.listed_game_started END, \
       listed_game_ratings = CASE WHEN e.games = d.games THEN NULL ELSE e.listed_game_ratings END \
     FROM explorer_delta d \
     WHERE e.position_id = d.position_id AND e.variant = d.variant AND e.speed = d.speed \
       AND e.rating_group = d.rating_group AND e.month = d.month AND e.move = d.move";

/// Recomputes `last_played` and the listed games of the rows of
/// `explorer_delta` that a removed game (`$1`) was the latest of or
/// listed, from the other games of their positions.
pub const RECOMPUTE_AFTER_REMOVAL: &str = concat!(
    "UPDATE explorer_moves e SET last_played = o.last_played, \
       listed_game_ids = o.listed_game_ids, listed_game_started = o.listed_game_started, \
       listed_game_ratings = o.listed_game_ratings \
     FROM explorer_delta d, (",
    grouped!("position_id IN (SELECT position_id FROM explorer_delta) AND game_id <> ALL($1)"),
    ") o \
     WHERE e.position_id = d.position_id AND e.variant = d.variant AND e.speed = d.speed \
       AND e.rating_group = d.rating_group AND e.month = d.month AND e.move = d.move \
       AND e.games > 0 \
       AND (e.last_played IS NOT DISTINCT FROM d.last_played OR e.listed_game_ids && $1) \
       AND o.position_id = e.position_id AND o.variant = e.variant AND o.speed = e.speed \
       AND o.rating_group = e.rating_group AND o.month = e.month AND o.move = e.move"
);

// The recount (`verify --explorer`).

/// The counts of a row aliased `$alias`, as a row value to compare.
macro_rules! row_counts {
    ($alias:tt) => {
        counter_columns!(part!(counts($alias)))
    };
}

/// The counts of a row aliased `$alias` as the report's text, `NULL` when
/// the row is missing: each as [`value_text!`], space-separated.
macro_rules! row_text {
    ($alias:tt) => {
        counter_columns!(counts_text!($alias))
    };
}

/// [`row_text!`] of the counts of [`counter_columns!`].
macro_rules! counts_text {
    ($alias:literal key $_key:tt counts [
        $first:ident : $first_ty:ident = $_value:tt $(, $name:ident : $ty:ident = $value:tt)* $(,)?
    ] anchor $_anchor:tt) => {
        concat!(
            "CASE WHEN ",
            $alias,
            ".",
            stringify!($first),
            " IS NOT NULL THEN concat_ws(' ', ",
            value_text!($first_ty, $alias, $first)
            $(, ", ", value_text!($ty, $alias, $name))*,
            ") END"
        )
    };
}

/// The column `$alias.$name` of binary type `$ty` as the report's text: a
/// time in UTC to the microsecond, an array comma-separated, `-` for
/// `NULL`; a number as itself.
macro_rules! value_text {
    (TIMESTAMPTZ, $alias:literal, $name:ident) => {
        concat!(
            "coalesce(to_char(",
            $alias,
            ".",
            stringify!($name),
            " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), '-')"
        )
    };
    (TIMESTAMPTZ_ARRAY, $alias:literal, $name:ident) => {
        concat!(
            "coalesce((SELECT string_agg(to_char(t AT TIME ZONE 'UTC', \
                                                 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), ',' ORDER BY o) \
                       FROM unnest(",
            $alias,
            ".",
            stringify!($name),
            ") WITH ORDINALITY AS u(t, o)), '-')"
        )
    };
    (INT8_ARRAY, $alias:literal, $name:ident) => {
        concat!(
            "coalesce(array_to_string(",
            $alias,
            ".",
            stringify!($name),
            ", ','), '-')"
        )
    };
    ($number:ident, $alias:literal, $name:ident) => {
        concat!($alias, ".", stringify!($name))
    };
}

/// The recount compared with the stored rows (`$stored`, a `FROM` item):
/// what must be stored is the recount of every position that has rows,
/// and of every one two games reached that is not queued. `$1`: how many
/// differences to return; each row also has the total.
macro_rules! recount {
    ($($stored:tt)+) => {
        concat!(
            "WITH all_counts AS ( \
                 SELECT *, sum(games) OVER (PARTITION BY position_id) AS position_games \
                 FROM (",
            grouped!("true"),
            ") g \
             ), r AS ( \
                 SELECT ",
            key!(),
            ", ",
            counts!(),
            " FROM all_counts \
                 WHERE position_id NOT IN (SELECT position_id FROM explorer_pending) \
                   AND (position_games >= 2 \
                        OR position_id IN (SELECT position_id FROM explorer_moves)) \
             ), diff AS ( \
                 SELECT concat_ws(' ', ",
            key!(),
            ") AS key, ",
            row_text!("e"),
            " AS stored, ",
            row_text!("r"),
            " AS expected FROM ",
            $($stored)+,
            " e FULL JOIN r USING (",
            key!(),
            ") WHERE (",
            row_counts!("e"),
            ") IS DISTINCT FROM (",
            row_counts!("r"),
            ")) SELECT key, stored, expected, count(*) OVER () FROM diff ORDER BY key LIMIT $1"
        )
    };
}

/// `recount!` on a single node: the rows of positions not queued. Rows
/// left at zero games by a removal count nothing.
pub const RECOUNT_SINGLE: &str = recount!(
    "(SELECT * FROM explorer_moves WHERE games > 0 \
      AND position_id NOT IN (SELECT position_id FROM explorer_pending))"
);

/// `recount!` on a sharded layout, whose counters are added rows: a
/// key's rows folded into one.
pub const RECOUNT_SHARDED: &str = recount!(concat!(
    "(SELECT * FROM (",
    folded!("explorer_moves", "", ""),
    ") f WHERE games > 0)"
));

// The answers of `explore`.

/// How many games a bulk load has not counted yet: the games of
/// `explorer_deferred`'s runs.
macro_rules! uncounted {
    () => {
        "SELECT coalesce(sum(last_game_id - first_game_id + 1), 0)::bigint FROM explorer_deferred"
    };
}

/// [`uncounted!`]: the counters are usable when it is 0.
pub const UNCOUNTED: &str = uncounted!();

/// How many counter rows a position has at most to be answered from its
/// rows read whole ([`POSITION_ROWS`]) rather than grouped by the database
/// ([`MOVES_FROM_ROWS`]) and then its lists read.
macro_rules! few_rows {
    () => {
        "64"
    };
}

/// The unfinished bulk load's id (NULL: none), as
/// `ingest::bulk::unfinished` reads it (at most one row:
/// `import_bulk_loads_one_open`).
macro_rules! bulk_load {
    () => {
        "SELECT id FROM import_bulk_loads WHERE state <> 'done'"
    };
}

/// What `explore` asks first, in one round trip: whether the counters are
/// kept (`explorer_state.enabled`, NULL without its row), how many games a
/// bulk load has not counted ([`UNCOUNTED`]) and the unfinished bulk
/// load ([`bulk_load!`]); then the position of normalized FEN `$1` (NULL:
/// no game reached it), whether it is answered from its rows (it has rows
/// and is not queued for a recount: a position has no rows while one game
/// reached it, and is queued until its rows are complete, see
/// `sql/0012_explorer_shared_positions.sql`), and whether it has more than
/// [`few_rows!`] rows (counted from its key's index as far as that).
///
/// The position is not looked up while a bulk load is unfinished: its
/// tables then have no indexes (the lookup would read all of `positions`)
/// and a position may be there twice (two rows where one is expected).
/// The condition, in the subquery on `positions`, reads none of its
/// columns, so PostgreSQL checks it once and reads nothing of `positions`
/// when it fails (a one-time filter above the scan; in the join's own
/// condition it would be checked after the scan, per row).
pub const FIND_POSITION: &str = concat!(
    "SELECT (SELECT enabled FROM explorer_state), (",
    uncounted!(),
    "), (",
    bulk_load!(),
    "), p.id, EXISTS (SELECT 1 FROM explorer_moves WHERE position_id = p.id) \
       AND NOT EXISTS (SELECT 1 FROM explorer_pending WHERE position_id = p.id), \
       (SELECT count(*) FROM (SELECT 1 FROM explorer_moves WHERE position_id = p.id \
                              LIMIT ",
    few_rows!(),
    " + 1) r) > ",
    few_rows!(),
    " FROM (SELECT 1) AS one LEFT JOIN (SELECT id FROM positions \
       WHERE normalized_fen = $1 AND (",
    bulk_load!(),
    ") IS NULL) p ON true"
);

/// The conditions of a request's filter on the counters' categories, for
/// `explorer_moves` and for the views that define them
/// (`explorer_game_moves`, `explorer_games`): `$1` is the position, `$2`
/// to `$6` the variant, speeds, rating groups, first and last month.
macro_rules! conditions {
    () => {
        "variant = $2::text::game_variant \
         AND ($3::smallint[] IS NULL OR speed = ANY($3)) \
         AND ($4::smallint[] IS NULL OR rating_group = ANY($4)) \
         AND ($5::integer IS NULL OR month >= $5) \
         AND ($6::integer IS NULL OR month BETWEEN 0 AND $6)"
    };
}

/// A position's counts read from its rows in `explorer_moves`.
macro_rules! from_rows {
    () => {
        "explorer_moves"
    };
}

/// A position's counts grouped from its games as the import counts them.
macro_rules! from_games {
    () => {
        concat!("(", grouped!("position_id = $1"), ")")
    };
}

/// Position `$1`'s counts under the filter, from `$counts`, in one read
/// of its rows: per move (speed and rating group NULL) the move, games,
/// white, draws, black, games with the mover rated, the movers' ratings
/// added, the most played first; and per speed and rating group (move
/// NULL) the games `explore` can list (see [`listable!`]): in a row of a
/// rating group and a month, every game has both ratings and a date, so
/// those with a result are the listable ones, and how many rows can list
/// them. What prices and bounds the walks of the top and recent games,
/// and the read of the rows' lists, comes with the moves, without a
/// second read of the same rows.
macro_rules! moves_and_classes {
    ($($counts:tt)+) => {
        concat!(
            "SELECT move, speed, rating_group, sum(games)::bigint, sum(white)::bigint, \
                    sum(draws)::bigint, sum(black)::bigint, sum(mover_rated_games)::bigint, \
                    sum(mover_rating_sum)::bigint, \
                    coalesce(sum(white + draws + black) \
                      FILTER (WHERE rating_group >= 0 AND month >= 0), 0)::bigint, \
                    count(*) FILTER (WHERE rating_group >= 0 AND month >= 0) \
             FROM ",
            $($counts)+,
            " c WHERE position_id = $1 AND ",
            conditions!(),
            " GROUP BY GROUPING SETS ((move), (speed, rating_group)) \
             HAVING CASE WHEN GROUPING(move) = 0 THEN sum(games) > 0 \
                         ELSE sum(white + draws + black) \
                                FILTER (WHERE rating_group >= 0 AND month >= 0) > 0 END \
             ORDER BY 4 DESC, move"
        )
    };
}

/// `moves_and_classes!` from the position's rows.
pub const MOVES_FROM_ROWS: &str = moves_and_classes!(from_rows!());
/// `moves_and_classes!` from the position's games.
pub const MOVES_FROM_GAMES: &str = moves_and_classes!(from_games!());

/// Lichess ranks a top game of an average of this or more in the band
/// [`top_band!`] (its 2800 band is never chosen: those games land in its
/// 3200 one), above the 2500 rating group our counters end with. A
/// literal, as in `games_top_idx` (`sql/0024_explorer_top_games_order.sql`).
macro_rules! top_band_floor {
    () => {
        "2800"
    };
}

/// [`top_band_floor!`] as a number.
pub(super) const TOP_BAND_FLOOR: u32 = decimal(top_band_floor!());

/// The band of the games of [`top_band_floor!`] or more.
macro_rules! top_band {
    () => {
        "3200"
    };
}

/// [`top_band!`] as a number.
pub(super) const TOP_BAND: u32 = decimal(top_band!());

/// The lowest sum of both ratings of a top game: twice the lowest band
/// that holds top games (2000). A literal: the condition of
/// `games_top_idx`, which a walk states to be allowed to read it.
macro_rules! top_rating_sum_floor {
    () => {
        "4000"
    };
}

/// The order of the top games, Lichess's: by the distance of the game's
/// rating band below the best rating of its speed (`$9`, indexed by speed
/// code + 1); then the most recent first.
macro_rules! top_order {
    () => {
        concat!(
            "($9::integer[])[speed + 1] - CASE WHEN average >= ",
            top_band_floor!(),
            " THEN ",
            top_band!(),
            " ELSE rating_group END, started_at DESC, game_id DESC"
        )
    };
}

/// The games of a scan: those with a moves row at position `$1`, from the
/// index alone (`moves_position_game_idx`). Not `explorer_game_moves`,
/// whose move of the game's last visit reads every moves row from the
/// table to sort the visits (at a million games, 80 of a scan's 140 ms),
/// where a scan needs only which games reached the position.
macro_rules! reaching {
    () => {
        "e.game_id IN (SELECT m.game_id FROM moves m WHERE m.position_id = $1)"
    };
}

/// The probe of a walk: whether the game has a moves row at position
/// `$1`. A subquery (not EXISTS, which the planner may turn into a join
/// driven by the position's moves rows, the very read a walk avoids): one
/// lookup of moves (`position_id`, `game_id`), from the index alone
/// (`sql/0014_moves_position_game.sql`).
macro_rules! reached {
    () => {
        "(SELECT 1 FROM moves m WHERE m.position_id = $1 AND m.game_id = e.game_id LIMIT 1) \
         IS NOT NULL"
    };
}

/// The `$7` first top games of position `$1` in [`top_order!`], among
/// its listable games of rating group `$8` or more: from its moves rows
/// ([`reaching!`]).
pub const TOP_SCAN: &str = concat!(
    "SELECT game_id FROM explorer_games e WHERE ",
    reaching!(),
    " AND rating_group >= $8 AND ",
    listable!(),
    " AND ",
    conditions!(),
    " ORDER BY ",
    top_order!(),
    " LIMIT $7"
);

/// [`TOP_SCAN`]'s games found by walking classes of games in Lichess's
/// order, keeping those that reached the position: the class of each
/// element of `$8` (speed), `$9` (rating group) and `$10` (whether the
/// average is [`top_band_floor!`] or more), the most recent first, until
/// `$11` games (its limit) reached it; then the classes' games by `$12`
/// (Lichess's rank of the class) and recency. Each class is one range of
/// `games_top_idx` (`sql/0024_explorer_top_games_order.sql`), whose
/// expressions these are: a walk passes only the games of the classes it
/// needs, as far as the games it needs.
pub const TOP_WALK: &str = concat!(
    "SELECT t.game_id FROM unnest($8::smallint[], $9::smallint[], $10::boolean[], \
                                  $11::bigint[], $12::integer[]) AS c(class_speed, class_group, class_above, class_limit, class_rank) \
     CROSS JOIN LATERAL (\
       SELECT e.game_id, e.started_at FROM explorer_games e \
       WHERE e.rating_sum >= ",
    top_rating_sum_floor!(),
    " AND e.speed = c.class_speed AND e.rating_group = c.class_group AND (e.average >= ",
    top_band_floor!(),
    ") = c.class_above AND ",
    listable!(),
    " AND ",
    conditions!(),
    " AND ",
    reached!(),
    " ORDER BY e.started_at DESC, e.game_id DESC LIMIT c.class_limit) t \
     ORDER BY c.class_rank, t.started_at DESC, t.game_id DESC LIMIT $7"
);

/// The `$7` most recent listable games of position `$1` but the games
/// `$8`: from its moves rows ([`reaching!`]).
pub const RECENT_SCAN: &str = concat!(
    "SELECT game_id FROM explorer_games e WHERE ",
    reaching!(),
    " AND ",
    listable!(),
    " AND ",
    conditions!(),
    " AND game_id <> ALL($8::bigint[]) ORDER BY started_at DESC NULLS LAST, game_id DESC LIMIT $7"
);

/// [`RECENT_SCAN`]'s games found by walking the games from the most
/// recent (`games_newest_idx`, whose order this is), keeping those that
/// reached the position.
pub const RECENT_WALK: &str = concat!(
    "SELECT game_id FROM explorer_games e WHERE ",
    listable!(),
    " AND ",
    conditions!(),
    " AND game_id <> ALL($8::bigint[]) AND ",
    reached!(),
    " ORDER BY started_at DESC NULLS LAST, game_id DESC LIMIT $7"
);

/// Position `$1`'s rows that the filter selects, whole: each row's
/// move, speed, rating group, month, games, white, draws, black, games
/// with the mover rated, the movers' ratings added, and its three lists
/// (ids, start times, ratings). What `explore` counts a position of few
/// rows from, and finds a position's top and recent games in when it has
/// few rows (`crate::explorer::answers::from_rows`).
pub const POSITION_ROWS: &str = concat!(
    "SELECT move, speed, rating_group, month, games, white, draws, black, \
            mover_rated_games, mover_rating_sum, \
            listed_game_ids, listed_game_started, listed_game_ratings \
     FROM explorer_moves WHERE position_id = $1 AND ",
    conditions!()
);

/// The moves `$7` of position `$1` and their games, listable ones from
/// the lists of the position's rows that the filter selects: where a move
/// has one game, the game.
pub const GAMES_OF_MOVES_FROM_ROWS: &str = concat!(
    "SELECT c.move, listed.game_id FROM explorer_moves c, \
       unnest(c.listed_game_ids) AS listed(game_id) \
     WHERE c.position_id = $1 AND c.move = ANY($7::smallint[]) AND ",
    conditions!()
);

/// [`GAMES_OF_MOVES_FROM_ROWS`] from the position's games.
pub const GAMES_OF_MOVES_FROM_GAMES: &str = concat!(
    "SELECT move, game_id FROM explorer_game_moves \
     WHERE position_id = $1 AND move = ANY($7::smallint[]) AND ",
    conditions!()
);

/// What a listed game shows, from `games g` (the month, the last of
/// [`listable!`], and the speed are computed by the caller, as the import
/// computes them: `crate::explorer::GameCounts`): id, source, external id,
/// result, white's name and rating, black's, the clock's initial time and
/// increment, the `Event` text, the start time. Lookups, not joins: joins
/// cost a millisecond of planning per call where a statement is planned
/// for its values.
macro_rules! listed_columns {
    () => {
        "g.id, g.source, g.external_id, g.result, \
         (SELECT username FROM players WHERE id = g.white_player_id), g.white_elo, \
         (SELECT username FROM players WHERE id = g.black_player_id), g.black_elo, \
         g.time_initial_s, g.time_increment_s, (SELECT name FROM events WHERE id = g.event_id), \
         g.started_at"
    };
}

/// The games `$1` that have a result and both ratings: their
/// [`listed_columns!`], and the move played at position `$2` (at its last
/// visit, as counted: `explorer_game_moves`) by those of them in `$3`
/// (the others' moves are known: a counter row's list gives its move), as
/// the two bytes of its code in `games.moves`, NULL if it did not reach
/// it. The move is looked up in `moves` (the views' plan would read every
/// moves row of the position).
pub const LISTED_GAMES: &str = concat!(
    "SELECT ",
    listed_columns!(),
    ", CASE WHEN g.id = ANY($3::bigint[]) THEN \
          substring(g.moves FROM 2 * (SELECT max(m.ply) FROM moves m \
                                      WHERE m.position_id = $2 AND m.game_id = g.id) - 1 FOR 2) \
        END \
     FROM games g \
     WHERE g.id = ANY($1::bigint[]) AND g.result IS NOT NULL \
       AND g.white_elo IS NOT NULL AND g.black_elo IS NOT NULL"
);

/// At most `$7` games of position `$1` under the filter, each with
/// everything an answer needs of it: its [`listed_columns!`], then the
/// move it played there (at its last visit, as counted), its mover's
/// rating, speed, rating group, and whether it is [`listable!`]. What a
/// position without counter rows (one game reached it, or it is queued
/// for a recount) is answered from in one statement, where its counts,
/// its lists and the games listed would take four.
pub const POSITION_GAMES: &str = concat!(
    "SELECT ",
    listed_columns!(),
    ", v.move, v.mover_rating, v.speed, v.rating_group, v.listable \
     FROM (SELECT game_id, move, mover_rating, speed, rating_group, (",
    listable!(),
    ") AS listable FROM explorer_game_moves WHERE position_id = $1 AND ",
    conditions!(),
    " LIMIT $7) v JOIN games g ON g.id = v.game_id"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_top_games_walk_reads_the_games_of_every_band_that_holds_top_games() {
        let lowest = u32::try_from(crate::explorer::answers::TOP_BANDS[0])
            .expect("a rating band is positive");
        assert_eq!(decimal(top_rating_sum_floor!()), 2 * lowest);
        assert!(decimal(top_band_floor!()) < TOP_BAND);
    }
}
