//! chrF exactly as sacrebleu 2.6.0 computes it with its defaults
//! (`sacrebleu/metrics/chrf.py`): character n-grams of orders 1..=6 over the text with
//! all (Python) whitespace removed, no word n-grams, beta 2, case-sensitive,
//! `eps_smoothing=False` (the "effective order" averaging of sacrebleu >= 2.0).
//!
//! Statistics are `[hyp, ref, match]` per order; summing per-row statistics
//! ([`ChrfStats::merge`]) and scoring once is exactly what `corpus_chrf` does.

use std::cell::RefCell;

use super::pystr;

use crate::common::docs::TEXT_METRICS;
use crate::common::invoke_text_refs;
use crate::common::signature::{Param, coerce_params, user_defined};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::Result;
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDFImpl, Signature,
};
use std::sync::LazyLock;

/// Character n-gram order (sacrebleu's `CHRF.CHAR_ORDER`).
pub const CHAR_ORDER: usize = 6;
/// sacrebleu's default `CHRF.BETA`.
pub const BETA: u32 = 2;
/// Number of counts in [`ChrfStats`] (3 per order).
pub const CHRF_STATS_LEN: usize = 3 * CHAR_ORDER;

/// Sufficient statistics of sacrebleu chrF: for each order `n` (index `n-1`),
/// `counts[3(n-1)..3n] = [hyp n-grams, ref n-grams, matched n-grams]`
/// (sacrebleu's flat statistics list, same layout).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChrfStats {
    pub counts: [u64; CHRF_STATS_LEN],
}

impl ChrfStats {
    /// Adds `other` into `self` (sacrebleu's `sum_of_lists` over segments).
    pub fn merge(&mut self, other: &ChrfStats) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += *b;
        }
    }

    /// The 18 counts in sacrebleu's order.
    pub fn as_slice(&self) -> &[u64] {
        &self.counts
    }

    /// Inverse of [`ChrfStats::as_slice`]; `None` unless `s.len() == 18`.
    pub fn from_slice(s: &[u64]) -> Option<ChrfStats> {
        let counts: [u64; CHRF_STATS_LEN] = s.try_into().ok()?;
        Some(ChrfStats { counts })
    }
}

/// Bits per character slot: every Unicode scalar value plus one fits in 21 bits.
const SLOT_BITS: u32 = 21;
const SLOT_MASK: u128 = (1 << SLOT_BITS) - 1;

/// The character n-grams of all orders of one text, in one sorted vector.
///
/// Position `i` is stored as the 6 characters starting there, packed big-endian
/// (first character in the highest slot) as `char + 1`, with 0 slots past the end.
/// Numeric order is then lexicographic order, so for every order `n` the keys shifted
/// down to their first `n` slots are still sorted and equal n-grams are adjacent; the
/// positions too close to the end for order `n` are exactly those whose `n`-th slot
/// is 0. One sort serves all six orders and no hashing is needed.
struct CharNgrams {
    keys: Vec<u128>,
}

fn strip_whitespace(s: &str) -> Vec<u32> {
    // sacrebleu: ''.join(line.split())
    s.chars()
        .filter(|&c| !pystr::is_space(c))
        .map(|c| c as u32)
        .collect()
}

fn char_ngrams(chars: &[u32]) -> CharNgrams {
    let mut keys: Vec<u128> = (0..chars.len())
        .map(|i| {
            (0..CHAR_ORDER).fold(0u128, |k, s| {
                let slot = chars.get(i + s).map_or(0, |&c| u128::from(c) + 1);
                (k << SLOT_BITS) | slot
            })
        })
        .collect();
    keys.sort_unstable();
    CharNgrams { keys }
}

impl CharNgrams {
    /// Number of n-grams of `order` (sacrebleu: `len(line) - n + 1`, at least 0).
    fn count(&self, order: usize) -> u64 {
        (self.keys.len() + 1).saturating_sub(order) as u64
    }
}

