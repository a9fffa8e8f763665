//! `f1_score(response, ground_truth)`: token-overlap F1 as Azure's F1ScoreEvaluator.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::sync::LazyLock;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::Result;
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDFImpl, Signature,
};

use super::intern::{home, token_key};
use super::tokenize_qa::QaTokens;
use crate::common::docs::TEXT_METRICS;
use crate::common::invoke_text_pair;
use crate::common::signature::{Param, named};

static DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        TEXT_METRICS,
        "Token-overlap F1 between response and ground truth, equal to Azure AI Evaluation's \
         F1ScoreEvaluator: both texts are lowercased, stripped of ASCII punctuation and of the \
         articles a/an/the, and split on whitespace; F1 is the harmonic mean of precision and \
         recall of the shared tokens (as multisets). 0.0 when nothing is shared, even when both \
         sides are empty. NULL in either argument gives NULL.",
        "f1_score(response, ground_truth)",
    )
    .with_sql_example("SELECT f1_score('The capital is Paris', 'Paris');  -- 0.5")
    .with_argument("response", "The model's answer (string).")
    .with_argument("ground_truth", "The expected answer (string).")
    .build()
});

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct F1ScoreFunc {
    signature: Signature,
}

impl Default for F1ScoreFunc {
    fn default() -> Self {
        Self {
            signature: named(&[("response", Param::Text), ("ground_truth", Param::Text)]),
        }
    }
}

impl ScalarUDFImpl for F1ScoreFunc {
    fn name(&self) -> &str {
        "f1_score"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        invoke_text_pair(self.name(), &args.args, args.number_rows, f1_score)
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&DOC)
    }
}

/// Azure's F1: multiset overlap of the normalised tokens.
pub fn f1_score(response: &str, ground_truth: &str) -> f64 {
    thread_local! {
        // Token buffers and the overlap table reused across rows: the kernel allocates
        // only when a text is longer than any before it.
        static BUFFERS: RefCell<(QaTokens, QaTokens, Overlap)> = RefCell::default();
    }
    BUFFERS.with_borrow_mut(|(predicted, reference, overlap)| {
        predicted.tokenize(response);
        reference.tokenize(ground_truth);
        f1_of(predicted, reference, overlap)
    })
}

fn f1_of(predicted: &QaTokens, reference: &QaTokens, overlap: &mut Overlap) -> f64 {
    if predicted.is_empty() || reference.is_empty() {
        return 0.0;
    }
    let common = overlap.common(predicted, reference);
    if common == 0 {
        return 0.0;
    }
    // Same operation order as the Python: 1.0 * common / len, then 2pr / (p + r).
    let precision = 1.0 * common as f64 / predicted.len() as f64;
    let recall = 1.0 * common as f64 / reference.len() as f64;
    (2.0 * precision * recall) / (precision + recall)
}

/// An open-addressing table counting the tokens of one side, for the multiset overlap
/// `sum(min(count_p(t), count_r(t)))` that Python's `Counter(p) & Counter(r)` gives.
///
/// Exact whatever the hash does: a slot matches a token only if its key and length are
/// equal ([`token_key`]: a token of at most 8 bytes is its key, nearly all of them) and,
/// for a longer token, its bytes; collisions cost probes, never a wrong count.
#[derive(Debug, Default)]
struct Overlap {
    slots: Vec<Slot>,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    key: u64,
    len: u32,
    /// Index of the token in the counted side, or [`EMPTY`].
    token: u32,
    /// Occurrences not yet matched.
    count: u32,
}

const EMPTY: u32 = u32::MAX;

