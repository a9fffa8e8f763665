//! What a client's statement may do, decided on the logical plan DataFusion will run.
//!
//! A check of the SQL text (or of one parser's syntax tree) holds only as long as every
//! layer reads the text the same way; a plan is what actually runs, whatever syntax,
//! dialect or protocol produced it. `evalsql serve` checks every client statement's plan
//! here before running that same plan, and the Ballista scheduler checks every job's plan
//! against the cluster's flags.

use std::sync::Arc;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{DdlStatement, Expr, LogicalPlan, Statement};
use evalsql_udfs::{Origin, judge_of};

/// Settings that choose the model the operator's key pays for.
pub use evalsql_udfs::MODEL_SETTINGS;

/// What the operator lets clients do beyond reading (the flags of `evalsql serve` and of a
/// Ballista cluster); each is off unless its flag is given.
#[derive(Debug, Clone, Default)]
pub struct ClientAllowances {
    /// `--allow-writes`: COPY, CREATE TABLE / VIEW, INSERT, DROP, ... (still confined to the
    /// data roots).
    pub writes: bool,
    /// `--allow-create-function`: judge metrics of the client's own (each call spends the
    /// server's key on the client's prompt).
    pub create_function: bool,
    /// `--allow-generate`: `generate()`, which sends the client's prompts to the model
    /// under test on the server's key.
    pub generate: bool,
    /// `--allowed-model`: models a client may switch the judge or the target to (none: the
    /// server's own models only).
    pub models: Arc<Vec<String>>,
    /// `--allow-monitors`: CREATE, ALTER and DROP MONITOR (a monitor spends the server's key
    /// every run).
    pub monitors: bool,
}

impl ClientAllowances {
    /// The plan checks these allowances ask for; `invoke_app`: the operator gave `--app-url`.
    pub fn plan_policy(&self, invoke_app: bool) -> PlanPolicy {
        PlanPolicy {
            writes: self.writes,
            create_function: self.create_function,
            generate: self.generate,
            invoke_app,
        }
    }
}

/// What the operator lets clients do beyond reading; each is off unless its flag is given.
#[derive(Debug, Clone, Default)]
pub struct PlanPolicy {
    /// `--allow-writes`: DDL, DML, COPY, `SELECT … INTO` (still confined to the data roots).
    pub writes: bool,
    /// `--allow-create-function`: judge metrics of the client's own (`CREATE FUNCTION`), and
    /// calling them (each call spends the operator's key on the client's prompt).
    pub create_function: bool,
    /// `--allow-generate`: `generate()`, the client's prompts on the operator's key.
    pub generate: bool,
    /// Whether `invoke_app` may run at all (the operator gave `--app-url`).
    pub invoke_app: bool,
}

/// Checks every node of `plan` (subqueries, `EXPLAIN`'s and `PREPARE`'s inner plans and
/// every expression included); returns the first refusal, phrased for the client.
///
/// `protected` says whether a setting name (lower-cased as DataFusion does) is the
/// operator's only; a plan that sets or resets such a key is refused.
pub fn check_plan(
    plan: &LogicalPlan,
    policy: &PlanPolicy,
    protected: &dyn Fn(&str) -> bool,
) -> Result<(), String> {
    let mut refusal = None;
    let _ = plan.apply_with_subqueries(|node| {
        if let Err(e) = check_node(node, policy, protected) {
            refusal = Some(e);
            return Ok(TreeNodeRecursion::Stop);
        }
        let mut found = None;
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                if let Err(why) = check_expr(e, policy) {
                    found = Some(why);
                    return Ok(TreeNodeRecursion::Stop);
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })?;
        Ok(match found {
            Some(why) => {
                refusal = Some(why);
                TreeNodeRecursion::Stop
            }
            None => TreeNodeRecursion::Continue,
        })
    });
    match refusal {
        Some(why) => Err(why),
        None => Ok(()),
    }
}

fn writes_disabled(what: &str) -> String {
    format!("{what}: writes are disabled; start the server with --allow-writes")
}

fn check_node(
    node: &LogicalPlan,
    policy: &PlanPolicy,
    protected: &dyn Fn(&str) -> bool,
) -> Result<(), String> {
    match node {
        LogicalPlan::Dml(dml) if !policy.writes => {
            Err(writes_disabled(&format!("{} {}", dml.op, dml.table_name)))
        }
        LogicalPlan::Copy(copy) if !policy.writes => {
            Err(writes_disabled(&format!("COPY TO {}", copy.output_url)))
        }
        LogicalPlan::Ddl(ddl) => match ddl {
            DdlStatement::CreateFunction(_) | DdlStatement::DropFunction(_) => {
                if policy.create_function || policy.writes {
                    Ok(())
                } else {
                    Err(format!(
                        "{}: function definitions are disabled on this server (a judge metric \
                         spends the server's key on every call): its administrator can start \
                         it with --allow-create-function",
                        ddl.name()
                    ))
                }
            }
            // `SELECT … INTO t` plans as CreateMemoryTable, like `CREATE TABLE t AS`.
            _ if !policy.writes => Err(writes_disabled(ddl.name())),
            _ => Ok(()),
        },
        LogicalPlan::Statement(Statement::SetVariable(set)) => {
            check_setting(&set.variable, protected)
        }
        LogicalPlan::Statement(Statement::ResetVariable(reset)) => {
            check_setting(&reset.variable, protected)
        }
        _ => Ok(()),
    }
}

fn check_setting(variable: &str, protected: &dyn Fn(&str) -> bool) -> Result<(), String> {
    let name = variable.to_lowercase();
    if protected(&name) {
        Err(format!(
            "setting {name} is not allowed here: its administrator sets it (environment or \
             --init)"
        ))
    } else {
        Ok(())
    }
}

fn check_expr(expr: &Expr, policy: &PlanPolicy) -> Result<(), String> {
    let Expr::ScalarFunction(call) = expr else {
        return Ok(());
    };
    match call.func.name() {
        "generate" if !policy.generate => {
            return Err(
                "generate() is disabled on this server (it spends the server's key \
                        on the client's prompts): its administrator can start it with \
                        --allow-generate"
                    .into(),
            );
        }
        "invoke_app" if !policy.invoke_app => {
            return Err(
                "invoke_app() is disabled on this server: its administrator lists the \
                        app URLs clients may call with --app-url"
                    .into(),
            );
        }
        _ => {}
    }
    if !policy.create_function
        && judge_of(&call.func).is_some_and(|judge| judge.origin() == Origin::Client)
    {
        return Err(format!(
            "{}() is a client-defined judge metric, and this server does not run them: its \
             administrator can allow them with --allow-create-function",
            call.func.name()
        ));
    }
    Ok(())
}
