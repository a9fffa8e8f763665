//! Rewrites of a client's statement before it is planned, for what the planner must see
//! differently and no later stage can change.
//!
//! - `_pg_expandarray(a)` in an expression (pgJDBC's getPrimaryKeys:
//!   `(information_schema._pg_expandarray(con.conkey)).n AS KEY_SEQ`) is a set-returning
//!   function in PostgreSQL: one row per element. It becomes `unnest(_pg_expandarray(a))`,
//!   and DataFusion unnests it where the planner places it, several calls in one SELECT in
//!   step, as PostgreSQL runs set-returning functions of a SELECT list.
//! - `(expression).field`, PostgreSQL's access to a field of a record (`(result.KEYS).x`,
//!   `(_pg_expandarray(…)).n`), which DataFusion's planner does not take for a dot after a
//!   parenthesized expression, becomes `(expression)['field']`, its struct field access.
//! - `CAST(<expression> AS regclass)` (the names datafusion-pg-catalog did not resolve:
//!   those computed per row) becomes `to_regclass(<expression>)`; see [`super::regclass`].
//! - asyncpg's domain walk, a scalar subquery `(WITH RECURSIVE typebases(oid, depth) AS
//!   (SELECT t2.typbasetype, 0 FROM pg_type t2 WHERE t2.oid = t.oid UNION ALL …) SELECT oid
//!   FROM typebases ORDER BY depth DESC LIMIT 1)`, is correlated through a recursive CTE,
//!   which DataFusion cannot decorrelate; it becomes `evalsql_domain_base_type(t.oid)`,
//!   which computes the same from the served `pg_type` ([`super::regtype::domain_base_type`]).
//! - `CAST(CAST(<oid> AS regtype) AS text)` becomes `evalsql_regtype_text(<oid>)`, the type's
//!   name as PostgreSQL prints a `regtype` (a cast of a column to `regtype` alone keeps the
//!   number, which is what a client compares and joins on).
//!
//! [`rewrite`] is the last of the rewrites every statement goes through before its hooks
//! ([`crate::serve::statements`]); [`CatalogRewrites`] wraps the hook that plans statements
//! (the server's statement runner) to give the session what a rewritten statement needs.

use std::ops::ControlFlow;

use async_trait::async_trait;
use datafusion::common::ParamValues;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::{
    AccessExpr, BinaryOperator, DataType, Expr, Function, FunctionArg, FunctionArgExpr,
    FunctionArgumentList, FunctionArguments, Ident, ObjectName, Query, SelectItem, SetExpr,
    SetOperator, Statement, Subscript, TableFactor, TableWithJoins, Value, Visit, VisitMut,
    Visitor, VisitorMut,
};
use datafusion_postgres::hooks::{HookClient, QueryHook};
use datafusion_postgres::pgwire;
use pgwire::api::ClientInfo;
use pgwire::api::results::Response;
use pgwire::error::{PgWireError, PgWireResult};

use super::functions::PG_EXPANDARRAY;
use super::regclass::{TO_REGCLASS, register_snapshot};
use super::regtype::{DOMAIN_BASE_TYPE, REGTYPE_TEXT};

/// The statement as the planner should see it; `None` when nothing changes.
pub fn rewrite(statement: &Statement) -> Option<Statement> {
    // Most statements have nothing to rewrite: look before copying.
    if Visit::visit(statement, &mut Finder).is_continue() {
        return None;
    }
    let mut rewritten = statement.clone();
    // Named first, so a replaced output expression keeps PostgreSQL's name for the original.
    crate::serve::face::columns::name_like_postgres(&mut rewritten);
    let mut visitor = Rewriter::default();
    let _ = VisitMut::visit(&mut rewritten, &mut visitor);
    visitor.changed.then_some(rewritten)
}

/// Stops at the first expression [`Rewriter`] changes.
struct Finder;

