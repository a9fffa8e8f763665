//! The catalogs PostgreSQL clients rely on, as the server serves them.
//!
//! datafusion-pg-catalog provides `pg_catalog` (static rows exported from PostgreSQL, and
//! dynamic ones for DataFusion's tables) and rewrites of the SQL drivers send. On top of it,
//! for the server's sessions only ([`install`]):
//!
//! - [`pg_tables`]: `pg_attribute` with the type OIDs the wire sends; `pg_index` and
//!   `pg_constraint` with arrays for `int2vector`/`oidvector` columns.
//! - [`information_schema`]: PostgreSQL's `information_schema.columns` and empty constraint
//!   views.
//! - [`regproc`]: `typinput = 'pg_catalog.array_in'::regproc` and `pg_proc.oid =
//!   typreceive` compare function OIDs, while `typinput` still shows the name.
//! - [`subqueries`]: correlated scalar subqueries over a catalog table's unique key, which
//!   DataFusion refuses, are planned as aggregates it can decorrelate.
//! - [`regclass`]: `CAST(<name computed per row> AS regclass)` finds the relation.
//! - [`functions`]: `_pg_expandarray`, `pg_get_serial_sequence`, `pg_get_indexdef`,
//!   `boolean = 't'`, `LIKE … ESCAPE '/'`; [`rewrite`] unnests `_pg_expandarray`;
//!   [`format`]: PostgreSQL's `format()`.
//! - [`oid_arrays`]: `array_agg` of an `oid` column and `$1::oid[]` are `oid[]`.
//! - [`search_path`]: Grafana's search-path subquery as an array; [`select_subqueries`]:
//!   subqueries as select items, kept from the crate's rule that turns them into NULL (both
//!   on the syntax tree, in the order [`crate::serve::statements`] gives every rewrite).

use std::sync::Arc;

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::Int32Type;
use datafusion::catalog::SchemaProvider;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::FunctionRegistry;
use datafusion::prelude::SessionContext;

mod computed;
pub mod format;
pub mod functions;
pub mod information_schema;
pub mod oid_arrays;
pub mod pg_tables;
pub(crate) mod plans;
pub mod regclass;
pub mod regproc;
pub mod regtype;
pub mod rewrite;
pub mod search_path;
pub mod select_subqueries;
pub mod subqueries;
pub mod types;

pub use rewrite::CatalogRewrites;

/// All rows of `pg_catalog.<name>` as datafusion-pg-catalog serves it.
async fn crate_rows(
    ctx: &SessionContext,
    pg_catalog: &Arc<dyn SchemaProvider>,
    name: &str,
) -> Result<Vec<RecordBatch>> {
    let table = pg_catalog
        .table(name)
        .await?
        .ok_or_else(|| DataFusionError::Internal(format!("pg_catalog.{name} is missing")))?;
    ctx.read_table(table)?.collect().await
}

/// Installs the server's catalogs, functions and rewrites into `ctx` (set up with
/// datafusion-pg-catalog's `pg_catalog` in its default catalog).
pub async fn install(ctx: &SessionContext) -> Result<()> {
    let state = ctx.state();
    let catalogs = Arc::clone(state.catalog_list());
    let default = state.config_options().catalog.default_catalog.clone();
    let catalog = catalogs.catalog(&default).ok_or_else(|| {
        DataFusionError::Configuration(format!("evalsql serve: no catalog {default}"))
    })?;
    let pg_catalog = catalog.schema("pg_catalog").ok_or_else(|| {
        DataFusionError::Configuration("evalsql serve: pg_catalog is not set up".into())
    })?;

    let types = Arc::new(types::PgTypes::from_batches(
        &crate_rows(ctx, &pg_catalog, "pg_type").await?,
    )?);
    let mut procs = Vec::new();
    for batch in crate_rows(ctx, &pg_catalog, "pg_proc").await? {
        let (Some(oid), Some(name)) = (
            batch
                .column_by_name("oid")
                .and_then(|c| c.as_primitive_opt::<Int32Type>()),
            batch
                .column_by_name("proname")
                .and_then(|c| c.as_string_opt::<i32>()),
        ) else {
            return Err(DataFusionError::Internal(
                "pg_catalog.pg_proc: unexpected oid/proname columns".into(),
            ));
        };
        procs.extend((0..batch.num_rows()).map(|i| (oid.value(i), name.value(i).to_string())));
    }

    let source = Arc::new(pg_tables::Source {
        inner: pg_catalog,
        catalogs: Arc::clone(&catalogs),
        types: Arc::clone(&types),
    });
    catalog.register_schema(
        "pg_catalog",
        Arc::new(pg_tables::PgCatalogSchema::new(source)),
    )?;
    let table_functions = state.table_functions().clone();
    for name in catalogs.catalog_names() {
        if let Some(catalog) = catalogs.catalog(&name) {
            catalog.register_schema(
                "information_schema",
                Arc::new(information_schema::PgInformationSchema::new(
                    Arc::clone(&catalogs),
                    table_functions.clone(),
                    Arc::clone(&types),
                )),
            )?;
        }
    }
    // DataFusion's built-in information_schema would shadow the registered one.
    ctx.state_ref()
        .write()
        .config_mut()
        .options_mut()
        .catalog
        .information_schema = false;

    let regproc_oid = Arc::new(regproc::RegprocOid::udf(Arc::new(regproc::ProcOids::new(
        procs,
    ))));
    ctx.register_udf(regproc_oid.as_ref().clone());
    ctx.register_udf(functions::PgExpandArray::udf());
    ctx.register_udf(functions::JsonBuildObject::udf());
    ctx.register_udf(format::Format::udf());
    ctx.register_udf(functions::FormatType::udf(Arc::clone(&types)));
    ctx.register_udf(functions::collation_is_visible());
    ctx.register_udf(regtype::to_regtype(Arc::clone(&types)));
    ctx.register_udf(regtype::type_is_visible(Arc::clone(&types)));
    ctx.register_udf(regtype::domain_base_type(Arc::clone(&types)));
    ctx.register_udf(regtype::regtype_text(Arc::clone(&types)));
    ctx.register_udf(functions::like_escape());
    for udf in functions::null_answers() {
        ctx.register_udf(udf);
    }
    ctx.state_ref()
        .write()
        .register_expr_planner(Arc::new(functions::BooleanLiterals))?;
    ctx.add_analyzer_rule(Arc::new(regproc::RegprocAsOid::new(regproc_oid)));
    ctx.add_analyzer_rule(Arc::new(subqueries::UniqueKeySubqueries));
    ctx.add_analyzer_rule(Arc::new(functions::LikeEscape));
    Ok(())
}
