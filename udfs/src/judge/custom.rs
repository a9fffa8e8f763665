//! Custom judge metrics without Rust: rubric files in a directory (`--rubrics DIR`,
//! `EVALSQL_RUBRIC_DIR`) and `CREATE FUNCTION ... LANGUAGE judge AS '<rubric>'`.
//!
//! Either way the rubric becomes a judge function like the built-in ones (same engine,
//! `<name>_details` for rubric files), listed by `evalsql functions` with its versions.
//! Several versions of a rubric may be loaded (files `name.md`, `name_v2.md`, ... each with
//! its own `version`); the newest is used unless `SET evalsql.judge.<name>.version = N` pins
//! one. The cache key holds the version and a digest of the rubric text, so an edited rubric
//! never reuses judgements made under the old text.
//!
//! A function holds its rubrics, so a `CREATE FUNCTION` changes the session that ran it and
//! nothing else; in `evalsql serve` that is one connection, and a client cannot replace a
//! function the operator defined.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::common::{DataFusionError, Result, ScalarValue, plan_err};
use datafusion::execution::context::{FunctionFactory, RegisterFunction, SessionState};
use datafusion::logical_expr::{CreateFunction, Expr, ScalarUDF};

use crate::judge::functions::{JudgeFunc, Origin, judge_of, udf};
use crate::judge::rubric::{MAX_RUBRIC_BYTES, Rubric, RubricSet, is_builtin, load_dir};

/// The SQL functions of a metric's rubrics: `name` and `name_details`.
pub fn functions_of(rubrics: RubricSet, origin: Origin) -> Result<[Arc<ScalarUDF>; 2]> {
    let rubrics = Arc::new(rubrics);
    Ok([
        udf(Arc::new(JudgeFunc::new(
            Arc::clone(&rubrics),
            false,
            origin,
        )?)),
        udf(Arc::new(JudgeFunc::new(rubrics, true, origin)?)),
    ])
}

/// Loads a rubric directory (the operator's); returns the functions of every rubric name in it.
pub fn load_rubric_dir(dir: &Path) -> Result<Vec<Arc<ScalarUDF>>> {
    let mut out = Vec::new();
    for set in load_dir(dir)? {
        out.extend(functions_of(set, Origin::Operator)?);
    }
    Ok(out)
}

/// `CREATE FUNCTION name(input TEXT, ...) RETURNS DOUBLE LANGUAGE judge AS '<rubric text>'`.
/// Naming it `name_details` creates the details variant, so both forms can be defined with
/// two statements.
///
/// The text is either a whole rubric file (front matter included: its inputs and scale
/// count, its name must be the function's) or just the instructions: then the inputs are
/// the function's argument names, the scale 1-5 and the version 1.
#[derive(Debug)]
pub struct JudgeFunctionFactory {
    origin: Origin,
}

impl JudgeFunctionFactory {
    /// For the operator's sessions: the CLI, `serve --init`.
    pub fn operator() -> Self {
        Self {
            origin: Origin::Operator,
        }
    }

    /// For a client of a shared server: its functions cannot replace the operator's.
    pub fn client() -> Self {
        Self {
            origin: Origin::Client,
        }
    }
}

impl JudgeFunctionFactory {
    /// Whether a function defined by `origin` may be replaced (or extended with a version)
    /// by this factory's sessions.
    fn may_replace(&self, origin: Origin) -> bool {
        match origin {
            Origin::Builtin => false,
            Origin::Operator => self.origin == Origin::Operator,
            Origin::Client => true,
        }
    }
}

impl Default for JudgeFunctionFactory {
    fn default() -> Self {
        Self::operator()
    }
}

