//! BLEU exactly as sacrebleu 2.6.0 computes it with its defaults
//! (`sacrebleu/metrics/bleu.py`): `13a` tokenization of `sent.rstrip()`, case-sensitive,
//! n-gram orders 1..=4, reference n-gram counts merged by max over the references,
//! closest reference length (ties -> shorter), and `smooth_method="exp"`.
//!
//! Sentence and corpus scores share one code path in sacrebleu: per-segment
//! statistics are summed (as Python ints) and scored once. [`BleuStats::merge`] is that
//! sum, so `bleu_score(&sum_of_row_stats, false)` equals `corpus_bleu(hyps, refs)`.

use ahash::AHashMap;

use super::pystr;
use std::cell::RefCell;

use super::tokenize_13a::Buf13a;

use crate::common::docs::TEXT_METRICS;
use crate::common::invoke_text_refs;
use crate::common::signature::{Param, coerce_params, user_defined};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::Result;
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDFImpl, Signature,
};
use std::sync::LazyLock;

/// Maximum n-gram order (sacrebleu's `MAX_NGRAM_ORDER`).
pub const MAX_NGRAM_ORDER: usize = 4;

/// Sufficient statistics of sacrebleu BLEU for one segment or a sum of segments
/// (sacrebleu's `[sys_len, ref_len, *correct, *total]`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BleuStats {
    /// Clipped n-gram matches per order (index 0 = unigrams).
    pub correct: [u64; 4],
    /// Hypothesis n-gram counts per order.
    pub total: [u64; 4],
    /// Hypothesis length in tokens.
    pub sys_len: u64,
    /// Closest reference length in tokens.
    pub ref_len: u64,
}

impl BleuStats {
    /// Adds `other` into `self` (sacrebleu's `sum_of_lists` over segments).
    pub fn merge(&mut self, other: &BleuStats) {
        for n in 0..MAX_NGRAM_ORDER {
            self.correct[n] += other.correct[n];
            self.total[n] += other.total[n];
        }
        self.sys_len += other.sys_len;
        self.ref_len += other.ref_len;
    }

    /// Flat layout in sacrebleu's order: `[sys_len, ref_len, correct[0..4], total[0..4]]`.
    pub fn to_array(&self) -> [u64; 10] {
        let mut a = [0u64; 10];
        a[0] = self.sys_len;
        a[1] = self.ref_len;
        a[2..6].copy_from_slice(&self.correct);
        a[6..10].copy_from_slice(&self.total);
        a
    }

    /// Inverse of [`BleuStats::to_array`]; `None` unless `s.len() == 10`.
    pub fn from_slice(s: &[u64]) -> Option<BleuStats> {
        if s.len() != 10 {
            return None;
        }
        let mut st = BleuStats {
            sys_len: s[0],
            ref_len: s[1],
            ..Default::default()
        };
        st.correct.copy_from_slice(&s[2..6]);
        st.total.copy_from_slice(&s[6..10]);
        Some(st)
    }
}

/// Marks a hypothesis token that occurs in no reference: n-grams containing it can
/// never match, so they are counted in `total` but never compared.
const UNSEEN: u32 = u32::MAX;

/// An n-gram key: token ids packed into an integer, first token in the lowest bits.
trait NgramKey: Copy + Ord + Default {
    fn push(self, id: u32, j: usize) -> Self;
}

impl NgramKey for u64 {
    #[inline]
    fn push(self, id: u32, j: usize) -> Self {
        self | (u64::from(id) << (16 * j))
    }
}

impl NgramKey for u128 {
    #[inline]
    fn push(self, id: u32, j: usize) -> Self {
        self | (u128::from(id) << (32 * j))
    }
}

/// Sorted keys of the order-`order` n-grams of `ids` (token ids packed 16 or 32 bits
/// each), leaving out n-grams that contain [`UNSEEN`].
fn sorted_ngrams<K: NgramKey>(ids: &[u32], order: usize, out: &mut Vec<K>) {
    out.clear();
    for w in ids.windows(order) {
        if !w.contains(&UNSEEN) {
            out.push(
                w.iter()
                    .enumerate()
                    .fold(K::default(), |k, (j, &id)| k.push(id, j)),
            );
        }
    }
    out.sort_unstable();
}

