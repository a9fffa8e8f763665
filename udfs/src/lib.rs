//! evalsql's evaluation metrics as Apache DataFusion functions.
//!
//! The functions live by family: `text/` (a metric per file, with its documentation, its
//! `ScalarUDFImpl` and a plain Rust kernel), `agent/` (two files of functions over shared
//! kernels), `retrieval/`, `stats/` and `traces/` (a few files each), `judge/` (the judged
//! metrics and the engine their calls go through) and `target/` (calling the system under
//! evaluation). [`register_all`] is the single entry point; [`catalogue`] describes every
//! function for `evalsql functions`.

pub mod agent;
pub mod common;
pub mod judge;
pub mod llm;
pub mod retrieval;
pub mod stats;
pub mod target;
pub mod text;
pub mod traces;

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::Result;
use datafusion::execution::FunctionRegistry;
use datafusion::logical_expr::{AggregateUDF, Documentation, ScalarUDF, ScalarUDFImpl, WindowUDF};

/// Every synchronous scalar evaluation function.
fn sync_scalar_functions() -> Vec<Arc<ScalarUDF>> {
    let mut all = text::scalar_functions();
    all.extend(agent::scalar_functions());
    all.extend(retrieval::scalar_functions());
    all.push(Arc::new(ScalarUDF::new_from_impl(
        judge::messages::ParseMessagesFunc::default(),
    )));
    all
}

/// Every scalar evaluation function, the LLM judges (async UDFs) included.
pub fn scalar_functions() -> Result<Vec<Arc<ScalarUDF>>> {
    let mut all = sync_scalar_functions();
    all.extend(judge::functions::scalar_functions()?);
    all.extend(target::scalar_functions());
    all.extend(judge::pairwise::scalar_functions());
    Ok(all)
}

/// The names (and aliases) of the synchronous scalar and the aggregate evaluation
/// functions: what a planner rule looks for to tell a scoring query from any other.
pub fn evaluation_function_names() -> std::collections::HashSet<String> {
    let mut names = std::collections::HashSet::new();
    for f in sync_scalar_functions() {
        names.insert(f.name().to_string());
        names.extend(f.aliases().iter().cloned());
    }
    for f in aggregate_functions() {
        names.insert(f.name().to_string());
        names.extend(f.aliases().iter().cloned());
    }
    names
}

/// Every aggregate evaluation function.
pub fn aggregate_functions() -> Vec<Arc<AggregateUDF>> {
    let mut all = text::aggregate_functions();
    all.push(Arc::new(AggregateUDF::new_from_impl(
        judge::safety::DefectRateFunc::default(),
    )));
    all.push(Arc::new(AggregateUDF::new_from_impl(
        stats::rates::RateFunc::pass_rate(),
    )));
    all.push(Arc::new(AggregateUDF::new_from_impl(
        stats::rates::RateFunc::win_rate(),
    )));
    all.push(Arc::new(AggregateUDF::new_from_impl(
        stats::mean_ci::MeanCiFunc::default(),
    )));
    all.push(Arc::new(AggregateUDF::new_from_impl(
        stats::bootstrap_ci::BootstrapCiFunc::default(),
    )));
    all.push(Arc::new(AggregateUDF::new_from_impl(
        stats::paired_bootstrap_pvalue::PairedBootstrapPvalueFunc::default(),
    )));
    all.push(Arc::new(AggregateUDF::new_from_impl(
        stats::cohen_kappa::CohenKappaFunc::default(),
    )));
    all.push(Arc::new(AggregateUDF::new_from_impl(
        stats::krippendorff::KrippendorffAlphaFunc::default(),
    )));
    all.push(Arc::new(AggregateUDF::new_from_impl(
        stats::ppi::PpiMeanCiFunc::default(),
    )));
    all.push(Arc::new(AggregateUDF::new_from_impl(
        traces::trajectory_agg::TrajectoryAggFunc::default(),
    )));
    for hat in [false, true] {
        all.push(Arc::new(AggregateUDF::new_from_impl(
            stats::pass_at_k::PassAtKFunc::new(hat),
        )));
    }
    all
}

/// Every window evaluation function.
pub fn window_functions() -> Vec<Arc<WindowUDF>> {
    vec![Arc::new(WindowUDF::new_from_impl(
        stats::fdr_bh::FdrBhFunc::default(),
    ))]
}

/// Registers every evaluation function with a session (or any other function registry).
pub fn register_all(registry: &mut dyn FunctionRegistry) -> Result<()> {
    for f in scalar_functions()? {
        registry.register_udf(f)?;
    }
    for f in aggregate_functions() {
        registry.register_udaf(f)?;
    }
    for f in window_functions() {
        registry.register_udwf(f)?;
    }
    Ok(())
}

/// Every table function: `judge_cache()` and `read_otlp(path)`.
pub fn table_functions() -> Vec<(
    &'static str,
    Arc<dyn datafusion::catalog::TableFunctionImpl>,
)> {
    vec![
        (
            "judge_cache",
            Arc::new(judge::JudgeCacheTableFunc) as Arc<dyn datafusion::catalog::TableFunctionImpl>,
        ),
        ("read_otlp", Arc::new(traces::otlp::ReadOtlpFunc)),
    ]
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
    for f in sync_scalar_functions() {
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
    for f in aggregate_functions() {
        let returns = example_arg_types(f.signature().type_signature.get_example_types())
            .and_then(|types| f.return_type(&types).ok());
        out.push(entry(f.name(), "aggregate", f.documentation(), returns));
    }
    for f in window_functions() {
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