/// Size of the multiset intersection of the order-`order` n-grams of `a` and `b`,
/// i.e. the sum over shared n-grams of `min(hyp count, ref count)`.
fn intersection(a: &CharNgrams, b: &CharNgrams, order: usize) -> u64 {
    let shift = SLOT_BITS * (CHAR_ORDER - order) as u32;
    let (a, b) = (&a.keys, &b.keys);
    let (mut i, mut j, mut m) = (0, 0, 0u64);
    loop {
        // Skip positions that have no n-gram of this order.
        while i < a.len() && (a[i] >> shift) & SLOT_MASK == 0 {
            i += 1;
        }
        while j < b.len() && (b[j] >> shift) & SLOT_MASK == 0 {
            j += 1;
        }
        if i == a.len() || j == b.len() {
            return m;
        }
        match (a[i] >> shift).cmp(&(b[j] >> shift)) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                m += 1;
                i += 1;
                j += 1;
            }
        }
    }
}

/// sacrebleu's `_get_match_statistics` for every order.
fn match_stats(hyp: &CharNgrams, refs: &CharNgrams) -> ChrfStats {
    let mut st = ChrfStats::default();
    for n in 0..CHAR_ORDER {
        let order = n + 1;
        let n_ref = refs.count(order);
        // The hypothesis count is dropped when the reference has no n-gram of this order.
        st.counts[3 * n] = if n_ref > 0 { hyp.count(order) } else { 0 };
        st.counts[3 * n + 1] = n_ref;
        st.counts[3 * n + 2] = intersection(hyp, refs, order);
    }
    st
}

/// Per-segment chrF statistics of `hypothesis` against `references`, as sacrebleu 2.6.0
/// `CHRF()` computes them: statistics against each reference, keeping the first
/// reference with the strictly highest sentence-level chrF.
///
/// An empty `references` slice (sacrebleu fails) yields all-zero statistics.
pub fn chrf_stats(hypothesis: &str, references: &[&str]) -> ChrfStats {
    thread_local! {
        static BUFFERS: RefCell<Fast> = RefCell::default();
    }
    BUFFERS
        .with_borrow_mut(|f| f.stats(hypothesis, references))
        .unwrap_or_else(|| chrf_stats_wide(hypothesis, references))
}

/// The general path: 21-bit character slots in `u128` keys.
fn chrf_stats_wide(hypothesis: &str, references: &[&str]) -> ChrfStats {
    let hyp = char_ngrams(&strip_whitespace(hypothesis));
    let mut best = ChrfStats::default();
    let mut best_f = -1.0f64;
    for r in references {
        let st = match_stats(&hyp, &char_ngrams(&strip_whitespace(r)));
        let f = chrf_score(&st);
        if f > best_f {
            best_f = f;
            best = st;
        }
    }
    best
}

/// Bits per slot of the fast path: characters are renumbered densely per row
/// (1..=1023, 0 = past the end), so six slots fit a `u64`.
const FAST_BITS: u32 = 10;
const FAST_MAX_IDS: usize = (1 << FAST_BITS) - 1;

/// The fast path's reusable memory. Same key layout as [`CharNgrams`] (big-endian
/// slots, lexicographic = numeric order) but with dense per-row character ids, which
/// preserve equality and hence the grouping of equal n-grams after sorting.
#[derive(Default)]
struct Fast {
    ascii: Vec<u16>,
    other: ahash::AHashMap<char, u16>,
    n_ids: usize,
    chars: Vec<u16>,
    hyp: Vec<u64>,
    refk: Vec<u64>,
}

impl Fast {
    /// Dense ids of the non-whitespace characters of `s` into `self.chars`;
    /// `false` when the row has more than [`FAST_MAX_IDS`] distinct characters.
    fn load(&mut self, s: &str) -> bool {
        self.chars.clear();
        for c in s.chars() {
            let id = if (c as u32) < 128 {
                if pystr::ASCII_SPACE[c as usize] {
                    continue;
                }
                let slot = &mut self.ascii[c as usize];
                if *slot == 0 {
                    self.n_ids += 1;
                    *slot = self.n_ids as u16;
                }
                *slot
            } else {
                if pystr::is_space(c) {
                    continue;
                }
                let next = self.n_ids + 1;
                let id = *self.other.entry(c).or_insert(next as u16);
                if id as usize == next {
                    self.n_ids = next;
                }
                id
            };
            if self.n_ids > FAST_MAX_IDS {
                return false;
            }
            self.chars.push(id);
        }
        true
    }

