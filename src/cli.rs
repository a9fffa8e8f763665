//! The `evalsql` command line: a REPL, `-c` statements, `-f` files, and `evalsql functions`.
//!
//! Statement execution, the REPL and the result printers are datafusion-cli's public
//! modules (`exec`, `print_options`, `print_format`); this module only decides what runs
//! and how results are printed.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Parser, Subcommand, ValueEnum};
use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::config::FormatOptions;
use datafusion::error::{DataFusionError, Result};
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::DFParser;
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion_cli::exec;
use datafusion_cli::object_storage::instrumented::InstrumentedObjectStoreRegistry;
use datafusion_cli::print_format::PrintFormat;
use datafusion_cli::print_options::{MaxRows, PrintOptions};

use crate::object_stores::EvalsqlObjectStoreRegistry;
use crate::session::{SessionOptions, new_context};

#[derive(Debug, Parser)]
#[command(
    name = "evalsql",
    version,
    about = "SQL engine for evaluating generative-AI outputs (Apache DataFusion + evaluation metrics)",
    long_about = "Runs SQL over evaluation datasets (Parquet, CSV, JSON lines; local paths or \
                  object-store URLs) with every evaluation metric as a SQL function. Without -c or \
                  -f it opens a REPL. Results go to stdout; diagnostics go to stderr."
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<Command>,

    /// SQL to run, then exit; several statements may be separated by ';' (repeatable)
    #[arg(short = 'c', long = "command", value_name = "SQL")]
    pub commands: Vec<String>,

    /// SQL file(s) to run, then exit (repeatable)
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub files: Vec<PathBuf>,

    /// Output format; default table
    #[arg(long, value_enum)]
    pub format: Option<OutputFormat>,

    /// Print only results: no timing lines (always so with csv/json/ndjson)
    #[arg(short, long)]
    pub quiet: bool,

    /// Rows shown by the table format: a number, or 'inf' [default: 40 in the REPL, inf otherwise]
    #[arg(long, value_parser = parse_maxrows)]
    pub maxrows: Option<MaxRowsArg>,

    /// Rows per batch
    #[arg(short = 'b', long)]
    pub batch_size: Option<usize>,

    /// Partitions per query (default: the number of cores)
    #[arg(long)]
    pub partitions: Option<usize>,

    /// A directory of custom rubric files: each *.md becomes a judge function (repeatable;
    /// also EVALSQL_RUBRIC_DIR)
    #[arg(long = "rubrics", value_name = "DIR", global = true)]
    pub rubrics: Vec<std::path::PathBuf>,

    /// Run the queries on a Ballista cluster: the scheduler's URL, e.g. df://127.0.0.1:50050
    /// (its scheduler and executors are `evalsql scheduler` / `evalsql executor`); with
    /// `serve`, the monitors' queries
    #[arg(long, value_name = "URL", global = true)]
    pub ballista: Option<String>,

    /// Memory limit, e.g. '2g' or '512m'; sorts and aggregations spill beyond it
    #[arg(short = 'm', long, value_parser = crate::sizes::parse_bytes)]
    pub memory_limit: Option<usize>,

    /// The store of received traces (a directory or s3://, gs://, az:// URL): its table is
    /// `spans` [serve's default: evalsql-store]
    #[arg(long, value_name = "DIR|URL", global = true)]
    pub store: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List every evaluation function with its signature and description
    Functions {
        /// Only functions whose name contains this text
        pattern: Option<String>,
        /// Output format; default a readable listing
        #[arg(long, value_enum)]
        format: Option<OutputFormat>,
    },
    /// Run a query and write its result as one self-contained HTML report: aggregates per
    /// metric and group (n, mean, stddev, 95% CI, pass rate), histograms, a per-group
    /// comparison and the sortable instance rows
    Report {
        /// A SQL file; its last statement's result is reported (earlier ones, e.g. SET, run first)
        #[arg(short = 'f', long = "file", conflicts_with_all = ["command", "monitor"])]
        file: Option<PathBuf>,
        /// A monitor of --store: its metrics over time, per group, with alert firings
        #[arg(long, conflicts_with = "command")]
        monitor: Option<String>,
        /// SQL statements; the last one's result is reported
        #[arg(short = 'c', long = "command")]
        command: Option<String>,
        /// Where to write the HTML
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
        /// Grouping columns (repeatable); numeric columns are the metrics
        #[arg(long = "group")]
        group: Vec<String>,
        /// The page title (default: the file name, or "evalsql report")
        #[arg(long)]
        title: Option<String>,
    },
    /// Serve SQL over the PostgreSQL wire protocol (psql, drivers, BI tools). A password is
    /// always required: EVALSQL_PG_USER + EVALSQL_PG_PASSWORD, or --users FILE. Clients
    /// reach only data under the data roots.
    Serve {
        /// Address to listen on
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// Port to listen on (0 picks a free one; the address is printed on stderr)
        #[arg(long, default_value_t = 5432)]
        port: u16,
        /// Users file: one `name:hash` per line, made by `evalsql passwd`
        #[arg(long, value_name = "FILE")]
        users: Option<PathBuf>,
        /// SQL run at start, e.g. CREATE EXTERNAL TABLE for the tables to serve (repeatable)
        #[arg(long, value_name = "FILE")]
        init: Vec<PathBuf>,
        /// A directory or object-store URL (s3://bucket/prefix) clients may read and write;
        /// repeatable [default: the working directory]
        #[arg(long = "data-root", value_name = "DIR|URL")]
        data_root: Vec<String>,
        /// PEM certificate chain: serve TLS (with --tls-key)
        #[arg(long, value_name = "PEM", requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// PEM private key (PKCS#8, PKCS#1 or SEC1)
        #[arg(long, value_name = "PEM", requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// A URL prefix invoke_app may call from the server (repeatable) [default: none]
        #[arg(long = "app-url", value_name = "URL")]
        app_url: Vec<String>,
        /// Let clients write: COPY, CREATE TABLE / VIEW, INSERT, DROP (still confined to the
        /// data roots) [default: read-only]
        #[arg(long)]
        allow_writes: bool,
        /// Let clients define judge metrics with CREATE FUNCTION ... LANGUAGE judge (each call
        /// spends the server's key)
        #[arg(long)]
        allow_create_function: bool,
        /// Let clients call generate() (each call spends the server's key on their prompt)
        #[arg(long)]
        allow_generate: bool,
        /// Let clients create, change and drop monitors and alerts (each run spends the
        /// server's key)
        #[arg(long)]
        allow_monitors: bool,
        /// A URL prefix alert notifications may go to (repeatable) [default: none]
        #[arg(long = "alert-url", value_name = "URL")]
        alert_url: Vec<String>,
        /// How long a monitor's lease lasts: processes sharing a store run each monitor one
        /// at a time, and another takes it this long after its holder stopped answering
        #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
        monitor_lease: f64,
        /// The key alert notifications are signed with (HMAC-SHA256; at least 16 bytes)
        #[arg(long, value_name = "FILE")]
        alert_secret_file: Option<PathBuf>,
        /// A model clients may switch the judge or the target to with SET (repeatable)
        /// [default: none, the server's own models only]
        #[arg(long = "allowed-model", value_name = "NAME")]
        allowed_model: Vec<String>,
        /// Refuse connections without TLS (needs --tls-cert and --tls-key)
        #[arg(long)]
        require_tls: bool,
        #[command(flatten)]
        limits: crate::serve::limits::ServeLimitArgs,
        #[command(flatten)]
        otlp: crate::otlp::OtlpArgs,
    },
    /// Make a bearer token for `evalsql serve --otlp-tokens`: prints the token (for the
    /// exporter's `Authorization: Bearer` header) on stdout and the line that admits it (for
    /// the tokens file) on stderr, or with --tokens appends the line to FILE
    OtlpToken {
        /// A name for whoever gets the token (kept beside its hash)
        name: String,
        /// Append the line to this tokens file instead of printing it
        #[arg(long, value_name = "FILE")]
        tokens: Option<PathBuf>,
    },
    /// Monitors of a store (--store): `replay`
    Monitor {
        #[command(subcommand)]
        action: crate::monitor::replay::MonitorCommand,
    },
    /// A Ballista scheduler with every evalsql function (for `evalsql --ballista`)
    Scheduler {
        /// Address to listen on
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// Port to listen on
        #[arg(long, default_value_t = 50050)]
        port: u16,
        /// What jobs may do (give the executors the same flags)
        #[command(flatten)]
        flags: crate::distributed::ClusterFlags,
    },
    /// A Ballista executor with every evalsql function; registers with the scheduler
    Executor {
        /// The scheduler: host:port
        #[arg(long, default_value = "127.0.0.1:50050")]
        scheduler: String,
        /// Address to listen on (and to advertise)
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// Arrow Flight port (shuffle data and results)
        #[arg(long, default_value_t = 50051)]
        port: u16,
        /// Port the scheduler pushes tasks to
        #[arg(long, default_value_t = 50052)]
        grpc_port: u16,
        /// Directory for shuffle files [default: a new one under the temporary directory]
        #[arg(long, value_name = "DIR")]
        work_dir: Option<PathBuf>,
        /// Tasks run at once [default: the number of cores]
        #[arg(long)]
        concurrent_tasks: Option<usize>,
        /// What jobs may do (give the scheduler the same flags)
        #[command(flatten)]
        flags: crate::distributed::ClusterFlags,
    },
    /// Estimate a job's judge calls before running it: runs the SQL with the judge in dry-run
    /// mode (no request is sent) and prints, per judge metric, rows, distinct calls, calls
    /// already cached, calls to send, and their estimated tokens and dollars
    Estimate {
        /// SQL file(s) of the job (repeatable)
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        files: Vec<PathBuf>,
        /// SQL statements of the job (repeatable)
        #[arg(short = 'c', long = "command", value_name = "SQL")]
        commands: Vec<String>,
        /// Output: a table (default) or one JSON array
        #[arg(long, value_enum, default_value_t = EstimateFormat::Table)]
        format: EstimateFormat,
    },
    /// List the judge batches recorded in the cache (batch mode: SET evalsql.judge.mode =
    /// 'batch'), or cancel one
    Batches {
        #[command(subcommand)]
        action: Option<BatchesAction>,
    },
    /// Make a users-file line for `evalsql serve --users`: reads the password (asked twice on
    /// a terminal, one line from stdin otherwise) and prints `name:hash`, or with --users
    /// adds or replaces the user in FILE
    Passwd {
        /// User name
        name: String,
        /// Update this users file instead of printing
        #[arg(long, value_name = "FILE")]
        users: Option<PathBuf>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Csv,
    Tsv,
    Json,
    Ndjson,
}

