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

/// Bits per id in the sorted keys of [`overlaps`]: four ids fill a `u64`.
const SORT_BITS: u32 = 16;

/// `[overlap(counts(a, n), counts(b, n)) for n in 1..=MAX_ORDER]` for ids below
/// `n_ids`, without hash maps: the n-grams of each side, packed into `u64` keys (16 bits
/// per id, so equal keys are exactly equal n-grams), are sorted, and a merge walk pairs
/// equal keys one to one, which counts Σ min(count in a, count in b) per n-gram.
/// Falls back to the hash maps when there are 2^16 ids or more.
pub fn overlaps(a: &[u32], b: &[u32], n_ids: usize) -> [u64; MAX_ORDER] {
    let mut out = [0u64; MAX_ORDER];
    if n_ids >= 1 << SORT_BITS {
        for (n, o) in out.iter_mut().enumerate() {
            *o = overlap(&counts(a, n + 1), &counts(b, n + 1));
        }
        return out;
    }
    thread_local! {
        static KEYS: std::cell::RefCell<(Vec<u64>, Vec<u64>)> = Default::default();
    }
    KEYS.with_borrow_mut(|(ka, kb)| {
        for (n, o) in out.iter_mut().enumerate() {
            sorted_keys(a, n + 1, ka);
            sorted_keys(b, n + 1, kb);
            *o = merge_count(ka, kb);
        }
    });
    out
}

/// The packed, sorted `n`-grams of `ids` into `out`.
fn sorted_keys(ids: &[u32], n: usize, out: &mut Vec<u64>) {
    out.clear();
    if ids.len() >= n {
        out.extend(ids.windows(n).map(|w| {
            w.iter()
                .fold(0u64, |k, &id| (k << SORT_BITS) | u64::from(id))
        }));
    }
    out.sort_unstable();
}

/// Number of equal pairs matched one to one between two sorted lists.
fn merge_count(a: &[u64], b: &[u64]) -> u64 {
    let (mut i, mut j, mut m) = (0, 0, 0u64);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                m += 1;
                i += 1;
                j += 1;
            }
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
        // the sorted path agrees with the hash maps, also with ids past its 16 bits
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
        /// The sorted-key overlaps equal the hash-map counts on random id sequences with
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
