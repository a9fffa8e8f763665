//! Tool-call metrics: the tool calls of one model response against the expected ones.
//!
//! Both sides are JSON text `{"content": "...", "tool_calls": [{"name": ..., "arguments":
//! {...}}]}`. The rules are `make_golden.py`'s conventions (AMBIGUOUS 5):
//!
//! * valid = the text is JSON (read as Python's `json.loads` reads it) holding an object whose
//!   `tool_calls` is a non-empty array of objects, each with a string `name` and an object
//!   `arguments`. `content` is not required. `arguments` given as a JSON-encoded string (the
//!   OpenAI wire format) is *not* valid and is not decoded. A repeated key keeps its last value.
//! * calls are compared position by position over the reference's calls; a missing predicted
//!   call scores 0 at its position; extra predicted calls are ignored; each metric is the mean
//!   over the reference's positions.
//! * an invalid prediction scores 0 on every metric (it is not an error); an invalid reference
//!   is an error ([`ToolCallError`]).
//!
//! Argument values are compared by canonical JSON exactly as trajectory inputs are (see
//! [`super::trajectory`]): key order ignored, `1` ≠ `1.0`, `"2"` ≠ `2`.

use std::fmt;

use crate::common::pyjson::{JsonError, Kind, Parser};

/// One parsed tool call: its name and its arguments as (key, canonical JSON value) pairs,
/// sorted by key, keys unique.
#[derive(Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// `name ++ (key ++ value)*`; strings in WTF-8 (UTF-8 unless a lone surrogate escape).
    data: Vec<u8>,
    name_len: usize,
    /// `(key_start, value_start, value_end)` in `data`; the key ends where the value starts.
    args: Vec<(usize, usize, usize)>,
}

impl ToolCall {
    /// The tool name's bytes.
    pub fn name_bytes(&self) -> &[u8] {
        &self.data[..self.name_len]
    }

    /// The arguments as (key bytes, canonical JSON value bytes), sorted by key.
    pub fn arguments(&self) -> impl ExactSizeIterator<Item = (&[u8], &[u8])> + '_ {
        self.args
            .iter()
            .map(|&(k, v, e)| (&self.data[k..v], &self.data[v..e]))
    }
}

