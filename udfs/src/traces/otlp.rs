//! `read_otlp('path-or-URL')`: OpenTelemetry traces as a table, one row per span.
//!
//! Input is OTLP/JSON as the OpenTelemetry Collector's file exporter writes it: one
//! `ExportTraceServiceRequest` per line (`resourceSpans` → `scopeSpans` → `spans`), ids as
//! hex, 64-bit integers as decimal strings or numbers, enums as integers (their protobuf
//! names are read too). A directory or prefix reads every file under it (a glob such as
//! `traces/*.jsonl` narrows that), local or in object storage, one partition per file.
//!
//! Besides the span's own fields, the GenAI semantic-convention attributes become columns
//! (`gen_ai.operation.name` → `operation_name`, ...); spans instrumented with OpenInference's
//! names (Arize Phoenix) fill the same columns from `openinference.span.kind`, `llm.*`,
//! `tool.*`, `input.value` and `output.value` ([`Conventions`]).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine;
use datafusion::arrow::array::{
    ArrayRef, Float64Builder, Int64Builder, RecordBatch, StringBuilder,
    TimestampNanosecondBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::streaming::StreamingTable;
use datafusion::catalog::{Session, TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::{DataFusionError, Result, ScalarValue, plan_err};
use datafusion::datasource::TableType;
use datafusion::datasource::listing::ListingTableUrl;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use futures::{StreamExt, TryStreamExt};
use serde::Deserialize;
use serde_json::{Map, Value};

const NAME: &str = "read_otlp";

/// The table's columns.
pub fn otlp_schema() -> SchemaRef {
    let text = |n: &str, nullable: bool| Field::new(n, DataType::Utf8, nullable);
    let ts = |n: &str| {
        Field::new(
            n,
            DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
            true,
        )
    };
    Arc::new(Schema::new(vec![
        text("trace_id", false),
        text("span_id", false),
        text("parent_span_id", true),
        text("name", false),
        text("kind", false),
        ts("start_time"),
        ts("end_time"),
        Field::new("duration_ms", DataType::Float64, true),
        text("status_code", false),
        text("status_message", true),
        text("service_name", true),
        text("attributes", false),
        text("operation_name", true),
        text("model", true),
        text("agent_name", true),
        text("conversation_id", true),
        text("tool_name", true),
        text("tool_call_id", true),
        text("tool_arguments", true),
        text("tool_result", true),
        Field::new("input_tokens", DataType::Int64, true),
        Field::new("output_tokens", DataType::Int64, true),
        text("file", false),
    ]))
}

// ---- OTLP/JSON, as serde reads it -----------------------------------------------------

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExportRequest {
    #[serde(default)]
    resource_spans: Vec<ResourceSpans>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResourceSpans {
    #[serde(default)]
    resource: Option<Resource>,
    #[serde(default)]
    scope_spans: Vec<ScopeSpans>,
}

#[derive(Deserialize)]
struct Resource {
    #[serde(default)]
    attributes: Vec<KeyValue>,
}

#[derive(Deserialize)]
struct ScopeSpans {
    #[serde(default)]
    spans: Vec<Span>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Span {
    #[serde(default)]
    trace_id: String,
    #[serde(default)]
    span_id: String,
    #[serde(default)]
    parent_span_id: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    kind: Option<Enum>,
    #[serde(default)]
    start_time_unix_nano: Option<Int64>,
    #[serde(default)]
    end_time_unix_nano: Option<Int64>,
    #[serde(default)]
    attributes: Vec<KeyValue>,
    #[serde(default)]
    status: Option<Status>,
}

#[derive(Deserialize)]
struct Status {
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    code: Option<Enum>,
}

#[derive(Deserialize)]
struct KeyValue {
    key: String,
    #[serde(default)]
    value: Option<AnyValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AnyValue {
    string_value: Option<String>,
    bool_value: Option<bool>,
    int_value: Option<Int64>,
    double_value: Option<Double>,
    array_value: Option<ArrayValue>,
    kvlist_value: Option<KvList>,
    bytes_value: Option<String>,
}

#[derive(Deserialize)]
struct ArrayValue {
    #[serde(default)]
    values: Vec<AnyValue>,
}

#[derive(Deserialize)]
struct KvList {
    #[serde(default)]
    values: Vec<KeyValue>,
}

/// A 64-bit integer: OTLP/JSON writes them as decimal strings, some writers as numbers.
#[derive(Deserialize)]
#[serde(untagged)]
enum Int64 {
    Number(i64),
    Unsigned(u64),
    Text(String),
}

impl Int64 {
    fn get(&self) -> std::result::Result<i64, String> {
        match self {
            Int64::Number(n) => Ok(*n),
            Int64::Unsigned(n) => i64::try_from(*n).map_err(|_| format!("{n} is out of range")),
            Int64::Text(t) => t
                .parse::<i64>()
                .or_else(|_| t.parse::<u64>().map(|u| u as i64))
                .map_err(|_| format!("{t:?} is not an integer")),
        }
    }
}

/// A double: a number, or the strings "NaN", "Infinity", "-Infinity".
#[derive(Deserialize)]
#[serde(untagged)]
enum Double {
    Number(f64),
    Text(String),
}

/// An enum: an integer (the OTLP/JSON form), or the protobuf value name.
#[derive(Deserialize)]
#[serde(untagged)]
enum Enum {
    Number(i64),
    Name(String),
}

fn span_kind(kind: Option<&Enum>) -> std::result::Result<&'static str, String> {
    const KINDS: [&str; 6] = [
        "UNSPECIFIED",
        "INTERNAL",
        "SERVER",
        "CLIENT",
        "PRODUCER",
        "CONSUMER",
    ];
    match kind {
        None => Ok(KINDS[0]),
        Some(Enum::Number(n)) => usize::try_from(*n)
            .ok()
            .and_then(|i| KINDS.get(i).copied())
            .ok_or_else(|| format!("span kind {n} is not 0 to 5")),
        Some(Enum::Name(s)) => KINDS
            .iter()
            .find(|k| s.strip_prefix("SPAN_KIND_") == Some(**k))
            .copied()
            .ok_or_else(|| format!("span kind {s:?} is unknown")),
    }
}

fn status_code(code: Option<&Enum>) -> std::result::Result<&'static str, String> {
    const CODES: [&str; 3] = ["UNSET", "OK", "ERROR"];
    match code {
        None => Ok(CODES[0]),
        Some(Enum::Number(n)) => usize::try_from(*n)
            .ok()
            .and_then(|i| CODES.get(i).copied())
            .ok_or_else(|| format!("status code {n} is not 0 to 2")),
        Some(Enum::Name(s)) => CODES
            .iter()
            .find(|c| s.strip_prefix("STATUS_CODE_") == Some(**c))
            .copied()
            .ok_or_else(|| format!("status code {s:?} is unknown")),
    }
}

/// An attribute value as plain JSON: strings, numbers, booleans, arrays and objects as
/// themselves, bytes as their base64 text.
fn any_value_json(v: &AnyValue) -> std::result::Result<Value, String> {
    if let Some(s) = &v.string_value {
        return Ok(Value::String(s.clone()));
    }
    if let Some(b) = v.bool_value {
        return Ok(Value::Bool(b));
    }
    if let Some(i) = &v.int_value {
        return Ok(Value::from(i.get()?));
    }
    if let Some(d) = &v.double_value {
        return Ok(match d {
            Double::Number(f) => serde_json::Number::from_f64(*f)
                .map(Value::Number)
                .unwrap_or(Value::Null),
            // JSON has no NaN or infinity: keep OTLP/JSON's spelling.
            Double::Text(t) => Value::String(t.clone()),
        });
    }
    if let Some(a) = &v.array_value {
        return a.values.iter().map(any_value_json).collect::<std::result::Result<_, _>>().map(Value::Array);
    }
    if let Some(kv) = &v.kvlist_value {
        return attributes_json(&kv.values).map(Value::Object);
    }
    if let Some(b) = &v.bytes_value {
        return Ok(Value::String(b.clone()));
    }
    Ok(Value::Null)
}

fn attributes_json(kvs: &[KeyValue]) -> std::result::Result<Map<String, Value>, String> {
    let mut out = Map::new();
    for kv in kvs {
        let v = match &kv.value {
            Some(v) => any_value_json(v).map_err(|e| format!("attribute {}: {e}", kv.key))?,
            None => Value::Null,
        };
        out.insert(kv.key.clone(), v);
    }
    Ok(out)
}

/// A trace or span id as lowercase hex: OTLP/JSON's hex, or the base64 protobuf's own JSON
/// mapping writes (some SDK exporters do), converted.
fn hex_id(id: &str, bytes: usize, what: &str) -> std::result::Result<String, String> {
    if id.len() == bytes * 2 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(id.to_ascii_lowercase());
    }
    match base64::engine::general_purpose::STANDARD.decode(id) {
        Ok(raw) if raw.len() == bytes => Ok(raw.iter().map(|b| format!("{b:02x}")).collect()),
        _ => Err(format!(
            "{what} {id:?} is not {bytes} bytes of hex (or base64)"
        )),
    }
}

// ---- Conventions --------------------------------------------------------------------------

/// Which attribute fills which column: the GenAI semantic conventions first, then
/// OpenInference's names.
struct Conventions;

impl Conventions {
    fn text(attrs: &Map<String, Value>, keys: &[&str]) -> Option<String> {
        keys.iter().find_map(|k| match attrs.get(*k)? {
            Value::String(s) => Some(s.clone()),
            Value::Null => None,
            other => Some(other.to_string()),
        })
    }

    fn int(attrs: &Map<String, Value>, keys: &[&str]) -> Option<i64> {
        keys.iter().find_map(|k| match attrs.get(*k)? {
            Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        })
    }

    /// OpenInference's span kind, upper case (`TOOL`, `LLM`, `AGENT`, ...).
    fn openinference_kind(attrs: &Map<String, Value>) -> Option<String> {
        Self::text(attrs, &["openinference.span.kind"]).map(|k| k.to_ascii_uppercase())
    }

    fn operation_name(attrs: &Map<String, Value>) -> Option<String> {
        Self::text(attrs, &["gen_ai.operation.name"]).or_else(|| {
            Self::openinference_kind(attrs).map(|k| match k.as_str() {
                "LLM" => "chat".to_string(),
                "TOOL" => "execute_tool".to_string(),
                "AGENT" => "invoke_agent".to_string(),
                "EMBEDDING" => "embeddings".to_string(),
                other => other.to_ascii_lowercase(),
            })
        })
    }

    /// An OpenInference TOOL span's `input.value` / `output.value` are the call's arguments
    /// and result (`tool.parameters` is the tool's parameter schema, not the values).
    fn tool_io(attrs: &Map<String, Value>, key: &str) -> Option<String> {
        (Self::openinference_kind(attrs).as_deref() == Some("TOOL"))
            .then(|| Self::text(attrs, &[key]))
            .flatten()
    }
}

// ---- Building batches ---------------------------------------------------------------------

struct Builders {
    text: Vec<StringBuilder>,
    start: TimestampNanosecondBuilder,
    end: TimestampNanosecondBuilder,
    duration: Float64Builder,
    input_tokens: Int64Builder,
    output_tokens: Int64Builder,
    rows: usize,
}

/// The text columns, in schema order after `kind`'s neighbours (see [`Builders::finish`]).
const TEXT_COLUMNS: usize = 18;

impl Builders {
    fn new() -> Self {
        Builders {
            text: (0..TEXT_COLUMNS).map(|_| StringBuilder::new()).collect(),
            start: TimestampNanosecondBuilder::new().with_timezone("UTC"),
            end: TimestampNanosecondBuilder::new().with_timezone("UTC"),
            duration: Float64Builder::new(),
            input_tokens: Int64Builder::new(),
            output_tokens: Int64Builder::new(),
            rows: 0,
        }
    }

    fn push(
        &mut self,
        span: &Span,
        service: Option<&str>,
        file: &str,
    ) -> std::result::Result<(), String> {
        let attrs = attributes_json(&span.attributes)?;
        let trace_id = hex_id(&span.trace_id, 16, "traceId")?;
        let span_id = hex_id(&span.span_id, 8, "spanId")?;
        let parent = match span.parent_span_id.as_deref() {
            None | Some("") => None,
            Some(p) => Some(hex_id(p, 8, "parentSpanId")?),
        };
        let start = span.start_time_unix_nano.as_ref().map(Int64::get).transpose()?;
        let end = span.end_time_unix_nano.as_ref().map(Int64::get).transpose()?;
        let status = span.status.as_ref();
        let c = Conventions::text;
        let texts: [Option<String>; TEXT_COLUMNS] = [
            Some(trace_id),
            Some(span_id),
            parent,
            Some(span.name.clone()),
            Some(span_kind(span.kind.as_ref())?.to_string()),
            Some(status_code(status.and_then(|s| s.code.as_ref()))?.to_string()),
            status.and_then(|s| s.message.clone()).filter(|m| !m.is_empty()),
            service.map(str::to_string),
            Some(Value::Object(attrs.clone()).to_string()),
            Conventions::operation_name(&attrs),
            c(&attrs, &["gen_ai.request.model", "llm.model_name"]),
            c(&attrs, &["gen_ai.agent.name", "agent.name"]),
            c(&attrs, &["gen_ai.conversation.id", "session.id"]),
            c(&attrs, &["gen_ai.tool.name", "tool.name"]),
            c(&attrs, &["gen_ai.tool.call.id", "tool.id"]),
            c(&attrs, &["gen_ai.tool.call.arguments"])
                .or_else(|| Conventions::tool_io(&attrs, "input.value")),
            c(&attrs, &["gen_ai.tool.call.result"])
                .or_else(|| Conventions::tool_io(&attrs, "output.value")),
            Some(file.to_string()),
        ];
        for (b, v) in self.text.iter_mut().zip(texts) {
            b.append_option(v);
        }
        self.start.append_option(start);
        self.end.append_option(end);
        self.duration.append_option(match (start, end) {
            (Some(s), Some(e)) => Some((e - s) as f64 / 1e6),
            _ => None,
        });
        self.input_tokens.append_option(Conventions::int(
            &attrs,
            &["gen_ai.usage.input_tokens", "llm.token_count.prompt"],
        ));
        self.output_tokens.append_option(Conventions::int(
            &attrs,
            &["gen_ai.usage.output_tokens", "llm.token_count.completion"],
        ));
        self.rows += 1;
        Ok(())
    }

    fn finish(&mut self, schema: &SchemaRef) -> Result<RecordBatch> {
        let mut t = self.text.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef);
        let mut next = || t.next().expect("every text column");
        let (trace, span, parent, name, kind) = (next(), next(), next(), next(), next());
        let (code, message, service, attributes) = (next(), next(), next(), next());
        let (operation, model, agent, conversation) = (next(), next(), next(), next());
        let (tool, call_id, arguments, result, file) = (next(), next(), next(), next(), next());
        let columns: Vec<ArrayRef> = vec![
            trace,
            span,
            parent,
            name,
            kind,
            Arc::new(self.start.finish()),
            Arc::new(self.end.finish()),
            Arc::new(self.duration.finish()),
            code,
            message,
            service,
            attributes,
            operation,
            model,
            agent,
            conversation,
            tool,
            call_id,
            arguments,
            result,
            Arc::new(self.input_tokens.finish()),
            Arc::new(self.output_tokens.finish()),
            file,
        ];
        self.rows = 0;
        Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
    }
}

/// Every span of one file's text, in batches of at most `batch_size` rows.
pub fn parse_otlp(text: &str, file: &str, batch_size: usize) -> Result<Vec<RecordBatch>> {
    let schema = otlp_schema();
    let mut builders = Builders::new();
    let mut batches = Vec::new();
    let bad = |line: usize, why: String| {
        DataFusionError::Execution(format!("{NAME}: {file} line {line}: {why}"))
    };
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let request: ExportRequest = serde_json::from_str(line)
            .map_err(|e| bad(line_no, format!("not an OTLP/JSON ExportTraceServiceRequest: {e}")))?;
        for rs in &request.resource_spans {
            let service = rs.resource.as_ref().and_then(|r| {
                r.attributes
                    .iter()
                    .find(|kv| kv.key == "service.name")
                    .and_then(|kv| kv.value.as_ref()?.string_value.as_deref())
            });
            for ss in &rs.scope_spans {
                for span in &ss.spans {
                    builders
                        .push(span, service, file)
                        .map_err(|why| bad(line_no, format!("span {:?}: {why}", span.name)))?;
                    if builders.rows >= batch_size {
                        batches.push(builders.finish(&schema)?);
                    }
                }
            }
        }
    }
    if builders.rows > 0 {
        batches.push(builders.finish(&schema)?);
    }
    Ok(batches)
}

