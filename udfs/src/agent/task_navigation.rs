//! `task_navigation_efficiency(response, ground_truth [, matching_mode])`: Azure AI
//! Evaluation's `_TaskNavigationEfficiencyEvaluator` (azure-ai-evaluation 1.18.10), returning
//! `Struct{match, precision, recall, f1_score}`.
//!
//! What the evaluator does, kept exactly:
//! - the agent's steps are the `{"type": "tool_call", "name", "arguments"}` items of the
//!   `content` lists of `role = "assistant"` messages, in order; the name is `str(name)`
//!   stripped of whitespace; `arguments` is an object, or JSON text of one (text that parses
//!   to something else gives no arguments);
//! - `ground_truth` is a list of tool names (compared by name), or the pair
//!   `[names, {"name": {"param": value}}]` (compared by name and arguments: the evaluator
//!   takes a Python tuple, which JSON writes as a two-element array);
//! - an argument value is compared as text: a string as itself, an object or array as
//!   `json.dumps(value, sort_keys=True)`, anything else as Python's `str()` — so the string
//!   "1" equals the number 1 and "True" equals true, as in the evaluator;
//! - `match` is 1.0 or 0.0 by the mode: `exact_match` (same steps in the same order),
//!   `in_order_match` (the ground truth is a subsequence of the steps) or `any_order_match`
//!   (each ground-truth step occurs at least as often among the steps);
//! - precision, recall and F1 count steps as multisets; all three are 0 with no step.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Float64Builder, StructArray};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Fields};
use datafusion::common::{Result, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDFImpl, Signature,
};
use serde_json::Value;

use crate::common::docs::AGENT_METRICS;
use crate::common::pyjson::write_py_float;
use crate::common::signature::{is_text, user_defined};
use crate::common::{columnar_result, json_rows, rows_of, truncate_for_error};
use crate::text::pystr::is_space;

const NAME: &str = "task_navigation_efficiency";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchingMode {
    Exact,
    InOrder,
    AnyOrder,
}

impl MatchingMode {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "exact_match" => Some(MatchingMode::Exact),
            "in_order_match" => Some(MatchingMode::InOrder),
            "any_order_match" => Some(MatchingMode::AnyOrder),
            _ => None,
        }
    }
}

/// The evaluator's result for one run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Navigation {
    pub matched: bool,
    pub precision: f64,
    pub recall: f64,
    pub f1_score: f64,
}

/// A step: the tool name, and with parameter matching its sorted (name, value text) pairs.
type Step = (String, Option<Vec<(String, String)>>);

/// Scores a run; errors are the evaluator's validation errors, in words of ours.
pub fn task_navigation_efficiency(
    response: &Value,
    ground_truth: &Value,
    mode: MatchingMode,
) -> std::result::Result<Navigation, String> {
    let calls = tool_calls(response)?;
    let (names, params) = ground_truth_steps(ground_truth)?;
    let with_params = params.is_some();
    let agent: Vec<Step> = calls
        .into_iter()
        .map(|(name, args)| {
            let p = with_params.then(|| sorted_params(&args));
            (name, p)
        })
        .collect();
    let empty = serde_json::Map::new();
    let truth: Vec<Step> = names
        .into_iter()
        .map(|name| {
            let p = params.map(|all| {
                let given = match all.get(&name) {
                    Some(Value::Object(m)) => m,
                    _ => &empty,
                };
                sorted_params(given)
            });
            (name, p)
        })
        .collect();
    let matched = match mode {
        MatchingMode::Exact => agent == truth,
        MatchingMode::InOrder => {
            let mut next = 0;
            for step in &agent {
                if next < truth.len() && *step == truth[next] {
                    next += 1;
                }
            }
            next == truth.len()
        }
        MatchingMode::AnyOrder => {
            let have = counts(&agent);
            counts(&truth)
                .iter()
                .all(|(step, n)| have.get(step).copied().unwrap_or(0) >= *n)
        }
    };
    let (precision, recall, f1_score) = precision_recall_f1(&agent, &truth);
    Ok(Navigation {
        matched,
        precision,
        recall,
        f1_score,
    })
}

