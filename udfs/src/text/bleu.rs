//! `bleu(response, ground_truth)`: sentence BLEU as Azure's BleuScoreEvaluator computes it
//! (NLTK `sentence_bleu` on Azure's tokens, smoothing method 4).

use std::sync::LazyLock;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::Result;
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDFImpl, Signature,
};

use super::ngrams::{self, Interner};
use super::pymath::fsum;
use crate::common::docs::TEXT_METRICS;
use crate::common::signature::{Param, named};

static DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        TEXT_METRICS,
        "Sentence BLEU (0-1) of the response against the ground truth, equal to Azure AI \
         Evaluation's BleuScoreEvaluator: both texts are tokenized as Azure does (NLTK \
         word_tokenize for ASCII text, NLTK's NIST international tokenizer otherwise), then \
         NLTK sentence_bleu with uniform 4-gram weights and smoothing method 4, case-sensitive. \
         0.0 when no unigram matches. NULL in either argument gives NULL.",
        "bleu(response, ground_truth)",
    )
    .with_sql_example("SELECT bleu('The cat sat on the mat.', 'The cat is on the mat.');")
    .with_argument("response", "The model's answer (string).")
    .with_argument("ground_truth", "The expected answer (string).")
    .build()
});

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct BleuFunc {
    signature: Signature,
}

impl Default for BleuFunc {
    fn default() -> Self {
        Self {
            signature: named(&[("response", Param::Text), ("ground_truth", Param::Text)]),
        }
    }
}

impl ScalarUDFImpl for BleuFunc {
    fn name(&self) -> &str {
        "bleu"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        ngrams::invoke_azure_ids(self.name(), &args.args, args.number_rows, bleu_ids)
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&DOC)
    }
}

/// Azure's BLEU of two texts.
pub fn bleu(response: &str, ground_truth: &str) -> f64 {
    ngrams::with_azure_ids(response, ground_truth, bleu_ids)
}

/// NLTK `sentence_bleu([reference], hypothesis, smoothing_function=method4)` with weights
/// (0.25, 0.25, 0.25, 0.25), reproducing its float operations: `Fraction` precisions turned
/// into floats by exact division, method 4's `1 / (2^k · 5 / ln(hyp_len)) / denominator` for
/// zero-match orders (left at 0, and so skipped, when the hypothesis has one token), the
/// logs summed with `math.fsum`, and `exp(1 - r/c)` as brevity penalty.
pub fn bleu_tokens(reference: &[&str], hypothesis: &[&str]) -> f64 {
    let mut interner = Interner::default();
    let hyp = interner.ids(hypothesis);
    let refr = interner.ids(reference);
    bleu_ids(&refr, &hyp, interner.len())
}

/// [`bleu_tokens`] on interned tokens (ids below `n_ids`). The denominators are the
/// numbers of hypothesis n-grams (the sum of its n-gram counts), at least 1.
fn bleu_ids(refr: &[u32], hyp: &[u32], n_ids: usize) -> f64 {
    let numerators = ngrams::overlaps(hyp, refr, n_ids);
    let denominators: [u64; 4] =
        std::array::from_fn(|i| ngrams::count_of_order(hyp.len(), i + 1).max(1));
    if numerators[0] == 0 {
        return 0.0;
    }
    let hyp_len = hyp.len();
    let ref_len = refr.len();

    // Method 4 smoothing (epsilon 0.1, alpha 5, k 5): only k = 5 takes part.
    let mut p = [0.0f64; 4];
    let mut k_power = 1i32;
    for i in 0..4 {
        p[i] = if numerators[i] == 0 && hyp_len > 1 {
            let numerator = 1.0 / ((2f64.powi(k_power) * 5.0) / (hyp_len as f64).ln());
            k_power += 1;
            numerator / denominators[i] as f64
        } else {
            numerators[i] as f64 / denominators[i] as f64
        };
    }
    let bp = if hyp_len > ref_len {
        1.0
    } else if hyp_len == 0 {
        0.0
    } else {
        (1.0 - ref_len as f64 / hyp_len as f64).exp()
    };
    let log_sum = fsum(p.iter().filter(|&&p| p > 0.0).map(|&p| 0.25 * p.ln()));
    bp * log_sum.exp()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<&str> {
        s.split(' ').collect()
    }

    #[test]
    fn nltk_values() {
        // nltk 3.10.4: sentence_bleu([ref], hyp, smoothing_function=SmoothingFunction().method4)
        let r = toks(
            "It is a guide to action that ensures that the military will forever heed Party commands",
        );
        let h = toks(
            "It is a guide to action which ensures that the military always obeys the commands of the party",
        );
        assert!((bleu_tokens(&r, &h) - 0.41180376356915777).abs() < 1e-15);
        // One matching token: the zero orders are skipped, so 1.0.
        assert_eq!(bleu_tokens(&["a"], &["a"]), 1.0);
        assert_eq!(bleu_tokens(&["a"], &["b"]), 0.0);
        assert_eq!(bleu_tokens(&["a"], &[]), 0.0);
    }
}
