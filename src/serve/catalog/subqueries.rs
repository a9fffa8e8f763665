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
//! `SELECT <expr> FROM pg_catalog.<table> [alias] [[LEFT] JOIN pg_catalog.<table> … ON …]
//! WHERE <conjuncts>` where, for every table, the conditions fix every column of one of its
//! unique keys ([`UNIQUE_KEYS`], PostgreSQL's unique indexes) to a value of the outer row, a
//! constant, or a column of a table already so fixed (`key = <expression without other
//! columns>`; e.g. SQLAlchemy's `FROM pg_collation JOIN pg_namespace ON pg_namespace.oid =
//! pg_collation.collnamespace WHERE pg_collation.oid = pg_attribute.attcollation`). At most
//! one row can then match, so wrapping `<expr>` in
//! `first_value(…)` (no GROUP BY) changes no answer — one row gives its value, none gives
//! NULL — and DataFusion decorrelates the aggregate into a join. Conditions on the outer row
//! alone (`WHERE a.atthasdef AND …`) move to a `CASE WHEN` around the subquery first, and a
//! SELECT list that reads the outer row is evaluated outside (see [`outer_value`]). Any other correlated
//! subquery is left for DataFusion to refuse.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema, Result};
use datafusion::functions_aggregate::expr_fn::first_value;
use datafusion::logical_expr::expr::Alias;
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{
    BinaryExpr, Cast, Expr, JoinType, LogicalPlan, LogicalPlanBuilder, Operator, Subquery, TryCast,
    lit, when,
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

fn aggregate_if_unique(expr: Expr, outer: &DFSchema) -> Result<Transformed<Expr>> {
    let Expr::ScalarSubquery(subquery) = expr else {
        return Ok(Transformed::no(expr));
    };
    if subquery.outer_ref_columns.is_empty() || !one_row_at_most(&subquery.subquery) {
        return Ok(Transformed::no(Expr::ScalarSubquery(subquery)));
    }
    let (plan, condition) = hoist_outer_conditions(&subquery.subquery, outer)?;
    let value = match outer_value(&plan, outer)? {
        Some(value) => value,
        None => aggregated(plan)?,
    };
    Ok(Transformed::yes(match condition {
        Some(condition) => when(condition, value).end()?,
        None => value,
    }))
}

/// The scalar subquery `SELECT first_value(v) FROM (plan)`.
fn aggregated(plan: LogicalPlan) -> Result<Expr> {
    let (qualifier, field) = plan.schema().qualified_field(0);
    let name = field.name().clone();
    let value = Expr::Column(Column::new(qualifier.cloned(), name.clone()));
    let aggregated = LogicalPlanBuilder::from(plan)
        .aggregate(
            Vec::<Expr>::new(),
            vec![first_value(value, vec![]).alias(&name)],
        )?
        .build()?;
    Ok(Expr::ScalarSubquery(Subquery {
        outer_ref_columns: aggregated.all_out_ref_exprs(),
        subquery: Arc::new(aggregated),
        spans: Default::default(),
    }))
}

/// `SELECT f(<outer columns>, <inner columns>) FROM …` (a SELECT list reading the outer
/// row, which DataFusion cannot decorrelate: SQLAlchemy's `json_build_object('always',
/// pg_attribute.attidentity = 'a', 'start', pg_sequence.seqstart, …)`) as
/// `CASE WHEN (SELECT true FROM …) THEN f(<outer columns>, (SELECT c FROM …), …) END`:
/// the row found or not, and each inner column read from it by a subquery of its own. None
/// when the SELECT list does not read the outer row, or reads columns not in `outer`.
fn outer_value(plan: &LogicalPlan, outer: &DFSchema) -> Result<Option<Expr>> {
    let LogicalPlan::Projection(projection) = plan else {
        return Ok(None);
    };
    let [expr] = projection.expr.as_slice() else {
        return Ok(None);
    };
    let expr = match expr {
        Expr::Alias(Alias { expr, .. }) => expr.as_ref(),
        other => other,
    };
    let mut reads_outer = false;
    let mut all_in_outer = true;
    expr.apply(|e| {
        if let Expr::OuterReferenceColumn(_, column) = e {
            reads_outer = true;
            all_in_outer &= outer.has_column(column);
        }
        if matches!(
            e,
            Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_)
        ) {
            all_in_outer = false;
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    if !reads_outer || !all_in_outer {
        return Ok(None);
    }
    let input = projection.input.as_ref();
    let inner = |column: Expr| -> Result<Expr> {
        aggregated(
            LogicalPlanBuilder::from(input.clone())
                .project(vec![column])?
                .build()?,
        )
    };
    let found = inner(lit(true).alias("found"))?;
    let value = expr
        .clone()
        .transform_up(|e| {
            Ok(match e {
                Expr::OuterReferenceColumn(_, column) => Transformed::yes(Expr::Column(column)),
                Expr::Column(column) => Transformed::yes(inner(Expr::Column(column))?),
                other => Transformed::no(other),
            })
        })?
        .data;
    Ok(Some(when(found, value).end()?))
}

/// `SELECT v FROM … WHERE <conditions on the outer row only> AND <rest>` as
/// `CASE WHEN <those conditions> THEN (SELECT v FROM … WHERE <rest>) END`: the same value
/// (no row when they do not hold: NULL), and a subquery DataFusion can decorrelate (it
/// cannot when a condition reads only the outer row, as SQLAlchemy's
/// `WHERE pg_attribute.atthasdef AND …`). Conditions are moved only when every column they
/// read is in `outer`, the schema the subquery expression is evaluated against.
fn hoist_outer_conditions(
    plan: &LogicalPlan,
    outer: &DFSchema,
) -> Result<(LogicalPlan, Option<Expr>)> {
    let unchanged = || Ok((plan.clone(), None));
    let LogicalPlan::Projection(projection) = plan else {
        return unchanged();
    };
    let LogicalPlan::Filter(filter) = projection.input.as_ref() else {
        return unchanged();
    };
    let (hoisted, kept): (Vec<&Expr>, Vec<&Expr>) = split_conjunction(&filter.predicate)
        .into_iter()
        .partition(|c| reads_outer_row_only(c, outer));
    let Some(condition) = conjunction(hoisted.iter().map(|c| outer_as_columns(c))) else {
        return unchanged();
    };
    let input = match conjunction(kept.into_iter().cloned()) {
        Some(rest) => LogicalPlanBuilder::from(filter.input.as_ref().clone())
            .filter(rest)?
            .build()?,
        None => filter.input.as_ref().clone(),
    };
    let plan = LogicalPlanBuilder::from(input)
        .project(projection.expr.clone())?
        .build()?;
    Ok((plan, Some(condition)))
}

/// Whether a condition reads columns of the outer row only, all of them in `outer`.
fn reads_outer_row_only(condition: &Expr, outer: &DFSchema) -> bool {
    let mut outer_columns = 0;
    let other = condition
        .exists(|e| {
            Ok(match e {
                Expr::OuterReferenceColumn(_, column) => {
                    outer_columns += 1;
                    !outer.has_column(column)
                }
                Expr::Column(_) | Expr::ScalarSubquery(_) | Expr::Exists(_) => true,
                Expr::InSubquery(_) => true,
                _ => false,
            })
        })
        .unwrap_or(true);
    !other && outer_columns > 0 && !condition.is_volatile()
}

/// `condition` with its outer references as plain columns (of the outer row).
fn outer_as_columns(condition: &Expr) -> Expr {
    condition
        .clone()
        .transform_up(|e| {
            Ok(match e {
                Expr::OuterReferenceColumn(_, column) => Transformed::yes(Expr::Column(column)),
                other => Transformed::no(other),
            })
        })
        .map_or_else(|_| condition.clone(), |t| t.data)
}

/// Whether `plan` is `SELECT <one expression> FROM <catalog tables> WHERE …` where every
/// table has one of its unique keys fixed: by the WHERE clause or join conditions, to
/// values of the outer row, constants, or columns of tables already fixed.
fn one_row_at_most(plan: &LogicalPlan) -> bool {
    let LogicalPlan::Projection(projection) = plan else {
        return false;
    };
    if projection.expr.len() != 1 {
        return false;
    }
    let mut from = FromClause::default();
    if !from.collect(&projection.input) || from.tables.is_empty() {
        return false;
    }
    let mut single = vec![false; from.tables.len()];
    loop {
        let mut changed = false;
        for (i, (_, table)) in from.tables.iter().enumerate() {
            if single[i] {
                continue;
            }
            let fixed = from.fixed_columns(i, &single);
            let keys = UNIQUE_KEYS
                .iter()
                .find(|(t, _)| t == table)
                .map_or(&[][..], |(_, keys)| *keys);
            if keys
                .iter()
                .any(|key| key.iter().all(|column| fixed.contains(*column)))
            {
                single[i] = true;
                changed = true;
            }
        }
        if !changed {
            return single.iter().all(|s| *s);
        }
    }
}

/// The FROM and WHERE of a subquery: its catalog tables (by the name its columns are
/// qualified with) and the equalities its conditions require, each with the tables whose
/// rows it filters (a LEFT JOIN's condition filters only the rows of its right side).
#[derive(Default)]
struct FromClause<'a> {
    tables: Vec<(String, &'a str)>,
    equalities: Vec<(&'a Expr, &'a Expr, std::ops::Range<usize>)>,
}

impl<'a> FromClause<'a> {
    /// Adds `plan`'s tables and conditions; false for any other kind of plan.
    fn collect(&mut self, plan: &'a LogicalPlan) -> bool {
        match plan {
            LogicalPlan::SubqueryAlias(alias) => match scanned_table(&alias.input) {
                Some(table) => {
                    self.tables.push((alias.alias.table().to_string(), table));
                    self.collect_scan_filters(strip_aliases(&alias.input));
                    true
                }
                None => false,
            },
            LogicalPlan::TableScan(scan) => match scanned_table(plan) {
                Some(table) => {
                    self.tables
                        .push((scan.table_name.table().to_string(), table));
                    self.collect_scan_filters(plan);
                    true
                }
                None => false,
            },
            LogicalPlan::Filter(filter) => {
                let first = self.tables.len();
                let collected = self.collect(&filter.input);
                self.add_conjuncts(&filter.predicate, first..self.tables.len());
                collected
            }
            LogicalPlan::Join(join)
                if matches!(join.join_type, JoinType::Inner | JoinType::Left) =>
            {
                let first = self.tables.len();
                let left = self.collect(&join.left);
                let right_first = self.tables.len();
                let right = self.collect(&join.right);
                let filtered = match join.join_type {
                    JoinType::Left => right_first..self.tables.len(),
                    _ => first..self.tables.len(),
                };
                for (l, r) in &join.on {
                    self.equalities.push((l, r, filtered.clone()));
                }
                if let Some(filter) = &join.filter {
                    self.add_conjuncts(filter, filtered);
                }
                left && right
            }
            _ => false,
        }
    }

    /// The filters pushed into the scan of the table last added.
    fn collect_scan_filters(&mut self, plan: &'a LogicalPlan) {
        if let LogicalPlan::TableScan(scan) = plan {
            let table = self.tables.len() - 1;
            for filter in &scan.filters {
                self.add_conjuncts(filter, table..table + 1);
            }
        }
    }

    fn add_conjuncts(&mut self, predicate: &'a Expr, filtered: std::ops::Range<usize>) {
        for conjunct in split_conjunction(predicate) {
            if let Expr::BinaryExpr(BinaryExpr {
                left,
                op: Operator::Eq,
                right,
            }) = conjunct
            {
                self.equalities.push((left, right, filtered.clone()));
            }
        }
    }

    /// The table a column belongs to, if exactly one of the subquery's tables has its name.
    fn table_of(&self, column: &Column) -> Option<usize> {
        let mut found = self.tables.iter().enumerate().filter(|(_, (name, _))| {
            column
                .relation
                .as_ref()
                .is_none_or(|relation| relation.table() == name)
        });
        match (found.next(), found.next()) {
            (Some((i, _)), None) => Some(i),
            _ => None,
        }
    }

    /// Whether `value` is one value per outer row: no column of the subquery's tables but
    /// those of `single` ones, nothing volatile.
    fn is_fixed_value(&self, value: &Expr, single: &[bool]) -> bool {
        if value.is_volatile() {
            return false;
        }
        !value
            .exists(|e| {
                Ok(match e {
                    Expr::Column(c) => !self.table_of(c).is_some_and(|t| single[t]),
                    Expr::ScalarSubquery(_) => true,
                    _ => false,
                })
            })
            .unwrap_or(true)
    }

    /// The columns of table `table` the conditions set equal to a fixed value.
    fn fixed_columns(&self, table: usize, single: &[bool]) -> HashSet<String> {
        let mut fixed = HashSet::new();
        for (left, right, filtered) in &self.equalities {
            if !filtered.contains(&table) {
                continue;
            }
            for (key, value) in [(*left, *right), (*right, *left)] {
                if let Expr::Column(column) = without_casts(key)
                    && self.table_of(column) == Some(table)
                    && self.is_fixed_value(value, single)
                {
                    fixed.insert(column.name.clone());
                }
            }
        }
        fixed
    }
}

fn without_casts(expr: &Expr) -> &Expr {
    match expr {
        Expr::Cast(Cast { expr, .. }) | Expr::TryCast(TryCast { expr, .. }) => without_casts(expr),
        Expr::Alias(Alias { expr, .. }) => without_casts(expr),
        other => other,
    }
}
