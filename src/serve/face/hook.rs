//! The hook that answers `SHOW`, `SELECT set_config(...)` and savepoints, and gives
//! `current_setting` the client's current values before each statement.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::{DFSchema, ParamValues, ScalarValue};
use datafusion::logical_expr::{EmptyRelation, LogicalPlan};
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, ObjectName, Query, SelectItem,
    Set, SetExpr, Statement, Value,
};
use datafusion_postgres::hooks::{HookClient, QueryHook};
use datafusion_postgres::pgwire;
use pgwire::api::results::{DataRowEncoder, FieldFormat, FieldInfo, QueryResponse, Response, Tag};
use pgwire::api::store::{Entry, PortalStore};
use pgwire::api::{ClientInfo, ClientPortalStore};
use pgwire::error::PgWireResult;
use pgwire::messages::response::TransactionStatus;

use super::{PgSession, SettingRow, unrecognized};
use crate::policy::PlanPolicy;
use crate::serve::planning::{StoredPlan, plan_checked, user_error};

/// Answers what PostgreSQL's face needs before the statement runner sees it. Goes right
/// after the policy hook, so every statement it answers has passed the policy's checks.
pub struct FaceHook {
    session: Arc<PgSession>,
    policy: PlanPolicy,
    protected: fn(&str) -> bool,
    /// The connection's hooks but this one, in their order: the `SET` a `set_config`
    /// stands for runs through them exactly as the client's own `SET` would.
    chain: OnceLock<Vec<Arc<dyn QueryHook>>>,
    /// Whether a `BEGIN` has come since the last `COMMIT` or `ROLLBACK`. pgwire updates the
    /// status it reports only after a whole message, so in `BEGIN; SAVEPOINT a` the
    /// savepoint would otherwise find the connection idle.
    in_block: AtomicBool,
}

impl FaceHook {
    pub fn new(session: Arc<PgSession>, policy: PlanPolicy, protected: fn(&str) -> bool) -> Self {
        Self {
            session,
            policy,
            protected,
            chain: OnceLock::new(),
            in_block: AtomicBool::new(false),
        }
    }

    /// Takes the connection's hook list (which holds `this`).
    pub fn set_chain(this: &Arc<Self>, hooks: &[Arc<dyn QueryHook>]) {
        let me = Arc::as_ptr(this) as *const ();
        let others = hooks
            .iter()
            .filter(|h| Arc::as_ptr(h) as *const () != me)
            .cloned()
            .collect();
        let _ = this.chain.set(others);
    }

    async fn answer(
        &self,
        statement: &Statement,
        params: &ParamValues,
        ctx: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        self.session.refresh(client.metadata());
        let failed = client.transaction_status() == TransactionStatus::Error;
        match statement {
            // In a failed transaction block: refused as PostgreSQL refuses them (set_config
            // statements go on to datafusion-postgres's transaction hook, which refuses
            // them, and SET to its SET hook, as before).
            Statement::ShowVariable { .. } if failed => Some(Err(aborted())),
            Statement::Query(_) | Statement::Set(_) if failed => None,
            Statement::ShowVariable { variable } => self.show(variable, ctx),
            // datafusion-postgres's transaction hook answers these.
            Statement::StartTransaction { .. } => {
                self.in_block.store(true, Ordering::Relaxed);
                None
            }
            Statement::Commit { .. }
            | Statement::Rollback {
                savepoint: None, ..
            } => {
                self.in_block.store(false, Ordering::Relaxed);
                None
            }
            Statement::Savepoint { .. }
            | Statement::ReleaseSavepoint { .. }
            | Statement::Rollback {
                savepoint: Some(_), ..
            } => {
                let status = match client.transaction_status() {
                    TransactionStatus::Idle if self.in_block.load(Ordering::Relaxed) => {
                        TransactionStatus::Transaction
                    }
                    status => status,
                };
                let response = savepoint(statement, status);
                if matches!(response, Ok(Response::TransactionEnd(_))) {
                    self.in_block.store(false, Ordering::Relaxed);
                }
                Some(response)
            }
            Statement::Query(query) => {
                let calls = set_config_calls(query)?;
                Some(self.set_config(&calls, params, ctx, client).await)
            }
            Statement::Set(Set::SetTimeZone { local: false, .. }) => Some(
                self.apply_set(statement, ctx, client)
                    .await
                    .map(|()| Response::Execution(Tag::new("SET"))),
            ),
            _ => None,
        }
    }

