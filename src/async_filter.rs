//! Filters before judges: DataFusion 55 evaluates the async functions a filter needs (a
//! judge in `WHERE`, or a filter over a judged column of a subquery) in an
//! `AsyncFuncExec` under the whole `FilterExec`, so
//! `WHERE id IN ('q01', 'q02') AND fluency(response) > 3` judges every row of the table and
//! then keeps two: users pay for rows they filtered out. This physical rule moves the
//! conjuncts that need no async result below the `AsyncFuncExec`, so only the rows they keep
//! are judged. The filter's meaning is unchanged (a conjunction's parts commute).

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::config::ConfigOptions;
use datafusion::physical_expr::expressions::lit;
use datafusion::physical_expr::utils::{collect_columns, conjunction, split_conjunction};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::async_func::AsyncFuncExec;
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};

/// The rule (see the module documentation).
#[derive(Debug, Default)]
pub struct FilterBeforeJudge;

impl PhysicalOptimizerRule for FilterBeforeJudge {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(filter) = node.downcast_ref::<FilterExec>() else {
                return Ok(Transformed::no(node));
            };
            let Some(judged) = filter.input().downcast_ref::<AsyncFuncExec>() else {
                return Ok(Transformed::no(node));
            };
            let input = judged.input();
            // The async results are appended after the input's columns.
            let inputs = input.schema().fields().len();
            let (below, above): (Vec<_>, Vec<_>) = split_conjunction(filter.predicate())
                .into_iter()
                .map(Arc::clone)
                .partition(|c| collect_columns(c).iter().all(|col| col.index() < inputs));
            if below.is_empty() {
                return Ok(Transformed::no(node));
            }
            let filtered = Arc::new(FilterExec::try_new(conjunction(below), Arc::clone(input))?);
            // Deprecated as "unused by DataFusion", without a replacement: rebuilding the
            // node over a new input is exactly what it is for here.
            #[allow(deprecated)]
            let exprs = judged.async_exprs().to_vec();
            let judged = Arc::new(AsyncFuncExec::try_new(exprs, filtered)?);
            // What is left (`true` when nothing is), with the filter's projection.
            let rest = if above.is_empty() {
                lit(true)
            } else {
                conjunction(above)
            };
            let top = FilterExecBuilder::new(rest, judged)
                .apply_projection(filter.projection().as_ref().map(|p| p.to_vec()))?
                .build()?;
            Ok(Transformed::yes(Arc::new(top) as Arc<dyn ExecutionPlan>))
        })
        .data()
    }

    fn name(&self) -> &str {
        "evalsql_filter_before_judge"
    }

    fn schema_check(&self) -> bool {
        true
    }
}
