//! evalsql on Apache DataFusion Ballista: a scheduler and executors that know every evalsql
//! function, and the client session of `evalsql --ballista df://host:port`.
//!
//! Ballista sends functions by name: a function used in a query must be registered on the
//! client (which plans), the scheduler (which decodes, optimises and plans physically, so it
//! also needs the async-aggregate rewrite) and every executor (which decodes its tasks). The
//! stock `ballista-scheduler` / `ballista-executor` binaries have none of them, hence these.
//!
//! Settings travel with each job: the client sends its whole configuration, `evalsql.*`
//! included, and the scheduler passes it on with every task, so both must know the
//! `evalsql` namespace (Ballista drops unknown keys silently). The judge's limits set in the
//! session are cluster-wide: the scheduler adds `evalsql.judge.executors` (and `.target.`),
//! the number of live executors, to each job, and every executor takes its share. The judge
//! cache is the path the session names (`evalsql.judge.cache`, else each executor's
//! `EVALSQL_JUDGE_CACHE` or default), so executors on one machine or a shared filesystem
//! share it, and a rerun pays for nothing wherever its rows land.
//!
//! Custom judge metrics (`CREATE FUNCTION ... LANGUAGE judge`, rubric files) exist only in
//! the processes that loaded them, so [`EvalsqlLogicalCodec`] / [`EvalsqlPhysicalCodec`]
//! carry their rubrics inside the plan, and the scheduler and executors register them when
//! they decode it; in-memory tables the client builds (`judge_cache()`) travel as Arrow IPC.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock, OnceLock};

use ballista::prelude::SessionContextExt;
use ballista_core::extension::{
    SessionConfigExt, ballista_aggregate_functions, ballista_scalar_functions,
    ballista_window_functions,
};
use ballista_core::registry::BallistaFunctionRegistry;
use ballista_core::serde::{BallistaLogicalExtensionCodec, BallistaPhysicalExtensionCodec};
use ballista_executor::executor_process::{ExecutorProcessConfig, start_executor_process};
use ballista_scheduler::cluster::{BallistaCluster, ClusterState};
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::scheduler_process::start_server;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{MemTable, TableProvider};
use datafusion::common::TableReference;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result, plan_err};
use datafusion::config::ConfigOptions;
use datafusion::datasource::file_format::FileFormatFactory;
use datafusion::datasource::file_format::json::JsonFormatFactory;
use datafusion::execution::TaskContext;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::{Extension, LogicalPlan, ScalarUDF};
use datafusion::optimizer::AnalyzerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_cli::object_storage::instrumented::InstrumentedObjectStoreRegistry;
use datafusion_proto::logical_plan::LogicalExtensionCodec;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};

use evalsql_udfs::judge::JudgeOptions;

use crate::object_stores::EvalsqlObjectStoreRegistry;
use crate::session::{
    SessionOptions, install, register_functions, rubric_functions, runtime_env, session_config,
};

/// The configuration the scheduler and the executors start every session from: Ballista's,
/// with the `evalsql` namespace and evalsql's plan codecs.
pub fn cluster_config() -> SessionConfig {
    SessionConfig::new_with_ballista()
        // Jobs come from clients: their operator-only settings are refused (see
        // `Restriction::Remote`); the executors use their own environment and flags.
        .with_option_extension(JudgeOptions::remote())
        .with_ballista_logical_extension_codec(logical_codec())
        .with_ballista_physical_extension_codec(physical_codec())
}

/// evalsql's codecs, built once (the config producer runs for every task).
fn logical_codec() -> Arc<dyn LogicalExtensionCodec> {
    static CODEC: LazyLock<Arc<EvalsqlLogicalCodec>> = LazyLock::new(Arc::default);
    Arc::clone(&*CODEC) as _
}

fn physical_codec() -> Arc<dyn PhysicalExtensionCodec> {
    static CODEC: LazyLock<Arc<EvalsqlPhysicalCodec>> = LazyLock::new(Arc::default);
    Arc::clone(&*CODEC) as _
}

