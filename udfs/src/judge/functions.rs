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
use datafusion::arrow::array::{ArrayRef, BooleanArray, Float64Array, Int32Array};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, internal_err, plan_err};
use datafusion::logical_expr::async_udf::{AsyncScalarUDF, AsyncScalarUDFImpl};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    TypeSignature, Volatility,
};
use futures::future::join_all;

use crate::common::docs::{JUDGE_METRICS, SAFETY_METRICS};
use crate::common::{argument_arrays, texts};
use crate::judge::cascade::{judge_cascade, stored_calibration};
use crate::judge::combine::{PanelRule, RowResult, combine_turns, judge_row, turn_inputs};
use crate::judge::details::{details_array, details_fields};
use crate::judge::engine::{CallInputs, JudgeBatch, Outcome, Status};
use crate::judge::messages::{conversation_turns, is_conversation_type};
use crate::judge::rubric::{Rubric, RubricInput, RubricSet, Shape, builtin_rubrics};
use crate::llm::progress::STATS;
use crate::llm::settings::JudgeSettings;

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

    pub(super) fn shape(&self) -> Shape {
        self.shape
    }

    /// Whether a call with arguments of `arg_types` judges a conversation turn by turn.
    pub fn is_conversation_call(&self, arg_types: &[DataType]) -> bool {
        self.rubrics.newest().conversation
            && arg_types.len() == 1
            && is_conversation_type(&arg_types[0])
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
        let threshold = self.threshold(&settings, &rubric);
        let panel = PanelRule::of(&settings);
        let (samples, models) = (settings.samples, settings.panel.clone());
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

        let calls: Vec<&CallInputs> = plans
            .iter()
            .flat_map(|p| match p {
                RowPlan::Skip => vec![],
                RowPlan::One(inputs) => vec![inputs],
                RowPlan::Turns(t) => t.iter().flatten().collect(),
            })
            .collect();
        if let Some(cascade) = base.settings.cascade.clone() {
            if !models.is_empty() || samples > 1 {
                return plan_err!(
                    "{}: a cascade judges each row once (with the small model, or escalated to \
                     the main one): it does not combine with evalsql.judge.panel or samples",
                    self.name
                );
            }
            let calibration = stored_calibration(&base, metric, &cascade).await?;
            let judged = judge_cascade(&base, &cascade, &calibration, &calls).await?;
            let rows: Vec<RowResult> = plans
                .iter()
                .map(|plan| {
                    let of = |inputs: &CallInputs| judged.get(&base.key(inputs)).cloned();
                    let row = match plan {
                        RowPlan::Skip => RowResult::skipped(),
                        RowPlan::One(inputs) => match of(inputs) {
                            Some((outcome, info)) => RowResult {
                                cascade: Some(info),
                                ..RowResult::of(outcome)
                            },
                            None => RowResult::skipped(),
                        },
                        RowPlan::Turns(turns) => {
                            let outcomes: Vec<Option<Arc<Outcome>>> = turns
                                .iter()
                                .map(|t| t.as_ref().and_then(|i| of(i)).map(|(o, _)| Arc::new(o)))
                                .collect();
                            combine_turns(&outcomes, self.shape)
                        }
                    };
                    count_row(&row);
                    row
                })
                .collect();
            return Ok(ColumnarValue::Array(
                self.result_array(rubric, &rows, threshold, None),
            ));
        }
        let batches = judge_batches(&base, &models, samples, &calls, false).await?;
        let panel = &panel;
        let batches = &batches;
        let shape = self.shape;
        let rows = join_all(plans.iter().map(|plan| async move {
            let row = match plan {
                RowPlan::Skip => RowResult::skipped(),
                RowPlan::One(inputs) => {
                    let (outcome, samples, members) =
                        judge_row(batches, panel.as_ref(), inputs, shape, None).await;
                    RowResult {
                        samples: Some(samples).filter(|_| members.is_none()),
                        panel: members,
                        ..RowResult::of(outcome)
                    }
                }
                RowPlan::Turns(turns) => {
                    let outcomes = join_all(turns.iter().map(|t| async move {
                        match t {
                            Some(inputs) => Some(Arc::new(
                                judge_row(batches, panel.as_ref(), inputs, shape, None)
                                    .await
                                    .0,
                            )),
                            None => None,
                        }
                    }))
                    .await;
                    combine_turns(&outcomes, self.shape)
                }
            };
            count_row(&row);
            row
        }))
        .await;

        Ok(ColumnarValue::Array(
            self.result_array(rubric, &rows, threshold, None),
        ))
    }

    /// The pass threshold the session applies to this metric.
    pub(super) fn threshold(&self, settings: &JudgeSettings, rubric: &Rubric) -> f64 {
        let default_threshold = rubric.default_threshold();
        match self.shape {
            Shape::Quality => settings.threshold(self.metric(), default_threshold),
            _ => settings.own_threshold(self.metric(), default_threshold),
        }
    }

    /// The function's result for a batch's rows: the scores, or the `_details` structs
    /// (`fused`: the metrics that shared each judged row's call).
    pub(super) fn result_array(
        &self,
        rubric: &Rubric,
        rows: &[RowResult],
        threshold: f64,
        fused: Option<&[String]>,
    ) -> ArrayRef {
        if self.details {
            return Arc::new(details_array(self.shape, rubric, rows, threshold, fused));
        }
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
    }
}