    /// Sorted keys of all positions of `self.chars` into `out`.
    fn keys(&self, out: &mut Vec<u64>) {
        out.clear();
        let c = &self.chars;
        let n = c.len();
        out.reserve(n);
        let mut k = 0u64;
        // Rolling window: after pushing character i, k holds chars[i-5..=i].
        for i in 0..n + CHAR_ORDER - 1 {
            let slot = if i < n { u64::from(c[i]) } else { 0 };
            k = ((k << FAST_BITS) | slot) & ((1u64 << (FAST_BITS * CHAR_ORDER as u32)) - 1);
            if i + 1 >= CHAR_ORDER {
                out.push(k);
            }
        }
        out.sort_unstable();
    }

    fn stats(&mut self, hypothesis: &str, references: &[&str]) -> Option<ChrfStats> {
        if self.ascii.is_empty() {
            self.ascii = vec![0; 128];
        }
        self.ascii.iter_mut().for_each(|x| *x = 0);
        self.other.clear();
        self.n_ids = 0;
        if !self.load(hypothesis) {
            return None;
        }
        let mut hyp = std::mem::take(&mut self.hyp);
        self.keys(&mut hyp);
        let mut refk = std::mem::take(&mut self.refk);
        let mut best = ChrfStats::default();
        let mut best_f = -1.0f64;
        let mut ok = true;
        for r in references {
            if !self.load(r) {
                ok = false;
                break;
            }
            self.keys(&mut refk);
            let st = fast_match_stats(&hyp, &refk);
            let f = chrf_score(&st);
            if f > best_f {
                best_f = f;
                best = st;
            }
        }
        self.hyp = hyp;
        self.refk = refk;
        ok.then_some(best)
    }
}

/// [`match_stats`] on fast-path keys, all orders in one merge: walking the two sorted
/// key lists in merged order, equal order-`n` n-grams form contiguous groups, and a
/// group ends where the common prefix with the previous key is shorter than `n` slots.
/// Each finished group contributes min(hyp count, ref count).
fn fast_match_stats(hyp: &[u64], refs: &[u64]) -> ChrfStats {
    let count = |len: usize, order: usize| (len + 1).saturating_sub(order) as u64;
    let mut st = ChrfStats::default();
    let top = 64 - FAST_BITS * CHAR_ORDER as u32;
    let mut cnt = [[0u64; CHAR_ORDER]; 2];
    let mut m = [0u64; CHAR_ORDER];
    let (mut i, mut j) = (0, 0);
    let mut prev: Option<u64> = None;
    while i < hyp.len() || j < refs.len() {
        let (k, side) = if j == refs.len() || (i < hyp.len() && hyp[i] <= refs[j]) {
            i += 1;
            (hyp[i - 1], 0)
        } else {
            j += 1;
            (refs[j - 1], 1)
        };
        // Common prefix length in slots with the previous key.
        let lcp = match prev {
            Some(p) => ((((p ^ k).leading_zeros().min(64)) - top) / FAST_BITS) as usize,
            None => 0,
        };
        for n in lcp.min(CHAR_ORDER)..CHAR_ORDER {
            m[n] += cnt[0][n].min(cnt[1][n]);
            cnt[0][n] = 0;
            cnt[1][n] = 0;
        }
        // Orders present at this position: slots up to the first 0.
        let valid = CHAR_ORDER
            - (k.trailing_zeros().min(FAST_BITS * CHAR_ORDER as u32) / FAST_BITS) as usize;
        for c in cnt[side].iter_mut().take(valid) {
            *c += 1;
        }
        prev = Some(k);
    }
    for n in 0..CHAR_ORDER {
        m[n] += cnt[0][n].min(cnt[1][n]);
    }
    for n in 0..CHAR_ORDER {
        let order = n + 1;
        let n_ref = count(refs.len(), order);
        st.counts[3 * n] = if n_ref > 0 {
            count(hyp.len(), order)
        } else {
            0
        };
        st.counts[3 * n + 1] = n_ref;
        st.counts[3 * n + 2] = m[n];
    }
    st
}

/// chrF on a 0-100 scale from (possibly summed) statistics, beta 2: sacrebleu 2.6.0
/// `CHRF()._compute_f_score` with `eps_smoothing=False`.
pub fn chrf_score(stats: &ChrfStats) -> f64 {
    chrf_score_with_beta(stats, BETA)
}

