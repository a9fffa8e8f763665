//! N-gram counting over token lists, shared by the NLTK-based metrics (BLEU, GLEU).
//!
//! Tokens are interned to dense ids per comparison, and an n-gram of up to four ids is
//! packed into one `u128`, so counting hashes integers instead of string slices.

use ahash::AHashMap;
use datafusion::common::Result;
use datafusion::logical_expr::ColumnarValue;

use super::intern::IdMap;
use super::nltk::token_column;
use crate::common::{float64_rows, prepare_args};

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
/// `n_ids`, without sorting and almost without hashing.
///
/// `a` and `b` are laid end to end, and each n-gram is named by the position of its
/// first occurrence there (n-grams do not cross from `a` into `b`). Unigram names come
/// from a first-position table of the token ids. The (n+1)-gram at `i` is the n-gram
/// named `p` at `i` followed by token `i + n`, and:
/// - if `p == i`, the n-gram is new at `i`, so is the (n+1)-gram: named `i`;
/// - if the (n+1)-gram at `p` exists and ends with the same token, it is that one,
///   named `p` (it first occurs at `p`: an earlier occurrence would hold its prefix
///   earlier than `p`);
/// - otherwise (a repeated prefix that continues differently, rare) a small map from
///   (p, token) to the name settles it.
///
/// So equal names are exactly equal n-grams, order by order, and each position costs a
/// few array reads; an order's overlap is then counted in a position-indexed array.
pub fn overlaps(a: &[u32], b: &[u32], n_ids: usize) -> [u64; MAX_ORDER] {
    thread_local! {
        static SCRATCH: std::cell::RefCell<OrderScratch> = Default::default();
    }
    SCRATCH.with_borrow_mut(|s| s.overlaps(a, b, n_ids))
}

/// Buffers of [`overlaps`], reused across rows.
#[derive(Default)]
struct OrderScratch {
    /// `a` then `b`.
    tok: Vec<u32>,
    /// The name of the current order's n-gram at each position.
    name: Vec<u32>,
    /// First position of each token id ([`UNSEEN`] if none yet).
    first: Vec<u32>,
    /// Occurrences in `a` per name (position); all zero between uses.
    count: Vec<u32>,
    /// (prefix name << 32 | next token) -> name, for the repeated prefixes of one order.
    repeats: IdMap,
    /// The positions of `b` whose n-gram of the current order occurs in `a` (its name
    /// is below `a.len()`), ascending.
    live: Vec<u32>,
}

/// No position yet.
const UNSEEN: u32 = u32::MAX;

impl OrderScratch {
    fn overlaps(&mut self, a: &[u32], b: &[u32], n_ids: usize) -> [u64; MAX_ORDER] {
        let mut out = [0u64; MAX_ORDER];
        let (la, total) = (a.len(), a.len() + b.len());
        self.tok.clear();
        self.tok.extend_from_slice(a);
        self.tok.extend_from_slice(b);
        self.first.clear();
        self.first.resize(n_ids, UNSEEN);
        self.name.clear();
        self.name.resize(total, 0);
        for ((i, &t), name) in (0u32..).zip(&self.tok).zip(&mut self.name) {
            // A conditional move, not a branch: in a short row most tokens are first
            // occurrences, and which ones is unpredictable.
            let f = &mut self.first[t as usize];
            let v = if *f == UNSEEN { i } else { *f };
            *f = v;
            *name = v;
        }
        if self.count.len() < total {
            self.count.resize(total, 0);
        }
        // Only an n-gram of `b` that occurs in `a` can count, or extend to a longer one
        // that does (its prefix would occur in `a` too): so `b` is followed through the
        // orders on the list of those positions alone, kept without a branch.
        // (Entries are written before they are read: the vector only grows.)
        if self.live.len() < b.len() {
            self.live.resize(b.len(), 0);
        }
        let mut n_live = 0;
        for i in la..total {
            self.live[n_live] = i as u32;
            n_live += usize::from((self.name[i] as usize) < la);
        }
        out[0] = self.overlap(la, n_live, 0);
        for n in 1..MAX_ORDER {
            // Order n + 1 from order n. No shared n-gram: no shared longer one either;
            // a side shorter than n + 1 tokens has no (n+1)-grams.
            if out[n - 1] == 0 || a.len() <= n || b.len() <= n {
                break;
            }
            // At most one entry per position of this order.
            self.repeats.reset(total);
            for i in 0..la - n {
                let p = self.name[i] as usize;
                let next = self.tok[i + n];
                self.name[i] = if p == i {
                    i as u32
                } else if self.tok[p + n] == next {
                    // `p < i`, so the n-gram at `p` has its next token in `a` too.
                    p as u32
                } else {
                    self.repeats
                        .get_or_insert(u64::from(p as u32) << 32 | u64::from(next), i as u32)
                };
            }
            // The (n+1)-gram at a live position `i` of `b`: its prefix is named
            // `p < la`, never `i` itself. Positions from `total - n` on have none (only
            // the last live one can be there: the previous order stopped one earlier).
            while n_live > 0 && self.live[n_live - 1] as usize >= total - n {
                n_live -= 1;
            }
            let mut kept = 0;
            for j in 0..n_live {
                let i = self.live[j] as usize;
                let p = self.name[i] as usize;
                let next = self.tok[i + n];
                let name = if p + n < la && self.tok[p + n] == next {
                    p as u32
                } else {
                    self.repeats
                        .get_or_insert(u64::from(p as u32) << 32 | u64::from(next), i as u32)
                };
                self.name[i] = name;
                self.live[kept] = i as u32;
                kept += usize::from((name as usize) < la);
            }
            n_live = kept;
            out[n] = self.overlap(la, n_live, n);
        }
        out
    }

