//! Scoring spread over every partition, whatever the files and their row groups.
//!
//! DataFusion gives each partition of a file scan a fixed share of the files: whole files,
//! or byte ranges of one, where a Parquet file's row group goes to the range its first byte
//! falls in. The metric functions run where the rows are, so a query asked to use two cores
//! scored on one whenever the shares were uneven: a file with fewer row groups than
//! partitions (DataFusion and pyarrow put up to ~1M rows in one group, so a million-row
//! file often has one: two partitions, one of them idle), files of different sizes, texts
//! longer in one file than in another, or simply one core slower than the other for a
//! while, as virtual machines' cores are. Whichever partition finished first waited for
//! the last.
//!
//! When a query evaluates an evalsql function, this rule puts a [`ShareBatchesExec`] over
//! each file scan of several partitions: each partition reads its own share and, once that
//! is done, takes batches from the shares still being read, one batch at a time, and
//! scores them itself. Partitions end within one batch of each other, and a share no one
//! else needs is read where it always was (the batch stays in the cache of the core that
//! decoded it; dealing every batch round-robin instead cost 2-4 % of a quick metric's
//! time). Scoring a row costs orders of magnitude more than decoding it, so taking turns
//! at the decoding of one shared range costs little. The partition count does not
//! change, and a scan that promises a partitioning or an ordering is left alone, so
//! nothing above the scan loses what it relies on; neither is a plan when
//! `datafusion.execution.enable_file_stream_work_stealing` is off (DataFusion's own switch
//! for partitions reading each other's files, for engines that run partitions apart).

use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::RecordBatch;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, internal_err};
use datafusion::config::ConfigOptions;
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr, ScalarFunctionExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::async_func::AsyncFuncExec;
use datafusion::physical_plan::metrics::{
    BaselineMetrics, Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet, RecordOutput,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties,
    Partitioning, PlanProperties, ReplaceChildrenOptions,
};
use futures::StreamExt;

/// The rule (see the module documentation).
#[derive(Debug, Default)]
pub struct BalanceScoring;

