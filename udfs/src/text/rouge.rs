//! ROUGE kernels matching google-research `rouge_score` 0.1.2
//! (`rouge_scorer.RougeScorer` with the default tokenizer), which is also what
//! Azure's `RougeScoreEvaluator` computes.
//!
//! Argument order differs from rouge-score: `RougeScorer.score(target,
//! prediction)` becomes `rouge(prediction, target, ..)` here; precision is
//! always relative to the prediction and recall to the target.
//!
//! Tokens are interned to dense `u32` ids per call, so n-gram counting and LCS
//! compare integers instead of strings.

use std::cell::RefCell;

use ahash::AHashMap;

use super::intern::TokenIds;
pub use super::rouge_tokenize::tokenize;
use super::rouge_tokenize::{Interner, TokenBuf, Tokens};

use crate::common::docs::TEXT_METRICS;
use crate::common::interrupt;
use crate::common::recent::{Recent, RowRanges, memoized_argument};
use crate::common::signature::{Param, coerce_params, user_defined};
use crate::common::{BoolArg, StrArg, float64_rows, invoke_text_pair, prepare_args};
use datafusion::arrow::array::{Float64Builder, StructArray};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Fields};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDFImpl, Signature,
};
use std::sync::{Arc, LazyLock};

/// A ROUGE variant as named in rouge-score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RougeType {
    /// `rougeN`: n-gram overlap.
    N(usize),
    /// `rougeL`: longest common subsequence over the whole texts.
    L,
    /// `rougeLsum`: summary-level union LCS over sentences.
    LSum,
}

impl RougeType {
    /// Parses the rouge-score names `rouge1` .. `rouge9`, `rougeL` and
    /// `rougeLsum` (case-sensitive; `rouge0` is rejected like rouge-score does).
    pub fn parse(s: &str) -> Option<RougeType> {
        match s {
            "rougeL" => Some(RougeType::L),
            "rougeLsum" => Some(RougeType::LSum),
            _ => match s.strip_prefix("rouge")?.as_bytes() {
                &[d @ b'1'..=b'9'] => Some(RougeType::N((d - b'0') as usize)),
                _ => None,
            },
        }
    }
}

/// Precision, recall and F-measure, as rouge-score's `scoring.Score`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RougeScore {
    pub precision: f64,
    pub recall: f64,
    pub fmeasure: f64,
}

impl RougeScore {
    const ZERO: RougeScore = RougeScore {
        precision: 0.0,
        recall: 0.0,
        fmeasure: 0.0,
    };

    /// Builds a score from integer counts with rouge-score's arithmetic: the
    /// divisions are exact-quotient roundings like Python's `int / int`.
    fn from_counts(hits: usize, prediction_total: usize, target_total: usize) -> RougeScore {
        let precision = hits as f64 / prediction_total as f64;
        let recall = hits as f64 / target_total as f64;
        RougeScore {
            precision,
            recall,
            fmeasure: fmeasure(precision, recall),
        }
    }
}

/// `scoring.fmeasure`, with the same operation order for bit-exact results.
fn fmeasure(precision: f64, recall: f64) -> f64 {
    if precision + recall > 0.0 {
        2.0 * precision * recall / (precision + recall)
    } else {
        0.0
    }
}

/// [`rouge`] with rouge-score's `split_summaries`: when true, `rougeLsum` splits both
/// texts into sentences with NLTK's Punkt (`nltk.sent_tokenize`) instead of on newlines.
/// Other types ignore it, as rouge-score does.
pub fn rouge_split(
    prediction: &str,
    target: &str,
    rouge_type: RougeType,
    use_stemmer: bool,
    split_summaries: bool,
) -> RougeScore {
    match rouge_type {
        RougeType::LSum if split_summaries => {
            let pred = super::nltk::punkt::sent_tokenize(prediction);
            let targ = super::nltk::punkt::sent_tokenize(target);
            let pred: Vec<&str> = pred.iter().map(String::as_str).collect();
            let targ: Vec<&str> = targ.iter().map(String::as_str).collect();
            rouge_lsum_sentences(&pred, &targ, use_stemmer)
        }
        RougeType::LSum => {
            let pred: Vec<&str> = prediction.split('\n').collect();
            let targ: Vec<&str> = target.split('\n').collect();
            rouge_lsum_sentences(&pred, &targ, use_stemmer)
        }
        _ => rouge(prediction, target, rouge_type, use_stemmer),
    }
}

/// The rouge-score score of `prediction` against `target`
/// (`RougeScorer([type], use_stemmer).score(target, prediction)[type]`).
///
/// `LSum` splits both texts on `"\n"` and drops empty pieces, like
/// rouge-score with `split_summaries=False`. `N(0)` is invalid in rouge-score
/// and yields an all-zero score here.
pub fn rouge(
    prediction: &str,
    target: &str,
    rouge_type: RougeType,
    use_stemmer: bool,
) -> RougeScore {
    match rouge_type {
        RougeType::LSum => rouge_split(prediction, target, rouge_type, use_stemmer, false),
        RougeType::N(0) => RougeScore::ZERO,
        RougeType::L | RougeType::N(_) => LCS_BUFFERS.with_borrow_mut(|bufs| {
            let LcsBuffers {
                pred,
                targ,
                scratch,
            } = bufs;
            pred.clear();
            pred.push_text(prediction, use_stemmer);
            targ.clear();
            targ.push_text(target, use_stemmer);
            score_tokens(pred.all(), targ.all(), rouge_type, scratch)
        }),
    }
}