impl From<OutputFormat> for PrintFormat {
    fn from(f: OutputFormat) -> Self {
        match f {
            OutputFormat::Table => PrintFormat::Table,
            OutputFormat::Csv => PrintFormat::Csv,
            OutputFormat::Tsv => PrintFormat::Tsv,
            OutputFormat::Json => PrintFormat::Json,
            OutputFormat::Ndjson => PrintFormat::NdJson,
        }
    }
}

/// What `evalsql batches` does besides listing.
#[derive(Debug, Subcommand)]
pub enum BatchesAction {
    /// Cancel a batch at the provider (its finished lines stay usable; a run waiting on it
    /// resubmits the rest)
    Cancel {
        /// The batch id, as listed
        id: String,
    },
}

/// How `evalsql estimate` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EstimateFormat {
    Table,
    Json,
}

/// `MaxRows` lacks `Clone` for clap's value parser, so it is carried as this.
#[derive(Debug, Clone, Copy)]
pub struct MaxRowsArg(Option<usize>);

fn parse_maxrows(s: &str) -> std::result::Result<MaxRowsArg, String> {
    match s.parse::<MaxRows>()? {
        MaxRows::Unlimited => Ok(MaxRowsArg(None)),
        MaxRows::Limited(n) => Ok(MaxRowsArg(Some(n))),
    }
}

