//! The SQL function a fused group of judge calls becomes: `fused_judge[m1,m2,...](args)`,
//! one struct per row with a field per original call (`groundedness`,
//! `relevance_details`, ...), each exactly what that function returns. The planner rule
//! (`src/fuse.rs`) puts it in a projection and reads the fields back out above it, so the
//! statement's columns do not change; only the calls do: one per row for the group.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, StructArray};
use datafusion::arrow::datatypes::{DataType, Field, Fields};
use datafusion::common::{Result, internal_err, plan_err};
use datafusion::logical_expr::async_udf::{AsyncScalarUDF, AsyncScalarUDFImpl};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};
use futures::future::join_all;

use crate::common::{argument_arrays, texts};
use crate::judge::cascade::{judge_cascade, stored_calibration};
use crate::judge::combine::{PanelRule, RowResult, judge_row};
use crate::judge::engine::{CallInputs, JudgeBatch};
use crate::judge::functions::{JudgeFunc, Registry, count_row, judge_batches, judge_of};
use crate::judge::fused::{FusedPart, FusedRubric};
use crate::llm::progress::STATS;
use crate::llm::settings::JudgeSettings;

/// One call of the group: a judge function and which of the group's arguments it takes.
#[derive(Debug, Clone)]
pub struct FusedCall {
    pub func: Arc<JudgeFunc>,
    /// Indexes into the fused function's arguments, in the call's order.
    pub args: Vec<usize>,
}

/// Several judge calls of one projection, judged in one request per row.
#[derive(Debug)]
pub struct FusedJudgeFunc {
    name: String,
    calls: Vec<FusedCall>,
    signature: Signature,
}

impl PartialEq for FusedJudgeFunc {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.calls.len() == other.calls.len()
            && self
                .calls
                .iter()
                .zip(&other.calls)
                .all(|(a, b)| a.func == b.func && a.args == b.args)
    }
}

impl Eq for FusedJudgeFunc {}

impl Hash for FusedJudgeFunc {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name.hash(state);
        for call in &self.calls {
            call.func.hash(state);
            call.args.hash(state);
        }
    }
}

/// The prefix of a fused function's name.
const FUSED_PREFIX: &str = "fused_judge";

impl FusedJudgeFunc {
    /// The group of `calls` (at least two metrics; each a non-conversation call whose
    /// arguments are indexes below `arity`).
    pub fn new(calls: Vec<FusedCall>, arity: usize) -> Result<Self> {
        let mut metrics: Vec<&str> = calls.iter().map(|c| c.func.metric()).collect();
        metrics.sort();
        metrics.dedup();
        if metrics.len() < 2 {
            return internal_err!("a fused judge call needs two metrics or more");
        }
        if let Some(bad) = calls.iter().find(|c| c.args.iter().any(|a| *a >= arity)) {
            return internal_err!("{}: an argument index past {arity}", bad.func.name());
        }
        for (i, a) in calls.iter().enumerate() {
            if calls[..i]
                .iter()
                .any(|b| a.func.metric() == b.func.metric() && a.args != b.args)
            {
                return internal_err!("{}: called twice with other arguments", a.func.metric());
            }
        }
        let names: Vec<&str> = calls.iter().map(|c| c.func.name()).collect();
        Ok(Self {
            name: format!("{FUSED_PREFIX}[{}]", names.join(",")),
            calls,
            signature: Signature::new(TypeSignature::Any(arity), Volatility::Stable),
        })
    }

    /// The calls of the group, in the order of the struct's fields.
    pub fn calls(&self) -> &[FusedCall] {
        &self.calls
    }

    /// As a DataFusion UDF.
    pub fn into_udf(self) -> Arc<ScalarUDF> {
        let f = Arc::new(self);
        let udf =
            AsyncScalarUDF::new(Arc::clone(&f) as Arc<dyn AsyncScalarUDFImpl>).into_scalar_udf();
        KNOWN.remember(&udf, &f);
        Arc::new(udf)
    }

    /// The struct's fields: one per call, named by its function.
    fn fields(&self, arg_types: &[DataType]) -> Result<Fields> {
        let mut fields = Vec::with_capacity(self.calls.len());
        for call in &self.calls {
            let types: Vec<DataType> = call.args.iter().map(|a| arg_types[*a].clone()).collect();
            fields.push(Field::new(
                call.func.name(),
                call.func.return_type(&types)?,
                true,
            ));
        }
        Ok(Fields::from(fields))
    }

