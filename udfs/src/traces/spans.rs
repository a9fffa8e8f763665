//! Spans as rows: one builder, fed OTLP's protobuf types (`opentelemetry-proto`), for both
//! readers of traces — `read_otlp` (files of OTLP/JSON, converted to these types first) and
//! the OTLP receiver of `evalsql serve`, which keeps everything sent in its `spans` table.
//!
//! Besides the span's own fields, the GenAI semantic-convention attributes become columns
//! (`gen_ai.operation.name` -> `operation_name`, ...); spans instrumented with OpenInference's
//! names (Arize Phoenix) fill the same columns from `openinference.span.kind`, `llm.*`,
//! `tool.*`, `input.value` and `output.value` ([`Conventions`]). The conversation a judge
//! reads becomes `input_messages` / `output_messages` and `input_text` / `output_text`
//! ([`messages`]).

use std::sync::Arc;

use base64::Engine;
use datafusion::arrow::array::{
    Array, ArrayRef, Date32Array, Float64Builder, Int64Array, Int64Builder, RecordBatch,
    StringBuilder, TimestampMicrosecondArray, TimestampNanosecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::common::Result;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::{Map, Value};

// ---- Schemas -------------------------------------------------------------------------------

fn text(name: &str, nullable: bool) -> Field {
    Field::new(name, DataType::Utf8, nullable)
}

fn timestamp(name: &str, unit: TimeUnit) -> Field {
    Field::new(name, DataType::Timestamp(unit, Some("UTC".into())), true)
}

/// The columns every reader of spans gives, in order, with the unit of the two span times.
fn common_fields(unit: TimeUnit) -> Vec<Field> {
    vec![
        text("trace_id", false),
        text("span_id", false),
        text("parent_span_id", true),
        text("name", false),
        text("kind", false),
        timestamp("start_time", unit),
        timestamp("end_time", unit),
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
        text("input_messages", true),
        text("output_messages", true),
        text("input_text", true),
        text("output_text", true),
    ]
}

/// The columns of `read_otlp`.
pub fn otlp_schema() -> SchemaRef {
    Arc::new(Schema::new(common_fields(TimeUnit::Nanosecond)))
}

/// The columns kept beyond `read_otlp`'s by the receiver's store, after them.
fn extra_fields() -> Vec<Field> {
    vec![
        text("trace_state", true),
        text("resource_attributes", false),
        text("scope_name", true),
        text("scope_version", true),
        text("events", false),
        text("links", false),
        Field::new("start_time_unix_nano", DataType::Int64, true),
        Field::new("end_time_unix_nano", DataType::Int64, true),
        timestamp("ingested_at", TimeUnit::Microsecond),
        Field::new("start_date", DataType::Date32, true),
    ]
}

/// The columns of the receiver's Delta table: `read_otlp`'s (times in microseconds, the unit
/// of Delta's timestamps), then [`extra_fields`], the nanoseconds among them.
pub fn store_schema() -> SchemaRef {
    let mut fields = common_fields(TimeUnit::Microsecond);
    fields.extend(extra_fields());
    Arc::new(Schema::new(fields))
}

/// The columns of the `spans` table as queries see it: `read_otlp`'s, nanoseconds and all,
/// then the store's own.
pub fn spans_schema() -> SchemaRef {
    let mut fields = common_fields(TimeUnit::Nanosecond);
    fields.extend(extra_fields());
    Arc::new(Schema::new(fields))
}

// ---- Values --------------------------------------------------------------------------------

/// An attribute value as plain JSON: strings, numbers, booleans, arrays and objects as
/// themselves, bytes as their base64 text; a double JSON cannot hold (NaN, infinities) as
/// OTLP/JSON spells it.
pub fn any_value_json(v: &AnyValue) -> Value {
    match &v.value {
        None => Value::Null,
        Some(any_value::Value::StringValue(s)) => Value::String(s.clone()),
        Some(any_value::Value::BoolValue(b)) => Value::Bool(*b),
        Some(any_value::Value::IntValue(i)) => Value::from(*i),
        Some(any_value::Value::DoubleValue(d)) => match serde_json::Number::from_f64(*d) {
            Some(n) => Value::Number(n),
            None if d.is_nan() => Value::String("NaN".into()),
            None if *d > 0.0 => Value::String("Infinity".into()),
            None => Value::String("-Infinity".into()),
        },
        Some(any_value::Value::ArrayValue(a)) => {
            Value::Array(a.values.iter().map(any_value_json).collect())
        }
        Some(any_value::Value::KvlistValue(kv)) => Value::Object(attributes_json(&kv.values)),
        Some(any_value::Value::BytesValue(b)) => {
            Value::String(base64::engine::general_purpose::STANDARD.encode(b))
        }
        Some(any_value::Value::StringValueStrindex(i)) => Value::from(*i),
    }
}

/// Key-value pairs as a JSON object (a repeated key keeps its last value).
pub fn attributes_json(kvs: &[KeyValue]) -> Map<String, Value> {
    let mut out = Map::new();
    for kv in kvs {
        let v = kv.value.as_ref().map_or(Value::Null, any_value_json);
        out.insert(kv.key.clone(), v);
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// OTLP's span kinds and status codes, by number, as the columns show them.
pub(crate) const KINDS: [&str; 6] = [
    "UNSPECIFIED",
    "INTERNAL",
    "SERVER",
    "CLIENT",
    "PRODUCER",
    "CONSUMER",
];
pub(crate) const STATUS_CODES: [&str; 3] = ["UNSET", "OK", "ERROR"];

// ---- Conventions ---------------------------------------------------------------------------

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

// ---- Messages ------------------------------------------------------------------------------

/// A span's conversation in one shape, whichever convention recorded it: a JSON array of
/// `{"role": ..., "content": "<the text>"}`, with the message's other parts (tool calls,
/// images, ...) kept under `"parts"` where it had any.
#[derive(Debug, Default, PartialEq)]
pub struct Messages {
    pub input: Option<Vec<Value>>,
    pub output: Option<Vec<Value>>,
}

/// A JSON value that may be JSON text (semantic-convention SDKs record structured values as
/// JSON strings, since OTLP attributes of arrays of maps are newer than they are).
fn structured(v: &Value) -> Value {
    match v {
        Value::String(s) if s.trim_start().starts_with(['[', '{']) => {
            serde_json::from_str(s).unwrap_or_else(|_| v.clone())
        }
        other => other.clone(),
    }
}

fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn message(role: &str, content: String, parts: Option<Vec<Value>>) -> Value {
    let mut m = Map::new();
    m.insert("role".into(), Value::String(role.to_string()));
    m.insert("content".into(), Value::String(content));
    if let Some(parts) = parts.filter(|p| !p.is_empty()) {
        m.insert("parts".into(), Value::Array(parts));
    }
    Value::Object(m)
}

/// One message of `gen_ai.input.messages` / `gen_ai.output.messages` (`{"role", "parts":
/// [{"type": "text", "content"}, ...]}`), or of the older shapes that put the text under
/// `content` (a string, or a list of `{"type": "text", "text"}` parts as OpenAI sends).
fn semconv_message(v: &Value, default_role: &str) -> Option<Value> {
    let obj = match v {
        Value::Object(o) => o,
        Value::String(s) => return Some(message(default_role, s.clone(), None)),
        _ => return None,
    };
    let role = obj
        .get("role")
        .and_then(Value::as_str)
        .unwrap_or(default_role);
    let mut texts = Vec::new();
    let mut others = Vec::new();
    let parts = obj.get("parts").or(match obj.get("content") {
        Some(c @ Value::Array(_)) => Some(c),
        _ => None,
    });
    match parts {
        Some(Value::Array(parts)) => {
            for p in parts {
                let kind = p.get("type").and_then(Value::as_str).unwrap_or("text");
                let body = p.get("content").or_else(|| p.get("text"));
                match (kind, body) {
                    ("text", Some(t)) => texts.push(as_text(t)),
                    _ => others.push(p.clone()),
                }
            }
        }
        _ => {
            if let Some(c) = obj.get("content") {
                texts.push(as_text(c));
            }
            if let Some(calls) = obj.get("tool_calls") {
                others.push(calls.clone());
            }
        }
    }
    Some(message(role, texts.join("\n"), Some(others)))
}

/// A JSON string that must be a string when present (null, or any other type, fails).
#[derive(Default)]
struct Text<'a>(Option<std::borrow::Cow<'a, str>>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for Text<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visitor<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> std::result::Result<Self::Value, E> {
                Ok(Text(Some(std::borrow::Cow::Borrowed(v))))
            }
            fn visit_str<E>(self, v: &str) -> std::result::Result<Self::Value, E> {
                Ok(Text(Some(std::borrow::Cow::Owned(v.to_string()))))
            }
        }
        d.deserialize_str(Visitor(std::marker::PhantomData))
    }
}

