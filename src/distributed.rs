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
//!
//! A job comes from whoever reaches the scheduler, so it is confined as a client of `evalsql
//! serve` is, by the same flags with the same defaults ([`ClusterFlags`]): the scheduler
//! checks every job's logical plan ([`crate::policy::check_plan`]) and refuses what the flags
//! forbid, with the reason (and refuses jobs submitted as physical plans, [`LogicalJobsOnly`],
//! which would skip that check); the scheduler's file listing and the executors' reads and writes
//! go through stores confined to the data roots; and the executors hold on their own
//! (defense in depth, for a task that reaches them some other way): `generate`, `invoke_app`
//! and client-defined judges fail at run time with the reason unless allowed, the app URLs
//! and allowed models are theirs, whatever the job says.

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
use ballista_scheduler::scheduler_process::{create_scheduler, start_grpc_service};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{MemTable, TableProvider};
use datafusion::common::TableReference;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Result, plan_err};
use datafusion::config::ConfigOptions;
use datafusion::datasource::file_format::FileFormatFactory;
use datafusion::datasource::file_format::json::JsonFormatFactory;
use datafusion::datasource::listing::ListingTable;
use datafusion::datasource::source_as_provider;
use datafusion::execution::TaskContext;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::{Expr, Extension, LogicalPlan, ScalarUDF};
use datafusion::optimizer::AnalyzerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_cli::object_storage::instrumented::InstrumentedObjectStoreRegistry;
use datafusion_proto::logical_plan::LogicalExtensionCodec;
use datafusion_proto::physical_plan::{
    AsExecutionPlan, PhysicalExtensionCodec, PhysicalProtoConverterExtension,
};
use datafusion_proto::protobuf::{LogicalPlanNode, PhysicalPlanNode};

use evalsql_udfs::JudgeOptions;

use crate::guarded_udf::{Refuse, guarded};
use crate::object_stores::{DataRoots, EvalsqlObjectStoreRegistry};
use crate::policy::{ClientAllowances, PlanPolicy, check_plan};
use crate::session::{
    SessionOptions, install, register_functions, rubric_functions, runtime_env, session_config,
};

/// What the jobs of a cluster may do: the flags of `evalsql scheduler` and `evalsql
/// executor`, the same as `evalsql serve`'s, with the same safe defaults. Give every process
/// of a cluster the same ones (the scheduler refuses a job they forbid; each executor refuses
/// it again at run time).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClusterFlags {
    /// A directory or object-store URL (s3://bucket/prefix) jobs may read and write;
    /// repeatable [default: the working directory]
    #[arg(long = "data-root", value_name = "DIR|URL")]
    pub data_root: Vec<String>,
    /// A URL prefix invoke_app may call from the executors (repeatable) [default: none]
    #[arg(long = "app-url", value_name = "URL")]
    pub app_url: Vec<String>,
    /// Let jobs run judge metrics of their own (CREATE FUNCTION ... LANGUAGE judge, rubric
    /// files of the client): each call spends the executors' key on the client's prompt
    #[arg(long)]
    pub allow_create_function: bool,
    /// Let jobs call generate() (each call spends the executors' key on the client's prompt)
    #[arg(long)]
    pub allow_generate: bool,
    /// A model jobs may switch the judge or the target to (repeatable) [default: none, the
    /// executors' own models only]
    #[arg(long = "allowed-model", value_name = "NAME")]
    pub allowed_model: Vec<String>,
}

/// [`ClusterFlags`], resolved: what every session of this process enforces.
#[derive(Debug, Clone)]
pub struct Confinement {
    roots: Arc<DataRoots>,
    /// Writes are allowed (a `COPY` job writes through the executors), only under the roots.
    allow: ClientAllowances,
    app_urls: Vec<String>,
}

impl Confinement {
    pub fn new(flags: &ClusterFlags) -> Result<Self> {
        let roots = if flags.data_root.is_empty() {
            vec![".".to_string()]
        } else {
            flags.data_root.clone()
        };
        Ok(Confinement {
            roots: Arc::new(DataRoots::parse(&roots)?),
            allow: ClientAllowances {
                writes: true,
                create_function: flags.allow_create_function,
                generate: flags.allow_generate,
                models: Arc::new(flags.allowed_model.clone()),
                monitors: false,
            },
            app_urls: flags.app_url.clone(),
        })
    }

    fn policy(&self) -> PlanPolicy {
        self.allow.plan_policy(!self.app_urls.is_empty())
    }

    /// `evalsql.target.allowed_urls` of every session: the operator's `--app-url`s.
    fn allowed_urls(&self) -> String {
        if self.app_urls.is_empty() {
            "none".to_string()
        } else {
            self.app_urls.join(",")
        }
    }

