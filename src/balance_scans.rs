//! Scoring spread over every partition, whatever the file's row groups.
//!
//! DataFusion splits a Parquet file into one byte range per partition and gives each row
//! group to the range its first byte falls in. A file with fewer row groups than
//! partitions leaves partitions empty (DataFusion and pyarrow put up to ~1M rows in one
//! group, so a million-row file often has one: two partitions, one of them idle), and
//! groups of uneven size leave them uneven. The metric functions run where the rows are,
//! so a query asked to use two cores scored on one.
//!
//! When a query evaluates an evalsql function, this rule deals the batches of each file
//! scan whose partitions may be uneven round-robin over the scan's partitions. Scoring a
//! row costs orders of magnitude more than decoding it, so the decoding may stay where the
//! row groups put it; the scoring is spread. The partition count does not change, and a
//! scan that promises a partitioning or an ordering is left alone, so nothing above the
//! scan loses what it relies on.

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use datafusion::common::Result;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::config::ConfigOptions;
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_expr::ScalarFunctionExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::async_func::AsyncFuncExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, ExecutionPlan, ExecutionPlanProperties, Partitioning,
    ReplaceChildrenOptions,
};

/// The rule (see the module documentation).
#[derive(Debug, Default)]
pub struct BalanceScoring {
    /// The names of evalsql's synchronous functions, made on first use.
    names: OnceLock<HashSet<String>>,
}

impl BalanceScoring {
    fn names(&self) -> &HashSet<String> {
        self.names
            .get_or_init(evalsql_udfs::evaluation_function_names)
    }

    /// Whether the plan evaluates an evalsql function: a judge (every async function is
    /// one), a named aggregate evaluation function, or a named scalar one in any node's
    /// expressions.
    fn scores(&self, plan: &Arc<dyn ExecutionPlan>) -> Result<bool> {
        let names = self.names();
        let mut found = false;
        plan.apply(|node| {
            found = node.downcast_ref::<AsyncFuncExec>().is_some()
                || node
                    .downcast_ref::<AggregateExec>()
                    .is_some_and(|a| a.aggr_expr().iter().any(|e| names.contains(e.fun().name())));
            if !found {
                node.apply_expressions(&mut |root| {
                    root.apply(|e| {
                        found = e
                            .downcast_ref::<ScalarFunctionExpr>()
                            .is_some_and(|f| names.contains(f.fun().name()));
                        Ok(stop_if(found))
                    })
                })?;
            }
            Ok(stop_if(found))
        })?;
        Ok(found)
    }
}

fn stop_if(found: bool) -> TreeNodeRecursion {
    if found {
        TreeNodeRecursion::Stop
    } else {
        TreeNodeRecursion::Continue
    }
}

/// A file scan over several partitions, without an output ordering, whose partitions may
/// hold uneven shares of the rows: a Parquet file split into byte ranges (its row groups
/// go to the ranges their first bytes fall in), or partitions whose bytes differ by more
/// than a tenth. Partitions of whole files of about the same size
/// are left as they are: dealing their batches out costs 2-4 % of a quick metric's time
/// (f1_score and sacrebleu over two files of 500,000 pairs) for nothing.
fn uneven_scan(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let Some(config) = plan
        .downcast_ref::<DataSourceExec>()
        .and_then(|scan| scan.data_source().downcast_ref::<FileScanConfig>())
    else {
        return false;
    };
    // A scan that promises a partitioning (files grouped by their partition values) may
    // have a parent relying on it, and one with an ordering a parent that needs it.
    let Partitioning::UnknownPartitioning(partitions) = plan.output_partitioning() else {
        return false;
    };
    if *partitions < 2 || plan.output_ordering().is_some() {
        return false;
    }
    // Line formats (CSV, JSON lines) split into byte ranges read the lines that start in
    // each: shares as even as the bytes. Parquet's unit is the row group.
    let row_groups = config.file_source().file_type() == "parquet";
    let mut sizes = Vec::with_capacity(config.file_groups.len());
    for group in &config.file_groups {
        let mut bytes = 0u64;
        for file in group.iter() {
            if row_groups && file.range.is_some() {
                return true;
            }
            bytes += file
                .range
                .as_ref()
                .map_or(file.object_meta.size, |r| (r.end - r.start).max(0) as u64);
        }
        sizes.push(bytes);
    }
    let (min, max) = (sizes.iter().min(), sizes.iter().max());
    matches!((min, max), (Some(&min), Some(&max)) if max > min + min / 10)
}

impl PhysicalOptimizerRule for BalanceScoring {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if config.execution.target_partitions < 2
            || !config.optimizer.enable_round_robin_repartition
            || !self.scores(&plan)?
        {
            return Ok(plan);
        }
        plan.transform_up(|node| {
            let children = node.children();
            let uneven: Vec<bool> = children.iter().map(|c| uneven_scan(c)).collect();
            if node.downcast_ref::<RepartitionExec>().is_some() || !uneven.contains(&true) {
                return Ok(Transformed::no(node));
            }
            let children = children
                .into_iter()
                .zip(uneven)
                .map(|(child, uneven)| {
                    if !uneven {
                        return Ok(Arc::clone(child));
                    }
                    let n = child.output_partitioning().partition_count();
                    let dealt = RepartitionExec::try_new(
                        Arc::clone(child),
                        Partitioning::RoundRobinBatch(n),
                    )?;
                    Ok(Arc::new(dealt) as Arc<dyn ExecutionPlan>)
                })
                .collect::<Result<Vec<_>>>()?;
            // The partitioning above changes from the scan's to round-robin.
            let options = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
            Ok(Transformed::yes(node.replace_children(children, options)?))
        })
        .data()
    }

    fn name(&self) -> &str {
        "evalsql_balance_scoring"
    }

    fn schema_check(&self) -> bool {
        true
    }
}
