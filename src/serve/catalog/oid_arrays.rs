//! `oid[]` where PostgreSQL has it: `array_agg` over an `oid` column, and a parameter cast
//! to `oid[]`.
//!
//! asyncpg reads the type of every parameter and column of a statement before it runs it,
//! and decodes only `oid[]` and `text[]` among arrays without asking the server; any other
//! array type it looks up with its own introspection statement, whose parameter is
//! `$1::oid[]` and whose `attrtypoids` column is `array_agg(atttypid)`. Described as
//! `int4[]`, as the Arrow types alone would have it, that statement needs introspecting
//! itself, and asyncpg loops until it gives up. So a list of `oid`-tagged values is tagged
//! too: its element field carries the `pg.oid_alias` mark that arrow-pg reads to describe it
//! as `oid[]` (the mark is part of the list's data type, so the logical and physical plans
//! agree on it).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::catalog::cte_worktable::CteWorkTable;
use datafusion::common::tree_node::{Transformed, TreeNodeRecursion};
use datafusion::common::{Column, Result};
use datafusion::datasource::{provider_as_source, source_as_provider};
use datafusion::logical_expr::{
    Aggregate, Expr, ExprSchemable, LogicalPlan, LogicalPlanBuilder, RecursiveQuery,
    TableScanBuilder, Union,
};
use datafusion::sql::sqlparser::ast::{
    DataType as SqlDataType, Expr as SqlExpr, ObjectNamePart, Statement, Value, Visit, Visitor,
};
use datafusion_postgres::arrow_pg::datatypes::PG_OID_ALIAS_KEY;

/// True when `field` holds PostgreSQL `oid`s.
fn is_oid(field: &Field) -> bool {
    field.data_type() == &DataType::Int32
        && field
            .metadata()
            .get(PG_OID_ALIAS_KEY)
            .is_some_and(|kind| kind == "oid")
}

/// `List(Int32)` whose elements are marked as `oid`: described as `oid[]` on the wire.
pub fn oid_list_type() -> DataType {
    DataType::List(Arc::new(
        Field::new_list_field(DataType::Int32, true).with_metadata(HashMap::from([(
            PG_OID_ALIAS_KEY.to_string(),
            "oid".to_string(),
        )])),
    ))
}

/// The output positions of `aggregate`'s `array_agg(<oid column>)` expressions.
fn oid_array_aggs(aggregate: &Aggregate) -> Result<Vec<usize>> {
    let first = aggregate.schema.fields().len() - aggregate.aggr_expr.len();
    let mut found = Vec::new();
    for (i, expr) in aggregate.aggr_expr.iter().enumerate() {
        let Expr::AggregateFunction(call) = expr.clone().unalias_nested().data else {
            continue;
        };
        if call.func.name() == "array_agg"
            && let [arg] = call.params.args.as_slice()
            && is_oid(&arg.to_field(aggregate.input.schema())?.1)
        {
            found.push(first + i);
        }
    }
    Ok(found)
}

