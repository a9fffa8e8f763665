//! A catalog table whose rows are computed when it is scanned, so they describe the tables
//! as they are at that moment.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{MemTable, Session, TableProvider};
use datafusion::common::Result;
use datafusion::datasource::TableType;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

/// What a [`ComputedTable`] computes.
#[async_trait]
pub trait Rows: std::fmt::Debug + Send + Sync {
    fn schema(&self) -> SchemaRef;

    /// The rows, in [`Rows::schema`].
    async fn rows(&self, state: &dyn Session) -> Result<Vec<RecordBatch>>;
}

/// A view over [`Rows`], computed at each scan.
#[derive(Debug)]
pub struct ComputedTable<R>(pub R);

#[async_trait]
impl<R: Rows + 'static> TableProvider for ComputedTable<R> {
    fn schema(&self) -> SchemaRef {
        self.0.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let batches = self.0.rows(state).await?;
        MemTable::try_new(self.0.schema(), vec![batches])?
            .scan(state, projection, filters, limit)
            .await
    }
}