/// Runs the command line; the caller turns an error into a message on stderr and exit code 1.
pub async fn run(args: Args) -> Result<()> {
    match &args.command {
        Some(Command::Passwd { name, users }) => crate::serve::passwd(name, users.as_deref()),
        Some(Command::Functions { pattern, format }) => {
            // Custom rubrics are functions too: load them so they are listed.
            let custom = crate::session::rubric_functions(&args.rubrics)?;
            print_functions(pattern.as_deref(), *format, &custom)
        }
        Some(Command::Batches { action }) => batches(action.as_ref()).await,
        Some(Command::Serve { .. }) => serve(&args).await,
        Some(Command::OtlpToken { name, tokens }) => otlp_token(name, tokens.as_deref()),
        Some(Command::Monitor { action }) => {
            let (ctx, _) = context(&args).await?;
            let format = args.format.unwrap_or(OutputFormat::Table).into();
            crate::monitor::replay::command(&ctx, args.store.as_deref(), action, format).await
        }
        Some(Command::Scheduler { host, port, flags }) => {
            crate::distributed::run_scheduler(host, *port, args.rubrics.clone(), flags).await
        }
        Some(Command::Executor { .. }) => executor(&args).await,
        Some(Command::Estimate {
            files,
            commands,
            format,
        }) => {
            if args.ballista.is_some() {
                // The tally is kept where the judge functions run: on the executors.
                return Err(DataFusionError::Plan(
                    "evalsql estimate runs the job in this process; drop --ballista".into(),
                ));
            }
            let (ctx, _) = context(&args).await?;
            estimate(&ctx, files, commands, *format).await
        }
        Some(Command::Report {
            output,
            group,
            title,
            monitor: Some(monitor),
            ..
        }) => {
            let (ctx, _) = context(&args).await?;
            let title = title
                .clone()
                .unwrap_or_else(|| format!("monitor {monitor}"));
            let page = crate::report::monitor::render(&ctx, monitor, group, None, &title).await?;
            std::fs::write(output, page).map_err(|e| {
                DataFusionError::Execution(format!("cannot write {}: {e}", output.display()))
            })
        }
        Some(Command::Report {
            file,
            command,
            output,
            group,
            title,
            monitor: None,
        }) => {
            let (ctx, _) = context(&args).await?;
            write_report(
                &ctx,
                file.as_ref(),
                command.as_deref(),
                output,
                group,
                title.clone(),
            )
            .await
        }
        None => run_sql(&args).await,
    }
}