// ---- The table function -------------------------------------------------------------------

/// `read_otlp('path-or-URL')`.
#[derive(Debug, Default)]
pub struct ReadOtlpFunc;

/// The location argument of a `read_otlp` call (also for callers that confine it).
pub fn location_argument(exprs: &[Expr]) -> Result<String> {
    match exprs {
        [Expr::Literal(ScalarValue::Utf8(Some(p)), _)]
        | [Expr::Literal(ScalarValue::Utf8View(Some(p)), _)]
        | [Expr::Literal(ScalarValue::LargeUtf8(Some(p)), _)] => Ok(p.clone()),
        other => plan_err!(
            "{NAME}('path-or-URL') takes one string literal: a file, directory, glob or \
             object-store URL of OTLP/JSON traces; got {other:?}"
        ),
    }
}

/// A location as a listing URL: a path (DataFusion reads its glob), or an object-store URL
/// whose glob, if any, is split off here (DataFusion reads globs in paths only).
pub fn parse_location(location: &str) -> Result<ListingTableUrl> {
    let parsed = match location.split_once("://") {
        Some((scheme, rest)) if scheme != "file" && rest.contains(['*', '?', '[']) => {
            let first_glob = rest.find(['*', '?', '[']).expect("contains one");
            let cut = rest[..first_glob].rfind('/').map_or(0, |i| i + 1);
            let base = format!("{scheme}://{}", &rest[..cut]);
            ListingTableUrl::parse(&base).and_then(|u| u.with_glob(&rest[cut..]))
        }
        _ => ListingTableUrl::parse(location),
    };
    parsed.map_err(|e| DataFusionError::Plan(format!("{NAME}({location:?}): {e}")))
}

