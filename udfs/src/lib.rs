//! evalsql's evaluation metrics as Apache DataFusion functions.
//!
//! The functions live by family: `text/` (a metric per file, with its documentation, its
//! `ScalarUDFImpl` and a plain Rust kernel), `agent/` (two files of functions over shared
//! kernels), `retrieval/`, `stats/` and `traces/` (a few files each), `judge/` (the judged
//! metrics) and `target/` (calling the system under evaluation). Each family's
//! `functions()` lists what it adds ([`Functions`]); [`register_all`] registers every list,
//! and [`catalogue`] describes every function for `evalsql functions`. The judges and the
//! targets make their calls through `llm/`, the call engine (transport, limiter, cache,
//! settings, accounting), which knows nothing of rubrics.

mod agent;
mod common;
mod judge;
mod llm;
mod retrieval;
mod stats;
mod target;
mod text;
mod traces;

// What the binary, the server, the Python module and the benchmarks use; the modules
// themselves are the crate's own.
pub use common::Functions;
pub use common::interrupt;
pub use common::{columnar_result, prepare_args, process_env, truncate_for_error};
pub use judge::rubric::{Rubric, Scale};
pub use judge::{
    FusedCall, FusedFieldFunc, FusedJudgeFunc, JudgeFunc, JudgeFunctionFactory, Origin,
    cancel_batch, decode_custom, decode_fused, encode_custom, encode_fused, fused_is_own, fused_of,
    judge_of, load_rubric_dir, query_spent, recorded_batches, start_query, start_query_in,
    take_unreported_spend,
};
pub use llm::estimate::{Estimate, enable as keep_estimates, take as take_estimates};
pub use llm::progress::Reporter;
pub use llm::settings::{
    JudgeOptions, MODEL_SETTINGS, Restriction, cache_path, fuse_enabled, operator_only,
    pinned_versions, setting_case,
};
pub use stats::{MeanVar, t_quantile};
pub use target::invoke_app::{displayed_url, url_under};
pub use traces::otlp::{ReadOtlpFunc, location_argument, parse_location};
pub use traces::spans;

/// The metrics' plain Rust kernels (no DataFusion types), for Rust callers and the
/// benchmarks: each text metric's `fn(&str, &str) -> f64` and the tokenizers the references
/// use, the agent metrics over parsed trajectories, the statistics' partial states.
pub mod kernels {
    pub use crate::agent::{task_navigation, tool_call, trajectory};
    pub use crate::stats::{bootstrap, calibration, kappa, krippendorff, mean_cs, student_t};
    pub use crate::text::{
        bleu, chrf, exact_match, f1_score, gleu, meteor, ngrams, nltk, porter, rouge, sacrebleu,
        tokenize_13a, tokenize_qa, wordnet,
    };
    pub use crate::traces::otlp;
}

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::catalog::TableFunctionImpl;
use datafusion::common::Result;
use datafusion::execution::FunctionRegistry;
use datafusion::logical_expr::{AggregateUDF, Documentation, ScalarUDF, ScalarUDFImpl, WindowUDF};

/// Every family's functions.
fn families() -> Result<Vec<Functions>> {
    Ok(vec![
        text::functions(),
        agent::functions(),
        retrieval::functions(),
        stats::functions(),
        traces::functions(),
        judge::functions()?,
        target::functions(),
    ])
}

/// Every scalar evaluation function, the LLM judges and targets (async UDFs) included.
pub fn scalar_functions() -> Result<Vec<Arc<ScalarUDF>>> {
    Ok(families()?
        .into_iter()
        .flat_map(|f| f.scalar.into_iter().chain(f.calling))
        .collect())
}

/// The names (and aliases) of the synchronous scalar and the aggregate evaluation
/// functions: what a planner rule looks for to tell a scoring query from any other.
pub fn evaluation_function_names() -> std::collections::HashSet<String> {
    let mut names = std::collections::HashSet::new();
    // Built-in rubrics that do not parse fail `register_all` first; here they only hide
    // the names.
    for family in families().unwrap_or_default() {
        for f in family.scalar {
            names.insert(f.name().to_string());
            names.extend(f.aliases().iter().cloned());
        }
        for f in family.aggregate {
            names.insert(f.name().to_string());
            names.extend(f.aliases().iter().cloned());
        }
    }
    names
}

/// Every aggregate evaluation function.
pub fn aggregate_functions() -> Result<Vec<Arc<AggregateUDF>>> {
    Ok(families()?.into_iter().flat_map(|f| f.aggregate).collect())
}

/// Every window evaluation function.
pub fn window_functions() -> Result<Vec<Arc<WindowUDF>>> {
    Ok(families()?.into_iter().flat_map(|f| f.window).collect())
}

/// Every table function: `judge_cache()` and `read_otlp(path)`.
pub fn table_functions() -> Result<Vec<(&'static str, Arc<dyn TableFunctionImpl>)>> {
    Ok(families()?.into_iter().flat_map(|f| f.table).collect())
}