impl Overlap {
    /// Tokens shared by `a` and `b`, counted with multiplicity. `b` goes in the table,
    /// then each token of `a` takes one of its remaining occurrences.
    fn common(&mut self, a: &QaTokens, b: &QaTokens) -> usize {
        // The table indexes tokens by u32; no real text gets near that.
        if b.len() >= EMPTY as usize {
            return sorted_common(a, b);
        }
        let size = (2 * b.len()).next_power_of_two().max(16);
        let mask = size - 1;
        self.slots.clear();
        self.slots.resize(
            size,
            Slot {
                key: 0,
                len: 0,
                token: EMPTY,
                count: 0,
            },
        );
        // Whether `slot` holds the token `t`, whose key is `key`.
        let holds = |slot: &Slot, key: u64, t: &[u8]| {
            slot.key == key
                && slot.len as usize == t.len()
                && (t.len() <= 8 || b.bytes(slot.token as usize) == t)
        };
        for (k, t) in b.iter_bytes().enumerate() {
            let key = token_key(t);
            let mut i = home(key, t.len() as u32) as usize & mask;
            loop {
                let slot = &mut self.slots[i];
                if slot.token == EMPTY {
                    *slot = Slot {
                        key,
                        len: t.len() as u32,
                        token: k as u32,
                        count: 1,
                    };
                    break;
                }
                if holds(slot, key, t) {
                    slot.count += 1;
                    break;
                }
                i = (i + 1) & mask;
            }
        }
        let mut common = 0;
        for t in a.iter_bytes() {
            let key = token_key(t);
            let mut i = home(key, t.len() as u32) as usize & mask;
            loop {
                let slot = &mut self.slots[i];
                if slot.token == EMPTY {
                    break;
                }
                if holds(slot, key, t) {
                    if slot.count > 0 {
                        slot.count -= 1;
                        common += 1;
                    }
                    break;
                }
                i = (i + 1) & mask;
            }
        }
        common
    }
}

/// The overlap by sorting both sides and merging (for sides too long for [`Overlap`]).
fn sorted_common(a: &QaTokens, b: &QaTokens) -> usize {
    let mut a: Vec<&str> = a.iter().collect();
    let mut b: Vec<&str> = b.iter().collect();
    a.sort_unstable();
    b.sort_unstable();
    let (mut i, mut j, mut common) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(b[j]) {
            Ordering::Equal => {
                common += 1;
                i += 1;
                j += 1;
            }
            Ordering::Less => i += 1,
            Ordering::Greater => j += 1,
        }
    }
    common
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap() {
        assert_eq!(
            f1_score("The capital is Paris", "Paris"),
            2.0 * (1.0 / 3.0) / (1.0 / 3.0 + 1.0)
        );
        assert_eq!(f1_score("paris paris", "Paris"), 2.0 * 0.5 / 1.5);
        // Nothing shared, even identical article-only texts: 0.0.
        assert_eq!(f1_score("a", "a"), 0.0);
        assert_eq!(f1_score("", ""), 0.0);
        assert_eq!(f1_score("same words", "same words"), 1.0);
    }

    proptest::proptest! {
        /// The hash-table overlap equals the sort-and-merge one, on tokens short and
        /// long, sharing prefixes or suffixes, non-ASCII, with many repeats.
        #[test]
        fn overlap_equals_sorted_merge(
            a in proptest::collection::vec(0usize..12, 0..40),
            b in proptest::collection::vec(0usize..12, 0..40),
        ) {
            const WORDS: [&str; 12] = [
                "x", "xy", "xyz", "abcd", "abce", "abcdefg", "abcdefgh", "bbcdefgh",
                "abcdefghi", "abcdefghij", "abcdefghik", "\u{e9}t\u{e9}",
            ];
            let text = |ws: &[usize]| ws.iter().map(|&w| WORDS[w]).collect::<Vec<_>>().join(" ");
            let (mut p, mut r) = (QaTokens::default(), QaTokens::default());
            p.tokenize(&text(&a));
            r.tokenize(&text(&b));
            let mut overlap = Overlap::default();
            proptest::prop_assert_eq!(overlap.common(&p, &r), sorted_common(&p, &r));
            proptest::prop_assert_eq!(overlap.common(&r, &p), sorted_common(&r, &p));
        }
    }
}
