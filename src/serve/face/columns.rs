//! Duplicate output column names, which PostgreSQL allows and drivers' catalog queries use
//! (`SELECT NULL, nspname, NULL FROM pg_namespace`, `SELECT current_user, session_user`,
//! which its parser reads as two `session_user` calls).
//!
//! DataFusion refuses a projection whose expressions have the same name
//! (`validate_unique_names`), but its schemas allow one name under different qualifiers.
//! So a statement refused for that alone is planned again with each output column named
//! `__evalsql_column_<i>`, and a last projection gives every column its original name
//! under a qualifier of its own: the plan stays valid, and the wire, which sends names
//! without qualifiers, sends the names PostgreSQL would.

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DataFusionError, Result, TableReference};
use datafusion::execution::SessionState;
use datafusion::logical_expr::{Expr, LogicalPlan, Projection};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    AccessExpr, DataType as SqlDataType, Expr as SqlExpr, Ident, SelectItem, SetExpr, Statement,
    Subscript, Value as SqlValue,
};
use std::collections::HashMap;
use std::sync::Arc;

const PREFIX: &str = "__evalsql_column_";

/// Plans `statement` as [`SessionState::statement_to_plan`] does, also when its output
/// columns share a name.
pub async fn statement_to_plan(
    state: &SessionState,
    statement: DfStatement,
) -> Result<LogicalPlan> {
    let statement = postgres_names(statement);
    match state.statement_to_plan(statement.clone()).await {
        Err(e) if duplicate_names(&e) => match renamed(&statement) {
            Some((renamed, aliases)) => {
                let plan = state.statement_to_plan(renamed).await?;
                original_names(plan, &aliases)
            }
            None => Err(e),
        },
        other => other,
    }
}

/// `statement` with each unnamed output expression of its top-level SELECT named as
/// PostgreSQL names it (its `FigureColname`): a function call after the function
/// (`avg(x)` is `avg`), a cast after what it casts or else its type (`1::int` is
/// `int4`), `CASE` `case`, `ARRAY[…]` `array`, `EXISTS` `exists`, a field `x['f']` `f`,
/// anything else `?column?`. DataFusion would name them after their whole text
/// (`avg(t.x)`), which tools show as headers and pandas as column names. Column
/// references keep DataFusion's names, which are PostgreSQL's.
fn postgres_names(statement: DfStatement) -> DfStatement {
    let DfStatement::Statement(mut inner) = statement else {
        return statement;
    };
    name_like_postgres(inner.as_mut());
    DfStatement::Statement(inner)
}

/// Names `statement`'s unnamed output expressions as [`postgres_names`] does; for rewrites
/// that replace an expression, so its column keeps the name PostgreSQL gives the original.
pub fn name_like_postgres(inner: &mut Statement) {
    if let Statement::Query(query) = inner {
        let mut body = query.body.as_mut();
        // A set operation takes its names from its first SELECT.
        while let SetExpr::SetOperation { left, .. } = body {
            body = left.as_mut();
        }
        if let SetExpr::Select(select) = body {
            for item in select.projection.iter_mut() {
                let SelectItem::UnnamedExpr(expr) = item else {
                    continue;
                };
                if matches!(
                    expr,
                    SqlExpr::Identifier(_) | SqlExpr::CompoundIdentifier(_)
                ) {
                    continue;
                }
                let name = figure_name(expr).unwrap_or_else(|| "?column?".into());
                let expr = std::mem::replace(expr, SqlExpr::Value(SqlValue::Null.into()));
                *item = SelectItem::ExprWithAlias {
                    expr,
                    alias: Ident::with_quote('"', name),
                };
            }
        }
    }
}

