//! Scalar subqueries written directly as select-list items, kept from datafusion-pg-catalog's
//! parser.
//!
//! That parser's `RemoveSubqueryFromProjection` rule replaces such a subquery with `NULL`
//! when it looks correlated (it names a table that is not in its own FROM, or holds a
//! parameter) and adds `LIMIT 1` to the others: `SELECT (SELECT count(*) FROM qa q2 WHERE
//! q2.model = q.model) FROM qa q` answered NULL on every row, with no error, and
//! `SELECT (SELECT x FROM t WHERE y = $1)` too. The rule matches only a subquery that *is*
//! the select item, so before that rule runs each such item of the syntax tree is wrapped
//! in parentheses (`((SELECT …))`, the same value): DataFusion then plans the subquery as
//! written, decorrelating it or saying why it cannot, and a subquery returning more than
//! one row is an error, as in PostgreSQL. (This is done on the tree, so a subquery is found
//! however it is written: `(\n SELECT`, `( /* c */ select`.)
//!
//! A query that reads only the catalogs and that DataFusion cannot plan that way (psql's
//! `\d` has correlated subqueries over several catalog tables) is planned again as the
//! crate's rule has it ([`catalog_only`]): a tool's introspection keeps working, with NULL
//! in those columns, while a query over data never gets a silent NULL.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    Expr, ObjectName, Query, SelectItem, SetExpr, Statement, Visit, VisitMut, Visitor, VisitorMut,
};

/// Wraps each subquery select item of every SELECT in `statement`.
struct Wrap {
    changed: bool,
}

impl VisitorMut for Wrap {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        if let SetExpr::Select(select) = query.body.as_mut() {
            for item in select.projection.iter_mut() {
                if let SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. } = item
                    && matches!(expr, Expr::Subquery(_))
                {
                    let subquery = std::mem::replace(
                        expr,
                        Expr::value(datafusion::sql::sqlparser::ast::Value::Null),
                    );
                    *expr = Expr::Nested(Box::new(subquery));
                    self.changed = true;
                }
            }
        }
        ControlFlow::Continue(())
    }
}

/// Wraps each subquery select item of every SELECT in `statement`; whether any was.
pub fn wrap(statement: &mut Statement) -> bool {
    let mut wrap = Wrap { changed: false };
    let _ = statement.visit(&mut wrap);
    wrap.changed
}

/// True when `statement` is a query that names only catalog relations (`pg_catalog`,
/// `information_schema`, or an unqualified `pg_…` name, which PostgreSQL finds in
/// `pg_catalog`); CTE names it defines do not count.
pub fn catalog_only(statement: &Statement) -> bool {
    struct Relations {
        ctes: Vec<String>,
        other: bool,
    }
    impl Visitor for Relations {
        type Break = ();
        fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
            if let Some(with) = &query.with {
                self.ctes.extend(
                    with.cte_tables
                        .iter()
                        .map(|c| c.alias.name.value.to_lowercase()),
                );
            }
            ControlFlow::Continue(())
        }
        fn pre_visit_relation(&mut self, relation: &ObjectName) -> ControlFlow<()> {
            let parts: Vec<String> = relation
                .0
                .iter()
                .filter_map(|p| p.as_ident())
                .map(|i| i.value.to_lowercase())
                .collect();
            let catalog = match parts.as_slice() {
                [name] => name.starts_with("pg_") || self.ctes.contains(name),
                [.., schema, _] => schema == "pg_catalog" || schema == "information_schema",
                [] => false,
            };
            if !catalog {
                self.other = true;
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        }
    }
    if !matches!(statement, Statement::Query(_)) {
        return false;
    }
    let mut relations = Relations {
        ctes: Vec::new(),
        other: false,
    };
    let _ = statement.visit(&mut relations);
    !relations.other
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn parse(sql: &str) -> Statement {
        Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .remove(0)
    }

    fn wrapped(sql: &str) -> Option<String> {
        let mut statement = parse(sql);
        wrap(&mut statement).then(|| statement.to_string())
    }

    #[test]
    fn wraps_subquery_items_only_however_written() {
        for sql in [
            "SELECT a, (SELECT count(*) FROM t t2 WHERE t2.k = t1.k) AS n FROM t t1 \
             WHERE a IN (SELECT a FROM u)",
            "SELECT a, (\n SELECT count(*) FROM t t2 WHERE t2.k = t1.k) AS n FROM t t1 \
             WHERE a IN (SELECT a FROM u)",
            "SELECT a, (/* c */\r\n\tselect count(*) FROM t t2 WHERE t2.k = t1.k) n FROM t t1 \
             WHERE a IN (SELECT a FROM u)",
        ] {
            let out = wrapped(sql).unwrap();
            assert!(out.contains("((SELECT count(*)"), "{out}");
            assert!(out.contains("IN (SELECT a FROM u)"), "{out}");
        }
        assert_eq!(
            wrapped("SELECT a FROM t WHERE a IN (SELECT a FROM u)"),
            None
        );
        assert_eq!(wrapped("SELECT 1"), None);
    }

    #[test]
    fn catalog_queries_are_told_apart() {
        assert!(catalog_only(&parse(
            "SELECT a.attname, (SELECT c.collname FROM pg_catalog.pg_collation c \
             WHERE c.oid = a.attcollation) FROM pg_catalog.pg_attribute a"
        )));
        assert!(catalog_only(&parse(
            "WITH t AS (SELECT * FROM information_schema.columns) SELECT * FROM t, pg_type"
        )));
        assert!(!catalog_only(&parse(
            "SELECT (SELECT 1 FROM qa) FROM pg_class"
        )));
        assert!(!catalog_only(&parse("INSERT INTO pg_x SELECT 1")));
    }
}