#[async_trait]
impl FunctionFactory for JudgeFunctionFactory {
    async fn create(
        &self,
        state: &SessionState,
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
        if is_builtin(&name) {
            return plan_err!(
                "{name} is a built-in judge metric; give the custom rubric another name"
            );
        }
        if let Some(existing) = state.scalar_functions().get(&statement.name) {
            match judge_of(existing).map(|f| f.origin()) {
                Some(origin) if self.may_replace(origin) => {}
                Some(_) => {
                    return plan_err!(
                        "CREATE FUNCTION {}: the server's operator defined this function; \
                         a client cannot replace it (choose another name)",
                        statement.name
                    );
                }
                None => {
                    return plan_err!(
                        "CREATE FUNCTION {}: {} is a built-in function; give the judge metric \
                         another name",
                        statement.name,
                        statement.name
                    );
                }
            }
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
        if body.len() > MAX_RUBRIC_BYTES {
            return plan_err!(
                "CREATE FUNCTION {name}: the rubric has {} bytes; at most {MAX_RUBRIC_BYTES} \
                 are accepted",
                body.len()
            );
        }
        let bad = |e: String| DataFusionError::Plan(format!("{name}: {e}"));
        let rubric = if body.trim_start().starts_with("---") {
            let r = Rubric::parse(&body).map_err(bad)?;
            if r.name != name {
                return plan_err!("CREATE FUNCTION {name}: the rubric is named {}", r.name);
            }
            r
        } else {
            let inputs: Vec<String> = statement
                .args
                .iter()
                .flatten()
                .enumerate()
                .map(|(i, a)| {
                    a.name
                        .as_ref()
                        .map(|n| n.value.clone())
                        .unwrap_or_else(|| format!("input_{}", i + 1))
                })
                .collect();
            if inputs.is_empty() {
                return plan_err!("CREATE FUNCTION {name}: name its inputs, e.g. (response TEXT)");
            }
            let text = format!(
                "---\nname: {name}\nversion: 1\nmin: 1\nmax: 5\ninputs: {}\n---\n{}",
                inputs.join(", "),
                body.trim()
            );
            Rubric::parse(&text).map_err(bad)?
        };
        // Other versions of the metric this session defined before stay available for
        // `SET evalsql.judge.<name>.version`; the same version is replaced.
        let mut versions: Vec<Arc<Rubric>> = [name.clone(), format!("{name}_details")]
            .iter()
            .filter_map(|n| state.scalar_functions().get(n.as_str()))
            .filter_map(|f| judge_of(f))
            .find(|f| self.may_replace(f.origin()))
            .map(|f| {
                f.rubrics()
                    .all()
                    .filter(|r| r.version != rubric.version)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        versions.push(Arc::new(rubric));
        let set = RubricSet::new(versions).map_err(bad)?;
        let [score, details_fn] = functions_of(set, self.origin)?;
        Ok(RegisterFunction::Scalar(if details {
            details_fn
        } else {
            score
        }))
    }
}

/// Plan serialisation of custom judge functions (for Ballista, which sends functions by
/// name to processes that never saw this session's `CREATE FUNCTION` or rubric files).
const PLAN_TAG: &str = "evalsql.judge.custom/1";

/// The encoding of a custom judge function: every version of its rubric, so a pinned
/// version resolves on the other side too. `None` for any other function.
pub fn encode_custom(function: &ScalarUDF) -> Option<Vec<u8>> {
    encode_judge(judge_of(function)?.as_ref())
}

/// [`encode_custom`] of a judge function.
pub(super) fn encode_judge(f: &JudgeFunc) -> Option<Vec<u8>> {
    if f.origin() == Origin::Builtin {
        return None;
    }
    let rubrics: Vec<String> = f.rubrics().all().map(|r| r.to_text()).collect();
    serde_json::to_vec(&serde_json::json!({
        "tag": PLAN_TAG, "details": f.is_details(), "rubrics": rubrics,
    }))
    .ok()
}

/// The judge function [`encode_judge`] wrote as `text`.
pub(super) fn decode_judge(name: &str, text: &str) -> Result<Arc<JudgeFunc>> {
    let udf = decode_custom(name, text.as_bytes())?.ok_or_else(|| {
        DataFusionError::Plan(format!("{name}: not a custom judge function's encoding"))
    })?;
    judge_of(&udf).ok_or_else(|| DataFusionError::Internal(format!("{name}: not a judge")))
}

/// The function [`encode_custom`] wrote, or `None` when `buf` is not such an encoding.
pub fn decode_custom(name: &str, buf: &[u8]) -> Result<Option<Arc<ScalarUDF>>> {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(buf) else {
        return Ok(None);
    };
    if value["tag"] != PLAN_TAG {
        return Ok(None);
    }
    let bad = |why: String| DataFusionError::Plan(format!("{name}: {why}"));
    let details = value["details"].as_bool().unwrap_or(false);
    let mut rubrics = Vec::new();
    for text in value["rubrics"].as_array().into_iter().flatten() {
        let text = text
            .as_str()
            .ok_or_else(|| bad("a rubric is not text".into()))?;
        let rubric = Rubric::parse(text).map_err(bad)?;
        if is_builtin(&rubric.name) {
            return Err(bad(format!("{} is a built-in judge metric", rubric.name)));
        }
        rubrics.push(Arc::new(rubric));
    }
    let set = RubricSet::new(rubrics).map_err(bad)?;
    let [score, details_fn] = functions_of(set, Origin::Client)?;
    Ok(Some(if details { details_fn } else { score }))
}