/// [`chrf_score`] for another integer `beta` (sacrebleu `CHRF(beta=...)`).
pub fn chrf_score_with_beta(stats: &ChrfStats, beta: u32) -> f64 {
    const EPS: f64 = 1e-16;
    // Python: factor = beta ** 2 (an int), used as (1 + factor) and factor * avg_prec.
    let factor = u64::from(beta) * u64::from(beta);
    let mut avg_prec = 0.0f64;
    let mut avg_rec = 0.0f64;
    let mut effective_order = 0u32;
    for n in 0..CHAR_ORDER {
        let (n_hyp, n_ref, n_match) = (
            stats.counts[3 * n],
            stats.counts[3 * n + 1],
            stats.counts[3 * n + 2],
        );
        let prec = if n_hyp > 0 {
            n_match as f64 / n_hyp as f64
        } else {
            EPS
        };
        let rec = if n_ref > 0 {
            n_match as f64 / n_ref as f64
        } else {
            EPS
        };
        // Only orders present on both sides are averaged.
        if n_hyp > 0 && n_ref > 0 {
            avg_prec += prec;
            avg_rec += rec;
            effective_order += 1;
        }
    }
    if effective_order == 0 {
        avg_prec = 0.0;
        avg_rec = 0.0;
    } else {
        avg_prec /= f64::from(effective_order);
        avg_rec /= f64::from(effective_order);
    }
    if avg_prec + avg_rec != 0.0 {
        let mut score = (1 + factor) as f64 * avg_prec * avg_rec;
        score /= factor as f64 * avg_prec + avg_rec;
        100.0 * score
    } else {
        0.0
    }
}

/// sacrebleu 2.6.0 `sentence_chrf(hypothesis, references).score` (defaults).
pub fn sentence_chrf(hypothesis: &str, references: &[&str]) -> f64 {
    chrf_score(&chrf_stats(hypothesis, references))
}

// ---- The SQL function ---------------------------------------------------------------------

const USAGE: &str = "chrf(response: String, ground_truth: String | List<String>)";

static DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        TEXT_METRICS,
        "Sentence chrF on a 0-100 scale, equal to sacreBLEU 2.6.0's sentence_chrf: character \
         n-grams of orders 1-6 with whitespace removed, F-score with beta 2 (recall weighted \
         twice as much as precision). With a list of references the best-scoring one counts. \
         NULL in any argument gives NULL; an empty reference list is an error.",
        "chrf(response, ground_truth)",
    )
    .with_sql_example("SELECT chrf('The cat sat on the mat.', 'The cat sat on a mat.');")
    .with_argument("response", "The model's output (string).")
    .with_argument(
        "ground_truth",
        "One reference (string) or several (list of strings).",
    )
    .build()
});

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ChrfFunc {
    signature: Signature,
}

impl Default for ChrfFunc {
    fn default() -> Self {
        Self {
            signature: user_defined(),
        }
    }
}

