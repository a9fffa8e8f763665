//! `f1_score(response, ground_truth)`: token-overlap F1 as Azure's F1ScoreEvaluator.

use std::cell::RefCell;
use std::sync::LazyLock;

use ahash::AHashMap;
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
    let mut available: AHashMap<&str, usize> = AHashMap::with_capacity(reference.len());
    for t in reference.iter() {
        *available.entry(t).or_insert(0) += 1;
    }
    let mut common = 0usize;
    for t in predicted.iter() {
        if let Some(n) = available.get_mut(t)
            && *n > 0
        {
            *n -= 1;
            common += 1;
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