/// The session options the command line sets.
fn session_options(args: &Args) -> SessionOptions {
    SessionOptions {
        batch_size: args.batch_size,
        memory_limit: args.memory_limit,
        target_partitions: args.partitions,
        rubric_dirs: args.rubrics.clone(),
    }
}

/// The session of a SQL run, an estimate or a report: on this process, or a Ballista
/// cluster's with `--ballista`; and the object stores' registry it reads through.
async fn context(args: &Args) -> Result<(SessionContext, Arc<InstrumentedObjectStoreRegistry>)> {
    let registry = Arc::new(InstrumentedObjectStoreRegistry::new());
    let options = session_options(args);
    let ctx = match &args.ballista {
        Some(url) => {
            crate::distributed::remote_context(url, &options, Arc::clone(&registry)).await?
        }
        None => {
            let ctx = new_context(
                &options,
                Arc::new(EvalsqlObjectStoreRegistry::new(Arc::clone(&registry))),
            )
            .await?;
            if let Some(store) = &args.store {
                crate::otlp::register_spans(&ctx, store, true).await?;
                let base = crate::otlp::store::store_url_of(store)?;
                crate::monitor::Monitors::open(&base, false, Default::default())
                    .await?
                    .install(&ctx)
                    .await?;
            }
            ctx
        }
    };
    Ok((ctx, registry))
}

