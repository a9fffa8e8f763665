//! chrF exactly as sacrebleu 2.6.0 computes it with its defaults
//! (`sacrebleu/metrics/chrf.py`): character n-grams of orders 1..=6 over the text with
//! all (Python) whitespace removed, no word n-grams, beta 2, case-sensitive,
//! `eps_smoothing=False` (the "effective order" averaging of sacrebleu >= 2.0).
//!
//! Statistics are `[hyp, ref, match]` per order; summing per-row statistics
//! ([`ChrfStats::merge`]) and scoring once is exactly what `corpus_chrf` does.

use std::cell::RefCell;

use super::intern::IdMap;
use super::{pystr, swar};

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

/// Largest product (positions + 1) * (distinct characters + 1) of a row (hypothesis
/// plus one reference) for the fast path; larger rows go to [`chrf_stats_wide`].
const FAST_MAX_TABLE: usize = 1 << 22;
/// Extension tables larger than this many entries (2 MiB) are freed after their row.
const FAST_KEEP_TABLE: usize = 1 << 20;
/// Largest number of non-whitespace characters of a row (hypothesis plus one
/// reference) for the fast path: the n-gram numbers of one order must fit the `u16`
/// table entries.
const FAST_MAX_CHARS: usize = u16::MAX as usize - 1;

/// Marks whitespace in [`Fast::ascii_ids`] (never a real id: ids
/// are at most the number of characters of a row).
const ASCII_WHITESPACE: u32 = u32::MAX;
/// The ASCII whitespace bytes as bits (bit `b % 64` of word `b / 64`).
const ASCII_SPACE_BITS: [u64; 2] = {
    let mut t = [0u64; 2];
    let mut b = 0;
    while b < 128 {
        if pystr::ASCII_SPACE[b] {
            t[b / 64] |= 1 << (b % 64);
        }
        b += 1;
    }
    t
};
/// [`Fast::ascii_ids`] when new: whitespace marked; the other entries are written for
/// each row before they are read.
const ASCII_IDS_START: [u32; 256] = {
    let mut t = [0; 256];
    let mut b = 0;
    while b < 128 {
        if pystr::ASCII_SPACE[b] {
            t[b] = ASCII_WHITESPACE;
        }
        b += 1;
    }
    t
};

/// Entries of [`Fast::counts`]: one per `u16` n-gram number, so that a number indexes it
/// without a bounds check (numbers are at most [`FAST_MAX_CHARS`]).
const COUNTS: usize = 1 << 16;

/// The fast path's reusable memory: no sorting and no hashing of n-grams.
///
/// The characters of the hypothesis and of one reference, numbered densely (1..=A per
/// row), sit in one array. N-grams are numbered order by order: the order-`n` number of
/// position `i` is the number of the pair (order-`n-1` number of `i`, character at
/// `i+n-1`), looked up in a direct-indexed table of all such pairs. Equal n-grams get
/// equal numbers and different ones different numbers (by induction on `n`: the pair
/// determines the n-gram and vice versa), and the numbers of one order are dense, so
/// per-side counts are plain arrays and an order's matches are the sum over numbers of
/// min(hyp count, ref count), sacrebleu's multiset intersection.
///
/// Table entries are tagged by a generation: a value `<= base` is stale, so the table
/// is not cleared between orders or rows, only when the `u16` tag would overflow.
/// (`u16` entries keep the table of a typical row within the L1 cache.)
///
/// The inner loops index the table through a power-of-two mask and the counts through
/// a `u16`, so that they carry no bounds checks.
struct Fast {
    /// Id by ASCII byte ([`Fast::number_ascii`]; indexed by any byte, so without a
    /// bounds check, but only ASCII entries are read): whitespace holds
    /// [`ASCII_WHITESPACE`] for good, the entries of the bytes a row has are rewritten
    /// for that row, the others are stale and never read.
    ascii_ids: [u32; 256],
    /// Ids of the non-ASCII characters of a row, numbered after its ASCII ones.
    other: IdMap,
    n_ids: u32,
    /// The ids of the row's non-whitespace characters in `chars[..total]` (the vector
    /// only grows, so that loading a row writes it without clearing it first).
    chars: Vec<u32>,
    total: usize,
    /// N-gram numbers by position, for two consecutive orders.
    cur: [Vec<u32>; 2],
    /// `[hypothesis count, reference count]` by number (or by character id for
    /// order 1); all zero between uses.
    counts: Box<[[u32; 2]; COUNTS]>,
    /// Length a power of two (or 0).
    table: Vec<u16>,
    base: u32,
    /// Length of the table prefix written since it was last all zero.
    dirty: usize,
}

