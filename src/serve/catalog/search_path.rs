//! Grafana's search-path subquery, made plannable on the syntax tree.
//!
//! Grafana's PostgreSQL data source lists tables and columns "on the search path" with
//! `quote_ident(table_schema) IN (SELECT CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE
//! trim(s[i]) END FROM generate_series(array_lower(…), array_upper(…)) AS i,
//! string_to_array(current_setting('search_path'), ',') s)`. DataFusion cannot plan that
//! subquery (a function's array result as a FROM item, `user` as a function), nor an `IN`
//! subquery in `ORDER BY`, where Grafana repeats it. (datafusion-pg-catalog replaced it
//! with `''`, so nothing was on the path; the vendored copy no longer does.) So each
//! `x IN (<that subquery>)` whose subquery equals Grafana's as a syntax tree (spacing,
//! comments and case do not matter; literals are compared as values) becomes
//! `x = ANY(<the search path as an array>)`: each entry trimmed, `"$user"` as the session's
//! user, the same set of names the subquery yields. The statement is never printed and read
//! again, so every literal keeps its bytes.

use std::ops::ControlFlow;
use std::sync::LazyLock;

use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Expr, Query, SelectItem, SetExpr, Statement, UnaryOperator, Value, VisitMut,
    VisitorMut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

/// Grafana's subquery (public/app/plugins/datasource/grafana-postgresql-datasource/
/// postgresMetaQuery.ts, `buildSchemaConstraint`), in the `IN` it stands in.
const GRAFANA: &str = r#"SELECT 1 WHERE x IN (
  SELECT
    CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
  FROM
    generate_series(
      array_lower(string_to_array(current_setting('search_path'),','),1),
      array_upper(string_to_array(current_setting('search_path'),','),1)
    ) as i,
    string_to_array(current_setting('search_path'),',') s
)"#;

/// The same names, as an array DataFusion compares with.
const PLANNABLE: &str = r#"SELECT x = ANY(array_replace(string_to_array(regexp_replace(trim(current_setting('search_path')), '\s*,\s*', ',', 'g'), ','), '"$user"', current_user))"#;

/// The first expression of the first SELECT of `sql` (a constant of this module).
fn first_expr(sql: &str) -> Option<Expr> {
    let statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).ok()?;
    let Some(Statement::Query(query)) = statements.into_iter().next() else {
        return None;
    };
    let SetExpr::Select(select) = *query.body else {
        return None;
    };
    match (select.selection, select.projection.into_iter().next()) {
        (Some(selection), _) => Some(selection),
        (None, Some(SelectItem::UnnamedExpr(expr))) => Some(expr),
        _ => None,
    }
}

/// Grafana's subquery as a tree, made once for the process.
static SUBQUERY: LazyLock<Option<Box<Query>>> = LazyLock::new(|| match first_expr(GRAFANA)? {
    Expr::InSubquery { subquery, .. } => Some(subquery),
    _ => None,
});

/// The array [`PLANNABLE`] compares with, made once for the process.
static SEARCH_PATH: LazyLock<Option<Box<Expr>>> = LazyLock::new(|| match first_expr(PLANNABLE)? {
    Expr::AnyOp { right, .. } => Some(right),
    _ => None,
});

struct Replace<'a> {
    subquery: &'a Query,
    search_path: &'a Expr,
    changed: bool,
}

impl VisitorMut for Replace<'_> {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Expr::InSubquery {
            expr: left,
            subquery,
            negated,
        } = expr
            && subquery.as_ref() == self.subquery
        {
            let any = Expr::AnyOp {
                left: Box::new(std::mem::replace(left.as_mut(), Expr::value(Value::Null))),
                compare_op: BinaryOperator::Eq,
                right: Box::new(self.search_path.clone()),
                is_some: false,
            };
            *expr = if *negated {
                Expr::UnaryOp {
                    op: UnaryOperator::Not,
                    expr: Box::new(Expr::Nested(Box::new(any))),
                }
            } else {
                any
            };
            self.changed = true;
        }
        ControlFlow::Continue(())
    }
}

/// Replaces each `IN` over Grafana's search-path subquery in `statement`; whether any was.
pub fn rewrite(statement: &mut Statement) -> bool {
    let (Some(subquery), Some(search_path)) = (SUBQUERY.as_deref(), SEARCH_PATH.as_deref()) else {
        return false;
    };
    let mut replace = Replace {
        subquery,
        search_path,
        changed: false,
    };
    let _ = statement.visit(&mut replace);
    replace.changed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> Option<String> {
        let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap();
        let changed = rewrite(&mut statements[0]);
        changed.then(|| statements[0].to_string())
    }

    #[test]
    fn the_templates_parse() {
        assert!(SUBQUERY.is_some() && SEARCH_PATH.is_some());
    }

    #[test]
    fn replaces_the_subquery_whatever_its_spacing() {
        let subquery = GRAFANA.split_once("IN ").unwrap().1;
        let sql = format!(
            "SELECT 1 WHERE x IN {}\n AND y in {} ORDER BY 1",
            subquery.replace('\n', " ").replace("( ", "("),
            subquery.replace("SELECT", "/* c */ select -- line\n")
        );
        let out = rewritten(&sql).unwrap();
        assert_eq!(out.matches("= ANY(array_replace").count(), 2, "{out}");
        assert!(!out.contains("generate_series"), "{out}");
        assert!(out.starts_with("SELECT 1 WHERE x = ANY("), "{out}");
    }

    #[test]
    fn leaves_other_statements_and_literals_alone() {
        assert_eq!(rewritten("SELECT current_setting('search_path')"), None);
        assert_eq!(rewritten("SELECT 1 WHERE x IN (SELECT 'a''b')"), None);
        // The subquery with a different literal is not Grafana's.
        let other = GRAFANA.replace("'\"$user\"'", "'\"$usr\"'");
        assert_eq!(rewritten(&other), None);
    }
}