impl ScalarUDFImpl for ChrfFunc {
    fn name(&self) -> &str {
        "chrf"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        use Param::*;
        coerce_params(self.name(), USAGE, arg_types, &[&[Text, Refs]])
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        invoke_text_refs(
            self.name(),
            &args.args,
            args.number_rows,
            false,
            |h, r, _| sentence_chrf(h, r),
        )
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&DOC)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9
    }

    // Expected scores and statistics come from running sacrebleu 2.6.0 (Python 3.11.7,
    // `sentence_chrf` / `CHRF()._extract_corpus_statistics`); inputs are from its sdist
    // test/test_chrf.py (its expectations there use eps_smoothing=True or beta=3, so
    // the defaults were re-run).
    #[test]
    fn sentence_chrf_matches_sacrebleu() {
        let cases: &[(&str, &[&str], f64)] = &[
            (
                "Co nás nejvíc trápí, protože lékaři si vybírají, kdo bude žít a kdo zemře.",
                &[
                    "Nejvíce smutní jsme z toho, že musíme rozhodovat o tom, kdo bude žít a kdo zemře.",
                ],
                39.14081690316369,
            ),
            (
                "Nebo prostě nemají vybavení, které by jim pomohlo, uvedli lékaři.",
                &["A někdy nemáme ani potřebný materiál, abychom jim pomohli, popsali lékaři."],
                31.225641469352972,
            ),
            (
                "Lapali po dechu, jejich životy skončily dřív, než skutečně začaly.",
                &[
                    "Lapali po dechu a pak jejich život skončil - dřív, než skutečně mohl začít, připomněli.",
                ],
                57.157427512824064,
            ),
            (
                " Die    Beziehung zwischen  Obama und Netanjahu ist nicht gerade  freundlich. ",
                &["Das Verhältnis zwischen Obama und Netanyahu ist nicht gerade freundschaftlich."],
                64.818123726097,
            ),
            ("a b c", &["abc"], 100.0),
            ("aa", &["ab"], 25.0),
            ("", &["reference"], 0.0),
            ("abc", &["abd", "abcx", "xyz"], 68.86227544910179),
        ];
        for &(h, r, want) in cases {
            let got = sentence_chrf(h, r);
            assert!(close(got, want), "{h:?} {r:?}: got {got}, want {want}");
        }
    }

    #[test]
    fn stats_match_sacrebleu() {
        let st = chrf_stats("abc", &["abd", "abcx", "xyz"]);
        assert_eq!(
            st.counts,
            [3, 4, 3, 2, 3, 2, 1, 2, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0]
        );
        let st = chrf_stats("", &["reference"]);
        assert_eq!(
            st.counts,
            [0, 9, 0, 0, 8, 0, 0, 7, 0, 0, 6, 0, 0, 5, 0, 0, 4, 0]
        );
        let st = chrf_stats("aa", &["ab"]);
        assert_eq!(
            st.counts,
            [2, 2, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(ChrfStats::from_slice(st.as_slice()), Some(st));
    }

    // The fast path (dense 10-bit ids) must agree with the general one, and rows with
    // more than 1023 distinct characters must fall back to it.
    #[test]
    fn fast_path_matches_wide_path() {
        let many: String = (0x4E00u32..0x4E00 + 1100)
            .filter_map(char::from_u32)
            .collect();
        let cases: &[(&str, &[&str])] = &[
            ("abc", &["abd", "abcx", "xyz"]),
            ("aa", &["ab"]),
            ("", &["reference"]),
            ("x y", &[""]),
            (
                " Die Beziehung \u{a0}zwischen",
                &["Das Verh\u{e4}ltnis zwischen", "zw ischen"],
            ),
            (&many, &["\u{4e00}\u{4e01}"]),
            ("ab", &[&many]),
        ];
        for &(h, r) in cases {
            assert_eq!(chrf_stats(h, r), chrf_stats_wide(h, r), "{h:?} {r:?}");
        }
        let mut f = Fast::default();
        assert!(f.stats(&many, &["a"]).is_none());
        assert!(f.stats("abc", &["abd"]).is_some());
    }

    // sacrebleu test_chrf.py `test_chrf_eff_order` (corpus_chrf, beta=3, eps_smoothing=False).
    #[test]
    fn corpus_chrf_beta3_matches_sacrebleu_tests() {
        let cases: &[(&[&str], &[&str], f64)] = &[
            (&["a"], &["a"], 100.0),
            (&[""], &["reference"], 0.0),
            (&["a b c"], &["a b c"], 100.0),
            (&["a b c"], &["abc"], 100.0),
            (&[""], &["c"], 0.0),
            (&["a", "b"], &["a", "c"], 50.0),
            (&["aa"], &["ab"], 25.0),
        ];
        for &(hyps, refs, want) in cases {
            let mut sum = ChrfStats::default();
            for (h, r) in hyps.iter().zip(refs) {
                sum.merge(&chrf_stats(h, &[r]));
            }
            assert!(
                close(chrf_score_with_beta(&sum, 3), want),
                "{hyps:?} {refs:?}"
            );
        }
    }

    // sacrebleu 2-reference corpus example (test_bleu.py inputs): corpus_chrf = 59.72751782684763.
    #[test]
    fn corpus_chrf_two_refs() {
        let hyps = [
            "The dog bit the man.",
            "It wasn't surprising.",
            "The man had just bitten him.",
        ];
        let refs1 = [
            "The dog bit the man.",
            "It was not unexpected.",
            "The man bit him first.",
        ];
        let refs2 = [
            "The dog had bit the man.",
            "No one was surprised.",
            "The man had bitten the dog.",
        ];
        let mut sum = ChrfStats::default();
        for i in 0..3 {
            sum.merge(&chrf_stats(hyps[i], &[refs1[i], refs2[i]]));
        }
        assert!(close(chrf_score(&sum), 59.72751782684763));
    }
}
