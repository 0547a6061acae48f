//! Position dedup: a bounded in-memory cache in front of the database's
//! get-or-create.
//!
//! The cache maps normalized FEN → `positions.id`. It keeps the hot
//! positions (openings, common endgames) off the database without growing
//! with the input: two generations of at most `capacity / 2` entries each;
//! when the young one is full the old one is dropped and the young one ages.
//! A hit in the old generation is promoted, so positions in steady use
//! survive (an approximation of LRU at hash-map cost).
//!
//! Keys are the FEN text itself, never only its 64-bit digest, so an xxh64
//! collision between different FENs can never merge two positions.
//! Entries are inserted only after the transaction that created or found
//! them committed: a rolled-back id never enters the cache.

use std::collections::HashMap;

use foldhash::fast::RandomState;

/// Bounded FEN → id cache.
#[derive(Debug)]
pub struct PositionCache {
    young: HashMap<Box<str>, i64, RandomState>,
    old: HashMap<Box<str>, i64, RandomState>,
    generation: usize,
    hits: u64,
    misses: u64,
}

impl PositionCache {
    /// A cache holding at most `capacity` positions (0 disables it).
    pub fn new(capacity: usize) -> Self {
        PositionCache {
            young: HashMap::with_hasher(RandomState::default()),
            old: HashMap::with_hasher(RandomState::default()),
            generation: capacity / 2,
            hits: 0,
            misses: 0,
        }
    }

    /// The id of `fen`, if cached.
    pub fn get(&mut self, fen: &str) -> Option<i64> {
        if let Some(&id) = self.young.get(fen) {
            self.hits += 1;
            return Some(id);
        }
        if let Some((key, id)) = self.old.remove_entry(fen) {
            self.hits += 1;
            self.put(key, id);
            return Some(id);
        }
        self.misses += 1;
        None
    }

    /// Remembers `fen` → `id` (call only after the id's transaction committed).
    pub fn insert(&mut self, fen: &str, id: i64) {
        if self.generation == 0 || self.young.contains_key(fen) {
            return;
        }
        self.put(Box::from(fen), id);
    }

    fn put(&mut self, key: Box<str>, id: i64) {
        if self.generation == 0 {
            return;
        }
        if self.young.len() >= self.generation {
            self.old = std::mem::take(&mut self.young);
            self.young.reserve(self.generation.min(1 << 16));
        }
        self.young.insert(key, id);
    }

    /// Positions cached now.
    pub fn len(&self) -> usize {
        self.young.len() + self.old.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Lookups answered from memory.
    pub fn hits(&self) -> u64 {
        self.hits
    }

    /// Lookups that had to go to the database.
    pub fn misses(&self) -> u64 {
        self.misses
    }

    /// Fraction of lookups answered from memory.
    pub fn hit_rate(&self) -> f64 {
        let total = self.hits + self.misses;
        if total == 0 {
            0.0
        } else {
            self.hits as f64 / total as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_never_exceeds_its_capacity() {
        let mut cache = PositionCache::new(100);
        for i in 0..10_000 {
            cache.insert(&format!("fen {i}"), i);
            assert!(cache.len() <= 100, "{} entries", cache.len());
        }
    }

    #[test]
    fn hot_entries_survive_generations() {
        let mut cache = PositionCache::new(10);
        cache.insert("start", 1);
        for i in 0..100 {
            cache.insert(&format!("cold {i}"), i);
            assert_eq!(cache.get("start"), Some(1), "round {i}");
        }
        assert_eq!(cache.get("cold 0"), None);
        assert!(cache.hit_rate() > 0.9);
    }

    #[test]
    fn zero_capacity_disables_the_cache() {
        let mut cache = PositionCache::new(0);
        cache.insert("x", 1);
        assert_eq!(cache.get("x"), None);
        assert!(cache.is_empty());
    }
}