/// Closest reference length to `hyp_len`; on a tie the shorter reference wins
/// (sacrebleu's `_get_closest_ref_len`).
fn closest_ref_len(hyp_len: u64, ref_lens: &[u64]) -> u64 {
    let mut best: Option<(u64, u64)> = None; // (diff, len)
    for &r in ref_lens {
        let diff = hyp_len.abs_diff(r);
        best = match best {
            None => Some((diff, r)),
            Some((d, l)) if diff < d || (diff == d && r < l) => Some((diff, r)),
            keep => keep,
        };
    }
    best.map_or(0, |(_, l)| l)
}

/// Per-row working memory, reused across rows.
#[derive(Default)]
struct BleuBuffers {
    tok: Buf13a,
    spans: Vec<(u32, u32)>,
    /// Reference token ids, all references concatenated.
    ref_ids: Vec<u32>,
    /// End offset of each reference in `ref_ids`.
    ref_ends: Vec<usize>,
    ref_lens: Vec<u64>,
    hyp_ids: Vec<u32>,
    vocab: AHashMap<Box<[u8]>, u32>,
    keys64: (Vec<u64>, Vec<u64>, Vec<(u64, u64, u64)>),
    keys128: (Vec<u128>, Vec<u128>, Vec<(u128, u64, u64)>),
}

/// Per-segment BLEU statistics of `hypothesis` against `references`, as sacrebleu 2.6.0
/// `BLEU()` (13a, case-sensitive) computes them for one segment.
///
/// An empty `references` slice (sacrebleu raises) yields `ref_len = 0` and no matches.
pub fn bleu_stats(hypothesis: &str, references: &[&str]) -> BleuStats {
    thread_local! {
        static BUFFERS: RefCell<BleuBuffers> = RefCell::default();
    }
    BUFFERS.with_borrow_mut(|b| bleu_stats_with(b, hypothesis, references))
}

fn bleu_stats_with(b: &mut BleuBuffers, hypothesis: &str, references: &[&str]) -> BleuStats {
    // Intern reference tokens; hypothesis tokens absent from all references get UNSEEN.
    b.vocab.clear();
    b.ref_ids.clear();
    b.ref_ends.clear();
    b.ref_lens.clear();
    for r in references {
        b.tok.spans(pystr::rstrip(r), &mut b.spans);
        let text = b.tok.text();
        for &(s, e) in &b.spans {
            let tok = &text[s as usize..e as usize];
            let id = match b.vocab.get(tok) {
                Some(&id) => id,
                None => {
                    let id = b.vocab.len() as u32;
                    b.vocab.insert(tok.into(), id);
                    id
                }
            };
            b.ref_ids.push(id);
        }
        b.ref_ends.push(b.ref_ids.len());
        b.ref_lens.push(b.spans.len() as u64);
    }
    b.tok.spans(pystr::rstrip(hypothesis), &mut b.spans);
    b.hyp_ids.clear();
    let text = b.tok.text();
    for &(s, e) in &b.spans {
        let tok = &text[s as usize..e as usize];
        b.hyp_ids.push(*b.vocab.get(tok).unwrap_or(&UNSEEN));
    }

    let mut stats = BleuStats::default();
    stats.sys_len = b.hyp_ids.len() as u64;
    stats.ref_len = closest_ref_len(stats.sys_len, &b.ref_lens);

    // Ids (and UNSEEN) fit 16 bits when the vocabulary is small.
    if b.vocab.len() < 0xFFFF {
        for id in b.hyp_ids.iter_mut() {
            if *id == UNSEEN {
                *id = 0xFFFF;
            }
        }
        let (hk, rk, runs) = &mut b.keys64;
        count_matches(
            &mut stats,
            &b.hyp_ids,
            &b.ref_ids,
            &b.ref_ends,
            0xFFFF,
            hk,
            rk,
            runs,
        );
    } else {
        let (hk, rk, runs) = &mut b.keys128;
        count_matches(
            &mut stats,
            &b.hyp_ids,
            &b.ref_ids,
            &b.ref_ends,
            UNSEEN,
            hk,
            rk,
            runs,
        );
    }
    stats
}