    /// `SHOW name` / `SHOW ALL`: PostgreSQL's settings and the session's own.
    fn show(&self, variable: &[Ident], ctx: &SessionContext) -> Option<PgWireResult<Response>> {
        let rows = match self.shown(variable, ctx)? {
            Ok(rows) => rows,
            Err(e) => return Some(Err(e)),
        };
        let all = is_show_all(variable);
        let columns = show_columns(all, &rows);
        let rows = rows
            .into_iter()
            .map(|row| {
                if all {
                    vec![Some(row.name), row.value, Some(row.description)]
                } else {
                    vec![row.value]
                }
            })
            .collect();
        Some(text_rows(columns, rows))
    }

    /// The rows `SHOW` gives; `None` leaves the statement to datafusion-postgres's hook
    /// (`SHOW CATALOGS`).
    fn shown(
        &self,
        variable: &[Ident],
        ctx: &SessionContext,
    ) -> Option<PgWireResult<Vec<SettingRow>>> {
        let options = ctx.state().config_options().clone();
        if is_show_all(variable) {
            return Some(Ok(self.session.all(&options)));
        }
        let name = variable
            .iter()
            .map(|part| part.value.as_str())
            .collect::<Vec<_>>()
            .join(".");
        match self.session.lookup(&name, &options) {
            Some(row) => Some(Ok(vec![row])),
            None if name.eq_ignore_ascii_case("catalogs") => None,
            None => Some(Err(user_error("42704", unrecognized(&name)))),
        }
    }

