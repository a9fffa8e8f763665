//! Looking at logical plans: which `pg_catalog` tables a plan reads, the table under a chain
//! of aliases; rewriting a plan's expressions.

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::utils::merge_schema;
use datafusion::logical_expr::{Expr, LogicalPlan};

/// `plan` without the aliases (`FROM pg_catalog.pg_attrdef d`) on top of it.
pub fn strip_aliases(plan: &LogicalPlan) -> &LogicalPlan {
    match plan {
        LogicalPlan::SubqueryAlias(alias) => strip_aliases(&alias.input),
        other => other,
    }
}

/// The `pg_catalog` table `plan` scans directly (under aliases), if it is one.
pub fn scanned_table(plan: &LogicalPlan) -> Option<&str> {
    match strip_aliases(plan) {
        LogicalPlan::TableScan(scan)
            if scan
                .table_name
                .schema()
                .is_none_or(|schema| schema == "pg_catalog") =>
        {
            Some(scan.table_name.table())
        }
        _ => None,
    }
}

/// Adds to `read` each of `tables` that `plan` (with its subqueries) scans in `pg_catalog`.
pub fn reads_catalog_table<'a>(
    plan: &LogicalPlan,
    tables: &[&'a str],
    read: &mut Vec<&'a str>,
) -> Result<()> {
    plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(_) = node
            && let Some(name) = scanned_table(node)
            && let Some(table) = tables.iter().find(|t| **t == name)
            && !read.contains(table)
        {
            read.push(table);
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(())
}

/// `plan` with `rewrite` applied to every expression of it and of its subqueries, bottom
/// up, keeping the names the expressions give their columns. `rewrite` is given the
/// schema the expression is evaluated against (the node's inputs').
pub fn rewrite_expressions(
    plan: LogicalPlan,
    mut rewrite: impl FnMut(Expr, &DFSchema) -> Result<Transformed<Expr>>,
) -> Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|node| {
        let names = NamePreserver::new(&node);
        let schema = merge_schema(&node.inputs());
        let rewritten = node.map_expressions(|e| {
            let name = names.save(&e);
            Ok(e.transform_up(|e| rewrite(e, &schema))?
                .update_data(|e| name.restore(e)))
        })?;
        if rewritten.transformed {
            rewritten.map_data(|plan| plan.recompute_schema())
        } else {
            Ok(rewritten)
        }
    })
    .map(|t| t.data)
}