/// PostgreSQL's name for an expression, if it has one of its own.
fn figure_name(expr: &SqlExpr) -> Option<String> {
    let ident = |i: &Ident| match i.quote_style {
        Some(_) => i.value.clone(),
        None => i.value.to_lowercase(),
    };
    match expr {
        SqlExpr::Identifier(i) => Some(ident(i)),
        SqlExpr::CompoundIdentifier(parts) => parts.last().map(ident),
        SqlExpr::Function(f) => f.name.0.last().and_then(|p| p.as_ident()).map(ident),
        SqlExpr::Cast {
            expr, data_type, ..
        } => figure_name(expr).or_else(|| Some(type_name(data_type))),
        SqlExpr::Nested(inner) => figure_name(inner),
        SqlExpr::Case { .. } => Some("case".into()),
        SqlExpr::Array(_) => Some("array".into()),
        SqlExpr::Exists { .. } => Some("exists".into()),
        // A scalar subquery is named after its (first) column.
        SqlExpr::Subquery(query) => match query.body.as_ref() {
            SetExpr::Select(select) => match select.projection.first()? {
                SelectItem::ExprWithAlias { alias, .. } => Some(ident(alias)),
                SelectItem::UnnamedExpr(expr) => figure_name(expr),
                _ => None,
            },
            _ => None,
        },
        SqlExpr::CompoundFieldAccess { root, access_chain } => {
            let field = match access_chain.last() {
                Some(AccessExpr::Dot(SqlExpr::Identifier(i))) => Some(ident(i)),
                // `x['f']` selects a struct's field here (PostgreSQL's `(x).f`).
                Some(AccessExpr::Subscript(Subscript::Index { index })) => match index {
                    SqlExpr::Value(v) => match &v.value {
                        SqlValue::SingleQuotedString(f) => Some(f.clone()),
                        _ => None,
                    },
                    _ => None,
                },
                _ => None,
            };
            field.or_else(|| figure_name(root))
        }
        _ => None,
    }
}

/// PostgreSQL's internal name of a type, as it names a cast column (`int4`, `float8`, …).
fn type_name(data_type: &SqlDataType) -> String {
    use SqlDataType as T;
    match data_type {
        T::Int(_) | T::Integer(_) | T::Int4(_) => "int4".into(),
        T::BigInt(_) | T::Int8(_) => "int8".into(),
        T::SmallInt(_) | T::Int2(_) => "int2".into(),
        T::Real | T::Float4 => "float4".into(),
        T::Double(_) | T::DoublePrecision | T::Float8 => "float8".into(),
        T::Boolean | T::Bool => "bool".into(),
        T::Varchar(_) | T::CharacterVarying(_) => "varchar".into(),
        T::Char(_) | T::Character(_) => "bpchar".into(),
        T::Numeric(_) | T::Decimal(_) => "numeric".into(),
        T::Timestamp(_, tz) if tz.to_string().contains("WITH TIME ZONE") => "timestamptz".into(),
        T::Timestamp(..) => "timestamp".into(),
        other => other.to_string().to_lowercase(),
    }
}

fn duplicate_names(e: &DataFusionError) -> bool {
    matches!(e.find_root(), DataFusionError::Plan(m)
        if m.starts_with("Projections require unique expression names"))
}

/// The statement with every output column of its top-level SELECT renamed, and the
/// aliases the client gave (by new name).
fn renamed(statement: &DfStatement) -> Option<(DfStatement, HashMap<String, String>)> {
    let DfStatement::Statement(inner) = statement else {
        return None;
    };
    let Statement::Query(query) = inner.as_ref() else {
        return None;
    };
    let mut query = query.clone();
    let SetExpr::Select(select) = query.body.as_mut() else {
        return None;
    };
    let mut aliases = HashMap::new();
    for (i, item) in select.projection.iter_mut().enumerate() {
        let name = format!("{PREFIX}{i}");
        let alias = Ident::with_quote('"', name.clone());
        *item = match std::mem::replace(item, SelectItem::Wildcard(Default::default())) {
            SelectItem::UnnamedExpr(expr) => SelectItem::ExprWithAlias { expr, alias },
            SelectItem::ExprWithAlias { expr, alias: own } => {
                // As DataFusion names an alias: unquoted ones in lower case.
                let own = match own.quote_style {
                    Some(_) => own.value,
                    None => own.value.to_lowercase(),
                };
                aliases.insert(name, own);
                SelectItem::ExprWithAlias { expr, alias }
            }
            other => other,
        };
    }
    Some((
        DfStatement::Statement(Box::new(Statement::Query(query))),
        aliases,
    ))
}