/// The batches that judge `calls`: one per panel member (`models`; the session's model
/// alone without a panel) and sample (its own seed, so its own calls and cache entries;
/// sample 0 is the call a single judgement makes), each with its cached judgements read
/// and, in batch mode, its calls settled through the Batch API.
/// With `settle`, every call is judged here, once, for the several readers of each (a fused
/// group's members).
pub(super) async fn judge_batches(
    base: &JudgeBatch,
    models: &[String],
    samples: usize,
    calls: &[&CallInputs],
    settle: bool,
) -> Result<Vec<Vec<JudgeBatch>>> {
    let members: Vec<JudgeBatch> = if models.is_empty() {
        vec![base.sample(0)]
    } else {
        models.iter().map(|m| base.member(m)).collect()
    };
    let mut batches: Vec<Vec<JudgeBatch>> = Vec::with_capacity(members.len());
    for member in &members {
        batches.push(Vec::with_capacity(samples));
        for i in 0..samples {
            let mut batch = member.sample(i);
            let keyed: Vec<(String, &CallInputs)> = calls
                .iter()
                .map(|inputs| (batch.key(inputs), *inputs))
                .collect();
            let refs: Vec<(&String, &CallInputs)> = keyed.iter().map(|(k, i)| (k, *i)).collect();
            batch.ready(&refs, settle).await?;
            batches.last_mut().expect("pushed above").push(batch);
        }
    }
    Ok(batches)
}