fn counts(steps: &[Step]) -> HashMap<&Step, usize> {
    let mut out = HashMap::new();
    for s in steps {
        *out.entry(s).or_insert(0) += 1;
    }
    out
}

fn precision_recall_f1(agent: &[Step], truth: &[Step]) -> (f64, f64, f64) {
    if agent.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    let have = counts(agent);
    let want = counts(truth);
    let true_positives: usize = have
        .iter()
        .map(|(s, &n)| n.min(want.get(s).copied().unwrap_or(0)))
        .sum();
    // tp + fp is every agent step and tp + fn every ground-truth step.
    let precision = true_positives as f64 / agent.len() as f64;
    let recall = if truth.is_empty() {
        0.0
    } else {
        true_positives as f64 / truth.len() as f64
    };
    let f1 = if precision + recall > 0.0 {
        2.0 * precision * recall / (precision + recall)
    } else {
        0.0
    };
    (precision, recall, f1)
}

fn sorted_params(args: &serde_json::Map<String, Value>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = args
        .iter()
        .map(|(k, v)| (k.clone(), param_text(v)))
        .collect();
    out.sort();
    out
}

/// The evaluator's `_normalize_param_value`.
fn param_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(_) | Value::Object(_) => {
            let mut out = Vec::new();
            python_dumps(v, &mut out);
            String::from_utf8(out).expect("ASCII")
        }
        other => python_str(other),
    }
}

/// Python's `str()` of a JSON scalar as `json.loads` reads it.
fn python_str(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::String(s) => s.clone(),
        Value::Number(n) if n.is_f64() => {
            let mut out = Vec::new();
            write_py_float(n.as_f64().unwrap_or(f64::NAN), &mut out);
            String::from_utf8(out).expect("ASCII")
        }
        Value::Number(n) => n.to_string(),
        other => {
            let mut out = Vec::new();
            python_dumps(other, &mut out);
            String::from_utf8(out).expect("ASCII")
        }
    }
}

/// `json.dumps(v, sort_keys=True)` with Python's defaults: `", "` and `": "` separators and
/// every non-ASCII character escaped. (The crate's canonical form is the compact,
/// non-escaping one; this evaluator compares these exact texts with plain strings.)
fn python_dumps(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) if n.is_f64() => write_py_float(n.as_f64().unwrap_or(f64::NAN), out),
        Value::Number(n) => out.extend_from_slice(n.to_string().as_bytes()),
        Value::String(s) => ascii_json_string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(b", ");
                }
                python_dumps(item, out);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(b", ");
                }
                ascii_json_string(k, out);
                out.extend_from_slice(b": ");
                python_dumps(v, out);
            }
            out.push(b'}');
        }
    }
}

/// A JSON string as `json.dumps(..., ensure_ascii=True)` writes it.
fn ascii_json_string(s: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let unit = |u: u16, out: &mut Vec<u8>| {
        out.extend_from_slice(b"\\u");
        for shift in [12, 8, 4, 0] {
            out.push(HEX[((u >> shift) & 15) as usize]);
        }
    };
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            '\u{8}' => out.extend_from_slice(b"\\b"),
            '\u{c}' => out.extend_from_slice(b"\\f"),
            ' '..='~' => out.push(c as u8),
            _ => {
                let mut buf = [0u16; 2];
                for u in c.encode_utf16(&mut buf) {
                    unit(*u, out);
                }
            }
        }
    }
    out.push(b'"');
}

