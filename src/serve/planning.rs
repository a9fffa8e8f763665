//! A client's statement planned the server's way: from its syntax tree (no second parse),
//! `pg_catalog` tables qualified, the plan checked against the policy, and its columns as
//! PostgreSQL would send them.

use std::sync::Arc;

use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement;
use datafusion_postgres::pgwire;
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};

use crate::policy::{PlanPolicy, check_plan};

/// A statement of the extended protocol as datafusion-postgres stores it.
pub type StoredPlan = (String, Option<(Statement, LogicalPlan)>);

/// An error to the client with a SQLSTATE.
pub fn user_error(code: &str, message: String) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".to_string(),
        code.to_string(),
        message,
    )))
}

/// Plans `statement` in `ctx` from its syntax tree (no second parse) and checks the plan.
pub async fn plan_checked(
    statement: &Statement,
    ctx: &SessionContext,
    policy: &PlanPolicy,
    protected: fn(&str) -> bool,
) -> PgWireResult<LogicalPlan> {
    let statement = qualify_pg_catalog_tables(statement);
    let plan =
        super::face::columns::statement_to_plan(&ctx.state(), as_datafusion_statement(&statement)?)
            .await
            .map_err(|e| PgWireError::ApiError(Box::new(e)))?;
    check_plan(&plan, policy, &protected).map_err(|why| user_error("42501", why))?;
    let zone = ctx
        .state()
        .config_options()
        .execution
        .time_zone
        .clone()
        .unwrap_or_else(|| "UTC".to_string());
    for_the_wire(plan, &zone)
        .and_then(super::catalog::oid_arrays::tag_oid_arrays)
        .map_err(|e| PgWireError::ApiError(Box::new(e)))
}

/// `plan` with its output columns as PostgreSQL would send them:
/// - a map as an array of (key, value) records: PostgreSQL has no map type and arrow-pg
///   refuses to encode one; an array of records is how PostgreSQL itself would return a
///   map's entries (`{"(a,1)","(b,2)"}`), and drivers read it as a list;
/// - a timestamp with a time zone, also inside records and arrays, in the session's
///   `TimeZone` (`zone`), as PostgreSQL shows every `timestamptz` (the same instant; only
///   the text changes).
pub(super) fn for_the_wire(
    plan: LogicalPlan,
    zone: &str,
) -> datafusion::common::Result<LogicalPlan> {
    use datafusion::arrow::datatypes::DataType;
    use datafusion::common::Column;
    use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlanBuilder};
    let reshaped = |data_type: &DataType| {
        matches!(data_type, DataType::Map(..)) || in_zone(data_type, zone).is_some()
    };
    if !plan
        .schema()
        .fields()
        .iter()
        .any(|f| reshaped(f.data_type()))
    {
        return Ok(plan);
    }
    let schema = Arc::clone(plan.schema());
    let columns: Vec<Expr> = schema
        .iter()
        .map(|(qualifier, field)| {
            let column = Expr::Column(Column::new(qualifier.cloned(), field.name()));
            let shaped = match (field.data_type(), in_zone(field.data_type(), zone)) {
                (DataType::Map(..), _) => {
                    datafusion::functions_nested::expr_fn::map_entries(column)
                }
                (_, Some(zoned)) => match column.clone().cast_to(&zoned, &schema) {
                    Ok(cast) => cast,
                    // A shape Arrow cannot cast keeps its own zone.
                    Err(_) => return Ok(column),
                },
                _ => return Ok(column),
            };
            Ok(shaped.alias_qualified(qualifier.cloned(), field.name()))
        })
        .collect::<datafusion::common::Result<_>>()?;
    LogicalPlanBuilder::from(plan).project(columns)?.build()
}