/// `evalsql serve`.
async fn serve(args: &Args) -> Result<()> {
    let Some(Command::Serve {
        host,
        port,
        users,
        init,
        data_root,
        tls_cert,
        tls_key,
        app_url,
        allow_writes,
        allow_create_function,
        allow_generate,
        allow_monitors,
        alert_url,
        monitor_lease,
        alert_secret_file,
        allowed_model,
        require_tls,
        limits,
        otlp,
    }) = &args.command
    else {
        unreachable!("called for `evalsql serve`")
    };
    let _judge_progress = evalsql_udfs::Reporter::start(!args.quiet);
    crate::serve::serve(crate::serve::ServeOptions {
        host: host.clone(),
        port: *port,
        users: users.clone(),
        init: init.clone(),
        data_roots: data_root.clone(),
        tls_cert: tls_cert.clone(),
        tls_key: tls_key.clone(),
        app_urls: app_url.clone(),
        allow: crate::serve::ClientAllowances {
            writes: *allow_writes,
            create_function: *allow_create_function,
            generate: *allow_generate,
            models: Arc::new(allowed_model.clone()),
            monitors: *allow_monitors,
        },
        require_tls: *require_tls,
        limits: limits.to_limits(),
        session: session_options(args),
        otlp: otlp.to_options(args.store.clone()),
        alerts: crate::monitor::AlertOptions::load(
            alert_url.clone(),
            alert_secret_file.as_deref(),
        )?,
        cluster: match &args.ballista {
            Some(url) => Some(crate::serve::Cluster(
                crate::distributed::remote_context(
                    url,
                    &session_options(args),
                    Arc::new(InstrumentedObjectStoreRegistry::new()),
                )
                .await?,
            )),
            None => None,
        },
        monitor_lease: lease_length(*monitor_lease)?,
    })
    .await
}

/// `--monitor-lease SECONDS`: long enough for the store's round trips, short enough that a
/// stopped holder's monitors do not wait for hours.
fn lease_length(seconds: f64) -> Result<std::time::Duration> {
    if !(1.0..=86_400.0).contains(&seconds) {
        return Err(DataFusionError::Configuration(format!(
            "--monitor-lease {seconds}: give between 1 and 86400 seconds"
        )));
    }
    Ok(std::time::Duration::from_secs_f64(seconds))
}

/// `evalsql otlp-token`.
fn otlp_token(name: &str, file: Option<&std::path::Path>) -> Result<()> {
    let (token, line) = crate::otlp::tokens::new_token(name)?;
    match file {
        Some(path) => {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| DataFusionError::Execution(format!("{}: {e}", path.display())))?;
            writeln!(f, "{line}")
                .map_err(|e| DataFusionError::Execution(format!("{}: {e}", path.display())))?;
            eprintln!("added {name} to {}", path.display());
        }
        None => eprintln!("{line}"),
    }
    println!("{token}");
    Ok(())
}

/// `evalsql executor`.
async fn executor(args: &Args) -> Result<()> {
    let Some(Command::Executor {
        scheduler,
        host,
        port,
        grpc_port,
        work_dir,
        concurrent_tasks,
        flags,
    }) = &args.command
    else {
        unreachable!("called for `evalsql executor`")
    };
    let (scheduler_host, scheduler_port) = scheduler
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h.to_string(), p.parse().ok()?)))
        .ok_or_else(|| {
            DataFusionError::Configuration(format!("--scheduler {scheduler:?}: expected host:port"))
        })?;
    crate::distributed::run_executor(crate::distributed::ExecutorOptions {
        scheduler_host,
        scheduler_port,
        host: host.clone(),
        port: *port,
        grpc_port: *grpc_port,
        work_dir: work_dir.clone(),
        concurrent_tasks: concurrent_tasks
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
        rubric_dirs: args.rubrics.clone(),
        flags: flags.clone(),
    })
    .await
}

