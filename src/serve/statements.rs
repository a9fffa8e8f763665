//! A client's statement text, read once: every check and rewrite before planning, in one
//! ordered list.
//!
//! Every message of the simple protocol and every Parse of the extended one is read here
//! and nowhere else:
//!
//! 1. its size (`--max-statement-bytes`), on the text;
//! 2. its tokens, made once by sqlparser's PostgreSQL tokenizer;
//! 3. the nesting of parentheses (`--max-nesting`), on those tokens;
//! 4. the statements, parsed from those same tokens by datafusion-pg-catalog's parser (its
//!    blacklist of whole tool queries applied, none of its rules yet; the crate is vendored
//!    for this, see `vendor/datafusion-pg-catalog/README.md`);
//! 5. the depth of expressions (`--max-expression-depth`), on the syntax tree;
//! 6. the rewrites, on the syntax tree, in this order:
//!    - Grafana's search-path subquery as an array ([`catalog::search_path`]);
//!    - subquery select items kept from the crate's rule that makes them NULL
//!      ([`catalog::select_subqueries`]);
//!    - datafusion-pg-catalog's rules (qualifying `pg_` tables, operators, casts, …);
//!    - evalsql's catalog rewrites (`_pg_expandarray`, `(expr).field`, `regclass`,
//!      asyncpg's domain walk, with PostgreSQL's column names; [`catalog::rewrite`]).
//!
//! No text is rebuilt from tokens or from the tree and read again, and nothing matches
//! SQL text: what the limits measured is what the planner gets, and a literal keeps every
//! byte (printing tokens writes `'a''b'` as `'a'b'`, which turned parentheses inside a
//! string into code after a rewrite).
//!
//! The one fallback: a lone query over the catalogs only whose subquery select items
//! DataFusion cannot plan as written (psql's `\d`) is offered again as the crate's rule has
//! it (those items NULL), see [`Read::fallback`].

use datafusion::sql::sqlparser::ast::Statement;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::ParserError;
use datafusion::sql::sqlparser::tokenizer::Tokenizer;
use datafusion_postgres::datafusion_pg_catalog::sql::PostgresCompatibilityParser;
use datafusion_postgres::pgwire::error::{PgWireError, PgWireResult};

use super::catalog;
use super::limits::{ServeLimits, check_expression_depth, check_nesting, check_statement_bytes};
use super::planning::user_error;
use crate::monitor::statement::{MonitorStatement, parse_tokens};

/// A statement text as the server reads it.
#[derive(Debug)]
pub struct Read {
    /// The statements to run, rewritten.
    pub statements: Vec<Statement>,
    /// For one query over the catalogs only that had subquery select items: the same query
    /// with those items as datafusion-pg-catalog's rule has them, to plan should the first
    /// fail.
    pub fallback: Option<Vec<Statement>>,
    /// A statement about monitors (`CREATE MONITOR`, ...), read from the same tokens; then
    /// `statements` is empty.
    pub monitor: Option<MonitorStatement>,
}

/// Reads statement texts (see the module documentation).
pub struct StatementReader {
    parser: PostgresCompatibilityParser,
}

impl Default for StatementReader {
    fn default() -> Self {
        Self {
            parser: PostgresCompatibilityParser::new(),
        }
    }
}

fn syntax_error(e: impl std::error::Error + Send + Sync + 'static) -> PgWireError {
    PgWireError::ApiError(Box::new(e))
}

impl StatementReader {
    /// Reads `text` within `limits`; errors carry their SQLSTATE.
    pub fn read(&self, text: &str, limits: &ServeLimits) -> PgWireResult<Read> {
        self.read_unclassified(text, limits)
            .map_err(super::sqlstate::classify)
    }

    fn read_unclassified(&self, text: &str, limits: &ServeLimits) -> PgWireResult<Read> {
        check_statement_bytes(text, limits).map_err(|e| user_error("54000", e))?;
        let tokens = Tokenizer::new(&PostgreSqlDialect {}, text)
            .tokenize_with_location()
            .map_err(|e| syntax_error(ParserError::from(e)))?;
        check_nesting(&tokens, limits).map_err(|e| user_error("54001", e))?;
        if let Some(monitor) = parse_tokens(&tokens).map_err(|e| user_error("42601", e))? {
            return Ok(Read {
                statements: Vec::new(),
                fallback: None,
                monitor: Some(monitor),
            });
        }
        let parsed = self
            .parser
            .parse_tokens_without_rules(&tokens)
            .map_err(syntax_error)?;
        drop(tokens);
        for statement in &parsed {
            check_expression_depth(statement, limits).map_err(|e| user_error("54001", e))?;
        }
        // The crate's reading, for a lone query over the catalogs only, kept unrewritten
        // until it is known whether the server's reading differs (it wrapped subqueries).
        let catalog_query = match parsed.as_slice() {
            [one] if catalog::select_subqueries::catalog_only(one) => Some(one.clone()),
            _ => None,
        };
        let mut wrapped = false;
        let statements = parsed
            .into_iter()
            .map(|statement| {
                let (statement, wrapped_here) = self.rewritten(statement, true);
                wrapped |= wrapped_here;
                statement
            })
            .collect();
        let fallback = catalog_query
            .filter(|_| wrapped)
            .map(|query| vec![self.rewritten(query, false).0]);
        Ok(Read {
            statements,
            fallback,
            monitor: None,
        })
    }