    /// `SELECT set_config(name, value, is_local) [, ...]`: each as `SET name = 'value'`
    /// through the connection's hooks (the policy's checks, then whichever hook answers
    /// that `SET`), then the setting's new value, as PostgreSQL returns it.
    async fn set_config(
        &self,
        calls: &[SetConfigCall<'_>],
        params: &ParamValues,
        ctx: &SessionContext,
        client: &mut dyn HookClient,
    ) -> PgWireResult<Response> {
        let mut values = Vec::with_capacity(calls.len());
        for call in calls {
            let name = constant(call.name, params)?.ok_or_else(|| {
                user_error(
                    "22004",
                    format!("{}(): the setting name is NULL", call.function),
                )
            })?;
            let options = ctx.state().config_options().clone();
            let Some(value) = call.value else {
                // current_setting(name [, missing_ok]), read where it stands.
                let missing_ok = match call.is_local {
                    Some(flag) => boolean(constant(flag, params)?, "missing_ok")?,
                    None => false,
                };
                match self.session.lookup(&name, &options) {
                    Some(row) => values.push(row.value),
                    None if missing_ok => values.push(None),
                    None => return Err(user_error("42704", unrecognized(&name))),
                }
                continue;
            };
            let value = constant(value, params)?.ok_or_else(|| {
                user_error(
                    "22004",
                    format!("set_config({name:?}, NULL, …): use RESET {name} to reset a setting"),
                )
            })?;
            let local = match call.is_local {
                Some(flag) => boolean(constant(flag, params)?, "is_local")?,
                None => false,
            };
            if local {
                return Err(user_error(
                    "0A000",
                    format!(
                        "set_config({name:?}, …, true): transaction-local settings are not \
                         supported (transactions are no-ops on this server); pass false"
                    ),
                ));
            }
            let set = set_statement(&name, &value);
            self.apply_set(&set, ctx, client).await?;
            self.session.refresh(client.metadata());
            let options = ctx.state().config_options().clone();
            let now = self
                .session
                .lookup(&name, &options)
                .ok_or_else(|| user_error("42704", unrecognized(&name)))?;
            values.push(now.value);
        }
        let columns = calls.iter().map(|c| c.column.clone()).collect();
        text_rows(columns, vec![values])
    }

    /// Runs `set` as the client's own `SET` would run. `SET TIME ZONE` also sets the
    /// session's `datafusion.execution.time_zone` (by the same path), which datafusion-
    /// postgres's hook means to do but does on a copy of the session: `now()`, casts to
    /// `timestamptz` and `SHOW TimeZone` then agree.
    async fn apply_set(
        &self,
        set: &Statement,
        ctx: &SessionContext,
        client: &mut dyn HookClient,
    ) -> PgWireResult<()> {
        if let Statement::Set(Set::SetTimeZone { value, .. }) = set
            && let Expr::Value(literal) = value
            && let Some(zone) = literal.value.clone().into_string()
        {
            use datafusion::arrow::array::timezone::Tz;
            if zone.parse::<Tz>().is_err() {
                return Err(user_error(
                    "22023", // invalid_parameter_value
                    format!(
                        "invalid value for parameter \"TimeZone\": {}",
                        evalsql_udfs::truncate_for_error(&zone)
                    ),
                ));
            }
            let session_zone = set_statement("datafusion.execution.time_zone", &zone);
            self.run_set(&session_zone, ctx, client).await?;
        }
        self.run_set(set, ctx, client).await
    }

    /// Runs `set` through the connection's other hooks, as a client's `SET` would run.
    async fn run_set(
        &self,
        set: &Statement,
        ctx: &SessionContext,
        client: &mut dyn HookClient,
    ) -> PgWireResult<()> {
        let chain = self.chain.get().ok_or_else(|| {
            user_error("XX000", "set_config(): the connection is not set up".into())
        })?;
        for hook in chain {
            if let Some(done) = hook.handle_simple_query(set, ctx, client).await {
                return done.map(|_| ());
            }
        }
        Err(user_error(
            "0A000",
            format!("set_config(): {set} is not supported"),
        ))
    }
}

/// A result of text columns.
fn text_rows(columns: Vec<String>, rows: Vec<Vec<Option<String>>>) -> PgWireResult<Response> {
    let fields: Vec<FieldInfo> = columns
        .into_iter()
        .map(|name| FieldInfo::new(name, None, None, pgwire::api::Type::TEXT, FieldFormat::Text))
        .collect();
    let fields = Arc::new(fields);
    let mut encoded = Vec::with_capacity(rows.len());
    for row in rows {
        let mut encoder = DataRowEncoder::new(Arc::clone(&fields));
        for value in &row {
            encoder.encode_field(&value.as_deref())?;
        }
        encoded.push(Ok(encoder.take_row()));
    }
    Ok(Response::Query(QueryResponse::new(
        fields,
        Box::pin(futures::stream::iter(encoded)),
    )))
}

fn is_show_all(variable: &[Ident]) -> bool {
    matches!(variable, [one] if one.value.eq_ignore_ascii_case("all"))
}

/// The columns of a `SHOW`: PostgreSQL's `name, setting, description` for `SHOW ALL`, the
/// setting's own name otherwise.
fn show_columns(all: bool, rows: &[SettingRow]) -> Vec<String> {
    if all {
        vec!["name".into(), "setting".into(), "description".into()]
    } else {
        vec![
            rows.first()
                .map_or_else(|| "setting".into(), |r| r.name.clone()),
        ]
    }
}

/// `SAVEPOINT`, `RELEASE` and `ROLLBACK TO`: evalsql has no writes inside transactions
/// (`BEGIN`/`COMMIT` are no-ops), so there is nothing to keep or undo and they are accepted
/// inside a transaction block, as psycopg 3 under SQLAlchemy sends them. `ROLLBACK TO` in a
/// failed transaction makes it live again: [`resumes_transaction`] lets the service mark
/// the block live before pgwire reads its status for the message; should the failed state
/// still show here, the block is ended instead (pgwire leaves that state no other way).
fn savepoint(statement: &Statement, status: TransactionStatus) -> PgWireResult<Response> {
    let (what, tag) = match statement {
        Statement::Savepoint { .. } => ("SAVEPOINT", "SAVEPOINT"),
        Statement::ReleaseSavepoint { .. } => ("RELEASE SAVEPOINT", "RELEASE"),
        _ => ("ROLLBACK TO SAVEPOINT", "ROLLBACK"),
    };
    match (status, tag) {
        (TransactionStatus::Idle, _) => Err(user_error(
            "25P01", // no_active_sql_transaction
            format!("{what} can only be used in transaction blocks"),
        )),
        (TransactionStatus::Error, "ROLLBACK") => Ok(Response::TransactionEnd(Tag::new(tag))),
        (TransactionStatus::Error, _) => Err(aborted()),
        _ => Ok(Response::Execution(Tag::new(tag))),
    }
}

fn aborted() -> pgwire::error::PgWireError {
    user_error(
        "25P02", // in_failed_sql_transaction
        "current transaction is aborted, commands ignored until end of transaction block".into(),
    )
}

/// Whether `statement` is `ROLLBACK TO [SAVEPOINT] name`, which takes a failed
/// transaction back to a live one: the service marks the block live before pgwire reads
/// the status it reports after the statement (extended protocol: the portal's statement).
pub fn resumes_transaction(statement: &Statement) -> bool {
    matches!(
        statement,
        Statement::Rollback {
            savepoint: Some(_),
            ..
        }
    )
}

/// Before pgwire runs a simple-protocol message whose first statement is `first`: a
/// failed transaction block that the message rolls back to a savepoint is live again.
pub fn before_query<C: ClientInfo + ?Sized>(client: &mut C, first: Option<&Statement>) {
    if client.transaction_status() == TransactionStatus::Error
        && first.is_some_and(resumes_transaction)
    {
        client.set_transaction_status(TransactionStatus::Transaction);
    }
}

/// Before pgwire executes portal `name` (the unnamed one for `None`): as [`before_query`],
/// for the statement the portal holds.
pub fn before_execute<C>(client: &mut C, name: Option<&str>)
where
    C: ClientInfo + ClientPortalStore + ?Sized,
    C::PortalStore: PortalStore<Statement = StoredPlan>,
{
    if client.transaction_status() != TransactionStatus::Error {
        return;
    }
    let portal = client
        .portal_store()
        .get_portal(name.unwrap_or(pgwire::api::DEFAULT_NAME));
    if let Some(Entry::Value(portal)) = portal
        && let (_, Some((statement, _))) = &portal.statement.statement
        && resumes_transaction(statement)
    {
        client.set_transaction_status(TransactionStatus::Transaction);
    }
}

/// A boolean argument (NULL is false, as PostgreSQL's `set_config` reads it).
fn boolean(text: Option<String>, what: &str) -> PgWireResult<bool> {
    match text.as_deref().map(str::to_lowercase).as_deref() {
        None | Some("false" | "f" | "off" | "0" | "no") => Ok(false),
        Some("true" | "t" | "on" | "1" | "yes") => Ok(true),
        Some(other) => Err(user_error(
            "22P02",
            format!("{what} must be a boolean, got {other:?}"),
        )),
    }
}

/// One call of a `SELECT set_config(...)` statement: `set_config(name, value, is_local)`,
/// or `current_setting(name [, missing_ok])` beside one (asyncpg reads and sets `jit` in
/// one statement), which has no `value` and its `missing_ok` as `is_local`.
struct SetConfigCall<'a> {
    function: &'static str,
    name: &'a Expr,
    value: Option<&'a Expr>,
    is_local: Option<&'a Expr>,
    /// Its output column: its alias, else the function's name, as PostgreSQL names it.
    column: String,
}