    /// Each member's rows, through the same combination of samples and panel members as an
    /// unfused call's, reading its part of each call.
    async fn member_rows(
        &self,
        group: &FusedRubric,
        batches: &[Vec<JudgeBatch>],
        panel: Option<&PanelRule>,
        plans: &[Option<CallInputs>],
        active: &[Vec<bool>],
    ) -> Vec<Vec<RowResult>> {
        join_all(group.parts.iter().enumerate().map(|(i, part)| {
            let shape = self
                .calls
                .iter()
                .find(|c| c.func.metric() == part.metric)
                .expect("every part is a call's metric")
                .func
                .shape();
            join_all(
                plans
                    .iter()
                    .zip(active)
                    .map(move |(plan, active)| async move {
                        let row = match plan {
                            Some(inputs) if active[i] => {
                                let (outcome, samples, members) =
                                    judge_row(batches, panel, inputs, shape, Some(i)).await;
                                RowResult {
                                    samples: Some(samples).filter(|_| members.is_none()),
                                    panel: members,
                                    ..RowResult::of(outcome)
                                }
                            }
                            _ => RowResult::skipped(),
                        };
                        row
                    }),
            )
        }))
        .await
    }

    async fn run(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let n = args.number_rows;
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let fields = self.fields(&types)?;
        let columns: Vec<Vec<Option<String>>> = argument_arrays(&args)?
            .iter()
            .map(texts)
            .collect::<Result<_>>()?;
        let settings = JudgeSettings::from_config(&self.name, &args.config_options)?;

        // Each metric once, with the rubric version the session picks and the input each
        // of its arguments is.
        let mut parts: Vec<(FusedPart, Vec<usize>)> = Vec::new();
        for call in &self.calls {
            let metric = call.func.metric();
            if parts.iter().any(|(p, _)| p.metric == metric) {
                continue;
            }
            let rubric = Arc::clone(call.func.rubrics().pick(settings.pinned_version(metric))?);
            let Some(inputs) = rubric.inputs_for(call.args.len()) else {
                return plan_err!(
                    "{}: version {} of its rubric does not take {} arguments",
                    call.func.name(),
                    rubric.version,
                    call.args.len()
                );
            };
            let inputs = inputs.iter().map(|i| i.name.clone()).collect();
            parts.push((
                FusedPart {
                    metric: metric.to_string(),
                    rubric,
                    inputs,
                },
                call.args.clone(),
            ));
        }
        let argument_of: Vec<(String, usize)> = parts
            .iter()
            .flat_map(|(p, args)| p.inputs.iter().cloned().zip(args.iter().copied()))
            .collect();
        let group = Arc::new(FusedRubric::new(
            parts.iter().map(|(p, _)| p.clone()).collect(),
        ));

        // Each row's call: every input of the group once (those present), and whether each
        // member is judged on it (none: the row is skipped).
        let plans: Vec<Option<CallInputs>> = (0..n)
            .map(|row| {
                let mut call: CallInputs = Vec::new();
                for input in &group.rubric.inputs {
                    let (_, arg) = argument_of
                        .iter()
                        .find(|(name, _)| name == &input.name)
                        .expect("every input of the group is some call's argument");
                    if let Some(v) = &columns[*arg][row] {
                        call.push((input.name.clone(), v.clone()));
                    }
                }
                group.active(&call).contains(&true).then_some(call)
            })
            .collect();
        let threshold_of: Vec<f64> = group
            .parts
            .iter()
            .map(|p| {
                let call = self
                    .calls
                    .iter()
                    .find(|c| c.func.metric() == p.metric)
                    .expect("every part is a call's metric");
                call.func.threshold(&settings, &p.rubric)
            })
            .collect();
        let panel = PanelRule::of(&settings);
        let (samples, models, dry_run) =
            (settings.samples, settings.panel.clone(), settings.dry_run);
        let base = JudgeBatch::fused(Arc::clone(&group), settings).await?;
        let active: Vec<Vec<bool>> = plans
            .iter()
            .map(|p| match p {
                Some(call) => group.active(call),
                None => vec![false; group.parts.len()],
            })
            .collect();
        for call in &self.calls {
            let i = part_index(&group, call.func.metric());
            STATS.rows_received(n as u64);
            if dry_run {
                let skipped = active.iter().filter(|a| !a[i]).count();
                crate::llm::estimate::note_rows(
                    call.func.metric(),
                    call.func.name(),
                    n as u64,
                    skipped as u64,
                );
            }
        }
        let calls: Vec<&CallInputs> = plans.iter().flatten().collect();
        let names = group.names();
        let member_rows = if let Some(cascade) = base.settings.cascade.clone() {
            if !models.is_empty() || samples > 1 {
                return plan_err!(
                    "{}: a cascade judges each row once: it does not combine with \
                     evalsql.judge.panel or samples",
                    self.name
                );
            }
            // The group is one judgement: calibrated as a group and escalated as a group
            // (its confidence is its least confident member's).
            let label = names.join(",");
            let calibration = stored_calibration(&base, &label, &cascade).await?;
            let judged = judge_cascade(&base, &cascade, &calibration, &calls).await?;
            (0..group.parts.len())
                .map(|i| {
                    plans
                        .iter()
                        .zip(&active)
                        .map(|(plan, active)| match plan {
                            Some(inputs) if active[i] => match judged.get(&base.key(inputs)) {
                                Some((outcome, info)) => RowResult {
                                    cascade: Some(info.clone()),
                                    ..RowResult::of(outcome.part(i))
                                },
                                None => RowResult::skipped(),
                            },
                            _ => RowResult::skipped(),
                        })
                        .collect()
                })
                .collect::<Vec<Vec<RowResult>>>()
        } else {
            let batches = judge_batches(&base, &models, samples, &calls, true).await?;
            self.member_rows(&group, &batches, panel.as_ref(), &plans, &active)
                .await
        };

        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.calls.len());
        for call in &self.calls {
            let i = part_index(&group, call.func.metric());
            member_rows[i].iter().for_each(count_row);
            columns.push(call.func.result_array(
                &group.parts[i].rubric,
                &member_rows[i],
                threshold_of[i],
                Some(&names),
            ));
        }
        Ok(ColumnarValue::Array(Arc::new(StructArray::try_new(
            fields, columns, None,
        )?)))
    }
}