    /// `statement` after the rewrites, in their order, and whether subquery select items
    /// were kept from the crate's rule (only when `keep_subqueries`).
    fn rewritten(&self, mut statement: Statement, keep_subqueries: bool) -> (Statement, bool) {
        catalog::search_path::rewrite(&mut statement);
        let wrapped = keep_subqueries && catalog::select_subqueries::wrap(&mut statement);
        let statement = self.parser.rewrite(statement);
        let statement = catalog::rewrite::rewrite(&statement).unwrap_or(statement);
        (statement, wrapped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(sql: &str) -> PgWireResult<Read> {
        StatementReader::default().read(sql, &ServeLimits::default())
    }

    #[test]
    fn a_subquery_item_is_kept_however_it_is_written() {
        for sql in [
            "SELECT k, (SELECT count(*) FROM t t2 WHERE t2.k = t.k) AS n FROM t",
            "SELECT k, (\n SELECT count(*) FROM t t2 WHERE t2.k = t.k) AS n FROM t",
            "SELECT k, (\tSELECT count(*) FROM t t2 WHERE t2.k = t.k) AS n FROM t",
            "SELECT k, (\r\nSELECT count(*) FROM t t2 WHERE t2.k = t.k) AS n FROM t",
            "SELECT k, (/* c */SELECT count(*) FROM t t2 WHERE t2.k = t.k) AS n FROM t",
            "SELECT k, (-- c\nSELECT count(*) FROM t t2 WHERE t2.k = t.k) AS n FROM t",
            "SELECT k, (  SELECT count(*) FROM t t2 WHERE t2.k = t.k) AS n FROM t",
            "SELECT k, (\x0cSELECT count(*) FROM t t2 WHERE t2.k = t.k) AS n FROM t",
            "select k, (select count(*) from t t2 where t2.k = t.k) as n from t",
            "SELECT k, ((SELECT count(*) FROM t t2 WHERE t2.k = t.k)) AS n FROM t",
            "SELECT k, (\nSELECT count(*) FROM t t2 WHERE t2.k = $1) AS n FROM t",
        ] {
            let read = read(sql).unwrap();
            let text = read.statements[0].to_string();
            assert!(text.contains("((SELECT count(*)"), "{sql:?}: {text}");
            assert!(!text.contains("LIMIT 1"), "{sql:?}: {text}");
            assert!(read.fallback.is_none(), "{sql:?}");
        }
    }

    #[test]
    fn literals_keep_their_bytes_and_count_as_strings() {
        let limits = ServeLimits {
            max_nesting: 4,
            ..ServeLimits::default()
        };
        let reader = StatementReader::default();
        // Parentheses inside literals are not nesting, and stay inside them.
        let sql = "SELECT 'a'' || ''b', E'\\'((((((', (\nSELECT 1) AS x";
        let read = reader.read(sql, &limits).unwrap();
        let text = read.statements[0].to_string();
        assert!(text.contains("'a'' || ''b'"), "{text}");
        let deep = format!("SELECT {}1{}", "abs(".repeat(5), ")".repeat(5));
        let err = reader.read(&deep, &limits).unwrap_err();
        assert!(err.to_string().contains("--max-nesting"), "{err}");
    }

    #[test]
    fn a_catalog_query_has_the_crate_reading_as_fallback() {
        let read = read(
            "SELECT a.attname, (SELECT c.collname FROM pg_catalog.pg_collation c \
             WHERE c.oid = a.attcollation) FROM pg_catalog.pg_attribute a",
        )
        .unwrap();
        let fallback = read.fallback.expect("a fallback");
        assert!(
            !fallback[0].to_string().contains("((SELECT"),
            "{fallback:?}"
        );
        assert!(read.statements[0].to_string().contains("((SELECT"));
    }

    #[test]
    fn empty_and_several_statements() {
        assert!(read("").unwrap().statements.is_empty());
        assert!(read(" ; ").unwrap().statements.is_empty());
        assert_eq!(read("SELECT 1; SELECT 2").unwrap().statements.len(), 2);
        assert!(read("SELECT (").is_err());
    }
}
