//! The explorer counters' definition as SQL, shared by the import, which
//! keeps `explorer_moves` (`crate::ingest::explorer`), and `explore`,
//! which counts a position without rows from the games itself
//! (`crate::query::explorer`): one text, so the two cannot count apart.

/// The key columns of a counter row, in primary-key order.
pub const KEY: &str = "position_id, variant, speed, rating_group, month, move";

/// The counters of the view's rows matching `{filter}`, grouped by key:
/// `position_id, variant, speed, rating_group, month, move, games, white,
/// draws, black, rated_games, rating_sum, last_played`. (Counts are cast
/// to `integer`: a count past it is an error, never a clamp.)
pub const GROUPED: &str = "
SELECT position_id, variant, speed, rating_group, month, move,
       count(*)::integer AS games, (count(*) FILTER (WHERE result = 1))::integer AS white,
       (count(*) FILTER (WHERE result = 0))::integer AS draws,
       (count(*) FILTER (WHERE result = -1))::integer AS black,
       count(average)::integer AS rated_games, coalesce(sum(average), 0)::bigint AS rating_sum,
       max(started_at) AS last_played
FROM explorer_game_moves
WHERE {filter}
GROUP BY position_id, variant, speed, rating_group, month, move";

/// [`GROUPED`] over the games matching `filter` (a condition on
/// `game_id` or `position_id`, which reach the moves indexes).
pub fn grouped(filter: &str) -> String {
    GROUPED.replace("{filter}", filter)
}