impl fmt::Debug for ToolCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lossy = String::from_utf8_lossy;
        f.debug_struct("ToolCall")
            .field("name", &lossy(self.name_bytes()))
            .field(
                "arguments",
                &self
                    .arguments()
                    .map(|(k, v)| (lossy(k), lossy(v)))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Why a tool-call text is not a valid tool call. `Display` says precisely what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolCallError {
    /// The text is not JSON.
    NotJson {
        position: usize,
        message: &'static str,
    },
    /// The JSON value is not an object.
    NotAnObject { found: &'static str },
    /// The object has no `tool_calls` key.
    MissingToolCalls,
    /// `tool_calls` is not an array.
    ToolCallsNotArray { found: &'static str },
    /// `tool_calls` is an empty array.
    NoToolCalls,
    /// An element of `tool_calls` is not an object.
    CallNotObject { index: usize, found: &'static str },
    /// A call has no `name`.
    MissingName { index: usize },
    /// A call's `name` is not a string.
    NameNotString { index: usize, found: &'static str },
    /// A call has no `arguments`.
    MissingArguments { index: usize },
    /// A call's `arguments` is not an object.
    ArgumentsNotObject { index: usize, found: &'static str },
}

impl fmt::Display for ToolCallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHAPE: &str =
            r#"expected {"content": "...", "tool_calls": [{"name": "...", "arguments": {...}}]}"#;
        match self {
            ToolCallError::NotJson { position, message } => {
                write!(f, "not valid JSON: {message} at byte {position}")
            }
            ToolCallError::NotAnObject { found } => write!(f, "found {found}; {SHAPE}"),
            ToolCallError::MissingToolCalls => write!(f, "no \"tool_calls\" key; {SHAPE}"),
            ToolCallError::ToolCallsNotArray { found } => {
                write!(f, "\"tool_calls\" must be an array, found {found}")
            }
            ToolCallError::NoToolCalls => write!(f, "\"tool_calls\" is empty"),
            ToolCallError::CallNotObject { index, found } => write!(
                f,
                "tool call {index} (0-based) must be an object with \"name\" and \"arguments\", \
                 found {found}"
            ),
            ToolCallError::MissingName { index } => {
                write!(f, "tool call {index} (0-based) has no \"name\"")
            }
            ToolCallError::NameNotString { index, found } => write!(
                f,
                "\"name\" of tool call {index} (0-based) must be a string, found {found}"
            ),
            ToolCallError::MissingArguments { index } => {
                write!(f, "tool call {index} (0-based) has no \"arguments\"")
            }
            ToolCallError::ArgumentsNotObject { index, found } => {
                write!(
                    f,
                    "\"arguments\" of tool call {index} (0-based) must be an object, found {found}"
                )?;
                if *found == Kind::String.describe() {
                    write!(f, " (JSON-encoded arguments are not accepted)")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for ToolCallError {}

impl From<JsonError> for ToolCallError {
    fn from(e: JsonError) -> ToolCallError {
        ToolCallError::NotJson {
            position: e.position,
            message: e.message,
        }
    }
}

/// Parses a tool-call response (see the module doc for what is valid). A syntax error anywhere
/// takes precedence over shape errors; otherwise the first shape error in document order is
/// reported (as the reference checks the calls in order).
pub fn parse_tool_calls(text: &str) -> Result<Vec<ToolCall>, ToolCallError> {
    let mut p = Parser::new(text);
    let kind = p.peek_kind()?;
    if kind != Kind::Object {
        p.skip_value()?;
        p.finish()?;
        return Err(ToolCallError::NotAnObject {
            found: kind.describe(),
        });
    }
    p.begin_object()?;
    let mut scratch = Scratch::default();
    let mut calls = Err(ToolCallError::MissingToolCalls);
    let mut first = true;
    let mut key = Vec::new();
    while p.object_next_key(&mut first, &mut key)? {
        if key == b"tool_calls" {
            // A later "tool_calls" replaces an earlier one, as in a Python dict.
            calls = read_calls(&mut p, &mut scratch)?;
        } else {
            p.skip_value()?;
        }
    }
    p.finish()?;
    calls
}

#[derive(Default)]
struct Scratch {
    key: Vec<u8>,
    name: Vec<u8>,
    args: Vec<u8>,
    ranges: Vec<(usize, usize, usize)>,
}

/// Reads the value of `tool_calls`. Outer error: syntax; inner error: shape.
fn read_calls(
    p: &mut Parser<'_>,
    s: &mut Scratch,
) -> Result<Result<Vec<ToolCall>, ToolCallError>, JsonError> {
    let kind = p.peek_kind()?;
    if kind != Kind::Array {
        p.skip_value()?;
        return Ok(Err(ToolCallError::ToolCallsNotArray {
            found: kind.describe(),
        }));
    }
    p.begin_array()?;
    let mut calls = Vec::new();
    let mut problem = None;
    let mut first = true;
    let mut index = 0;
    while p.array_next(&mut first)? {
        let kind = p.peek_kind()?;
        if problem.is_some() || kind != Kind::Object {
            if problem.is_none() {
                problem = Some(ToolCallError::CallNotObject {
                    index,
                    found: kind.describe(),
                });
            }
            p.skip_value()?;
        } else {
            match read_call(p, s, index)? {
                Ok(call) => calls.push(call),
                Err(e) => problem = Some(e),
            }
        }
        index += 1;
    }
    Ok(match problem {
        Some(e) => Err(e),
        None if calls.is_empty() => Err(ToolCallError::NoToolCalls),
        None => Ok(calls),
    })
}

fn read_call(
    p: &mut Parser<'_>,
    s: &mut Scratch,
    index: usize,
) -> Result<Result<ToolCall, ToolCallError>, JsonError> {
    p.begin_object()?;
    // Kinds of the last "name" / "arguments" seen.
    let mut name_kind = None;
    let mut args_kind = None;
    let mut first = true;
    while p.object_next_key(&mut first, &mut s.key)? {
        match s.key.as_slice() {
            b"name" => {
                let k = p.peek_kind()?;
                if k == Kind::String {
                    s.name.clear();
                    p.string_raw(&mut s.name)?;
                } else {
                    p.skip_value()?;
                }
                name_kind = Some(k);
            }
            b"arguments" => {
                let k = p.peek_kind()?;
                if k == Kind::Object {
                    read_arguments(p, s)?;
                } else {
                    p.skip_value()?;
                }
                args_kind = Some(k);
            }
            _ => p.skip_value()?,
        }
    }
    Ok(match (name_kind, args_kind) {
        (None, _) => Err(ToolCallError::MissingName { index }),
        (Some(k), _) if k != Kind::String => Err(ToolCallError::NameNotString {
            index,
            found: k.describe(),
        }),
        (_, None) => Err(ToolCallError::MissingArguments { index }),
        (_, Some(k)) if k != Kind::Object => Err(ToolCallError::ArgumentsNotObject {
            index,
            found: k.describe(),
        }),
        _ => {
            let mut data = Vec::with_capacity(s.name.len() + s.args.len());
            data.extend_from_slice(&s.name);
            data.extend_from_slice(&s.args);
            let off = s.name.len();
            let args = s
                .ranges
                .iter()
                .map(|&(k, v, e)| (k + off, v + off, e + off))
                .collect();
            Ok(ToolCall {
                data,
                name_len: off,
                args,
            })
        }
    })
}

/// Reads an `arguments` object into `s.args` / `s.ranges`, sorted by key, last value of a
/// repeated key kept.
fn read_arguments(p: &mut Parser<'_>, s: &mut Scratch) -> Result<(), JsonError> {
    s.args.clear();
    s.ranges.clear();
    p.begin_object()?;
    let mut first = true;
    while p.object_next_key(&mut first, &mut s.key)? {
        let k = s.args.len();
        s.args.extend_from_slice(&s.key);
        let v = s.args.len();
        p.canon_value(&mut s.args)?;
        s.ranges.push((k, v, s.args.len()));
    }
    let data = &s.args;
    let key = |r: &(usize, usize, usize)| &data[r.0..r.1];
    if !s.ranges.windows(2).all(|w| key(&w[0]) < key(&w[1])) {
        // Stable sort: the last of a run of equal keys is the last occurrence.
        s.ranges.sort_by(|a, b| key(a).cmp(key(b)));
        let n = s.ranges.len();
        let mut kept = 0;
        for i in 0..n {
            if i + 1 < n && key(&s.ranges[i]) == key(&s.ranges[i + 1]) {
                continue;
            }
            s.ranges[kept] = s.ranges[i];
            kept += 1;
        }
        s.ranges.truncate(kept);
    }
    Ok(())
}

/// The three comparison scores of a prediction against a reference.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ToolCallScores {
    pub name_match: f64,
    pub parameter_key_match: f64,
    pub parameter_kv_match: f64,
}

/// Scores parsed calls; `pred: None` is an invalid prediction and scores 0 everywhere.
///
/// Position by position over `reference` (extra predicted calls ignored, a missing one scores
/// 0): name = 1 if the names are equal; key = |pred keys ∩ ref keys| / |ref keys|; kv = the
/// same over (key, canonical value) pairs; with no reference arguments, key and kv are 1 if
/// the prediction has none either, else 0. Each score is the mean over positions, summed left
/// to right then divided, as the reference does. An empty `reference` (which
/// [`parse_tool_calls`] never returns) scores 0.
pub fn score_parsed(pred: Option<&[ToolCall]>, reference: &[ToolCall]) -> ToolCallScores {
    let zero = ToolCallScores {
        name_match: 0.0,
        parameter_key_match: 0.0,
        parameter_kv_match: 0.0,
    };
    let Some(pred) = pred else { return zero };
    if reference.is_empty() {
        return zero;
    }
    let (mut names, mut keys, mut kvs) = (0.0, 0.0, 0.0);
    for (i, r) in reference.iter().enumerate() {
        let Some(p) = pred.get(i) else { continue };
        if p.name_bytes() == r.name_bytes() {
            names += 1.0;
        }
        if r.args.is_empty() {
            let s = if p.args.is_empty() { 1.0 } else { 0.0 };
            keys += s;
            kvs += s;
            continue;
        }
        let (k, kv) = intersect(p, r);
        let n = r.args.len() as f64;
        keys += k as f64 / n;
        kvs += kv as f64 / n;
    }
    let n = reference.len() as f64;
    ToolCallScores {
        name_match: names / n,
        parameter_key_match: keys / n,
        parameter_kv_match: kvs / n,
    }
}

/// (common keys, common (key, value) pairs) of two sorted, key-unique argument lists.
fn intersect(a: &ToolCall, b: &ToolCall) -> (usize, usize) {
    let (mut x, mut y) = (a.arguments(), b.arguments());
    let (mut ea, mut eb) = (x.next(), y.next());
    let (mut keys, mut kvs) = (0, 0);
    while let (Some((ka, va)), Some((kb, vb))) = (ea, eb) {
        match ka.cmp(kb) {
            std::cmp::Ordering::Less => ea = x.next(),
            std::cmp::Ordering::Greater => eb = y.next(),
            std::cmp::Ordering::Equal => {
                keys += 1;
                kvs += (va == vb) as usize;
                ea = x.next();
                eb = y.next();
            }
        }
    }
    (keys, kvs)
}

fn score(pred: &str, reference: &str) -> Result<ToolCallScores, ToolCallError> {
    let reference = parse_tool_calls(reference)?;
    let pred = parse_tool_calls(pred).ok();
    Ok(score_parsed(pred.as_deref(), &reference))
}

/// `tool_call_valid`: 1 if `pred` is a valid tool call (module doc: a JSON object whose
/// `tool_calls` is a non-empty array of `{"name": string, "arguments": object}`), else 0.
/// Never an error.
pub fn tool_call_valid(pred: &str) -> f64 {
    if parse_tool_calls(pred).is_ok() {
        1.0
    } else {
        0.0
    }
}

/// `tool_name_match`: mean over the reference's calls of 1 if the predicted call at the same
/// position has the same name (see [`score_parsed`]). Invalid `pred` → 0; invalid `reference`
/// → `Err`.
pub fn tool_name_match(pred: &str, reference: &str) -> Result<f64, ToolCallError> {
    score(pred, reference).map(|s| s.name_match)
}

/// `tool_parameter_key_match`: mean over the reference's calls of the fraction of reference
/// argument names present in the predicted call at the same position (see [`score_parsed`]).
/// Invalid `pred` → 0; invalid `reference` → `Err`.
pub fn tool_parameter_key_match(pred: &str, reference: &str) -> Result<f64, ToolCallError> {
    score(pred, reference).map(|s| s.parameter_key_match)
}

/// `tool_parameter_kv_match`: as [`tool_parameter_key_match`] with (name, canonical JSON value)
/// pairs: values compared strictly (`1` ≠ `1.0`, `"2"` ≠ `2`, key order of nested objects
/// ignored). Invalid `pred` → 0; invalid `reference` → `Err`.
pub fn tool_parameter_kv_match(pred: &str, reference: &str) -> Result<f64, ToolCallError> {
    score(pred, reference).map(|s| s.parameter_kv_match)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REF: &str = r#"{"content": "", "tool_calls": [{"name": "w", "arguments": {"a": 1, "b": {"x": 1, "y": [2]}}}]}"#;

    fn all(pred: &str, reference: &str) -> (f64, f64, f64, f64) {
        (
            tool_call_valid(pred),
            tool_name_match(pred, reference).unwrap(),
            tool_parameter_key_match(pred, reference).unwrap(),
            tool_parameter_kv_match(pred, reference).unwrap(),
        )
    }

    #[test]
    fn matches() {
        let p =
            r#"{"tool_calls": [{"arguments": {"b": {"y": [2], "x": 1}, "a": 1.0}, "name": "w"}]}"#;
        assert_eq!(all(p, REF), (1.0, 1.0, 1.0, 0.5));
        let p = r#"{"tool_calls": [{"name": "v", "arguments": {"a": 1, "c": 3}}]}"#;
        assert_eq!(all(p, REF), (1.0, 0.0, 0.5, 0.5));
        // Repeated keys keep their last value.
        let p =
            r#"{"tool_calls": 1, "tool_calls": [{"name": "w", "arguments": {"a": 2, "a": 1}}]}"#;
        assert_eq!(all(p, REF), (1.0, 1.0, 0.5, 0.5));
        let two = r#"{"tool_calls": [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}]}"#;
        let p = r#"{"tool_calls": [{"name": "a", "arguments": {"z": 0}}]}"#;
        assert_eq!(all(p, two), (1.0, 0.5, 0.0, 0.0));
        let p = r#"{"tool_calls": [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}, {"name": "c", "arguments": {}}]}"#;
        assert_eq!(all(p, two), (1.0, 1.0, 1.0, 1.0));
    }

    #[test]
    fn invalid_predictions_score_zero() {
        for p in [
            "book(x)",
            "[]",
            r#"{"content": "hi"}"#,
            r#"{"tool_calls": []}"#,
            r#"{"tool_calls": {}}"#,
            r#"{"tool_calls": [{"name": "w"}]}"#,
            r#"{"tool_calls": [{"name": "w", "arguments": "{\"a\": 1}"}]}"#,
            r#"{"tool_calls": [{"name": 1, "arguments": {}}]}"#,
            r#"{"tool_calls": [{"name": "w", "arguments": {"a": 1}}, 5]}"#,
            r#"{"tool_calls": [{"name": "w", "arguments": {"a": 1}}]} x"#,
        ] {
            assert_eq!(all(p, REF), (0.0, 0.0, 0.0, 0.0), "{p}");
        }
    }

    #[test]
    fn invalid_reference_is_an_error() {
        let e = |r: &str| tool_name_match(REF, r).unwrap_err();
        assert!(matches!(e("nope"), ToolCallError::NotJson { .. }));
        assert_eq!(e("[1]"), ToolCallError::NotAnObject { found: "an array" });
        assert_eq!(e("{}"), ToolCallError::MissingToolCalls);
        assert_eq!(
            e(r#"{"tool_calls": null}"#),
            ToolCallError::ToolCallsNotArray { found: "null" }
        );
        assert_eq!(e(r#"{"tool_calls": []}"#), ToolCallError::NoToolCalls);
        assert_eq!(
            e(r#"{"tool_calls": [{"name": "a", "arguments": {}}, {"arguments": {}}]}"#),
            ToolCallError::MissingName { index: 1 }
        );
        let s = e(r#"{"tool_calls": [{"name": "a", "arguments": "{}"}]}"#).to_string();
        assert!(
            s.contains("must be an object, found a string (JSON-encoded"),
            "{s}"
        );
        assert!(matches!(
            e(r#"{"tool_calls": [5, {"name": "a", "arguments": {]}"#),
            ToolCallError::NotJson { .. }
        ));
    }

    #[test]
    fn arguments_are_sorted_and_unique() {
        let c = parse_tool_calls(r#"{"tool_calls": [{"name": "n", "arguments": {"b": 1, "a": {"d": 0, "c": 1}, "b": 2}}]}"#)
            .unwrap();
        let args: Vec<_> = c[0].arguments().collect();
        assert_eq!(
            args,
            vec![
                (&b"a"[..], &br#"{"c":1,"d":0}"#[..]),
                (&b"b"[..], &b"2"[..])
            ]
        );
    }
}
