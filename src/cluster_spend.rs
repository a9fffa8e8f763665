//! What a Ballista job spent on judge calls, told back to the client that sent it.
//!
//! The calls of a job are made by the executors, each task with its own ledger (a fresh
//! one per task, see `distributed::config_producer`), so the client's ledger sees none of
//! them. Ballista already carries each task's operator metrics to the scheduler, and the
//! scheduler answers `GetJobMetrics` for a finished job: so the scheduler's planner
//! ([`CountingPlanner`]) wraps every operator that calls async functions (judges) in a
//! [`JudgeSpendExec`], which at the end of
//! each of its streams adds to two counters what the task's ledger spent and had not
//! reported yet (`judge_calls`, and `judge_nano_usd`, dollars in billionths: the metrics
//! are integers). The client sums them over the job ([`job_spend`]): `evalsql serve
//! --ballista` fills `monitor_runs.judge_calls` and `dollars` of a monitor's run on the
//! cluster this way.

use std::fmt;
use std::sync::Arc;

use ballista_core::execution_plans::DistributedQueryExec;
use ballista_core::serde::protobuf::operator_metric::Metric;
use ballista_core::serde::protobuf::scheduler_grpc_client::SchedulerGrpcClient;
use ballista_core::serde::protobuf::{GetJobMetricsParams, GetJobMetricsResult};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::execution::context::QueryPlanner;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::async_func::AsyncFuncExec;
use datafusion::physical_plan::metrics::{
    Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};
use datafusion::physical_planner::{DefaultPhysicalPlanner, PhysicalPlanner};
use datafusion_proto::protobuf::LogicalPlanNode;
use futures::StreamExt;

/// The physical codec's tag of [`JudgeSpendExec`] (it has no fields).
pub const TAG: &[u8] = b"evalsql.judge_spend";

const CALLS: &str = "judge_calls";
const NANO_USD: &str = "judge_nano_usd";

/// Passes its input through and, when a stream of it ends, counts what the task's judge
/// calls spent that no other operator counted yet.
#[derive(Debug)]
pub struct JudgeSpendExec {
    input: Arc<dyn ExecutionPlan>,
    metrics: ExecutionPlanMetricsSet,
}

impl JudgeSpendExec {
    pub fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        JudgeSpendExec {
            input,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }
}

impl DisplayAs for JudgeSpendExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "JudgeSpendExec")
    }
}

impl ExecutionPlan for JudgeSpendExec {
    fn name(&self) -> &str {
        "JudgeSpendExec"
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(
            &Arc<dyn datafusion::physical_plan::PhysicalExpr>,
        ) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    // Nothing is to be put between it and the operator it counts (a repartition there
    // could become a stage of its own, another task with another ledger).
    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(JudgeSpendExec::new(children.remove(0))))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, Arc::clone(&context))?;
        let calls = MetricBuilder::new(&self.metrics).counter(CALLS, partition);
        let nano_usd = MetricBuilder::new(&self.metrics).counter(NANO_USD, partition);
        let schema = input.schema();
        let counted = input.map(Some).chain(futures::stream::once(async move {
            count(&context, &calls, &nano_usd);
            None
        }));
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            counted.filter_map(futures::future::ready),
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// Adds what the task's ledger has not reported yet to the counters.
fn count(context: &TaskContext, calls: &Count, nano_usd: &Count) {
    let (dollars, n) = evalsql_udfs::take_unreported_spend(context.session_config().options());
    calls.add(n as usize);
    nano_usd.add((dollars * 1e9).round() as usize);
}

/// Every operator of `plan` that runs async functions (judges, `generate`, `invoke_app`),
/// wrapped in a [`JudgeSpendExec`].
fn count_judge_spend(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        if node.is::<AsyncFuncExec>() {
            Ok(Transformed::yes(
                Arc::new(JudgeSpendExec::new(node)) as Arc<dyn ExecutionPlan>
            ))
        } else {
            Ok(Transformed::no(node))
        }
    })
    .map(|t| t.data)
}

