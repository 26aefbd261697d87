//! Keeping long-lived maps from holding the memory of a burst (issue 17).
//!
//! A `HashMap` keeps its capacity when entries are removed: after 110 pods come and go, the
//! pod manager's table alone (a `Pod` inline per slot) held 622 KiB with no pod in it, and
//! live allocations like it pin the heap pages the burst used.
//!
//! Such maps shrink with [`shrink_when_sparse`], down to a kept capacity of 32. Where a
//! value is large (a `Pod`, a pod's status, a pod worker's state: kilobytes each), the map
//! holds it boxed, so that those idle slots cost a pointer each: the pod workers', pod
//! manager's and status manager's kept tables held 377 KiB with no pod after the bench, in a
//! heap profile.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};

/// Capacity a map keeps however empty it gets: shrinking below it saves too little to pay for
/// the rehash.
const KEPT_CAPACITY: usize = 32;

/// Shrinks `map` to twice its length once fewer than a quarter of its capacity is used, so
/// the memory follows the number of entries down as it follows it up. Between two shrinks
/// at least a quarter of the entries were removed, which pays for the rehash (amortised
/// O(1) per removal). Call it after removing entries.
pub fn shrink_when_sparse<K: Eq + Hash, V, S: BuildHasher>(map: &mut HashMap<K, V, S>) {
    if map.capacity() > KEPT_CAPACITY && map.len() * 4 < map.capacity() {
        map.shrink_to((map.len() * 2).max(KEPT_CAPACITY));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_emptied_after_a_burst_gives_its_table_back_and_a_small_one_keeps_it() {
        let mut map: HashMap<u32, [u8; 64]> = (0..1000).map(|i| (i, [0; 64])).collect();
        let burst = map.capacity();
        map.retain(|k, _| *k < 500);
        shrink_when_sparse(&mut map);
        // (`capacity` counts free slots, and a removal may leave a tombstone that is not.)
        assert!(
            map.capacity() > burst / 2,
            "shrunk to {} with {} of {burst} still used",
            map.capacity(),
            map.len()
        );
        map.retain(|k, _| *k < 10);
        shrink_when_sparse(&mut map);
        assert!(map.capacity() < burst / 16, "capacity {}", map.capacity());
        assert!(
            map.capacity() >= KEPT_CAPACITY,
            "capacity {}",
            map.capacity()
        );
        assert!((0..10).all(|k| map.contains_key(&k)), "entries kept");

        let small = map.capacity();
        map.clear();
        shrink_when_sparse(&mut map);
        assert_eq!(map.capacity(), small, "no rehash below the kept capacity");
    }
}