/// Registers every evaluation function with a session (or any other function registry).
pub fn register_all(registry: &mut dyn FunctionRegistry) -> Result<()> {
    for family in families()? {
        for f in family.scalar.into_iter().chain(family.calling) {
            registry.register_udf(f)?;
        }
        for f in family.aggregate {
            registry.register_udaf(f)?;
        }
        for f in family.window {
            registry.register_udwf(f)?;
        }
    }
    Ok(())
}

/// One line of the function reference.
#[derive(Debug, Clone)]
pub struct FunctionEntry {
    pub name: String,
    /// "scalar", "aggregate" or "window".
    pub kind: &'static str,
    pub section: &'static str,
    pub syntax: String,
    pub returns: String,
    pub description: String,
    pub arguments: Vec<(String, String)>,
}

/// The reference of every built-in evaluation function, sorted by section then name.
pub fn catalogue() -> Vec<FunctionEntry> {
    catalogue_with(&[])
}

/// The reference of every built-in evaluation function and of `extra` functions (custom
/// judge metrics from rubric files), sorted by section then name.
pub fn catalogue_with(extra: &[Arc<ScalarUDF>]) -> Vec<FunctionEntry> {
    let mut out = Vec::new();
    let families = families().unwrap_or_default();
    for f in families.iter().flat_map(|f| &f.scalar) {
        let returns = example_arg_types(f.signature().type_signature.get_example_types())
            .and_then(|types| f.return_type(&types).ok());
        out.push(entry(f.name(), "scalar", f.documentation(), returns));
    }
    // The async wrapper drops documentation, so the judges are described from their impls.
    let custom = extra.iter().filter_map(|f| judge::functions::judge_of(f));
    for f in judge::functions::judge_functions()
        .unwrap_or_default()
        .into_iter()
        .chain(custom)
    {
        let returns = f.return_type(&f.example_arg_types()).ok();
        out.push(entry(f.name(), "scalar", f.documentation(), returns));
    }
    for f in [
        judge::pairwise::PairwiseFunc::default(),
        judge::pairwise::PairwiseFunc::details(),
    ] {
        let returns = f.return_type(&vec![DataType::Utf8; 3]).ok();
        out.push(entry(f.name(), "scalar", f.documentation(), returns));
    }
    for f in target::target_functions() {
        let returns = f.return_type(&[DataType::Utf8, DataType::Utf8]).ok();
        out.push(entry(f.name(), "scalar", f.documentation(), returns));
    }
    for f in families.iter().flat_map(|f| &f.aggregate) {
        let returns = example_arg_types(f.signature().type_signature.get_example_types())
            .and_then(|types| f.return_type(&types).ok());
        out.push(entry(f.name(), "aggregate", f.documentation(), returns));
    }
    for f in families.iter().flat_map(|f| &f.window) {
        out.push(entry(
            f.name(),
            "window",
            f.documentation(),
            Some(DataType::Float64),
        ));
    }
    out.sort_by(|a, b| (a.section, &a.name).cmp(&(b.section, &b.name)));
    out
}

fn example_arg_types(examples: Vec<Vec<DataType>>) -> Option<Vec<DataType>> {
    // User-defined signatures have no examples; their metrics all take two strings first.
    Some(
        examples
            .into_iter()
            .next()
            .unwrap_or_else(|| vec![DataType::Utf8, DataType::Utf8]),
    )
}

fn entry(
    name: &str,
    kind: &'static str,
    doc: Option<&Documentation>,
    returns: Option<DataType>,
) -> FunctionEntry {
    FunctionEntry {
        name: name.to_string(),
        kind,
        section: doc.map(|d| d.doc_section.label).unwrap_or(""),
        syntax: doc.map(|d| d.syntax_example.clone()).unwrap_or_default(),
        returns: returns.map(|t| t.to_string()).unwrap_or_default(),
        description: doc.map(|d| d.description.clone()).unwrap_or_default(),
        arguments: doc.and_then(|d| d.arguments.clone()).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use datafusion::prelude::SessionContext;

    use super::*;

    #[test]
    fn names_are_unique_and_do_not_shadow_datafusion() {
        let ctx = SessionContext::new();
        let builtin: HashSet<String> = ctx
            .state()
            .scalar_functions()
            .keys()
            .chain(ctx.state().aggregate_functions().keys())
            .cloned()
            .collect();
        let mut seen = HashSet::new();
        for e in catalogue() {
            assert!(seen.insert(e.name.clone()), "{} registered twice", e.name);
            assert!(
                !builtin.contains(&e.name),
                "{} shadows a DataFusion function",
                e.name
            );
            assert!(!e.description.is_empty(), "{} has no description", e.name);
            assert!(!e.syntax.is_empty(), "{} has no syntax line", e.name);
        }
    }
}
