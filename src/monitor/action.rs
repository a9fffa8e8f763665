//! A monitor statement as a plan: a scan whose one partition carries the statement out
//! when it is executed (not when it is planned), and gives its answer as rows. The
//! PostgreSQL wire plans statements at Parse and runs them at Execute; a monitor statement
//! follows the same path as any query.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::streaming::StreamingTable;
use datafusion::common::Result;
use datafusion::datasource::provider_as_source;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{LogicalPlan, LogicalPlanBuilder};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;

use super::service::{Monitors, answer_schema};
use super::statement::MonitorStatement;

struct Action {
    monitors: Arc<Monitors>,
    statement: MonitorStatement,
    /// What the check found (a new monitor's table schema).
    checked: Option<SchemaRef>,
    schema: SchemaRef,
}

impl fmt::Debug for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MonitorStatement({:?})", self.statement)
    }
}

impl PartitionStream for Action {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let (monitors, statement, checked) = (
            Arc::clone(&self.monitors),
            self.statement.clone(),
            self.checked.clone(),
        );
        let answer = async move { monitors.execute(&statement, checked).await };
        Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            futures::stream::once(answer),
        ))
    }
}

/// The plan of `statement`, checked (`checked`: what [`Monitors::check`] found).
pub fn plan(
    monitors: &Arc<Monitors>,
    statement: MonitorStatement,
    checked: Option<SchemaRef>,
) -> Result<LogicalPlan> {
    let schema = answer_schema(&statement);
    let action = Arc::new(Action {
        monitors: Arc::clone(monitors),
        statement,
        checked,
        schema: Arc::clone(&schema),
    });
    let table = StreamingTable::try_new(schema, vec![action])?;
    LogicalPlanBuilder::scan(
        "monitor_statement",
        provider_as_source(Arc::new(table)),
        None,
    )?
    .build()
}