/// ROUGE-N or ROUGE-L of two token sequences: rouge-score's `_score_ngrams` and
/// `_score_lcs`. (ROUGE-Lsum needs the sentences: [`rouge_lsum_sentences`].)
fn score_tokens(
    pred: Tokens<'_>,
    targ: Tokens<'_>,
    rouge_type: RougeType,
    scratch: &mut LcsLenScratch,
) -> RougeScore {
    match rouge_type {
        RougeType::L => {
            let (m, n) = (pred.len(), targ.len());
            if m == 0 || n == 0 {
                return RougeScore::ZERO;
            }
            // The LCS length is symmetric: bit-pack the shorter side.
            let (short, long) = if m <= n { (pred, targ) } else { (targ, pred) };
            RougeScore::from_counts(lcs_len_bits(short, long, scratch), m, n)
        }
        RougeType::N(0) => RougeScore::ZERO,
        RougeType::N(n) => {
            let mut interner = Interner::new();
            let targ = interner.intern_all(targ);
            let pred = interner.intern_all(pred);
            score_ngrams(&targ, &pred, n, interner.len())
        }
        RougeType::LSum => unreachable!("rougeLsum is scored by its sentences"),
    }
}

/// rouge-score's unstemmed tokens of every row of one text argument (a batch), so that
/// the query's ROUGE-1, ROUGE-2 and ROUGE-L over the same columns tokenize each text once.
pub struct RougeColumn {
    toks: TokenBuf,
    rows: RowRanges,
}

impl RougeColumn {
    /// The tokens of each row of `text`; `None` when the column's texts would not fit
    /// the `u32` offsets of a [`TokenBuf`] (then each row is tokenized on its own).
    fn new(text: &StrArg<'_>, number_rows: usize) -> Option<Self> {
        let mut toks = TokenBuf::default();
        // Room for the whole column up front: a text adds at most its length to `text`
        // and at most (length + 1) / 2 tokens. Grown by doubling instead, each batch's
        // buffers were copied into fresh memory again and again: rouge_l over 1M pairs
        // took 20,000-24,000 page faults and 160-180 MB peak RSS against 11,600 and
        // 110 MB now, and 10 % more time. Reserved room that no token reaches is never
        // touched, so it costs no memory.
        let rows = if text.is_scalar() { 1 } else { number_rows };
        let (bytes, tokens) = (0..rows)
            .filter_map(|row| text.get(row))
            .fold((0usize, 0usize), |(b, t), s| {
                (b + s.len(), t + s.len().div_ceil(2))
            });
        toks.text.reserve(bytes.min(u32::MAX as usize));
        toks.spans.reserve(tokens.min(u32::MAX as usize));
        let rows = RowRanges::build(text, number_rows, |t| {
            // A text adds at most its own length.
            if toks.text.len() + t.len() > u32::MAX as usize {
                return Err(());
            }
            toks.push_text(t, false);
            Ok(toks.spans.len())
        })
        .ok()?;
        Some(RougeColumn { toks, rows })
    }

    fn row(&self, row: usize) -> Tokens<'_> {
        let range = self.rows.get(row);
        Tokens {
            buf: &self.toks,
            start: range.start,
            len: range.len(),
        }
    }
}

thread_local! {
    /// Token columns made lately on this thread (see [`crate::common::recent`]).
    static RECENT_COLUMNS: RefCell<Recent<Option<RougeColumn>>> =
        const { RefCell::new(Recent::new()) };
}