/// The (name, arguments) of every tool call of the assistant messages, validated as the
/// evaluator validates them.
fn tool_calls(
    response: &Value,
) -> std::result::Result<Vec<(String, serde_json::Map<String, Value>)>, String> {
    let Value::Array(messages) = response else {
        return Err("response must be a JSON array of messages".into());
    };
    let mut out = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let Value::Object(message) = message else {
            return Err(format!("message {i} is not an object"));
        };
        let role = match message.get("role") {
            Some(Value::String(r)) => r.as_str(),
            Some(_) => return Err(format!("the role of message {i} is not a string")),
            None => return Err(format!("message {i} has no role")),
        };
        if role != "assistant" {
            continue;
        }
        let Some(Value::Array(content)) = message.get("content") else {
            return Err(format!(
                "the content of assistant message {i} must be a list of content items"
            ));
        };
        for (j, item) in content.iter().enumerate() {
            let Value::Object(item) = item else {
                return Err(format!("content item {j} of message {i} is not an object"));
            };
            if item.get("type").and_then(Value::as_str) != Some("tool_call") {
                continue;
            }
            let Some(name) = item.get("name") else {
                return Err(format!(
                    "the tool call in message {i}, item {j} has no name"
                ));
            };
            let name = python_str(name).trim_matches(is_space).to_string();
            let args = match item.get("arguments") {
                Some(Value::Object(m)) => m.clone(),
                Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
                    Ok(Value::Object(m)) => m,
                    Ok(_) => serde_json::Map::new(),
                    Err(e) => {
                        return Err(format!(
                            "the arguments of tool call {name:?} are not JSON: {e}"
                        ));
                    }
                },
                _ => serde_json::Map::new(),
            };
            out.push((name, args));
        }
    }
    Ok(out)
}

type GroundTruth<'a> = (Vec<String>, Option<&'a serde_json::Map<String, Value>>);

fn ground_truth_steps(gt: &Value) -> std::result::Result<GroundTruth<'_>, String> {
    let Value::Array(items) = gt else {
        return Err("ground_truth must be a list of tool names or [names, parameters]".into());
    };
    if items.is_empty() {
        return Err("ground_truth is empty".into());
    }
    let names = |list: &[Value]| -> std::result::Result<Vec<String>, String> {
        list.iter()
            .enumerate()
            .map(|(i, n)| match n {
                Value::String(s) => Ok(s.trim_matches(is_space).to_string()),
                other => Err(format!(
                    "tool name {i} of ground_truth is {other}, not a string"
                )),
            })
            .collect()
    };
    if items.iter().all(Value::is_string) {
        return Ok((names(items)?, None));
    }
    match items.as_slice() {
        [Value::Array(list), Value::Object(params)] => {
            if list.is_empty() {
                return Err("the tool names of ground_truth are empty".into());
            }
            for (tool, p) in params {
                if !p.is_object() {
                    return Err(format!(
                        "the parameters of tool {tool:?} in ground_truth must be an object"
                    ));
                }
            }
            Ok((names(list)?, Some(params)))
        }
        _ => Err(
            "ground_truth must be a list of tool names or [names, {\"tool\": {parameters}}]".into(),
        ),
    }
}

fn result_fields() -> Fields {
    Fields::from(vec![
        Field::new("match", DataType::Float64, false),
        Field::new("precision", DataType::Float64, false),
        Field::new("recall", DataType::Float64, false),
        Field::new("f1_score", DataType::Float64, false),
    ])
}

static DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        AGENT_METRICS,
        "How closely an agent's tool calls follow the expected steps, equal to Azure AI \
         Evaluation's task navigation efficiency evaluator: match is 1.0 or 0.0 by the \
         matching mode (exact_match: the same steps in order, the default; in_order_match: \
         the expected steps in order, extra steps allowed; any_order_match: every expected \
         step, any order), with multiset precision, recall and F1 of the steps. The steps \
         are the tool_call items of the assistant messages; a ground truth of \
         [names, {\"tool\": {parameters}}] compares arguments too. Malformed input is an \
         error naming the value; NULL gives NULL.",
        "task_navigation_efficiency(response, ground_truth [, matching_mode])",
    )
    .with_argument(
        "response",
        "The agent's messages (JSON text): [{\"role\": \"assistant\", \"content\": \
         [{\"type\": \"tool_call\", \"name\": ..., \"arguments\": {...}}]}, ...].",
    )
    .with_argument(
        "ground_truth",
        "The expected tool names [\"a\", \"b\"], or [[\"a\", \"b\"], {\"a\": {\"param\": \
         value}}] to compare arguments too (JSON text).",
    )
    .with_argument(
        "matching_mode",
        "'exact_match' (default), 'in_order_match' or 'any_order_match'.",
    )
    .build()
});

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct TaskNavigationFunc {
    signature: Signature,
}