impl Default for Fast {
    fn default() -> Self {
        Fast {
            ascii_ids: ASCII_IDS_START,
            other: IdMap::seeded(),
            n_ids: 0,
            chars: Vec::new(),
            total: 0,
            cur: Default::default(),
            counts: vec![[0; 2]; COUNTS]
                .into_boxed_slice()
                .try_into()
                .expect("COUNTS entries"),
            table: Vec::new(),
            base: 0,
            dirty: 0,
        }
    }
}

impl Fast {
    /// Loads a row (the hypothesis and one reference) into `chars[..total]`; returns the
    /// hypothesis' number of non-whitespace characters.
    fn load_row(&mut self, hypothesis: &str, reference: &str) -> usize {
        // At most one character per byte.
        let need = hypothesis.len() + reference.len();
        if self.chars.len() < need {
            self.chars.resize(need, 0);
        }
        let hyp_len;
        let (hyp_bytes, ref_bytes) = (hypothesis.as_bytes(), reference.as_bytes());
        self.number_ascii(hyp_bytes, ref_bytes);
        if hypothesis.is_ascii() && reference.is_ascii() {
            hyp_len = self.load_ascii(0, hyp_bytes);
            self.total = hyp_len + self.load_ascii(hyp_len, ref_bytes);
        } else {
            // At most one non-ASCII character per two bytes.
            self.other.reset(need / 2 + 1);
            hyp_len = self.load(0, hypothesis);
            self.total = hyp_len + self.load(hyp_len, reference);
        }
        hyp_len
    }

    /// Dense ids for the ASCII bytes of a row, in byte order (any numbering is right
    /// as long as it is one-to-one), from one plain pass marking the bytes that occur:
    /// loading the row is then a plain pass too, without a "seen yet?" branch per byte,
    /// which mispredicts at every new character. (The bytes of non-ASCII characters
    /// are marked in the upper half of `seen` and left there.)
    fn number_ascii(&mut self, hypothesis: &[u8], reference: &[u8]) {
        let mut seen = [0u8; 256];
        // Two loops: a chained iterator compiled to twice the instructions per byte.
        for text in [hypothesis, reference] {
            for &b in text {
                seen[usize::from(b)] = 0x80;
            }
        }
        let seen = &seen[..128];
        let mut present = [0u64; 2];
        for (k, w) in seen.chunks_exact(8).enumerate() {
            present[k / 8] |= swar::gather(swar::word(w)) << (8 * (k % 8));
        }
        let mut n_ids = 0;
        for (half, (mut bits, space)) in present.into_iter().zip(ASCII_SPACE_BITS).enumerate() {
            bits &= !space;
            while bits != 0 {
                n_ids += 1;
                self.ascii_ids[64 * half + bits.trailing_zeros() as usize] = n_ids;
                bits &= bits - 1;
            }
        }
        self.n_ids = n_ids;
    }

    /// Writes the ids of the non-whitespace bytes of the ASCII `text` at
    /// `chars[start..]` (which has room for one per byte); returns how many.
    #[inline]
    fn load_ascii(&mut self, start: usize, text: &[u8]) -> usize {
        let out = &mut self.chars[start..start + text.len()];
        let mut n = 0;
        for &b in text {
            // Branch-free filter: the id is always written, only non-whitespace
            // advances (`n` stays at most the bytes read, so in bounds).
            let id = self.ascii_ids[usize::from(b)];
            out[n] = id;
            n += usize::from(id != ASCII_WHITESPACE);
        }
        n
    }

    /// [`Self::load_ascii`] for a row with non-ASCII text: the ASCII bytes take their
    /// ids from [`Self::number_ascii`], the other characters are handed ids as they
    /// first occur.
    fn load(&mut self, start: usize, text: &str) -> usize {
        let bytes = text.as_bytes();
        let out = &mut self.chars[start..start + bytes.len()];
        let (ascii_ids, other) = (&self.ascii_ids, &mut self.other);
        let mut n_ids = self.n_ids;
        let mut n = 0;
        let mut i = 0;
        while i < bytes.len() {
            // A run of ASCII bytes, as in `load_ascii`.
            for &b in &bytes[i..] {
                if b >= 128 {
                    break;
                }
                let id = ascii_ids[usize::from(b)];
                out[n] = id;
                n += usize::from(id != ASCII_WHITESPACE);
                i += 1;
            }
            // Then one other character. `i` is on a character boundary: it only ever
            // steps over whole characters.
            let Some(c) = text[i..].chars().next() else {
                break;
            };
            i += c.len_utf8();
            if !pystr::is_space(c) {
                let id = other.get_or_insert(u64::from(c), n_ids + 1);
                n_ids = n_ids.max(id);
                out[n] = id;
                n += 1;
            }
        }
        self.n_ids = n_ids;
        n
    }

