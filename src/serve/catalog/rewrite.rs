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
//!
//! [`CatalogRewrites`] wraps the hook that plans statements (the server's statement runner)
//! and hands it the rewritten statement; the policy checks before it see the client's own.

use std::ops::ControlFlow;

use async_trait::async_trait;
use datafusion::common::ParamValues;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::{
    AccessExpr, Expr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentList,
    FunctionArguments, Ident, ObjectName, Statement, Subscript, Value, VisitMut, VisitorMut,
};
use datafusion_postgres::hooks::{HookClient, QueryHook};
use datafusion_postgres::pgwire;
use pgwire::api::ClientInfo;
use pgwire::api::results::Response;
use pgwire::error::PgWireResult;

use super::functions::PG_EXPANDARRAY;

/// The statement as the planner should see it; `None` when nothing changes.
pub fn rewrite(statement: &Statement) -> Option<Statement> {
    let mut rewritten = statement.clone();
    let mut visitor = Rewriter { changed: false };
    let _ = rewritten.visit(&mut visitor);
    visitor.changed.then_some(rewritten)
}

struct Rewriter {
    changed: bool,
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
        if let Expr::Function(function) = expr
            && is_function(function, PG_EXPANDARRAY)
        {
            let mut unnest = function.clone();
            unnest.name = ObjectName::from(vec![Ident::new("unnest")]);
            unnest.args = FunctionArguments::List(FunctionArgumentList {
                duplicate_treatment: None,
                args: vec![FunctionArg::Unnamed(FunctionArgExpr::Expr(expr.clone()))],
                clauses: vec![],
            });
            *expr = Expr::Function(unnest);
            self.changed = true;
        }
        ControlFlow::Continue(())
    }
}

/// A planning hook given statements after [`rewrite`].
pub struct CatalogRewrites<H> {
    inner: H,
}

impl<H> CatalogRewrites<H> {
    pub fn around(inner: H) -> Self {
        CatalogRewrites { inner }
    }
}

#[async_trait]
impl<H: QueryHook> QueryHook for CatalogRewrites<H> {
    async fn handle_simple_query(
        &self,
        statement: &Statement,
        ctx: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        match rewrite(statement) {
            Some(s) => self.inner.handle_simple_query(&s, ctx, client).await,
            None => self.inner.handle_simple_query(statement, ctx, client).await,
        }
    }

    async fn handle_extended_parse_query(
        &self,
        statement: &Statement,
        ctx: &SessionContext,
        client: &(dyn ClientInfo + Send + Sync),
    ) -> Option<PgWireResult<LogicalPlan>> {
        match rewrite(statement) {
            Some(s) => {
                self.inner
                    .handle_extended_parse_query(&s, ctx, client)
                    .await
            }
            None => {
                self.inner
                    .handle_extended_parse_query(statement, ctx, client)
                    .await
            }
        }
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