/// Whether a field is there at all (with any value, null included).
#[derive(Default)]
struct Present(bool);

impl<'de> serde::Deserialize<'de> for Present {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(d).map(|_| Present(true))
    }
}

/// The common case of `gen_ai.*.messages`, read without building a JSON tree (a tree costs
/// an allocation per key and value, and was a tenth of the receiver's time): an array of
/// messages whose parts are all text. `None` wherever anything else is there (a part of
/// another type, tool calls, a null where a string goes, a repeated key); the general
/// reading then decides, so both always give the same messages.
fn plain_messages(s: &str, default_role: &str) -> Option<Vec<Value>> {
    #[derive(serde::Deserialize)]
    struct Part<'a> {
        #[serde(default, borrow, rename = "type")]
        kind: Text<'a>,
        #[serde(default, borrow)]
        content: Text<'a>,
        #[serde(default, borrow)]
        text: Text<'a>,
    }
    #[derive(serde::Deserialize)]
    struct Plain<'a> {
        #[serde(default, borrow)]
        role: Text<'a>,
        #[serde(default, borrow)]
        parts: Option<Vec<Part<'a>>>,
        #[serde(default, borrow)]
        content: Text<'a>,
        #[serde(default)]
        tool_calls: Present,
    }
    if !s.trim_start().starts_with('[') {
        return None;
    }
    let plain: Vec<Plain> = serde_json::from_str(s).ok()?;
    plain
        .into_iter()
        .map(|m| {
            let role = m.role.0.as_deref().unwrap_or(default_role);
            let mut texts = Vec::new();
            match m.parts {
                Some(parts) => {
                    for p in parts {
                        if p.kind.0.as_deref().is_some_and(|k| k != "text") {
                            return None;
                        }
                        texts.push(p.content.0.or(p.text.0)?);
                    }
                }
                None => {
                    if m.tool_calls.0 {
                        return None;
                    }
                    texts.extend(m.content.0);
                }
            }
            Some(message(role, texts.join("\n"), None))
        })
        .collect()
}

