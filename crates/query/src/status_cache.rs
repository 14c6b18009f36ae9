//! Status hashes of recently asked script hashes, so that a wallet that
//! reconnects (and subscribes every address again) costs a lookup per
//! address instead of a history scan.
//!
//! Exactness: a status depends only on the script's history (confirmed rows
//! and mempool entries, with their heights), and every change to those is
//! published as a [`crate::Change`] naming the touched script hashes (a
//! mempool child whose parent confirms is named too), or "all" after a
//! reorg. [`StatusCache::invalidate`] runs with each change, after the state
//! changed. A status computed from the state before a change must not be
//! stored after it: computations read the cache's epoch first
//! ([`StatusCache::epoch`]) and [`StatusCache::insert`] drops their result
//! when any invalidation happened meanwhile.
//!
//! Memory: two generations of at most `capacity` entries each (a cheap
//! approximation of LRU: a hit in the old generation moves the entry to the
//! young one; when the young one is full, the old one is dropped), so the
//! cache holds at most `2 * capacity` entries of [`ENTRY_BYTES`] each.

use osprey_core::{ScriptHash, StatusHash};
use std::collections::HashMap;
use std::sync::Mutex;

/// What one cached status costs, in bytes: the key, the value and the hash
/// table's own overhead (control byte, load factor), rounded up.
pub const ENTRY_BYTES: usize = 96;

type Generation = HashMap<ScriptHash, Option<StatusHash>>;

struct Inner {
    young: Generation,
    old: Generation,
    /// Incremented by every invalidation.
    epoch: u64,
}

pub struct StatusCache {
    inner: Mutex<Inner>,
    capacity: usize,
}

impl StatusCache {
    /// A cache using at most about `bytes` bytes (none when 0).
    pub fn new(bytes: usize) -> StatusCache {
        StatusCache {
            inner: Mutex::new(Inner {
                young: HashMap::new(),
                old: HashMap::new(),
                epoch: 0,
            }),
            capacity: bytes / ENTRY_BYTES / 2,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("status cache lock poisoned")
    }

    /// The epoch to pass to [`StatusCache::insert`]: read it before reading
    /// the state a status is computed from.
    pub fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    /// The cached status: `Some(None)` for a script known to be unused,
    /// `None` when not cached.
    pub fn get(&self, scripthash: &ScriptHash) -> Option<Option<StatusHash>> {
        let mut inner = self.lock();
        if let Some(status) = inner.young.get(scripthash) {
            return Some(*status);
        }
        let status = inner.old.remove(scripthash)?;
        Self::put(&mut inner, self.capacity, *scripthash, status);
        Some(status)
    }

    /// Stores a status computed from the state seen at `epoch`, unless an
    /// invalidation happened since.
    pub fn insert(&self, epoch: u64, scripthash: ScriptHash, status: Option<StatusHash>) {
        if self.capacity == 0 {
            return;
        }
        let mut inner = self.lock();
        if inner.epoch == epoch {
            Self::put(&mut inner, self.capacity, scripthash, status);
        }
    }

    fn put(inner: &mut Inner, capacity: usize, scripthash: ScriptHash, status: Option<StatusHash>) {
        if inner.young.len() >= capacity {
            inner.old = std::mem::take(&mut inner.young);
        }
        inner.young.insert(scripthash, status);
    }

    /// Forgets the statuses of `scripthashes` (all of them when `all`).
    pub fn invalidate(&self, scripthashes: &[ScriptHash], all: bool) {
        let mut inner = self.lock();
        inner.epoch += 1;
        if all {
            inner.young.clear();
            inner.old.clear();
            return;
        }
        for sh in scripthashes {
            inner.young.remove(sh);
            inner.old.remove(sh);
        }
    }

    /// Entries held now.
    #[cfg(test)]
    fn len(&self) -> usize {
        let inner = self.lock();
        inner.young.len() + inner.old.len()
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(n: u8) -> ScriptHash {
        ScriptHash::from_script(&[n])
    }

    #[test]
    fn a_status_computed_before_an_invalidation_is_not_stored() {
        let cache = StatusCache::new(1 << 20);
        let epoch = cache.epoch();
        cache.invalidate(&[sh(9)], false);
        cache.insert(epoch, sh(1), Some(StatusHash([1; 32])));
        assert_eq!(cache.get(&sh(1)), None, "stale computation dropped");
        let epoch = cache.epoch();
        cache.insert(epoch, sh(1), Some(StatusHash([2; 32])));
        cache.insert(epoch, sh(2), None);
        assert_eq!(cache.get(&sh(1)), Some(Some(StatusHash([2; 32]))));
        assert_eq!(
            cache.get(&sh(2)),
            Some(None),
            "unused scripts are cached too"
        );
        cache.invalidate(&[sh(1)], false);
        assert_eq!(cache.get(&sh(1)), None);
        assert_eq!(cache.get(&sh(2)), Some(None), "untouched entries stay");
        cache.invalidate(&[], true);
        assert!(cache.is_empty());
    }

    #[test]
    fn memory_stays_within_two_generations_and_recent_entries_survive() {
        let cache = StatusCache::new(10 * 2 * ENTRY_BYTES);
        let epoch = cache.epoch();
        for n in 0..100u8 {
            cache.insert(epoch, sh(n), None);
            // Keep asking for the first one: it stays.
            assert_eq!(cache.get(&sh(0)), Some(None), "after {n}");
            assert!(cache.len() <= 20, "{} entries", cache.len());
        }
        assert_eq!(cache.get(&sh(1)), None, "old entries go");
        assert_eq!(cache.get(&sh(99)), Some(None));
        let off = StatusCache::new(0);
        off.insert(off.epoch(), sh(1), None);
        assert!(off.is_empty());
    }
}
