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
    ArrayRef, Float64Builder, Int64Builder, RecordBatch, StringBuilder, TimestampNanosecondBuilder,
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
//
// Field names are lowerCamelCase as OTLP/JSON writes them; the snake_case names, which
// protobuf JSON parsers accept too, and the `instrumentationLibrarySpans` of OTLP before
// 0.15 are read as well. Numbers and enums are kept as JSON values and converted with
// errors that name the field ([`int64`], [`span_kind`], [`status_code`]).

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExportRequest {
    #[serde(default, alias = "resource_spans")]
    resource_spans: Vec<ResourceSpans>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResourceSpans {
    #[serde(default)]
    resource: Option<Resource>,
    #[serde(default, alias = "scope_spans")]
    scope_spans: Option<Vec<ScopeSpans>>,
    #[serde(default, alias = "instrumentation_library_spans")]
    instrumentation_library_spans: Option<Vec<ScopeSpans>>,
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
    #[serde(default, alias = "trace_id")]
    trace_id: String,
    #[serde(default, alias = "span_id")]
    span_id: String,
    #[serde(default, alias = "parent_span_id")]
    parent_span_id: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    kind: Option<Value>,
    #[serde(default, alias = "start_time_unix_nano")]
    start_time_unix_nano: Option<Value>,
    #[serde(default, alias = "end_time_unix_nano")]
    end_time_unix_nano: Option<Value>,
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
    code: Option<Value>,
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
    #[serde(alias = "string_value")]
    string_value: Option<String>,
    #[serde(alias = "bool_value")]
    bool_value: Option<bool>,
    #[serde(alias = "int_value")]
    int_value: Option<Value>,
    #[serde(alias = "double_value")]
    double_value: Option<Value>,
    #[serde(alias = "array_value")]
    array_value: Option<ArrayValue>,
    #[serde(alias = "kvlist_value")]
    kvlist_value: Option<KvList>,
    #[serde(alias = "bytes_value")]
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
/// Values beyond the signed 64-bit range are refused (as timestamps they lie past 2262).
fn int64(v: &Value, field: &str) -> std::result::Result<i64, String> {
    let parsed = match v {
        Value::Number(n) => n.as_i64(),
        Value::String(t) => t.trim().parse::<i64>().ok(),
        _ => None,
    };
    parsed.ok_or_else(|| format!("{field} {v} is not a 64-bit integer"))
}

/// An enum: an integer (the OTLP/JSON form), or the protobuf value name.
fn enum_value(
    v: Option<&Value>,
    field: &str,
    prefix: &str,
    names: &[&'static str],
) -> std::result::Result<&'static str, String> {
    match v {
        None | Some(Value::Null) => Ok(names[0]),
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|i| names.get(usize::try_from(i).ok()?).copied())
            .ok_or_else(|| format!("{field} {n} is not 0 to {}", names.len() - 1)),
        Some(Value::String(s)) => names
            .iter()
            .find(|k| s.strip_prefix(prefix) == Some(**k))
            .copied()
            .ok_or_else(|| format!("{field} {s:?} is unknown")),
        Some(other) => Err(format!("{field} {other} is not an enum value")),
    }
}

fn span_kind(kind: Option<&Value>) -> std::result::Result<&'static str, String> {
    const KINDS: [&str; 6] = [
        "UNSPECIFIED",
        "INTERNAL",
        "SERVER",
        "CLIENT",
        "PRODUCER",
        "CONSUMER",
    ];
    enum_value(kind, "kind", "SPAN_KIND_", &KINDS)
}

