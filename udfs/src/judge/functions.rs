//! The LLM-judged metrics as SQL functions: `<metric>(...)` returns the score (a 1-5
//! quality score, a 0-7 severity, or a defect flag), `<metric>_details(...)` the whole
//! outcome.
//!
//! Each is an async UDF that holds its rubric(s): a built-in metric is a rubric file under
//! `udfs/rubrics/` and nothing else, a custom one a rubric file or a `CREATE FUNCTION`; the
//! [`engine`](crate::judge::engine) does the rest. Arguments of any type are accepted (strings as
//! they are, structs and lists as JSON, e.g. a `context` with citations or `tool_calls` read
//! from JSON lines); a single list-of-messages argument is a conversation for the metrics
//! whose rubric says `conversation: yes`.

use std::hash::{Hash, Hasher};
use std::sync::{Arc, LazyLock, Mutex, Weak};

use async_trait::async_trait;
use datafusion::arrow::array::{
    ArrayRef, BooleanArray, BooleanBuilder, Float64Array, Float64Builder, Int32Array, Int32Builder,
    Int64Builder, ListBuilder, StringBuilder, StructArray, StructBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Fields};
use datafusion::common::{Result, internal_err, plan_err};
use datafusion::logical_expr::async_udf::{AsyncScalarUDF, AsyncScalarUDFImpl};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    TypeSignature, Volatility,
};
use futures::future::join_all;

use crate::common::docs::{JUDGE_METRICS, SAFETY_METRICS};
use crate::common::{argument_arrays, texts};
use crate::judge::engine::{CallInputs, JudgeBatch, Outcome, Status};
use crate::judge::messages::{Turn, conversation_turns, is_conversation_type};
use crate::judge::rubric::{Rubric, RubricInput, RubricSet, Scale, builtin_rubrics};
use crate::judge::safety::severity_label;
use crate::llm::progress::STATS;
use crate::llm::settings::{JudgeSettings, PanelAggregate};

/// The SQL shape of a metric's result, from its rubric's scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shape {
    /// A quality score (Float64); pass = score >= threshold; turns: the mean.
    Quality,
    /// A 0-7 harm severity (Int32) with its label; pass = severity <= threshold; turns: the
    /// maximum.
    Severity,
    /// A defect flag (Boolean, true = defect), judged as 0/1; turns: any.
    Label,
    /// A defect flag whose score names a kind (the rubric's `kinds`); turns: the worst.
    Kind,
}

impl Shape {
    /// The shape of a judge function over `rubric` (`None`: a preference, not one score).
    pub fn of(rubric: &Rubric) -> Option<Shape> {
        Some(match rubric.scale {
            Scale::Score => Shape::Quality,
            Scale::Severity => Shape::Severity,
            Scale::Flag if rubric.kinds.is_empty() => Shape::Label,
            Scale::Flag => Shape::Kind,
            Scale::Preference => return None,
        })
    }
}

/// Who defined a judge function, which decides who may replace it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Origin {
    /// A rubric file under `udfs/rubrics/`.
    Builtin,
    /// The operator: `--rubrics` directories, and `CREATE FUNCTION` in the CLI or in
    /// `serve --init`.
    Operator,
    /// A client of a shared server: `CREATE FUNCTION` in one `serve` connection, visible to
    /// that connection only.
    Client,
}

/// A judge SQL function: `metric(...)` or `metric_details(...)`, holding its rubrics.
#[derive(Debug)]
pub struct JudgeFunc {
    name: String,
    details: bool,
    shape: Shape,
    origin: Origin,
    rubrics: Arc<RubricSet>,
    /// Every version with the digest of its text: what makes two functions the same
    /// (computed once; DataFusion compares and hashes functions while planning).
    identity: Vec<(u32, String)>,
    signature: Signature,
    doc: Documentation,
}

// Two functions are the same when they judge with the same rubrics: the name, the variant,
// and every version's digest (DataFusion compares functions when it simplifies plans).
impl PartialEq for JudgeFunc {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.details == other.details
            && self.origin == other.origin
            && self.identity == other.identity
    }
}

impl Eq for JudgeFunc {}