/// `plan` (whose renamed columns are `__evalsql_column_<i>`) under a projection giving
/// each column its original name and a qualifier of its own.
fn original_names(plan: LogicalPlan, aliases: &HashMap<String, String>) -> Result<LogicalPlan> {
    // The names DataFusion gave the renamed expressions: a column's name, or the
    // expression's text.
    let mut names = aliases.clone();
    plan.apply(|node| {
        let LogicalPlan::Projection(p) = node else {
            return Ok(TreeNodeRecursion::Continue);
        };
        let mut found = false;
        for expr in &p.expr {
            if let Expr::Alias(alias) = expr
                && alias.name.starts_with(PREFIX)
            {
                found = true;
                names
                    .entry(alias.name.clone())
                    .or_insert_with(|| match alias.expr.as_ref() {
                        Expr::Column(c) => c.name.clone(),
                        other => other.schema_name().to_string(),
                    });
            }
        }
        Ok(if found {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    })?;
    let exprs = plan
        .schema()
        .iter()
        .enumerate()
        .map(|(i, (qualifier, field))| {
            let shown = names
                .get(field.name())
                .cloned()
                .unwrap_or_else(|| field.name().clone());
            Expr::Column(Column::new(qualifier.cloned(), field.name()))
                .alias_qualified(Some(TableReference::bare(format!("{PREFIX}{i}"))), shown)
        })
        .collect();
    Ok(LogicalPlan::Projection(Projection::try_new(
        exprs,
        Arc::new(plan),
    )?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    async fn names(sql: &str) -> Result<Vec<String>> {
        let ctx = SessionContext::new();
        let state = ctx.state();
        let statement = state.sql_to_statement(sql, &datafusion::config::Dialect::PostgreSQL)?;
        let plan = statement_to_plan(&state, statement).await?;
        let batches = ctx.execute_logical_plan(plan).await?.collect().await?;
        Ok(batches[0]
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect())
    }

    #[tokio::test]
    async fn unnamed_expressions_are_named_as_postgresql_names_them() {
        let got = names(
            "SELECT count(*), avg(x), x, t.x, CAST(x AS BIGINT), 1::int, x + 1, \
                    CASE WHEN x > 0 THEN 1 END, named_struct('f', x)['f'], \
                    lower('A') AS own, (SELECT 2) \
             FROM (VALUES (1)) AS t(x) GROUP BY x ORDER BY count(*)",
        )
        .await
        .unwrap();
        assert_eq!(
            got,
            [
                "count", "avg", "x", "x", "x", "int4", "?column?", "case", "f", "own", "?column?"
            ]
        );
    }

    #[tokio::test]
    async fn duplicate_names_are_kept_as_postgresql_keeps_them() {
        let got = names("SELECT NULL, x, NULL FROM (VALUES (1)) AS t(x) ORDER BY x").await;
        assert_eq!(got.unwrap(), ["?column?", "x", "?column?"]);
        let got = names("SELECT 1 AS a, 2 AS A, 3 AS \"A\"").await.unwrap();
        assert_eq!(got, ["a", "a", "A"]);
        // Unique names are planned as DataFusion plans them.
        assert_eq!(names("SELECT 1 AS a, 2 AS b").await.unwrap(), ["a", "b"]);
        // Other errors stay errors.
        assert!(names("SELECT y FROM (VALUES (1)) AS t(x)").await.is_err());
    }
}
