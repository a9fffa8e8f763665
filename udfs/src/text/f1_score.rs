//! `f1_score(response, ground_truth)`: token-overlap F1 as Azure's F1ScoreEvaluator.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::sync::LazyLock;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::Result;
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDFImpl, Signature,
};

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
        // Token buffers reused across rows: the kernel allocates only when a text is
        // longer than any before it.
        static BUFFERS: RefCell<(QaTokens, QaTokens)> = RefCell::default();
    }
    BUFFERS.with_borrow_mut(|(predicted, reference)| {
        predicted.tokenize(response);
        reference.tokenize(ground_truth);
        f1_of(predicted, reference)
    })
}

fn f1_of(predicted: &QaTokens, reference: &QaTokens) -> f64 {
    if predicted.is_empty() || reference.is_empty() {
        return 0.0;
    }
    // Multiset overlap (sum over tokens of the smaller count) by merging the token lists
    // sorted in one shared total order: by an 8-byte prefix key first, so most
    // comparisons are one integer compare, then by the whole string. Equal tokens are
    // equal in that order and vice versa, which is all the merge needs.
    let mut pred: Vec<(u64, &str)> = predicted.iter().map(keyed).collect();
    let mut refs: Vec<(u64, &str)> = reference.iter().map(keyed).collect();
    pred.sort_unstable();
    refs.sort_unstable();
    let (mut i, mut j, mut common) = (0, 0, 0usize);
    while i < pred.len() && j < refs.len() {
        match pred[i].cmp(&refs[j]) {
            Ordering::Equal => {
                common += 1;
                i += 1;
                j += 1;
            }
            Ordering::Less => i += 1,
            Ordering::Greater => j += 1,
        }
    }
    if common == 0 {
        return 0.0;
    }
    // Same operation order as the Python: 1.0 * common / len, then 2pr / (p + r).
    let precision = 1.0 * common as f64 / predicted.len() as f64;
    let recall = 1.0 * common as f64 / reference.len() as f64;
    (2.0 * precision * recall) / (precision + recall)
}

/// A token with its first 8 bytes (zero-padded) as a big-endian integer.
#[inline]
fn keyed(t: &str) -> (u64, &str) {
    let mut head = [0u8; 8];
    let n = t.len().min(8);
    head[..n].copy_from_slice(&t.as_bytes()[..n]);
    (u64::from_be_bytes(head), t)
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
}