/// The calls of a statement that is nothing but `SELECT set_config(...) [AS a], ...`
/// (with `current_setting` calls beside) with constant or bound arguments (no FROM, WHERE
/// or any other clause); `None` for anything else, which is planned normally (and whose
/// `set_config` refuses to run).
fn set_config_calls(query: &Query) -> Option<Vec<SetConfigCall<'_>>> {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let mut calls = Vec::new();
    for item in &select.projection {
        let (expr, alias) = match item {
            SelectItem::UnnamedExpr(e) => (e, None),
            SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.value.clone())),
            _ => return None,
        };
        let Expr::Function(f) = expr else { return None };
        let name = f
            .name
            .0
            .last()
            .and_then(|p| p.as_ident())?
            .value
            .to_lowercase();
        let function = match name.as_str() {
            "set_config" => "set_config",
            "current_setting" => "current_setting",
            _ => return None,
        };
        if f.filter.is_some()
            || f.over.is_some()
            || f.null_treatment.is_some()
            || !f.within_group.is_empty()
            || !matches!(f.parameters, FunctionArguments::None)
        {
            return None;
        }
        let FunctionArguments::List(list) = &f.args else {
            return None;
        };
        if list.duplicate_treatment.is_some() || !list.clauses.is_empty() {
            return None;
        }
        let args: Vec<&Expr> = list
            .args
            .iter()
            .map(|a| match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) if constant_shape(e) => Some(e),
                _ => None,
            })
            .collect::<Option<_>>()?;
        let (name, value, is_local) = match (function, args.as_slice()) {
            ("set_config", [name, value, is_local]) => (*name, Some(*value), Some(*is_local)),
            ("current_setting", [name]) => (*name, None, None),
            ("current_setting", [name, missing_ok]) => (*name, None, Some(*missing_ok)),
            _ => return None,
        };
        calls.push(SetConfigCall {
            function,
            name,
            value,
            is_local,
            column: alias.unwrap_or_else(|| function.to_string()),
        });
    }
    if !calls.iter().any(|c| c.value.is_some()) {
        return None;
    }
    // Only then (a clone): everything but the projection must be a bare `SELECT 1`'s.
    let mut bare = query.clone();
    if let SetExpr::Select(s) = bare.body.as_mut() {
        s.projection.clear();
    }
    if bare != *bare_select() {
        return None;
    }
    Some(calls)
}

