//! Running a client's statement: read once, the plan that is checked being the plan that
//! runs, and a deadline over planning, running and sending rows.
//!
//! Each message is read by [`StatementReader`] ([`super::statements`]: limits, one parse,
//! the rewrites) and its statements are handed to the connection's hooks here. The last
//! hook ([`StatementRunner`]) plans the syntax tree itself, checks the plan
//! ([`crate::policy`]) and runs that plan, so no second parser ever reads a client's text.
//! In the extended protocol the same hook plans and checks at Parse, and datafusion-postgres
//! runs the stored plan at Execute.
//!
//! [`EvalsqlService`] wraps datafusion-postgres's handlers to put every statement under its
//! deadline: when it passes,
//! the statement's future and row stream are dropped, which ends DataFusion's tasks and
//! every judge and target call not yet answered (calls not yet sent are never sent).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use datafusion::common::ParamValues;
use datafusion::logical_expr::{DmlStatement, LogicalPlan, WriteOp};
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::Statement;
use datafusion_postgres::arrow_pg::datatypes::df::encode_dataframe;
use datafusion_postgres::hooks::{HookClient, QueryHook};
use datafusion_postgres::pgwire;
use datafusion_postgres::{DfSessionService, Parser};
use futures::{Sink, Stream};
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{FieldInfo, QueryResponse, Response, Tag};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, Type};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::data::DataRow;
use pgwire::types::format::FormatOptions;
use tokio::time::Instant;

use super::limits::ServeLimits;
use super::planning::{StoredPlan, plan_checked, user_error};
use super::sessions::{RunningGuard, Session, Stop};
use super::sqlstate;
use super::statements::{Read, StatementReader};
use crate::monitor::{Asker, MonitorStatement, Monitors};
use crate::policy::{PlanPolicy, check_plan};
use evalsql_udfs::interrupt::{self, Interrupt};

/// The session's `statement_timeout` as datafusion-postgres's SET hook stores it.
fn client_timeout<C: ClientInfo + ?Sized>(client: &C) -> Option<Duration> {
    client
        .metadata()
        .get("statement_timeout_ms")
        .and_then(|ms| ms.parse::<u64>().ok())
        .filter(|&ms| ms > 0)
        .map(Duration::from_millis)
}

/// When a statement starting now must end: the server's timeout, or the client's own if it
/// is shorter (a client can only lower the server's).
fn deadline<C: ClientInfo + ?Sized>(client: &C, limits: &ServeLimits) -> Option<Instant> {
    let timeout = match (limits.statement_timeout, client_timeout(client)) {
        (Some(server), Some(own)) => Some(server.min(own)),
        (server, own) => server.or(own),
    };
    timeout.map(|t| Instant::now() + t)
}

/// Marks `query` as the connection's running statement (for cancel requests and
/// `pg_stat_activity`) until the returned guard is dropped.
fn start<C: ClientInfo + ?Sized>(client: &C, query: &str) -> Option<Arc<RunningGuard>> {
    client
        .session_extensions()
        .get::<Arc<Session>>()
        .map(|session| session.start(query))
}

type StopSignal = Pin<Box<dyn Future<Output = Stop> + Send>>;

/// Resolves when the statement must stop: its deadline, a cancel, its client gone.
fn stop_signal(running: Option<Arc<RunningGuard>>, deadline: Option<Instant>) -> StopSignal {
    match running {
        Some(running) => Box::pin(running.stopped(deadline)),
        // Not a logged-in connection's statement: only the deadline stops it.
        None => Box::pin(async move {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
            Stop::Timeout
        }),
    }
}

/// Rows that stop with the stop's error (SQLSTATE 57014 for a timeout or a cancel) once
/// the stop signal fires; the rows' source (the running plan) is dropped then.
struct Stoppable {
    rows: Option<pgwire::api::results::SendableRowStream>,
    stop: StopSignal,
}