    /// The multiset overlap of the order-`n + 1` names of `a` (positions `..la - n`)
    /// and of `b` (the first `n_live` positions of `live`: the others have names that
    /// no n-gram of `a` has); leaves `count` all zero.
    fn overlap(&mut self, la: usize, n_live: usize, n: usize) -> u64 {
        let names_a = &self.name[..la - n];
        for &x in names_a {
            self.count[x as usize] += 1;
        }
        let mut m = 0;
        for &i in &self.live[..n_live] {
            let y = self.name[i as usize];
            // Without a branch: whether an n-gram of `b` finds one left in `a` is as
            // unpredictable as the texts.
            let c = &mut self.count[y as usize];
            let hit = u32::from(*c > 0);
            *c -= hit;
            m += u64::from(hit);
        }
        for &x in names_a {
            self.count[x as usize] = 0;
        }
        m
    }
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
/// buffers reused across rows.
pub fn with_azure_ids<R>(
    response: &str,
    ground_truth: &str,
    f: impl FnOnce(&[u32], &[u32], usize) -> R,
) -> R {
    use super::nltk::{TokenList, azure_tokens_into};
    #[derive(Default)]
    struct Buffers {
        hyp: TokenList,
        reference: TokenList,
        ids: PairIds,
    }
    thread_local! {
        static BUFFERS: std::cell::RefCell<Buffers> = Default::default();
    }
    BUFFERS.with_borrow_mut(|b| {
        azure_tokens_into(response, &mut b.hyp);
        azure_tokens_into(ground_truth, &mut b.reference);
        b.ids.intern(
            b.hyp.len() + b.reference.len(),
            (b.hyp.bytes(), b.hyp.spans(0..b.hyp.len())),
            (b.reference.bytes(), b.reference.spans(0..b.reference.len())),
        );
        f(&b.ids.reference, &b.ids.hypothesis, b.ids.table.len())
    })
}

/// The token ids of one comparison, reused across rows.
#[derive(Default)]
struct PairIds {
    table: super::intern::TokenIds,
    hypothesis: Vec<u32>,
    reference: Vec<u32>,
}

impl PairIds {
    /// Interns the hypothesis' tokens, then the reference's (the ids an [`Interner`]
    /// would give), `n` tokens in all. Each side is its tokens' bytes, back to back, and
    /// their spans in them.
    fn intern(
        &mut self,
        n: usize,
        (hyp_text, hypothesis): (&[u8], impl Iterator<Item = (usize, usize)>),
        (ref_text, reference): (&[u8], impl Iterator<Item = (usize, usize)>),
    ) {
        self.table.reset(n);
        let table = &mut self.table;
        self.hypothesis.clear();
        self.hypothesis
            .extend(hypothesis.map(|(s, e)| table.intern_at(hyp_text, s, e)));
        self.reference.clear();
        self.reference
            .extend(reference.map(|(s, e)| table.intern_at(ref_text, s, e)));
    }
}

/// The whole invocation of `f(response, ground_truth)` scored on Azure's NLTK token ids
/// (BLEU, GLEU): NULL in either argument gives NULL, otherwise `kernel(reference ids,
/// hypothesis ids, number of ids)` as [`with_azure_ids`] hands them. The token columns are
/// shared with the query's other NLTK metrics ([`token_column`]).
pub fn invoke_azure_ids(
    function: &str,
    args: &[ColumnarValue],
    number_rows: usize,
    kernel: fn(&[u32], &[u32], usize) -> f64,
) -> Result<ColumnarValue> {
    let prepared = prepare_args(args)?;
    let response = prepared.str(function, 0)?;
    let truth = prepared.str(function, 1)?;
    let hypothesis = token_column(&args[0], &response, number_rows);
    let reference = token_column(&args[1], &truth, number_rows);
    let mut ids = PairIds::default();
    float64_rows(prepared.all_scalar(), number_rows, |row| {
        if response.get(row).is_none() || truth.get(row).is_none() {
            return Ok(None);
        }
        ids.intern(
            hypothesis.row_len(row) + reference.row_len(row),
            (hypothesis.bytes(), hypothesis.row_spans(row)),
            (reference.bytes(), reference.row_spans(row)),
        );
        Ok(Some(kernel(
            &ids.reference,
            &ids.hypothesis,
            ids.table.len(),
        )))
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

    /// A long row grows the scratch tables, a short row after it lets them go; both
    /// count right, and so does the next long one.
    #[test]
    fn overlaps_across_row_sizes() {
        let long_a: Vec<u32> = (0..6000u32).map(|i| (i * 7919) % 13).collect();
        let long_b: Vec<u32> = (0..5000u32).map(|i| (i * 104_729) % 11).collect();
        let (short_a, short_b) = ([1u32, 2, 1, 3, 1, 2], [2u32, 1, 3, 1, 2, 1]);
        for (a, b) in [
            (&long_a[..], &long_b[..]),
            (&short_a[..], &short_b[..]),
            (&long_b[..], &long_a[..]),
        ] {
            let got = overlaps(a, b, 13);
            for n in 1..=MAX_ORDER {
                assert_eq!(
                    got[n - 1],
                    overlap(&counts(a, n), &counts(b, n)),
                    "order {n}"
                );
            }
        }
    }

    proptest::proptest! {
        /// The dense-id overlaps equal the hash-map counts on random id sequences with
        /// many repeats (small alphabets) and few.
        #[test]
        fn overlaps_equal_counted_maps(
            n_ids in 1usize..12,
            a in proptest::collection::vec(0u32..12, 0..120),
            b in proptest::collection::vec(0u32..12, 0..120),
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