/// `SELECT 1` with its projection removed: the shape a `set_config` statement must have.
fn bare_select() -> &'static Query {
    static BARE: OnceLock<Query> = OnceLock::new();
    BARE.get_or_init(|| {
        use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
        use datafusion::sql::sqlparser::parser::Parser;
        let parsed = Parser::parse_sql(&PostgreSqlDialect {}, "SELECT 1");
        let Ok(mut statements) = parsed else {
            unreachable!("SELECT 1 parses")
        };
        let Some(Statement::Query(mut query)) = statements.pop() else {
            unreachable!("SELECT 1 is a query")
        };
        if let SetExpr::Select(s) = query.body.as_mut() {
            s.projection.clear();
        }
        *query
    })
}

/// A literal or a bound parameter, possibly cast or in parentheses.
fn constant_shape(expr: &Expr) -> bool {
    match expr {
        Expr::Value(_) => true,
        Expr::Cast { expr, .. } | Expr::Nested(expr) => constant_shape(expr),
        _ => false,
    }
}

/// The text of a constant argument (`None`: NULL).
fn constant(expr: &Expr, params: &ParamValues) -> PgWireResult<Option<String>> {
    let value = match expr {
        Expr::Cast { expr, .. } | Expr::Nested(expr) => return constant(expr, params),
        Expr::Value(v) => &v.value,
        other => {
            return Err(user_error(
                "42601",
                format!("set_config(): {other} is not a constant"),
            ));
        }
    };
    Ok(match value {
        Value::Null => None,
        Value::Boolean(b) => Some(b.to_string()),
        Value::Number(n, _) => Some(n.to_string()),
        Value::Placeholder(p) => {
            let scalar = params
                .get_placeholders_with_values(p)
                .map_err(|e| user_error("42P02", format!("set_config(): {e}")))?;
            scalar_text(&scalar.value)
        }
        other => match other.clone().into_string() {
            Some(s) => Some(s),
            None => {
                return Err(user_error(
                    "42601",
                    format!("set_config(): {other} is not a text constant"),
                ));
            }
        },
    })
}

