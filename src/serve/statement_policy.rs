//! What a client's statement may do, decided on the parsed statement and the plan
//! DataFusion will run (never on its text): settings a client may not change, writes and
//! definitions only as the operator allowed, tables only under the data roots.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::common::{ParamValues, Result};
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::{CopyTarget, Set, Statement};
use datafusion_postgres::hooks::{HookClient, QueryHook};
use datafusion_postgres::pgwire;
use evalsql_udfs::{operator_only, setting_case};
use pgwire::api::ClientInfo;
use pgwire::api::results::{Response, Tag};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::types::format::FormatOptions;

use crate::object_stores::DataRoots;
use crate::policy::PlanPolicy;

use crate::serve::limits;
use crate::serve::planning::{plan_checked, user_error};
use crate::serve::runner::run_plan;

/// Settings a client may not change: where the judge and target keys are sent, and files
/// the server writes.
///
/// Also the settings that change how a statement's text is read (`datafusion.sql_parser.*`:
/// a second reader of the text that disagrees with the first is how checks on text are
/// evaded) and where tables are created (`datafusion.catalog.*`). Names are lower-cased as
/// DataFusion does (Unicode rules: a Kelvin sign is a `k`).
pub fn protected_setting(name: &str) -> bool {
    let name = setting_case(name);
    [
        "datafusion.runtime.",
        "datafusion.sql_parser.",
        "datafusion.catalog.",
    ]
    .iter()
    .any(|prefix| name.starts_with(prefix))
        || operator_only(&name)
}

fn refused(message: String) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".to_string(),
        "42501".to_string(), // insufficient_privilege
        message,
    )))
}

/// Refuses protected settings, and files or URLs outside the data roots named in FROM (the
/// stores refuse them anyway, but DataFusion's lookup of tables by path reports any failure
/// as "table not found"). Runs `SET evalsql.*` / `SET datafusion.*` on the connection's
/// session with errors reported (datafusion-postgres's SET hook ignores them).
pub(super) struct ServerPolicyHook {
    pub(super) roots: Arc<DataRoots>,
    pub(super) allow: ClientAllowances,
    pub(super) policy: PlanPolicy,
}

impl ServerPolicyHook {
    /// Everything a client's statement must pass before it is planned, beyond its size and
    /// depth (checked when it was read: [`crate::serve::statements`]).
    fn check(&self, statement: &Statement) -> PgWireResult<()> {
        // datafusion-postgres's SHOW handler indexes the first name without looking.
        if let Statement::ShowVariable { variable } = statement
            && variable.is_empty()
        {
            return Err(user_error("42601", "SHOW needs a setting name".into()));
        }
        check_statement(statement, &self.allow).map_err(refused)?;
        // The stores refuse a write outside the roots anyway, but DataFusion reports that
        // as a failure to finalise; say why.
        if let Statement::Copy {
            target: CopyTarget::File { filename },
            ..
        } = statement
            && !self.roots.allows_location(filename)
        {
            return Err(refused(format!(
                "{filename} is outside the data roots of this server ({})",
                self.roots.describe()
            )));
        }
        self.check_relations(statement)
    }

    fn check_relations(&self, statement: &Statement) -> PgWireResult<()> {
        use std::ops::ControlFlow;
        let outcome = datafusion::sql::sqlparser::ast::visit_relations(statement, |name| {
            let [part] = name.0.as_slice() else {
                return ControlFlow::Continue(());
            };
            let Some(ident) = part.as_ident() else {
                return ControlFlow::Continue(());
            };
            let location = ident.value.as_str();
            let path_like = location.contains('/') || location.starts_with('~');
            if path_like && !self.roots.allows_location(location) {
                return ControlFlow::Break(refused(format!(
                    "{location} is outside the data roots of this server ({})",
                    self.roots.describe()
                )));
            }
            ControlFlow::Continue(())
        });
        match outcome {
            ControlFlow::Break(e) => Err(e),
            ControlFlow::Continue(()) => Ok(()),
        }
    }