    fn describe(&self) -> String {
        let mut allowed = vec![];
        if self.allow.generate {
            allowed.push("generate()".to_string());
        }
        if self.allow.create_function {
            allowed.push("client-defined judges".to_string());
        }
        if !self.app_urls.is_empty() {
            allowed.push(format!("invoke_app to {}", self.app_urls.join(", ")));
        }
        if !self.allow.models.is_empty() {
            allowed.push(format!("models {}", self.allow.models.join(", ")));
        }
        format!(
            "data roots: {}; jobs may also use: {}",
            self.roots.describe(),
            if allowed.is_empty() {
                "nothing more (see --allow-generate, --allow-create-function, --app-url, \
                 --allowed-model)"
                    .to_string()
            } else {
                allowed.join("; ")
            }
        )
    }
}

/// The configuration the scheduler and the executors start every session from: Ballista's,
/// with the `evalsql` namespace and evalsql's plan codecs.
fn cluster_config(
    confinement: &Confinement,
    physical: &Arc<dyn PhysicalExtensionCodec>,
) -> Result<SessionConfig> {
    // Jobs come from clients: their operator-only settings are refused (see
    // `Restriction::Remote`); the executors use their own environment and flags.
    let mut judge = JudgeOptions::remote();
    judge.set_as_operator("target.allowed_urls", &confinement.allowed_urls())?;
    judge.allow_models(Arc::clone(&confinement.allow.models));
    Ok(SessionConfig::new_with_ballista()
        .with_option_extension(judge)
        .with_ballista_logical_extension_codec(logical_codec())
        .with_ballista_physical_extension_codec(Arc::clone(physical)))
}