fn semconv_messages(v: &Value, default_role: &str) -> Option<Vec<Value>> {
    if let Value::String(s) = v
        && let Some(plain) = plain_messages(s, default_role)
    {
        return Some(plain);
    }
    general_messages(v, default_role)
}

fn general_messages(v: &Value, default_role: &str) -> Option<Vec<Value>> {
    match structured(v) {
        Value::Array(items) => Some(
            items
                .iter()
                .filter_map(|m| semconv_message(m, default_role))
                .collect(),
        ),
        one @ (Value::Object(_) | Value::String(_)) => {
            semconv_message(&one, default_role).map(|m| vec![m])
        }
        _ => None,
    }
}

/// Messages flattened into attributes by index, as OpenInference (`llm.input_messages.0.
/// message.role`) and OpenLLMetry (`gen_ai.prompt.0.role`) write them.
fn indexed_messages(
    attrs: &Map<String, Value>,
    prefix: &str,
    role_key: &str,
    content_key: &str,
    part_prefix: Option<&str>,
) -> Option<Vec<Value>> {
    let mut by_index: std::collections::BTreeMap<u64, (Option<String>, Vec<(u64, String)>)> =
        Default::default();
    for (k, v) in attrs {
        let Some(rest) = k.strip_prefix(prefix) else {
            continue;
        };
        let Some((index, field)) = rest.split_once('.') else {
            continue;
        };
        let Ok(index) = index.parse::<u64>() else {
            continue;
        };
        let entry = by_index.entry(index).or_default();
        if field == role_key {
            entry.0 = Some(as_text(v));
        } else if field == content_key {
            entry.1.push((0, as_text(v)));
        } else if let Some(parts) = part_prefix.and_then(|p| field.strip_prefix(p)) {
            // `contents.<j>.message_content.text`
            if let Some((j, "message_content.text")) = parts.split_once('.')
                && let Ok(j) = j.parse::<u64>()
            {
                entry.1.push((j + 1, as_text(v)));
            }
        }
    }
    if by_index.is_empty() {
        return None;
    }
    Some(
        by_index
            .into_values()
            .map(|(role, mut texts)| {
                texts.sort_by_key(|(j, _)| *j);
                let text: Vec<String> = texts.into_iter().map(|(_, t)| t).collect();
                message(role.as_deref().unwrap_or("user"), text.join("\n"), None)
            })
            .collect(),
    )
}