#[cfg(test)]
thread_local! {
    /// Rows tokenized into columns on this thread, for the tests of the sharing.
    static TOKENIZED_ROWS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The unstemmed tokens of the text argument `value` (read through `text`), made once
/// per column array and shared with the query's other ROUGE functions on this thread.
fn rouge_column(
    value: &ColumnarValue,
    text: &StrArg<'_>,
    number_rows: usize,
) -> Arc<Option<RougeColumn>> {
    let make = || {
        #[cfg(test)]
        TOKENIZED_ROWS.with(|c| c.set(c.get() + if text.is_scalar() { 1 } else { number_rows }));
        RougeColumn::new(text, number_rows)
    };
    memoized_argument(&RECENT_COLUMNS, value, make)
}

/// The whole invocation of an unstemmed ROUGE-N or ROUGE-L F-measure function
/// (`rouge_1`, `rouge_2`, `rouge_l`): NULL in either argument gives NULL; the texts are
/// tokenized once per column for all of them ([`rouge_column`]).
pub fn invoke_rouge_fmeasure(
    function: &str,
    args: &[ColumnarValue],
    number_rows: usize,
    rouge_type: RougeType,
) -> Result<ColumnarValue> {
    let prepared = prepare_args(args)?;
    let response = prepared.str(function, 0)?;
    let truth = prepared.str(function, 1)?;
    let pred = rouge_column(&args[0], &response, number_rows);
    let targ = rouge_column(&args[1], &truth, number_rows);
    let (Some(pred), Some(targ)) = (pred.as_ref(), targ.as_ref()) else {
        return invoke_text_pair(function, args, number_rows, |r, g| {
            rouge(r, g, rouge_type, false).fmeasure
        });
    };
    let mut scratch = LcsLenScratch::default();
    float64_rows(prepared.all_scalar(), number_rows, |row| {
        if response.get(row).is_none() || truth.get(row).is_none() {
            return Ok(None);
        }
        Ok(Some(
            score_tokens(pred.row(row), targ.row(row), rouge_type, &mut scratch).fmeasure,
        ))
    })
}

/// rouge-score's `rougeLsum` (`_summary_level_lcs`) on already split
/// sentences. Empty strings are dropped first, as rouge-score does after
/// splitting (a whitespace-only sentence is kept and has no tokens).
pub fn rouge_lsum_sentences(
    prediction_sents: &[&str],
    target_sents: &[&str],
    use_stemmer: bool,
) -> RougeScore {
    let mut pred_toks = TokenBuf::default();
    let pred_ends = push_sentences(&mut pred_toks, prediction_sents, use_stemmer);
    let mut targ_toks = TokenBuf::default();
    let targ_ends = push_sentences(&mut targ_toks, target_sents, use_stemmer);
    if pred_ends.is_empty() || targ_ends.is_empty() {
        return RougeScore::ZERO;
    }
    let mut interner = Interner::new();
    let targ = interner.intern_all(targ_toks.all());
    let pred = interner.intern_all(pred_toks.all());
    summary_level_lcs(&targ, &targ_ends, &pred, &pred_ends, interner.len())
}

/// Tokenizes each non-empty sentence into `toks`; returns the end index
/// (exclusive, in tokens) of each sentence.
fn push_sentences(toks: &mut TokenBuf, sents: &[&str], use_stemmer: bool) -> Vec<usize> {
    let mut ends = Vec::with_capacity(sents.len());
    for s in sents.iter().filter(|s| !s.is_empty()) {
        toks.push_text(s, use_stemmer);
        ends.push(toks.spans.len());
    }
    ends
}

/// `_score_ngrams(_create_ngrams(target, n), _create_ngrams(prediction, n))`.
fn score_ngrams(targ: &[u32], pred: &[u32], n: usize, vocab: usize) -> RougeScore {
    let targ_count = (targ.len() + 1).saturating_sub(n);
    let pred_count = (pred.len() + 1).saturating_sub(n);
    let mut overlap = 0usize;
    if targ_count > 0 && pred_count > 0 {
        if n == 1 {
            // Ids are dense, so unigram counts fit in flat arrays.
            let mut counts = vec![(0u32, 0u32); vocab];
            for &t in targ {
                counts[t as usize].0 += 1;
            }
            for &p in pred {
                counts[p as usize].1 += 1;
            }
            overlap = counts.iter().map(|&(t, p)| t.min(p) as usize).sum();
        } else {
            let mut counts: AHashMap<&[u32], (u32, u32)> = AHashMap::with_capacity(targ_count);
            for g in targ.windows(n) {
                counts.entry(g).or_default().0 += 1;
            }
            for g in pred.windows(n) {
                if let Some(c) = counts.get_mut(g) {
                    c.1 += 1;
                }
            }
            overlap = counts.values().map(|&(t, p)| t.min(p) as usize).sum();
        }
    }
    RougeScore::from_counts(overlap, pred_count.max(1), targ_count.max(1))
}

/// Buffers of the rougeL kernel, reused across rows of a thread.
#[derive(Default)]
struct LcsBuffers {
    pred: TokenBuf,
    targ: TokenBuf,
    scratch: LcsLenScratch,
}

/// What [`lcs_len_bits`] reuses across rows.
#[derive(Default)]
struct LcsLenScratch {
    /// Match masks of the distinct tokens of the shorter side.
    masks: MatchMasks,
    /// The token ids of the shorter side.
    ids: Vec<usize>,
    /// Dense ids of the shorter side's distinct tokens.
    table: TokenIds,
    /// The bit vector of the LCS recurrence.
    v: Vec<u64>,
}

thread_local! {
    static LCS_BUFFERS: RefCell<LcsBuffers> = RefCell::default();
}

/// `_score_lcs`'s LCS length (`_lcs_table(..)[-1][-1]`), computed with the bit-parallel
/// recurrence of Allison–Dix / Hyyrö, which yields the same length as the DP table.
/// Bit `j` stands for token `j` of `short`; `long` is scanned once, and its tokens that
/// never occur in `short` leave the vector unchanged, so they are skipped.
fn lcs_len_bits(short: Tokens<'_>, long: Tokens<'_>, scratch: &mut LcsLenScratch) -> usize {
    let LcsLenScratch {
        masks,
        ids,
        table,
        v,
    } = scratch;
    let m = short.len();
    let words = m.div_ceil(64);
    table.reset(m);
    ids.clear();
    ids.extend((0..m).map(|j| table.intern(short.token(j).as_bytes()) as usize));
    masks.build(ids, table.len());
    v.clear();
    v.resize(words, !0);
    for i in 0..long.len() {
        // Quadratic time in the texts: give up once the statement must stop (its result
        // is then discarded).
        if i % 256 == 255 && interrupt::stopped() {
            break;
        }
        // Tokens that never occur in `short` leave the vector unchanged.
        if let Some(id) = table.get(long.token(i).as_bytes()) {
            masks.step(v, Some(id as usize));
        }
    }
    // Zero bits among the low m positions count the LCS; carries only move upwards, so
    // the unused high bits of the last word never disturb them.
    let full = m / 64;
    let mut ones: usize = v[..full].iter().map(|w| w.count_ones() as usize).sum();
    if m % 64 != 0 {
        ones += (v[full] & ((1u64 << (m % 64)) - 1)).count_ones() as usize;
    }
    m - ones
}

/// The match masks of the bit-parallel LCS for the column side: bit `j` of a token's mask
/// is set where column `j` holds that token. They are kept dense (a row of words per
/// distinct token) while that stays small, the usual case; otherwise each token's positions
/// are set into one scratch mask for a step and cleared after, so memory stays linear in the
/// input however many distinct tokens there are (dense masks of 200,000 distinct tokens
/// would take 5 GB).
#[derive(Default)]
struct MatchMasks {
    words: usize,
    dense: bool,
    /// Dense: `distinct × words`; sparse: one scratch row, all zero between steps.
    masks: Vec<u64>,
    /// Sparse: the columns of each token id.
    positions: Vec<Vec<u32>>,
    /// The most words dense masks may take (`None`: [`DENSE_MASK_WORDS`]); tests lower it
    /// to run the sparse form on small inputs.
    dense_limit: Option<usize>,
}

/// The most words the dense masks may take (8 MiB).
const DENSE_MASK_WORDS: usize = 1 << 20;

impl MatchMasks {
    /// The masks of a column side whose token ids (`0..distinct`) are `ids`.
    fn build(&mut self, ids: &[usize], distinct: usize) {
        self.words = ids.len().div_ceil(64);
        let limit = self.dense_limit.unwrap_or(DENSE_MASK_WORDS);
        self.dense = distinct.saturating_mul(self.words) <= limit;
        self.masks.clear();
        self.positions.clear();
        if self.dense {
            self.masks.resize(distinct * self.words, 0);
            for (j, &id) in ids.iter().enumerate() {
                self.masks[id * self.words + j / 64] |= 1 << (j % 64);
            }
        } else {
            self.masks.resize(self.words, 0);
            self.positions.resize(distinct, Vec::new());
            for (j, &id) in ids.iter().enumerate() {
                self.positions[id].push(j as u32);
            }
        }
    }

    /// One row of the recurrence for a row token (`None`: absent from the columns, which
    /// leaves the row as it is): `V' = (V + (V & M)) | (V & !M)`, Allison–Dix / Hyyrö.
    fn step(&mut self, row: &mut [u64], id: Option<usize>) {
        let Some(id) = id else { return };
        let words = self.words;
        if self.dense {
            bit_step(row, &self.masks[id * words..(id + 1) * words]);
            return;
        }
        for &j in &self.positions[id] {
            self.masks[j as usize / 64] |= 1 << (j % 64);
        }
        bit_step(row, &self.masks);
        for &j in &self.positions[id] {
            self.masks[j as usize / 64] = 0;
        }
    }
}

fn bit_step(row: &mut [u64], mask: &[u64]) {
    let mut carry = false;
    for (vk, &mk) in row.iter_mut().zip(mask) {
        let old = *vk;
        let u = old & mk;
        let (sum, c1) = old.overflowing_add(u);
        let (sum, c2) = sum.overflowing_add(u64::from(carry));
        carry = c1 | c2;
        *vk = sum | (old & !mk);
    }
}

/// `_summary_level_lcs(ref_sent=target, can_sent=prediction)`: for each
/// target sentence, the union of the LCS positions found against every
/// prediction sentence (with rouge-score's backtracking tie-break), counted
/// as hits only while both sides still have unused occurrences of the token.
fn summary_level_lcs(
    targ: &[u32],
    targ_ends: &[usize],
    pred: &[u32],
    pred_ends: &[usize],
    vocab: usize,
) -> RougeScore {
    let m = targ.len();
    let n = pred.len();
    if m == 0 || n == 0 {
        return RougeScore::ZERO;
    }
    let mut cnt_t = vec![0u32; vocab];
    let mut cnt_p = vec![0u32; vocab];
    for &t in targ {
        cnt_t[t as usize] += 1;
    }
    for &p in pred {
        cnt_p[p as usize] += 1;
    }
    let pred_sents: Vec<&[u32]> = sentence_slices(pred, pred_ends);
    let mut scratch = LcsScratch::default();
    let mut in_union: Vec<bool> = Vec::new();
    let mut hits = 0usize;
    for r in sentence_slices(targ, targ_ends) {
        in_union.clear();
        in_union.resize(r.len(), false);
        for &c in &pred_sents {
            mark_lcs(r, c, &mut scratch, &mut in_union);
        }
        // Position order, as rouge-score sorts the union of indices.
        for (&tok, _) in r.iter().zip(&in_union).filter(|&(_, &u)| u) {
            let t = tok as usize;
            if cnt_p[t] > 0 && cnt_t[t] > 0 {
                hits += 1;
                cnt_p[t] -= 1;
                cnt_t[t] -= 1;
            }
        }
    }
    RougeScore::from_counts(hits, n, m)
}

fn sentence_slices<'a>(toks: &'a [u32], ends: &[usize]) -> Vec<&'a [u32]> {
    let mut start = 0;
    ends.iter()
        .map(|&e| {
            let s = &toks[start..e];
            start = e;
            s
        })
        .collect()
}