/// Whether the plan evaluates an evalsql function: a judge (every async function is one),
/// a named aggregate evaluation function, or a named scalar one in any node's expressions.
pub(crate) fn scores(plan: &Arc<dyn ExecutionPlan>) -> Result<bool> {
    static NAMES: OnceLock<HashSet<String>> = OnceLock::new();
    let names = NAMES.get_or_init(evalsql_udfs::evaluation_function_names);
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

/// Whether any node of the plan satisfies `test`.
pub(crate) fn any_node(
    plan: &Arc<dyn ExecutionPlan>,
    mut test: impl FnMut(&Arc<dyn ExecutionPlan>) -> bool,
) -> Result<bool> {
    let mut found = false;
    plan.apply(|node| {
        found = test(node);
        Ok(stop_if(found))
    })?;
    Ok(found)
}

fn stop_if(found: bool) -> TreeNodeRecursion {
    if found {
        TreeNodeRecursion::Stop
    } else {
        TreeNodeRecursion::Continue
    }
}

/// A file scan whose partitions may share their batches: several partitions, no promised
/// partitioning (files grouped by their partition values) that a parent may rely on, and
/// no ordering.
fn shareable_scan(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let is_file_scan = plan
        .downcast_ref::<DataSourceExec>()
        .and_then(|scan| scan.data_source().downcast_ref::<FileScanConfig>())
        .is_some();
    is_file_scan
        && matches!(plan.output_partitioning(), Partitioning::UnknownPartitioning(n) if *n >= 2)
        && plan.output_ordering().is_none()
}

impl PhysicalOptimizerRule for BalanceScoring {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if config.execution.target_partitions < 2
            || !config.execution.enable_file_stream_work_stealing
        {
            return Ok(plan);
        }
        // A scan to share first: most queries have none (`SELECT 1`, tables in memory),
        // and they need not build the set of function names.
        if !any_node(&plan, shareable_scan)? || !scores(&plan)? {
            return Ok(plan);
        }
        plan.transform_up(|node| {
            let children = node.children();
            let shareable: Vec<bool> = children.iter().map(|c| shareable_scan(c)).collect();
            if node.downcast_ref::<ShareBatchesExec>().is_some() || !shareable.contains(&true) {
                return Ok(Transformed::no(node));
            }
            let children = children
                .into_iter()
                .zip(shareable)
                .map(|(child, shareable)| {
                    let child = Arc::clone(child);
                    if shareable {
                        Arc::new(ShareBatchesExec::new(child)) as Arc<dyn ExecutionPlan>
                    } else {
                        child
                    }
                })
                .collect();
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

/// The partitions of its input, each of which, once its own input partition is done, takes
/// batches from the input partitions still running (see the module documentation). Its
/// output has as many partitions as its input, no ordering and no partitioning a parent
/// could rely on; every input row comes out exactly once, in one of them.
///
/// All output partitions of one execution must be polled in the same process (they share
/// their inputs), as they are in a local session; the rule is not used where partitions
/// run apart.
#[derive(Debug)]
pub struct ShareBatchesExec {
    input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
    /// The inputs of the current execution, made by the first partition executed.
    shared: Arc<OnceLock<Arc<SharedInputs>>>,
}

/// One execution's input partitions. A partition's stream is started by whoever reads it
/// first, and read by one partition at a time (its lock is held while a batch is decoded,
/// not while it is scored).
struct SharedInputs {
    input: Arc<dyn ExecutionPlan>,
    context: Arc<TaskContext>,
    streams: Vec<tokio::sync::Mutex<Input>>,
    /// Set once an input has ended, so that no one queues for it again.
    ended: Vec<AtomicBool>,
}

impl fmt::Debug for SharedInputs {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_struct("SharedInputs")
            .field("partitions", &self.streams.len())
            .finish()
    }
}

enum Input {
    NotStarted,
    Reading(SendableRecordBatchStream),
    Ended,
}

impl ShareBatchesExec {
    pub fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        let n = input.output_partitioning().partition_count();
        let mut properties = PlanProperties::new(
            EquivalenceProperties::new(input.schema()),
            Partitioning::UnknownPartitioning(n),
            input.pipeline_behavior(),
            input.boundedness(),
        );
        properties.scheduling_type = input.properties().scheduling_type;
        Self {
            input,
            properties: Arc::new(properties),
            metrics: ExecutionPlanMetricsSet::new(),
            shared: Arc::new(OnceLock::new()),
        }
    }
}

impl SharedInputs {
    /// The next batch for output partition `own`: from its own input while that lasts,
    /// then from the others, in turn after it. `None` once every input has ended.
    async fn next(&self, own: usize, taken: &Count) -> Option<Result<RecordBatch>> {
        let n = self.streams.len();
        for i in (0..n).map(|k| (own + k) % n) {
            while !self.ended[i].load(Ordering::Acquire) {
                let mut input = self.streams[i].lock().await;
                if matches!(*input, Input::NotStarted) {
                    match self.input.execute(i, Arc::clone(&self.context)) {
                        Ok(stream) => *input = Input::Reading(stream),
                        Err(e) => {
                            *input = Input::Ended;
                            self.ended[i].store(true, Ordering::Release);
                            return Some(Err(e));
                        }
                    }
                }
                let Input::Reading(stream) = &mut *input else {
                    break;
                };
                match stream.next().await {
                    Some(batch) => {
                        if i != own {
                            taken.add(1);
                        }
                        return Some(batch);
                    }
                    None => {
                        *input = Input::Ended;
                        self.ended[i].store(true, Ordering::Release);
                    }
                }
            }
        }
        None
    }
}

impl DisplayAs for ShareBatchesExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "ShareBatchesExec: partitions={}",
            self.properties.partitioning.partition_count()
        )
    }
}

impl ExecutionPlan for ShareBatchesExec {
    fn name(&self) -> &'static str {
        "ShareBatchesExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![false]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.len() != 1 {
            return internal_err!("ShareBatchesExec has one child, got {}", children.len());
        }
        Ok(Arc::new(Self::new(children.swap_remove(0))))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let options = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
        self.replace_children(children, options)
    }

    fn reset_state(self: Arc<Self>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(Self::new(Arc::clone(&self.input))))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let n = self.properties.partitioning.partition_count();
        if partition >= n {
            return internal_err!("ShareBatchesExec has {n} partitions, asked for {partition}");
        }
        let shared = Arc::clone(self.shared.get_or_init(|| {
            Arc::new(SharedInputs {
                input: Arc::clone(&self.input),
                context,
                streams: (0..n)
                    .map(|_| tokio::sync::Mutex::new(Input::NotStarted))
                    .collect(),
                ended: (0..n).map(|_| AtomicBool::new(false)).collect(),
            })
        }));
        let baseline = BaselineMetrics::new(&self.metrics, partition);
        let taken = MetricBuilder::new(&self.metrics).counter("batches_from_others", partition);
        let batches = futures::stream::unfold(shared, move |shared| {
            let taken = taken.clone();
            async move {
                let batch = shared.next(partition, &taken).await?;
                Some((batch, shared))
            }
        });
        let batches = batches.map(move |batch| batch.record_output(&baseline));
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.input.schema(),
            batches,
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}
