//! Custom judge metrics without Rust: rubric files in a directory (`--rubrics DIR`,
//! `EVALSQL_RUBRIC_DIR`) and `CREATE FUNCTION ... LANGUAGE judge AS '<rubric>'`.
//!
//! Either way the rubric becomes a judge function like the built-in ones (same engine,
//! `<name>_details` for rubric files), listed by `evalsql functions` with its versions.
//! Several versions of a rubric may be loaded (files `name.md`, `name_v2.md`, ... each with
//! its own `version`); the newest is used unless `SET evalsql.judge.<name>.version = N` pins
//! one. The cache key holds the version and a digest of the rubric text, so an edited rubric
//! never reuses judgements made under the old text.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::common::{Result, ScalarValue, plan_err};
use datafusion::execution::context::{FunctionFactory, RegisterFunction, SessionState};
use datafusion::logical_expr::async_udf::AsyncScalarUDF;
use datafusion::logical_expr::{CreateFunction, Expr, ScalarUDF};

use super::functions::JudgeFunc;
use super::rubric::{Rubric, RubricInput, custom_versions, load_dir, register_custom, rubric};

/// The SQL functions of a custom rubric: `name` and `name_details`.
pub fn functions_of(rubric: &Rubric) -> Vec<Arc<ScalarUDF>> {
    [false, true]
        .into_iter()
        .map(|details| {
            Arc::new(
                AsyncScalarUDF::new(Arc::new(JudgeFunc::custom(rubric, details))).into_scalar_udf(),
            )
        })
        .collect()
}

/// Loads a rubric directory; returns the functions of every rubric name in it.
pub fn load_rubric_dir(dir: &Path) -> Result<Vec<Arc<ScalarUDF>>> {
    let rubrics = load_dir(dir)?;
    let mut names: Vec<&str> = rubrics.iter().map(|r| r.name.as_str()).collect();
    names.sort();
    names.dedup();
    let mut out = Vec::new();
    for name in names {
        // The newest version describes the function (arity, docs).
        let newest = rubrics
            .iter()
            .filter(|r| r.name == name)
            .max_by_key(|r| r.version)
            .expect("a loaded name has a rubric");
        out.extend(functions_of(newest));
    }
    Ok(out)
}

/// `CREATE FUNCTION name(input TEXT, ...) RETURNS DOUBLE LANGUAGE judge AS '<rubric text>'`.
/// Naming it `name_details` creates the details variant (the same rubric, registered under
/// `name`), so both forms can be defined with two statements.
///
/// The text is either a whole rubric file (front matter included: its inputs and scale
/// count, its name must be the function's) or just the instructions: then the inputs are
/// the function's argument names, the scale 1-5 and the version 1.
#[derive(Debug, Default)]
pub struct JudgeFunctionFactory;

#[async_trait]
impl FunctionFactory for JudgeFunctionFactory {
    async fn create(
        &self,
        _state: &SessionState,
        statement: CreateFunction,
    ) -> Result<RegisterFunction> {
        // `CREATE FUNCTION m_details(...)` defines `m` and returns its details function.
        let (name, details) = match statement.name.strip_suffix("_details") {
            Some(base) if !base.is_empty() => (base.to_string(), true),
            _ => (statement.name.clone(), false),
        };
        let language = statement
            .params
            .language
            .as_ref()
            .map(|l| l.value.to_ascii_lowercase());
        if language.as_deref() != Some("judge") {
            return plan_err!(
                "CREATE FUNCTION {name}: evalsql creates judge metrics: add LANGUAGE judge AS \
                 '<rubric>'"
            );
        }
        let body = match &statement.params.function_body {
            Some(Expr::Literal(
                ScalarValue::Utf8(Some(s))
                | ScalarValue::Utf8View(Some(s))
                | ScalarValue::LargeUtf8(Some(s)),
                _,
            )) => s.clone(),
            _ => return plan_err!("CREATE FUNCTION {name}: the body must be the rubric text"),
        };
        let rubric = if body.trim_start().starts_with("---") {
            let r = Rubric::parse(&body)
                .map_err(|e| datafusion::common::DataFusionError::Plan(format!("{name}: {e}")))?;
            if r.name != name {
                return plan_err!("CREATE FUNCTION {name}: the rubric is named {}", r.name);
            }
            r
        } else {
            let inputs: Vec<RubricInput> = statement
                .args
                .iter()
                .flatten()
                .enumerate()
                .map(|(i, a)| RubricInput {
                    name: a
                        .name
                        .as_ref()
                        .map(|n| n.value.clone())
                        .unwrap_or_else(|| format!("input_{}", i + 1)),
                    optional: false,
                })
                .collect();
            if inputs.is_empty() {
                return plan_err!("CREATE FUNCTION {name}: name its inputs, e.g. (response TEXT)");
            }
            let text = format!(
                "---\nname: {name}\nversion: 1\nmin: 1\nmax: 5\ninputs: {}\n---\n{}",
                inputs
                    .iter()
                    .map(|i| i.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                body.trim()
            );
            Rubric::parse(&text)
                .map_err(|e| datafusion::common::DataFusionError::Plan(format!("{name}: {e}")))?
        };
        let rubric = register_custom(rubric)?;
        let mut functions = functions_of(rubric);
        Ok(RegisterFunction::Scalar(
            functions.swap_remove(usize::from(details)),
        ))
    }
}

/// Plan serialisation of custom judge functions (for Ballista, which sends functions by
/// name to processes that never saw this session's `CREATE FUNCTION` or rubric files).
const PLAN_TAG: &str = "evalsql.judge.custom/1";

/// The encoding of the custom judge function `name` (or `name_details`): every version of
/// its rubric, so a pinned version resolves on the other side too. `None` when `name` is
/// not a custom judge.
pub fn encode_custom(name: &str) -> Option<Vec<u8>> {
    let (metric, details) = match name.strip_suffix("_details") {
        Some(base) if !custom_versions(base).is_empty() => (base, true),
        _ => (name, false),
    };
    let rubrics: Vec<String> = custom_versions(metric)
        .into_iter()
        .filter_map(|v| rubric(metric, Some(v)).ok())
        .map(Rubric::to_text)
        .collect();
    if rubrics.is_empty() {
        return None;
    }
    serde_json::to_vec(&serde_json::json!({
        "tag": PLAN_TAG, "details": details, "rubrics": rubrics,
    }))
    .ok()
}

/// Registers the rubrics [`encode_custom`] wrote and returns the function, or `None` when
/// `buf` is not such an encoding.
pub fn decode_custom(name: &str, buf: &[u8]) -> Result<Option<Arc<ScalarUDF>>> {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(buf) else {
        return Ok(None);
    };
    if value["tag"] != PLAN_TAG {
        return Ok(None);
    }
    let bad = |why: String| datafusion::common::DataFusionError::Plan(format!("{name}: {why}"));
    let details = value["details"].as_bool().unwrap_or(false);
    let mut newest: Option<&'static Rubric> = None;
    for text in value["rubrics"].as_array().into_iter().flatten() {
        let text = text
            .as_str()
            .ok_or_else(|| bad("a rubric is not text".into()))?;
        let r = register_custom(Rubric::parse(text).map_err(bad)?)?;
        if newest.is_none_or(|n| r.version > n.version) {
            newest = Some(r);
        }
    }
    let newest = newest.ok_or_else(|| bad("no rubric in the plan".into()))?;
    Ok(Some(functions_of(newest).swap_remove(usize::from(details))))
}