impl Stream for Stoppable {
    type Item = PgWireResult<DataRow>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Some(rows) = self.rows.as_mut() else {
            return Poll::Ready(None);
        };
        if let Poll::Ready(item) = rows.as_mut().poll_next(cx) {
            if item.is_none() {
                self.rows = None;
            }
            return Poll::Ready(item.map(|row| row.map_err(sqlstate::classify)));
        }
        if let Poll::Ready(stop) = self.stop.as_mut().poll(cx) {
            self.rows = None;
            return Poll::Ready(Some(Err(stop.error())));
        }
        Poll::Pending
    }
}

fn stoppable(
    response: Response,
    running: Option<Arc<RunningGuard>>,
    deadline: Option<Instant>,
) -> Response {
    match response {
        Response::Query(mut query) => {
            let rows = std::mem::replace(&mut query.data_rows, Box::pin(futures::stream::empty()));
            query.data_rows = Box::pin(Stoppable {
                rows: Some(rows),
                stop: stop_signal(running, deadline),
            });
            Response::Query(query)
        }
        response => response,
    }
}

/// Runs `work` until `stop` fires; a panic inside it (a bug, ours or a library's) becomes
/// an error to this client instead of a dropped connection.
///
/// The statement is current on the thread while `work` is polled, so planning (which
/// folds constant calls: `rouge_l('<a long literal>', …)` runs there) and the parts of the
/// plan that run in this task give up once it must stop; whatever they produced after
/// that is replaced by the stop's error.
async fn before<T>(
    stop: StopSignal,
    running: Option<&Arc<RunningGuard>>,
    work: impl Future<Output = PgWireResult<T>>,
) -> PgWireResult<T> {
    use futures::FutureExt;
    let work = Interruptible {
        interrupt: running.map(|r| r.interrupt()),
        work: Box::pin(work),
    };
    let work = std::panic::AssertUnwindSafe(work).catch_unwind();
    let result = tokio::select! {
        result = work => result,
        stop = stop => return Err(stop.error()),
    };
    if let Some(stop) = running.and_then(|r| r.stop_reason()) {
        return Err(stop.error());
    }
    result
        .unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(user_error(
                "XX000", // internal_error
                format!("internal error while running the statement: {what}"),
            ))
        })
        .map_err(sqlstate::classify)
}

/// A future polled with its statement current on the thread
/// ([`evalsql_udfs::interrupt`]).
struct Interruptible<F> {
    interrupt: Option<Arc<dyn Interrupt>>,
    work: Pin<Box<F>>,
}

impl<F: Future> Future for Interruptible<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        match &this.interrupt {
            Some(interrupt) => interrupt::while_current(interrupt, || this.work.as_mut().poll(cx)),
            None => this.work.as_mut().poll(cx),
        }
    }
}

/// datafusion-postgres's handlers with the server's statement reading and limits around
/// them: statements are read by [`StatementReader`] and handed to the connection's hooks
/// here (datafusion-postgres's own handlers would parse the text again).
pub struct EvalsqlService {
    inner: Arc<DfSessionService>,
    parser: Arc<GuardedParser>,
    limits: Arc<ServeLimits>,
    /// The message `on_query` has read, for `do_query` to run (pgwire hands it the text).
    read: std::sync::Mutex<Option<(String, PgWireResult<Read>)>>,
}

impl EvalsqlService {
    pub fn new(
        ctx: Arc<SessionContext>,
        hooks: Vec<Arc<dyn QueryHook>>,
        limits: Arc<ServeLimits>,
        monitors: Option<MonitorAccess>,
    ) -> Self {
        let inner = Arc::new(DfSessionService::new_with_hooks(
            Arc::clone(&ctx),
            hooks.clone(),
        ));
        let parser = Arc::new(GuardedParser {
            inner: ExtendedQueryHandler::query_parser(&*inner),
            hooks: Hooks {
                ctx,
                hooks,
                monitors,
            },
            reader: StatementReader::default(),
            limits: Arc::clone(&limits),
        });
        Self {
            inner,
            parser,
            limits,
            read: std::sync::Mutex::new(None),
        }
    }