/// Fills `total` and `correct`. Sorted multisets instead of hash maps: hypothesis
/// n-grams are run-length encoded, each reference raises `best[k]` to its count of
/// hypothesis n-gram k (the max over references), and the clipped count is the sum of
/// min(hyp count, best).
#[allow(clippy::too_many_arguments)]
fn count_matches<K: NgramKey>(
    stats: &mut BleuStats,
    hyp_ids: &[u32],
    ref_ids: &[u32],
    ref_ends: &[usize],
    unseen: u32,
    hyp_keys: &mut Vec<K>,
    ref_keys: &mut Vec<K>,
    runs: &mut Vec<(K, u64, u64)>, // (key, hyp count, best ref count)
) {
    let hyp_len = hyp_ids.len();
    for n in 0..MAX_NGRAM_ORDER {
        let order = n + 1;
        if hyp_len < order {
            break;
        }
        stats.total[n] = (hyp_len - order + 1) as u64;
        sorted_ngrams_unseen(hyp_ids, order, unseen, hyp_keys);
        if hyp_keys.is_empty() {
            continue;
        }
        runs.clear();
        for &k in hyp_keys.iter() {
            match runs.last_mut() {
                Some((last, c, _)) if *last == k => *c += 1,
                _ => runs.push((k, 1, 0)),
            }
        }
        let mut start = 0;
        for &end in ref_ends {
            let ids = &ref_ids[start..end];
            start = end;
            sorted_ngrams_unseen(ids, order, unseen, ref_keys);
            let (mut i, mut j) = (0, 0);
            while i < runs.len() && j < ref_keys.len() {
                let key = ref_keys[j];
                let mut c = 0u64;
                while j < ref_keys.len() && ref_keys[j] == key {
                    c += 1;
                    j += 1;
                }
                while i < runs.len() && runs[i].0 < key {
                    i += 1;
                }
                if i < runs.len() && runs[i].0 == key {
                    runs[i].2 = runs[i].2.max(c);
                    i += 1;
                }
            }
        }
        stats.correct[n] = runs.iter().map(|&(_, h, r)| h.min(r)).sum();
    }
}

/// [`sorted_ngrams`] with a configurable unseen marker.
fn sorted_ngrams_unseen<K: NgramKey>(ids: &[u32], order: usize, unseen: u32, out: &mut Vec<K>) {
    if unseen == UNSEEN {
        return sorted_ngrams(ids, order, out);
    }
    out.clear();
    for w in ids.windows(order) {
        if !w.contains(&unseen) {
            out.push(
                w.iter()
                    .enumerate()
                    .fold(K::default(), |k, (j, &id)| k.push(id, j)),
            );
        }
    }
    out.sort_unstable();
}

/// sacrebleu's `my_log`: `log`, with `log(0)` floored to -9999999999.
#[inline]
fn my_log(x: f64) -> f64 {
    if x == 0.0 { -9_999_999_999.0 } else { x.ln() }
}