fn part_index(group: &FusedRubric, metric: &str) -> usize {
    group
        .parts
        .iter()
        .position(|p| p.metric == metric)
        .expect("every call's metric is a part")
}

impl ScalarUDFImpl for FusedJudgeFunc {
    fn name(&self) -> &str {
        &self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Struct(self.fields(arg_types)?))
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        internal_err!(
            "{} is asynchronous and runs through AsyncFuncExec",
            self.name
        )
    }
}

#[async_trait]
impl AsyncScalarUDFImpl for FusedJudgeFunc {
    async fn invoke_async_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        self.run(args).await
    }
}

/// The fused UDFs made by [`FusedJudgeFunc::into_udf`] (the Ballista codec needs their calls).
static KNOWN: Registry<FusedJudgeFunc> = Registry::new();

/// The fused function behind a UDF made by [`FusedJudgeFunc::into_udf`].
pub fn fused_of(udf: &ScalarUDF) -> Option<Arc<FusedJudgeFunc>> {
    KNOWN.find(udf)
}

/// The tag of a fused function in a serialised plan.
const PLAN_TAG: &str = "evalsql.judge.fused/1";

/// The encoding of a fused function for a plan: each call's function (built-in ones by
/// name, custom ones with their rubrics) and arguments. `None` for any other function.
pub fn encode_fused(udf: &ScalarUDF) -> Option<Vec<u8>> {
    let f = fused_of(udf)?;
    let calls: Vec<serde_json::Value> = f
        .calls
        .iter()
        .map(|c| {
            serde_json::json!({
                "function": c.func.name(),
                "args": c.args,
                "custom": crate::judge::custom::encode_judge(&c.func)
                    .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok()),
            })
        })
        .collect();
    let arity = f.signature.type_signature.clone();
    let arity = match arity {
        TypeSignature::Any(n) => n,
        _ => 0,
    };
    serde_json::to_vec(&serde_json::json!({"tag": PLAN_TAG, "arity": arity, "calls": calls})).ok()
}

/// The function [`encode_fused`] wrote, or `None` when `buf` is not such an encoding.
/// Built-in judges resolve by name here, never from the bytes.
pub fn decode_fused(name: &str, buf: &[u8]) -> Result<Option<Arc<ScalarUDF>>> {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(buf) else {
        return Ok(None);
    };
    if value["tag"] != PLAN_TAG {
        return Ok(None);
    }
    let bad = |why: String| datafusion::common::DataFusionError::Plan(format!("{name}: {why}"));
    let arity = value["arity"]
        .as_u64()
        .ok_or_else(|| bad("no arity".into()))? as usize;
    let mut calls = Vec::new();
    for call in value["calls"].as_array().into_iter().flatten() {
        let function = call["function"]
            .as_str()
            .ok_or_else(|| bad("a call without a function".into()))?;
        let args: Vec<usize> = call["args"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| a.as_u64().map(|a| a as usize))
            .collect::<Option<_>>()
            .ok_or_else(|| bad("bad argument indexes".into()))?;
        let func = match &call["custom"] {
            serde_json::Value::Null => crate::judge::functions::judge_functions()?
                .into_iter()
                .find(|f| f.name() == function)
                .ok_or_else(|| bad(format!("{function} is not a built-in judge metric")))?,
            custom => crate::judge::custom::decode_judge(function, &custom.to_string())?,
        };
        calls.push(FusedCall { func, args });
    }
    Ok(Some(FusedJudgeFunc::new(calls, arity)?.into_udf()))
}

