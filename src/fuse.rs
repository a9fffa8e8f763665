//! Fused judge calls (`SET evalsql.judge.fuse = true`): a logical rewrite that groups the
//! judge calls of one projection over the same row into one fused call per row.
//!
//! ```text
//! Projection: groundedness(q, c, r), relevance(q, r) > 3 AS ok, fluency(r)
//! =>
//! Projection: evalsql_fused_field(__evalsql_fused_0, 'groundedness') AS "groundedness(q,c,r)",
//!             evalsql_fused_field(__evalsql_fused_0, 'relevance') > 3 AS ok, ...
//!   Projection: <input columns>,
//!               fused_judge[groundedness,relevance,fluency](q, c, r) AS __evalsql_fused_0
//! ```
//!
//! The fused function (`evalsql_udfs::FusedJudgeFunc`) returns one struct per row with the
//! result of each original call, so the statement's columns keep their names and types.
//! Calls are grouped when they judge the same row with the same inputs: every input name
//! (`query`, `response`, ...) must be the same expression in each call of a group (calls
//! that differ go to another group), a metric appears with one set of arguments per group,
//! and conversation calls (one list of messages) stay single. A group needs two metrics or
//! more. The session's judge settings are the same for every call of a statement, so the
//! model and call settings agree by construction.
//!
//! Runs after [`crate::async_aggregates::AsyncAggregateArguments`], which moves judge calls
//! out of aggregate arguments into a projection: `avg(groundedness(..)), avg(relevance(..))`
//! are fused too. Installed on local sessions (CLI, `serve`) and the Ballista scheduler,
//! whose plan codec carries fused functions to the executors.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema, Result};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    Expr, ExprSchemable, LogicalPlan, Projection, ScalarUDF, ScalarUDFImpl, lit,
};
use datafusion::optimizer::{ApplyOrder, OptimizerConfig, OptimizerRule};
use evalsql_udfs::{
    FusedCall, FusedJudgeFunc, JudgeFunc, JudgeOptions, fuse_enabled, judge_of, pinned_versions,
};

/// Groups a projection's judge calls into fused calls (see the module docs).
#[derive(Debug, Default)]
pub struct FuseJudgeCalls;

const PREFIX: &str = "__evalsql_fused_";

/// Reads one call's field of a fused call's struct (not `get_field`, which DataFusion's
/// optimizer would push, fused call and all, towards the scans).
static FIELD: std::sync::LazyLock<Arc<ScalarUDF>> = std::sync::LazyLock::new(|| {
    Arc::new(ScalarUDF::new_from_impl(
        evalsql_udfs::FusedFieldFunc::default(),
    ))
});

/// One judge call of the projection that may be fused.
struct Candidate {
    call: Expr,
    func: Arc<JudgeFunc>,
    args: Vec<Expr>,
    /// The input each argument is, by the newest rubric's arity.
    names: Vec<String>,
}

/// Calls judged together: each input name bound to one expression.
#[derive(Default)]
struct Group {
    bindings: Vec<(String, Expr)>,
    members: Vec<usize>,
}

impl Group {
    fn admits(&self, c: &Candidate, all: &[Candidate]) -> bool {
        let same_inputs = c.names.iter().zip(&c.args).all(|(name, arg)| {
            self.bindings
                .iter()
                .all(|(bound, expr)| bound != name || expr == arg)
        });
        let same_metric_args = self.members.iter().all(|m| {
            let other = &all[*m];
            other.func.metric() != c.func.metric() || other.args == c.args
        });
        same_inputs && same_metric_args
    }

    fn metrics(&self, all: &[Candidate]) -> usize {
        let mut m: Vec<&str> = self.members.iter().map(|i| all[*i].func.metric()).collect();
        m.sort();
        m.dedup();
        m.len()
    }
}

impl OptimizerRule for FuseJudgeCalls {
    fn name(&self) -> &str {
        "evalsql_fuse_judge_calls"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::BottomUp)
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        let LogicalPlan::Projection(projection) = plan else {
            return Ok(Transformed::no(plan));
        };
        if !fuse_enabled(&config.options()) {
            return Ok(Transformed::no(LogicalPlan::Projection(projection)));
        }
        let input_schema = projection.input.schema();
        let options = config.options();
        let versions = pinned_versions(options.extensions.get::<JudgeOptions>());
        let candidates = candidates(&projection.expr, input_schema, &versions)?;
        let groups = group(&candidates);
        if groups.is_empty() {
            return Ok(Transformed::no(LogicalPlan::Projection(projection)));
        }