impl Visitor for Finder {
    type Break = ();

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
        let found = match expr {
            Expr::CompoundFieldAccess { root, access_chain } => {
                matches!(root.as_ref(), Expr::Nested(_))
                    && access_chain
                        .iter()
                        .any(|a| matches!(a, AccessExpr::Dot(Expr::Identifier(_))))
            }
            Expr::Function(f) => is_function(f, PG_EXPANDARRAY) || is_function(f, TO_REGCLASS),
            Expr::Cast { data_type, .. } => {
                is_regclass(data_type) || regtype_as_text(expr).is_some()
            }
            Expr::Subquery(query) => domain_walk_start(query).is_some(),
            _ => false,
        };
        if found {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

#[derive(Default)]
struct Rewriter {
    changed: bool,
}

/// Whether `data_type` is `regclass` (or `pg_catalog.regclass`).
fn is_regclass(data_type: &DataType) -> bool {
    let name = data_type.to_string().to_ascii_lowercase();
    name.strip_prefix("pg_catalog.").unwrap_or(&name) == "regclass"
}

/// The type a subquery like asyncpg's domain walk starts from (`t.oid` in the module
/// documentation), if `query` is one: a recursive CTE whose first term reads
/// `typbasetype` from `pg_type` where its `oid` equals an expression (from outside), and
/// whose second term follows `typbasetype` again.
fn domain_walk_start(query: &Query) -> Option<Expr> {
    let with = query.with.as_ref().filter(|w| w.recursive)?;
    let [cte] = with.cte_tables.as_slice() else {
        return None;
    };
    let SetExpr::SetOperation {
        op: SetOperator::Union,
        left,
        right,
        ..
    } = cte.query.body.as_ref()
    else {
        return None;
    };
    let (SetExpr::Select(first), SetExpr::Select(next)) = (left.as_ref(), right.as_ref()) else {
        return None;
    };
    let [TableWithJoins { relation, joins }] = first.from.as_slice() else {
        return None;
    };
    let names_last = |expr: &Expr, name: &str| match expr {
        Expr::Identifier(ident) => ident.value.eq_ignore_ascii_case(name),
        Expr::CompoundIdentifier(parts) => parts
            .last()
            .is_some_and(|ident| ident.value.eq_ignore_ascii_case(name)),
        _ => false,
    };
    let reads_base = matches!(
        first.projection.first(),
        Some(SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. })
            if names_last(e, "typbasetype")
    );
    let from_pg_type = joins.is_empty()
        && matches!(relation, TableFactor::Table { name, .. }
            if name.0.last().and_then(|p| p.as_ident()).is_some_and(|i| i.value.eq_ignore_ascii_case("pg_type")));
    let follows_base = next
        .to_string()
        .to_ascii_lowercase()
        .contains("typbasetype");
    let Some(Expr::BinaryOp {
        left: key,
        op: BinaryOperator::Eq,
        right: start,
    }) = first.selection.as_ref()
    else {
        return None;
    };
    (reads_base && from_pg_type && follows_base && names_last(key, "oid"))
        .then(|| start.as_ref().clone())
}

/// The OID in `CAST(CAST(<oid> AS regtype) AS text)`, if `expr` is that.
fn regtype_as_text(expr: &Expr) -> Option<&Expr> {
    let Expr::Cast {
        expr: inner,
        data_type: outer,
        ..
    } = expr
    else {
        return None;
    };
    let Expr::Cast {
        expr: oid,
        data_type: inner,
        ..
    } = inner.as_ref()
    else {
        return None;
    };
    let text = matches!(outer, DataType::Text | DataType::Varchar(None))
        || outer.to_string().eq_ignore_ascii_case("pg_catalog.text");
    let name = inner.to_string().to_ascii_lowercase();
    (text && name.strip_prefix("pg_catalog.").unwrap_or(&name) == "regtype").then_some(oid.as_ref())
}

/// `name(arg)`.
fn call(name: &str, arg: Expr) -> Expr {
    Expr::Function(Function {
        name: ObjectName::from(vec![Ident::new(name)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: vec![FunctionArg::Unnamed(FunctionArgExpr::Expr(arg))],
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

fn is_function(function: &Function, name: &str) -> bool {
    function
        .name
        .0
        .last()
        .and_then(|part| part.as_ident())
        .is_some_and(|ident| ident.value.eq_ignore_ascii_case(name))
}

impl VisitorMut for Rewriter {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Expr::CompoundFieldAccess { root, access_chain } = expr
            && matches!(root.as_ref(), Expr::Nested(_))
        {
            for access in access_chain.iter_mut() {
                if let AccessExpr::Dot(Expr::Identifier(field)) = access {
                    let name = Value::SingleQuotedString(field.value.clone());
                    *access = AccessExpr::Subscript(Subscript::Index {
                        index: Expr::Value(name.with_empty_span()),
                    });
                    self.changed = true;
                }
            }
        }
        if let Some(oid) = regtype_as_text(expr) {
            *expr = call(REGTYPE_TEXT, oid.clone());
            self.changed = true;
        }
        if let Expr::Subquery(query) = expr
            && let Some(start) = domain_walk_start(query)
        {
            *expr = call(DOMAIN_BASE_TYPE, start);
            self.changed = true;
        }
        if let Expr::Function(function) = expr
            && is_function(function, PG_EXPANDARRAY)
        {
            *expr = call("unnest", expr.clone());
            self.changed = true;
        }
        if let Expr::Function(function) = expr
            && is_function(function, TO_REGCLASS)
        {
            // A call of its own: it needs the relations as they are now too.
            self.changed = true;
        }
        if let Expr::Cast {
            expr: operand,
            data_type,
            ..
        } = expr
            && is_regclass(data_type)
        {
            *expr = call(TO_REGCLASS, operand.as_ref().clone());
            self.changed = true;
        }
        ControlFlow::Continue(())
    }
}

/// Whether `statement` calls `to_regclass` (which needs the session's relations as they
/// are now, see [`register_snapshot`]).
pub fn calls_regclass(statement: &Statement) -> bool {
    struct Calls;
    impl Visitor for Calls {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
            match expr {
                Expr::Function(f) if is_function(f, TO_REGCLASS) => ControlFlow::Break(()),
                _ => ControlFlow::Continue(()),
            }
        }
    }
    Visit::visit(statement, &mut Calls).is_break()
}

/// The hook that plans statements, given the session's relations first when a statement
/// calls `to_regclass` (the statements arrive rewritten: [`crate::serve::statements`]).
pub struct CatalogRewrites<H> {
    inner: H,
}

impl<H> CatalogRewrites<H> {
    pub fn around(inner: H) -> Self {
        CatalogRewrites { inner }
    }
}

async fn prepare(statement: &Statement, ctx: &SessionContext) -> PgWireResult<()> {
    if calls_regclass(statement) {
        register_snapshot(ctx)
            .await
            .map_err(|e| PgWireError::ApiError(Box::new(e)))?;
    }
    Ok(())
}

#[async_trait]
impl<H: QueryHook> QueryHook for CatalogRewrites<H> {
    async fn handle_simple_query(
        &self,
        statement: &Statement,
        ctx: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        if let Err(e) = prepare(statement, ctx).await {
            return Some(Err(e));
        }
        self.inner.handle_simple_query(statement, ctx, client).await
    }

    async fn handle_extended_parse_query(
        &self,
        statement: &Statement,
        ctx: &SessionContext,
        client: &(dyn ClientInfo + Send + Sync),
    ) -> Option<PgWireResult<LogicalPlan>> {
        if let Err(e) = prepare(statement, ctx).await {
            return Some(Err(e));
        }
        self.inner
            .handle_extended_parse_query(statement, ctx, client)
            .await
    }

    async fn handle_extended_query(
        &self,
        statement: &Statement,
        plan: &LogicalPlan,
        params: &ParamValues,
        ctx: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        self.inner
            .handle_extended_query(statement, plan, params, ctx, client)
            .await
    }
}