    /// `text` as read by [`StatementReader`]: the reading `on_query` kept for it, or anew.
    fn read(&self, text: &str) -> PgWireResult<Read> {
        let kept = self.read.lock().ok().and_then(|mut kept| kept.take());
        match kept {
            Some((kept_text, read)) if kept_text == text => read,
            _ => self.parser.reader.read(text, &self.limits),
        }
    }
}

/// What a connection may do with the store's monitors.
pub struct MonitorAccess {
    pub monitors: Arc<Monitors>,
    /// `--allow-monitors`: CREATE, ALTER and DROP too (SHOW is everyone's).
    pub may_change: bool,
    /// A monitor's query is checked as the client's own statements are.
    pub policy: PlanPolicy,
    pub protected: fn(&str) -> bool,
}

/// The hooks of a connection, asked in order for each statement.
struct Hooks {
    ctx: Arc<SessionContext>,
    hooks: Vec<Arc<dyn QueryHook>>,
    monitors: Option<MonitorAccess>,
}

impl Hooks {
    /// The plan of a monitor statement: checked now, carried out when run.
    async fn monitor_plan(&self, statement: MonitorStatement) -> PgWireResult<LogicalPlan> {
        let Some(access) = &self.monitors else {
            return Err(user_error(
                "0A000", // feature_not_supported
                "monitors need a store: evalsql serve --store DIR (or --otlp)".into(),
            ));
        };
        if !access.may_change && statement.changes() {
            return Err(user_error(
                "42501", // insufficient_privilege
                "permission denied: creating, changing or dropping a monitor or an alert needs \
                 a server started with --allow-monitors (a monitor spends the server's judge \
                 key every run)"
                    .into(),
            ));
        }
        let (policy, protected) = (access.policy.clone(), access.protected);
        let check = move |plan: &LogicalPlan| check_plan(plan, &policy, &protected);
        let asker = Asker {
            may_change: access.may_change,
            check: &check,
        };
        let checked = access
            .monitors
            .check(&statement, &self.ctx, &asker)
            .await
            .map_err(|e| user_error("42P17", e.to_string()))?;
        crate::monitor::action::plan(&access.monitors, statement, checked)
            .map_err(|e| PgWireError::ApiError(Box::new(e)))
    }

    /// Each statement answered by the first hook that answers it (the simple protocol).
    async fn simple(
        &self,
        client: &mut dyn HookClient,
        statements: Vec<Statement>,
    ) -> PgWireResult<Vec<Response>> {
        if statements.is_empty() {
            return Ok(vec![Response::EmptyQuery]);
        }
        let mut responses = Vec::with_capacity(statements.len());
        'statement: for statement in statements {
            for hook in &self.hooks {
                if let Some(response) = hook
                    .handle_simple_query(&statement, &self.ctx, client)
                    .await
                {
                    responses.push(response?);
                    continue 'statement;
                }
            }
            return Err(unanswered());
        }
        Ok(responses)
    }

    /// The first statement planned by the first hook that plans it (a Parse message).
    async fn parse(
        &self,
        client: &(dyn ClientInfo + Send + Sync),
        text: &str,
        statements: Vec<Statement>,
    ) -> PgWireResult<Option<StoredPlan>> {
        let Some(statement) = statements.into_iter().next() else {
            return Ok(None);
        };
        for hook in &self.hooks {
            if let Some(plan) = hook
                .handle_extended_parse_query(&statement, &self.ctx, client)
                .await
            {
                return Ok(Some((text.to_string(), Some((statement, plan?)))));
            }
        }
        Err(unanswered())
    }
}

/// The statement runner is the last hook and answers everything: reaching past it is a bug.
fn unanswered() -> PgWireError {
    user_error(
        "XX000",
        "internal error: no part of the server answered the statement".into(),
    )
}