    fn stats(&mut self, hypothesis: &str, references: &[&str]) -> Option<ChrfStats> {
        let mut best = ChrfStats::default();
        let mut best_f = -1.0f64;
        for r in references {
            // Rows of over 4 * FAST_MAX_CHARS bytes go to the general path unloaded (a
            // cheap cut: most of them have too many characters; the few that are mostly
            // whitespace are exact there too).
            if hypothesis.len() + r.len() > 4 * FAST_MAX_CHARS {
                return None;
            }
            let hyp_len = self.load_row(hypothesis, r);
            let m = self.matches(hyp_len)?;
            let st = stats_from_counts(hyp_len, self.total - hyp_len, &m);
            let f = chrf_score(&st);
            if f > best_f {
                best_f = f;
                best = st;
            }
        }
        if self.table.len() > FAST_KEEP_TABLE {
            self.table = Vec::new();
            self.base = 0;
            self.dirty = 0;
        }
        Some(best)
    }

    /// Matches per order between `self.chars[..hyp_len]` and
    /// `self.chars[hyp_len..self.total]`.
    fn matches(&mut self, hyp_len: usize) -> Option<[u64; CHAR_ORDER]> {
        let total = self.total;
        let width = self.n_ids as usize + 1;
        let size = (total + 1).checked_mul(width)?;
        // Character ids index the counts too (order 1). Implied by the bound on `total`
        // (an id is at most the row's number of characters); kept as the counts' guard.
        if size > FAST_MAX_TABLE || total > FAST_MAX_CHARS || width > COUNTS {
            return None;
        }
        // The table's length is a power of two at least `size`: keys (below `size`)
        // index it through `mask`, which the compiler sees cannot go out of bounds.
        let len = 1usize << (usize::BITS - (size - 1).leading_zeros());
        if self.table.len() < len {
            self.table.resize(len, 0);
        }
        let table = &mut self.table;
        let mask = len - 1;
        self.dirty = self.dirty.max(size);
        for buf in &mut self.cur {
            if buf.len() < total {
                buf.resize(total, 0);
            }
        }
        let counts = &mut *self.counts;
        let mut m = [0u64; CHAR_ORDER];
        // Order 1: the character ids themselves.
        let n_ids = self.n_ids as usize;
        let (chars_h, chars_r) = self.chars[..total].split_at(hyp_len);
        chars_h
            .iter()
            .for_each(|&id| counts[usize::from(id as u16)][0] += 1);
        m[0] = chars_r.iter().map(|&id| match_one(counts, id as u16)).sum();
        counts[..=n_ids].fill([0; 2]);
        let [buf_a, buf_b] = &mut self.cur;
        for n in 1..CHAR_ORDER {
            if m[n - 1] == 0 {
                // No shared n-gram of order n: no shared longer n-gram either.
                break;
            }
            // Positions with an (n+1)-gram in each text (at least n characters each,
            // as both have a shared n-gram); each gets a number, at most nh + nr.
            let (nh, nr) = (hyp_len - n, total - hyp_len - n);
            // This order hands out at most `total` numbers above `base`.
            if self.base as usize + total > u16::MAX as usize {
                table[..self.dirty].fill(0);
                self.base = 0;
                self.dirty = size;
            }
            // Order-n numbers by position (the characters for n = 1), and where the
            // order-(n+1) ones go; the two buffers alternate.
            let (prev, out): (&[u32], &mut [u32]) = match n {
                1 => (&self.chars, buf_a),
                _ if n % 2 == 0 => (buf_a, buf_b),
                _ => (buf_b, buf_a),
            };
            let mut num = Numbering {
                table: &mut table[..len],
                mask,
                width,
                base: self.base,
                next: self.base,
            };
            let (out_h, out_r) = out.split_at_mut(hyp_len);
            num.extend(&prev[..nh], &chars_h[n..], &mut out_h[..nh], |v| {
                counts[usize::from(v)][0] += 1
            });
            let mut matched = 0;
            num.extend(
                &prev[hyp_len..hyp_len + nr],
                &chars_r[n..],
                &mut out_r[..nr],
                |v| matched += match_one(counts, v),
            );
            let distinct = (num.next - num.base) as usize;
            self.base = num.next;
            m[n] = matched;
            counts[..=distinct].fill([0; 2]);
        }
        Some(m)
    }
}

/// Counts one reference occurrence of the n-gram (or character) numbered `v` and
/// returns 1 when it is matched: when fewer of them than the hypothesis has were seen
/// before it. Summed over a reference, that is sacrebleu's multiset intersection, the
/// sum over numbers of min(hyp count, ref count), without a pass over the numbers and
/// without a branch on the data.
#[inline(always)]
fn match_one(counts: &mut [[u32; 2]; COUNTS], v: u16) -> u64 {
    let [hyp, seen] = &mut counts[usize::from(v)];
    let matched = u64::from(*seen < *hyp);
    *seen += 1;
    matched
}

