//! `gleu(response, ground_truth)`: sentence GLEU as Azure's GleuScoreEvaluator computes it
//! (NLTK `sentence_gleu` on Azure's tokens).

use std::sync::LazyLock;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::Result;
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDFImpl, Signature,
};

use super::ngrams::{self, Interner};
use crate::common::docs::TEXT_METRICS;
use crate::common::signature::{Param, named};

static DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        TEXT_METRICS,
        "Sentence GLEU (0-1) of the response against the ground truth, equal to Azure AI \
         Evaluation's GleuScoreEvaluator: both texts are tokenized as Azure does (NLTK \
         word_tokenize for ASCII text, NLTK's NIST international tokenizer otherwise), then \
         NLTK sentence_gleu: the shared 1- to 4-grams (as multisets) divided by the larger of \
         the two sides' n-gram counts. 0.0 when both sides are empty. NULL in either argument \
         gives NULL.",
        "gleu(response, ground_truth)",
    )
    .with_sql_example("SELECT gleu('The cat sat on the mat.', 'The cat is on the mat.');")
    .with_argument("response", "The model's answer (string).")
    .with_argument("ground_truth", "The expected answer (string).")
    .build()
});

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct GleuFunc {
    signature: Signature,
}

impl Default for GleuFunc {
    fn default() -> Self {
        Self {
            signature: named(&[("response", Param::Text), ("ground_truth", Param::Text)]),
        }
    }
}

impl ScalarUDFImpl for GleuFunc {
    fn name(&self) -> &str {
        "gleu"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        ngrams::invoke_azure_ids(self.name(), &args.args, args.number_rows, gleu_ids)
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&DOC)
    }
}

/// Azure's GLEU of two texts.
pub fn gleu(response: &str, ground_truth: &str) -> f64 {
    ngrams::with_azure_ids(response, ground_truth, gleu_ids)
}

/// NLTK `sentence_gleu([reference], hypothesis)` (orders 1 to 4).
pub fn gleu_tokens(reference: &[&str], hypothesis: &[&str]) -> f64 {
    let mut interner = Interner::default();
    let hyp = interner.ids(hypothesis);
    let refr = interner.ids(reference);
    gleu_ids(&refr, &hyp, interner.len())
}

/// [`gleu_tokens`] on interned tokens (ids below `n_ids`). NLTK counts the everygrams
/// of orders 1-4 together; n-grams of different orders are never equal, so the
/// intersection of the everygram multisets is the sum of the per-order intersections,
/// and each side's total is its number of n-grams of every order.
fn gleu_ids(refr: &[u32], hyp: &[u32], n_ids: usize) -> f64 {
    let total = |len: usize| -> u64 { (1..=4).map(|n| ngrams::count_of_order(len, n)).sum() };
    let n_all = total(hyp.len()).max(total(refr.len()));
    if n_all == 0 {
        return 0.0;
    }
    let overlap: u64 = ngrams::overlaps(hyp, refr, n_ids).iter().sum();
    overlap as f64 / n_all as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nltk_values() {
        // nltk 3.10.4 sentence_gleu([ref], hyp)
        let r: Vec<&str> = "the cat is on the mat".split(' ').collect();
        let h: Vec<&str> = "the cat sat on the mat".split(' ').collect();
        assert_eq!(gleu_tokens(&r, &h), 0.5);
        assert_eq!(gleu_tokens(&[], &[]), 0.0);
        assert_eq!(gleu_tokens(&["a"], &[]), 0.0);
    }
}
