//! `corpus_chrf(response, ground_truth)`: corpus-level chrF over the rows of a group.

use std::sync::LazyLock;

use datafusion::logical_expr::Documentation;

use super::chrf::{ChrfStats, chrf_score, chrf_stats};
use super::corpus::{CorpusFunc, CorpusStats};
use crate::common::docs::CORPUS_METRICS;

static DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        CORPUS_METRICS,
        "Corpus chrF (0-100) of all responses of a group against their references, equal to \
         sacreBLEU 2.6.0's corpus_chrf (character orders 1-6, beta 2): character n-gram counts \
         are summed over the rows before the F-score is taken. With several references per \
         row, each row contributes the counts of its best-scoring reference. Rows with a NULL \
         response or ground truth are left out; a group with no rows gives NULL.",
        "corpus_chrf(response, ground_truth)",
    )
    .with_sql_example(
        "SELECT model, corpus_chrf(response, ground_truth) FROM 'data/qa.jsonl' GROUP BY model;",
    )
    .with_argument("response", "The model's output (string).")
    .with_argument(
        "ground_truth",
        "One reference (string) or several (list of strings).",
    )
    .build()
});

/// The aggregate: [`CorpusFunc`] over chrF's character n-gram counts.
pub type CorpusChrfFunc = CorpusFunc<ChrfStats>;

impl CorpusStats for ChrfStats {
    const NAME: &'static str = "corpus_chrf";
    const COUNTERS: &'static [&'static str] = &[
        "hyp1", "ref1", "match1", "hyp2", "ref2", "match2", "hyp3", "ref3", "match3", "hyp4",
        "ref4", "match4", "hyp5", "ref5", "match5", "hyp6", "ref6", "match6",
    ];

    fn documentation() -> &'static Documentation {
        &DOC
    }

    fn from_row(hypothesis: &str, references: &[&str]) -> Self {
        chrf_stats(hypothesis, references)
    }

    fn add(&mut self, other: &Self) {
        self.merge(other);
    }

    fn counters(&self) -> Vec<u64> {
        self.as_slice().to_vec()
    }

    fn from_counters(counters: &[u64]) -> Self {
        ChrfStats::from_slice(counters).expect("state holds one value per counter")
    }

    fn score(&self) -> f64 {
        chrf_score(self)
    }
}