fn status_code(code: Option<&Value>) -> std::result::Result<&'static str, String> {
    enum_value(
        code,
        "status code",
        "STATUS_CODE_",
        &["UNSET", "OK", "ERROR"],
    )
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
        return Ok(Value::from(int64(i, "intValue")?));
    }
    if let Some(d) = &v.double_value {
        return match d {
            Value::Number(_) => Ok(d.clone()),
            // JSON has no NaN or infinity: keep OTLP/JSON's spelling.
            Value::String(t) if matches!(t.as_str(), "NaN" | "Infinity" | "-Infinity") => {
                Ok(d.clone())
            }
            Value::String(t) => t
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map(Value::Number)
                .ok_or_else(|| format!("doubleValue {t:?} is not a number")),
            other => Err(format!("doubleValue {other} is not a number")),
        };
    }
    if let Some(a) = &v.array_value {
        return a
            .values
            .iter()
            .map(any_value_json)
            .collect::<std::result::Result<_, _>>()
            .map(Value::Array);
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
        let start = span
            .start_time_unix_nano
            .as_ref()
            .map(|v| int64(v, "startTimeUnixNano"))
            .transpose()?;
        let end = span
            .end_time_unix_nano
            .as_ref()
            .map(|v| int64(v, "endTimeUnixNano"))
            .transpose()?;
        let status = span.status.as_ref();
        let c = Conventions::text;
        let texts: [Option<String>; TEXT_COLUMNS] = [
            Some(trace_id),
            Some(span_id),
            parent,
            Some(span.name.clone()),
            Some(span_kind(span.kind.as_ref())?.to_string()),
            Some(status_code(status.and_then(|s| s.code.as_ref()))?.to_string()),
            status
                .and_then(|s| s.message.clone())
                .filter(|m| !m.is_empty()),
            service.map(str::to_string),
            Some(serde_json::to_string(&attrs).expect("a JSON map serialises")),
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
            // i128: the difference of two i64 may not fit one.
            (Some(s), Some(e)) => Some((i128::from(e) - i128::from(s)) as f64 / 1e6),
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
        let mut t = self
            .text
            .iter_mut()
            .map(|b| Arc::new(b.finish()) as ArrayRef);
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

/// The spans of one file, line by line, in batches of at most `batch_size` rows.
pub struct SpanParser {
    schema: SchemaRef,
    builders: Builders,
    file: String,
    batch_size: usize,
    line_no: usize,
}

impl SpanParser {
    pub fn new(file: &str, batch_size: usize) -> Self {
        SpanParser {
            schema: otlp_schema(),
            builders: Builders::new(),
            file: file.to_string(),
            batch_size: batch_size.max(1),
            line_no: 0,
        }
    }

    fn bad(&self, why: String) -> DataFusionError {
        DataFusionError::Execution(format!(
            "{NAME}: {} line {}: {why}",
            self.file, self.line_no
        ))
    }

    /// Reads the next line (without its newline); full batches go to `out`.
    pub fn line(&mut self, line: &[u8], out: &mut Vec<RecordBatch>) -> Result<()> {
        self.line_no += 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        let request: ExportRequest = serde_json::from_slice(line)
            .map_err(|e| self.bad(format!("not an OTLP/JSON ExportTraceServiceRequest: {e}")))?;
        for rs in &request.resource_spans {
            let service = rs.resource.as_ref().and_then(|r| {
                r.attributes
                    .iter()
                    .find(|kv| kv.key == "service.name")
                    .and_then(|kv| kv.value.as_ref()?.string_value.as_deref())
            });
            let scopes = match (&rs.scope_spans, &rs.instrumentation_library_spans) {
                (Some(s), _) | (None, Some(s)) => s,
                (None, None) => {
                    return Err(self.bad("a resourceSpans entry has no scopeSpans".into()));
                }
            };
            for ss in scopes {
                for span in &ss.spans {
                    self.builders
                        .push(span, service, &self.file)
                        .map_err(|why| self.bad(format!("span {:?}: {why}", span.name)))?;
                    if self.builders.rows >= self.batch_size {
                        out.push(self.builders.finish(&self.schema)?);
                    }
                }
            }
        }
        Ok(())
    }

    /// The last, partial batch.
    pub fn finish(&mut self, out: &mut Vec<RecordBatch>) -> Result<()> {
        if self.builders.rows > 0 {
            out.push(self.builders.finish(&self.schema)?);
        }
        Ok(())
    }
}

/// Every span of one file's text, in batches of at most `batch_size` rows.
pub fn parse_otlp(text: &str, file: &str, batch_size: usize) -> Result<Vec<RecordBatch>> {
    let mut parser = SpanParser::new(file, batch_size);
    let mut batches = Vec::new();
    for line in text.lines() {
        parser.line(line.as_bytes(), &mut batches)?;
    }
    parser.finish(&mut batches)?;
    Ok(batches)
}

/// The longest line read: one ExportTraceServiceRequest (the Collector's batches are far
/// smaller); past it the file is refused rather than buffered without end.
const MAX_LINE_BYTES: usize = 256 << 20;

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
        // In an HTTP URL `?` starts the query (a pre-signed URL's signature); HTTP cannot
        // list, so it has no glob either.
        Some((scheme, _))
            if scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https") =>
        {
            ListingTableUrl::parse(location)
        }
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
        Ok(vec![
            TableProviderFilterPushDown::Unsupported;
            filters.len()
        ])
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
        let failed = {
            let name = name.clone();
            move |e: datafusion::object_store::Error| {
                DataFusionError::Execution(format!("{NAME}: {name}: {e}"))
            }
        };
        // The object is read as a stream of chunks, cut into lines and parsed as they come:
        // one batch and one line in memory per file, whatever the file's size.
        let opened = async move {
            let bytes = store.get(&location).await.map_err(&failed)?.into_stream();
            let state = Reading {
                bytes: bytes.map_err(failed).boxed(),
                pending: Vec::new(),
                parser: SpanParser::new(&name, batch_size),
                ready: std::collections::VecDeque::new(),
                ended: false,
            };
            Ok::<_, DataFusionError>(futures::stream::try_unfold(state, Reading::next))
        };
        Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            futures::stream::once(opened).try_flatten().boxed(),
        ))
    }
}