fn scalar_text(value: &ScalarValue) -> Option<String> {
    if value.is_null() {
        return None;
    }
    match value {
        ScalarValue::Utf8(s) | ScalarValue::LargeUtf8(s) | ScalarValue::Utf8View(s) => s.clone(),
        other => Some(other.to_string()),
    }
}

/// The `SET` a `set_config(name, value, false)` stands for, built as the parser would
/// build it from `SET name = 'value'` (`SET TIME ZONE 'value'` for the time zone).
fn set_statement(name: &str, value: &str) -> Statement {
    let text = Expr::Value(Value::SingleQuotedString(value.to_string()).into());
    let lower = name.trim().to_lowercase();
    if lower == "timezone" || lower == "time zone" {
        return Statement::Set(Set::SetTimeZone {
            local: false,
            value: text,
        });
    }
    Statement::Set(Set::SingleAssignment {
        scope: None,
        hivevar: false,
        variable: ObjectName::from(name.split('.').map(Ident::new).collect::<Vec<_>>()),
        values: vec![text],
    })
}

/// The plan a `SHOW` or a savepoint stands for at Parse (its result columns).
fn described(columns: &[String]) -> PgWireResult<LogicalPlan> {
    let schema = Schema::new(
        columns
            .iter()
            .map(|c| Field::new(c, DataType::Utf8, true))
            .collect::<Vec<_>>(),
    );
    let schema = DFSchema::try_from(schema)
        .map_err(|e| pgwire::error::PgWireError::ApiError(Box::new(e)))?;
    Ok(LogicalPlan::EmptyRelation(EmptyRelation {
        produce_one_row: !columns.is_empty(),
        schema: Arc::new(schema),
    }))
}

#[async_trait]
impl QueryHook for FaceHook {
    async fn handle_simple_query(
        &self,
        statement: &Statement,
        ctx: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        self.answer(statement, &ParamValues::List(vec![]), ctx, client)
            .await
    }

    async fn handle_extended_parse_query(
        &self,
        statement: &Statement,
        ctx: &SessionContext,
        client: &(dyn ClientInfo + Send + Sync),
    ) -> Option<PgWireResult<LogicalPlan>> {
        self.session.refresh(client.metadata());
        match statement {
            Statement::ShowVariable { variable } => {
                let rows = match self.shown(variable, ctx)? {
                    Ok(rows) => rows,
                    Err(e) => return Some(Err(e)),
                };
                Some(described(&show_columns(is_show_all(variable), &rows)))
            }
            Statement::Savepoint { .. } | Statement::ReleaseSavepoint { .. } => {
                Some(described(&[]))
            }
            Statement::Query(query) => {
                let calls = set_config_calls(query)?;
                // Planned (and checked) with each call named as its column, so Describe
                // gives PostgreSQL's column names and the parameters their types.
                let mut named = query.clone();
                if let SetExpr::Select(select) = named.body.as_mut() {
                    for (item, call) in select.projection.iter_mut().zip(&calls) {
                        if let SelectItem::UnnamedExpr(e) = item {
                            *item = SelectItem::ExprWithAlias {
                                expr: e.clone(),
                                alias: Ident::with_quote('"', call.column.clone()),
                            };
                        }
                    }
                }
                let statement = Statement::Query(named);
                Some(plan_checked(&statement, ctx, &self.policy, self.protected).await)
            }
            _ => None,
        }
    }