impl Hash for JudgeFunc {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name.hash(state);
        self.details.hash(state);
        self.identity.hash(state);
    }
}

impl JudgeFunc {
    /// The function of `rubrics` (every version of one metric): its score, or its details.
    pub fn new(rubrics: Arc<RubricSet>, details: bool, origin: Origin) -> Result<Self> {
        let newest = rubrics.newest();
        let Some(shape) = Shape::of(newest) else {
            return plan_err!(
                "{}: a preference rubric is judged by pairwise_preference, not as a metric",
                newest.name
            );
        };
        let name = if details {
            format!("{}_details", newest.name)
        } else {
            newest.name.clone()
        };
        // Every arity up to the longest form passes DataFusion's check, so that
        // `return_type` can say which forms exist instead of a bare count mismatch.
        let longest = rubrics.all().map(|r| r.inputs.len()).max().unwrap_or(1);
        let signature = Signature::one_of(
            (1..=longest).map(TypeSignature::Any).collect(),
            // Stable: repeated calls in one query are computed once, and a judgement may
            // differ between runs (the cache makes reruns repeat it).
            Volatility::Stable,
        );
        let identity = rubrics
            .all()
            .map(|r| (r.version, r.fingerprint()))
            .collect();
        let mut f = Self {
            name,
            details,
            shape,
            origin,
            rubrics,
            identity,
            signature,
            doc: Documentation::builder(JUDGE_METRICS, "", "").build(),
        };
        f.doc = f.documentation_text();
        Ok(f)
    }

    /// The metric's name (its rubric's name).
    pub fn metric(&self) -> &str {
        self.rubrics.name()
    }

    pub fn origin(&self) -> Origin {
        self.origin
    }

    /// Every version of the metric's rubric.
    pub fn rubrics(&self) -> &Arc<RubricSet> {
        &self.rubrics
    }

    pub fn is_details(&self) -> bool {
        self.details
    }

    /// Strings for every input of the longest form, for the function catalogue.
    pub fn example_arg_types(&self) -> Vec<DataType> {
        vec![DataType::Utf8; self.rubrics.newest().inputs.len()]
    }

    /// Every way to call this function, e.g. `groundedness(context, response)`.
    fn usages(&self) -> Vec<String> {
        let rubric = self.rubrics.newest();
        let names = |inputs: Vec<&RubricInput>| {
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
        if rubric.conversation {
            out.push(format!("{}(messages)", self.name));
        }
        out
    }

    /// The function's reference text, all of it from the rubric's front matter.
    fn documentation_text(&self) -> Documentation {
        let rubric = self.rubrics.newest();
        let fields: Vec<String> = details_fields(self.shape)
            .iter()
            .map(|f| f.name().to_string())
            .collect();
        let returns = if self.details {
            format!(
                "Returns Struct{{{}}}; status is 'ok', 'error' (the call failed: see error) or \
                 'skipped' (an input was NULL).",
                fields.join(", ")
            )
        } else {
            let what = match self.shape {
                Shape::Quality => format!("the score ({}-{})", rubric.min, rubric.max),
                Shape::Severity => {
                    "the severity (0-7: 0-1 Very low, 2-3 Low, 4-5 Medium, 6-7 High)".to_string()
                }
                Shape::Label | Shape::Kind => "true when the response is a defect".to_string(),
            };
            format!(
                "Returns {what}; NULL when the row was not judged (an input was NULL, or the \
                 call failed: see {}_details).",
                rubric.name
            )
        };
        let conversation = if rubric.conversation {
            let combined = match self.shape {
                Shape::Quality => "the score is the mean",
                Shape::Severity => "the severity is the maximum",
                _ => "the row is a defect if any turn is",
            };
            format!(
                " With one List<Struct{{role, content, context}}> argument (see \
                 parse_messages), each assistant turn is judged and {combined}."
            )
        } else {
            String::new()
        };
        let what = match (&rubric.description, &rubric.evaluator) {
            (Some(d), Some(e)) => format!("{} ({e}).", d.trim_end_matches('.')),
            (Some(d), None) => d.clone(),
            (None, _) => String::new(),
        };
        let source = match self.origin {
            Origin::Builtin => format!(
                "Rubric {} (udfs/rubrics/{}.md).",
                rubric.version_tag(),
                rubric.name
            ),
            Origin::Operator | Origin::Client => {
                let versions: Vec<String> =
                    self.rubrics.all().map(|r| r.version.to_string()).collect();
                format!(
                    "Custom judge metric from its rubric (versions {}; the newest unless SET \
                     evalsql.judge.{}.version pins one).",
                    versions.join(", "),
                    rubric.name
                )
            }
        };
        let description = [source, what, returns]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" ")
            + &conversation;
        let section = match self.shape {
            Shape::Quality => JUDGE_METRICS,
            _ => SAFETY_METRICS,
        };
        let mut builder = Documentation::builder(section, description, self.usages().join(" | "));
        for input in &rubric.inputs {
            let about = input.about.as_deref().unwrap_or("Text or JSON.");
            let optional = if input.optional { " (optional)" } else { "" };
            builder = builder.with_argument(&input.name, format!("{about}{optional}"));
        }
        builder.build()
    }