/// Whether every call of a fused UDF is one of a cluster's own judges: a built-in, or one of
/// `own` (the operator's rubric functions) by name, with the very same rubrics. `None`: not a
/// fused UDF.
pub fn fused_is_own(udf: &ScalarUDF, own: &[Arc<ScalarUDF>]) -> Option<bool> {
    let f = fused_of(udf)?;
    let texts = |j: &JudgeFunc| j.rubrics().all().map(|r| r.to_text()).collect::<Vec<_>>();
    Some(f.calls.iter().all(|c| {
        c.func.origin() == crate::judge::functions::Origin::Builtin
            || own.iter().filter_map(|u| judge_of(u)).any(|o| {
                o.metric() == c.func.metric()
                    && o.is_details() == c.func.is_details()
                    && texts(&o) == texts(&c.func)
            })
    }))
}

/// `evalsql_fused_field(fused, 'name')`: one call's result from a fused call's struct. The
/// planner rule reads the group's fields with it rather than with DataFusion's `get_field`,
/// which DataFusion's optimizer pushes towards the scans with its argument: that would
/// copy the fused call below a `LIMIT` or a sort (judging rows the statement then drops)
/// and into every field read.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct FusedFieldFunc {
    signature: Signature,
    doc: datafusion::logical_expr::Documentation,
}

impl Default for FusedFieldFunc {
    fn default() -> Self {
        Self {
            signature: Signature::any(2, Volatility::Immutable),
            doc: datafusion::logical_expr::Documentation::builder(
                crate::common::docs::JUDGE_METRICS,
                "One judge call's result from a fused call (evalsql.judge.fuse); the planner \
                 writes it, a query need not.",
                "evalsql_fused_field(fused, name)",
            )
            .build(),
        }
    }
}

/// The field name argument of [`FusedFieldFunc`].
fn field_name(value: Option<&datafusion::common::ScalarValue>) -> Result<&str> {
    use datafusion::common::ScalarValue;
    match value {
        Some(ScalarValue::Utf8(Some(n)))
        | Some(ScalarValue::Utf8View(Some(n)))
        | Some(ScalarValue::LargeUtf8(Some(n))) => Ok(n),
        _ => plan_err!("evalsql_fused_field(fused, name): the name must be a string literal"),
    }
}

impl ScalarUDFImpl for FusedFieldFunc {
    fn name(&self) -> &str {
        "evalsql_fused_field"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        internal_err!("evalsql_fused_field: return_field_from_args is called instead")
    }

    fn return_field_from_args(
        &self,
        args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> Result<datafusion::arrow::datatypes::FieldRef> {
        let name = field_name(args.scalar_arguments.get(1).copied().flatten())?;
        match args.arg_fields[0].data_type() {
            DataType::Struct(fields) => match fields.find(name) {
                Some((_, field)) => Ok(Arc::clone(field)),
                None => plan_err!("evalsql_fused_field: the struct has no field {name}"),
            },
            other => plan_err!("evalsql_fused_field: expected a struct, got {other}"),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let name = match &args.args[1] {
            ColumnarValue::Scalar(s) => field_name(Some(s))?.to_string(),
            ColumnarValue::Array(_) => {
                return plan_err!("evalsql_fused_field: the name must be a string literal");
            }
        };
        let value = args.args[0].to_array(args.number_rows)?;
        let Some(strukt) = value.as_any().downcast_ref::<StructArray>() else {
            return plan_err!("evalsql_fused_field: expected a struct");
        };
        match strukt.column_by_name(&name) {
            Some(column) => Ok(ColumnarValue::Array(Arc::clone(column))),
            None => plan_err!("evalsql_fused_field: the struct has no field {name}"),
        }
    }

    fn documentation(&self) -> Option<&datafusion::logical_expr::Documentation> {
        Some(&self.doc)
    }
}