/// Ballista's logical codec, plus custom judge functions with their rubrics.
#[derive(Debug, Default)]
pub struct EvalsqlLogicalCodec {
    inner: BallistaLogicalExtensionCodec,
}

/// Ballista's physical codec, plus custom judge functions with their rubrics.
#[derive(Debug, Default)]
pub struct EvalsqlPhysicalCodec {
    inner: BallistaPhysicalExtensionCodec,
}

fn encode_udf(node: &ScalarUDF, buf: &mut Vec<u8>) {
    if let Some(bytes) = evalsql_udfs::judge::encode_custom(node) {
        buf.extend(bytes);
    }
}

/// The tag of an in-memory table in a plan: Arrow IPC streams, one per partition, each
/// after its length (u64, little-endian).
const MEMTABLE_TAG: &[u8] = b"evalsql.memtable/1\n";

fn encode_batches(table: &MemTable, buf: &mut Vec<u8>) -> Result<()> {
    use datafusion::arrow::ipc::writer::StreamWriter;
    for partition in &table.batches {
        let batches = partition.try_read().map_err(|_| {
            DataFusionError::Execution("an in-memory table is being written to".into())
        })?;
        let mut stream = Vec::new();
        let mut writer = StreamWriter::try_new(&mut stream, &table.schema())?;
        for batch in batches.iter() {
            writer.write(batch)?;
        }
        writer.finish()?;
        drop(writer);
        buf.extend_from_slice(&(stream.len() as u64).to_le_bytes());
        buf.extend_from_slice(&stream);
    }
    Ok(())
}

fn decode_batches(mut data: &[u8]) -> Result<Vec<Vec<RecordBatch>>> {
    use datafusion::arrow::ipc::reader::StreamReader;
    let truncated = || DataFusionError::Internal("a truncated in-memory table in a plan".into());
    let mut partitions = Vec::new();
    while !data.is_empty() {
        let (len, rest) = data.split_at_checked(8).ok_or_else(truncated)?;
        let len = u64::from_le_bytes(len.try_into().expect("8 bytes")) as usize;
        let (stream, rest) = rest.split_at_checked(len).ok_or_else(truncated)?;
        partitions.push(
            StreamReader::try_new(stream, None)?.collect::<std::result::Result<Vec<_>, _>>()?,
        );
        data = rest;
    }
    Ok(partitions)
}

/// Called for functions the decoding process does not know by name.
fn decode_udf(name: &str, buf: &[u8]) -> Result<Arc<ScalarUDF>> {
    match evalsql_udfs::judge::decode_custom(name, buf)? {
        Some(udf) => Ok(udf),
        None => plan_err!(
            "the scalar function {name} is not known to this Ballista process (functions \
             travel by name; start every process with the same evalsql)"
        ),
    }
}

impl LogicalExtensionCodec for EvalsqlLogicalCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[LogicalPlan],
        ctx: &TaskContext,
    ) -> Result<Extension> {
        self.inner.try_decode(buf, inputs, ctx)
    }

    fn try_encode(&self, node: &Extension, buf: &mut Vec<u8>) -> Result<()> {
        self.inner.try_encode(node, buf)
    }

    fn try_decode_table_provider(
        &self,
        buf: &[u8],
        table_ref: &TableReference,
        schema: SchemaRef,
        ctx: &TaskContext,
    ) -> Result<Arc<dyn TableProvider>> {
        match buf.strip_prefix(MEMTABLE_TAG) {
            Some(data) => Ok(Arc::new(MemTable::try_new(schema, decode_batches(data)?)?)),
            None => self
                .inner
                .try_decode_table_provider(buf, table_ref, schema, ctx),
        }
    }

    fn try_encode_table_provider(
        &self,
        table_ref: &TableReference,
        node: Arc<dyn TableProvider>,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        match node.downcast_ref::<MemTable>() {
            // In-memory tables made by the client (`judge_cache()`) go with the plan.
            Some(table) => {
                buf.extend_from_slice(MEMTABLE_TAG);
                encode_batches(table, buf)
            }
            None => self.inner.try_encode_table_provider(table_ref, node, buf),
        }
    }

    fn try_decode_file_format(
        &self,
        buf: &[u8],
        ctx: &TaskContext,
    ) -> Result<Arc<dyn FileFormatFactory>> {
        self.inner.try_decode_file_format(buf, ctx)
    }

    fn try_encode_file_format(
        &self,
        buf: &mut Vec<u8>,
        node: Arc<dyn FileFormatFactory>,
    ) -> Result<()> {
        self.inner.try_encode_file_format(buf, node)
    }

    fn try_decode_udf(&self, name: &str, buf: &[u8]) -> Result<Arc<ScalarUDF>> {
        decode_udf(name, buf)
    }

    fn try_encode_udf(&self, node: &ScalarUDF, buf: &mut Vec<u8>) -> Result<()> {
        encode_udf(node, buf);
        Ok(())
    }
}