/// SQL from `-c`, files, or the interactive prompt.
async fn run_sql(args: &Args) -> Result<()> {
    let (ctx, registry) = context(args).await?;
    let repl = args.commands.is_empty() && args.files.is_empty();
    // Judge progress on stderr (a bar on a terminal for long runs) and a summary line per
    // run of judge calls; dropping it prints what is pending.
    let _judge_progress = evalsql_udfs::Reporter::start(!args.quiet);
    let format = args.format.unwrap_or(OutputFormat::Table);
    let maxrows = match args.maxrows {
        Some(MaxRowsArg(None)) => MaxRows::Unlimited,
        Some(MaxRowsArg(Some(n))) => MaxRows::Limited(n),
        None if repl && format == OutputFormat::Table => MaxRows::Limited(40),
        None => MaxRows::Unlimited,
    };
    let mut print_options = PrintOptions {
        format: format.into(),
        // Row counts and timings are diagnostics: never mixed into machine-readable output,
        // and only shown interactively.
        quiet: args.quiet || !repl || format != OutputFormat::Table,
        maxrows,
        color: false,
        instrumented_registry: registry,
    };

    // With a store, statements about monitors and alerts are the store's.
    let monitors = match &args.store {
        Some(store) => Some(
            crate::monitor::Monitors::open(
                &crate::otlp::store::store_url_of(store)?,
                false,
                Default::default(),
            )
            .await?,
        ),
        None => None,
    };
    let statements = Statements(&ctx);
    if repl {
        if !args.quiet {
            eprintln!(
                "evalsql {} — SQL with evaluation metrics. `\\q` quits; `\\h` helps; `SHOW FUNCTIONS` lists functions.",
                env!("CARGO_PKG_VERSION")
            );
        }
        return crate::repl::run(&ctx, &statements, monitors.as_ref(), &mut print_options)
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)));
    }
    // A file runs as one script so that the first failing statement stops the job with a
    // non-zero exit (datafusion-cli's line reader would report it and carry on).
    let mut scripts = Vec::new();
    for file in &args.files {
        scripts.push(std::fs::read_to_string(file).map_err(|e| {
            DataFusionError::Execution(format!("cannot read {}: {e}", file.display()))
        })?);
    }
    scripts.extend(args.commands.iter().cloned());
    let format = PrintFormat::from(format);
    for script in &scripts {
        crate::monitor::run_script(
            &ctx,
            script,
            monitors.as_ref(),
            |sql| async { exec::exec_from_commands(&statements, vec![sql], &print_options).await },
            |answer| crate::repl::print_answer(&format, answer),
        )
        .await?;
    }
    Ok(())
}

/// datafusion-cli's statement loop on a session where every statement is a new query for
/// the judge's budgets (the one hook datafusion-cli offers between statements is the
/// context it executes plans with).
struct Statements<'a>(&'a SessionContext);

#[async_trait::async_trait]
impl datafusion_cli::cli_context::CliSessionContext for Statements<'_> {
    fn task_ctx(&self) -> Arc<datafusion::execution::TaskContext> {
        self.0.task_ctx()
    }

    fn session_state(&self) -> datafusion::execution::SessionState {
        self.0.state()
    }

    fn register_object_store(
        &self,
        url: &url::Url,
        object_store: Arc<dyn object_store::ObjectStore>,
    ) -> Option<Arc<dyn object_store::ObjectStore + 'static>> {
        self.0.register_object_store(url, object_store)
    }

    fn register_table_options_extension_from_scheme(&self, scheme: &str) {
        datafusion_cli::cli_context::CliSessionContext::register_table_options_extension_from_scheme(
            self.0, scheme,
        )
    }

    async fn execute_logical_plan(
        &self,
        plan: datafusion::logical_expr::LogicalPlan,
    ) -> Result<datafusion::dataframe::DataFrame> {
        evalsql_udfs::start_query(self.0);
        self.0.execute_logical_plan(plan).await
    }
}

/// Runs one statement as its own query and collects its result.
async fn run_statement(
    ctx: &SessionContext,
    statement: datafusion::sql::parser::Statement,
) -> Result<Vec<RecordBatch>> {
    let plan = ctx.state().statement_to_plan(statement).await?;
    evalsql_udfs::start_query(ctx);
    ctx.execute_logical_plan(plan).await?.collect().await
}