/// `data_type` with every timestamp with a time zone other than `zone` (at any depth of
/// records and arrays) in `zone`; `None` when none differs.
pub(super) fn in_zone(
    data_type: &datafusion::arrow::datatypes::DataType,
    zone: &str,
) -> Option<datafusion::arrow::datatypes::DataType> {
    use datafusion::arrow::datatypes::{DataType, Field, Fields};
    let field = |f: &Arc<Field>| {
        in_zone(f.data_type(), zone).map(|t| Arc::new(f.as_ref().clone().with_data_type(t)))
    };
    match data_type {
        DataType::Timestamp(unit, Some(tz)) if tz.as_ref() != zone => {
            Some(DataType::Timestamp(*unit, Some(zone.into())))
        }
        DataType::Struct(fields) => {
            let zoned: Vec<Option<Arc<Field>>> = fields.iter().map(field).collect();
            zoned.iter().any(Option::is_some).then(|| {
                DataType::Struct(Fields::from(
                    zoned
                        .into_iter()
                        .zip(fields.iter())
                        .map(|(z, f)| z.unwrap_or_else(|| Arc::clone(f)))
                        .collect::<Vec<_>>(),
                ))
            })
        }
        DataType::List(f) => field(f).map(DataType::List),
        DataType::LargeList(f) => field(f).map(DataType::LargeList),
        DataType::FixedSizeList(f, n) => field(f).map(|f| DataType::FixedSizeList(f, *n)),
        _ => None,
    }
}

/// The `pg_catalog` tables evalsql adds to datafusion-pg-catalog's, whose parser qualifies
/// only its own.
const OWN_PG_CATALOG_TABLES: &[&str] = &["pg_stat_activity"];

/// `statement` with unqualified references to [`OWN_PG_CATALOG_TABLES`] qualified by
/// `pg_catalog`, as PostgreSQL's search path finds them.
pub(super) fn qualify_pg_catalog_tables(statement: &Statement) -> Statement {
    use datafusion::sql::sqlparser::ast::{
        Ident, ObjectName, ObjectNamePart, TableFactor, VisitMut, VisitorMut,
    };
    struct Qualify;
    impl VisitorMut for Qualify {
        type Break = ();
        fn pre_visit_table_factor(&mut self, table: &mut TableFactor) -> std::ops::ControlFlow<()> {
            if let TableFactor::Table {
                name, args: None, ..
            } = table
                && let [ObjectNamePart::Identifier(ident)] = name.0.as_slice()
                && OWN_PG_CATALOG_TABLES
                    .iter()
                    .any(|t| t.eq_ignore_ascii_case(&ident.value))
            {
                *name = ObjectName(vec![
                    ObjectNamePart::Identifier(Ident::new("pg_catalog")),
                    ObjectNamePart::Identifier(ident.clone()),
                ]);
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let mut statement = statement.clone();
    let _ = statement.visit(&mut Qualify);
    statement
}

/// The statement DataFusion plans for a PostgreSQL syntax tree: itself, except `COPY … TO`,
/// which DataFusion's planner knows only in its own form.
pub(super) fn as_datafusion_statement(statement: &Statement) -> PgWireResult<DfStatement> {
    use datafusion::sql::parser::{CopyToSource, CopyToStatement};
    use datafusion::sql::sqlparser::ast::{CopyOption, CopySource, CopyTarget, Value};
    let Statement::Copy {
        source,
        to: true,
        target: CopyTarget::File { filename },
        options,
        legacy_options,
        ..
    } = statement
    else {
        return Ok(DfStatement::Statement(Box::new(statement.clone())));
    };
    let unsupported = |what: String| {
        user_error(
            "0A000", // feature_not_supported
            format!("COPY: {what} is not supported (FORMAT, HEADER and DELIMITER are)"),
        )
    };
    if let Some(option) = legacy_options.first() {
        return Err(unsupported(option.to_string()));
    }
    let mut stored_as = None;
    let mut target_options = Vec::new();
    for option in options {
        match option {
            CopyOption::Format(name) => stored_as = Some(name.value.to_uppercase()),
            CopyOption::Header(header) => target_options.push((
                "format.has_header".to_string(),
                Value::SingleQuotedString(header.to_string()),
            )),
            CopyOption::Delimiter(c) => target_options.push((
                "format.delimiter".to_string(),
                Value::SingleQuotedString(c.to_string()),
            )),
            other => return Err(unsupported(other.to_string())),
        }
    }
    let source = match source {
        CopySource::Query(query) => CopyToSource::Query(query.clone()),
        CopySource::Table {
            table_name,
            columns,
        } if columns.is_empty() => CopyToSource::Relation(table_name.clone()),
        CopySource::Table { .. } => return Err(unsupported("a column list".into())),
    };
    Ok(DfStatement::CopyTo(CopyToStatement {
        source,
        target: filename.clone(),
        partitioned_by: vec![],
        stored_as,
        options: target_options,
    }))
}