impl TableFunctionImpl for ReadOtlpFunc {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let location = location_argument(args.exprs())?;
        let url = parse_location(&location)?;
        Ok(Arc::new(OtlpTable { url, location }))
    }
}

/// The spans under one location.
#[derive(Debug)]
pub struct OtlpTable {
    url: ListingTableUrl,
    location: String,
}

impl OtlpTable {
    pub fn url(&self) -> &ListingTableUrl {
        &self.url
    }
}

#[async_trait]
impl TableProvider for OtlpTable {
    fn schema(&self) -> SchemaRef {
        otlp_schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Unsupported; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let location = &self.location;
        let store = state
            .runtime_env()
            .object_store(self.url.object_store())
            .map_err(|e| DataFusionError::Plan(format!("{NAME}({location:?}): {e}")))?;
        let mut files = list_files(&self.url, store.as_ref())
            .await
            .map_err(|e| DataFusionError::Plan(format!("{NAME}({location:?}): {e}")))?;
        if files.is_empty() {
            return plan_err!("{NAME}({location:?}): no file there");
        }
        files.sort_by(|a, b| a.location.cmp(&b.location));
        let schema = otlp_schema();
        let partitions: Vec<Arc<dyn PartitionStream>> = files
            .into_iter()
            .map(|meta| {
                Arc::new(OtlpFile {
                    schema: Arc::clone(&schema),
                    store: Arc::clone(&store),
                    meta,
                    shown: location.clone(),
                }) as Arc<dyn PartitionStream>
            })
            .collect();
        StreamingTable::try_new(schema, partitions)?
            .scan(state, projection, filters, limit)
            .await
    }
}