/// `evalsql estimate`: the job's statements in a dry run, then the tally per metric.
async fn estimate(
    ctx: &SessionContext,
    files: &[PathBuf],
    commands: &[String],
    format: EstimateFormat,
) -> Result<()> {
    let mut scripts = Vec::new();
    for file in files {
        scripts.push(std::fs::read_to_string(file).map_err(|e| {
            DataFusionError::Execution(format!("cannot read {}: {e}", file.display()))
        })?);
    }
    scripts.extend(commands.iter().cloned());
    if scripts.is_empty() {
        return Err(DataFusionError::Plan(
            "evalsql estimate needs the job: -f FILE or -c SQL".into(),
        ));
    }
    evalsql_udfs::keep_estimates();
    ctx.sql("SET evalsql.judge.dry_run = true").await?;
    for sql in &scripts {
        for statement in DFParser::parse_sql_with_dialect(sql, &GenericDialect {})? {
            // A SET in the job must not switch the dry run off.
            if statement
                .to_string()
                .to_ascii_lowercase()
                .contains("dry_run")
            {
                return Err(DataFusionError::Plan(
                    "evalsql estimate: the job sets evalsql.judge.dry_run; remove it".into(),
                ));
            }
            run_statement(ctx, statement).await?;
        }
    }
    let estimates = evalsql_udfs::take_estimates();
    let mut out = std::io::stdout().lock();
    let written = match format {
        EstimateFormat::Json => {
            let array: Vec<_> = estimates.iter().map(|e| e.to_json()).collect();
            writeln!(out, "{}", serde_json::Value::Array(array))
        }
        EstimateFormat::Table => write!(out, "{}", estimate_table(&estimates)),
    };
    written.map_err(|e| DataFusionError::Execution(format!("cannot write the estimate: {e}")))
}

/// `evalsql batches [cancel ID]`.
async fn batches(action: Option<&BatchesAction>) -> Result<()> {
    if let Some(BatchesAction::Cancel { id }) = action {
        let status = evalsql_udfs::cancel_batch(id).await?;
        println!("{} {}", status.id, status.status);
        return Ok(());
    }
    let mut rows = vec![
        [
            "id", "endpoint", "model", "metric", "status", "lines", "created",
        ]
        .map(str::to_string)
        .to_vec(),
    ];
    for b in evalsql_udfs::recorded_batches().await? {
        rows.push(vec![
            b.id.unwrap_or_else(|| format!("(not made yet; file {})", b.input_file)),
            b.endpoint,
            b.model,
            b.metric,
            b.status,
            b.lines.to_string(),
            b.created_at,
        ]);
    }
    print!("{}", aligned(&rows, 0));
    Ok(())
}

/// Rows as aligned columns: the first `left` columns left-aligned, the rest right-aligned.
fn aligned(rows: &[Vec<String>], left: usize) -> String {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut text = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (cell, w))| {
                if i < left || left == 0 {
                    format!("{cell:<w$}")
                } else {
                    format!("{cell:>w$}")
                }
            })
            .collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    text
}

