//! The AI-assisted quality metrics as SQL functions: `<metric>(...)` returns the score,
//! `<metric>_details(...)` the whole outcome (SPEC §5).
//!
//! Each is an async UDF. A metric is thin: a rubric file plus which inputs it takes; the
//! [`engine`](super::engine) does the rest. Arguments of any type are accepted (strings as
//! they are, structs and lists as JSON, e.g. a `context` with citations or `tool_calls` read
//! from JSON lines); a single list-of-messages argument is a conversation for the metrics
//! that support one.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use async_trait::async_trait;
use datafusion::arrow::array::{
    ArrayRef, BooleanBuilder, Float64Array, Float64Builder, Int64Builder, ListBuilder,
    StringBuilder, StructArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Fields};
use datafusion::common::{Result, internal_err, plan_err};
use datafusion::logical_expr::async_udf::{AsyncScalarUDF, AsyncScalarUDFImpl};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    TypeSignature, Volatility,
};
use futures::future::join_all;

use super::config::{DEFAULT_THRESHOLD, JudgeSettings};
use super::engine::{CallInputs, JudgeBatch, Outcome, Status};
use super::messages::{Turn, conversation_turns, is_conversation_type, texts};
use super::progress::STATS;
use super::rubric::{Rubric, builtin};
use crate::common::docs::JUDGE_METRICS;

/// One judge metric: its rubric (same name), whether it has a conversation mode, and what it
/// measures (for the docs).
struct JudgeMetric {
    name: &'static str,
    conversation: bool,
    what: &'static str,
}

const METRICS: &[JudgeMetric] = &[
    JudgeMetric {
        name: "groundedness",
        conversation: true,
        what: "How well the response is supported by the context: claims found in the context \
               score high, unsupported or contradicted claims low (Azure GroundednessEvaluator).",
    },
    JudgeMetric {
        name: "relevance",
        conversation: true,
        what: "How well the response addresses the query, accurately and completely (Azure \
               RelevanceEvaluator).",
    },
    JudgeMetric {
        name: "coherence",
        conversation: true,
        what: "How logically and clearly the response is organised as an answer to the query \
               (Azure CoherenceEvaluator).",
    },
    JudgeMetric {
        name: "fluency",
        conversation: true,
        what: "The language quality of the response: grammar, vocabulary, readability (Azure \
               FluencyEvaluator).",
    },
    JudgeMetric {
        name: "similarity",
        conversation: false,
        what: "How close the response's meaning is to the ground truth, given the query (Azure \
               SimilarityEvaluator).",
    },
    JudgeMetric {
        name: "retrieval_score",
        conversation: true,
        what: "How relevant and well ranked the retrieved context is for the query (Azure \
               RetrievalEvaluator).",
    },
    JudgeMetric {
        name: "response_completeness",
        conversation: false,
        what: "How much of the ground truth's information the response covers (Azure \
               ResponseCompletenessEvaluator).",
    },
    JudgeMetric {
        name: "intent_resolution",
        conversation: false,
        what: "Whether an agent identified and resolved the user's intent (Azure \
               IntentResolutionEvaluator).",
    },
    JudgeMetric {
        name: "task_adherence",
        conversation: false,
        what: "Whether an agent's response follows the task and its instructions, given the \
               tool calls it made (Azure TaskAdherenceEvaluator).",
    },
    JudgeMetric {
        name: "tool_call_accuracy",
        conversation: false,
        what: "Whether an agent's tool calls are relevant and correctly parameterised for the \
               query (Azure ToolCallAccuracyEvaluator).",
    },
];

/// A judge SQL function: `metric(...)` or `metric_details(...)`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct JudgeFunc {
    metric: &'static str,
    name: String,
    details: bool,
    conversation: bool,
    signature: Signature,
}

impl JudgeFunc {
    fn new(metric: &JudgeMetric, details: bool) -> Result<Self> {
        let rubric = builtin(metric.name)?;
        // Every arity up to the longest form passes DataFusion's check, so that
        // `return_type` can say which forms exist instead of a bare count mismatch.
        let (_, all) = rubric.arities();
        let signature = Signature::one_of(
            (1..=all).map(TypeSignature::Any).collect(),
            // Stable: repeated calls in one query are computed once, and a judgement may
            // differ between runs (the cache makes reruns repeat it).
            Volatility::Stable,
        );
        Ok(Self {
            metric: metric.name,
            name: if details {
                format!("{}_details", metric.name)
            } else {
                metric.name.to_string()
            },
            details,
            conversation: metric.conversation,
            signature,
        })
    }

