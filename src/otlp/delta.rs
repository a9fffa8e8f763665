//! `CREATE EXTERNAL TABLE t STORED AS DELTA LOCATION '...'`: any Delta table as a table, read
//! through the session's object stores — the ones evalsql configures for Parquet and CSV
//! (credentials, the server's data roots). delta-rs's own `DeltaTableFactory` builds its
//! object stores itself, from its cloud crates, which would bypass both.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider, TableProviderFactory};
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::listing::ListingTableUrl;
use datafusion::logical_expr::CreateExternalTable;
use deltalake::DeltaTableBuilder;

use super::store::{delta_error, register_log_store};

/// The factory of `STORED AS DELTA`.
#[derive(Debug, Default)]
pub struct DeltaTables;

#[async_trait]
impl TableProviderFactory for DeltaTables {
    async fn create(
        &self,
        state: &dyn Session,
        cmd: &CreateExternalTable,
    ) -> Result<Arc<dyn TableProvider>> {
        let [location] = cmd.locations.as_slice() else {
            return Err(DataFusionError::Plan(format!(
                "STORED AS DELTA takes one location, got {}",
                cmd.locations.len()
            )));
        };
        let failed = |e: &dyn std::fmt::Display| {
            DataFusionError::Plan(format!("STORED AS DELTA LOCATION '{location}': {e}"))
        };
        let listing = ListingTableUrl::parse(location).map_err(|e| failed(&e))?;
        let store = state
            .runtime_env()
            .object_store(listing.object_store())
            .map_err(|e| failed(&e))?;
        let mut url = listing.get_url().clone();
        if !url.path().ends_with('/') {
            url.set_path(&format!("{}/", url.path()));
        }
        register_log_store(url.scheme());
        let table = DeltaTableBuilder::from_url(url.clone())
            .map_err(delta_error)?
            .with_storage_backend(store, url)
            .load()
            .await
            .map_err(|e| failed(&e))?;
        table.table_provider().await.map_err(|e| failed(&e))
    }
}