impl PhysicalExtensionCodec for EvalsqlPhysicalCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.inner.try_decode(buf, inputs, ctx, proto_converter)
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        self.inner.try_encode(node, buf, proto_converter)
    }

    fn try_decode_udf(&self, name: &str, buf: &[u8]) -> Result<Arc<ScalarUDF>> {
        decode_udf(name, buf)
    }

    fn try_encode_udf(&self, node: &ScalarUDF, buf: &mut Vec<u8>) -> Result<()> {
        encode_udf(node, buf);
        Ok(())
    }
}

/// Object stores on the scheduler and executors: built on first use from the environment
/// (the client's datafusion-cli stores do not travel).
fn cluster_runtime(work_dir: Option<&PathBuf>) -> Result<Arc<RuntimeEnv>> {
    let registry = Arc::new(EvalsqlObjectStoreRegistry::from_env(Arc::new(
        InstrumentedObjectStoreRegistry::new(),
    )));
    let mut runtime = RuntimeEnvBuilder::new().with_object_store_registry(registry);
    if let Some(dir) = work_dir {
        runtime = runtime.with_temp_file_path(dir);
    }
    runtime.build_arc()
}

/// A session of the cluster: Ballista's optimizer rules plus evalsql's async-aggregate
/// rewrite, and every evalsql function.
fn cluster_state(
    config: SessionConfig,
    runtime: Arc<RuntimeEnv>,
    rubrics: &[Arc<ScalarUDF>],
) -> Result<SessionState> {
    let mut rules = ballista_core::optimizer::ballista_default_optimizer_rules();
    rules.push(Arc::new(crate::async_aggregates::AsyncAggregateArguments));
    let mut state = SessionStateBuilder::new()
        .with_default_features()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_optimizer_rules(rules)
        .with_physical_optimizer_rule(Arc::new(crate::async_filter::FilterBeforeJudge))
        .with_scalar_functions(ballista_scalar_functions())
        .with_aggregate_functions(ballista_aggregate_functions())
        .with_window_functions(ballista_window_functions())
        .build();
    register_functions(&mut state, rubrics)?;
    Ok(state)
}

fn ballista_error(what: &str, e: impl std::fmt::Display) -> DataFusionError {
    DataFusionError::Execution(format!("{what}: {e}"))
}