    /// The metric's name (its rubric's name).
    pub fn metric(&self) -> &str {
        self.metric
    }

    /// Strings for every input of the longest form, for the function catalogue.
    pub fn example_arg_types(&self) -> Vec<DataType> {
        let all = self.rubric().map(|r| r.inputs.len()).unwrap_or(1);
        vec![DataType::Utf8; all]
    }

    fn rubric(&self) -> Result<&'static Rubric> {
        builtin(self.metric)
    }

    /// Every way to call this function, e.g. `groundedness(context, response)`.
    fn usages(&self) -> Vec<String> {
        let Ok(rubric) = self.rubric() else {
            return vec![];
        };
        let names = |inputs: Vec<&super::rubric::RubricInput>| {
            inputs
                .iter()
                .map(|i| i.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let (required, all) = rubric.arities();
        let mut out = vec![format!(
            "{}({})",
            self.name,
            names(rubric.inputs_for(all).unwrap_or_default())
        )];
        if required != all {
            out.push(format!(
                "{}({})",
                self.name,
                names(rubric.inputs_for(required).unwrap_or_default())
            ));
        }
        if self.conversation {
            out.push(format!("{}(messages)", self.name));
        }
        out
    }

    fn is_conversation_call(&self, arg_types: &[DataType]) -> bool {
        self.conversation && arg_types.len() == 1 && is_conversation_type(&arg_types[0])
    }

    fn check_args(&self, arg_types: &[DataType]) -> Result<()> {
        let rubric = self.rubric()?;
        if self.is_conversation_call(arg_types) || rubric.inputs_for(arg_types.len()).is_some() {
            return Ok(());
        }
        let types: Vec<String> = arg_types.iter().map(|t| t.to_string()).collect();
        plan_err!(
            "{}({}) does not match {}",
            self.name,
            types.join(", "),
            self.usages().join(" or ")
        )
    }

    async fn run(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let n = args.number_rows;
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        self.check_args(&types)?;
        let arrays: Vec<ArrayRef> = args
            .args
            .iter()
            .map(|a| a.to_array(n))
            .collect::<Result<_>>()?;
        let rubric = self.rubric()?;
        let settings = JudgeSettings::from_config(&self.name, &args.config_options)?;
        let threshold = settings.threshold(self.metric, DEFAULT_THRESHOLD);
        let mut batch = JudgeBatch::new(self.metric, rubric, settings).await?;

        // What each row asks for.
        let plans: Vec<RowPlan> = if self.is_conversation_call(&types) {
            conversation_turns(&arrays[0])?
                .into_iter()
                .map(|turns| match turns {
                    None => RowPlan::Skip,
                    Some(turns) => RowPlan::Turns(
                        turns
                            .iter()
                            .map(|t| turn_inputs(rubric, t).map(|i| (batch.key(&i), i)))
                            .collect(),
                    ),
                })
                .collect()
        } else {
            let inputs = rubric
                .inputs_for(arrays.len())
                .expect("arity checked above");
            let columns: Vec<Vec<Option<String>>> =
                arrays.iter().map(texts).collect::<Result<_>>()?;
            (0..n)
                .map(|row| {
                    let mut call: CallInputs = Vec::with_capacity(inputs.len());
                    for (input, column) in inputs.iter().zip(&columns) {
                        match &column[row] {
                            Some(v) => call.push((input.name.clone(), v.clone())),
                            None => return RowPlan::Skip,
                        }
                    }
                    RowPlan::One(batch.key(&call), call)
                })
                .collect()
        };
        STATS.rows_received(n as u64);

        let keys: Vec<&String> = plans
            .iter()
            .flat_map(|p| match p {
                RowPlan::Skip => vec![],
                RowPlan::One(k, _) => vec![k],
                RowPlan::Turns(t) => t.iter().flatten().map(|(k, _)| k).collect(),
            })
            .collect();
        batch.prefetch(&keys).await?;

        let batch = &batch;
        let rows = join_all(plans.iter().map(|plan| async move {
            let row = match plan {
                RowPlan::Skip => RowResult {
                    outcome: Outcome::skipped(),
                    per_turn: None,
                },
                RowPlan::One(key, inputs) => RowResult {
                    outcome: batch.judge(key, inputs).await.as_ref().clone(),
                    per_turn: None,
                },
                RowPlan::Turns(turns) => {
                    let outcomes = join_all(turns.iter().map(|t| async move {
                        match t {
                            Some((key, inputs)) => Some(batch.judge(key, inputs).await),
                            None => None,
                        }
                    }))
                    .await;
                    combine_turns(&outcomes)
                }
            };
            match row.outcome.status {
                Status::Skipped => STATS.skipped(),
                Status::Error => STATS.error(),
                Status::Ok => {}
            }
            STATS.row_done();
            row
        }))
        .await;

        let array: ArrayRef = if self.details {
            Arc::new(details_array(&rows, threshold))
        } else {
            Arc::new(
                rows.iter()
                    .map(|r| r.outcome.score)
                    .collect::<Float64Array>(),
            )
        };
        Ok(ColumnarValue::Array(array))
    }
}

/// What one row asks the judge.
enum RowPlan {
    /// An input is NULL.
    Skip,
    /// One call: its key and inputs.
    One(String, CallInputs),
    /// One call per assistant turn (`None`: the turn lacks a required input).
    Turns(Vec<Option<(String, CallInputs)>>),
}

struct RowResult {
    outcome: Outcome,
    per_turn: Option<Vec<Option<f64>>>,
}

/// The inputs of one conversation turn for `rubric`, or `None` when a required one is
/// missing (e.g. groundedness of a turn without context).
fn turn_inputs(rubric: &Rubric, turn: &Turn) -> Option<CallInputs> {
    let mut call = Vec::with_capacity(rubric.inputs.len());
    for input in &rubric.inputs {
        let value = match input.name.as_str() {
            "query" => &turn.query,
            "context" => &turn.context,
            "response" => &turn.response,
            _ => &None,
        };
        match value {
            Some(v) => call.push((input.name.clone(), v.clone())),
            None if input.optional => {}
            None => return None,
        }
    }
    Some(call)
}

/// A conversation's outcome: the mean over judged turns; an error if any turn failed (the
/// score is then NULL: a mean over the turns that happened to succeed would be a guess).
fn combine_turns(turns: &[Option<Arc<Outcome>>]) -> RowResult {
    let per_turn: Vec<Option<f64>> = turns
        .iter()
        .map(|t| t.as_ref().and_then(|o| o.score))
        .collect();
    let judged: Vec<(usize, &Outcome)> = turns
        .iter()
        .enumerate()
        .filter_map(|(i, t)| t.as_deref().map(|o| (i, o)))
        .collect();
    if judged.is_empty() {
        return RowResult {
            outcome: Outcome::skipped(),
            per_turn: Some(per_turn),
        };
    }
    let sum = |f: fn(&Outcome) -> Option<i64>| -> Option<i64> {
        judged.iter().map(|(_, o)| f(o)).sum::<Option<i64>>()
    };
    let mut outcome = Outcome {
        status: Status::Ok,
        score: None,
        reason: None,
        error: None,
        model: judged.iter().find_map(|(_, o)| o.model.clone()),
        cached: judged.iter().all(|(_, o)| o.cached),
        prompt_tokens: sum(|o| o.prompt_tokens),
        completion_tokens: sum(|o| o.completion_tokens),
        latency_ms: judged.iter().map(|(_, o)| o.latency_ms).sum(),
    };
    if let Some((i, failed)) = judged.iter().find(|(_, o)| o.status == Status::Error) {
        outcome.status = Status::Error;
        outcome.error = Some(format!(
            "turn {}: {}",
            i + 1,
            failed.error.as_deref().unwrap_or("failed")
        ));
    } else {
        let scores: Vec<f64> = judged.iter().filter_map(|(_, o)| o.score).collect();
        outcome.score = Some(scores.iter().sum::<f64>() / scores.len() as f64);
        outcome.reason = Some(
            judged
                .iter()
                .map(|(i, o)| format!("turn {}: {}", i + 1, o.reason.as_deref().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(" | "),
        );
    }
    RowResult {
        outcome,
        per_turn: Some(per_turn),
    }
}

/// The fields of `<metric>_details`.
pub fn details_fields() -> Fields {
    Fields::from(vec![
        Field::new("score", DataType::Float64, true),
        Field::new("passed", DataType::Boolean, true),
        Field::new("threshold", DataType::Float64, true),
        Field::new("reason", DataType::Utf8, true),
        Field::new("status", DataType::Utf8, true),
        Field::new("error", DataType::Utf8, true),
        Field::new("model", DataType::Utf8, true),
        Field::new("cached", DataType::Boolean, true),
        Field::new("prompt_tokens", DataType::Int64, true),
        Field::new("completion_tokens", DataType::Int64, true),
        Field::new("latency_ms", DataType::Float64, true),
        Field::new(
            "per_turn",
            DataType::List(Arc::new(Field::new("item", DataType::Float64, true))),
            true,
        ),
    ])
}

fn details_array(rows: &[RowResult], threshold: f64) -> StructArray {
    let mut score = Float64Builder::new();
    let mut passed = BooleanBuilder::new();
    let mut thresholds = Float64Builder::new();
    let mut reason = StringBuilder::new();
    let mut status = StringBuilder::new();
    let mut error = StringBuilder::new();
    let mut model = StringBuilder::new();
    let mut cached = BooleanBuilder::new();
    let mut prompt = Int64Builder::new();
    let mut completion = Int64Builder::new();
    let mut latency = Float64Builder::new();
    let mut per_turn = ListBuilder::new(Float64Builder::new());
    for r in rows {
        let o = &r.outcome;
        score.append_option(o.score);
        passed.append_option(o.score.map(|s| s >= threshold));
        thresholds.append_value(threshold);
        reason.append_option(o.reason.as_deref());
        status.append_value(o.status.as_str());
        error.append_option(o.error.as_deref());
        model.append_option(o.model.as_deref());
        cached.append_value(o.cached);
        prompt.append_option(o.prompt_tokens);
        completion.append_option(o.completion_tokens);
        latency.append_option(o.latency_ms);
        match &r.per_turn {
            Some(turns) => {
                for t in turns {
                    per_turn.values().append_option(*t);
                }
                per_turn.append(true);
            }
            None => per_turn.append(false),
        }
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(score.finish()),
        Arc::new(passed.finish()),
        Arc::new(thresholds.finish()),
        Arc::new(reason.finish()),
        Arc::new(status.finish()),
        Arc::new(error.finish()),
        Arc::new(model.finish()),
        Arc::new(cached.finish()),
        Arc::new(prompt.finish()),
        Arc::new(completion.finish()),
        Arc::new(latency.finish()),
        Arc::new(per_turn.finish()),
    ];
    StructArray::new(details_fields(), columns, None)
}

static DOCS: LazyLock<BTreeMap<String, Documentation>> = LazyLock::new(|| {
    let mut docs = BTreeMap::new();
    for metric in METRICS {
        for details in [false, true] {
            let Ok(f) = JudgeFunc::new(metric, details) else {
                continue;
            };
            let Ok(rubric) = f.rubric() else { continue };
            let returns = if details {
                "Returns Struct{score, passed, threshold, reason, status ('ok', 'error', \
                 'skipped'), error, model, cached, prompt_tokens, completion_tokens, \
                 latency_ms, per_turn}."
                    .to_string()
            } else {
                format!(
                    "Returns the score ({}-{}); NULL when the row was not judged (an input \
                     was NULL, or the call failed: see {}_details).",
                    rubric.min, rubric.max, metric.name
                )
            };
            let conversation = if metric.conversation {
                " With one List<Struct{role, content, context}> argument (see \
                 parse_messages), each assistant turn is judged and the score is the mean."
            } else {
                ""
            };
            let mut builder = Documentation::builder(
                JUDGE_METRICS,
                format!(
                    "{} Rubric {} (udfs/rubrics/{}.md). {returns}{conversation}",
                    metric.what,
                    rubric.version_tag(),
                    metric.name
                ),
                f.usages().join(" | "),
            );
            for input in &rubric.inputs {
                let optional = if input.optional { " (optional)" } else { "" };
                builder = builder.with_argument(&input.name, format!("Text or JSON{optional}."));
            }
            docs.insert(f.name.clone(), builder.build());
        }
    }
    docs
});

impl ScalarUDFImpl for JudgeFunc {
    fn name(&self) -> &str {
        &self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.check_args(arg_types)?;
        Ok(if self.details {
            DataType::Struct(details_fields())
        } else {
            DataType::Float64
        })
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        internal_err!(
            "{} is asynchronous and runs through AsyncFuncExec",
            self.name
        )
    }

    fn documentation(&self) -> Option<&Documentation> {
        DOCS.get(&self.name)
    }
}

#[async_trait]
impl AsyncScalarUDFImpl for JudgeFunc {
    async fn invoke_async_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        self.run(args).await
    }
}

/// Every judge function (each metric and its `_details`), as implementations: the
/// function catalogue reads their docs, which the async wrapper does not forward.
pub fn judge_functions() -> Vec<Arc<JudgeFunc>> {
    METRICS
        .iter()
        .flat_map(|m| [JudgeFunc::new(m, false), JudgeFunc::new(m, true)])
        .filter_map(|f| f.ok().map(Arc::new))
        .collect()
}

/// The judge functions as DataFusion UDFs, each registered under its own name (an async UDF
/// with aliases cannot be planned in DataFusion 55).
pub fn scalar_functions() -> Vec<Arc<ScalarUDF>> {
    judge_functions()
        .into_iter()
        .map(|f| Arc::new(AsyncScalarUDF::new(f).into_scalar_udf()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(status: Status, score: Option<f64>) -> Arc<Outcome> {
        Arc::new(Outcome {
            status,
            score,
            reason: Some("r".into()),
            error: (status == Status::Error).then(|| "HTTP 400".to_string()),
            model: Some("m".into()),
            cached: false,
            prompt_tokens: Some(10),
            completion_tokens: Some(2),
            latency_ms: Some(5.0),
        })
    }

    #[test]
    fn conversation_mean_and_errors() {
        let r = combine_turns(&[
            Some(outcome(Status::Ok, Some(4.0))),
            None,
            Some(outcome(Status::Ok, Some(1.0))),
        ]);
        assert_eq!(r.outcome.score, Some(2.5));
        assert_eq!(r.per_turn, Some(vec![Some(4.0), None, Some(1.0)]));
        assert_eq!(r.outcome.prompt_tokens, Some(20));
        let r = combine_turns(&[
            Some(outcome(Status::Ok, Some(4.0))),
            Some(outcome(Status::Error, None)),
        ]);
        assert_eq!(r.outcome.status, Status::Error);
        assert_eq!(r.outcome.score, None);
        assert_eq!(r.outcome.error.as_deref(), Some("turn 2: HTTP 400"));
        let r = combine_turns(&[None, None]);
        assert_eq!(r.outcome.status, Status::Skipped);
    }

    #[test]
    fn signatures_follow_the_rubrics() {
        let all = judge_functions();
        assert_eq!(all.len(), 20);
        let g = all.iter().find(|f| f.name == "groundedness").unwrap();
        assert!(g.return_type(&[DataType::Utf8, DataType::Utf8]).is_ok());
        assert!(g.return_type(&vec![DataType::Utf8; 3]).is_ok());
        let err = g.return_type(&[DataType::Utf8]).unwrap_err().to_string();
        assert!(
            err.contains(
                "groundedness(Utf8) does not match groundedness(query, context, response)"
            ),
            "{err}"
        );
        assert!(err.contains("groundedness(messages)"), "{err}");
        let s = all.iter().find(|f| f.name == "similarity_details").unwrap();
        assert_eq!(
            s.return_type(&vec![DataType::Utf8; 3]).unwrap(),
            DataType::Struct(details_fields())
        );
        for f in &all {
            assert!(f.documentation().is_some(), "{} has no docs", f.name);
        }
    }
}
