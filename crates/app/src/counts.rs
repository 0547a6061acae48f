//! The explorer counters' definition as SQL, shared by the import, which
//! keeps `explorer_moves` (`crate::ingest::explorer`), and `explore`,
//! which counts a position without rows from the games itself
//! (`crate::query::explorer`): one text, so the two cannot count apart.

/// The key columns of a counter row, in primary-key order.
pub const KEY: &str = "position_id, variant, speed, rating_group, month, move";

/// The value columns of a counter row, in the order [`grouped`] gives them.
pub const COUNTS: &str = "games, white, draws, black, rated_games, rating_sum, last_played, \
                          top_game_ratings, top_game_ids";

/// How many best-rated games a counter row keeps
/// (`sql/0013_explorer_top_games.sql`): `explore` answers a request for
/// up to this many top games from the rows alone. Four, as the Lichess
/// explorer lists by default.
pub const TOP_GAMES: u32 = 4;

/// The counters of the view's rows matching `{filter}`, grouped by key:
/// [`KEY`] then [`COUNTS`]. (Counts are cast to `integer`: a count past
/// it is an error, never a clamp.) Inside the aggregates, `rating_sum` is
/// the view's column, both ratings of the game added; the output column
/// of that name sums their averages.
const GROUPED: &str = "
SELECT position_id, variant, speed, rating_group, month, move,
       count(*)::integer AS games, (count(*) FILTER (WHERE result = 1))::integer AS white,
       (count(*) FILTER (WHERE result = 0))::integer AS draws,
       (count(*) FILTER (WHERE result = -1))::integer AS black,
       count(average)::integer AS rated_games, coalesce(sum(average), 0)::bigint AS rating_sum,
       max(started_at) AS last_played,
       (array_agg(rating_sum ORDER BY rating_sum DESC, game_id)
          FILTER (WHERE rating_sum IS NOT NULL))[1:{top}] AS top_game_ratings,
       (array_agg(game_id ORDER BY rating_sum DESC, game_id)
          FILTER (WHERE rating_sum IS NOT NULL))[1:{top}] AS top_game_ids
FROM explorer_game_moves
WHERE {filter}
GROUP BY position_id, variant, speed, rating_group, month, move";

/// The counters over the games matching `filter` (a condition on
/// `game_id` or `position_id`, which reach the moves indexes), grouped by
/// key: [`KEY`] then [`COUNTS`].
pub fn grouped(filter: &str) -> String {
    GROUPED
        .replace("{top}", &TOP_GAMES.to_string())
        .replace("{filter}", filter)
}