/// `evalsql scheduler`: a Ballista scheduler with every evalsql function, until interrupted.
pub async fn run_scheduler(host: &str, port: u16, rubric_dirs: Vec<PathBuf>) -> Result<()> {
    // The live executors, for the judge's share of the limits: the cluster state exists
    // only once the cluster is built from this very configuration.
    let live: Arc<OnceLock<Arc<dyn ClusterState>>> = Arc::new(OnceLock::new());
    let runtime = cluster_runtime(None)?;
    // Read once; every job's session registers them.
    let rubrics = rubric_functions(&rubric_dirs)?;
    let session_builder = {
        let live = Arc::clone(&live);
        move |mut config: SessionConfig| {
            if let Some(judge) = config.options_mut().extensions.get_mut::<JudgeOptions>() {
                // A job may not choose where the executors send their keys, which files they
                // write or the limits every job shares.
                if let Some(key) = judge.refused().first() {
                    return Err(DataFusionError::Plan(format!(
                        "SET {key} is not allowed in a job for this cluster: the executors' \
                         operator sets it (their environment and flags)"
                    )));
                }
                if let Some(state) = live.get() {
                    let executors = live_executors(state.as_ref()).max(1).to_string();
                    for key in ["judge.executors", "target.executors"] {
                        judge.set_as_operator(key, &executors)?;
                    }
                }
            }
            cluster_state(config, Arc::clone(&runtime), &rubrics)
        }
    };
    let config = SchedulerConfig {
        bind_host: host.to_string(),
        bind_port: port,
        external_host: host.to_string(),
        override_config_producer: Some(Arc::new(cluster_config)),
        override_session_builder: Some(Arc::new(session_builder)),
        override_logical_codec: Some(logical_codec()),
        override_physical_codec: Some(physical_codec()),
        ..Default::default()
    };
    let cluster = BallistaCluster::new_from_config(&config)
        .await
        .map_err(|e| ballista_error("cannot start the scheduler", e))?;
    let _ = live.set(cluster.cluster_state());
    let address: SocketAddr = format!("{host}:{port}")
        .parse()
        .map_err(|e| ballista_error(&format!("bad address {host}:{port}"), e))?;
    eprintln!("evalsql scheduler: listening on {address}");
    start_server(cluster, address, Arc::new(config))
        .await
        .map_err(|e| ballista_error("scheduler", e))
}

/// Executors whose last heartbeat says active.
fn live_executors(state: &dyn ClusterState) -> usize {
    use ballista_core::serde::protobuf::executor_status::Status;
    state
        .executor_heartbeats()
        .values()
        .filter(|h| {
            matches!(
                h.status.as_ref().and_then(|s| s.status.as_ref()),
                Some(Status::Active(_))
            )
        })
        .count()
}

/// What `evalsql executor` was asked for.
#[derive(Debug, Clone)]
pub struct ExecutorOptions {
    pub scheduler_host: String,
    pub scheduler_port: u16,
    pub host: String,
    /// Arrow Flight: shuffle data and results.
    pub port: u16,
    /// Where the scheduler pushes tasks.
    pub grpc_port: u16,
    pub work_dir: Option<PathBuf>,
    pub concurrent_tasks: usize,
    pub rubric_dirs: Vec<PathBuf>,
}

/// `evalsql executor`: a Ballista executor with every evalsql function, until interrupted
/// or stopped by the scheduler.
pub async fn run_executor(options: ExecutorOptions) -> Result<()> {
    // Ballista deletes a temporary work directory at once; keep one per executor.
    let work_dir = match &options.work_dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!(
            "evalsql-executor-{}-{}",
            options.port,
            std::process::id()
        )),
    };
    std::fs::create_dir_all(&work_dir)
        .map_err(|e| ballista_error(&format!("cannot create {}", work_dir.display()), e))?;
    let runtime = cluster_runtime(Some(&work_dir))?;
    let rubrics = rubric_functions(&options.rubric_dirs)?;
    let state = cluster_state(cluster_config(), Arc::clone(&runtime), &rubrics)?;
    let config = ExecutorProcessConfig {
        bind_host: options.host.clone(),
        external_host: Some(options.host.clone()),
        port: options.port,
        grpc_port: options.grpc_port,
        scheduler_host: options.scheduler_host.clone(),
        scheduler_port: options.scheduler_port,
        scheduler_connect_timeout_seconds: 30,
        vcores: options.concurrent_tasks.max(1),
        work_dir: Some(work_dir.display().to_string()),
        override_config_producer: Some(Arc::new(cluster_config)),
        override_function_registry: Some(Arc::new(BallistaFunctionRegistry::from(&state))),
        override_logical_codec: Some(logical_codec()),
        override_physical_codec: Some(physical_codec()),
        override_runtime_producer: Some(Arc::new(move |_: &SessionConfig| {
            Ok(Arc::clone(&runtime))
        })),
        ..Default::default()
    };
    eprintln!(
        "evalsql executor: flight {}:{}, tasks {}:{}, scheduler {}:{}",
        options.host,
        options.port,
        options.host,
        options.grpc_port,
        options.scheduler_host,
        options.scheduler_port
    );
    start_executor_process(Arc::new(config))
        .await
        .map_err(|e| ballista_error("executor", e))
}

