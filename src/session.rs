//! The SQL session every entry point uses: DataFusion configured as datafusion-cli
//! configures it (files and object-store URLs queried by path, `information_schema`,
//! `NULL` shown as NULL), plus every evalsql function.

use std::sync::Arc;

use datafusion::catalog::{DynamicFileCatalog, TableProvider, UrlTableFactory};
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::dynamic_file::DynamicListTableFactory;
use datafusion::datasource::listing::ListingTableUrl;
use datafusion_session::SessionStore;
use futures::StreamExt;
use object_store::ObjectStoreExt;

use datafusion::config::{ConfigNonZeroUsize, ConfigOptions};
use datafusion::execution::FunctionRegistry;
use datafusion::execution::SessionState;
use datafusion::execution::context::SessionConfig;
use datafusion::execution::memory_pool::{FairSpillPool, MemoryPool};
use datafusion::execution::object_store::ObjectStoreRegistry;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::logical_expr::{ExplainFormat, ScalarUDF};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::prelude::SessionContext;
use datafusion_cli::catalog::DynamicObjectStoreCatalog;
use datafusion_cli::object_storage::instrumented::InstrumentedObjectStoreRegistry;

use crate::formats::{JsonAutoFormatFactory, JsonLinesFormatFactory};
use crate::object_stores::EvalsqlObjectStoreRegistry;

/// How to build a session.
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    /// Rows per batch (DataFusion's default when `None`).
    pub batch_size: Option<usize>,
    /// Memory limit in bytes; operators that can spill do so beyond it.
    pub memory_limit: Option<usize>,
    /// Partitions per query (DataFusion's default, the core count, when `None`).
    pub target_partitions: Option<usize>,
    /// Directories of custom rubric files (each `*.md` becomes a judge function), besides
    /// those in `EVALSQL_RUBRIC_DIR` (separated by `:`).
    pub rubric_dirs: Vec<std::path::PathBuf>,
}

/// A session with every evalsql function registered.
///
/// `DATAFUSION_*` environment variables configure DataFusion as in datafusion-cli.
pub async fn new_context(
    options: &SessionOptions,
    object_stores: Arc<dyn ObjectStoreRegistry>,
) -> Result<SessionContext> {
    new_context_with(options, object_stores, Vec::new()).await
}

/// [`new_context`] with physical optimizer rules of the caller's run after all others
/// (the server's checkpoints).
pub async fn new_context_with(
    options: &SessionOptions,
    object_stores: Arc<dyn ObjectStoreRegistry>,
    last_rules: Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>>,
) -> Result<SessionContext> {
    let ctx = SessionContext::new_with_config_rt(
        session_config(options)?,
        runtime_env(options, object_stores)?,
    );
    install_with(ctx, options, last_rules).await
}

/// The session configuration: datafusion-cli's choices, the options, and the
/// `evalsql.*` settings (`SET evalsql.judge.* = ...`).
pub fn session_config(options: &SessionOptions) -> Result<SessionConfig> {
    let mut config = ConfigOptions::from_env()?;
    if let Some(n) = options.batch_size {
        config.execution.batch_size = ConfigNonZeroUsize::try_new(n)?;
    }
    if let Some(n) = options.target_partitions {
        config.execution.target_partitions = n.max(1);
    }
    if std::env::var_os("DATAFUSION_EXPLAIN_FORMAT").is_none() {
        config.explain.format = ExplainFormat::Tree;
    }
    if std::env::var_os("DATAFUSION_FORMAT_NULL").is_none() {
        config.format.null = "NULL".to_string();
    }
    config
        .extensions
        .insert(evalsql_udfs::JudgeOptions::default());
    Ok(SessionConfig::from(config).with_information_schema(true))
}

/// The runtime: the object stores, and the memory limit if one is set.
pub fn runtime_env(
    options: &SessionOptions,
    object_stores: Arc<dyn ObjectStoreRegistry>,
) -> Result<Arc<RuntimeEnv>> {
    let mut runtime = RuntimeEnvBuilder::new().with_object_store_registry(object_stores);
    if let Some(limit) = options.memory_limit {
        let pool: Arc<dyn MemoryPool> = Arc::new(FairSpillPool::new(limit));
        runtime = runtime.with_memory_pool(pool);
    }
    runtime.build_arc()
}

/// Installs on `ctx` what makes it an evalsql session: tables by path and URL, the file
/// formats, every function, custom judge metrics and the async-aggregate rewrite.
pub async fn install(ctx: SessionContext, options: &SessionOptions) -> Result<SessionContext> {
    install_with(ctx, options, Vec::new()).await
}

