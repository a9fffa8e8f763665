//! The partial state several aggregates share: distinct keys (a value, a pair of scores, a
//! pair of labels) with how often each was seen. Merging adds counts, so a result does not
//! depend on how rows were partitioned.

use std::collections::HashMap;
use std::hash::Hash;
use std::ops::Deref;

/// Keys with counts; read it as the map it derefs to.
#[derive(Clone, Debug, PartialEq)]
pub struct Counts<K: Hash + Eq>(HashMap<K, u64>);

impl<K: Hash + Eq> Default for Counts<K> {
    fn default() -> Self {
        Self(HashMap::new())
    }
}

impl<K: Hash + Eq + Clone> Counts<K> {
    /// Adds `count` sightings of `key` (none when `count` is 0).
    pub fn add(&mut self, key: K, count: u64) {
        if count > 0 {
            *self.0.entry(key).or_insert(0) += count;
        }
    }

    /// Adds every sighting of `other`.
    pub fn merge(&mut self, other: &Counts<K>) {
        for (key, &count) in &other.0 {
            self.add(key.clone(), count);
        }
    }

    /// How many sightings in all.
    pub fn total(&self) -> u64 {
        self.0.values().sum()
    }
}

impl<K: Hash + Eq> Deref for Counts<K> {
    type Target = HashMap<K, u64>;

    fn deref(&self) -> &HashMap<K, u64> {
        &self.0
    }
}

impl<'a, K: Hash + Eq> IntoIterator for &'a Counts<K> {
    type Item = (&'a K, &'a u64);
    type IntoIter = std::collections::hash_map::Iter<'a, K, u64>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_and_merge_whatever_the_order() {
        let mut a = Counts::default();
        a.add(("x", "y"), 2);
        a.add(("x", "z"), 0);
        let mut b = Counts::default();
        b.add(("x", "y"), 1);
        b.add(("u", "v"), 3);
        let mut ab = a.clone();
        ab.merge(&b);
        let mut ba = b.clone();
        ba.merge(&a);
        assert_eq!(ab, ba);
        assert_eq!((ab.total(), ab.len(), ab[&("x", "y")]), (6, 2, 3));
    }
}