/// `lcs_ind(r, c)`: the positions of `r` on rouge-score's LCS path against `c`, marked in
/// `marks`, in memory linear in the input.
///
/// rouge-score fills the whole `(|r|+1) × (|c|+1)` LCS table and backtracks from the end
/// (`_backtrack_norec`): on a match it steps diagonally, else to `j-1` when
/// `t[i][j-1] > t[i-1][j]`, else to `i-1`. Which path it takes on ties decides the union
/// of rougeLsum, so the same path must be taken here, but the table of two 30,000-token
/// sentences would take 3.6 GB. Instead each row of the table is the bit vector of the
/// bit-parallel LCS (bit `j` clear where `t[i][j+1] = t[i][j] + 1`, so `t[i][j]` is the
/// number of clear bits below `j`): one pass computes every row and keeps every `k`-th
/// (`k ≈ √|r|`); the backtrack recomputes one block of `k` rows at a time, from the bottom
/// up, with the running bit counts of each word so that any `t[i][j]` is read at once.
/// Memory is `O(|c| · √|r| / 64)` words (about 30 MB for two 200,000-token sentences);
/// time is two passes of the bit-parallel recurrence.
fn mark_lcs(r: &[u32], c: &[u32], scratch: &mut LcsScratch, marks: &mut [bool]) {
    if r.is_empty() || c.is_empty() {
        return;
    }
    let words = c.len().div_ceil(64);
    let LcsScratch {
        by_token,
        ids,
        masks,
        checkpoints,
        block,
        ranks,
    } = scratch;
    by_token.clear();
    ids.clear();
    for &tok in c {
        let next = by_token.len();
        ids.push(*by_token.entry(tok).or_insert(next));
    }
    masks.build(ids, by_token.len());
    let mut step = |row: &mut [u64], tok: u32| masks.step(row, by_token.get(&tok).copied());

    // Forward: rows 0, k, 2k, ... kept.
    let k = ((r.len() as f64).sqrt().ceil() as usize).max(1);
    checkpoints.clear();
    let mut row = vec![!0u64; words];
    checkpoints.extend_from_slice(&row);
    for i in 1..=r.len() {
        if i % 256 == 0 && interrupt::stopped() {
            return; // the result is discarded (see `lcs_len_bits`)
        }
        step(&mut row, r[i - 1]);
        if i % k == 0 {
            checkpoints.extend_from_slice(&row);
        }
    }

    // Backtrack, one block at a time: rows first ..= first + k, with `ranks` holding the
    // set bits before each word of each row (one more entry than words).
    let (mut i, mut j) = (r.len(), c.len());
    let mut loaded: Option<usize> = None;
    while i > 0 && j > 0 {
        let first = (i - 1) / k * k;
        if loaded != Some(first) {
            let start = first / k * words;
            row.copy_from_slice(&checkpoints[start..start + words]);
            block.clear();
            ranks.clear();
            for ii in first..=(first + k).min(r.len()) {
                if ii > first {
                    step(&mut row, r[ii - 1]);
                }
                block.extend_from_slice(&row);
                let mut ones = 0u32;
                ranks.push(0);
                for w in row.iter() {
                    ones += w.count_ones();
                    ranks.push(ones);
                }
            }
            loaded = Some(first);
        }
        // t[ii][jj] for a row of the loaded block.
        let t = |ii: usize, jj: usize| -> u32 {
            let b = ii - first;
            let (w, bit) = (jj / 64, jj % 64);
            let mut ones = ranks[b * (words + 1) + w];
            if bit != 0 {
                ones += (block[b * words + w] & ((1u64 << bit) - 1)).count_ones();
            }
            jj as u32 - ones
        };
        if r[i - 1] == c[j - 1] {
            marks[i - 1] = true;
            i -= 1;
            j -= 1;
        } else if t(i, j - 1) > t(i - 1, j) {
            j -= 1;
        } else {
            i -= 1;
        }
    }
}

