//! The session a monitor's query runs in: the operator's, with `spans` holding only the
//! run's traces. The catalogs are shared with every other session, so `spans` is not
//! registered in them: the run's session sees them through a thin layer that answers
//! `spans` itself and passes every other name through.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, CatalogProviderList, SchemaProvider, TableProvider};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::prelude::SessionContext;

#[derive(Debug)]
struct Catalogs {
    inner: Arc<dyn CatalogProviderList>,
    catalog: String,
    schema: String,
    spans: Arc<dyn TableProvider>,
}

impl CatalogProviderList for Catalogs {
    fn register_catalog(
        &self,
        _name: String,
        _catalog: Arc<dyn CatalogProvider>,
    ) -> Option<Arc<dyn CatalogProvider>> {
        None
    }

    fn catalog_names(&self) -> Vec<String> {
        self.inner.catalog_names()
    }

    fn catalog(&self, name: &str) -> Option<Arc<dyn CatalogProvider>> {
        let inner = self.inner.catalog(name)?;
        if name != self.catalog {
            return Some(inner);
        }
        Some(Arc::new(Catalog {
            inner,
            schema: self.schema.clone(),
            spans: Arc::clone(&self.spans),
        }))
    }
}

#[derive(Debug)]
struct Catalog {
    inner: Arc<dyn CatalogProvider>,
    schema: String,
    spans: Arc<dyn TableProvider>,
}

impl CatalogProvider for Catalog {
    fn schema_names(&self) -> Vec<String> {
        self.inner.schema_names()
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        let inner = self.inner.schema(name)?;
        if name != self.schema {
            return Some(inner);
        }
        Some(Arc::new(Schema {
            inner,
            spans: Arc::clone(&self.spans),
        }))
    }
}

#[derive(Debug)]
struct Schema {
    inner: Arc<dyn SchemaProvider>,
    spans: Arc<dyn TableProvider>,
}

#[async_trait]
impl SchemaProvider for Schema {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.inner.table_names();
        if !names.iter().any(|n| n == "spans") {
            names.push("spans".into());
        }
        names
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if name == "spans" {
            return Ok(Some(Arc::clone(&self.spans)));
        }
        self.inner.table(name).await
    }

    fn register_table(
        &self,
        name: String,
        _table: Arc<dyn TableProvider>,
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        Err(DataFusionError::Plan(format!(
            "a monitor's query cannot create tables ({name})"
        )))
    }

    fn table_exist(&self, name: &str) -> bool {
        name == "spans" || self.inner.table_exist(name)
    }
}

/// A session of `base`'s functions, settings and tables, where `spans` is `spans`, and
/// judge calls are bounded by `budget` dollars (besides the operator's own limits).
pub fn with_spans(
    base: &SessionContext,
    spans: Arc<dyn TableProvider>,
    budget: Option<f64>,
) -> Result<SessionContext> {
    let state = base.state();
    let defaults = state.config_options().catalog.clone();
    let catalogs = Arc::new(Catalogs {
        inner: Arc::clone(state.catalog_list()),
        catalog: defaults.default_catalog,
        schema: defaults.default_schema,
        spans,
    });
    let mut state = SessionStateBuilder::new_from_existing(state)
        .with_catalog_list(catalogs)
        .build();
    if let Some(budget) = budget {
        let own = state
            .config_options()
            .extensions
            .get::<evalsql_udfs::JudgeOptions>()
            .and_then(|o| o.max_cost_usd());
        let budget = own.map_or(budget, |own| own.min(budget)).max(0.0);
        state
            .config_mut()
            .options_mut()
            .set("evalsql.judge.max_cost_usd", &budget.to_string())?;
    }
    let ctx = SessionContext::new_with_state(state);
    evalsql_udfs::start_query(&ctx);
    Ok(ctx)
}