/// The older semantic conventions: one span event per message (`gen_ai.user.message`, ...,
/// `gen_ai.choice`), or `gen_ai.content.prompt` / `gen_ai.content.completion` events with the
/// whole prompt or completion in one attribute.
fn event_messages(events: &[(String, Map<String, Value>)]) -> Messages {
    let mut input: Vec<Value> = Vec::new();
    let mut output: Vec<Value> = Vec::new();
    for (name, attrs) in events {
        let role = match name.as_str() {
            "gen_ai.system.message" => Some("system"),
            "gen_ai.user.message" => Some("user"),
            "gen_ai.assistant.message" => Some("assistant"),
            "gen_ai.tool.message" => Some("tool"),
            _ => None,
        };
        if let Some(role) = role {
            let role = attrs.get("role").and_then(Value::as_str).unwrap_or(role);
            let content = attrs.get("content").map(structured).unwrap_or(Value::Null);
            let mut m = Map::new();
            m.insert("role".into(), Value::String(role.into()));
            m.insert("content".into(), content);
            input.extend(semconv_message(&Value::Object(m), role));
        } else if name == "gen_ai.choice" {
            match attrs.get("message").map(structured) {
                Some(m @ Value::Object(_)) => output.extend(semconv_message(&m, "assistant")),
                _ => {
                    if let Some(c) = attrs.get("content") {
                        output.push(message("assistant", as_text(&structured(c)), None));
                    }
                }
            }
        } else if name == "gen_ai.content.prompt" {
            if let Some(p) = attrs.get("gen_ai.prompt") {
                input.extend(semconv_messages(p, "user").unwrap_or_default());
            }
        } else if name == "gen_ai.content.completion"
            && let Some(c) = attrs.get("gen_ai.completion")
        {
            output.extend(semconv_messages(c, "assistant").unwrap_or_default());
        }
    }
    Messages {
        input: (!input.is_empty()).then_some(input),
        output: (!output.is_empty()).then_some(output),
    }
}

/// The conversation of a span: the current GenAI attributes, then the older events, then
/// OpenInference's and OpenLLMetry's indexed attributes.
pub fn messages(attrs: &Map<String, Value>, events: &[(String, Map<String, Value>)]) -> Messages {
    let from_events = event_messages(events);
    let input = attrs
        .get("gen_ai.input.messages")
        .and_then(|v| semconv_messages(v, "user"))
        .or(from_events.input)
        .or_else(|| {
            indexed_messages(
                attrs,
                "llm.input_messages.",
                "message.role",
                "message.content",
                Some("message.contents."),
            )
        })
        .or_else(|| indexed_messages(attrs, "gen_ai.prompt.", "role", "content", None));
    let output = attrs
        .get("gen_ai.output.messages")
        .and_then(|v| semconv_messages(v, "assistant"))
        .or(from_events.output)
        .or_else(|| {
            indexed_messages(
                attrs,
                "llm.output_messages.",
                "message.role",
                "message.content",
                Some("message.contents."),
            )
        })
        .or_else(|| indexed_messages(attrs, "gen_ai.completion.", "role", "content", None));
    Messages { input, output }
}

fn content_of(m: &Value) -> Option<String> {
    m.get("content").and_then(Value::as_str).map(str::to_string)
}

impl Messages {
    /// The question: the last user message's text.
    pub fn input_text(&self) -> Option<String> {
        self.input.as_ref()?.iter().rev().find_map(|m| {
            (m.get("role").and_then(Value::as_str) == Some("user"))
                .then(|| content_of(m))
                .flatten()
        })
    }

    /// The answer: the text of the first output message (the first choice).
    pub fn output_text(&self) -> Option<String> {
        self.output.as_ref()?.iter().find_map(content_of)
    }
}

// ---- Building batches ----------------------------------------------------------------------

/// The text columns, in the order of [`SpanRows::texts`].
const TEXTS: usize = 28;
/// Of which `read_otlp` has the first ones.
const READ_TEXTS: usize = 22;

/// What a span was refused for, in words a sender can act on.
pub type Refusal = String;