/// [`install`] with physical optimizer rules run after all others.
async fn install_with(
    ctx: SessionContext,
    options: &SessionOptions,
    last_rules: Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>>,
) -> Result<SessionContext> {
    // `SELECT * FROM 'data/qa.jsonl'` and `FROM 's3://…'` as in datafusion-cli
    // (`SessionContext::enable_url_table`, with a factory that says why a URL fails).
    let factory = Arc::new(UrlTables {
        inner: DynamicListTableFactory::new(SessionStore::new()),
    });
    let catalog_list = Arc::new(DynamicFileCatalog::new(
        Arc::clone(ctx.state().catalog_list()),
        Arc::clone(&factory) as Arc<dyn UrlTableFactory>,
    ));
    let session_id = ctx.session_id();
    let mut builder = ctx
        .into_state_builder()
        .with_session_id(session_id)
        .with_catalog_list(catalog_list)
        // Judge only the rows a filter keeps.
        .with_physical_optimizer_rule(Arc::new(crate::async_filter::FilterBeforeJudge))
        // Batches of about the same bytes when scoring, so wide rows come fewer at a time.
        .with_physical_optimizer_rule(Arc::new(crate::scan_batches::SizeScoringBatches))
        // Score on every partition even when the row groups fill only some.
        .with_physical_optimizer_rule(Arc::new(crate::balance_scans::BalanceScoring));
    for rule in last_rules {
        builder = builder.with_physical_optimizer_rule(rule);
    }
    let ctx: SessionContext = builder.build().into();
    factory
        .inner
        .session_store()
        .with_state(ctx.state_weak_ref());
    // DataFusion 55 mixes up several async functions in aggregate arguments.
    ctx.add_optimizer_rule(Arc::new(crate::async_aggregates::AsyncAggregateArguments));
    ctx.add_optimizer_rule(Arc::new(crate::fuse::FuseJudgeCalls));
    ctx.refresh_catalogs().await?;
    ctx.register_catalog_list(Arc::new(DynamicObjectStoreCatalog::new(
        ctx.state().catalog_list().clone(),
        ctx.state_weak_ref(),
    )));
    {
        let state_ref = ctx.state_ref();
        let mut state = state_ref.write();
        for format in JsonLinesFormatFactory::all() {
            state.register_file_format(format, false)?;
        }
        state.register_file_format(Arc::new(JsonAutoFormatFactory::default()), true)?;
        register_functions(&mut state, &rubric_functions(&options.rubric_dirs)?)?;
        for (name, function) in evalsql_udfs::table_functions()? {
            // `read_otlp('s3://…')` builds its object store on first use, as `FROM 's3://…'`
            // does: the CLI's own version.
            let function: Arc<dyn datafusion::catalog::TableFunctionImpl> = match name {
                "read_otlp" => Arc::new(crate::traces::CliReadOtlp),
                _ => function,
            };
            state.register_udtf(name, function);
        }
        state.set_function_factory(Arc::new(evalsql_udfs::JudgeFunctionFactory::operator()));
        // Delta Lake tables (the receiver's store, or evaluation data kept in Delta).
        state
            .table_factories_mut()
            .insert("DELTA".into(), Arc::new(crate::otlp::delta::DeltaTables));
    }
    Ok(ctx)
}

/// Every scalar and aggregate function, and the custom judge metrics given (the part of a
/// session a Ballista scheduler and executor need too).
pub fn register_functions(
    state: &mut SessionState,
    rubric_functions: &[Arc<ScalarUDF>],
) -> Result<()> {
    evalsql_udfs::register_all(state)?;
    for f in rubric_functions {
        state.register_udf(Arc::clone(f))?;
    }
    Ok(())
}

/// The custom judge metrics of the rubric files in the rubric directories (read from disk).
pub fn rubric_functions(given: &[std::path::PathBuf]) -> Result<Vec<Arc<ScalarUDF>>> {
    let mut functions = Vec::new();
    for dir in rubric_dirs(given) {
        functions.extend(evalsql_udfs::load_rubric_dir(&dir)?);
    }
    Ok(functions)
}

/// Tables by URL, as DataFusion's factory makes them, except that an object-store URL
/// (`s3://…`, `az://…`) that cannot be read says why: DataFusion's factory answers "table
/// not found" for any failure, a wrong credential or a missing bucket included.
#[derive(Debug)]
struct UrlTables {
    inner: DynamicListTableFactory,
}

#[async_trait::async_trait]
impl UrlTableFactory for UrlTables {
    async fn try_new(&self, url: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let found = self.inner.try_new(url).await?;
        if found.is_some() || !url.contains("://") {
            return Ok(found);
        }
        let Ok(table_url) = ListingTableUrl::parse(url) else {
            return Ok(None);
        };
        let Some(session) = self.inner.session_store().get_session().upgrade() else {
            return Ok(None);
        };
        let store = {
            let session = session.read();
            let Some(state) = session.as_any().downcast_ref::<SessionState>() else {
                return Ok(None);
            };
            // No store yet: datafusion-cli registers one and asks again.
            match state.runtime_env().object_store(&table_url) {
                Ok(store) => store,
                Err(_) => return Ok(None),
            }
        };
        let reason = match store.head(table_url.prefix()).await {
            // Readable: the content was the problem; DataFusion's answer stands.
            Ok(_) => return Ok(None),
            Err(object_store::Error::NotFound { .. }) => {
                match store.list(Some(table_url.prefix())).next().await {
                    Some(Ok(_)) => return Ok(None),
                    Some(Err(e)) => e.to_string(),
                    None => "nothing is stored there".to_string(),
                }
            }
            Err(e) => e.to_string(),
        };
        Err(DataFusionError::Plan(format!(
            "cannot read {url}: {reason}"
        )))
    }
}

/// The custom rubric directories: those given, then `EVALSQL_RUBRIC_DIR` (separated by `:`).
pub fn rubric_dirs(given: &[std::path::PathBuf]) -> Vec<std::path::PathBuf> {
    let mut dirs = given.to_vec();
    if let Ok(env) = std::env::var("EVALSQL_RUBRIC_DIR") {
        dirs.extend(env.split(':').filter(|d| !d.is_empty()).map(Into::into));
    }
    dirs
}

/// A session with default options, for tests and embedding.
pub async fn default_context() -> Result<SessionContext> {
    new_context(
        &SessionOptions::default(),
        Arc::new(EvalsqlObjectStoreRegistry::new(Arc::new(
            InstrumentedObjectStoreRegistry::new(),
        ))),
    )
    .await
}