#[async_trait]
impl SimpleQueryHandler for EvalsqlService {
    async fn on_query<C>(
        &self,
        client: &mut C,
        query: pgwire::messages::simplequery::Query,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: std::fmt::Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // Read now, so that the transaction status pgwire reports after the message can
        // depend on the statement (`ROLLBACK TO` in a failed block); run in `do_query`.
        let read = self.parser.reader.read(&query.query, &self.limits);
        if let Ok(read) = &read {
            super::face::hook::before_query(client, read.statements.first());
        }
        if let Ok(mut kept) = self.read.lock() {
            *kept = Some((query.query.clone(), read));
        }
        self._on_query(client, query).await
    }

    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: std::fmt::Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let read = self.read(query)?;
        let running = start(client, query);
        let stop = stop_signal(running.clone(), deadline(client, &self.limits));
        let hooks = &self.parser.hooks;
        if let Some(statement) = read.monitor {
            let format_options = Arc::new(FormatOptions::from_client_metadata(client.metadata()));
            let work = async {
                let plan = hooks.monitor_plan(statement).await?;
                run_plan(plan, &hooks.ctx, format_options).await
            };
            let response = before(stop, running.as_ref(), work).await?;
            let deadline = self::deadline(client, &self.limits);
            return Ok(vec![stoppable(response, running, deadline)]);
        }
        let responses = match before(
            stop,
            running.as_ref(),
            hooks.simple(client, read.statements),
        )
        .await
        {
            // One catalog query (no side effect to repeat), as the crate's parser has it;
            // not after a cancel or a timeout.
            Err(e)
                if !stopped(&e)
                    && let Some(fallback) = read.fallback =>
            {
                let stop = stop_signal(running.clone(), deadline(client, &self.limits));
                before(stop, running.as_ref(), hooks.simple(client, fallback)).await?
            }
            other => other?,
        };
        // The rows are produced as they are sent: from now, under the timeout in force now
        // (a `SET statement_timeout` earlier in the same message counts).
        let deadline = self::deadline(client, &self.limits);
        Ok(responses
            .into_iter()
            .map(|r| stoppable(r, running.clone(), deadline))
            .collect())
    }
}

#[async_trait]
impl ExtendedQueryHandler for EvalsqlService {
    type Statement = StoredPlan;
    type QueryParser = GuardedParser;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        Arc::clone(&self.parser)
    }

    async fn on_execute<C>(
        &self,
        client: &mut C,
        message: pgwire::messages::extendedquery::Execute,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: std::fmt::Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        super::face::hook::before_execute(client, message.name.as_deref());
        self._on_execute(client, message).await
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Self::Statement>,
        max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: std::fmt::Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let running = start(client, &portal.statement.statement.0);
        let deadline = deadline(client, &self.limits);
        let response = before(
            stop_signal(running.clone(), deadline),
            running.as_ref(),
            ExtendedQueryHandler::do_query(&*self.inner, client, portal, max_rows),
        )
        .await?;
        Ok(stoppable(response, running, deadline))
    }
}

/// Whether `error` is a statement being stopped (cancel, timeout, hang-up, terminate).
fn stopped(error: &PgWireError) -> bool {
    matches!(error, PgWireError::UserError(info) if info.code.starts_with("57") || info.code == "08006")
}

/// The Parse message: the text read by [`StatementReader`], its first statement planned by
/// the connection's hooks.
pub struct GuardedParser {
    /// datafusion-postgres's parser, for what it says of a stored plan.
    inner: Arc<Parser>,
    hooks: Hooks,
    reader: StatementReader,
    limits: Arc<ServeLimits>,
}

#[async_trait]
impl QueryParser for GuardedParser {
    type Statement = StoredPlan;

    async fn parse_sql<C>(
        &self,
        client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<Self::Statement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let read = self.reader.read(sql, &self.limits)?;
        if let Some(statement) = read.monitor {
            let plan = self.hooks.monitor_plan(statement).await?;
            // datafusion-postgres stores a syntax tree beside the plan for the hooks it asks
            // at Execute; a query of no table, which none of them answers, stands for it.
            let stand_in = self
                .reader
                .read("SELECT NULL", &self.limits)?
                .statements
                .remove(0);
            return Ok(Some((sql.to_string(), Some((stand_in, plan)))));
        }
        match self.hooks.parse(client, sql, read.statements).await {
            // A catalog query DataFusion cannot plan as written, as the crate's parser has it.
            Err(_) if let Some(fallback) = read.fallback => {
                self.hooks.parse(client, sql, fallback).await
            }
            other => other,
        }
        .map_err(sqlstate::classify)
    }