/// One file being read: the chunks still to come, the bytes of an unfinished line, and the
/// batches parsed but not yet returned.
struct Reading {
    bytes: futures::stream::BoxStream<'static, Result<bytes::Bytes>>,
    pending: Vec<u8>,
    parser: SpanParser,
    ready: std::collections::VecDeque<RecordBatch>,
    ended: bool,
}

impl Reading {
    async fn next(mut self) -> Result<Option<(RecordBatch, Reading)>> {
        loop {
            if let Some(batch) = self.ready.pop_front() {
                return Ok(Some((batch, self)));
            }
            if self.ended {
                return Ok(None);
            }
            let mut out = Vec::new();
            match self.bytes.next().await {
                Some(chunk) => {
                    self.pending.extend_from_slice(&chunk?);
                    let mut start = 0;
                    while let Some(end) = self.pending[start..].iter().position(|&b| b == b'\n') {
                        self.parser
                            .line(&self.pending[start..start + end], &mut out)?;
                        start += end + 1;
                    }
                    self.pending.drain(..start);
                    if self.pending.len() > MAX_LINE_BYTES {
                        self.parser.line_no += 1;
                        return Err(self.parser.bad(format!(
                            "the line is longer than {} MiB",
                            MAX_LINE_BYTES >> 20
                        )));
                    }
                }
                None => {
                    let rest = std::mem::take(&mut self.pending);
                    self.parser.line(&rest, &mut out)?;
                    self.parser.finish(&mut out)?;
                    self.ended = true;
                }
            }
            self.ready.extend(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::AsArray;

    fn rows(text: &str) -> Result<usize> {
        Ok(parse_otlp(text, "t.jsonl", 2)?
            .iter()
            .map(RecordBatch::num_rows)
            .sum())
    }

    const SPAN: &str = r#"{"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", "name": "s", "startTimeUnixNano": "1", "endTimeUnixNano": "2000001"}"#;

    #[test]
    fn older_and_snake_case_field_names_are_read() {
        let old = format!(
            r#"{{"resourceSpans": [{{"instrumentationLibrarySpans": [{{"spans": [{SPAN}, {SPAN}, {SPAN}]}}]}}]}}"#
        );
        assert_eq!(rows(&old).unwrap(), 3);
        let snake = r#"{"resource_spans": [{"scope_spans": [{"spans": [{"trace_id": "5b8efff798038103d269b633813fc60c", "span_id": "eee19b7ec3c1b174", "name": "s", "kind": "SPAN_KIND_SERVER", "status": {"code": "STATUS_CODE_ERROR"}}]}]}]}"#;
        let batches = parse_otlp(snake, "t.jsonl", 10).unwrap();
        let b = &batches[0];
        assert_eq!(
            b.column_by_name("kind")
                .unwrap()
                .as_string::<i32>()
                .value(0),
            "SERVER"
        );
        assert_eq!(
            b.column_by_name("status_code")
                .unwrap()
                .as_string::<i32>()
                .value(0),
            "ERROR"
        );
    }

    #[test]
    fn base64_ids_become_hex() {
        let line = r#"{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "W47/95gDgQPSabYzgT/GDA==", "spanId": "7uGbfsPBsXQ=", "name": "s"}]}]}]}"#;
        let b = &parse_otlp(line, "t", 10).unwrap()[0];
        assert_eq!(
            b.column(0).as_string::<i32>().value(0),
            "5b8efff798038103d269b633813fc60c"
        );
        assert_eq!(b.column(1).as_string::<i32>().value(0), "eee19b7ec3c1b174");
    }

    #[test]
    fn bad_values_are_errors_naming_the_field_file_and_line() {
        let cases = [
            (
                r#"{"resourceSpans": [{"resource": {}}]}"#,
                "has no scopeSpans",
            ),
            (
                r#"{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", "startTimeUnixNano": "18446744073709551615"}]}]}]}"#,
                "startTimeUnixNano \"18446744073709551615\" is not a 64-bit integer",
            ),
            (
                r#"{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", "kind": 9}]}]}]}"#,
                "kind 9 is not 0 to 5",
            ),
            (
                r#"{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "xyz", "spanId": "eee19b7ec3c1b174"}]}]}]}"#,
                "traceId \"xyz\" is not 16 bytes",
            ),
        ];
        for (line, want) in cases {
            let text = format!("\n{line}\n");
            let err = rows(&text).unwrap_err().to_string();
            assert!(err.contains("read_otlp: t.jsonl line 2: "), "{err}");
            assert!(err.contains(want), "{err}");
        }
    }

    #[test]
    fn extreme_times_do_not_overflow() {
        let line = r#"{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", "startTimeUnixNano": "-9223372036854775808", "endTimeUnixNano": 9223372036854775807}]}]}]}"#;
        let b = &parse_otlp(line, "t", 10).unwrap()[0];
        let ms = b
            .column_by_name("duration_ms")
            .unwrap()
            .as_primitive::<datafusion::arrow::datatypes::Float64Type>()
            .value(0);
        assert!(ms > 1.8e13, "{ms}");
    }
}