/// True when `plan` (with its subqueries) aggregates an `oid` column into an array.
fn has_oid_array_agg(plan: &LogicalPlan) -> Result<bool> {
    let mut found = false;
    plan.apply_with_subqueries(|node| {
        if let LogicalPlan::Aggregate(aggregate) = node
            && !oid_array_aggs(aggregate)?.is_empty()
        {
            found = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(found)
}

/// `plan` with each `array_agg(<oid column>)` typed as [`oid_list_type`], and every node
/// above it (through subqueries and recursive CTEs) retyped to match.
pub fn tag_oid_arrays(plan: LogicalPlan) -> Result<LogicalPlan> {
    if !has_oid_array_agg(&plan)? {
        return Ok(plan);
    }
    retyped(plan)
}

/// `plan` bottom-up with each node's schema derived again from its (retyped) inputs, and a
/// cast to `oid[]` above each aggregate that builds one.
fn retyped(plan: LogicalPlan) -> Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|node| {
        let node = match node {
            LogicalPlan::Union(union) => LogicalPlan::Union(Union::try_new(union.inputs)?),
            LogicalPlan::RecursiveQuery(query) => {
                let work_table = query.static_term.schema().as_arrow().clone();
                let recursive_term = with_work_table(
                    Arc::unwrap_or_clone(query.recursive_term),
                    &query.name,
                    &work_table,
                )?;
                LogicalPlan::RecursiveQuery(RecursiveQuery::try_new(
                    query.name,
                    query.static_term,
                    Arc::new(recursive_term),
                    query.is_distinct,
                )?)
            }
            other => other.recompute_schema()?,
        };
        let LogicalPlan::Aggregate(aggregate) = &node else {
            return Ok(Transformed::yes(node));
        };
        let positions = oid_array_aggs(aggregate)?;
        if positions.is_empty() {
            return Ok(Transformed::yes(node));
        }
        let columns: Vec<Expr> = node
            .schema()
            .iter()
            .enumerate()
            .map(|(i, (qualifier, field))| {
                let column = Expr::Column(Column::new(qualifier.cloned(), field.name()));
                if positions.contains(&i) {
                    column
                        .cast_to(&oid_list_type(), node.schema())
                        .map(|e| e.alias_qualified(qualifier.cloned(), field.name()))
                } else {
                    Ok(column)
                }
            })
            .collect::<Result<_>>()?;
        LogicalPlanBuilder::from(node)
            .project(columns)?
            .build()
            .map(Transformed::yes)
    })
    .map(|t| t.data)
}

/// `recursive_term` reading the work table `name` with the field types of `static_term`
/// (the rows it holds), and retyped above those reads.
fn with_work_table(
    recursive_term: LogicalPlan,
    name: &str,
    static_term: &Schema,
) -> Result<LogicalPlan> {
    let rescanned = recursive_term
        .transform_up_with_subqueries(|node| {
            let LogicalPlan::TableScan(scan) = &node else {
                return Ok(Transformed::no(node));
            };
            let Ok(provider) = source_as_provider(&scan.source) else {
                return Ok(Transformed::no(node));
            };
            let Some(table) = provider.downcast_ref::<CteWorkTable>() else {
                return Ok(Transformed::no(node));
            };
            if table.name() != name {
                return Ok(Transformed::no(node));
            }
            let old = table.schema();
            let fields: Vec<Field> = old
                .fields()
                .iter()
                .zip(static_term.fields())
                .map(|(field, row)| {
                    field
                        .as_ref()
                        .clone()
                        .with_data_type(row.data_type().clone())
                })
                .collect();
            let source = provider_as_source(Arc::new(CteWorkTable::new(
                name,
                Arc::new(Schema::new_with_metadata(fields, old.metadata().clone())),
            )));
            let scan = TableScanBuilder::new(scan.table_name.clone(), source)
                .with_projection(scan.projection.clone())
                .with_filters(scan.filters.clone())
                .with_fetch(scan.fetch)
                .build()?;
            Ok(Transformed::yes(LogicalPlan::TableScan(scan)))
        })?
        .data;
    retyped(rescanned)
}

/// Positions (0-based) of the parameters `statement` casts to `oid[]` (`$1::oid[]`), which
/// PostgreSQL describes as `oid[]`: the plan alone would say `int4[]`.
pub fn oid_array_parameters(statement: &Statement) -> Vec<usize> {
    struct Find(Vec<usize>);
    impl Visitor for Find {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &SqlExpr) -> std::ops::ControlFlow<()> {
            if let SqlExpr::Cast {
                expr: inner,
                data_type: SqlDataType::Array(element),
                ..
            } = expr
                && let SqlExpr::Value(value) = inner.as_ref()
                && let Value::Placeholder(name) = &value.value
                && let Some(position) = name
                    .strip_prefix('$')
                    .and_then(|n| n.parse::<usize>().ok())
                    .and_then(|n| n.checked_sub(1))
                && array_element(element).is_some_and(is_oid_type)
            {
                self.0.push(position);
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let mut find = Find(Vec::new());
    let _ = statement.visit(&mut find);
    find.0
}

fn array_element(
    element: &datafusion::sql::sqlparser::ast::ArrayElemTypeDef,
) -> Option<&SqlDataType> {
    use datafusion::sql::sqlparser::ast::ArrayElemTypeDef;
    match element {
        ArrayElemTypeDef::AngleBracket(t)
        | ArrayElemTypeDef::SquareBracket(t, _)
        | ArrayElemTypeDef::Parenthesis(t) => Some(t.as_ref()),
        ArrayElemTypeDef::None => None,
    }
}

/// `oid` or `pg_catalog.oid`.
fn is_oid_type(data_type: &SqlDataType) -> bool {
    let SqlDataType::Custom(name, args) = data_type else {
        return false;
    };
    args.is_empty()
        && matches!(name.0.last(), Some(ObjectNamePart::Identifier(ident)) if ident.value.eq_ignore_ascii_case("oid"))
        && (name.0.len() == 1
            || matches!(name.0.first(), Some(ObjectNamePart::Identifier(s)) if s.value.eq_ignore_ascii_case("pg_catalog")))
}
