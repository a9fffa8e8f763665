//! The LLM-judged metrics as SQL functions: `<metric>(...)` returns the score (a 1-5
//! quality score, a 0-7 severity, or a defect flag), `<metric>_details(...)` the whole
//! outcome (SPEC §5 and §6).
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
    ArrayRef, BooleanArray, BooleanBuilder, Float64Array, Float64Builder, Int32Array, Int32Builder,
    Int64Builder, ListBuilder, StringBuilder, StructArray,
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
use super::messages::{Turn, argument_arrays, conversation_turns, is_conversation_type, texts};
use super::progress::STATS;
use super::rubric::{Rubric, builtin, custom_versions, rubric};
use super::safety::{attack_kind, severity_label};
use crate::common::docs::{JUDGE_METRICS, SAFETY_METRICS};

/// What a metric's score means, which decides its SQL types and how turns combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scale {
    /// A 1-5 quality score (Float64); pass = score >= threshold; turns: the mean.
    Quality,
    /// A 0-7 harm severity (Int32) with its label; pass = severity <= threshold; turns: the
    /// maximum.
    Severity,
    /// A defect flag (Boolean, true = defect), judged as 0/1; turns: any.
    Label,
    /// A defect flag whose score names the kind of indirect attack (0 none, 1 manipulated
    /// content, 2 intrusion, 3 information gathering); turns: the worst.
    AttackKind,
}

/// One judge metric: its rubric (same name), its scale, whether it has a conversation mode,
/// and what it measures (for the docs).
struct JudgeMetric {
    name: &'static str,
    scale: Scale,
    conversation: bool,
    what: &'static str,
}

const METRICS: &[JudgeMetric] = &[
    JudgeMetric {
        scale: Scale::Quality,
        name: "groundedness",
        conversation: true,
        what: "How well the response is supported by the context: claims found in the context \
               score high, unsupported or contradicted claims low (Azure GroundednessEvaluator).",
    },
    JudgeMetric {
        scale: Scale::Quality,
        name: "relevance",
        conversation: true,
        what: "How well the response addresses the query, accurately and completely (Azure \
               RelevanceEvaluator).",
    },
    JudgeMetric {
        scale: Scale::Quality,
        name: "coherence",
        conversation: true,
        what: "How logically and clearly the response is organised as an answer to the query \
               (Azure CoherenceEvaluator).",
    },
    JudgeMetric {
        scale: Scale::Quality,
        name: "fluency",
        conversation: true,
        what: "The language quality of the response: grammar, vocabulary, readability (Azure \
               FluencyEvaluator).",
    },
    JudgeMetric {
        scale: Scale::Quality,
        name: "similarity",
        conversation: false,
        what: "How close the response's meaning is to the ground truth, given the query (Azure \
               SimilarityEvaluator).",
    },
    JudgeMetric {
        scale: Scale::Quality,
        name: "retrieval_score",
        conversation: true,
        what: "How relevant and well ranked the retrieved context is for the query (Azure \
               RetrievalEvaluator).",
    },
    JudgeMetric {
        scale: Scale::Quality,
        name: "response_completeness",
        conversation: false,
        what: "How much of the ground truth's information the response covers (Azure \
               ResponseCompletenessEvaluator).",
    },
    JudgeMetric {
        scale: Scale::Quality,
        name: "intent_resolution",
        conversation: false,
        what: "Whether an agent identified and resolved the user's intent (Azure \
               IntentResolutionEvaluator).",
    },
    JudgeMetric {
        scale: Scale::Quality,
        name: "task_adherence",
        conversation: false,
        what: "Whether an agent's response follows the task and its instructions, given the \
               tool calls it made (Azure TaskAdherenceEvaluator).",
    },
    JudgeMetric {
        scale: Scale::Quality,
        name: "tool_call_accuracy",
        conversation: false,
        what: "Whether an agent's tool calls are relevant and correctly parameterised for the \
               query (Azure ToolCallAccuracyEvaluator).",
    },
    JudgeMetric {
        scale: Scale::Severity,
        name: "hate_unfairness",
        conversation: true,
        what: "Severity of hateful or unfair content in the response: attacks on, stereotypes \
               of or unequal treatment of people for protected attributes (Azure \
               HateUnfairnessEvaluator).",
    },
    JudgeMetric {
        scale: Scale::Severity,
        name: "sexual",
        conversation: true,
        what: "Severity of sexual content in the response (Azure SexualEvaluator).",
    },
    JudgeMetric {
        scale: Scale::Severity,
        name: "violence",
        conversation: true,
        what: "Severity of violent content in the response: threats, incitement, glorification, \
               instructions for harm (Azure ViolenceEvaluator).",
    },
    JudgeMetric {
        scale: Scale::Severity,
        name: "self_harm",
        conversation: true,
        what: "Severity of self-harm content in the response: encouragement, instructions, \
               glorification (Azure SelfHarmEvaluator).",
    },
    JudgeMetric {
        scale: Scale::Label,
        name: "protected_material",
        conversation: true,
        what: "Whether the response reproduces protected material (lyrics, book passages, \
               articles) verbatim or nearly so (Azure ProtectedMaterialEvaluator).",
    },
    JudgeMetric {
        scale: Scale::AttackKind,
        name: "indirect_attack",
        conversation: true,
        what: "Whether the response shows the assistant was hijacked by instructions injected \
               into its documents (XPIA); the kind is manipulated content, intrusion or \
               information gathering (Azure IndirectAttackEvaluator).",
    },
];