/// BLEU on a 0-100 scale from (possibly summed) statistics: sacrebleu 2.6.0
/// `BLEU.compute_bleu(..., smooth_method="exp", effective_order=use_effective_order)`,
/// with the same floating-point operation order.
///
/// `sentence_bleu` in sacrebleu defaults to `use_effective_order=true`, `corpus_bleu`
/// to `false`.
pub fn bleu_score(stats: &BleuStats, use_effective_order: bool) -> f64 {
    let (sys_len, ref_len) = (stats.sys_len, stats.ref_len);
    let mut bp = 1.0f64;
    if sys_len < ref_len {
        bp = if sys_len > 0 {
            (1.0 - ref_len as f64 / sys_len as f64).exp()
        } else {
            0.0
        };
    }

    // No match at any order -> 0 (sacrebleu #141), whatever the brevity penalty.
    if stats.correct.iter().all(|&c| c == 0) {
        return 0.0;
    }

    let mut precisions = [0.0f64; MAX_NGRAM_ORDER];
    let mut smooth_mteval = 1.0f64;
    let mut eff_order = MAX_NGRAM_ORDER;
    for (n, precision) in precisions.iter_mut().enumerate() {
        let (correct, total) = (stats.correct[n], stats.total[n]);
        if total == 0 {
            break;
        }
        if use_effective_order {
            eff_order = n + 1;
        }
        *precision = if correct == 0 {
            smooth_mteval *= 2.0;
            100.0 / (smooth_mteval * total as f64)
        } else {
            100.0 * correct as f64 / total as f64
        };
    }

    // Python 3.11 (the reference) sums with plain left-to-right addition; 3.12+ uses a
    // compensated `sum`, which can move the result by an ulp.
    let mut log_sum = 0.0f64;
    for &p in &precisions[..eff_order] {
        log_sum += my_log(p);
    }
    bp * (log_sum / eff_order as f64).exp()
}

/// sacrebleu 2.6.0 `sentence_bleu(hypothesis, references, use_effective_order=...)`
/// `.score` (13a, exp smoothing). sacrebleu's default is `use_effective_order=true`.
pub fn sentence_bleu(hypothesis: &str, references: &[&str], use_effective_order: bool) -> f64 {
    bleu_score(&bleu_stats(hypothesis, references), use_effective_order)
}

// ---- The SQL function ---------------------------------------------------------------------

const USAGE: &str = "sacrebleu(response: String, ground_truth: String | List<String> [, use_effective_order: Boolean])";

static DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        TEXT_METRICS,
        "Sentence BLEU on a 0-100 scale, equal to sacreBLEU 2.6.0's sentence_bleu: 13a \
         tokenisation, case-sensitive, 4-gram precisions with exponential smoothing, brevity \
         penalty against the closest reference length. use_effective_order (default true, \
         sacreBLEU's default) averages only over n-gram orders the hypothesis has; false gives \
         Vertex AI's bleu × 100. ground_truth may be a list of references. NULL in any argument \
         gives NULL; an empty reference list is an error.",
        "sacrebleu(response, ground_truth [, use_effective_order])",
    )
    .with_sql_example("SELECT sacrebleu('The cat sat on the mat.', 'The cat sat on a mat.');")
    .with_argument("response", "The model's output (string).")
    .with_argument(
        "ground_truth",
        "One reference (string) or several (list of strings).",
    )
    .with_argument("use_effective_order", "Boolean, default true.")
    .build()
});

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct SacreBleuFunc {
    signature: Signature,
}

impl Default for SacreBleuFunc {
    fn default() -> Self {
        Self {
            signature: user_defined(),
        }
    }
}

