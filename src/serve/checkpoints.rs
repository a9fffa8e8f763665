//! Checkpoints in every served plan, so a timeout or a cancel ends a statement that
//! computes without waiting.
//!
//! The server stops a statement by dropping its streams ([`super::runner`]), which takes
//! effect where a task yields. Some operators compute for a long time between two yields:
//! a nested-loop join of 100,000 by 100,000 rows whose condition keeps nothing runs for
//! minutes inside one poll, and an aggregate over a cross join takes rows from its input
//! without ever waiting. So after DataFusion's own optimizer rules, [`Checkpoints`] puts
//! a [`CheckpointExec`] above the plan and above every input of an operator that consumes
//! its input in a loop (joins, aggregates, sorts, windows, repartitions: everything but
//! the operators that turn one batch into one batch), and wraps a nested-loop join's
//! condition in a [`CheckpointExpr`], evaluated once per left row and right batch.
//!
//! A checkpoint asks the connection's running statement whether it must stop (its deadline
//! passed, a cancel or terminate request came, the client hung up) before and after each
//! batch of its input, and
//! makes the statement current on the thread while its input computes, so kernels that
//! loop over long values ask too ([`evalsql_udfs::interrupt`]). A stopped statement
//! ends with the stop's error (SQLSTATE 57014 for a timeout or a cancel).
//!
//! Outside a logged-in connection's statement (the operator's `--init`) a checkpoint is a
//! pass-through.

use std::fmt;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use datafusion::arrow::datatypes::{DataType, FieldRef, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::config::ConfigOptions;
use datafusion::execution::{RecordBatchStream, SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::NestedLoopJoinExec;
use datafusion::physical_plan::joins::utils::JoinFilter;
use datafusion::physical_plan::limit::{GlobalLimitExec, LocalLimitExec};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, replace_children_if_necessary,
};
use evalsql_udfs::interrupt::{self, Interrupt};
use futures::{Stream, StreamExt};

use super::activity::SessionSlot;

/// The rule (see the module documentation). Install it last, after DataFusion's rules.
#[derive(Debug, Default)]
pub struct Checkpoints;

impl PhysicalOptimizerRule for Checkpoints {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let plan = plan
            .transform_up(|node| {
                let node = checked_join_condition(node)?;
                if one_batch_to_one(node.as_ref()) || node.children().is_empty() {
                    return Ok(Transformed::no(node));
                }
                let children = node
                    .children()
                    .into_iter()
                    .map(|child| checkpoint(Arc::clone(child)))
                    .collect();
                Ok(Transformed::yes(replace_children_if_necessary(
                    node, children,
                )?))
            })
            .data()?;
        Ok(checkpoint(plan))
    }

    fn name(&self) -> &str {
        "checkpoints"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Operators whose poll takes one batch of input and gives at most one batch: their
/// parent's checkpoint covers them.
fn one_batch_to_one(plan: &dyn ExecutionPlan) -> bool {
    plan.is::<ProjectionExec>()
        || plan.is::<FilterExec>()
        || plan.is::<CooperativeExec>()
        || plan.is::<GlobalLimitExec>()
        || plan.is::<LocalLimitExec>()
        || plan.is::<CheckpointExec>()
}

fn checkpoint(plan: Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
    if plan.is::<CheckpointExec>() {
        return plan;
    }
    Arc::new(CheckpointExec::new(plan))
}

/// A nested-loop join's condition, checked before each evaluation.
fn checked_join_condition(node: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let Some(join) = node.downcast_ref::<NestedLoopJoinExec>() else {
        return Ok(node);
    };
    let Some(filter) = join.filter() else {
        return Ok(node);
    };
    if filter.expression().is::<CheckpointExpr>() {
        return Ok(node);
    }
    let checked = JoinFilter::new(
        Arc::new(CheckpointExpr(Arc::clone(filter.expression()))),
        filter.column_indices().to_vec(),
        Arc::clone(filter.schema()),
    );
    let join = datafusion::physical_plan::joins::NestedLoopJoinExecBuilder::from(join)
        .with_filter(Some(checked))
        .build()?;
    Ok(Arc::new(join))
}

/// A pass-through that stops its statement's stream (see the module documentation).
#[derive(Debug, Clone)]
pub struct CheckpointExec {
    input: Arc<dyn ExecutionPlan>,
}

impl CheckpointExec {
    pub fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        Self { input }
    }
}

impl DisplayAs for CheckpointExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        match t {
            // The tree shows the name already.
            DisplayFormatType::TreeRender => Ok(()),
            _ => write!(f, "CheckpointExec"),
        }
    }
}

impl ExecutionPlan for CheckpointExec {
    fn name(&self) -> &str {
        "CheckpointExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(CheckpointExec::new(children.swap_remove(0))))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let running = context
            .session_config()
            .get_extension::<SessionSlot>()
            .and_then(|slot| slot.get()?.running());
        let input = self.input.execute(partition, context)?;
        Ok(match running {
            Some(running) => Box::pin(CheckpointStream {
                input,
                interrupt: running,
            }),
            None => input,
        })
    }

    fn supports_limit_pushdown(&self) -> bool {
        true
    }
}

struct CheckpointStream {
    input: SendableRecordBatchStream,
    interrupt: Arc<dyn Interrupt>,
}

impl Stream for CheckpointStream {
    type Item = Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let interrupt = Arc::clone(&self.interrupt);
        interrupt::while_current(&interrupt, || {
            interrupt::check()?;
            let polled = self.input.poll_next_unpin(cx);
            // A kernel that gave up on the stop returned a value that must not escape; a
            // statement past its share of memory stops here, whatever operator grew it.
            if let Poll::Ready(Some(Ok(_))) = &polled {
                interrupt::check()?;
                super::memory::check("the statement", 0)?;
            }
            polled
        })
    }
}

impl RecordBatchStream for CheckpointStream {
    fn schema(&self) -> SchemaRef {
        self.input.schema()
    }
}

/// An expression that checks its statement before each evaluation (a nested-loop join's
/// condition, evaluated once per left row and right batch inside one poll).
#[derive(Debug, Eq)]
pub struct CheckpointExpr(Arc<dyn PhysicalExpr>);

impl PartialEq for CheckpointExpr {
    fn eq(&self, other: &Self) -> bool {
        self.0.eq(&other.0)
    }
}

impl Hash for CheckpointExpr {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl fmt::Display for CheckpointExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl PhysicalExpr for CheckpointExpr {
    fn data_type(&self, input_schema: &Schema) -> Result<DataType> {
        self.0.data_type(input_schema)
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        self.0.nullable(input_schema)
    }

    fn return_field(&self, input_schema: &Schema) -> Result<FieldRef> {
        self.0.return_field(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        interrupt::check()?;
        self.0.evaluate(batch)
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.0]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        Ok(Arc::new(CheckpointExpr(children.swap_remove(0))))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt_sql(f)
    }
}