/// The files at `url`: the object itself, or every object under the prefix, in
/// subdirectories too (a trace archive is often split by day or by host), narrowed by the
/// URL's glob. (DataFusion's listing skips subdirectories by default, as tables want.)
async fn list_files(url: &ListingTableUrl, store: &dyn ObjectStore) -> Result<Vec<ObjectMeta>> {
    let prefix = url.prefix();
    if !url.is_collection() {
        match store.head(prefix).await {
            Ok(meta) => return Ok(vec![meta]),
            Err(datafusion::object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let listed: Vec<ObjectMeta> = store.list(Some(prefix)).try_collect().await?;
    Ok(listed
        .into_iter()
        .filter(|m| url.contains(&m.location, false))
        .collect())
}

/// One file: one partition.
struct OtlpFile {
    schema: SchemaRef,
    store: Arc<dyn ObjectStore>,
    meta: ObjectMeta,
    shown: String,
}

impl fmt::Debug for OtlpFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OtlpFile({})", self.meta.location)
    }
}

impl OtlpFile {
    /// The file's name as users see it: its path within the store, under the URL's scheme.
    fn name(&self) -> String {
        let path = self.meta.location.as_ref();
        match self.shown.split_once("://") {
            Some((scheme, rest)) if scheme != "file" => {
                let bucket = rest.split('/').next().unwrap_or("");
                format!("{scheme}://{bucket}/{path}")
            }
            _ => format!("/{path}"),
        }
    }
}

impl PartitionStream for OtlpFile {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let store = Arc::clone(&self.store);
        let location = self.meta.location.clone();
        let name = self.name();
        let batch_size = ctx.session_config().batch_size();
        let read = async move {
            let bytes = store
                .get(&location)
                .await
                .map_err(|e| DataFusionError::Execution(format!("{NAME}: {name}: {e}")))?
                .bytes()
                .await
                .map_err(|e| DataFusionError::Execution(format!("{NAME}: {name}: {e}")))?;
            let text = std::str::from_utf8(&bytes).map_err(|e| {
                DataFusionError::Execution(format!("{NAME}: {name}: not UTF-8 text: {e}"))
            })?;
            let batches = parse_otlp(text, &name, batch_size)?;
            Ok::<_, DataFusionError>(futures::stream::iter(batches.into_iter().map(Ok)))
        };
        Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            futures::stream::once(read).try_flatten().boxed(),
        ))
    }
}