impl ScalarUDFImpl for SacreBleuFunc {
    fn name(&self) -> &str {
        "sacrebleu"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        use Param::*;
        coerce_params(
            self.name(),
            USAGE,
            arg_types,
            &[&[Text, Refs], &[Text, Refs, Bool]],
        )
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        invoke_text_refs(
            self.name(),
            &args.args,
            args.number_rows,
            true,
            sentence_bleu,
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

    // Expected values come from running sacrebleu 2.6.0 (Python 3.11.7); the first cases
    // are from its sdist test/test_sentence_bleu.py and test/test_bleu.py.
    #[test]
    fn sentence_bleu_matches_sacrebleu() {
        let cases: &[(&str, &[&str], bool, f64)] = &[
            // test_sentence_bleu.py, issue #98 (exp smoothing, 13a): 8.493
            (
                "Producția de zahăr primă va fi exprimată în ceea ce privește zahărul alb;",
                &["producţia de zahăr brut se exprimă în zahăr alb;"],
                true,
                8.493098745313148,
            ),
            // test_sentence_bleu.py, issue #141: no match at all -> 0
            ("this is a cat", &["okay thanks"], true, 0.0),
            // test_bleu.py effective-order inputs (there scored with raw_corpus_bleu)
            ("test", &["a test"], true, 36.78794411714425),
            ("test", &["a test"], false, 0.0),
            ("a test", &["a test"], true, 100.00000000000004),
            ("a test", &["a test"], false, 0.0),
            ("a little test", &["a test"], true, 34.66806371753173),
            (
                "Niemann-Pick type C disease",
                &["Niemann-Pick type C", "disease"],
                true,
                63.894310424627285,
            ),
            // closest reference length: three refs at distance 2, the shortest (2) wins
            (
                "a b c d",
                &["x a b c d y", "a b", "a b c d e f"],
                true,
                100.00000000000004,
            ),
            ("", &["x"], true, 0.0),
            ("x y z", &[""], true, 0.0),
        ];
        for &(h, r, eff, want) in cases {
            let got = sentence_bleu(h, r, eff);
            assert!(
                close(got, want),
                "{h:?} {r:?} eff={eff}: got {got}, want {want}"
            );
        }
    }

    // sacrebleu test_bleu.py corpus test with two reference streams: 48.530827009929865,
    // counts [14, 7, 5, 3], totals [17, 14, 11, 8], sys_len 17, ref_len 18.
    #[test]
    fn corpus_bleu_two_refs_matches_sacrebleu() {
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
        let mut sum = BleuStats::default();
        for i in 0..3 {
            sum.merge(&bleu_stats(hyps[i], &[refs1[i], refs2[i]]));
        }
        assert_eq!(sum.correct, [14, 7, 5, 3]);
        assert_eq!(sum.total, [17, 14, 11, 8]);
        assert_eq!((sum.sys_len, sum.ref_len), (17, 18));
        assert!(close(bleu_score(&sum, false), 48.530827009929865));
        assert_eq!(BleuStats::from_slice(&sum.to_array()), Some(sum));

        // Empty hypotheses are kept: score 0, sys_len 0, ref_len still summed (17).
        let mut empty = BleuStats::default();
        for i in 0..3 {
            empty.merge(&bleu_stats("", &[refs1[i], refs2[i]]));
        }
        assert_eq!((empty.sys_len, empty.ref_len, empty.total), (0, 17, [0; 4]));
        assert_eq!(bleu_score(&empty, false), 0.0);
    }

    // test_bleu.py: statistics of "am I am a character sequence" and the scoring case
    // compute_bleu([9, 7, 5, 3], [10, 8, 6, 4], 11, 11) = 83.75922397086269.
    #[test]
    fn statistics_and_scoring_match_sacrebleu() {
        let st = bleu_stats(
            "am I am a character sequence",
            &["I am a symbol string sequence a a"],
        );
        assert_eq!(st.correct, [4, 2, 1, 0]);
        assert_eq!(st.total, [6, 5, 4, 3]);
        assert_eq!((st.sys_len, st.ref_len), (6, 8));
        let st = BleuStats {
            correct: [9, 7, 5, 3],
            total: [10, 8, 6, 4],
            sys_len: 11,
            ref_len: 11,
        };
        assert!(close(bleu_score(&st, false), 83.75922397086269));
        let st = bleu_stats("a b c d", &["x a b c d y", "a b", "a b c d e f"]);
        assert_eq!((st.sys_len, st.ref_len), (4, 2));
    }

    #[test]
    fn closest_ref_len_prefers_shorter_on_tie() {
        assert_eq!(closest_ref_len(5, &[7, 3]), 3);
        assert_eq!(closest_ref_len(5, &[3, 7]), 3);
        assert_eq!(closest_ref_len(5, &[9, 6, 4]), 4);
        assert_eq!(closest_ref_len(5, &[]), 0);
    }
}