    async fn handle_extended_query(
        &self,
        statement: &Statement,
        _plan: &LogicalPlan,
        params: &ParamValues,
        ctx: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        self.answer(statement, params, ctx, client).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn query(sql: &str) -> Box<Query> {
        match Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap().pop() {
            Some(Statement::Query(q)) => q,
            other => panic!("{sql}: {other:?}"),
        }
    }

    #[test]
    fn only_a_bare_select_of_constant_set_config_calls_is_a_set_config_statement() {
        for sql in [
            "SELECT set_config('a.b', 'x', false)",
            "select SET_CONFIG('a.b', $1, false) AS v, set_config($2::text, 'y', 'f')",
            "SELECT pg_catalog.set_config(('a.b'), 'x'::text, false)",
            "SELECT current_setting('jit') AS cur, set_config('jit', 'off', false) AS new",
        ] {
            assert!(set_config_calls(&query(sql)).is_some(), "{sql}");
        }
        for sql in [
            "SELECT set_config('a.b', 'x', false) FROM t",
            "SELECT set_config('a.b', 'x', false) WHERE true",
            "SELECT set_config('a.b', 'x', false) LIMIT 1",
            "SELECT set_config('a.b', 'x', false) ORDER BY 1",
            "WITH w AS (SELECT 1) SELECT set_config('a.b', 'x', false)",
            "SELECT DISTINCT set_config('a.b', 'x', false)",
            "SELECT set_config('a.b', 'x', false), 1",
            "SELECT set_config('a.' || 'b', 'x', false)",
            "SELECT set_config('a.b', generate('p'), false)",
            "SELECT set_config('a.b', 'x')",
            "SELECT (SELECT set_config('a.b', 'x', false))",
            "SELECT set_config('a.b', 'x', false) UNION SELECT '1'",
            "SELECT 1",
            "SELECT current_setting('jit')",
            "SELECT current_setting(name), set_config('a.b', 'x', false) FROM t",
        ] {
            assert!(set_config_calls(&query(sql)).is_none(), "{sql}");
        }
    }

    #[test]
    fn set_config_stands_for_the_set_a_client_would_write() {
        let Statement::Set(Set::SingleAssignment {
            variable, values, ..
        }) = set_statement("Evalsql.Judge.Base_URL", "http://x/'y")
        else {
            panic!("not a SET")
        };
        let parts: Vec<&str> = variable
            .0
            .iter()
            .map(|p| p.as_ident().unwrap().value.as_str())
            .collect();
        assert_eq!(parts, ["Evalsql", "Judge", "Base_URL"]);
        assert_eq!(values.len(), 1);
        assert!(matches!(
            set_statement("TimeZone", "UTC"),
            Statement::Set(Set::SetTimeZone { local: false, .. })
        ));
    }

    #[test]
    fn rollback_to_is_read_from_the_first_statement() {
        let reader = crate::serve::statements::StatementReader::default();
        let limits = crate::serve::ServeLimits::default();
        let first = |sql: &str| {
            reader
                .read(sql, &limits)
                .ok()
                .and_then(|read| read.statements.into_iter().next())
        };
        for sql in [
            "ROLLBACK TO SAVEPOINT a",
            "  rollback to a; release a",
            "/* c */ -- line\n Rollback Work To a",
            "ROLLBACK TRANSACTION TO SAVEPOINT a",
        ] {
            assert!(
                first(sql).as_ref().is_some_and(resumes_transaction),
                "{sql}"
            );
        }
        for sql in ["ROLLBACK", "SELECT 1; ROLLBACK TO a", "/* unclosed", ""] {
            assert!(
                !first(sql).as_ref().is_some_and(resumes_transaction),
                "{sql}"
            );
        }
    }
}