    fn get_parameter_types(&self, stmt: &Self::Statement) -> PgWireResult<Vec<Type>> {
        let mut types = self.inner.get_parameter_types(stmt)?;
        if let (_, Some((statement, _))) = stmt {
            // Values of these arrive as int4[] would (the same bytes), so only the
            // description changes.
            for position in super::catalog::oid_arrays::oid_array_parameters(statement) {
                if let Some(slot) = types.get_mut(position)
                    && *slot == Type::INT4_ARRAY
                {
                    *slot = Type::OID_ARRAY;
                }
            }
        }
        Ok(types)
    }

    fn get_result_schema(
        &self,
        stmt: &Self::Statement,
        column_format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        self.inner.get_result_schema(stmt, column_format)
    }
}

// ---------------------------------------------------------------------------------------
// The statement runner

/// The last hook: plans every statement no earlier hook answered, checks the plan against
/// the server's policy and runs that same plan.
pub struct StatementRunner {
    pub policy: PlanPolicy,
    pub protected: fn(&str) -> bool,
}

impl StatementRunner {
    /// The statement's plan, if the policy allows it.
    pub async fn plan(
        &self,
        statement: &Statement,
        ctx: &SessionContext,
    ) -> PgWireResult<LogicalPlan> {
        plan_checked(statement, ctx, &self.policy, self.protected).await
    }
}

/// Runs a checked plan and encodes its result as the simple protocol sends it (text).
pub async fn run_plan(
    plan: LogicalPlan,
    ctx: &SessionContext,
    format_options: Arc<FormatOptions>,
) -> PgWireResult<Response> {
    let insert = matches!(
        &plan,
        LogicalPlan::Dml(DmlStatement {
            op: WriteOp::Insert(_),
            ..
        })
    );
    let df = ctx
        .execute_logical_plan(plan)
        .await
        .map_err(|e| PgWireError::ApiError(Box::new(e)))?;
    if insert {
        let batches = df
            .collect()
            .await
            .map_err(|e| PgWireError::ApiError(Box::new(e)))?;
        let rows = batches
            .first()
            .and_then(|b| b.column_by_name("count"))
            .and_then(|c| {
                c.as_any()
                    .downcast_ref::<datafusion::arrow::array::UInt64Array>()
            })
            .map_or(0, |a| a.value(0) as usize);
        return Ok(Response::Execution(
            Tag::new("INSERT").with_oid(0).with_rows(rows),
        ));
    }
    let response: QueryResponse =
        encode_dataframe(df, &Format::UnifiedText, Some(format_options)).await?;
    Ok(Response::Query(response))
}

#[async_trait]
impl QueryHook for StatementRunner {
    async fn handle_simple_query(
        &self,
        statement: &Statement,
        ctx: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        let plan = match self.plan(statement, ctx).await {
            Ok(plan) => plan,
            Err(e) => return Some(Err(e)),
        };
        let format_options = Arc::new(FormatOptions::from_client_metadata(client.metadata()));
        Some(run_plan(plan, ctx, format_options).await)
    }

    async fn handle_extended_parse_query(
        &self,
        statement: &Statement,
        ctx: &SessionContext,
        _client: &(dyn ClientInfo + Send + Sync),
    ) -> Option<PgWireResult<LogicalPlan>> {
        Some(self.plan(statement, ctx).await)
    }

    async fn handle_extended_query(
        &self,
        _statement: &Statement,
        _plan: &LogicalPlan,
        _params: &ParamValues,
        _ctx: &SessionContext,
        _client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        // datafusion-postgres runs the plan this hook checked at Parse, in the portal's
        // result formats.
        None
    }
}
