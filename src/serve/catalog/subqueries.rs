//! Correlated scalar subqueries over a catalog table's unique key.
//!
//! Drivers look up one catalog row per outer row with a correlated scalar subquery, e.g.
//! SQLAlchemy's column reflection:
//!
//! ```sql
//! (SELECT pg_catalog.pg_get_expr(d.adbin, d.adrelid) FROM pg_catalog.pg_attrdef d
//!  WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum AND a.atthasdef)
//! (SELECT typcollation FROM pg_catalog.pg_type WHERE pg_type.oid = pg_attribute.atttypid)
//! ```
//!
//! or Npgsql's `(SELECT rngtypid FROM pg_range WHERE rngmultitypid = typ.oid)`. PostgreSQL
//! runs these per row (and fails if one returns two rows); DataFusion only decorrelates
//! aggregated subqueries and refuses the rest ("Correlated scalar subquery must be aggregated
//! to return at most one row").
//!
//! [`UniqueKeySubqueries`] handles exactly the shape
//! `SELECT <expr> FROM pg_catalog.<table> [alias] WHERE <conjuncts>` where the conjuncts fix
//! every column of one of the table's unique keys ([`UNIQUE_KEYS`], PostgreSQL's unique
//! indexes) to a value of the outer row or a constant (`key = <expression without the
//! table's columns>`). At most one row can then match, so wrapping `<expr>` in
//! `first_value(…)` (no GROUP BY) changes no answer — one row gives its value, none gives
//! NULL — and DataFusion decorrelates the aggregate into a join. Any other correlated
//! subquery is left for DataFusion to refuse.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, Result};
use datafusion::functions_aggregate::expr_fn::first_value;
use datafusion::logical_expr::expr::Alias;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{
    BinaryExpr, Cast, Expr, LogicalPlan, LogicalPlanBuilder, Operator, Subquery, TryCast,
};
use datafusion::optimizer::AnalyzerRule;

use super::plans::{rewrite_expressions, scanned_table, strip_aliases};

/// Unique keys of the catalog tables (their unique indexes in PostgreSQL), which the
/// catalogs served here keep too. `pg_namespace.nspname` is left out: two DataFusion catalogs
/// may have schemas of the same name.
pub const UNIQUE_KEYS: &[(&str, &[&[&str]])] = &[
    ("pg_class", &[&["oid"], &["relname", "relnamespace"]]),
    ("pg_namespace", &[&["oid"]]),
    ("pg_type", &[&["oid"], &["typname", "typnamespace"]]),
    ("pg_proc", &[&["oid"]]),
    (
        "pg_attribute",
        &[&["attrelid", "attnum"], &["attrelid", "attname"]],
    ),
    ("pg_attrdef", &[&["oid"], &["adrelid", "adnum"]]),
    ("pg_description", &[&["objoid", "classoid", "objsubid"]]),
    ("pg_index", &[&["indexrelid"]]),
    ("pg_constraint", &[&["oid"]]),
    ("pg_sequence", &[&["seqrelid"]]),
    ("pg_range", &[&["rngtypid"], &["rngmultitypid"]]),
    ("pg_collation", &[&["oid"]]),
    ("pg_am", &[&["oid"], &["amname"]]),
    ("pg_database", &[&["oid"], &["datname"]]),
    ("pg_authid", &[&["oid"], &["rolname"]]),
    ("pg_roles", &[&["oid"], &["rolname"]]),
    ("pg_enum", &[&["oid"]]),
    ("pg_tablespace", &[&["oid"], &["spcname"]]),
    ("pg_inherits", &[&["inhrelid", "inhseqno"]]),
    ("pg_trigger", &[&["oid"]]),
    ("pg_language", &[&["oid"], &["lanname"]]),
    ("pg_operator", &[&["oid"]]),
    ("pg_extension", &[&["oid"], &["extname"]]),
    ("pg_foreign_table", &[&["ftrelid"]]),
    ("pg_partitioned_table", &[&["partrelid"]]),
    ("pg_rewrite", &[&["oid"]]),
    ("pg_settings", &[&["name"]]),
];

/// The analyzer rule described in the module's documentation.
#[derive(Debug, Default)]
pub struct UniqueKeySubqueries;

impl AnalyzerRule for UniqueKeySubqueries {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        rewrite_expressions(plan, aggregate_if_unique)
    }

    fn name(&self) -> &str {
        "evalsql_unique_key_subqueries"
    }
}

fn aggregate_if_unique(expr: Expr) -> Result<Transformed<Expr>> {
    let Expr::ScalarSubquery(subquery) = expr else {
        return Ok(Transformed::no(expr));
    };
    if subquery.outer_ref_columns.is_empty() || !one_row_at_most(&subquery.subquery) {
        return Ok(Transformed::no(Expr::ScalarSubquery(subquery)));
    }
    let plan = subquery.subquery.as_ref();
    let (qualifier, field) = plan.schema().qualified_field(0);
    let name = field.name().clone();
    let value = Expr::Column(Column::new(qualifier.cloned(), name.clone()));
    let aggregated = LogicalPlanBuilder::from(plan.clone())
        .aggregate(
            Vec::<Expr>::new(),
            vec![first_value(value, vec![]).alias(&name)],
        )?
        .build()?;
    Ok(Transformed::yes(Expr::ScalarSubquery(Subquery {
        subquery: Arc::new(aggregated),
        outer_ref_columns: subquery.outer_ref_columns,
        spans: subquery.spans,
    })))
}

/// Whether `plan` is `SELECT <one expression> FROM <catalog table> WHERE …` with a unique
/// key of the table fixed by the WHERE clause.
fn one_row_at_most(plan: &LogicalPlan) -> bool {
    let LogicalPlan::Projection(projection) = plan else {
        return false;
    };
    if projection.expr.len() != 1 {
        return false;
    }
    let LogicalPlan::Filter(filter) = strip_aliases(&projection.input) else {
        return false;
    };
    let Some(table) = scanned_table(&filter.input) else {
        return false;
    };
    let Some((_, keys)) = UNIQUE_KEYS.iter().find(|(t, _)| *t == table) else {
        return false;
    };
    let fixed = fixed_columns(&filter.predicate);
    keys.iter()
        .any(|key| key.iter().all(|column| fixed.contains(*column)))
}

/// The table's columns that `predicate` (a conjunction) sets equal to something that does
/// not depend on the table's rows: outer references, constants and deterministic functions
/// of them.
fn fixed_columns(predicate: &Expr) -> HashSet<String> {
    let mut fixed = HashSet::new();
    for conjunct in split_conjunction(predicate) {
        let Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Eq,
            right,
        }) = conjunct
        else {
            continue;
        };
        for (key, value) in [(left, right), (right, left)] {
            if let Expr::Column(column) = without_casts(key)
                && !reads_columns(value)
                && !value.is_volatile()
            {
                fixed.insert(column.name.clone());
            }
        }
    }
    fixed
}

fn without_casts(expr: &Expr) -> &Expr {
    match expr {
        Expr::Cast(Cast { expr, .. }) | Expr::TryCast(TryCast { expr, .. }) => without_casts(expr),
        Expr::Alias(Alias { expr, .. }) => without_casts(expr),
        other => other,
    }
}

/// Whether `expr` reads a column of the subquery's own input (outer references do not).
fn reads_columns(expr: &Expr) -> bool {
    expr.exists(|e| Ok(matches!(e, Expr::Column(_) | Expr::ScalarSubquery(_))))
        .unwrap_or(true)
}