/// Buffers of [`mark_lcs`], reused across sentence pairs.
#[derive(Default)]
struct LcsScratch {
    by_token: AHashMap<u32, usize>,
    ids: Vec<usize>,
    masks: MatchMasks,
    checkpoints: Vec<u64>,
    block: Vec<u64>,
    ranks: Vec<u32>,
}

// ---- The SQL function ---------------------------------------------------------------------

static DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        TEXT_METRICS,
        "ROUGE precision, recall and F-measure of the response against the ground truth, equal \
         to Google's rouge-score 0.1.2 (the scorer behind Azure's RougeScoreEvaluator and \
         Vertex AI's rouge). Texts are lowercased and every run of characters other than a-z \
         and 0-9 separates tokens, so non-Latin scripts score 0. rouge1…rouge9 count n-gram \
         overlap, rougeL the longest common subsequence, rougeLsum the union LCS over lines \
         (split on newlines, or into sentences by NLTK's Punkt with split_summaries). use_stemmer \
         applies rouge-score's Porter stemmer (NLTK's variant) to tokens longer than 3 characters. Returns Struct{precision, recall, f1_score}; NULL \
         in any argument gives NULL.",
        "rouge(response, ground_truth, rouge_type [, use_stemmer [, split_summaries]])",
    )
    .with_sql_example("SELECT rouge('the cat sat', 'the cat sat down', 'rougeL')['f1_score'];")
    .with_argument("response", "The model's answer (string).")
    .with_argument("ground_truth", "The reference text (string).")
    .with_argument(
        "rouge_type",
        "'rouge1' … 'rouge9', 'rougeL' or 'rougeLsum' (exact spelling, as rouge-score).",
    )
    .with_argument(
        "use_stemmer",
        "Apply the Porter stemmer (boolean, default false).",
    )
    .build()
});

fn result_fields() -> Fields {
    Fields::from(vec![
        Field::new("precision", DataType::Float64, true),
        Field::new("recall", DataType::Float64, true),
        Field::new("f1_score", DataType::Float64, true),
    ])
}

fn parse_type(function: &str, value: &str) -> Result<RougeType> {
    match RougeType::parse(value) {
        Some(t) => Ok(t),
        None => exec_err!(
            "{function}: unknown rouge_type {value:?}; expected 'rouge1' … 'rouge9', 'rougeL' or 'rougeLsum'"
        ),
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct RougeFunc {
    signature: Signature,
}

impl Default for RougeFunc {
    fn default() -> Self {
        Self {
            signature: user_defined(),
        }
    }
}

impl ScalarUDFImpl for RougeFunc {
    fn name(&self) -> &str {
        "rouge"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        use Param::*;
        coerce_params(
            self.name(),
            "rouge(response: String, ground_truth: String, rouge_type: String [, use_stemmer: Boolean [, split_summaries: Boolean]])",
            arg_types,
            &[
                &[Text, Text, Text],
                &[Text, Text, Text, Bool],
                &[Text, Text, Text, Bool, Bool],
            ],
        )
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Struct(result_fields()))
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        // A literal rouge_type is checked while planning, before any row is read.
        if let Some(Some(
            ScalarValue::Utf8(Some(t))
            | ScalarValue::LargeUtf8(Some(t))
            | ScalarValue::Utf8View(Some(t)),
        )) = args.scalar_arguments.get(2)
            && RougeType::parse(t).is_none()
        {
            return plan_err!(
                "rouge: unknown rouge_type {t:?}; expected 'rouge1' … 'rouge9', 'rougeL' or 'rougeLsum'"
            );
        }
        Ok(Arc::new(Field::new(
            self.name(),
            DataType::Struct(result_fields()),
            true,
        )))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let name = self.name();
        let prepared = prepare_args(&args.args)?;
        let response = prepared.str(name, 0)?;
        let truth = prepared.str(name, 1)?;
        let kind = prepared.str(name, 2)?;
        let splitter = if prepared.len() > 4 {
            Some(prepared.bool(name, 4)?)
        } else {
            None
        };
        let stemmer = if prepared.len() > 3 {
            Some(prepared.bool(name, 3)?)
        } else {
            None
        };
        let rows = if prepared.all_scalar() {
            1
        } else {
            args.number_rows
        };

        let (mut p, mut r, mut f) = (
            Float64Builder::with_capacity(rows),
            Float64Builder::with_capacity(rows),
            Float64Builder::with_capacity(rows),
        );
        let mut valid = Vec::with_capacity(rows);
        // rouge_type is nearly always a literal: parse each distinct value once.
        let mut parsed: Option<(&str, RougeType)> = None;
        for row in 0..rows {
            let flag = |arg: Option<BoolArg>| match arg {
                None => Some(false),
                Some(a) => a.get(row),
            };
            let score = match (
                response.get(row),
                truth.get(row),
                kind.get(row),
                flag(stemmer),
                flag(splitter),
            ) {
                (Some(resp), Some(gt), Some(k), Some(stem), Some(split)) => {
                    let t = match parsed {
                        Some((prev, t)) if prev == k => t,
                        _ => {
                            let t = parse_type(name, k)?;
                            parsed = Some((k, t));
                            t
                        }
                    };
                    Some(rouge_split(resp, gt, t, stem, split))
                }
                _ => None,
            };
            valid.push(score.is_some());
            let s = score.unwrap_or(RougeScore {
                precision: 0.0,
                recall: 0.0,
                fmeasure: 0.0,
            });
            p.append_value(s.precision);
            r.append_value(s.recall);
            f.append_value(s.fmeasure);
        }
        let array = StructArray::try_new(
            result_fields(),
            vec![
                Arc::new(p.finish()),
                Arc::new(r.finish()),
                Arc::new(f.finish()),
            ],
            Some(NullBuffer::from(valid)),
        )?;
        if prepared.all_scalar() {
            Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(
                &array, 0,
            )?))
        } else {
            Ok(ColumnarValue::Array(Arc::new(array)))
        }
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&DOC)
    }
}

