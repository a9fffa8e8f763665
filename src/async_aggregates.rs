//! A logical rewrite that works around a DataFusion 55 planner bug: with two or more
//! different async functions (the LLM judges) in aggregate arguments, e.g.
//! `avg(relevance(q, r)), avg(fluency(r))`, every aggregate reads the first one's result.
//!
//! The physical planner plans each aggregate's async calls with a fresh `AsyncMapper`, so
//! each aggregate maps its call to the same column (`__async_fn_0` at the first index after
//! the input columns) while the `AsyncFuncExec` below computes them side by side. The
//! projection path uses one mapper for all expressions and is right; so this rule moves the
//! async calls of an aggregate into a projection below it, and the aggregate reads columns:
//!
//! ```text
//! Aggregate: aggr=[avg(relevance(q, r)), avg(fluency(r))]
//! =>
//! Aggregate: aggr=[avg(__evalsql_async_0) AS "avg(relevance(q,r))", avg(__evalsql_async_1) AS ...]
//!   Projection: <input columns>, relevance(q, r) AS __evalsql_async_0, fluency(r) AS __evalsql_async_1
//! ```
//!
//! Output names stay those of the original aggregate expressions, so nothing above changes.
//!
//! One async call is moved too: DataFusion 55's plan serialisation (which Ballista uses to
//! ship stages to executors) decodes an aggregate over an async call with a column index
//! past its input schema ("Column '__async_fn_0' at index 2 ... only has 2 columns"); over a
//! projection it decodes right.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, Result};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{Aggregate, Expr, LogicalPlan, Projection};
use datafusion::optimizer::{ApplyOrder, OptimizerConfig, OptimizerRule};

/// Moves async function calls out of aggregate arguments (see the module docs).
#[derive(Debug, Default)]
pub struct AsyncAggregateArguments;

const PREFIX: &str = "__evalsql_async_";

fn is_async_call(e: &Expr) -> bool {
    matches!(e, Expr::ScalarFunction(ScalarFunction { func, .. }) if func.as_async().is_some())
}

impl OptimizerRule for AsyncAggregateArguments {
    fn name(&self) -> &str {
        "evalsql_async_aggregate_arguments"
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
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        let LogicalPlan::Aggregate(agg) = plan else {
            return Ok(Transformed::no(plan));
        };
        // The outermost async calls of the aggregate arguments, each once.
        let mut calls: Vec<Expr> = Vec::new();
        for e in &agg.aggr_expr {
            e.apply(|sub| {
                if is_async_call(sub) {
                    if !calls.contains(sub) {
                        calls.push(sub.clone());
                    }
                    return Ok(TreeNodeRecursion::Jump);
                }
                Ok(TreeNodeRecursion::Continue)
            })?;
        }
        // Grouping sets are left alone.
        let grouping_sets = agg
            .group_expr
            .iter()
            .any(|e| matches!(e, Expr::GroupingSet(_)));
        if calls.is_empty() || grouping_sets {
            return Ok(Transformed::no(LogicalPlan::Aggregate(agg)));
        }

        let names: Vec<String> = (0..calls.len()).map(|i| format!("{PREFIX}{i}")).collect();
        let mut projected: Vec<Expr> = agg
            .input
            .schema()
            .columns()
            .into_iter()
            .map(Expr::Column)
            .collect();
        for (call, name) in calls.iter().zip(&names) {
            projected.push(call.clone().alias(name));
        }
        let projection = Projection::try_new(projected, Arc::clone(&agg.input))?;

        let mut aggr_expr = Vec::with_capacity(agg.aggr_expr.len());
        for e in &agg.aggr_expr {
            let name = e.schema_name().to_string();
            let rewritten = e
                .clone()
                .transform_down(|sub| match calls.iter().position(|c| c == &sub) {
                    Some(i) => Ok(Transformed::new(
                        Expr::Column(Column::from_name(&names[i])),
                        true,
                        TreeNodeRecursion::Jump,
                    )),
                    None => Ok(Transformed::no(sub)),
                })?
                .data;
            aggr_expr.push(if rewritten.schema_name().to_string() == name {
                rewritten
            } else {
                rewritten.alias(name)
            });
        }
        let rewritten = Aggregate::try_new(
            Arc::new(LogicalPlan::Projection(projection)),
            agg.group_expr.clone(),
            aggr_expr,
        )?;
        // Should the names not line up, keep the original plan rather than change the schema.
        if rewritten.schema.fields().len() != agg.schema.fields().len()
            || rewritten
                .schema
                .fields()
                .iter()
                .zip(agg.schema.fields())
                .any(|(a, b)| a.name() != b.name())
        {
            return Ok(Transformed::no(LogicalPlan::Aggregate(agg)));
        }
        Ok(Transformed::yes(LogicalPlan::Aggregate(rewritten)))
    }
}
