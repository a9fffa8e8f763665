//! Deterministic text metrics, each equal to a reference implementation (see
//! `tests/golden/README.md`). Tokenisers shared by several metrics live beside them:
//! `tokenize_qa` (Azure F1), `rouge::tokenize` with `porter` (rouge-score), `tokenize_13a`
//! (sacreBLEU), `nltk` (Azure's NLTK tokens for BLEU, GLEU and METEOR, and Punkt sentences);
//! `wordnet` is METEOR's synonym data; `pystr` and `pymath` hold the Python string and
//! float rules the references depend on; `ngrams` counts token n-grams; `swar` tests eight
//! bytes at once for the tokenizers' hot loops.

pub mod bleu;
pub mod chrf;
pub mod corpus;
pub mod corpus_bleu;
pub mod corpus_chrf;
pub mod exact_match;
pub mod f1_score;
pub mod gleu;
pub mod intern;
pub mod meteor;
/// The text family's functions.
pub fn functions() -> crate::common::Functions {
    crate::common::Functions {
        scalar: scalar_functions(),
        aggregate: aggregate_functions(),
        ..Default::default()
    }
}

#[cfg(test)]
pub(crate) mod mutations;
pub mod ngrams;
pub mod nltk;
pub mod porter;
pub mod pymath;
pub mod pystr;
#[cfg(test)]
mod robustness;
pub mod rouge;
pub mod rouge_fmeasure;
pub mod rouge_tokenize;
pub mod sacrebleu;
pub mod swar;
pub mod tokenize_13a;
pub mod tokenize_qa;
pub mod wordnet;

use std::sync::Arc;

use datafusion::logical_expr::{AggregateUDF, ScalarUDF};

/// Every scalar text metric.
pub fn scalar_functions() -> Vec<Arc<ScalarUDF>> {
    vec![
        Arc::new(ScalarUDF::from(exact_match::ExactMatchFunc::default())),
        Arc::new(ScalarUDF::from(f1_score::F1ScoreFunc::default())),
        Arc::new(ScalarUDF::from(bleu::BleuFunc::default())),
        Arc::new(ScalarUDF::from(gleu::GleuFunc::default())),
        Arc::new(ScalarUDF::from(meteor::MeteorFunc::default())),
        Arc::new(ScalarUDF::from(rouge::RougeFunc::default())),
        Arc::new(ScalarUDF::from(rouge_fmeasure::RougeFMeasureFunc::rouge_1())),
        Arc::new(ScalarUDF::from(rouge_fmeasure::RougeFMeasureFunc::rouge_2())),
        Arc::new(ScalarUDF::from(rouge_fmeasure::RougeFMeasureFunc::rouge_l())),
        Arc::new(ScalarUDF::from(
            rouge_fmeasure::RougeFMeasureFunc::rouge_l_sum(),
        )),
        Arc::new(ScalarUDF::from(sacrebleu::SacreBleuFunc::default())),
        Arc::new(ScalarUDF::from(chrf::ChrfFunc::default())),
    ]
}

/// Every corpus-level text metric.
pub fn aggregate_functions() -> Vec<Arc<AggregateUDF>> {
    vec![
        Arc::new(AggregateUDF::from(corpus_bleu::CorpusBleuFunc::default())),
        Arc::new(AggregateUDF::from(corpus_chrf::CorpusChrfFunc::default())),
    ]
}