/// Counts a finished row for the progress line.
pub(super) fn count_row(row: &RowResult) {
    match row.outcome.status {
        Status::Skipped => STATS.skipped(),
        Status::Error => STATS.error(),
        Status::Ok => {}
    }
    STATS.row_done();
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

impl ScalarUDFImpl for JudgeFunc {
    fn name(&self) -> &str {
        &self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.check_args(arg_types)?;
        crate::llm::transport::warm_up();
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
    Ok(builtin()?.iter().map(|(f, _)| Arc::clone(f)).collect())
}

/// The built-in judge functions as DataFusion UDFs, each registered under its own name (an
/// async UDF with aliases cannot be planned in DataFusion 55).
pub fn scalar_functions() -> Result<Vec<Arc<ScalarUDF>>> {
    Ok(builtin()?.iter().map(|(_, u)| Arc::clone(u)).collect())
}

/// The built-in judge functions and their UDFs. They never change, so they are made once per
/// process: every session, function list and the catalogue share them (making them is most
/// of the cost of listing evalsql's functions).
fn builtin() -> Result<&'static [(Arc<JudgeFunc>, Arc<ScalarUDF>)]> {
    static BUILTIN: LazyLock<std::result::Result<Vec<(Arc<JudgeFunc>, Arc<ScalarUDF>)>, String>> =
        LazyLock::new(|| {
            let mut out = Vec::new();
            for rubric in builtin_rubrics().map_err(|e| e.to_string())? {
                if Shape::of(&rubric).is_none() {
                    continue;
                }
                let set = Arc::new(
                    RubricSet::new([rubric]).map_err(|e| format!("built-in rubric: {e}"))?,
                );
                for details in [false, true] {
                    let f = Arc::new(
                        JudgeFunc::new(Arc::clone(&set), details, Origin::Builtin)
                            .map_err(|e| e.to_string())?,
                    );
                    out.push((Arc::clone(&f), udf(f)));
                }
            }
            Ok(out)
        });
    match &*BUILTIN {
        Ok(functions) => Ok(functions),
        Err(e) => internal_err!("{e}"),
    }
}

/// DataFusion's `AsyncScalarUDF` does not hand back the implementation it wraps, yet the
/// function catalogue needs a judge's documentation (the wrapper drops it) and the Ballista
/// codec its rubrics (or a fused group's calls). So each such UDF is remembered by the
/// address of its implementation, weakly: an entry dies with its function, and nothing is
/// leaked.
pub(super) struct Registry<T> {
    known: Mutex<Vec<(Weak<dyn ScalarUDFImpl>, Weak<T>)>>,
}

impl<T> Registry<T> {
    pub(super) const fn new() -> Self {
        Self {
            known: Mutex::new(Vec::new()),
        }
    }

    /// Remembers that `udf` wraps `f`.
    pub(super) fn remember(&self, udf: &ScalarUDF, f: &Arc<T>) {
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        known.retain(|(u, _)| u.strong_count() > 0);
        known.push((Arc::downgrade(udf.inner()), Arc::downgrade(f)));
    }

    /// What `udf` wraps, if it was remembered here.
    pub(super) fn find(&self, udf: &ScalarUDF) -> Option<Arc<T>> {
        let address = Arc::as_ptr(udf.inner()) as *const ();
        self.known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|(u, _)| u.as_ptr() as *const () == address && u.strong_count() > 0)
            .and_then(|(_, f)| f.upgrade())
    }
}

static KNOWN: Registry<JudgeFunc> = Registry::new();

/// `f` as a DataFusion UDF.
pub fn udf(f: Arc<JudgeFunc>) -> Arc<ScalarUDF> {
    let udf = AsyncScalarUDF::new(Arc::clone(&f) as Arc<dyn AsyncScalarUDFImpl>).into_scalar_udf();
    KNOWN.remember(&udf, &f);
    Arc::new(udf)
}

/// The judge function behind a UDF made by [`udf`] (`None` for any other function).
pub fn judge_of(udf: &ScalarUDF) -> Option<Arc<JudgeFunc>> {
    KNOWN.find(udf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::combine::combine_turns;
    use crate::judge::rubric::Scale;

    fn outcome(status: Status, score: Option<f64>) -> Arc<Outcome> {
        Arc::new(Outcome {
            status,
            score,
            reason: Some("r".into()),
            error: (status == Status::Error).then(|| "HTTP 400".to_string()),
            model: Some("m".into()),
            cached: false,
            usage: crate::llm::usage::Usage {
                prompt_tokens: Some(10),
                cached_tokens: Some(0),
                completion_tokens: Some(2),
                cost_usd: None,
                latency_ms: Some(5.0),
            },
            parts: Vec::new(),
            confidence: None,
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
        assert_eq!(r.outcome.usage.prompt_tokens, Some(20));
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
