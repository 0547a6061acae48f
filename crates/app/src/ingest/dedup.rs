//! Position dedup: a bounded in-memory map from position to `positions.id`.
//!
//! In incremental mode it is a cache in front of the database's
//! get-or-create, keeping hot positions (openings, common endgames) off the
//! unique index. In bulk mode it is the dedup itself: a position it does not
//! know gets a new id without asking the database, and the bulk load's
//! final pass ([`crate::ingest::bulk`]) merges the duplicates that evictions let
//! through.
//!
//! It never grows with the input: two generations of at most
//! `capacity / 2` entries each; when the young one is full the old one is
//! dropped (its entries counted as evicted) and the young one ages. A hit in
//! the old generation is promoted while the young one has room, so
//! positions in steady use survive (an approximation of LRU at hash-map
//! cost), and nothing is evicted before `capacity` positions were inserted.
//!
//! Keys are the 128-bit xxh3 digest of the normalized FEN (24 bytes per
//! entry with the id, against ~110 for the FEN text), so the default budget
//! holds five times as many positions. Two different FENs share a key with
//! probability ~n²/2¹²⁹: for 10¹⁰ positions about 10⁻¹⁹. The database key
//! stays the FEN text, so an xxh64 collision never merges positions.
//! Entries are inserted only after the transaction that created or found
//! them committed: a rolled-back id never enters the map.

use std::{
    collections::{HashMap, HashSet},
    hash::{BuildHasherDefault, Hash, Hasher},
};

/// A position's identity in memory: xxh3-128 of its normalized FEN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PositionKey {
    high: u64,
    low: u64,
}

impl PositionKey {
    /// The key of a normalized FEN.
    pub fn of(fen: &str) -> PositionKey {
        let digest = xxhash_rust::xxh3::xxh3_128(fen.as_bytes());
        #[expect(
            clippy::cast_possible_truncation,
            reason = "the digest's two halves, cut on purpose"
        )]
        let (high, low) = ((digest >> 64) as u64, digest as u64);
        PositionKey { high, low }
    }
}

impl Hash for PositionKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Already a uniform digest: half of it is a perfect table hash.
        state.write_u64(self.low);
    }
}

/// Hands the key's own bits to the table (see [`PositionKey`]'s `Hash`).
#[derive(Debug, Default)]
pub struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only reached if a key type other than PositionKey is used; fold
        // the bytes in so the hasher stays correct, if not fast.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A hash map keyed by [`PositionKey`], hashing with the key's own bits.
pub type KeyMap<V> = HashMap<PositionKey, V, BuildHasherDefault<PassThrough>>;

/// A set of [`PositionKey`]s, hashing with the key's own bits.
pub type KeySet = HashSet<PositionKey, BuildHasherDefault<PassThrough>>;

type Generation = KeyMap<i64>;

/// Bounded position → id map.
#[derive(Debug)]
pub struct PositionCache {
    young: Generation,
    old: Generation,
    generation: usize,
    evicted: u64,
}

impl PositionCache {
    /// A map holding at most `capacity` positions (0 disables it).
    pub fn new(capacity: usize) -> Self {
        PositionCache {
            young: Generation::default(),
            old: Generation::default(),
            generation: capacity / 2,
            evicted: 0,
        }
    }

    /// The id of the position, if known.
    pub fn get(&mut self, key: PositionKey) -> Option<i64> {
        if let Some(&id) = self.young.get(&key) {
            return Some(id);
        }
        let id = *self.old.get(&key)?;
        // Promote only into free room: a promotion must never be what ages
        // the young generation and drops the old one.
        if self.young.len() < self.generation {
            self.old.remove(&key);
            self.young.insert(key, id);
        }
        Some(id)
    }

    /// Remembers the position's id (call only after the id's transaction
    /// committed).
    pub fn insert(&mut self, key: PositionKey, id: i64) {
        if self.young.contains_key(&key) {
            return;
        }
        self.put(key, id);
    }

    fn put(&mut self, key: PositionKey, id: i64) {
        if self.generation == 0 {
            self.evicted += 1;
            return;
        }
        if self.young.len() >= self.generation {
            self.evicted += self.old.len() as u64;
            self.old = std::mem::take(&mut self.young);
            self.young.reserve(self.generation.min(1 << 16));
        }
        self.young.insert(key, id);
    }

    /// Positions held now (tests check the bound).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.young.len() + self.old.len()
    }

    /// Whether nothing is held.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Positions that were inserted and have since been dropped (or never
    /// kept, with capacity 0). While this is 0, every position inserted is
    /// still known: bulk mode relies on it to skip its duplicate pass.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: i64) -> PositionKey {
        PositionKey::of(&format!("fen {i}"))
    }

    #[test]
    fn cache_never_exceeds_its_capacity_and_counts_evictions() {
        let mut cache = PositionCache::new(100);
        for i in 0..10_000 {
            cache.insert(key(i), i);
            assert!(cache.len() <= 100, "{} entries", cache.len());
        }
        assert_eq!(cache.evicted() + cache.len() as u64, 10_000);
    }

    #[test]
    fn nothing_is_evicted_below_capacity() {
        let mut cache = PositionCache::new(1000);
        for i in 0..1000 {
            cache.insert(key(i), i);
        }
        assert_eq!(cache.evicted(), 0);
        for i in 0..1000 {
            assert_eq!(cache.get(key(i)), Some(i), "{i}");
        }
    }

    #[test]
    fn hot_entries_survive_generations() {
        let mut cache = PositionCache::new(10);
        let start = PositionKey::of("start");
        cache.insert(start, 1);
        for i in 0..100 {
            cache.insert(key(i), i);
            assert_eq!(cache.get(start), Some(1), "round {i}");
        }
        assert_eq!(cache.get(key(0)), None);
    }

    #[test]
    fn zero_capacity_disables_the_cache() {
        let mut cache = PositionCache::new(0);
        cache.insert(PositionKey::of("x"), 1);
        assert_eq!(cache.get(PositionKey::of("x")), None);
        assert!(cache.is_empty());
        assert_eq!(cache.evicted(), 1);
    }

    #[test]
    fn keys_differ_for_different_fens() {
        let a = PositionKey::of("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq -");
        let b = PositionKey::of("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR b KQkq -");
        assert_ne!(a, b);
        assert_eq!(
            a,
            PositionKey::of(&String::from(
                "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq -"
            ))
        );
    }
}