    async fn set(
        &self,
        statement: &Statement,
        ctx: &SessionContext,
    ) -> Option<PgWireResult<Response>> {
        let Statement::Set(set) = statement else {
            // Every other statement is a new query: the judge budgets count from zero.
            evalsql_udfs::start_query(ctx);
            return None;
        };
        // Names as DataFusion reads them: quotes dropped, parts joined, lower case (so
        // `SET "evalsql.judge.base_url"` or `evalsql.judge."base_url"` are caught too).
        let names: Vec<String> = match set {
            Set::SingleAssignment { variable, .. } => vec![setting_name(variable)],
            Set::ParenthesizedAssignments { variables, .. } => {
                variables.iter().map(setting_name).collect()
            }
            Set::MultipleAssignments { assignments } => {
                assignments.iter().map(|a| setting_name(&a.name)).collect()
            }
            _ => return None,
        };
        if let Some(name) = names.iter().find(|n| protected_setting(n)) {
            return Some(Err(refused(format!(
                "SET {name} is not allowed over the server: its administrator sets it \
                 (environment or --init)"
            ))));
        }
        if let Set::SingleAssignment { values, .. } = set
            && let Some(name) = names.iter().find(|n| MODEL_SETTINGS.contains(&n.as_str()))
        {
            let model = values
                .first()
                .map(|v| v.to_string().trim_matches(['\'', '"']).to_string())
                .unwrap_or_default();
            if !model.is_empty() && !self.allow.models.contains(&model) {
                let allowed = if self.allow.models.is_empty() {
                    "none: the server's own models only".to_string()
                } else {
                    self.allow.models.join(", ")
                };
                return Some(Err(refused(format!(
                    "SET {name}: model {model:?} is not among the models this server's \
                     clients may use ({allowed}; its administrator adds one with \
                     --allowed-model)"
                ))));
            }
        }
        let ours = |n: &String| n.starts_with("evalsql.") || n.starts_with("datafusion.");
        match set {
            Set::SingleAssignment { .. } if names.iter().all(ours) => {}
            _ if names.iter().any(ours) => {
                return Some(Err(refused(
                    "SET evalsql.* / datafusion.*: one setting per SET statement".into(),
                )));
            }
            _ => return None,
        }
        if let Set::SingleAssignment { values, .. } = set
            && let Some(value) = values.first()
        {
            let current = |key: &str| {
                ctx.state()
                    .config_options()
                    .entries()
                    .into_iter()
                    .find(|entry| entry.key == key)
                    .and_then(|entry| entry.value)
            };
            if let Err(why) = limits::check_bounded_setting(&names[0], &value.to_string(), &current)
            {
                return Some(Err(refused(why)));
            }
        }
        // Planned from the syntax tree and checked like every other statement.
        let plan = match plan_checked(statement, ctx, &self.policy, protected_setting).await {
            Ok(plan) => plan,
            Err(e) => return Some(Err(e)),
        };
        Some(match ctx.execute_logical_plan(plan).await {
            Ok(_) => Ok(Response::Execution(Tag::new("SET"))),
            Err(e) => Err(PgWireError::ApiError(Box::new(e))),
        })
    }

    /// The checks, then the statements this hook runs itself (`DECLARE`, `SET` of evalsql
    /// and DataFusion keys); `None` passes the statement on to the next hook.
    async fn answer(
        &self,
        statement: &Statement,
        ctx: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        if let Err(e) = self.check(statement) {
            return Some(Err(e));
        }
        if let Some(done) = self.declare(statement, ctx, client).await {
            return Some(done);
        }
        self.set(statement, ctx).await
    }

    /// `DECLARE name CURSOR FOR query`: the query planned from its syntax tree and checked
    /// (datafusion-postgres's cursor hook would parse its text again).
    async fn declare(
        &self,
        statement: &Statement,
        ctx: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        use datafusion::sql::sqlparser::ast::DeclareType;
        use pgwire::api::portal::{Format, Portal};
        use pgwire::api::stmt::StoredStatement;
        use pgwire::api::store::PortalStore;
        let Statement::Declare { stmts } = statement else {
            return None;
        };
        for declare in stmts {
            let (Some(DeclareType::Cursor), Some(name), Some(query)) = (
                declare.declare_type.as_ref(),
                declare.names.first(),
                declare.for_query.as_ref(),
            ) else {
                return Some(Err(user_error(
                    "42601",
                    "DECLARE: only DECLARE name CURSOR FOR query".into(),
                )));
            };
            let query_statement = Statement::Query(query.clone());
            let result = async {
                let plan =
                    plan_checked(&query_statement, ctx, &self.policy, protected_setting).await?;
                let options = Arc::new(FormatOptions::from_client_metadata(client.metadata()));
                let Response::Query(rows) = run_plan(plan, ctx, options).await? else {
                    return Err(user_error("42601", "DECLARE: not a query".into()));
                };
                let stored = Arc::new(StoredStatement::new(
                    name.value.clone(),
                    (query.to_string(), None),
                    vec![],
                ));
                let portal = Portal::new_cursor(name.value.clone(), stored);
                portal.start(rows).await;
                client.portal_store().put_portal(Arc::new(portal));
                let _ = Format::UnifiedText;
                Ok(())
            }
            .await;
            if let Err(e) = result {
                return Some(Err(e));
            }
        }
        Some(Ok(Response::Execution(Tag::new("DECLARE CURSOR"))))
    }
}

use crate::policy::{ClientAllowances, MODEL_SETTINGS};

/// Whether `statement` calls `generate(...)` anywhere (any case, any schema).
fn calls_generate(statement: &Statement) -> bool {
    use datafusion::sql::sqlparser::ast::{Expr as SqlExpr, visit_expressions};
    use std::ops::ControlFlow;
    visit_expressions(statement, |expr| match expr {
        SqlExpr::Function(f)
            if f.name
                .0
                .last()
                .and_then(|p| p.as_ident())
                .is_some_and(|i| i.value.eq_ignore_ascii_case("generate")) =>
        {
            ControlFlow::Break(())
        }
        _ => ControlFlow::Continue(()),
    })
    .is_break()
}

