//! `pairwise_preference(query, response_a, response_b [, criteria])`: which of two responses
//! a judge prefers, as 'A', 'B' or 'TIE'.
//!
//! Judges favour whichever answer they read first (or second) more often than chance, so
//! every pair is judged twice, once in each order (`udfs/rubrics/pairwise_preference.md`:
//! 1 = the first shown is better, 2 = the second, 3 = tie). The verdict is the one both
//! orders agree on; when they disagree, the preference followed the position, not the
//! answers, and the verdict is 'TIE' (as Vertex AI's pairwise metrics and MT-Bench do).
//! NULL when an input is NULL or either call failed. Both calls go through the judge engine
//! (limiter, retries, cache); `win_rate` aggregates the verdicts.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::StringArray;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, internal_err, plan_err};
use datafusion::logical_expr::async_udf::{AsyncScalarUDF, AsyncScalarUDFImpl};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    TypeSignature, Volatility,
};
use futures::future::join_all;

use crate::common::docs::JUDGE_METRICS;
use crate::common::{argument_arrays, texts};
use crate::judge::engine::progress::STATS;
use crate::judge::engine::{CallInputs, JudgeBatch, Outcome, Status};
use crate::judge::rubric::builtin;
use crate::judge::settings::JudgeSettings;

const NAME: &str = "pairwise_preference";

/// The SQL function.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct PairwiseFunc {
    signature: Signature,
    doc: Documentation,
}

impl Default for PairwiseFunc {
    fn default() -> Self {
        Self {
            signature: Signature::one_of(
                vec![TypeSignature::Any(3), TypeSignature::Any(4)],
                Volatility::Stable,
            ),
            doc: documentation(),
        }
    }
}

/// The verdict of one call, in terms of A and B.
fn verdict(outcome: &Outcome, a_first: bool) -> Option<&'static str> {
    if outcome.status != Status::Ok {
        return None;
    }
    Some(match (outcome.score? as i64, a_first) {
        (1, true) | (2, false) => "A",
        (2, true) | (1, false) => "B",
        _ => "TIE",
    })
}

/// Both orders agree, or it is a tie.
fn combine(first: Option<&'static str>, second: Option<&'static str>) -> Option<&'static str> {
    match (first?, second?) {
        (x, y) if x == y => Some(x),
        _ => Some("TIE"),
    }
}

impl PairwiseFunc {
    async fn run(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let n = args.number_rows;
        let arrays = argument_arrays(&args)?;
        let columns: Vec<Vec<Option<String>>> = arrays.iter().map(texts).collect::<Result<_>>()?;
        let settings = JudgeSettings::from_config(NAME, &args.config_options)?;
        let rubric = builtin(NAME)?;
        let mut batch = JudgeBatch::new(NAME, rubric, settings).await?;

        // Per row: the two calls (A shown first, then B shown first) with their keys.
        let plans: Vec<Option<[(String, CallInputs); 2]>> = (0..n)
            .map(|row| {
                let (q, a, b) = (
                    columns[0][row].clone()?,
                    columns[1][row].clone()?,
                    columns[2][row].clone()?,
                );
                let criteria = columns.get(3).and_then(|c| c[row].clone());
                let inputs = |first: &str, second: &str| {
                    let mut i: CallInputs = vec![
                        ("query".into(), q.clone()),
                        ("first_response".into(), first.to_string()),
                        ("second_response".into(), second.to_string()),
                    ];
                    if let Some(c) = &criteria {
                        i.push(("criteria".into(), c.clone()));
                    }
                    i
                };
                let ab = inputs(&a, &b);
                let ba = inputs(&b, &a);
                Some([(batch.key(&ab), ab), (batch.key(&ba), ba)])
            })
            .collect();
        STATS.rows_received(n as u64);
        batch.note_rows(NAME, n, plans.iter().filter(|p| p.is_none()).count());
        let calls: Vec<(&String, &CallInputs)> = plans
            .iter()
            .flatten()
            .flat_map(|p| [(&p[0].0, &p[0].1), (&p[1].0, &p[1].1)])
            .collect();
        let keys: Vec<&String> = calls.iter().map(|(k, _)| *k).collect();
        batch.prefetch(&keys).await?;
        batch.run_batch(&calls).await?;

        let batch = &batch;
        let verdicts = join_all(plans.iter().map(|plan| async move {
            let v = match plan {
                None => {
                    STATS.skipped();
                    None
                }
                Some([(k1, i1), (k2, i2)]) => {
                    let (o1, o2) = futures::join!(batch.judge(k1, i1), batch.judge(k2, i2));
                    let v = combine(verdict(&o1, true), verdict(&o2, false));
                    if v.is_none() {
                        STATS.error();
                    }
                    v
                }
            };
            STATS.row_done();
            v
        }))
        .await;
        Ok(ColumnarValue::Array(Arc::new(
            verdicts.into_iter().collect::<StringArray>(),
        )))
    }
}

/// The reference text: what it measures from the rubric file, the rest from here.
fn documentation() -> Documentation {
    let about = match builtin(NAME) {
        Ok(r) => format!(
            "{} Rubric {} (udfs/rubrics/{NAME}.md).",
            r.description.as_deref().unwrap_or_default(),
            r.version_tag()
        ),
        Err(e) => e.to_string(),
    };
    Documentation::builder(
        JUDGE_METRICS,
        format!(
            "{about} When the two orders disagree the verdict is 'TIE'. Optional criteria say \
             what 'better' means. NULL when an input is NULL or a call failed. Aggregate with \
             win_rate(choice, 'A')."
        ),
        "pairwise_preference(query, response_a, response_b [, criteria])",
    )
    .with_argument("query", "What both responses answer.")
    .with_argument("response_a", "The first system's response.")
    .with_argument("response_b", "The second system's response.")
    .with_argument("criteria", "Optional: what makes a response better.")
    .build()
}

impl ScalarUDFImpl for PairwiseFunc {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        if !matches!(arg_types.len(), 3 | 4) {
            return plan_err!(
                "pairwise_preference takes (query, response_a, response_b [, criteria])"
            );
        }
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        internal_err!("{NAME} is asynchronous and runs through AsyncFuncExec")
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&self.doc)
    }
}

#[async_trait]
impl AsyncScalarUDFImpl for PairwiseFunc {
    async fn invoke_async_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        self.run(args).await
    }
}

/// The function as a DataFusion UDF.
pub fn scalar_function() -> Arc<ScalarUDF> {
    Arc::new(AsyncScalarUDF::new(Arc::new(PairwiseFunc::default())).into_scalar_udf())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(score: f64) -> Outcome {
        Outcome {
            status: Status::Ok,
            score: Some(score),
            ..Outcome::skipped()
        }
    }

    #[test]
    fn both_orders_must_agree() {
        // A shown first and preferred (1); then B shown first and A (second) preferred (2).
        assert_eq!(
            combine(verdict(&ok(1.0), true), verdict(&ok(2.0), false)),
            Some("A")
        );
        assert_eq!(
            combine(verdict(&ok(2.0), true), verdict(&ok(1.0), false)),
            Some("B")
        );
        // Always the first shown: position bias, a tie.
        assert_eq!(
            combine(verdict(&ok(1.0), true), verdict(&ok(1.0), false)),
            Some("TIE")
        );
        assert_eq!(
            combine(verdict(&ok(3.0), true), verdict(&ok(3.0), false)),
            Some("TIE")
        );
        assert_eq!(
            combine(verdict(&ok(1.0), true), verdict(&Outcome::skipped(), false)),
            None
        );
    }
}