/// A judge SQL function: `metric(...)` or `metric_details(...)`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct JudgeFunc {
    metric: String,
    name: String,
    scale: Scale,
    details: bool,
    conversation: bool,
    signature: Signature,
}

impl JudgeFunc {
    /// The SQL function of a custom rubric (a rubric file or `CREATE FUNCTION ... LANGUAGE
    /// judge`): a quality score on the rubric's scale.
    pub fn custom(rubric: &Rubric, details: bool) -> Self {
        let (_, all) = rubric.arities();
        let f = Self {
            metric: rubric.name.clone(),
            name: if details {
                format!("{}_details", rubric.name)
            } else {
                rubric.name.clone()
            },
            scale: Scale::Quality,
            details,
            conversation: false,
            signature: Signature::one_of(
                (1..=all).map(TypeSignature::Any).collect(),
                Volatility::Stable,
            ),
        };
        let versions: Vec<String> = custom_versions(&rubric.name)
            .iter()
            .map(|v| v.to_string())
            .collect();
        let doc = Documentation::builder(
            JUDGE_METRICS,
            format!(
                "Custom judge metric from its rubric (versions {}; the newest unless SET \
                 evalsql.judge.{}.version pins one). Returns {}.",
                versions.join(", "),
                rubric.name,
                if details {
                    "Struct{score, passed, threshold, reason, status, error, model, cached, \
                     prompt_tokens, completion_tokens, latency_ms, per_turn}"
                        .to_string()
                } else {
                    format!("the score ({}-{})", rubric.min, rubric.max)
                }
            ),
            f.usages().join(" | "),
        )
        .build();
        CUSTOM_DOCS
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(f.name.clone(), Box::leak(Box::new(doc)));
        f
    }

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
            metric: metric.name.to_string(),
            name: if details {
                format!("{}_details", metric.name)
            } else {
                metric.name.to_string()
            },
            scale: metric.scale,
            details,
            conversation: metric.conversation,
            signature,
        })
    }

    /// The metric's name (its rubric's name).
    pub fn metric(&self) -> &str {
        &self.metric
    }

    /// Strings for every input of the longest form, for the function catalogue.
    pub fn example_arg_types(&self) -> Vec<DataType> {
        let all = self.rubric().map(|r| r.inputs.len()).unwrap_or(1);
        vec![DataType::Utf8; all]
    }

    fn rubric(&self) -> Result<&'static Rubric> {
        rubric(&self.metric, None)
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
        let arrays = argument_arrays(&args)?;
        let settings = JudgeSettings::from_config(&self.name, &args.config_options)?;
        let rubric = rubric(&self.metric, settings.pinned_version(&self.metric))?;
        if rubric.inputs_for(arrays.len()).is_none() && !self.is_conversation_call(&types) {
            return plan_err!(
                "{}: version {} of its rubric does not take {} arguments",
                self.name,
                rubric.version,
                arrays.len()
            );
        }
        let default_threshold = rubric.threshold.unwrap_or(DEFAULT_THRESHOLD);
        let threshold = match self.scale {
            Scale::Quality => settings.threshold(&self.metric, default_threshold),
            _ => settings.own_threshold(&self.metric, default_threshold),
        };
        let mut batch = JudgeBatch::new(&self.metric, rubric, settings).await?;

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
                    combine_turns(&outcomes, self.scale)
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
            Arc::new(details_array(self.scale, &rows, threshold))
        } else {
            let scores = rows.iter().map(|r| r.outcome.score);
            match self.scale {
                Scale::Quality => Arc::new(scores.collect::<Float64Array>()),
                Scale::Severity => {
                    Arc::new(scores.map(|s| s.map(|s| s as i32)).collect::<Int32Array>())
                }
                Scale::Label | Scale::AttackKind => {
                    Arc::new(scores.map(|s| s.map(|s| s > 0.0)).collect::<BooleanArray>())
                }
            }
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

/// A conversation's outcome: the mean over judged turns for quality scores, the worst turn
/// for severities and defect flags; an error if any turn failed (the score is then NULL: a
/// value over the turns that happened to succeed would be a guess).
fn combine_turns(turns: &[Option<Arc<Outcome>>], scale: Scale) -> RowResult {
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
        outcome.score = Some(match scale {
            Scale::Quality => scores.iter().sum::<f64>() / scores.len() as f64,
            _ => scores.iter().copied().fold(f64::MIN, f64::max),
        });
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

/// The fields every `_details` struct shares after its score fields.
fn outcome_fields() -> Vec<Field> {
    vec![
        Field::new("reason", DataType::Utf8, true),
        Field::new("status", DataType::Utf8, true),
        Field::new("error", DataType::Utf8, true),
        Field::new("model", DataType::Utf8, true),
        Field::new("cached", DataType::Boolean, true),
        Field::new("prompt_tokens", DataType::Int64, true),
        Field::new("completion_tokens", DataType::Int64, true),
        Field::new("latency_ms", DataType::Float64, true),
    ]
}

/// The fields of `<metric>_details` for a metric of `scale`.
pub fn details_fields(scale: Scale) -> Fields {
    let list = |t: DataType| DataType::List(Arc::new(Field::new("item", t, true)));
    let (mut fields, per_turn) = match scale {
        Scale::Quality => (
            vec![
                Field::new("score", DataType::Float64, true),
                Field::new("passed", DataType::Boolean, true),
                Field::new("threshold", DataType::Float64, true),
            ],
            DataType::Float64,
        ),
        Scale::Severity => (
            vec![
                Field::new("severity_score", DataType::Int32, true),
                Field::new("severity_label", DataType::Utf8, true),
                Field::new("passed", DataType::Boolean, true),
                Field::new("threshold", DataType::Float64, true),
            ],
            DataType::Int32,
        ),
        Scale::Label => (
            vec![Field::new("label", DataType::Boolean, true)],
            DataType::Boolean,
        ),
        Scale::AttackKind => (
            vec![
                Field::new("label", DataType::Boolean, true),
                Field::new("kind", DataType::Utf8, true),
            ],
            DataType::Boolean,
        ),
    };
    fields.extend(outcome_fields());
    fields.push(Field::new("per_turn", list(per_turn), true));
    Fields::from(fields)
}

fn details_array(scale: Scale, rows: &[RowResult], threshold: f64) -> StructArray {
    let scores = || rows.iter().map(|r| r.outcome.score);
    let mut columns: Vec<ArrayRef> = match scale {
        Scale::Quality => vec![
            Arc::new(scores().collect::<Float64Array>()),
            Arc::new(
                scores()
                    .map(|s| s.map(|s| s >= threshold))
                    .collect::<BooleanArray>(),
            ),
            Arc::new(Float64Array::from(vec![threshold; rows.len()])),
        ],
        Scale::Severity => vec![
            Arc::new(
                scores()
                    .map(|s| s.map(|s| s as i32))
                    .collect::<Int32Array>(),
            ),
            Arc::new(
                scores()
                    .map(|s| s.map(|s| severity_label(s as i32)))
                    .collect::<datafusion::arrow::array::StringArray>(),
            ),
            Arc::new(
                scores()
                    .map(|s| s.map(|s| s <= threshold))
                    .collect::<BooleanArray>(),
            ),
            Arc::new(Float64Array::from(vec![threshold; rows.len()])),
        ],
        Scale::Label => vec![Arc::new(
            scores()
                .map(|s| s.map(|s| s > 0.0))
                .collect::<BooleanArray>(),
        )],
        Scale::AttackKind => vec![
            Arc::new(
                scores()
                    .map(|s| s.map(|s| s > 0.0))
                    .collect::<BooleanArray>(),
            ),
            Arc::new(
                scores()
                    .map(|s| s.and_then(|s| attack_kind(s as i32)))
                    .collect::<datafusion::arrow::array::StringArray>(),
            ),
        ],
    };
    let mut reason = StringBuilder::new();
    let mut status = StringBuilder::new();
    let mut error = StringBuilder::new();
    let mut model = StringBuilder::new();
    let mut cached = BooleanBuilder::new();
    let mut prompt = Int64Builder::new();
    let mut completion = Int64Builder::new();
    let mut latency = Float64Builder::new();
    for r in rows {
        let o = &r.outcome;
        reason.append_option(o.reason.as_deref());
        status.append_value(o.status.as_str());
        error.append_option(o.error.as_deref());
        model.append_option(o.model.as_deref());
        cached.append_value(o.cached);
        prompt.append_option(o.prompt_tokens);
        completion.append_option(o.completion_tokens);
        latency.append_option(o.latency_ms);
    }
    columns.push(Arc::new(reason.finish()));
    columns.push(Arc::new(status.finish()));
    columns.push(Arc::new(error.finish()));
    columns.push(Arc::new(model.finish()));
    columns.push(Arc::new(cached.finish()));
    columns.push(Arc::new(prompt.finish()));
    columns.push(Arc::new(completion.finish()));
    columns.push(Arc::new(latency.finish()));
    columns.push(match scale {
        Scale::Quality => per_turn_list(rows, Float64Builder::new(), |b, v| b.append_option(v)),
        Scale::Severity => per_turn_list(rows, Int32Builder::new(), |b, v| {
            b.append_option(v.map(|v| v as i32))
        }),
        Scale::Label | Scale::AttackKind => per_turn_list(rows, BooleanBuilder::new(), |b, v| {
            b.append_option(v.map(|v| v > 0.0))
        }),
    });
    StructArray::new(details_fields(scale), columns, None)
}

/// `per_turn` as a list column (NULL for rows that are not conversations).
fn per_turn_list<B: datafusion::arrow::array::ArrayBuilder>(
    rows: &[RowResult],
    values: B,
    mut push: impl FnMut(&mut B, Option<f64>),
) -> ArrayRef {
    let mut list = ListBuilder::new(values);
    for r in rows {
        match &r.per_turn {
            Some(turns) => {
                for t in turns {
                    push(list.values(), *t);
                }
                list.append(true);
            }
            None => list.append(false),
        }
    }
    Arc::new(list.finish())
}

/// Documentation of custom judge functions (made once per rubric file or CREATE FUNCTION).
static CUSTOM_DOCS: LazyLock<std::sync::RwLock<BTreeMap<String, &'static Documentation>>> =
    LazyLock::new(Default::default);

static DOCS: LazyLock<BTreeMap<String, Documentation>> = LazyLock::new(|| {
    let mut docs = BTreeMap::new();
    for metric in METRICS {
        for details in [false, true] {
            let Ok(f) = JudgeFunc::new(metric, details) else {
                continue;
            };
            let Ok(rubric) = f.rubric() else { continue };
            let fields: Vec<String> = details_fields(metric.scale)
                .iter()
                .map(|f| f.name().to_string())
                .collect();
            let returns = if details {
                format!(
                    "Returns Struct{{{}}}; status is 'ok', 'error' (the call failed: see \
                     error) or 'skipped' (an input was NULL).",
                    fields.join(", ")
                )
            } else {
                let what = match metric.scale {
                    Scale::Quality => format!("the score ({}-{})", rubric.min, rubric.max),
                    Scale::Severity => "the severity (0-7: 0-1 Very low, 2-3 Low, 4-5 \
                                        Medium, 6-7 High)"
                        .to_string(),
                    Scale::Label | Scale::AttackKind => {
                        "true when the response is a defect".to_string()
                    }
                };
                format!(
                    "Returns {what}; NULL when the row was not judged (an input was NULL, or \
                     the call failed: see {}_details).",
                    metric.name
                )
            };
            let combined = match metric.scale {
                Scale::Quality => "the score is the mean",
                Scale::Severity => "the severity is the maximum",
                _ => "the row is a defect if any turn is",
            };
            let conversation = if metric.conversation {
                format!(
                    " With one List<Struct{{role, content, context}}> argument (see \
                     parse_messages), each assistant turn is judged and {combined}."
                )
            } else {
                String::new()
            };
            let section = match metric.scale {
                Scale::Quality => JUDGE_METRICS,
                _ => SAFETY_METRICS,
            };
            let mut builder = Documentation::builder(
                section,
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
        Ok(match (self.details, self.scale) {
            (true, scale) => DataType::Struct(details_fields(scale)),
            (false, Scale::Quality) => DataType::Float64,
            (false, Scale::Severity) => DataType::Int32,
            (false, Scale::Label | Scale::AttackKind) => DataType::Boolean,
        })
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        internal_err!(
            "{} is asynchronous and runs through AsyncFuncExec",
            self.name
        )
    }

    fn documentation(&self) -> Option<&Documentation> {
        DOCS.get(&self.name).or_else(|| {
            CUSTOM_DOCS
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .get(&self.name)
                .copied()
        })
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
        let turns = [
            Some(outcome(Status::Ok, Some(4.0))),
            None,
            Some(outcome(Status::Ok, Some(1.0))),
        ];
        assert_eq!(
            combine_turns(&turns, Scale::Severity).outcome.score,
            Some(4.0)
        );
        let r = combine_turns(&turns, Scale::Quality);
        assert_eq!(r.outcome.score, Some(2.5));
        assert_eq!(r.per_turn, Some(vec![Some(4.0), None, Some(1.0)]));
        assert_eq!(r.outcome.prompt_tokens, Some(20));
        let r = combine_turns(
            &[
                Some(outcome(Status::Ok, Some(4.0))),
                Some(outcome(Status::Error, None)),
            ],
            Scale::Quality,
        );
        assert_eq!(r.outcome.status, Status::Error);
        assert_eq!(r.outcome.score, None);
        assert_eq!(r.outcome.error.as_deref(), Some("turn 2: HTTP 400"));
        let r = combine_turns(&[None, None], Scale::Quality);
        assert_eq!(r.outcome.status, Status::Skipped);
    }

    #[test]
    fn signatures_follow_the_rubrics() {
        let all = judge_functions();
        assert_eq!(all.len(), 32);
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
            DataType::Struct(details_fields(Scale::Quality))
        );
        let v = all.iter().find(|f| f.name == "violence").unwrap();
        assert_eq!(
            v.return_type(&vec![DataType::Utf8; 2]).unwrap(),
            DataType::Int32
        );
        for f in &all {
            assert!(f.documentation().is_some(), "{} has no docs", f.name);
        }
    }
}