/// The client session of `evalsql --ballista URL`: queries are planned here and run on the
/// cluster.
pub async fn remote_context(
    url: &str,
    options: &SessionOptions,
    object_stores: Arc<InstrumentedObjectStoreRegistry>,
) -> Result<SessionContext> {
    let registry = Arc::new(EvalsqlObjectStoreRegistry::new(object_stores));
    let config = session_config(options)?
        .with_ballista_logical_extension_codec(logical_codec())
        .with_ballista_physical_extension_codec(physical_codec());
    let state = SessionStateBuilder::new()
        .with_default_features()
        .with_config(config)
        .with_runtime_env(runtime_env(options, registry)?)
        .build();
    // Ballista replaces the state's function lists; `install` registers ours again.
    let ctx = SessionContext::remote_with_state(url, state).await?;
    let ctx = install(ctx, options).await?;
    {
        let state_ref = ctx.state_ref();
        let mut state = state_ref.write();
        // `.json` as plain newline-delimited JSON: the array-detecting format is evalsql's
        // own, and Ballista serialises only DataFusion's formats.
        state.register_file_format(Arc::new(JsonFormatFactory::new()), true)?;
        state.add_analyzer_rule(Arc::new(RefuseUnion));
        state.register_udtf("read_otlp", Arc::new(NoTracesOnTheCluster));
    }
    Ok(ctx)
}

/// `read_otlp` on Ballista: its files are listed and parsed where the table is planned, and
/// a Ballista plan cannot carry that table, so the client says what to do instead.
#[derive(Debug)]
struct NoTracesOnTheCluster;

impl datafusion::catalog::TableFunctionImpl for NoTracesOnTheCluster {
    fn call_with_args(
        &self,
        _args: datafusion::catalog::TableFunctionArgs,
    ) -> Result<Arc<dyn TableProvider>> {
        plan_err!(
            "read_otlp() does not run on a Ballista cluster yet; convert the traces once \
             (evalsql -c \"COPY (SELECT * FROM read_otlp('...')) TO 'spans.parquet' STORED AS \
             PARQUET\") and query the Parquet files on the cluster"
        )
    }
}

/// Refuses `UNION` on Ballista. Ballista 55.0.0 runs every branch of a union stage in each
/// of its tasks when a branch collapses to one partition (an ungrouped aggregate, a
/// `LIMIT`, ...): the rows come back several times, or the job hangs
/// (apache/datafusion-ballista#2184, fixed after 55.0.0). A wrong answer must never pass
/// silently, and telling the safe unions from the rest depends on physical planning the
/// client does not see, so every `UNION` is refused with the reason.
#[derive(Debug)]
struct RefuseUnion;

impl AnalyzerRule for RefuseUnion {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        let mut union = false;
        plan.apply_with_subqueries(|node| {
            union |= matches!(node, LogicalPlan::Union(_));
            Ok(if union {
                TreeNodeRecursion::Stop
            } else {
                TreeNodeRecursion::Continue
            })
        })?;
        if union {
            return Err(DataFusionError::NotImplemented(
                "UNION cannot run on Ballista 55 yet: it repeats or drops the rows of branches \
                 that collapse to one partition (apache/datafusion-ballista#2184); run this \
                 query without --ballista"
                    .into(),
            ));
        }
        Ok(plan)
    }

    fn name(&self) -> &str {
        "evalsql_refuse_union_on_ballista"
    }
}
