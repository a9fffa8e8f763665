//! `read_otlp` in the command line's session: the table function of `evalsql-udfs`, with the
//! object store of an `s3://`, `gs://` or `http(s)://` location built on first use, the way
//! datafusion-cli builds it for `FROM 's3://…'` (its builders and the `aws.*` / `gcp.*`
//! table options). datafusion-cli only does that for table names, never for a table
//! function's argument, and its dispatching function is private to it.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::TableType;
use datafusion::datasource::listing::ListingTableUrl;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use datafusion_cli::object_storage::{
    AwsOptions, GcpOptions, get_gcs_object_store_builder, get_s3_object_store_builder,
};
use evalsql_udfs::{ReadOtlpFunc, location_argument, parse_location};
use object_store::ObjectStore;
use object_store::http::HttpBuilder;

/// `read_otlp(location)` for the command line.
#[derive(Debug, Default)]
pub struct CliReadOtlp;

impl TableFunctionImpl for CliReadOtlp {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let location = location_argument(args.exprs())?;
        let url = parse_location(&location)?;
        let inner = ReadOtlpFunc.call_with_args(args)?;
        Ok(Arc::new(StoreOnFirstUse { url, inner }))
    }
}

#[derive(Debug)]
struct StoreOnFirstUse {
    url: ListingTableUrl,
    inner: Arc<dyn TableProvider>,
}

async fn build_store(state: &dyn Session, url: &url::Url) -> Result<Option<Arc<dyn ObjectStore>>> {
    let options = state.default_table_options();
    let store: Arc<dyn ObjectStore> = match url.scheme() {
        "s3" => {
            let aws = options
                .extensions
                .get::<AwsOptions>()
                .cloned()
                .unwrap_or_default();
            Arc::new(
                get_s3_object_store_builder(url, &aws, false)
                    .await?
                    .build()?,
            )
        }
        "gs" | "gcs" => {
            let gcp = options
                .extensions
                .get::<GcpOptions>()
                .cloned()
                .unwrap_or_default();
            Arc::new(get_gcs_object_store_builder(url, &gcp)?.build()?)
        }
        "http" | "https" => Arc::new(
            HttpBuilder::new()
                .with_url(url.origin().ascii_serialization())
                .build()?,
        ),
        // Local files and Azure: the registry has them already.
        _ => return Ok(None),
    };
    Ok(Some(store))
}

#[async_trait]
impl TableProvider for StoreOnFirstUse {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }

    fn table_type(&self) -> TableType {
        self.inner.table_type()
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        self.inner.supports_filters_pushdown(filters)
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let runtime = state.runtime_env();
        if runtime.object_store(self.url.object_store()).is_err() {
            let url = self.url.get_url();
            let store = build_store(state, url).await.map_err(|e| {
                DataFusionError::Plan(format!("read_otlp({}): {e}", self.url.as_str()))
            })?;
            if let Some(store) = store {
                runtime.register_object_store(url, store);
            }
        }
        self.inner.scan(state, projection, filters, limit).await
    }
}