/// Whether a client may run `statement`, decided on the parsed statement (never on its
/// text), for the simple and the extended protocol alike. Reading, settings, cursors,
/// transactions and descriptions are allowed; writes and function definitions only as the
/// operator allowed; anything else is refused.
fn check_statement(statement: &Statement, allow: &ClientAllowances) -> Result<(), String> {
    use Statement as S;
    use datafusion::sql::sqlparser::ast::Reset;
    let name = || {
        let text = statement.to_string();
        text.split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ")
            .to_ascii_uppercase()
    };
    if !allow.generate && calls_generate(statement) {
        return Err(
            "generate() is disabled on this server (it spends the server's key on the \
                    client's prompts): its administrator can start it with --allow-generate"
                .into(),
        );
    }
    match statement {
        S::Query(_)
        | S::Set(_)
        | S::ShowFunctions { .. }
        | S::ShowVariable { .. }
        | S::ShowStatus { .. }
        | S::ShowVariables { .. }
        | S::ShowCreate { .. }
        | S::ShowColumns { .. }
        | S::ShowCatalogs { .. }
        | S::ShowDatabases { .. }
        | S::ShowSchemas { .. }
        | S::ShowCharset(_)
        | S::ShowObjects(_)
        | S::ShowTables { .. }
        | S::ShowViews { .. }
        | S::ShowCollation { .. }
        | S::StartTransaction { .. }
        | S::Commit { .. }
        | S::Rollback { .. }
        | S::Savepoint { .. }
        | S::ReleaseSavepoint { .. }
        | S::Declare { .. }
        | S::Fetch { .. }
        | S::Close { .. }
        | S::Discard { .. }
        | S::Deallocate { .. }
        | S::Execute { .. }
        | S::ExplainTable { .. } => Ok(()),
        // EXPLAIN ANALYZE runs its statement; PREPARE defines one that EXECUTE runs.
        S::Explain { statement, .. } | S::Prepare { statement, .. } => {
            check_statement(statement, allow)
        }
        S::Reset(reset) => match &reset.reset {
            Reset::ALL => Err(
                "RESET ALL is not allowed over the server: it would drop the operator's \
                 settings; reset settings one by one"
                    .into(),
            ),
            Reset::ConfigurationParameter(parameter) => {
                let setting = setting_name(parameter);
                if protected_setting(&setting) {
                    Err(format!(
                        "RESET {setting} is not allowed over the server: its administrator \
                         sets it (environment or --init)"
                    ))
                } else {
                    Ok(())
                }
            }
        },
        S::CreateFunction(_) if allow.create_function => Ok(()),
        S::CreateFunction(_) => Err(
            "CREATE FUNCTION is disabled on this server (a judge metric spends the server's \
             key on every call): its administrator can start it with --allow-create-function"
                .into(),
        ),
        S::Copy { .. }
        | S::CreateTable(_)
        | S::CreateView(_)
        | S::CreateIndex(_)
        | S::AlterTable(_)
        | S::AlterView { .. }
        | S::Insert(_)
        | S::Update(_)
        | S::Delete(_)
        | S::Merge(_)
        | S::Truncate(_)
        | S::Drop { .. }
        | S::DropFunction(_)
        | S::CreateSchema { .. }
        | S::CreateDatabase { .. } => {
            if allow.writes {
                Ok(())
            } else {
                Err(format!(
                    "{}: writes are disabled; start the server with --allow-writes",
                    name()
                ))
            }
        }
        _ => Err(format!("{} is not allowed over this server", name())),
    }
}

/// A setting's name as DataFusion resolves it (Unicode lower case, as its SET does).
fn setting_name(name: &datafusion::sql::sqlparser::ast::ObjectName) -> String {
    let joined = name
        .0
        .iter()
        .map(|part| match part.as_ident() {
            Some(ident) => ident.value.clone(),
            None => part.to_string(),
        })
        .collect::<Vec<_>>()
        .join(".");
    setting_case(&joined)
}

#[async_trait]
impl QueryHook for ServerPolicyHook {
    async fn handle_simple_query(
        &self,
        statement: &Statement,
        session_context: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        self.answer(statement, session_context, client).await
    }

    async fn handle_extended_parse_query(
        &self,
        statement: &Statement,
        _session_context: &SessionContext,
        _client: &(dyn ClientInfo + Send + Sync),
    ) -> Option<PgWireResult<LogicalPlan>> {
        // SetShowHook plans SET as an empty relation
        self.check(statement).err().map(Err)
    }

    async fn handle_extended_query(
        &self,
        statement: &Statement,
        _logical_plan: &LogicalPlan,
        _params: &ParamValues,
        session_context: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        self.answer(statement, session_context, client).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protected_settings() {
        for name in [
            "evalsql.judge.base_url",
            "EVALSQL.JUDGE.AZURE_ENDPOINT",
            "evalsql.judge.cache",
            "evalsql.target.base_url",
            "datafusion.runtime.temp_directory",
        ] {
            assert!(protected_setting(name), "{name}");
        }
        for name in [
            "evalsql.judge.model",
            "evalsql.judge.groundedness.threshold",
            "datafusion.execution.batch_size",
        ] {
            assert!(!protected_setting(name), "{name}");
        }
    }
}