/// The scheduler's query planner: DataFusion's, then [`count_judge_spend`]. A planner, not a
/// physical optimizer rule, because Ballista's adaptive planner (its default) replaces the
/// session's physical rules with its own list but plans through the session's planner.
#[derive(Debug, Default)]
pub struct CountingPlanner;

#[async_trait::async_trait]
impl QueryPlanner for CountingPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session_state: &dyn datafusion::catalog::Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let plan = DefaultPhysicalPlanner::default()
            .create_physical_plan(logical_plan, session_state)
            .await?;
        count_judge_spend(plan)
    }
}

/// The scheduler's gRPC address of a `df://host:port` URL, kept in the client session's
/// configuration by `distributed::remote_context`.
#[derive(Debug, Clone)]
pub struct SchedulerAddress(pub String);

impl SchedulerAddress {
    pub fn of(url: &str) -> Self {
        SchedulerAddress(format!(
            "http://{}",
            url.strip_prefix("df://").unwrap_or(url)
        ))
    }
}

/// The Ballista job `plan` ran as (after it ran), if it ran on a cluster.
fn job_of(plan: &Arc<dyn ExecutionPlan>) -> Option<String> {
    let mut job = None;
    let _ = plan.apply(|node| {
        if let Some(q) = node.downcast_ref::<DistributedQueryExec<LogicalPlanNode>>() {
            job = q.job_id().map(|j| j.to_string());
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    job
}

/// Dollars and calls the judge calls of `plan`'s job spent on the cluster of `scheduler`;
/// `None` when `plan` did not run as a Ballista job.
pub async fn job_spend(
    scheduler: &SchedulerAddress,
    plan: &Arc<dyn ExecutionPlan>,
) -> Result<Option<(f64, u64)>> {
    let Some(job_id) = job_of(plan) else {
        return Ok(None);
    };
    let failed = |e: &dyn fmt::Display| {
        DataFusionError::Execution(format!(
            "the judge calls of Ballista job {job_id} could not be counted: {e}"
        ))
    };
    let mut client = SchedulerGrpcClient::connect(scheduler.0.clone())
        .await
        .map_err(|e| failed(&e))?;
    let metrics = client
        .get_job_metrics(GetJobMetricsParams {
            job_id: job_id.clone(),
        })
        .await
        .map_err(|e| failed(&e))?
        .into_inner();
    Ok(Some(spend_in(&metrics)))
}

/// The sums of the two counters over every operator of every stage.
fn spend_in(metrics: &GetJobMetricsResult) -> (f64, u64) {
    let (mut calls, mut nano_usd) = (0u64, 0u64);
    for op in metrics.stages.iter().flat_map(|s| &s.operators) {
        for m in &op.metrics {
            if let Some(Metric::Count(c)) = &m.metric {
                match c.name.as_str() {
                    CALLS => calls += c.value,
                    NANO_USD => nano_usd += c.value,
                    _ => {}
                }
            }
        }
    }
    (nano_usd as f64 / 1e9, calls)
}

/// Runs `sql` in `ctx`: its rows, and the dollars and calls its judge calls spent (the
/// cluster's count when it ran as a Ballista job, else the session's ledger) with why a
/// call was refused by the query's budget, if one was (only the session's ledger knows).
pub async fn collect_counting(
    ctx: &datafusion::prelude::SessionContext,
    sql: &str,
) -> Result<(
    Vec<datafusion::arrow::record_batch::RecordBatch>,
    (f64, u64, Option<String>),
)> {
    let plan = ctx.sql(sql).await?.create_physical_plan().await?;
    let rows = datafusion::physical_plan::collect(Arc::clone(&plan), ctx.task_ctx()).await?;
    let scheduler = ctx.state().config().get_extension::<SchedulerAddress>();
    if let Some(scheduler) = scheduler {
        match job_spend(&scheduler, &plan).await {
            Ok(Some((dollars, calls))) => return Ok((rows, (dollars, calls, None))),
            Ok(None) => {}
            // The rows are computed and paid for: they are kept, uncounted, and said so.
            Err(e) => log::warn!("{e}; they are not in the run's counts"),
        }
    }
    Ok((rows, evalsql_udfs::query_spent(ctx)))
}
