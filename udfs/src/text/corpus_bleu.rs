//! `corpus_bleu(response, ground_truth)`: corpus-level sacreBLEU over the rows of a group.

use std::sync::LazyLock;

use datafusion::logical_expr::Documentation;

use super::corpus::{CorpusFunc, CorpusStats};
use super::sacrebleu::{BleuStats, bleu_score, bleu_stats};
use crate::common::docs::CORPUS_METRICS;

static DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        CORPUS_METRICS,
        "Corpus BLEU (0-100) of all responses of a group against their references, equal to \
         sacreBLEU 2.6.0's corpus_bleu with its defaults (13a tokens, exponential smoothing, no \
         effective order): n-gram matches and lengths are summed over the rows before the \
         precisions and the brevity penalty are taken, so it is not the mean of sentence BLEU. \
         ground_truth may be a list of references per row. Rows with a NULL response or \
         ground truth are left out; a group with no rows gives NULL.",
        "corpus_bleu(response, ground_truth)",
    )
    .with_sql_example(
        "SELECT model, corpus_bleu(response, ground_truth) FROM 'data/qa.jsonl' GROUP BY model;",
    )
    .with_argument("response", "The model's output (string).")
    .with_argument(
        "ground_truth",
        "One reference (string) or several (list of strings).",
    )
    .build()
});

/// The aggregate: [`CorpusFunc`] over sacreBLEU's sufficient statistics.
pub type CorpusBleuFunc = CorpusFunc<BleuStats>;

impl CorpusStats for BleuStats {
    const NAME: &'static str = "corpus_bleu";
    const COUNTERS: &'static [&'static str] = &[
        "sys_len", "ref_len", "correct1", "correct2", "correct3", "correct4", "total1", "total2",
        "total3", "total4",
    ];

    fn documentation() -> &'static Documentation {
        &DOC
    }

    fn from_row(hypothesis: &str, references: &[&str]) -> Self {
        bleu_stats(hypothesis, references)
    }

    fn add(&mut self, other: &Self) {
        self.merge(other);
    }

    fn counters(&self) -> Vec<u64> {
        self.to_array().to_vec()
    }

    fn from_counters(counters: &[u64]) -> Self {
        BleuStats::from_slice(counters).expect("state holds one value per counter")
    }

    fn score(&self) -> f64 {
        bleu_score(self, false)
    }
}