/// A config producer for Ballista (which takes no errors: the config was built once at
/// start, so it cannot fail later).
fn config_producer(
    confinement: &Confinement,
    physical: &Arc<dyn PhysicalExtensionCodec>,
) -> Result<Arc<dyn Fn() -> SessionConfig + Send + Sync>> {
    let config = cluster_config(confinement, physical)?;
    Ok(Arc::new(move || {
        // A ledger of its own for each task (clones share it): its budget, and the spend
        // its operators report to the scheduler (`cluster_spend`), are the task's.
        let mut config = config.clone();
        evalsql_udfs::start_query_in(&mut config);
        config
    }))
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

/// The physical codec of the scheduler and executors: client-defined judges decode to
/// functions that refuse to run unless the cluster allows them.
fn cluster_physical_codec(
    confinement: &Confinement,
    rubrics: &[Arc<ScalarUDF>],
) -> Arc<dyn PhysicalExtensionCodec> {
    Arc::new(EvalsqlPhysicalCodec {
        inner: BallistaPhysicalExtensionCodec::default(),
        refuse_client_judges: !confinement.allow.create_function,
        own: rubrics.to_vec(),
    })
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
    /// A cluster without `--allow-create-function`: custom judges in a task refuse to run.
    refuse_client_judges: bool,
    /// The operator's rubric functions (`--rubrics`), which a fused group may hold.
    own: Vec<Arc<ScalarUDF>>,
}

fn encode_udf(node: &ScalarUDF, buf: &mut Vec<u8>) {
    if let Some(bytes) =
        evalsql_udfs::encode_custom(node).or_else(|| evalsql_udfs::encode_fused(node))
    {
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
    match evalsql_udfs::decode_custom(name, buf)?.map_or_else(
        || evalsql_udfs::decode_fused(name, buf),
        |udf| Ok(Some(udf)),
    )? {
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

const CLIENT_JUDGES_REFUSED: &str = "is a client-defined judge metric, and this cluster does \
     not run them (each call spends the executors' key on the client's prompt): its \
     administrator can allow them with --allow-create-function on the scheduler and executors";

impl PhysicalExtensionCodec for EvalsqlPhysicalCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if buf == crate::cluster_spend::TAG
            && let [input] = inputs
        {
            return Ok(Arc::new(crate::cluster_spend::JudgeSpendExec::new(
                Arc::clone(input),
            )));
        }
        self.inner.try_decode(buf, inputs, ctx, proto_converter)
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        if node.is::<crate::cluster_spend::JudgeSpendExec>() {
            buf.extend_from_slice(crate::cluster_spend::TAG);
            return Ok(());
        }
        self.inner.try_encode(node, buf, proto_converter)
    }

    fn try_decode_udf(&self, name: &str, buf: &[u8]) -> Result<Arc<ScalarUDF>> {
        let udf = decode_udf(name, buf)?;
        // A fused group of built-in judges and the operator's rubric metrics is the
        // cluster's own functions.
        if self.refuse_client_judges && evalsql_udfs::fused_is_own(&udf, &self.own) != Some(true) {
            // Everything decoded from a plan's bytes is the client's (the cluster's own
            // functions travel by name).
            let reason = format!("{}() {CLIENT_JUDGES_REFUSED}", udf.name());
            return Ok(refused(&udf, reason));
        }
        Ok(udf)
    }

    fn try_encode_udf(&self, node: &ScalarUDF, buf: &mut Vec<u8>) -> Result<()> {
        encode_udf(node, buf);
        Ok(())
    }
}

/// Object stores on the scheduler and executors: built on first use from the environment
/// (the client's datafusion-cli stores do not travel), and confined to the data roots, as in
/// `evalsql serve`.
fn cluster_runtime(work_dir: Option<&PathBuf>, roots: &Arc<DataRoots>) -> Result<Arc<RuntimeEnv>> {
    let registry = Arc::new(EvalsqlObjectStoreRegistry::confined(
        Arc::new(InstrumentedObjectStoreRegistry::new()),
        Arc::clone(roots),
    ));
    let mut runtime = RuntimeEnvBuilder::new().with_object_store_registry(registry);
    if let Some(dir) = work_dir {
        runtime = runtime.with_temp_file_path(dir);
    }
    runtime.build_arc()
}

/// A session of the cluster: Ballista's optimizer rules plus evalsql's async-aggregate
/// rewrite, and every evalsql function, those the flags forbid replaced by functions that
/// refuse to run. On the scheduler (`check_jobs`), every job's plan is checked against the
/// flags before it is planned.
fn cluster_state(
    config: SessionConfig,
    runtime: Arc<RuntimeEnv>,
    rubrics: &[Arc<ScalarUDF>],
    confinement: &Confinement,
    check_jobs: bool,
) -> Result<SessionState> {
    let mut rules = ballista_core::optimizer::ballista_default_optimizer_rules();
    rules.push(Arc::new(crate::async_aggregates::AsyncAggregateArguments));
    rules.push(Arc::new(crate::fuse::FuseJudgeCalls));
    let mut builder = SessionStateBuilder::new();
    if check_jobs {
        builder = builder.with_analyzer_rules({
            let mut analyzers = datafusion::optimizer::Analyzer::new().rules;
            // First: nothing else looks at a plan the cluster refuses.
            analyzers.insert(
                0,
                Arc::new(ClusterPolicy {
                    policy: confinement.policy(),
                    roots: Arc::clone(&confinement.roots),
                    own: rubrics.to_vec(),
                }),
            );
            analyzers
        });
    }
    let mut state = builder
        .with_default_features()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_optimizer_rules(rules)
        .with_physical_optimizer_rule(Arc::new(crate::async_filter::FilterBeforeJudge))
        .with_query_planner(Arc::new(crate::cluster_spend::CountingPlanner))
        .with_scalar_functions(ballista_scalar_functions())
        .with_aggregate_functions(ballista_aggregate_functions())
        .with_window_functions(ballista_window_functions())
        .build();
    register_functions(&mut state, rubrics)?;
    let mut forbidden = vec![];
    if !confinement.allow.generate {
        forbidden.push((
            "generate",
            "generate() is disabled on this cluster (it spends the executors' key on the \
             client's prompts): its administrator can start the scheduler and executors with \
             --allow-generate",
        ));
    }
    if confinement.app_urls.is_empty() {
        forbidden.push((
            "invoke_app",
            "invoke_app() is disabled on this cluster: its administrator lists the app URLs \
             jobs may call with --app-url on the scheduler and executors",
        ));
    }
    for (name, reason) in forbidden {
        if let Some(udf) = state.scalar_functions().get(name).cloned() {
            datafusion::execution::FunctionRegistry::register_udf(
                &mut state,
                refused(&udf, reason.to_string()),
            )?;
        }
    }
    Ok(state)
}

fn ballista_error(what: &str, e: impl std::fmt::Display) -> DataFusionError {
    DataFusionError::Execution(format!("{what}: {e}"))
}

/// `evalsql scheduler`: a Ballista scheduler with every evalsql function, until interrupted.
pub async fn run_scheduler(
    host: &str,
    port: u16,
    rubric_dirs: Vec<PathBuf>,
    flags: &ClusterFlags,
) -> Result<()> {
    let confinement = Confinement::new(flags)?;
    // Read once; every job's session registers them.
    let rubrics = rubric_functions(&rubric_dirs)?;
    let physical = cluster_physical_codec(&confinement, &rubrics);
    // The live executors, for the judge's share of the limits: the cluster state exists
    // only once the cluster is built from this very configuration.
    let live: Arc<OnceLock<Arc<dyn ClusterState>>> = Arc::new(OnceLock::new());
    let runtime = cluster_runtime(None, &confinement.roots)?;
    let session_builder = {
        let live = Arc::clone(&live);
        let confinement = confinement.clone();
        move |mut config: SessionConfig| {
            if let Some(judge) = config.options_mut().extensions.get_mut::<JudgeOptions>() {
                // A job may not choose where the executors send their keys, which files they
                // write or the limits every job shares, nor a model the operator did not
                // allow.
                if let Some(key) = judge.refused().first() {
                    if crate::policy::MODEL_SETTINGS.contains(&key.as_str()) {
                        let allowed = confinement.allow.models.join(", ");
                        return Err(DataFusionError::Plan(format!(
                            "SET {key}: the model is not among the models jobs of this cluster \
                             may use ({}; its administrator adds one with --allowed-model on \
                             the scheduler and executors)",
                            if allowed.is_empty() {
                                "none: the executors' own models only"
                            } else {
                                &allowed
                            }
                        )));
                    }
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
            cluster_state(config, Arc::clone(&runtime), &rubrics, &confinement, true)
        }
    };
    let config = SchedulerConfig {
        bind_host: host.to_string(),
        bind_port: port,
        external_host: host.to_string(),
        override_config_producer: Some(config_producer(&confinement, &physical)?),
        override_session_builder: Some(Arc::new(session_builder)),
        override_logical_codec: Some(logical_codec()),
        override_physical_codec: Some(Arc::clone(&physical)),
        ..Default::default()
    };
    let cluster = BallistaCluster::new_from_config(&config)
        .await
        .map_err(|e| ballista_error("cannot start the scheduler", e))?;
    let _ = live.set(cluster.cluster_state());
    let address: SocketAddr = format!("{host}:{port}")
        .parse()
        .map_err(|e| ballista_error(&format!("bad address {host}:{port}"), e))?;
    eprintln!(
        "evalsql scheduler: listening on {address}; {}",
        confinement.describe()
    );
    let config = Arc::new(config);
    config
        .validate()
        .map_err(|e| ballista_error("scheduler", e))?;
    let scheduler = create_scheduler::<LogicalPlanNode, LogicalJobsOnly>(cluster, config)
        .await
        .map_err(|e| ballista_error("cannot start the scheduler", e))?;
    start_grpc_service(address, scheduler)
        .await
        .map_err(|e| ballista_error("scheduler", e))
}

/// The scheduler's form of physical plans: Ballista's own, except that a job submitted as a
/// physical plan is refused. The scheduler checks a job on its logical plan (the policy,
/// the data roots) before planning it; a physical plan built by the client would skip that
/// check, and the evalsql client never sends one (it sends SQL or logical plans). The
/// scheduler decodes a physical plan only for such a submission; the stages it sends to
/// executors are encoded as Ballista's.
#[derive(Debug, Clone)]
pub struct LogicalJobsOnly(PhysicalPlanNode);

impl AsExecutionPlan for LogicalJobsOnly {
    fn try_decode(buf: &[u8]) -> Result<Self> {
        PhysicalPlanNode::try_decode(buf).map(LogicalJobsOnly)
    }

    fn try_encode<B: bytes::BufMut>(&self, buf: &mut B) -> Result<()> {
        self.0.try_encode(buf)
    }

    fn try_into_physical_plan(
        &self,
        _ctx: &datafusion::execution::TaskContext,
        _codec: &dyn PhysicalExtensionCodec,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan_err!(
            "this evalsql cluster runs jobs submitted as SQL or as logical plans, which its \
             scheduler checks against the cluster's flags; a job submitted as a physical plan \
             is refused"
        )
    }

    fn try_from_physical_plan(
        plan: Arc<dyn ExecutionPlan>,
        codec: &dyn PhysicalExtensionCodec,
    ) -> Result<Self> {
        PhysicalPlanNode::try_from_physical_plan(plan, codec).map(LogicalJobsOnly)
    }
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
    /// What jobs may do (the same flags as the scheduler's).
    pub flags: ClusterFlags,
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
    let confinement = Confinement::new(&options.flags)?;
    let rubrics = rubric_functions(&options.rubric_dirs)?;
    let physical = cluster_physical_codec(&confinement, &rubrics);
    let runtime = cluster_runtime(Some(&work_dir), &confinement.roots)?;
    let state = cluster_state(
        cluster_config(&confinement, &physical)?,
        Arc::clone(&runtime),
        &rubrics,
        &confinement,
        false,
    )?;
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
        override_config_producer: Some(config_producer(&confinement, &physical)?),
        override_function_registry: Some(Arc::new(BallistaFunctionRegistry::from(&state))),
        override_logical_codec: Some(logical_codec()),
        override_physical_codec: Some(Arc::clone(&physical)),
        override_runtime_producer: Some(Arc::new(move |_: &SessionConfig| {
            Ok(Arc::clone(&runtime))
        })),
        ..Default::default()
    };
    eprintln!(
        "evalsql executor: flight {}:{}, tasks {}:{}, scheduler {}:{}; {}",
        options.host,
        options.port,
        options.host,
        options.grpc_port,
        options.scheduler_host,
        options.scheduler_port,
        confinement.describe()
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
        .with_ballista_physical_extension_codec(physical_codec())
        .with_extension(Arc::new(crate::cluster_spend::SchedulerAddress::of(url)));
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

/// A function the cluster's flags forbid, under its own name and signature: it plans as the
/// original does (so a plan decodes and a refusal is an error of the job, not of the process)
/// and fails when it runs, with the reason.
fn refused(udf: &Arc<ScalarUDF>, reason: String) -> Arc<ScalarUDF> {
    guarded(udf, Arc::new(Refuse(reason)))
}

/// The scheduler's check of every job, before anything is listed or planned: what the
/// cluster's flags forbid ([`check_plan`]), and tables or `COPY` targets outside the data
/// roots (the stores refuse them anyway; this says why, naming the path).
#[derive(Debug)]
struct ClusterPolicy {
    policy: PlanPolicy,
    roots: Arc<DataRoots>,
    /// The operator's rubric functions (`--rubrics`), which a fused group may hold.
    own: Vec<Arc<ScalarUDF>>,
}

impl ClusterPolicy {
    /// A fused group the client planned travels as one function with its members' rubrics:
    /// without `--allow-create-function` each member must be the cluster's own.
    fn check_fused_judges(&self, plan: &LogicalPlan) -> std::result::Result<(), String> {
        if self.policy.create_function {
            return Ok(());
        }
        let mut refusal = None;
        let _ = plan.apply_with_subqueries(|node| {
            node.apply_expressions(|e| {
                e.apply(|sub| {
                    if let Expr::ScalarFunction(call) = sub
                        && evalsql_udfs::fused_is_own(&call.func, &self.own) == Some(false)
                    {
                        refusal = Some(format!("{}() {CLIENT_JUDGES_REFUSED}", call.func.name()));
                        return Ok(TreeNodeRecursion::Stop);
                    }
                    Ok(TreeNodeRecursion::Continue)
                })
            })
        });
        refusal.map_or(Ok(()), Err)
    }

    fn check_locations(&self, plan: &LogicalPlan) -> std::result::Result<(), String> {
        let outside = |location: &str| {
            format!(
                "{location} is outside the data roots of this cluster ({})",
                self.roots.describe()
            )
        };
        let mut refusal = None;
        let _ = plan.apply_with_subqueries(|node| {
            match node {
                LogicalPlan::TableScan(scan) => {
                    if let Ok(provider) = source_as_provider(&scan.source)
                        && let Some(table) = provider.downcast_ref::<ListingTable>()
                    {
                        for path in table.table_paths() {
                            let url = path.get_url();
                            let allowed = match url.to_file_path() {
                                Ok(file) if url.scheme() == "file" => {
                                    self.roots.allows_local_file(&file)
                                }
                                _ => self.roots.allows_location(path.as_str()),
                            };
                            if !allowed {
                                refusal = Some(outside(path.as_str()));
                            }
                        }
                    }
                }
                LogicalPlan::Copy(copy) if !self.roots.allows_location(&copy.output_url) => {
                    refusal = Some(outside(&copy.output_url));
                }
                _ => {}
            }
            Ok(if refusal.is_some() {
                TreeNodeRecursion::Stop
            } else {
                TreeNodeRecursion::Continue
            })
        });
        refusal.map_or(Ok(()), Err)
    }
}

impl AnalyzerRule for ClusterPolicy {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        check_plan(&plan, &self.policy, &crate::serve::protected_setting)
            .and_then(|()| self.check_fused_judges(&plan))
            .and_then(|()| self.check_locations(&plan))
            .map_err(|why| DataFusionError::Plan(format!("this cluster refuses the job: {why}")))?;
        Ok(plan)
    }

    fn name(&self) -> &str {
        "evalsql_cluster_policy"
    }
}
