//! N-gram counting over token lists, shared by the NLTK-based metrics (BLEU, GLEU).
//!
//! Tokens are interned to dense ids per comparison, and an n-gram of up to four ids is
//! packed into one `u128`, so counting hashes integers instead of string slices.

use ahash::AHashMap;

/// Longest n-gram the packed keys hold.
pub const MAX_ORDER: usize = 4;

/// Interns the tokens of several sequences into one id space.
#[derive(Default)]
pub struct Interner<'a> {
    ids: AHashMap<&'a str, u32>,
}

impl<'a> Interner<'a> {
    pub fn ids(&mut self, tokens: &[&'a str]) -> Vec<u32> {
        tokens
            .iter()
            .map(|t| {
                let next = self.ids.len() as u32;
                *self.ids.entry(t).or_insert(next)
            })
            .collect()
    }
}

#[inline]
fn key(window: &[u32]) -> u128 {
    // 31 bits per id (a comparison never has 2^31 distinct tokens) leave the low 3 bits
    // for the order, so n-grams of different orders never share a key.
    window.iter().fold(0u128, |k, &id| {
        debug_assert!(id < 1 << 31);
        (k << 31) | u128::from(id)
    }) << 3
        | window.len() as u128
}

/// Counts of the `n`-grams of `ids` (empty when the sequence is shorter than `n`).
pub fn counts(ids: &[u32], n: usize) -> AHashMap<u128, u32> {
    debug_assert!((1..=MAX_ORDER).contains(&n));
    let mut out = AHashMap::with_capacity(ids.len());
    if ids.len() >= n {
        for w in ids.windows(n) {
            *out.entry(key(w)).or_insert(0) += 1;
        }
    }
    out
}

/// Counts of every n-gram of orders `1..=max_order` together (NLTK's `everygrams`).
pub fn every_counts(ids: &[u32], max_order: usize) -> AHashMap<u128, u32> {
    let mut out = AHashMap::with_capacity(ids.len() * max_order);
    for n in 1..=max_order {
        if ids.len() >= n {
            for w in ids.windows(n) {
                *out.entry(key(w)).or_insert(0) += 1;
            }
        }
    }
    out
}

/// Σ min(count in a, count in b): the size of the multiset intersection.
pub fn overlap(a: &AHashMap<u128, u32>, b: &AHashMap<u128, u32>) -> u64 {
    let (small, large) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    small
        .iter()
        .map(|(k, &c)| u64::from(c.min(large.get(k).copied().unwrap_or(0))))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counting() {
        let mut i = Interner::default();
        let a = i.ids(&["a", "b", "a", "b"]);
        let b = i.ids(&["b", "a", "b"]);
        assert_eq!(counts(&a, 2).values().sum::<u32>(), 3);
        assert_eq!(overlap(&counts(&a, 2), &counts(&b, 2)), 2);
        assert_eq!(every_counts(&a, 4).values().sum::<u32>(), 4 + 3 + 2 + 1);
        assert!(counts(&a, 4).len() == 1 && counts(&b, 4).is_empty());
        // a unigram never equals a bigram key
        assert_ne!(key(&[0]), key(&[0, 0]));
    }
}