/// One text value of a row: made for it, borrowed from the span, or JSON written straight
/// into the column (a long value is not made twice).
enum Cell<'a> {
    Text(Option<String>),
    Str(Option<&'a str>),
    Json(Option<&'a dyn WriteJson>),
}

/// A value serde serialises, written as the next value of a text column through `buffer`
/// (kept from row to row, so no value allocates its own text).
trait WriteJson {
    fn write_json(&self, buffer: &mut Vec<u8>, column: &mut StringBuilder);
}

impl<T: serde::Serialize> WriteJson for T {
    fn write_json(&self, buffer: &mut Vec<u8>, column: &mut StringBuilder) {
        buffer.clear();
        serde_json::to_writer(&mut *buffer, self).expect("JSON values serialise");
        // serde_json writes UTF-8; checked rather than assumed.
        match std::str::from_utf8(buffer) {
            Ok(text) => column.append_value(text),
            Err(_) => column.append_null(),
        }
    }
}

/// Rows of spans under construction.
pub struct SpanRows {
    text: Vec<StringBuilder>,
    start: Int64Builder,
    end: Int64Builder,
    duration: Float64Builder,
    input_tokens: Int64Builder,
    output_tokens: Int64Builder,
    /// Whether the store's own columns are built too.
    store: bool,
    rows: usize,
    /// The last resource seen, its `service.name` and its attributes as JSON: a request's
    /// spans share a few resources, so each is made text once.
    last_resource: Option<(Option<Resource>, Option<String>, String)>,
    /// Where JSON values are written before they join their column.
    json: Vec<u8>,
}

impl SpanRows {
    /// Rows with `read_otlp`'s columns.
    pub fn for_read_otlp() -> Self {
        Self::new(false)
    }

    /// Rows with the store's columns.
    pub fn for_store() -> Self {
        Self::new(true)
    }

    fn new(store: bool) -> Self {
        let texts = if store { TEXTS } else { READ_TEXTS };
        SpanRows {
            text: (0..texts).map(|_| StringBuilder::new()).collect(),
            start: Int64Builder::new(),
            end: Int64Builder::new(),
            duration: Float64Builder::new(),
            input_tokens: Int64Builder::new(),
            output_tokens: Int64Builder::new(),
            store,
            rows: 0,
            last_resource: None,
            json: Vec::new(),
        }
    }

    /// A resource's `service.name` and attributes as JSON text.
    fn resource(&mut self, resource: Option<&Resource>) -> (Option<String>, String) {
        if let Some((r, service, json)) = &self.last_resource
            && r.as_ref() == resource
        {
            return (service.clone(), json.clone());
        }
        let attrs = resource
            .map(|r| attributes_json(&r.attributes))
            .unwrap_or_default();
        let service = match attrs.get("service.name") {
            Some(Value::String(s)) => Some(s.clone()),
            _ => None,
        };
        let json = serde_json::to_string(&attrs).expect("a JSON map serialises");
        self.last_resource = Some((resource.cloned(), service.clone(), json.clone()));
        (service, json)
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Adds one span, or says why it cannot be a row (nothing is added then). Times are
    /// read as signed nanoseconds: `read_otlp`'s JSON allows times before 1970, which its
    /// conversion carries in the unsigned field's bits; the receiver refuses what lies past
    /// the signed range before calling this.
    pub fn push(
        &mut self,
        resource: Option<&Resource>,
        scope: Option<&InstrumentationScope>,
        span: &Span,
        file: &str,
    ) -> std::result::Result<(), Refusal> {
        if span.trace_id.len() != 16 {
            return Err(format!("traceId is {} bytes, not 16", span.trace_id.len()));
        }
        if span.span_id.len() != 8 {
            return Err(format!("spanId is {} bytes, not 8", span.span_id.len()));
        }
        if !(span.parent_span_id.is_empty() || span.parent_span_id.len() == 8) {
            return Err(format!(
                "parentSpanId is {} bytes, not 8",
                span.parent_span_id.len()
            ));
        }
        let kind = usize::try_from(span.kind)
            .ok()
            .and_then(|k| KINDS.get(k))
            .ok_or_else(|| format!("kind {} is not 0 to 5", span.kind))?;
        let status = span.status.as_ref();
        let code = status.map_or(0, |s| s.code);
        let code = usize::try_from(code)
            .ok()
            .and_then(|c| STATUS_CODES.get(c))
            .ok_or_else(|| format!("status code {code} is not 0 to 2"))?;
        let attrs = attributes_json(&span.attributes);
        let events: Vec<(String, Map<String, Value>)> = span
            .events
            .iter()
            .map(|e| (e.name.clone(), attributes_json(&e.attributes)))
            .collect();
        let (service, resource_json) = self.resource(resource);
        let start = (span.start_time_unix_nano != 0).then_some(span.start_time_unix_nano as i64);
        let end = (span.end_time_unix_nano != 0).then_some(span.end_time_unix_nano as i64);
        let conversation = messages(&attrs, &events);
        let c = Conventions::text;
        fn messages_json(m: &Option<Vec<Value>>) -> Cell<'_> {
            Cell::Json(m.as_ref().map(|m| m as &dyn WriteJson))
        }
        let mut cells: Vec<Cell> = vec![
            Cell::Text(Some(hex(&span.trace_id))),
            Cell::Text(Some(hex(&span.span_id))),
            Cell::Text((!span.parent_span_id.is_empty()).then(|| hex(&span.parent_span_id))),
            Cell::Str(Some(&span.name)),
            Cell::Str(Some(*kind)),
            Cell::Str(Some(*code)),
            Cell::Str(status.map(|s| s.message.as_str()).filter(|m| !m.is_empty())),
            Cell::Text(service),
            Cell::Json(Some(&attrs)),
            Cell::Text(Conventions::operation_name(&attrs)),
            Cell::Text(c(&attrs, &["gen_ai.request.model", "llm.model_name"])),
            Cell::Text(c(&attrs, &["gen_ai.agent.name", "agent.name"])),
            Cell::Text(c(&attrs, &["gen_ai.conversation.id", "session.id"])),
            Cell::Text(c(&attrs, &["gen_ai.tool.name", "tool.name"])),
            Cell::Text(c(&attrs, &["gen_ai.tool.call.id", "tool.id"])),
            Cell::Text(
                c(&attrs, &["gen_ai.tool.call.arguments"])
                    .or_else(|| Conventions::tool_io(&attrs, "input.value")),
            ),
            Cell::Text(
                c(&attrs, &["gen_ai.tool.call.result"])
                    .or_else(|| Conventions::tool_io(&attrs, "output.value")),
            ),
            Cell::Str(Some(file)),
            messages_json(&conversation.input),
            messages_json(&conversation.output),
            Cell::Text(
                conversation
                    .input_text()
                    .or_else(|| c(&attrs, &["input.value"])),
            ),
            Cell::Text(
                conversation
                    .output_text()
                    .or_else(|| c(&attrs, &["output.value"])),
            ),
        ];
        let (events_json, links_json): (Vec<Value>, Vec<Value>) = if self.store {
            (
                span.events
                    .iter()
                    .zip(events)
                    .map(|(e, (name, attributes))| {
                        serde_json::json!({
                            "time_unix_nano": e.time_unix_nano.to_string(),
                            "name": name,
                            "attributes": attributes,
                        })
                    })
                    .collect(),
                span.links
                    .iter()
                    .map(|l| {
                        serde_json::json!({
                            "trace_id": hex(&l.trace_id),
                            "span_id": hex(&l.span_id),
                            "trace_state": l.trace_state,
                            "attributes": attributes_json(&l.attributes),
                        })
                    })
                    .collect(),
            )
        } else {
            Default::default()
        };
        if self.store {
            cells.extend([
                Cell::Str(Some(span.trace_state.as_str()).filter(|t| !t.is_empty())),
                Cell::Str(Some(resource_json.as_str())),
                Cell::Str(scope.map(|s| s.name.as_str()).filter(|n| !n.is_empty())),
                Cell::Str(scope.map(|s| s.version.as_str()).filter(|v| !v.is_empty())),
                Cell::Json(Some(&events_json)),
                Cell::Json(Some(&links_json)),
            ]);
        }
        for (b, cell) in self.text.iter_mut().zip(cells) {
            match cell {
                Cell::Text(v) => b.append_option(v),
                Cell::Str(v) => b.append_option(v),
                Cell::Json(Some(v)) => v.write_json(&mut self.json, b),
                Cell::Json(None) => b.append_null(),
            }
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

    /// The columns both schemas share, with the two times in `unit`; the texts past them
    /// and the raw nanoseconds are returned as well.
    fn finish_common(
        &mut self,
        unit: TimeUnit,
    ) -> (Vec<ArrayRef>, Vec<ArrayRef>, Int64Array, Int64Array) {
        let mut t = self
            .text
            .iter_mut()
            .map(|b| Arc::new(b.finish()) as ArrayRef);
        let mut next = || t.next().expect("every text column");
        let (trace, span, parent, name, kind) = (next(), next(), next(), next(), next());
        let (code, message, service, attributes) = (next(), next(), next(), next());
        let (operation, model, agent, conversation) = (next(), next(), next(), next());
        let (tool, call_id, arguments, result, file) = (next(), next(), next(), next(), next());
        let (input_messages, output_messages, input_text, output_text) =
            (next(), next(), next(), next());
        let rest: Vec<ArrayRef> = t.collect();
        let start = self.start.finish();
        let end = self.end.finish();
        let time = |ns: &Int64Array| -> ArrayRef {
            match unit {
                TimeUnit::Microsecond => Arc::new(
                    TimestampMicrosecondArray::from_unary(ns, |v| v.div_euclid(1000))
                        .with_timezone("UTC"),
                ),
                _ => Arc::new(
                    TimestampNanosecondArray::new(ns.values().clone(), ns.nulls().cloned())
                        .with_timezone("UTC"),
                ),
            }
        };
        let columns: Vec<ArrayRef> = vec![
            trace,
            span,
            parent,
            name,
            kind,
            time(&start),
            time(&end),
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
            input_messages,
            output_messages,
            input_text,
            output_text,
        ];
        self.rows = 0;
        (columns, rest, start, end)
    }

    /// The rows so far as a batch of `read_otlp`'s schema; the builder starts over.
    pub fn finish_read_otlp(&mut self, schema: &SchemaRef) -> Result<RecordBatch> {
        let (columns, _, _, _) = self.finish_common(TimeUnit::Nanosecond);
        Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
    }

    /// The rows so far as a batch of the store's schema, received at `ingested_at`
    /// (microseconds since 1970); the builder starts over.
    pub fn finish_store(&mut self, schema: &SchemaRef, ingested_at: i64) -> Result<RecordBatch> {
        let (mut columns, rest, start, end) = self.finish_common(TimeUnit::Microsecond);
        let rows = start.len();
        const NANOS_PER_DAY: i64 = 86_400_000_000_000;
        let date = Date32Array::from_unary(&start, |ns| ns.div_euclid(NANOS_PER_DAY) as i32);
        columns.extend(rest);
        columns.push(Arc::new(start));
        columns.push(Arc::new(end));
        columns.push(Arc::new(
            TimestampMicrosecondArray::from(vec![ingested_at; rows]).with_timezone("UTC"),
        ));
        columns.push(Arc::new(date));
        Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn every_convention_gives_the_same_messages() {
        let want_in = json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"}]);
        let want_out = json!([{"role": "assistant", "content": "Paris."}]);
        // The current attributes, as JSON text.
        let current = obj(json!({
            "gen_ai.input.messages": json!([
                {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
                {"role": "user", "parts": [{"type": "text", "content": "Capital of France?"}]}
            ]).to_string(),
            "gen_ai.output.messages": json!([
                {"role": "assistant", "parts": [{"type": "text", "content": "Paris."}], "finish_reason": "stop"}
            ]).to_string(),
        }));
        // The older events.
        let events = vec![
            (
                "gen_ai.system.message".to_string(),
                obj(json!({"content": "Be brief."})),
            ),
            (
                "gen_ai.user.message".to_string(),
                obj(json!({"content": "Capital of France?"})),
            ),
            (
                "gen_ai.choice".to_string(),
                obj(
                    json!({"index": 0, "finish_reason": "stop", "message": "{\"role\": \"assistant\", \"content\": \"Paris.\"}"}),
                ),
            ),
        ];
        // OpenInference.
        let openinference = obj(json!({
            "llm.input_messages.0.message.role": "system",
            "llm.input_messages.0.message.content": "Be brief.",
            "llm.input_messages.1.message.role": "user",
            "llm.input_messages.1.message.contents.0.message_content.type": "text",
            "llm.input_messages.1.message.contents.0.message_content.text": "Capital of France?",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "Paris.",
        }));
        // OpenLLMetry.
        let openllmetry = obj(json!({
            "gen_ai.prompt.0.role": "system", "gen_ai.prompt.0.content": "Be brief.",
            "gen_ai.prompt.1.role": "user", "gen_ai.prompt.1.content": "Capital of France?",
            "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.content": "Paris.",
        }));
        for (attrs, events) in [
            (current, vec![]),
            (Map::new(), events),
            (openinference, vec![]),
            (openllmetry, vec![]),
        ] {
            let m = messages(&attrs, &events);
            assert_eq!(Value::Array(m.input.clone().unwrap()), want_in, "{attrs:?}");
            assert_eq!(
                Value::Array(m.output.clone().unwrap()),
                want_out,
                "{attrs:?}"
            );
            assert_eq!(m.input_text().as_deref(), Some("Capital of France?"));
            assert_eq!(m.output_text().as_deref(), Some("Paris."));
        }
    }

    #[test]
    fn the_plain_reading_agrees_with_the_general_one() {
        let plain = [
            r#"[{"role":"user","parts":[{"type":"text","content":"a \"quoted\" line\nand more"}]}]"#,
            r#"[{"role":"system","content":"be brief"},{"parts":[{"text":"hi"},{"type":"text","content":"there"}],"finish_reason":"stop"}]"#,
            r#" [{"role":"user"}]"#,
            r#"[{"role":"user","parts":null,"content":"x"}]"#,
            "[]",
        ];
        for s in plain {
            let v = Value::String(s.to_string());
            let fast = plain_messages(s, "user").unwrap_or_else(|| panic!("plain: {s}"));
            assert_eq!(Some(fast), general_messages(&v, "user"), "{s}");
        }
        // Shapes the plain reading leaves to the general one.
        let general = [
            r#"[{"role":"user","parts":[{"type":"image","url":"u"}]}]"#,
            r#"[{"role":"assistant","tool_calls":[{"id":"1"}]}]"#,
            r#"[{"role":"assistant","tool_calls":null,"content":"x"}]"#,
            r#"[{"role":null,"content":"x"}]"#,
            r#"[{"role":"user","parts":[{"type":"text","content":null,"text":"x"}]}]"#,
            r#"[{"role":"user","parts":[{"type":"text","content":3}]}]"#,
            r#"[{"role":"user","role":"system","content":"x"}]"#,
            r#"[{"role":"user","content":[{"type":"text","text":"x"}]}]"#,
            r#"["just text"]"#,
            r#"{"role":"user","content":"one"}"#,
            "[not json",
        ];
        for s in general {
            assert!(plain_messages(s, "user").is_none(), "{s}");
            let v = Value::String(s.to_string());
            assert_eq!(
                semconv_messages(&v, "user"),
                general_messages(&v, "user"),
                "{s}"
            );
        }
    }

    #[test]
    fn tool_calls_are_kept_as_parts() {
        let attrs = obj(json!({"gen_ai.output.messages": [
            {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "search", "arguments": {"q": "x"}}]}
        ]}));
        let m = messages(&attrs, &[]);
        assert_eq!(
            Value::Array(m.output.unwrap()),
            json!([{"role": "assistant", "content": "", "parts": [{"type": "tool_call", "id": "c1", "name": "search", "arguments": {"q": "x"}}]}])
        );
    }

    #[test]
    fn refused_spans_say_why() {
        let mut rows = SpanRows::for_store();
        let span = Span {
            trace_id: vec![1; 16],
            span_id: vec![2; 3],
            ..Default::default()
        };
        assert_eq!(
            rows.push(None, None, &span, "t").unwrap_err(),
            "spanId is 3 bytes, not 8"
        );
        let span = Span {
            trace_id: vec![1; 16],
            span_id: vec![2; 8],
            kind: 7,
            ..Default::default()
        };
        assert_eq!(
            rows.push(None, None, &span, "t").unwrap_err(),
            "kind 7 is not 0 to 5"
        );
        assert_eq!(rows.rows(), 0);
        let span = Span {
            trace_id: vec![1; 16],
            span_id: vec![2; 8],
            start_time_unix_nano: 86_400_000_000_123,
            ..Default::default()
        };
        rows.push(None, None, &span, "t").unwrap();
        let b = rows.finish_store(&store_schema(), 5).unwrap();
        assert_eq!(b.num_rows(), 1);
        let date = b.column_by_name("start_date").unwrap();
        assert_eq!(
            date.as_any()
                .downcast_ref::<Date32Array>()
                .unwrap()
                .value(0),
            1
        );
    }
}
