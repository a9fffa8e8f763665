//! The ranked-retrieval metrics as SQL functions: `ndcg_at_k`, `precision_at_k`,
//! `recall_at_k`, `hit_rate_at_k` `(retrieved, qrels, k)` and `reciprocal_rank`,
//! `average_precision` `(retrieved, qrels)`. One struct serves the six names (kernels in
//! [`super::ranking`]); each is registered as its own function. MRR and MAP are `avg` of the
//! last two over queries.

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::common::{Result, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDFImpl, Signature,
};

use super::input::{JudgementsColumn, RankedIds, is_judgements_type, is_ranked_list_type};
use super::ranking::Ranking;
use crate::common::docs::RETRIEVAL_METRICS;
use crate::common::signature::user_defined;
use crate::common::{float64_rows, rows_of};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Ndcg,
    Precision,
    Recall,
    HitRate,
    ReciprocalRank,
    AveragePrecision,
}

impl Kind {
    fn takes_k(self) -> bool {
        !matches!(self, Kind::ReciprocalRank | Kind::AveragePrecision)
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct RetrievalFunc {
    name: &'static str,
    kind: Kind,
    signature: Signature,
    doc: Documentation,
}

const INPUTS: &str = "retrieved is the ranked list of document ids (a list, or JSON text \
    [\"d1\", \"d2\"]), best first; qrels are the graded judgements (JSON text {\"d1\": 2, \
    \"d2\": 0}, a map, or a list of {id, relevance}); a grade of 1 or more is relevant and an \
    unjudged document is not. Equal to trec_eval (pytrec-eval-terrier). A repeated id keeps \
    its first position; empty qrels or a NULL argument give NULL.";

impl RetrievalFunc {
    fn new(name: &'static str, kind: Kind, what: &str, measure: &str) -> Self {
        let usage = if kind.takes_k() {
            format!("{name}(retrieved, qrels, k)")
        } else {
            format!("{name}(retrieved, qrels)")
        };
        let mut doc = Documentation::builder(
            RETRIEVAL_METRICS,
            format!("{what} (trec_eval {measure}). {INPUTS}"),
            usage,
        )
        .with_argument(
            "retrieved",
            "The ranked document ids, best first (a list, or a JSON array as text).",
        )
        .with_argument(
            "qrels",
            "The graded relevance of the judged documents (JSON object text, a map, or a \
             list of {id, relevance}).",
        );
        if kind.takes_k() {
            doc = doc.with_argument("k", "The cutoff rank, an integer of at least 1.");
        }
        Self {
            name,
            kind,
            signature: user_defined(),
            doc: doc.build(),
        }
    }

    pub fn ndcg() -> Self {
        Self::new(
            "ndcg_at_k",
            Kind::Ndcg,
            "Normalised discounted cumulative gain of the top k: the grade is the gain, rank \
             1 is not discounted and rank r >= 2 is divided by log2(r), over the same sum for \
             the best possible ranking of every positive judgement; 0 without one",
            "ndcg_cut_k",
        )
    }

    pub fn precision() -> Self {
        Self::new(
            "precision_at_k",
            Kind::Precision,
            "The share of the top k that is relevant, always over k (fewer retrieved \
             documents count as misses)",
            "P_k",
        )
    }

    pub fn recall() -> Self {
        Self::new(
            "recall_at_k",
            Kind::Recall,
            "The share of the relevant documents found in the top k; 0 when no document is \
             relevant",
            "recall_k",
        )
    }

    pub fn hit_rate() -> Self {
        Self::new(
            "hit_rate_at_k",
            Kind::HitRate,
            "1.0 when a relevant document is in the top k, else 0.0; avg() of it is the hit \
             rate",
            "success_k",
        )
    }

    pub fn reciprocal_rank() -> Self {
        Self::new(
            "reciprocal_rank",
            Kind::ReciprocalRank,
            "1 / the rank of the first relevant document, 0 when none is retrieved; avg() of \
             it is MRR",
            "recip_rank",
        )
    }

    pub fn average_precision() -> Self {
        Self::new(
            "average_precision",
            Kind::AveragePrecision,
            "The mean, over the relevant documents, of the precision at the rank each is \
             retrieved (0 for those never retrieved); avg() of it is MAP",
            "map",
        )
    }
}

impl ScalarUDFImpl for RetrievalFunc {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let name = self.name;
        let arity = if self.kind.takes_k() { 3 } else { 2 };
        let usage = &self.doc.syntax_example;
        if arg_types.len() != arity {
            return plan_err!("{name} takes {arity} arguments: {usage}");
        }
        let mut out = arg_types.to_vec();
        if !is_ranked_list_type(&arg_types[0]) {
            return plan_err!(
                "{name}: retrieved must be a list of ids or JSON text, got {}; usage: {usage}",
                arg_types[0]
            );
        }
        if !is_judgements_type(&arg_types[1]) {
            return plan_err!(
                "{name}: qrels must be JSON text, a map or a list of {{id, relevance}}, got \
                 {}; usage: {usage}",
                arg_types[1]
            );
        }
        for (i, t) in arg_types.iter().enumerate().take(2) {
            if t.is_null() {
                out[i] = DataType::Utf8;
            }
        }
        if arity == 3 {
            if !(arg_types[2].is_integer() || arg_types[2].is_null()) {
                return plan_err!(
                    "{name}: k must be an integer, got {}; usage: {usage}",
                    arg_types[2]
                );
            }
            out[2] = DataType::Int64;
        }
        Ok(out)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let name = self.name;
        let call = rows_of(&args)?;
        let retrieved = RankedIds::new(&call.arrays[0])?;
        let qrels = JudgementsColumn::new(&call.arrays[1])?;
        // Fixed judgements (a literal) are parsed once for every row.
        let fixed = if call.is_scalar(1) {
            Some(qrels.get(name, 0)?)
        } else {
            None
        };
        let k = self
            .kind
            .takes_k()
            .then(|| call.arrays[2].as_primitive::<Int64Type>().clone());
        float64_rows(call.all_scalar, call.rows, |row| {
            let k = match &k {
                None => 0,
                Some(k) if k.is_null(call.at(2, row)) => return Ok(None),
                Some(k) => match k.value(call.at(2, row)) {
                    k if k >= 1 => usize::try_from(k).unwrap_or(usize::MAX),
                    k => return exec_err!("{name}: k must be at least 1, got {k}"),
                },
            };
            let Some(ids) = retrieved.get(name, call.at(0, row))? else {
                return Ok(None);
            };
            let parsed;
            let judgements = match &fixed {
                Some(j) => j.as_ref(),
                None => {
                    parsed = qrels.get(name, row)?;
                    parsed.as_ref()
                }
            };
            let Some(judgements) = judgements else {
                return Ok(None);
            };
            if judgements.is_empty() {
                return Ok(None);
            }
            let ranking = Ranking::new(ids.iter().map(String::as_str), judgements);
            Ok(Some(match self.kind {
                Kind::Ndcg => ranking.ndcg_at(k),
                Kind::Precision => ranking.precision_at(k),
                Kind::Recall => ranking.recall_at(k),
                Kind::HitRate => ranking.hit_at(k),
                Kind::ReciprocalRank => ranking.reciprocal_rank(),
                Kind::AveragePrecision => ranking.average_precision(),
            }))
        })
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&self.doc)
    }
}