/// Hands out the numbers of one order: `table[prev * width + char]` holds the number
/// of the pair, valid when above `base` (stale otherwise); `next` is the last one given.
struct Numbering<'a> {
    /// Length `mask + 1`, a power of two above every key.
    table: &'a mut [u16],
    mask: usize,
    width: usize,
    base: u32,
    next: u32,
}

impl Numbering<'_> {
    /// Numbers the pairs (`prev[i]`, `next_chars[i]`) into `out[i]` (relative to
    /// `base`, so 1..), handing each number to `count`.
    #[inline(always)]
    fn extend(
        &mut self,
        prev: &[u32],
        next_chars: &[u32],
        out: &mut [u32],
        mut count: impl FnMut(u16),
    ) {
        let base = self.base;
        let mut next = self.next;
        for ((&p, &x), o) in prev.iter().zip(next_chars).zip(out) {
            // The mask changes nothing (keys are below the table's length); it shows
            // the compiler the index is in bounds.
            let key = (p as usize * self.width + x as usize) & self.mask;
            let v = u32::from(self.table[key]);
            let fresh = v <= base;
            next += u32::from(fresh);
            let v = if fresh { next } else { v };
            // v <= base + total <= u16::MAX (checked before each order).
            self.table[key] = v as u16;
            let v = (v - base) as u16;
            *o = u32::from(v);
            count(v);
        }
        self.next = next;
    }
}

/// [`match_stats`] from the two non-whitespace lengths and the matches per order.
fn stats_from_counts(hyp_len: usize, ref_len: usize, m: &[u64; CHAR_ORDER]) -> ChrfStats {
    let count = |len: usize, order: usize| (len + 1).saturating_sub(order) as u64;
    let mut st = ChrfStats::default();
    for (n, &matches) in m.iter().enumerate() {
        let order = n + 1;
        let n_ref = count(ref_len, order);
        // The hypothesis count is dropped when the reference has no n-gram of this order.
        st.counts[3 * n] = if n_ref > 0 { count(hyp_len, order) } else { 0 };
        st.counts[3 * n + 1] = n_ref;
        st.counts[3 * n + 2] = matches;
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

    // The fast path must agree with the general one, also with many distinct
    // characters, several references and empty texts; rows too large for its table
    // must fall back.
    #[test]
    fn fast_path_matches_wide_path() {
        let many: String = (0x4E00u32..0x4E00 + 1100)
            .filter_map(char::from_u32)
            .collect();
        // 20,000 + 19,998 characters: several table resets within the row.
        let long = "ab cd".repeat(5_000);
        let cases: &[(&str, &[&str])] = &[
            ("abc", &["abd", "abcx", "xyz"]),
            ("aa", &["ab"]),
            ("", &["reference"]),
            ("x y", &[""]),
            ("ababab", &["abab", "bababa", "a"]),
            (
                " Die Beziehung \u{a0}zwischen",
                &["Das Verh\u{e4}ltnis zwischen", "zw ischen"],
            ),
            (&many, &["\u{4e00}\u{4e01}"]),
            ("ab", &[&many]),
            (&long, &["abc", &long[3..]]),
        ];
        for &(h, r) in cases {
            assert_eq!(chrf_stats(h, r), chrf_stats_wide(h, r), "{h:?} {r:?}");
        }
        let mut f = Fast::default();
        let huge = format!("{many}{}", "ab cd".repeat(20_000));
        assert!(f.stats(&huge, &["a"]).is_none());
        assert!(f.stats("abc", &["x", &huge]).is_none());
        assert!(f.stats("abc", &["abd"]).is_some());
    }

    proptest::proptest! {
        /// The fast path equals the sorting one on random rows: small alphabets (many
        /// repeated n-grams), ASCII whitespace and controls, non-ASCII letters and
        /// spaces (the general loading), one to three references; the same `Fast` is
        /// reused across cases, as rows reuse it, so stale table entries and ids are
        /// exercised too.
        #[test]
        fn fast_path_equals_wide_path(
            hyp in "[ab c\t\n\x00\x1f.]{0,60}",
            refs in proptest::collection::vec("[ab c\t.\x00]{0,60}|[ab\u{e4}\u{3000}\u{4e00} c]{0,40}", 1..4),
        ) {
            thread_local! {
                static FAST: RefCell<Fast> = RefCell::default();
            }
            let refs: Vec<&str> = refs.iter().map(String::as_str).collect();
            let got = FAST.with_borrow_mut(|f| f.stats(&hyp, &refs));
            proptest::prop_assert_eq!(got, Some(chrf_stats_wide(&hyp, &refs)));
        }
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