        // Below: the input's columns and one fused call per group.
        let mut inner: Vec<Expr> = input_schema
            .columns()
            .into_iter()
            .map(Expr::Column)
            .collect();
        let mut replaced: Vec<(Expr, Expr)> = Vec::new();
        let mut taken: Vec<String> = input_schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        for group in &groups {
            let mut args: Vec<Expr> = Vec::new();
            let mut calls = Vec::new();
            for m in &group.members {
                let c = &candidates[*m];
                let indexes = c
                    .args
                    .iter()
                    .map(|a| match args.iter().position(|x| x == a) {
                        Some(i) => i,
                        None => {
                            args.push(a.clone());
                            args.len() - 1
                        }
                    })
                    .collect();
                calls.push(FusedCall {
                    func: Arc::clone(&c.func),
                    args: indexes,
                });
            }
            let udf = FusedJudgeFunc::new(calls, args.len())?.into_udf();
            let name = free_name(&mut taken);
            inner.push(Expr::ScalarFunction(ScalarFunction::new_udf(udf, args)).alias(&name));
            for m in &group.members {
                let c = &candidates[*m];
                let field = Expr::ScalarFunction(ScalarFunction::new_udf(
                    Arc::clone(&FIELD),
                    vec![
                        Expr::Column(Column::from_name(&name)),
                        lit(c.func.name().to_string()),
                    ],
                ));
                replaced.push((c.call.clone(), field));
            }
        }
        let inner = Projection::try_new(inner, Arc::clone(&projection.input))?;
        Ok(match over(&projection, inner, &replaced)? {
            Some(plan) => Transformed::yes(plan),
            None => Transformed::no(LogicalPlan::Projection(projection)),
        })
    }
}

/// `projection`'s expressions over `inner`, each `(call, column)` of `replaced` read from
/// `inner`; `None` should the schema not come out the same.
fn over(
    projection: &Projection,
    inner: Projection,
    replaced: &[(Expr, Expr)],
) -> Result<Option<LogicalPlan>> {
    let mut outer = Vec::with_capacity(projection.expr.len());
    for e in &projection.expr {
        let (qualifier, name) = e.qualified_name();
        let rewritten = e
            .clone()
            .transform_down(|sub| match replaced.iter().find(|(c, _)| c == &sub) {
                Some((_, field)) => Ok(Transformed::new(
                    field.clone(),
                    true,
                    TreeNodeRecursion::Jump,
                )),
                None => Ok(Transformed::no(sub)),
            })?
            .data;
        outer.push(
            if rewritten.qualified_name() == (qualifier.clone(), name.clone()) {
                rewritten
            } else {
                rewritten.alias_qualified(qualifier, name)
            },
        );
    }
    let rewritten = Projection::try_new(outer, Arc::new(LogicalPlan::Projection(inner)))?;
    let same = rewritten.schema.fields().len() == projection.schema.fields().len()
        && rewritten
            .schema
            .iter()
            .zip(projection.schema.iter())
            .all(|(a, b)| {
                a.0 == b.0 && a.1.name() == b.1.name() && a.1.data_type() == b.1.data_type()
            });
    Ok(same.then_some(LogicalPlan::Projection(rewritten)))
}

/// A column name of the form `__evalsql_fused_N` not in `taken` (then taken).
fn free_name(taken: &mut Vec<String>) -> String {
    let name = (0..)
        .map(|i| format!("{PREFIX}{i}"))
        .find(|n| !taken.contains(n))
        .expect("a free name");
    taken.push(name.clone());
    name
}

/// The outermost judge calls of `exprs` that may be fused, each once.
fn candidates(
    exprs: &[Expr],
    schema: &DFSchema,
    versions: &BTreeMap<String, u32>,
) -> Result<Vec<Candidate>> {
    let mut out: Vec<Candidate> = Vec::new();
    for e in exprs {
        e.apply(|sub| {
            let Expr::ScalarFunction(ScalarFunction { func, args }) = sub else {
                return Ok(TreeNodeRecursion::Continue);
            };
            if func.as_async().is_none() {
                return Ok(TreeNodeRecursion::Continue);
            }
            // An async call's arguments hold no async call (DataFusion cannot run nested
            // ones), so nothing below it is a candidate.
            let Some(judge) = judge_of(func) else {
                return Ok(TreeNodeRecursion::Jump);
            };
            if out.iter().any(|c| &c.call == sub) {
                return Ok(TreeNodeRecursion::Jump);
            }
            let types = args
                .iter()
                .map(|a| a.get_type(schema))
                .collect::<Result<Vec<_>>>()?;
            if judge.is_conversation_call(&types) {
                return Ok(TreeNodeRecursion::Jump);
            }
            // The inputs are named by the rubric version the call will be judged with (a
            // version the session pins is its error to report, unfused).
            let Ok(rubric) = judge.rubrics().pick(versions.get(judge.metric()).copied()) else {
                return Ok(TreeNodeRecursion::Jump);
            };
            let Some(inputs) = rubric.inputs_for(args.len()) else {
                return Ok(TreeNodeRecursion::Jump);
            };
            out.push(Candidate {
                call: sub.clone(),
                names: inputs.iter().map(|i| i.name.clone()).collect(),
                func: judge,
                args: args.clone(),
            });
            Ok(TreeNodeRecursion::Jump)
        })?;
    }
    Ok(out)
}

/// The groups of two metrics or more, each call in the first group that admits it.
fn group(candidates: &[Candidate]) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for (i, c) in candidates.iter().enumerate() {
        let at = match groups.iter().position(|g| g.admits(c, candidates)) {
            Some(at) => at,
            None => {
                groups.push(Group::default());
                groups.len() - 1
            }
        };
        let g = &mut groups[at];
        for (name, arg) in c.names.iter().zip(&c.args) {
            if !g.bindings.iter().any(|(n, _)| n == name) {
                g.bindings.push((name.clone(), arg.clone()));
            }
        }
        g.members.push(i);
    }
    groups.retain(|g| g.metrics(candidates) >= 2);
    groups
}
