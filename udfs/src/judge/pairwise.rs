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
use datafusion::arrow::array::{ArrayRef, BooleanArray, StringArray, StructArray};
use datafusion::arrow::datatypes::{DataType, Field, Fields};
use datafusion::common::{Result, internal_err, plan_err};
use datafusion::logical_expr::async_udf::{AsyncScalarUDF, AsyncScalarUDFImpl};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    TypeSignature, Volatility,
};
use futures::future::join_all;

use crate::common::docs::JUDGE_METRICS;
use crate::common::{argument_arrays, texts};
use crate::judge::engine::{CallInputs, JudgeBatch, Outcome, Status};
use crate::judge::rubric::builtin;
use crate::llm::progress::STATS;
use crate::llm::settings::JudgeSettings;
use crate::llm::usage::{Usage, UsageColumns};

const NAME: &str = "pairwise_preference";
const DETAILS_NAME: &str = "pairwise_preference_details";

/// The SQL function: the verdict, or with `details` its struct.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct PairwiseFunc {
    signature: Signature,
    doc: Documentation,
    details: bool,
}

impl Default for PairwiseFunc {
    fn default() -> Self {
        Self {
            signature: Signature::one_of(
                vec![TypeSignature::Any(3), TypeSignature::Any(4)],
                Volatility::Stable,
            ),
            doc: documentation(false),
            details: false,
        }
    }
}

impl PairwiseFunc {
    /// `pairwise_preference_details`.
    pub fn details() -> Self {
        Self {
            doc: documentation(true),
            details: true,
            ..Self::default()
        }
    }
}

/// The fields of `pairwise_preference_details`: the verdict, each order's verdict, and the
/// two calls' outcome together (tokens and dollars summed).
fn details_fields() -> Fields {
    Fields::from(
        vec![
            Field::new("choice", DataType::Utf8, true),
            Field::new("a_first", DataType::Utf8, true),
            Field::new("b_first", DataType::Utf8, true),
            Field::new("reason", DataType::Utf8, true),
            Field::new("status", DataType::Utf8, true),
            Field::new("error", DataType::Utf8, true),
            Field::new("model", DataType::Utf8, true),
            Field::new("cached", DataType::Boolean, true),
        ]
        .into_iter()
        .chain(Usage::fields())
        .collect::<Vec<_>>(),
    )
}

/// One row's two outcomes (A shown first, B shown first); `None` when an input is NULL.
type Pair = Option<(Arc<Outcome>, Arc<Outcome>)>;

fn details_array(pairs: &[Pair]) -> StructArray {
    let text = |f: &dyn Fn(&Outcome, &Outcome) -> Option<String>| -> ArrayRef {
        Arc::new(
            pairs
                .iter()
                .map(|p| p.as_ref().and_then(|(a, b)| f(a, b)))
                .collect::<StringArray>(),
        )
    };
    let status = |a: &Outcome, b: &Outcome| {
        let s = match (a.status, b.status) {
            (Status::Error, _) | (_, Status::Error) => Status::Error,
            (Status::Skipped, _) | (_, Status::Skipped) => Status::Skipped,
            _ => Status::Ok,
        };
        Some(s.as_str().to_string())
    };
    let mut columns: Vec<ArrayRef> = vec![
        text(&|a, b| combine(verdict(a, true), verdict(b, false)).map(str::to_string)),
        text(&|a, _| verdict(a, true).map(str::to_string)),
        text(&|_, b| verdict(b, false).map(str::to_string)),
        text(&|a, b| {
            Some(format!(
                "A first: {} | B first: {}",
                a.reason.as_deref()?,
                b.reason.as_deref()?
            ))
        }),
        Arc::new(
            pairs
                .iter()
                .map(|p| match p {
                    None => Some("skipped".to_string()),
                    Some((a, b)) => status(a, b),
                })
                .collect::<StringArray>(),
        ),
        text(&|a, b| {
            a.error
                .as_ref()
                .map(|e| format!("A first: {e}"))
                .or_else(|| b.error.as_ref().map(|e| format!("B first: {e}")))
        }),
        text(&|a, b| a.model.clone().or_else(|| b.model.clone())),
        Arc::new(
            pairs
                .iter()
                .map(|p| p.as_ref().map(|(a, b)| a.cached && b.cached))
                .collect::<BooleanArray>(),
        ),
    ];
    // Both calls' tokens, dollars and time.
    let mut usage = UsageColumns::default();
    for p in pairs {
        let total = p.as_ref().map(|(a, b)| Usage::total([&a.usage, &b.usage]));
        usage.append(total.as_ref());
    }
    columns.extend(usage.finish());
    StructArray::new(details_fields(), columns, None)
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
        batch.ready(&calls, false).await?;

        let batch = &batch;
        let pairs: Vec<Pair> = join_all(plans.iter().map(|plan| async move {
            let pair = match plan {
                None => {
                    STATS.skipped();
                    None
                }
                Some([(k1, i1), (k2, i2)]) => {
                    let (o1, o2) = futures::join!(batch.judge(k1, i1), batch.judge(k2, i2));
                    if combine(verdict(&o1, true), verdict(&o2, false)).is_none() {
                        STATS.error();
                    }
                    Some((o1, o2))
                }
            };
            STATS.row_done();
            pair
        }))
        .await;
        if self.details {
            return Ok(ColumnarValue::Array(Arc::new(details_array(&pairs))));
        }
        Ok(ColumnarValue::Array(Arc::new(
            pairs
                .iter()
                .map(|p| {
                    p.as_ref()
                        .and_then(|(a, b)| combine(verdict(a, true), verdict(b, false)))
                })
                .collect::<StringArray>(),
        )))
    }
}

/// The reference text: what it measures from the rubric file, the rest from here.
fn documentation(details: bool) -> Documentation {
    if details {
        return Documentation::builder(
            JUDGE_METRICS,
            "pairwise_preference with how it was reached: Struct{choice, a_first, b_first \
             (each order's verdict), reason, status, error, model, cached, prompt_tokens, \
             completion_tokens, latency_ms, cached_tokens, cost_usd} (tokens, time and \
             dollars of both calls together).",
            "pairwise_preference_details(query, response_a, response_b [, criteria])",
        )
        .with_argument("query", "What both responses answer.")
        .with_argument("response_a", "The first system's response.")
        .with_argument("response_b", "The second system's response.")
        .with_argument("criteria", "Optional: what makes a response better.")
        .build();
    }
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
        if self.details { DETAILS_NAME } else { NAME }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        if !matches!(arg_types.len(), 3 | 4) {
            return plan_err!(
                "{} takes (query, response_a, response_b [, criteria])",
                self.name()
            );
        }
        crate::llm::transport::warm_up();
        if self.details {
            return Ok(DataType::Struct(details_fields()));
        }
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        internal_err!(
            "{} is asynchronous and runs through AsyncFuncExec",
            self.name()
        )
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

/// The functions as DataFusion UDFs: the verdict and its details.
pub fn scalar_functions() -> Vec<Arc<ScalarUDF>> {
    [PairwiseFunc::default(), PairwiseFunc::details()]
        .into_iter()
        .map(|f| Arc::new(AsyncScalarUDF::new(Arc::new(f)).into_scalar_udf()))
        .collect()
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