#[cfg(test)]
mod tests {
    use super::super::rouge_tokenize::ascii_in_lowercase;
    use super::*;

    /// rouge-score's `_lcs_table` + `_backtrack_norec`, as written there: the reference the
    /// linear-memory `mark_lcs` must follow step for step.
    fn mark_lcs_table(r: &[u32], c: &[u32], marks: &mut [bool]) {
        let w = c.len() + 1;
        let mut table = vec![0u32; (r.len() + 1) * w];
        for i in 1..=r.len() {
            for j in 1..=c.len() {
                table[i * w + j] = if r[i - 1] == c[j - 1] {
                    table[(i - 1) * w + j - 1] + 1
                } else {
                    table[(i - 1) * w + j].max(table[i * w + j - 1])
                };
            }
        }
        let (mut i, mut j) = (r.len(), c.len());
        while i > 0 && j > 0 {
            if r[i - 1] == c[j - 1] {
                marks[i - 1] = true;
                i -= 1;
                j -= 1;
            } else if table[i * w + j - 1] > table[(i - 1) * w + j] {
                j -= 1;
            } else {
                i -= 1;
            }
        }
    }

    /// A small deterministic generator (xorshift64*).
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1)
        }

        fn tokens(&mut self, max_len: u64, alphabet: u64) -> Vec<u32> {
            let len = self.below(max_len + 1);
            (0..len).map(|_| self.below(alphabet) as u32).collect()
        }
    }

    #[test]
    fn the_linear_lcs_takes_rouge_scores_path_on_ties() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for case in 0..4000 {
            // Small alphabets make ties everywhere; lengths cross word and block edges.
            let max_len = [8, 40, 70, 140, 300][case % 5];
            let alphabet = [1, 2, 3, 5, 50][case / 5 % 5];
            let (r, c) = (rng.tokens(max_len, alphabet), rng.tokens(max_len, alphabet));
            let mut want = vec![false; r.len()];
            mark_lcs_table(&r, &c, &mut want);
            for sparse in [false, true] {
                let mut scratch = LcsScratch::default();
                if sparse {
                    scratch.masks.dense_limit = Some(0);
                }
                let mut got = vec![false; r.len()];
                mark_lcs(&r, &c, &mut scratch, &mut got);
                assert_eq!(got, want, "r={r:?} c={c:?} sparse={sparse}");
            }
        }
    }

    #[test]
    fn sparse_masks_give_the_same_lcs_length() {
        let mut rng = Rng(7);
        let mut dense = MatchMasks::default();
        let mut sparse = MatchMasks {
            dense_limit: Some(0),
            ..MatchMasks::default()
        };
        for _ in 0..500 {
            let (short, long) = (rng.tokens(150, 6), rng.tokens(300, 6));
            let ids: Vec<usize> = short.iter().map(|&t| t as usize).collect();
            let words = short.len().div_ceil(64);
            let mut lengths = vec![];
            for masks in [&mut dense, &mut sparse] {
                masks.build(&ids, 6);
                let mut v = vec![!0u64; words];
                for &t in &long {
                    masks.step(&mut v, short.contains(&t).then_some(t as usize));
                }
                let ones: usize = (0..short.len())
                    .filter(|&j| v[j / 64] >> (j % 64) & 1 == 1)
                    .count();
                lengths.push(short.len() - ones);
            }
            assert_eq!(lengths[0], lengths[1]);
        }
    }

    #[test]
    fn a_200000_token_pair_needs_no_quadratic_memory() {
        let n = 200_000;
        let same = "a ".repeat(n);
        let distinct: String = (0..n).map(|i| format!("w{i} ")).collect();
        let reversed: String = (0..n).rev().map(|i| format!("w{i} ")).collect();
        // One sentence each (no newline), so rougeLsum's LCS runs over the whole pair.
        for (pred, targ, lcs) in [(&same, &same, n), (&distinct, &reversed, 1)] {
            for kind in [RougeType::L, RougeType::LSum] {
                let s = rouge(pred, targ, kind, false);
                let want = lcs as f64 / n as f64;
                assert_eq!((s.precision, s.recall), (want, want), "{kind:?}");
            }
        }
        if let Some(peak) = crate::common::peak_rss() {
            assert!(peak < 300 << 20, "peak RSS {} MiB", peak >> 20);
        }
    }

    fn assert_score(s: RougeScore, p: f64, r: f64, f: f64) {
        assert_eq!((s.precision, s.recall, s.fmeasure), (p, r, f));
    }

    #[test]
    fn parse_names() {
        assert_eq!(RougeType::parse("rouge1"), Some(RougeType::N(1)));
        assert_eq!(RougeType::parse("rouge9"), Some(RougeType::N(9)));
        assert_eq!(RougeType::parse("rougeL"), Some(RougeType::L));
        assert_eq!(RougeType::parse("rougeLsum"), Some(RougeType::LSum));
        for bad in [
            "rouge0",
            "rouge10",
            "ROUGE1",
            "rougel",
            "rougeLSum",
            "rouge",
            "",
        ] {
            assert_eq!(RougeType::parse(bad), None, "{bad:?}");
        }
    }

    // Expected token lists come from `rouge_score.tokenize.tokenize` (0.1.2,
    // nltk 3.10.4, CPython 3.11.7).
    /// ROUGE-1, ROUGE-2 and ROUGE-L of one query tokenize each column once and score
    /// exactly as `rouge` does row by row (NULLs, an empty text and a literal included).
    #[test]
    fn the_rouge_functions_of_one_query_tokenize_each_column_once() {
        use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray};
        use datafusion::arrow::datatypes::Float64Type;
        use datafusion::config::ConfigOptions;
        use datafusion::logical_expr::{ScalarFunctionArgs, ScalarUDF};

        use crate::text::rouge_fmeasure::RougeFMeasureFunc;

        let responses = [
            Some("The cat sat on the mat."),
            None,
            Some(""),
            Some("İt is 3 KELVIN cold, the cat said"),
        ];
        let truths = [
            Some("the cat is on the mat"),
            Some("x"),
            Some("nothing here"),
            Some("The cat: it is cold!"),
        ];
        let p: ArrayRef = Arc::new(StringArray::from(responses.to_vec()));
        let r: ArrayRef = Arc::new(StringArray::from(truths.to_vec()));
        let run = |f: RougeFMeasureFunc, second: ColumnarValue| -> Vec<Option<f64>> {
            let field = Arc::new(Field::new("t", DataType::Utf8, true));
            let out = ScalarUDF::from(f)
                .invoke_with_args(ScalarFunctionArgs {
                    args: vec![ColumnarValue::Array(Arc::clone(&p)), second],
                    arg_fields: vec![Arc::clone(&field), field],
                    number_rows: 4,
                    return_field: Arc::new(Field::new("x", DataType::Float64, true)),
                    config_options: Arc::new(ConfigOptions::default()),
                })
                .unwrap()
                .into_array(4)
                .unwrap();
            let v = out.as_primitive::<Float64Type>();
            (0..4).map(|i| v.is_valid(i).then(|| v.value(i))).collect()
        };
        let before = TOKENIZED_ROWS.with(|n| n.get());
        let cases = [
            (RougeFMeasureFunc::rouge_1(), RougeType::N(1)),
            (RougeFMeasureFunc::rouge_2(), RougeType::N(2)),
            (RougeFMeasureFunc::rouge_l(), RougeType::L),
        ];
        for (f, t) in cases {
            let got = run(f, ColumnarValue::Array(Arc::clone(&r)));
            let want: Vec<Option<f64>> = responses
                .iter()
                .zip(&truths)
                .map(|(a, b)| Some(rouge((*a)?, (*b)?, t, false).fmeasure))
                .collect();
            assert_eq!(got, want, "{t:?}");
        }
        assert_eq!(
            TOKENIZED_ROWS.with(|n| n.get()) - before,
            8,
            "two columns of four rows"
        );
        let literal = ColumnarValue::Scalar(ScalarValue::Utf8(Some("the cat".into())));
        let got = run(RougeFMeasureFunc::rouge_l(), literal);
        let want: Vec<Option<f64>> = responses
            .iter()
            .map(|a| Some(rouge((*a)?, "the cat", RougeType::L, false).fmeasure))
            .collect();
        assert_eq!(got, want);
    }

    /// Every non-ASCII character: what `to_lowercase` gives that can join a token is what
    /// [`ascii_in_lowercase`] says, and the unstemmed tokenizer (which steps over such
    /// characters undecoded) agrees with the per-character one around each.
    #[test]
    fn non_ascii_characters_join_tokens_only_as_their_tables_say() {
        let mut utf8 = [0u8; 4];
        let mut fast = TokenBuf::default();
        let mut slow = TokenBuf::default();
        for c in (0x80..=0x10FFFFu32).filter_map(char::from_u32) {
            let letters: Vec<u8> = c
                .to_lowercase()
                .filter(|l| l.is_ascii_lowercase() || l.is_ascii_digit())
                .map(|l| l as u8)
                .collect();
            let encoded = c.encode_utf8(&mut utf8).as_bytes();
            assert_eq!(
                ascii_in_lowercase(encoded),
                letters.first().copied(),
                "{c:?}"
            );
            assert!(letters.len() <= 1, "{c:?}");
            if !letters.is_empty() || c as u32 % 997 == 0 {
                let text = format!("ab{c}cd {c}x Y{c}");
                fast.clear();
                fast.push_text_unstemmed(&text);
                slow.clear();
                for ch in text.chars() {
                    for l in ch.to_lowercase() {
                        slow.push_char(l, false);
                    }
                }
                slow.flush(false);
                let tokens = |t: &TokenBuf| {
                    (0..t.spans.len())
                        .map(|i| t.token(i).to_owned())
                        .collect::<Vec<_>>()
                };
                assert_eq!(tokens(&fast), tokens(&slow), "{c:?}");
            }
        }
    }

    #[test]
    fn the_mask_tokenizer_equals_the_general_one() {
        // Rarely U+0130 or U+212A, which send a text to the general path.
        let alphabet = [
            "a", "Z", "0", "9", " ", ".", ",", "-", "_", "\t", "\n", "x", "Y", "'", "!", "é", "É",
            "日", "’", "😀", "\u{85}", "ß", "a", "b", "1", "Q", "q",
        ];
        let mut rng = Rng(0x5eed_1234_abcd_9876);
        let (mut fast, mut general) = (TokenBuf::default(), TokenBuf::default());
        for round in 0..20_000 {
            // Lengths around the 64-byte blocks and the 8-byte words matter most.
            let len = match round % 4 {
                0 => rng.below(20),
                1 => 56 + rng.below(80),
                2 => 128 * (1 + rng.below(3)) - 1 + rng.below(3),
                _ => rng.below(400),
            } as usize;
            let mut text: String = (0..len)
                .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize])
                .collect();
            if round % 97 == 0 {
                text.push_str(["İx", "K9"][round % 2]);
            }
            // Appended to what the buffers already hold, as a column's rows are.
            if round % 50 == 0 {
                fast.clear();
                general.clear();
            }
            let (nf, ng) = (fast.spans.len(), general.spans.len());
            fast.push_text_unstemmed(&text);
            general.push_any_unstemmed(&text);
            let tokens = |b: &TokenBuf, from: usize| -> Vec<String> {
                (from..b.spans.len())
                    .map(|i| b.token(i).to_string())
                    .collect()
            };
            assert_eq!(tokens(&fast, nf), tokens(&general, ng), "{text:?}");
        }
    }

    #[test]
    fn tokenizer() {
        assert_eq!(
            tokenize("The quick brown fox!", false),
            ["the", "quick", "brown", "fox"]
        );
        assert_eq!(
            tokenize("Café İstanbul \u{212A}elvin 3.14", false),
            ["caf", "i", "stanbul", "kelvin", "3", "14"]
        );
        assert_eq!(
            tokenize("testing tests ones", true),
            ["test", "test", "one"]
        );
        assert_eq!(
            tokenize("dies lies was the", true),
            ["die", "lie", "was", "the"]
        );
        assert!(tokenize("你好 ，世界", false).is_empty());
    }

    // Cases from rouge-score's rouge_scorer_test.py; the expected numbers were
    // printed by rouge-score 0.1.2 (`RougeScorer(..).score(target, prediction)`).
    #[test]
    fn rouge_score_test_cases() {
        let t = "testing one two";
        let p = "testing";
        assert_score(rouge(p, t, RougeType::N(1), false), 1.0, 1.0 / 3.0, 0.5);
        assert_score(rouge(p, t, RougeType::L, false), 1.0, 1.0 / 3.0, 0.5);
        let s = rouge("testing one two", "testing", RougeType::N(2), false);
        assert_score(s, 0.0, 0.0, 0.0);
        let s = rouge("testing one two", "testing one", RougeType::N(2), false);
        assert_score(s, 0.5, 1.0, 0.6666666666666666);
        let s = rouge(
            "the quick brown fox",
            "the quick brown dog jumps",
            RougeType::L,
            false,
        );
        assert_score(s, 0.75, 0.6, 0.6666666666666665);
        // rougeLsum example with a shared token that must not be double counted.
        let target = "w1 w2 w3 w4 w5\nw6 w7 w8 w9 w10";
        let prediction = "w1 w2 w6 w7 w8\nw1 w3 w8 w9 w5";
        assert_score(
            rouge(prediction, target, RougeType::LSum, false),
            0.8,
            0.8,
            0.8000000000000002,
        );
        let s = rouge(
            "The quick brown fox jumps",
            "The quick brown dog",
            RougeType::LSum,
            true,
        );
        assert_score(s, 0.6, 0.75, 0.6666666666666665);
    }

    // More cases from rouge_scorer_test.py (testRougeLsum,
    // testRougeLSumSentenceSplitting, testRougeLNonConsecutive, testRouge2),
    // with the exact values printed by rouge-score 0.1.2.
    #[test]
    fn rouge_score_suite_cases() {
        let s = rouge(
            "w1 w2 w6 w7 w8\nw1 w3 w8 w9 w5",
            "w1 w2 w3 w4 w5",
            RougeType::LSum,
            false,
        );
        assert_score(s, 0.4, 0.8, 0.5333333333333333);
        assert_score(
            rouge("/", "w1 w2 w3 w4 w5", RougeType::LSum, false),
            0.0,
            0.0,
            0.0,
        );
        let t = "First sentence.\nSecond Sentence.";
        let p = "Second sentence.\nFirst Sentence.";
        assert_score(rouge(p, t, RougeType::LSum, true), 1.0, 1.0, 1.0);
        let (t, p) = (t.replace('\n', " "), p.replace('\n', " "));
        assert_score(rouge(&p, &t, RougeType::LSum, true), 0.5, 0.5, 0.5);
        let s = rouge_lsum_sentences(
            &["Second sentence.", "First Sentence."],
            &["First sentence.", "Second Sentence."],
            true,
        );
        assert_score(s, 1.0, 1.0, 1.0);
        assert_score(
            rouge("testing two", "testing one two", RougeType::L, false),
            1.0,
            0.6666666666666666,
            0.8,
        );
        assert_score(
            rouge("testing one", "testing one two", RougeType::N(2), false),
            1.0,
            0.5,
            0.6666666666666666,
        );
    }

    #[test]
    fn empty_inputs() {
        for ty in [
            RougeType::N(1),
            RougeType::N(3),
            RougeType::L,
            RougeType::LSum,
        ] {
            assert_score(rouge("", "", ty, false), 0.0, 0.0, 0.0);
            assert_score(rouge("a b", "", ty, true), 0.0, 0.0, 0.0);
        }
        assert_score(rouge("a b", "a b", RougeType::N(3), false), 0.0, 0.0, 0.0);
        assert_score(
            rouge_lsum_sentences(&["", " "], &["a"], false),
            0.0,
            0.0,
            0.0,
        );
    }
}