impl Default for TaskNavigationFunc {
    fn default() -> Self {
        Self {
            signature: user_defined(),
        }
    }
}

impl ScalarUDFImpl for TaskNavigationFunc {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Struct(result_fields()))
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let usage = &DOC.syntax_example;
        if !matches!(arg_types.len(), 2 | 3) {
            return plan_err!("{NAME} takes 2 or 3 arguments: {usage}");
        }
        if arg_types.len() == 3 && !is_text(&arg_types[2]) {
            return plan_err!(
                "{NAME}: matching_mode must be a string, got {}; usage: {usage}",
                arg_types[2]
            );
        }
        Ok(arg_types
            .iter()
            .map(|t| {
                if t.is_null() {
                    DataType::Utf8
                } else {
                    t.clone()
                }
            })
            .collect())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let call = rows_of(&args)?;
        let (rows, arrays) = (call.rows, &call.arrays);
        let responses = json_rows(&arrays[0], "response")?;
        let truths = json_rows(&arrays[1], "ground_truth")?;
        let modes = match arrays.get(2) {
            Some(a) => Some(cast(a, &DataType::Utf8)?),
            None => None,
        };
        let modes = modes.as_ref().map(|m| m.as_string::<i32>());
        let mut builders: [Float64Builder; 4] =
            std::array::from_fn(|_| Float64Builder::with_capacity(rows));
        let mut valid = Vec::with_capacity(rows);
        for row in 0..rows {
            let mode = match modes {
                None => Some(MatchingMode::Exact),
                Some(m) if m.is_null(call.at(2, row)) => None,
                Some(m) => match MatchingMode::parse(m.value(call.at(2, row))) {
                    Some(mode) => Some(mode),
                    None => {
                        return exec_err!(
                            "{NAME}: matching_mode {} is not one of 'exact_match', \
                             'in_order_match', 'any_order_match'",
                            truncate_for_error(m.value(call.at(2, row)))
                        );
                    }
                },
            };
            let (response, truth) = (&responses[call.at(0, row)], &truths[call.at(1, row)]);
            let scored = match (response, truth, mode) {
                (Some(r), Some(t), Some(mode)) => {
                    let r = r.as_ref().map_err(Clone::clone);
                    let t = t.as_ref().map_err(Clone::clone);
                    Some(r.and_then(|r| {
                        let t = t?;
                        task_navigation_efficiency(r, t, mode).map_err(|why| {
                            format!(
                                "response {} with ground_truth {}: {why}",
                                truncate_for_error(&r.to_string()),
                                truncate_for_error(&t.to_string())
                            )
                        })
                    }))
                }
                _ => None,
            };
            let n = match scored {
                None => None,
                Some(Ok(n)) => Some(n),
                Some(Err(why)) => return exec_err!("{NAME}: {why}"),
            };
            let [m, p, r, f] = &mut builders;
            let v = n.unwrap_or(Navigation {
                matched: false,
                precision: 0.0,
                recall: 0.0,
                f1_score: 0.0,
            });
            m.append_value(if v.matched { 1.0 } else { 0.0 });
            p.append_value(v.precision);
            r.append_value(v.recall);
            f.append_value(v.f1_score);
            valid.push(n.is_some());
        }
        let columns: Vec<ArrayRef> = builders
            .into_iter()
            .map(|mut b| Arc::new(b.finish()) as ArrayRef)
            .collect();
        let array = StructArray::try_new(result_fields(), columns, Some(NullBuffer::from(valid)))?;
        columnar_result(call.all_scalar, Arc::new(array))
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&DOC)
    }
}