    fn is_conversation_call(&self, arg_types: &[DataType]) -> bool {
        self.rubrics.newest().conversation
            && arg_types.len() == 1
            && is_conversation_type(&arg_types[0])
    }

    fn check_args(&self, arg_types: &[DataType]) -> Result<()> {
        let rubric = self.rubrics.newest();
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
        let metric = self.metric();
        let rubric = Arc::clone(self.rubrics.pick(settings.pinned_version(metric))?);
        if rubric.inputs_for(arrays.len()).is_none() && !self.is_conversation_call(&types) {
            return plan_err!(
                "{}: version {} of its rubric does not take {} arguments",
                self.name,
                rubric.version,
                arrays.len()
            );
        }
        let default_threshold = rubric.default_threshold();
        let threshold = match self.shape {
            Shape::Quality => settings.threshold(metric, default_threshold),
            _ => settings.own_threshold(metric, default_threshold),
        };
        let samples = settings.samples;
        let panel = settings.panel.clone();
        let (aggregate, min_ok) = (settings.panel_aggregate, settings.panel_min_ok);
        let base = JudgeBatch::new(metric, Arc::clone(&rubric), settings).await?;
        let rubric = rubric.as_ref();

        // What each row asks for.
        let plans: Vec<RowPlan> = if self.is_conversation_call(&types) {
            conversation_turns(&arrays[0])?
                .into_iter()
                .map(|turns| match turns {
                    None => RowPlan::Skip,
                    Some(turns) => {
                        RowPlan::Turns(turns.iter().map(|t| turn_inputs(rubric, t)).collect())
                    }
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
                    RowPlan::One(call)
                })
                .collect()
        };
        STATS.rows_received(n as u64);
        let nulls = plans.iter().filter(|p| matches!(p, RowPlan::Skip)).count();
        base.note_rows(&self.name, n, nulls);

        // One batch per panel member (the session's model alone without a panel) and
        // sample (its own seed, so its own calls and cache entries); sample 0 is the call a
        // single judgement makes.
        let members: Vec<JudgeBatch> = if panel.is_empty() {
            vec![base.sample(0)]
        } else {
            panel.iter().map(|m| base.member(m)).collect()
        };
        let mut batches: Vec<Vec<JudgeBatch>> = Vec::with_capacity(members.len());
        for member in &members {
            batches.push(Vec::with_capacity(samples));
            for i in 0..samples {
                let mut batch = member.sample(i);
                let calls: Vec<(String, &CallInputs)> = plans
                    .iter()
                    .flat_map(|p| match p {
                        RowPlan::Skip => vec![],
                        RowPlan::One(inputs) => vec![inputs],
                        RowPlan::Turns(t) => t.iter().flatten().collect(),
                    })
                    .map(|inputs| (batch.key(inputs), inputs))
                    .collect();
                let keys: Vec<&String> = calls.iter().map(|(k, _)| k).collect();
                batch.prefetch(&keys).await?;
                let refs: Vec<(&String, &CallInputs)> =
                    calls.iter().map(|(k, i)| (k, *i)).collect();
                batch.run_batch(&refs).await?;
                batches.last_mut().expect("pushed above").push(batch);
            }
        }
        let panel = (!panel.is_empty()).then_some(PanelRule {
            models: panel,
            aggregate,
            min_ok,
        });
        let panel = &panel;

        let batches = &batches;
        let shape = self.shape;
        let rows = join_all(plans.iter().map(|plan| async move {
            let row = match plan {
                RowPlan::Skip => RowResult {
                    outcome: Outcome::skipped(),
                    per_turn: None,
                    samples: None,
                    panel: None,
                },
                RowPlan::One(inputs) => {
                    let (outcome, samples, members) =
                        judge_row(batches, panel.as_ref(), inputs, shape).await;
                    RowResult {
                        outcome,
                        per_turn: None,
                        samples: Some(samples).filter(|_| members.is_none()),
                        panel: members,
                    }
                }
                RowPlan::Turns(turns) => {
                    let outcomes = join_all(turns.iter().map(|t| async move {
                        match t {
                            Some(inputs) => Some(Arc::new(
                                judge_row(batches, panel.as_ref(), inputs, shape).await.0,
                            )),
                            None => None,
                        }
                    }))
                    .await;
                    combine_turns(&outcomes, self.shape)
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
            Arc::new(details_array(self.shape, rubric, &rows, threshold))
        } else {
            let scores = rows.iter().map(|r| r.outcome.score);
            match self.shape {
                Shape::Quality => Arc::new(scores.collect::<Float64Array>()),
                Shape::Severity => {
                    Arc::new(scores.map(|s| s.map(|s| s as i32)).collect::<Int32Array>())
                }
                Shape::Label | Shape::Kind => {
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
    /// One call's inputs.
    One(CallInputs),
    /// One call per assistant turn (`None`: the turn lacks a required input).
    Turns(Vec<Option<CallInputs>>),
}

struct RowResult {
    outcome: Outcome,
    per_turn: Option<Vec<Option<f64>>>,
    /// Each sample's score (one row, not a conversation, no panel).
    samples: Option<Vec<Option<f64>>>,
    /// Each panel member's (model, score, status).
    panel: Option<Vec<(String, Option<f64>, &'static str)>>,
}

/// How a panel's members combine.
struct PanelRule {
    models: Vec<String>,
    aggregate: PanelAggregate,
    min_ok: Option<usize>,
}

type PanelScores = Vec<(String, Option<f64>, &'static str)>;

/// One call judged by every member and sample: the row's outcome, the samples' scores
/// (without a panel) and each member's score.
async fn judge_row(
    batches: &[Vec<JudgeBatch>],
    panel: Option<&PanelRule>,
    inputs: &CallInputs,
    shape: Shape,
) -> (Outcome, Vec<Option<f64>>, Option<PanelScores>) {
    let members = join_all(
        batches
            .iter()
            .map(|samples| judge_samples(samples, inputs, shape)),
    )
    .await;
    let Some(rule) = panel else {
        let (outcome, samples) = members.into_iter().next().expect("one member");
        return (outcome, samples, None);
    };
    let scores: PanelScores = rule
        .models
        .iter()
        .zip(&members)
        .map(|(m, (o, _))| (m.clone(), o.score, o.status.as_str()))
        .collect();
    (
        combine_panel(&members, rule, shape),
        Vec::new(),
        Some(scores),
    )
}

/// A panel's outcome: the members' scores combined by the rule when at least `min_ok`
/// (default: all) succeeded, else an error naming the first failed member.
fn combine_panel(
    members: &[(Outcome, Vec<Option<f64>>)],
    rule: &PanelRule,
    shape: Shape,
) -> Outcome {
    let ok: Vec<f64> = members
        .iter()
        .filter(|(o, _)| o.status == Status::Ok)
        .filter_map(|(o, _)| o.score)
        .collect();
    let sum =
        |f: fn(&Outcome) -> Option<i64>| members.iter().map(|(o, _)| f(o)).sum::<Option<i64>>();
    let mut outcome = Outcome {
        status: Status::Ok,
        score: None,
        reason: None,
        error: None,
        model: Some(rule.models.join(",")),
        cached: members.iter().all(|(o, _)| o.cached),
        prompt_tokens: sum(|o| o.prompt_tokens),
        cached_tokens: sum(|o| o.cached_tokens),
        completion_tokens: sum(|o| o.completion_tokens),
        cost_usd: members.iter().map(|(o, _)| o.cost_usd).sum(),
        latency_ms: members.iter().map(|(o, _)| o.latency_ms).sum(),
    };
    let needed = rule.min_ok.unwrap_or(members.len());
    if ok.len() < needed.max(1) {
        let (i, failed) = members
            .iter()
            .enumerate()
            .find(|(_, (o, _))| o.status != Status::Ok)
            .map(|(i, (o, _))| (i, o))
            .unwrap_or((0, &members[0].0));
        outcome.status = if failed.status == Status::Skipped {
            Status::Skipped
        } else {
            Status::Error
        };
        outcome.error = Some(format!(
            "panel member {}: {}",
            rule.models[i],
            failed.error.as_deref().unwrap_or("no score")
        ));
        return outcome;
    }
    let mut values = ok;
    values.sort_by(f64::total_cmp);
    outcome.score = Some(match rule.aggregate {
        PanelAggregate::Mean => values.iter().sum::<f64>() / values.len() as f64,
        PanelAggregate::Median => {
            let mid = values.len() / 2;
            if values.len() % 2 == 1 {
                values[mid]
            } else if shape == Shape::Quality {
                (values[mid - 1] + values[mid]) / 2.0
            } else {
                values[mid - 1]
            }
        }
        PanelAggregate::Majority => {
            // Sorted, so the first of the most common scores is the lowest.
            let mut best = (values[0], 0usize);
            let mut i = 0;
            while i < values.len() {
                let j = values[i..].iter().take_while(|v| **v == values[i]).count();
                if j > best.1 {
                    best = (values[i], j);
                }
                i += j;
            }
            best.0
        }
    });
    outcome.reason = Some(
        rule.models
            .iter()
            .zip(members)
            .filter_map(|(m, (o, _))| Some(format!("{m}: {}", o.reason.as_deref()?)))
            .collect::<Vec<_>>()
            .join(" | "),
    );
    outcome
}

/// Every sample's judgement of one call, combined.
async fn judge_samples(
    batches: &[JudgeBatch],
    inputs: &CallInputs,
    shape: Shape,
) -> (Outcome, Vec<Option<f64>>) {
    let outcomes = join_all(
        batches
            .iter()
            .map(|b| async move { b.judge(&b.key(inputs), inputs).await }),
    )
    .await;
    combine_samples(&outcomes, shape)
}

/// The samples of one call as one outcome: the mean score for quality scores, the lower
/// median for severities and flags; an error if any sample failed, not sent if any was
/// not; tokens, dollars and time added up. Also each sample's score.
fn combine_samples(outcomes: &[Arc<Outcome>], shape: Shape) -> (Outcome, Vec<Option<f64>>) {
    let scores: Vec<Option<f64>> = outcomes.iter().map(|o| o.score).collect();
    if let [only] = outcomes {
        return (only.as_ref().clone(), scores);
    }
    let sum = |f: fn(&Outcome) -> Option<i64>| outcomes.iter().map(|o| f(o)).sum::<Option<i64>>();
    let mut outcome = Outcome {
        status: Status::Ok,
        score: None,
        reason: outcomes[0].reason.clone(),
        error: None,
        model: outcomes.iter().find_map(|o| o.model.clone()),
        cached: outcomes.iter().all(|o| o.cached),
        prompt_tokens: sum(|o| o.prompt_tokens),
        cached_tokens: sum(|o| o.cached_tokens),
        completion_tokens: sum(|o| o.completion_tokens),
        cost_usd: outcomes.iter().map(|o| o.cost_usd).sum(),
        latency_ms: outcomes.iter().map(|o| o.latency_ms).sum(),
    };
    if let Some((i, failed)) = outcomes
        .iter()
        .enumerate()
        .find(|(_, o)| o.status != Status::Ok)
    {
        outcome.status = failed.status;
        outcome.reason = None;
        outcome.error = Some(format!(
            "sample {}: {}",
            i + 1,
            failed.error.as_deref().unwrap_or("not judged")
        ));
        return (outcome, scores);
    }
    let mut values: Vec<f64> = scores.iter().flatten().copied().collect();
    outcome.score = match shape {
        Shape::Quality => Some(values.iter().sum::<f64>() / values.len() as f64),
        _ => {
            values.sort_by(f64::total_cmp);
            values.get((values.len() - 1) / 2).copied()
        }
    };
    (outcome, scores)
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
fn combine_turns(turns: &[Option<Arc<Outcome>>], shape: Shape) -> RowResult {
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
            samples: None,
            panel: None,
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
        cached_tokens: sum(|o| o.cached_tokens),
        completion_tokens: sum(|o| o.completion_tokens),
        cost_usd: judged.iter().map(|(_, o)| o.cost_usd).sum(),
        latency_ms: judged.iter().map(|(_, o)| o.latency_ms).sum(),
    };
    // A turn not sent (over budget, a dry run) leaves the conversation unjudged: a score
    // over the other turns would be a guess.
    if let Some((i, unsent)) = judged
        .iter()
        .find(|(_, o)| o.status == Status::Skipped && o.error.is_some())
    {
        outcome.status = Status::Skipped;
        outcome.error = Some(format!(
            "turn {}: {}",
            i + 1,
            unsent.error.as_deref().unwrap_or("not sent")
        ));
    } else if let Some((i, failed)) = judged.iter().find(|(_, o)| o.status == Status::Error) {
        outcome.status = Status::Error;
        outcome.error = Some(format!(
            "turn {}: {}",
            i + 1,
            failed.error.as_deref().unwrap_or("failed")
        ));
    } else {
        let scores: Vec<f64> = judged.iter().filter_map(|(_, o)| o.score).collect();
        outcome.score = Some(match shape {
            Shape::Quality => scores.iter().sum::<f64>() / scores.len() as f64,
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
        samples: None,
        panel: None,
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
        Field::new("cached_tokens", DataType::Int64, true),
        Field::new("cost_usd", DataType::Float64, true),
        Field::new(
            "samples",
            DataType::List(Arc::new(Field::new("item", DataType::Float64, true))),
            true,
        ),
        Field::new("spread", DataType::Float64, true),
        Field::new(
            "panel",
            DataType::List(Arc::new(Field::new(
                "item",
                DataType::Struct(panel_fields()),
                true,
            ))),
            true,
        ),
    ]
}

fn panel_fields() -> Fields {
    Fields::from(vec![
        Field::new("model", DataType::Utf8, true),
        Field::new("score", DataType::Float64, true),
        Field::new("status", DataType::Utf8, true),
    ])
}

/// The fields of `<metric>_details` for a metric of `scale`.
pub fn details_fields(shape: Shape) -> Fields {
    let list = |t: DataType| DataType::List(Arc::new(Field::new("item", t, true)));
    let (mut fields, per_turn) = match shape {
        Shape::Quality => (
            vec![
                Field::new("score", DataType::Float64, true),
                Field::new("passed", DataType::Boolean, true),
                Field::new("threshold", DataType::Float64, true),
            ],
            DataType::Float64,
        ),
        Shape::Severity => (
            vec![
                Field::new("severity_score", DataType::Int32, true),
                Field::new("severity_label", DataType::Utf8, true),
                Field::new("passed", DataType::Boolean, true),
                Field::new("threshold", DataType::Float64, true),
            ],
            DataType::Int32,
        ),
        Shape::Label => (
            vec![Field::new("label", DataType::Boolean, true)],
            DataType::Boolean,
        ),
        Shape::Kind => (
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

fn details_array(shape: Shape, rubric: &Rubric, rows: &[RowResult], threshold: f64) -> StructArray {
    let scores = || rows.iter().map(|r| r.outcome.score);
    let mut columns: Vec<ArrayRef> = match shape {
        Shape::Quality => vec![
            Arc::new(scores().collect::<Float64Array>()),
            Arc::new(
                scores()
                    .map(|s| s.map(|s| s >= threshold))
                    .collect::<BooleanArray>(),
            ),
            Arc::new(Float64Array::from(vec![threshold; rows.len()])),
        ],
        Shape::Severity => vec![
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
        Shape::Label => vec![Arc::new(
            scores()
                .map(|s| s.map(|s| s > 0.0))
                .collect::<BooleanArray>(),
        )],
        Shape::Kind => vec![
            Arc::new(
                scores()
                    .map(|s| s.map(|s| s > 0.0))
                    .collect::<BooleanArray>(),
            ),
            Arc::new(
                scores()
                    .map(|s| s.and_then(|s| rubric.kind_of(s as i64)))
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
    let mut cached_tokens = Int64Builder::new();
    let mut cost = Float64Builder::new();
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
        cached_tokens.append_option(o.cached_tokens);
        cost.append_option(o.cost_usd);
    }
    columns.push(Arc::new(reason.finish()));
    columns.push(Arc::new(status.finish()));
    columns.push(Arc::new(error.finish()));
    columns.push(Arc::new(model.finish()));
    columns.push(Arc::new(cached.finish()));
    columns.push(Arc::new(prompt.finish()));
    columns.push(Arc::new(completion.finish()));
    columns.push(Arc::new(latency.finish()));
    columns.push(Arc::new(cached_tokens.finish()));
    columns.push(Arc::new(cost.finish()));
    let mut sample_list = ListBuilder::new(Float64Builder::new());
    let mut spread = Float64Builder::new();
    for r in rows {
        match &r.samples {
            Some(scores) => {
                for v in scores {
                    sample_list.values().append_option(*v);
                }
                sample_list.append(true);
                // The population standard deviation of the scores (0 for one sample).
                let present: Vec<f64> = scores.iter().flatten().copied().collect();
                spread.append_option((present.len() == scores.len() && !present.is_empty()).then(
                    || {
                        let mean = present.iter().sum::<f64>() / present.len() as f64;
                        (present.iter().map(|x| (x - mean).powi(2)).sum::<f64>()
                            / present.len() as f64)
                            .sqrt()
                    },
                ));
            }
            None => {
                sample_list.append(false);
                spread.append_null();
            }
        }
    }
    columns.push(Arc::new(sample_list.finish()));
    columns.push(Arc::new(spread.finish()));
    let mut panel = ListBuilder::new(StructBuilder::from_fields(panel_fields(), 0));
    for r in rows {
        match &r.panel {
            Some(members) => {
                let items = panel.values();
                for (model, score, status) in members {
                    items
                        .field_builder::<StringBuilder>(0)
                        .expect("model")
                        .append_value(model);
                    items
                        .field_builder::<Float64Builder>(1)
                        .expect("score")
                        .append_option(*score);
                    items
                        .field_builder::<StringBuilder>(2)
                        .expect("status")
                        .append_value(status);
                    items.append(true);
                }
                panel.append(true);
            }
            None => panel.append(false),
        }
    }
    columns.push(Arc::new(panel.finish()));
    columns.push(match shape {
        Shape::Quality => per_turn_list(rows, Float64Builder::new(), |b, v| b.append_option(v)),
        Shape::Severity => per_turn_list(rows, Int32Builder::new(), |b, v| {
            b.append_option(v.map(|v| v as i32))
        }),
        Shape::Label | Shape::Kind => per_turn_list(rows, BooleanBuilder::new(), |b, v| {
            b.append_option(v.map(|v| v > 0.0))
        }),
    });
    StructArray::new(details_fields(shape), columns, None)
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

impl ScalarUDFImpl for JudgeFunc {
    fn name(&self) -> &str {
        &self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.check_args(arg_types)?;
        crate::judge::warm_up();
        Ok(match (self.details, self.shape) {
            (true, shape) => DataType::Struct(details_fields(shape)),
            (false, Shape::Quality) => DataType::Float64,
            (false, Shape::Severity) => DataType::Int32,
            (false, Shape::Label | Shape::Kind) => DataType::Boolean,
        })
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        internal_err!(
            "{} is asynchronous and runs through AsyncFuncExec",
            self.name
        )
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&self.doc)
    }
}

#[async_trait]
impl AsyncScalarUDFImpl for JudgeFunc {
    async fn invoke_async_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        self.run(args).await
    }
}

/// Every built-in judge function: each rubric file under `udfs/rubrics/` whose scale is a
/// score, a severity or a flag, as `<name>` and `<name>_details`.
pub fn judge_functions() -> Result<Vec<Arc<JudgeFunc>>> {
    let mut out = Vec::new();
    for rubric in builtin_rubrics()? {
        if Shape::of(&rubric).is_none() {
            continue;
        }
        let set = Arc::new(RubricSet::new([rubric]).map_err(|e| {
            datafusion::common::DataFusionError::Internal(format!("built-in rubric: {e}"))
        })?);
        for details in [false, true] {
            out.push(Arc::new(JudgeFunc::new(
                Arc::clone(&set),
                details,
                Origin::Builtin,
            )?));
        }
    }
    Ok(out)
}

/// The built-in judge functions as DataFusion UDFs, each registered under its own name (an
/// async UDF with aliases cannot be planned in DataFusion 55).
pub fn scalar_functions() -> Result<Vec<Arc<ScalarUDF>>> {
    Ok(judge_functions()?.into_iter().map(udf).collect())
}

/// DataFusion's `AsyncScalarUDF` does not hand back the implementation it wraps, yet the
/// function catalogue needs a judge's documentation (the wrapper drops it) and the Ballista
/// codec its rubrics. So each judge UDF made by [`udf`] is remembered by the address of its
/// implementation, weakly: an entry dies with its function, and nothing is leaked.
struct Known {
    udf: Weak<dyn ScalarUDFImpl>,
    judge: Weak<JudgeFunc>,
}

static KNOWN: LazyLock<Mutex<Vec<Known>>> = LazyLock::new(Default::default);

/// `f` as a DataFusion UDF.
pub fn udf(f: Arc<JudgeFunc>) -> Arc<ScalarUDF> {
    let udf = AsyncScalarUDF::new(Arc::clone(&f) as Arc<dyn AsyncScalarUDFImpl>).into_scalar_udf();
    let mut known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
    known.retain(|k| k.udf.strong_count() > 0);
    known.push(Known {
        udf: Arc::downgrade(udf.inner()),
        judge: Arc::downgrade(&f),
    });
    Arc::new(udf)
}

/// The judge function behind a UDF made by [`udf`] (`None` for any other function).
pub fn judge_of(udf: &ScalarUDF) -> Option<Arc<JudgeFunc>> {
    let address = Arc::as_ptr(udf.inner()) as *const ();
    KNOWN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|k| k.udf.as_ptr() as *const () == address && k.udf.strong_count() > 0)
        .and_then(|k| k.judge.upgrade())
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
            cached_tokens: Some(0),
            completion_tokens: Some(2),
            cost_usd: None,
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
            combine_turns(&turns, Shape::Severity).outcome.score,
            Some(4.0)
        );
        let r = combine_turns(&turns, Shape::Quality);
        assert_eq!(r.outcome.score, Some(2.5));
        assert_eq!(r.per_turn, Some(vec![Some(4.0), None, Some(1.0)]));
        assert_eq!(r.outcome.prompt_tokens, Some(20));
        let r = combine_turns(
            &[
                Some(outcome(Status::Ok, Some(4.0))),
                Some(outcome(Status::Error, None)),
            ],
            Shape::Quality,
        );
        assert_eq!(r.outcome.status, Status::Error);
        assert_eq!(r.outcome.score, None);
        assert_eq!(r.outcome.error.as_deref(), Some("turn 2: HTTP 400"));
        let r = combine_turns(&[None, None], Shape::Quality);
        assert_eq!(r.outcome.status, Status::Skipped);
    }

    #[test]
    fn signatures_follow_the_rubrics() {
        let all = judge_functions().unwrap();
        // Two functions per rubric file that is not a preference (pairwise_preference).
        let rubrics = builtin_rubrics().unwrap();
        let metrics = rubrics
            .iter()
            .filter(|r| r.scale != Scale::Preference)
            .count();
        assert_eq!(all.len(), 2 * metrics);
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
            DataType::Struct(details_fields(Shape::Quality))
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
