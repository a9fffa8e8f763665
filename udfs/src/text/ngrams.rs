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
    /// An interner with room for `n` distinct tokens without rehashing.
    pub fn with_capacity(n: usize) -> Self {
        Interner {
            ids: AHashMap::with_capacity(n),
        }
    }

    pub fn ids(&mut self, tokens: &[&'a str]) -> Vec<u32> {
        self.ids_of(tokens.iter().copied())
    }

    /// The ids of `tokens`, in order (new tokens get the next free id).
    pub fn ids_of(&mut self, tokens: impl IntoIterator<Item = &'a str>) -> Vec<u32> {
        tokens
            .into_iter()
            .map(|t| {
                let next = self.ids.len() as u32;
                *self.ids.entry(t).or_insert(next)
            })
            .collect()
    }

    /// Number of distinct tokens so far (ids are below this).
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// `[overlap(counts(a, n), counts(b, n)) for n in 1..=MAX_ORDER]` for ids below
/// `n_ids`, without sorting and without string hashing: every n-gram gets a dense id, so
/// each order is counted in a plain array.
///
/// Unigram ids are the token ids. The (n+1)-gram at position `i` is the n-gram at `i`
/// followed by token `i + n`, so it is interned as the pair (id of that n-gram, id of
/// that token) into the next dense id; by induction equal ids are exactly equal n-grams.
/// Each order costs one small integer-keyed hash insert per position, where sorting the
/// packed n-grams (the earlier way) cost O(L log L) per order and side.
pub fn overlaps(a: &[u32], b: &[u32], n_ids: usize) -> [u64; MAX_ORDER] {
    thread_local! {
        static SCRATCH: std::cell::RefCell<OrderScratch> = Default::default();
    }
    SCRATCH.with_borrow_mut(|s| s.overlaps(a, b, n_ids))
}

/// Buffers of [`overlaps`], reused across rows.
#[derive(Default)]
struct OrderScratch {
    /// Dense ids of the current order's n-grams of each side, by start position.
    ga: Vec<u32>,
    gb: Vec<u32>,
    /// (n-gram id, next token id) -> (n+1)-gram id, for the order being built.
    pairs: PairTable,
    /// Occurrences per dense id of the counted side.
    count: Vec<u32>,
}

impl OrderScratch {
    fn overlaps(&mut self, a: &[u32], b: &[u32], n_ids: usize) -> [u64; MAX_ORDER] {
        let mut out = [0u64; MAX_ORDER];
        self.ga.clear();
        self.ga.extend_from_slice(a);
        self.gb.clear();
        self.gb.extend_from_slice(b);
        let mut n_grams = n_ids;
        for (n, o) in out.iter_mut().enumerate() {
            if n > 0 {
                // Order n + 1 from order n: drop the last position, extend each n-gram by
                // the token after it.
                if self.ga.len() <= 1 || self.gb.len() <= 1 {
                    // One side has no n-grams of this order, so none of any higher one.
                    break;
                }
                self.pairs.reset(self.ga.len() + self.gb.len());
                for (grams, ids) in [(&mut self.ga, a), (&mut self.gb, b)] {
                    grams.pop();
                    for (i, g) in grams.iter_mut().enumerate() {
                        *g = self
                            .pairs
                            .intern((u64::from(*g) << 32) | u64::from(ids[i + n]));
                    }
                }
                n_grams = self.pairs.len();
            }
            *o = multiset_overlap(&self.ga, &self.gb, n_grams, &mut self.count);
        }
        out
    }
}

/// An open-addressing map from packed id pairs to dense ids, sized per order to the
/// number of n-grams (a hash map keeps the capacity of the longest row ever seen and
/// clears all of it per order; this one touches only what the row needs).
#[derive(Default)]
struct PairTable {
    slots: Vec<(u64, u32)>,
    shift: u32,
    len: u32,
}

/// A slot no key has taken.
const FREE: u32 = u32::MAX;

impl PairTable {
    /// Empties the table, with room for `n` keys at most half full.
    fn reset(&mut self, n: usize) {
        let size = (2 * n).next_power_of_two().max(16);
        self.slots.clear();
        self.slots.resize(size, (0, FREE));
        self.shift = 64 - size.trailing_zeros();
        self.len = 0;
    }

    /// The id of `key`, the next free one if it is new.
    #[inline]
    fn intern(&mut self, key: u64) -> u32 {
        let mask = self.slots.len() - 1;
        // Fibonacci hashing: the high bits of key × 2^64/φ.
        let mut i = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize;
        loop {
            let (k, id) = self.slots[i];
            if id == FREE {
                self.slots[i] = (key, self.len);
                self.len += 1;
                return self.len - 1;
            }
            if k == key {
                return id;
            }
            i = (i + 1) & mask;
        }
    }

    fn len(&self) -> usize {
        self.len as usize
    }
}

/// Σ over ids of min(occurrences in `a`, occurrences in `b`), for ids below `n`.
fn multiset_overlap(a: &[u32], b: &[u32], n: usize, count: &mut Vec<u32>) -> u64 {
    count.clear();
    count.resize(n, 0);
    for &x in a {
        count[x as usize] += 1;
    }
    let mut m = 0;
    for &y in b {
        let c = &mut count[y as usize];
        if *c > 0 {
            *c -= 1;
            m += 1;
        }
    }
    m
}

/// Number of `n`-grams of a sequence of `len` tokens (NLTK: `len - n + 1`, at least 0).
pub fn count_of_order(len: usize, n: usize) -> u64 {
    (len + 1).saturating_sub(n) as u64
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

/// Azure's NLTK tokens of `response` and `ground_truth`, interned together, handed to `f`
/// as `(reference ids, hypothesis ids, number of ids)`. The token lists are thread-local
/// buffers reused across rows (BLEU and GLEU share this front end).
pub fn with_azure_ids<R>(
    response: &str,
    ground_truth: &str,
    f: impl FnOnce(&[u32], &[u32], usize) -> R,
) -> R {
    use super::nltk::{TokenList, azure_tokens_into};
    thread_local! {
        static TOKENS: std::cell::RefCell<(TokenList, TokenList)> = Default::default();
    }
    TOKENS.with_borrow_mut(|(hyp, reference)| {
        azure_tokens_into(response, hyp);
        azure_tokens_into(ground_truth, reference);
        let mut interner = Interner::with_capacity(hyp.len() + reference.len());
        let hyp = interner.ids_of(hyp.iter());
        let reference = interner.ids_of(reference.iter());
        f(&reference, &hyp, interner.len())
    })
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
        // the dense-id path agrees with the hash maps, also with ids past 16 bits
        let c = [70_000u32, 3, 70_000, 3, 70_000];
        let d = [3u32, 70_000, 70_000, 3];
        for (x, y, n_ids) in [(&a[..], &b[..], i.len()), (&c[..], &d[..], 70_001)] {
            let got = overlaps(x, y, n_ids);
            for n in 1..=MAX_ORDER {
                assert_eq!(got[n - 1], overlap(&counts(x, n), &counts(y, n)));
            }
        }
    }

    proptest::proptest! {
        /// The dense-id overlaps equal the hash-map counts on random id sequences with
        /// many repeats (small alphabets) and few.
        #[test]
        fn overlaps_equal_counted_maps(
            n_ids in 1usize..12,
            a in proptest::collection::vec(0u32..12, 0..40),
            b in proptest::collection::vec(0u32..12, 0..40),
        ) {
            let a: Vec<u32> = a.into_iter().map(|x| x % n_ids as u32).collect();
            let b: Vec<u32> = b.into_iter().map(|x| x % n_ids as u32).collect();
            let got = overlaps(&a, &b, n_ids);
            for n in 1..=MAX_ORDER {
                proptest::prop_assert_eq!(got[n - 1], overlap(&counts(&a, n), &counts(&b, n)));
            }
        }
    }
}