/// The estimate as an aligned table, with a note on how tokens were counted.
fn estimate_table(estimates: &[evalsql_udfs::Estimate]) -> String {
    let header = [
        "metric",
        "model",
        "rows",
        "skipped",
        "calls",
        "cached",
        "to_send",
        "prompt_tokens",
        "completion_tokens",
        "cost_usd",
        "expected_usd",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for e in estimates {
        rows.push(vec![
            e.metric.clone(),
            e.model.clone(),
            e.rows.to_string(),
            e.skipped.to_string(),
            e.calls.to_string(),
            e.cached.to_string(),
            e.to_send.to_string(),
            e.prompt_tokens.to_string(),
            e.completion_tokens.to_string(),
            e.cost_usd
                .map_or_else(|| "no price".to_string(), |d| format!("{d:.4}")),
            e.expected_cost_usd
                .map_or_else(|| "no price".to_string(), |d| format!("{d:.4}")),
        ]);
    }
    let mut text = aligned(&rows, 2);
    if let Some(total) = estimates.last() {
        text.push_str(&format!(
            "prompt tokens counted with: {}; completion tokens are expected values, at most \
             evalsql.judge.max_completion_tokens per call\n",
            if total.tokenizer.is_empty() {
                "-"
            } else {
                total.tokenizer.as_str()
            }
        ));
    }
    text
}

/// `evalsql report`: runs the statements, renders the last result, writes the file.
async fn write_report(
    ctx: &SessionContext,
    file: Option<&PathBuf>,
    command: Option<&str>,
    output: &PathBuf,
    group: &[String],
    title: Option<String>,
) -> Result<()> {
    let (sql, default_title) = match (file, command) {
        (Some(f), _) => (
            std::fs::read_to_string(f).map_err(|e| {
                DataFusionError::Execution(format!("cannot read {}: {e}", f.display()))
            })?,
            f.file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default(),
        ),
        (None, Some(c)) => (c.to_string(), "evalsql report".to_string()),
        (None, None) => {
            return Err(DataFusionError::Plan(
                "evalsql report needs the query: -f FILE or -c SQL".to_string(),
            ));
        }
    };
    let statements = DFParser::parse_sql_with_dialect(&sql, &GenericDialect {})?;
    if statements.is_empty() {
        return Err(DataFusionError::Plan(
            "evalsql report: no SQL statement".into(),
        ));
    }
    let mut last = Vec::new();
    for statement in statements {
        last = run_statement(ctx, statement).await?;
    }
    let title = title.unwrap_or(default_title);
    let html = crate::report::render_report(&title, &sql, &last, group)?;
    std::fs::write(output, html).map_err(|e| {
        DataFusionError::Execution(format!("cannot write {}: {e}", output.display()))
    })?;
    let rows: usize = last.iter().map(|b| b.num_rows()).sum();
    eprintln!("wrote {} ({rows} rows)", output.display());
    Ok(())
}

fn print_functions(
    pattern: Option<&str>,
    format: Option<OutputFormat>,
    custom: &[Arc<datafusion::logical_expr::ScalarUDF>],
) -> Result<()> {
    let entries: Vec<_> = evalsql_udfs::catalogue_with(custom)
        .into_iter()
        .filter(|e| pattern.is_none_or(|p| e.name.contains(p)))
        .collect();
    let mut out = std::io::stdout().lock();
    let Some(format) = format else {
        // The readable listing: grouped by section, description wrapped.
        let mut section = "";
        for e in &entries {
            if e.section != section {
                section = e.section;
                writeln!(out, "\n{section}")?;
                writeln!(out, "{}", "-".repeat(section.len()))?;
            }
            writeln!(out, "{} -> {}   [{}]", e.syntax, e.returns, e.kind)?;
            for line in wrap(&e.description, 88) {
                writeln!(out, "    {line}")?;
            }
            for (name, what) in &e.arguments {
                writeln!(out, "      {name}: {what}")?;
            }
        }
        if std::io::stdout().is_terminal() {
            writeln!(out)?;
        }
        return Ok(());
    };
    let column = |f: &dyn Fn(&evalsql_udfs::FunctionEntry) -> String| -> ArrayRef {
        Arc::new(StringArray::from(entries.iter().map(f).collect::<Vec<_>>()))
    };
    let schema = Arc::new(Schema::new(
        [
            "name",
            "kind",
            "section",
            "signature",
            "returns",
            "description",
        ]
        .map(|n| Field::new(n, DataType::Utf8, false))
        .to_vec(),
    ));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            column(&|e| e.name.clone()),
            column(&|e| e.kind.to_string()),
            column(&|e| e.section.to_string()),
            column(&|e| e.syntax.clone()),
            column(&|e| e.returns.clone()),
            column(&|e| e.description.clone()),
        ],
    )?;
    PrintFormat::from(format).print_batches(
        &mut out,
        schema,
        &[batch],
        MaxRows::Unlimited,
        true,
        &FormatOptions::default(),
    )
}

fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split_whitespace() {
        let line = lines.last_mut().expect("never empty");
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(word.to_string());
        } else {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
    }
    lines
}
