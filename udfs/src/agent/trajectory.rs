//! Trajectory metrics: how the tool calls an agent made compare with the expected ones.
//!
//! A trajectory is JSON text holding an array of `{"tool_name": ..., "tool_input": {...}}`.
//! A call is identified by its tool name and the *canonical JSON* of its `tool_input`, exactly
//! as the reference (`make_golden.py`, AMBIGUOUS 2) defines it:
//! `json.dumps(tool_input, sort_keys=True, separators=(",", ":"), ensure_ascii=False)` on the
//! value Python's `json.loads` produced. Consequences:
//!
//! * object key order does not matter; a key repeated in one object keeps its last value;
//! * numbers are compared the way Python sees them: an integer (no `.`/exponent) by its value
//!   (`-0` = `0`, any length), a float by its `f64` value (`1.0` = `1.00` = `1e0`, `0.0` ≠
//!   `-0.0`); an integer never equals a float (`1` ≠ `1.0`), `true` ≠ `1`, `"1"` ≠ `1`;
//! * strings are compared after unescaping (`"\u00e9"` = `"é"`), including lone surrogates;
//! * an absent `tool_input` is `{}`; `"tool_input": null` is `null` (≠ `{}`); a non-object
//!   `tool_input` (a string, e.g. the SDK's `json.dumps` text, a list, ...) is compared as that
//!   value and is *not* decoded.
//!
//! Like Python's `json`, the reader accepts `NaN`, `Infinity` and `-Infinity`; it rejects
//! integers longer than 4300 digits (Python's `int` limit) and nesting deeper than
//! [`MAX_DEPTH`].
//!
//! Parsing produces one [`Call`] per element: the name and canonical input in one buffer plus
//! a precomputed hash, so every comparison in the kernels is a `u64` compare and, rarely, a
//! `memcmp`.

use std::borrow::Cow;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};

use crate::common::pyjson as json;
pub use crate::common::pyjson::MAX_DEPTH;

/// Separates the tool name from the canonical input inside [`Call`]'s key. `0xFF` never occurs
/// in UTF-8 (nor in WTF-8), so `name ++ 0xFF ++ input` is injective.
const NAME_SEP: u8 = 0xFF;

/// Fixed seeds: the hash never leaves the process, but a fixed value keeps `Call` reproducible.
const HASH_STATE: ahash::RandomState = ahash::RandomState::with_seeds(
    0x243f_6a88_85a3_08d3,
    0x1319_8a2e_0370_7344,
    0xa409_3822_299f_31d0,
    0x082e_fa98_ec4e_6c89,
);

/// One tool call in canonical form: `(tool_name, canonical JSON of tool_input)`.
///
/// Equality, hashing and ordering follow that pair (see the module doc for what "canonical"
/// means). Build it with [`parse_trajectory`] or [`call_from_parts`].
#[derive(Clone)]
pub struct Call {
    hash: u64,
    name_len: usize,
    /// `name ++ NAME_SEP ++ canonical input`, strings in WTF-8 (UTF-8 unless the JSON held a
    /// lone surrogate escape). Inline up to 40 bytes: most calls need no allocation of their
    /// own, which was a large part of parsing a trajectory.
    key: smallvec::SmallVec<[u8; 40]>,
}

impl Call {
    fn from_canonical(name: &[u8], canonical_input: &[u8]) -> Call {
        let mut key = smallvec::SmallVec::with_capacity(name.len() + 1 + canonical_input.len());
        key.extend_from_slice(name);
        key.push(NAME_SEP);
        key.extend_from_slice(canonical_input);
        Call {
            hash: BuildHasher::hash_one(&HASH_STATE, key.as_slice()),
            name_len: name.len(),
            key,
        }
    }

    /// The tool name's bytes (UTF-8, or WTF-8 if the JSON held a lone surrogate escape).
    pub fn tool_name_bytes(&self) -> &[u8] {
        &self.key[..self.name_len]
    }

    /// The tool name (lossy only for lone surrogates).
    pub fn tool_name(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(self.tool_name_bytes())
    }

    /// The canonical JSON of `tool_input`, byte for byte what Python's
    /// `json.dumps(tool_input, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`
    /// gives (encoded as UTF-8, lone surrogates as WTF-8).
    pub fn canonical_input_bytes(&self) -> &[u8] {
        &self.key[self.name_len + 1..]
    }

    /// [`Call::canonical_input_bytes`] as text (lossy only for lone surrogates).
    pub fn canonical_input(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(self.canonical_input_bytes())
    }
}

impl PartialEq for Call {
    fn eq(&self, other: &Call) -> bool {
        self.hash == other.hash && self.key == other.key
    }
}

impl Eq for Call {}

impl Hash for Call {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl PartialOrd for Call {
    fn partial_cmp(&self, other: &Call) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Orders by tool name, then canonical input (byte order of the canonical forms).
impl Ord for Call {
    fn cmp(&self, other: &Call) -> std::cmp::Ordering {
        self.tool_name_bytes()
            .cmp(other.tool_name_bytes())
            .then_with(|| {
                self.canonical_input_bytes()
                    .cmp(other.canonical_input_bytes())
            })
    }
}

impl fmt::Debug for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Call({:?}, {})",
            self.tool_name(),
            self.canonical_input()
        )
    }
}

/// Why a trajectory could not be read. `Display` says precisely what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrajectoryError {
    /// The text is not JSON (as Python's `json.loads` reads it).
    NotJson {
        position: usize,
        message: &'static str,
    },
    /// The JSON value is not an array.
    NotAnArray { found: &'static str },
    /// An element of the array is not an object.
    ElementNotObject { index: usize, found: &'static str },
    /// A call has no `tool_name` key.
    MissingToolName { index: usize },
    /// A call's `tool_name` is not a string.
    ToolNameNotString { index: usize, found: &'static str },
}

impl fmt::Display for TrajectoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrajectoryError::NotJson { position, message } => {
                write!(f, "not valid JSON: {message} at byte {position}")
            }
            TrajectoryError::NotAnArray { found } => {
                write!(
                    f,
                    "a trajectory must be a JSON array of tool calls, found {found}"
                )
            }
            TrajectoryError::ElementNotObject { index, found } => write!(
                f,
                "tool call {index} (0-based) must be an object with \"tool_name\" and \
                 \"tool_input\", found {found}"
            ),
            TrajectoryError::MissingToolName { index } => {
                write!(f, "tool call {index} (0-based) has no \"tool_name\"")
            }
            TrajectoryError::ToolNameNotString { index, found } => write!(
                f,
                "\"tool_name\" of tool call {index} (0-based) must be a string, found {found}"
            ),
        }
    }
}

impl std::error::Error for TrajectoryError {}

impl From<json::JsonError> for TrajectoryError {
    fn from(e: json::JsonError) -> TrajectoryError {
        TrajectoryError::NotJson {
            position: e.position,
            message: e.message,
        }
    }
}

/// Parses a trajectory: JSON text holding an array of `{"tool_name": str, "tool_input": any}`.
///
/// Follows `make_golden.py`'s `call_key`: the key of a call is `(tool_name, canonical JSON of
/// tool_input)`, an absent `tool_input` counting as `{}`; other keys of a call are ignored; a
/// repeated key keeps its last value (Python `dict`). Errors: not JSON, not an array, an
/// element that is not an object, a call without `tool_name`, a `tool_name` that is not a
/// string (the reference would compare such names with Python `==`, or fail on unhashable
/// ones; here they are rejected). A syntax error anywhere takes precedence over the others.
pub fn parse_trajectory(text: &str) -> Result<Vec<Call>, TrajectoryError> {
    thread_local! {
        // The key, name and canonical-input buffers, reused across trajectories.
        static SCRATCH: std::cell::RefCell<(Vec<u8>, Vec<u8>, Vec<u8>)> =
            const { std::cell::RefCell::new((Vec::new(), Vec::new(), Vec::new())) };
    }
    SCRATCH.with_borrow_mut(|(key, name, input)| parse_with(text, key, name, input))
}

fn parse_with(
    text: &str,
    key: &mut Vec<u8>,
    name: &mut Vec<u8>,
    input: &mut Vec<u8>,
) -> Result<Vec<Call>, TrajectoryError> {
    let mut p = json::Parser::new(text);
    let kind = p.peek_kind()?;
    if kind != json::Kind::Array {
        p.skip_value()?;
        p.finish()?;
        return Err(TrajectoryError::NotAnArray {
            found: kind.describe(),
        });
    }
    p.begin_array()?;
    let mut calls = Vec::with_capacity(8);
    // The first problem that is not a syntax error; reported only if the whole text is JSON.
    let mut problem: Option<TrajectoryError> = None;
    let mut first = true;
    let mut index = 0;
    while p.array_next(&mut first)? {
        let kind = p.peek_kind()?;
        if problem.is_some() || kind != json::Kind::Object {
            if problem.is_none() {
                problem = Some(TrajectoryError::ElementNotObject {
                    index,
                    found: kind.describe(),
                });
            }
            p.skip_value()?;
            index += 1;
            continue;
        }
        // Last occurrence wins for repeated keys, as in a Python dict.
        let mut name_kind: Option<json::Kind> = None;
        let mut has_input = false;
        p.begin_object()?;
        let mut first_member = true;
        while p.object_next_key(&mut first_member, key)? {
            match key.as_slice() {
                b"tool_name" => {
                    let k = p.peek_kind()?;
                    if k == json::Kind::String {
                        name.clear();
                        p.string_raw(name)?;
                    } else {
                        p.skip_value()?;
                    }
                    name_kind = Some(k);
                }
                b"tool_input" => {
                    input.clear();
                    p.canon_value(input)?;
                    has_input = true;
                }
                _ => p.skip_value()?,
            }
        }
        match name_kind {
            Some(json::Kind::String) => {
                let input: &[u8] = if has_input { input } else { b"{}" };
                calls.push(Call::from_canonical(name, input));
            }
            None => problem = Some(TrajectoryError::MissingToolName { index }),
            Some(k) => {
                problem = Some(TrajectoryError::ToolNameNotString {
                    index,
                    found: k.describe(),
                })
            }
        }
        index += 1;
    }
    p.finish()?;
    match problem {
        Some(e) => Err(e),
        None => Ok(calls),
    }
}

/// Builds a call from parts, e.g. a row of a `List<Struct{tool_name, tool_input}>` column
/// converted to a `serde_json::Value`.
///
/// `tool_input: None` means the key is absent and counts as `{}` (as in the reference);
/// `Some(&Value::Null)` is JSON `null`, which is *not* `{}`. A string `tool_input` is compared
/// as a string and not decoded. Numbers follow the same rule as the text form: a
/// `serde_json::Number` that is an integer is compared by value, a float by its `f64` (so an
/// Arrow `Float64` holding `1.0` does not equal a JSON `1`).
pub fn call_from_parts(tool_name: &str, tool_input: Option<&serde_json::Value>) -> Call {
    match tool_input {
        None => Call::from_canonical(tool_name.as_bytes(), b"{}"),
        Some(v) => {
            let mut out = Vec::new();
            json::canon_serde(v, &mut out);
            Call::from_canonical(tool_name.as_bytes(), &out)
        }
    }
}

/// More pairs than this and membership uses a hash set instead of a linear scan.
const LINEAR_SCAN_LIMIT: usize = 1024;

/// How many of `items` appear in `set` (membership, not clipped counts: AMBIGUOUS 3).
fn count_members(items: &[Call], set: &[Call]) -> usize {
    if items.len().saturating_mul(set.len()) <= LINEAR_SCAN_LIMIT {
        items.iter().filter(|c| set.contains(c)).count()
    } else {
        let set: ahash::AHashSet<&Call> = set.iter().collect();
        items.iter().filter(|c| set.contains(c)).count()
    }
}

/// `trajectory_exact_match`: 1 if both trajectories hold the same calls in the same order
/// (same length), else 0. Two empty trajectories match (1).
pub fn exact_match(pred: &[Call], reference: &[Call]) -> f64 {
    if pred == reference { 1.0 } else { 0.0 }
}

/// `trajectory_in_order_match`: 1 if the reference calls appear in the prediction in the same
/// order, extra predicted calls allowed (the reference is a subsequence; a repeated reference
/// call needs as many predicted occurrences), else 0. An empty reference gives 1 (vacuous).
pub fn in_order_match(pred: &[Call], reference: &[Call]) -> f64 {
    // Greedy matching is optimal for subsequence tests (the reference does the same).
    let mut rest = pred.iter();
    for r in reference {
        if !rest.by_ref().any(|p| p == r) {
            return 0.0;
        }
    }
    1.0
}

/// `trajectory_any_order_match`: 1 if every reference call appears in the prediction, in any
/// order, extra calls allowed, else 0. Membership: one predicted call covers any number of
/// equal reference calls. An empty reference gives 1 (vacuous).
pub fn any_order_match(pred: &[Call], reference: &[Call]) -> f64 {
    if count_members(reference, pred) == reference.len() {
        1.0
    } else {
        0.0
    }
}

/// `trajectory_precision`: (number of predicted calls that appear in the reference) /
/// (number of predicted calls). Membership counting: each predicted call counts if an equal
/// call is anywhere in the reference (duplicates are not clipped). An empty prediction gives 0.
pub fn precision(pred: &[Call], reference: &[Call]) -> f64 {
    if pred.is_empty() {
        return 0.0;
    }
    count_members(pred, reference) as f64 / pred.len() as f64
}

/// `trajectory_recall`: (number of reference calls that appear in the prediction) /
/// (number of reference calls). Membership counting as in [`precision`]. An empty reference
/// gives 0.
pub fn recall(pred: &[Call], reference: &[Call]) -> f64 {
    if reference.is_empty() {
        return 0.0;
    }
    count_members(reference, pred) as f64 / reference.len() as f64
}

/// `trajectory_single_tool_use`: 1 if any predicted call has exactly this tool name (case and
/// whitespace sensitive, inputs ignored), else 0. An empty prediction gives 0.
pub fn single_tool_use(pred: &[Call], tool_name: &str) -> f64 {
    if pred
        .iter()
        .any(|c| c.tool_name_bytes() == tool_name.as_bytes())
    {
        1.0
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn traj(s: &str) -> Vec<Call> {
        parse_trajectory(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn canon(input: &str) -> String {
        let t = format!(r#"[{{"tool_name":"t","tool_input":{input}}}]"#);
        traj(&t)[0].canonical_input().into_owned()
    }

    #[test]
    fn canonical_form_matches_python_json_dumps() {
        assert_eq!(
            canon(r#"{"b": 1, "a": [1.0, -0, -0.0, 1E5]}"#),
            r#"{"a":[1.0,0,-0.0,100000.0],"b":1}"#
        );
        assert_eq!(canon(r#"{"a": 1, "a": 2}"#), r#"{"a":2}"#);
        assert_eq!(canon(r#"{"b": 1, "a": 2, "b": 3}"#), r#"{"a":2,"b":3}"#);
        assert_eq!(canon(r#""\u00e9\n\u001F\/""#), "\"é\\n\\u001f/\"");
        assert_eq!(
            canon("[1e16, 1e15, 0.0001, 0.00001, 1e400, NaN, -Infinity]"),
            "[1e+16,1000000000000000.0,0.0001,1e-05,Infinity,NaN,-Infinity]"
        );
        assert_eq!(
            canon("123456789012345678901234567890"),
            "123456789012345678901234567890"
        );
        assert_eq!(canon(r#""\ud83d\ude00""#), "\"😀\"");
        assert_eq!(canon("null"), "null");
        assert_eq!(
            canon(r#"{"x": {"z": 1, "y": {"b": [], "a": {}}}}"#),
            r#"{"x":{"y":{"a":{},"b":[]},"z":1}}"#
        );
    }

    #[test]
    fn call_identity() {
        let a = traj(
            r#"[{"tool_name": "a", "tool_input": {"p": 1, "q": 2}}, {"tool_name": "a"},
                         {"tool_name": "a", "tool_input": null}, {"tool_name": "a", "tool_input": {"p": 1.0, "q": 2}}]"#,
        );
        let b = traj(
            r#"[{"tool_input": {"q": 2, "p": 1}, "tool_name": "\u0061"}, {"tool_name": "a", "tool_input": {}}]"#,
        );
        assert_eq!(a[0], b[0]);
        assert_eq!(a[1], b[1]);
        assert_ne!(a[2], b[1]);
        assert_ne!(a[3], a[0]);
        assert_eq!(
            a[0],
            call_from_parts("a", Some(&serde_json::json!({"q": 2, "p": 1})))
        );
        assert_eq!(a[1], call_from_parts("a", None));
        assert_eq!(a[2], call_from_parts("a", Some(&serde_json::Value::Null)));
        assert_eq!(
            a[3],
            call_from_parts("a", Some(&serde_json::json!({"q": 2, "p": 1.0})))
        );
    }

    #[test]
    fn errors() {
        let e = |s: &str| parse_trajectory(s).unwrap_err();
        assert!(matches!(e("[1,"), TrajectoryError::NotJson { .. }));
        assert!(matches!(e(""), TrajectoryError::NotJson { .. }));
        assert!(matches!(e("[] x"), TrajectoryError::NotJson { .. }));
        assert_eq!(e("{}"), TrajectoryError::NotAnArray { found: "an object" });
        assert_eq!(
            e(r#"[{"tool_name":"a"}, "b"]"#),
            TrajectoryError::ElementNotObject {
                index: 1,
                found: "a string"
            }
        );
        assert_eq!(
            e(r#"[{"tool_input":{}}]"#),
            TrajectoryError::MissingToolName { index: 0 }
        );
        assert_eq!(
            e(r#"[{"tool_name":null}]"#),
            TrajectoryError::ToolNameNotString {
                index: 0,
                found: "null"
            }
        );
        // Syntax errors win over shape errors that come first.
        assert!(matches!(
            e(r#"[1, {"tool_name": tru}]"#),
            TrajectoryError::NotJson { .. }
        ));
        assert!(matches!(
            e(r#"[{"tool_name":"a","x":[1,]}]"#),
            TrajectoryError::NotJson { .. }
        ));
        assert!(matches!(
            e(r#"[{"tool_name":"a","tool_input":"\x"}]"#),
            TrajectoryError::NotJson { .. }
        ));
        assert!(matches!(
            e("[{\"tool_name\":\"a\\u00\"}]"),
            TrajectoryError::NotJson { .. }
        ));
        assert!(matches!(e("[\"\u{1}\"]"), TrajectoryError::NotJson { .. }));
        assert!(matches!(
            e(&"[".repeat(600)),
            TrajectoryError::NotJson { .. }
        ));
        // A repeated tool_name keeps its last value.
        assert_eq!(
            traj(r#"[{"tool_name": 1, "tool_name": "x"}]"#)[0].tool_name(),
            "x"
        );
        assert!(
            e("[{\"tool_name\": 1}]")
                .to_string()
                .contains("must be a string, found a number")
        );
    }

    #[test]
    fn kernels() {
        let a = r#"{"tool_name": "a", "tool_input": {"x": 1}}"#;
        let b = r#"{"tool_name": "b", "tool_input": {"y": "2"}}"#;
        let c = r#"{"tool_name": "c", "tool_input": {}}"#;
        let t = |calls: &[&str]| traj(&format!("[{}]", calls.join(",")));
        let (p, r) = (t(&[a, a, b]), t(&[a, b, c]));
        assert_eq!(exact_match(&p, &r), 0.0);
        assert_eq!(in_order_match(&p, &r), 0.0);
        assert_eq!(any_order_match(&p, &r), 0.0);
        assert_eq!(precision(&p, &r), 1.0);
        assert_eq!(recall(&p, &r), 2.0 / 3.0);
        assert_eq!(in_order_match(&t(&[a, b, a]), &t(&[a, a])), 1.0);
        assert_eq!(in_order_match(&t(&[a, b]), &t(&[a, a])), 0.0);
        assert_eq!(any_order_match(&t(&[a]), &t(&[a, a])), 1.0);
        assert_eq!(single_tool_use(&p, "b"), 1.0);
        assert_eq!(single_tool_use(&p, "B"), 0.0);
        // Empty-trajectory conventions (AMBIGUOUS 4).
        let e = t(&[]);
        assert_eq!(exact_match(&e, &e), 1.0);
        assert_eq!(
            (in_order_match(&p, &e), any_order_match(&p, &e)),
            (1.0, 1.0)
        );
        assert_eq!((precision(&e, &r), recall(&p, &e)), (0.0, 0.0));
        assert_eq!(
            (
                in_order_match(&e, &r),
                any_order_match(&e, &r),
                recall(&e, &r)
            ),
            (0.0, 0.0, 0.0)
        );
        // Large inputs take the hash-set path and agree with the scan.
        let big_p: Vec<Call> = (0..100)
            .map(|i| call_from_parts(&format!("t{}", i % 37), None))
            .collect();
        let big_r: Vec<Call> = (0..50)
            .map(|i| call_from_parts(&format!("t{}", i * 2), None))
            .collect();
        let scan = big_p.iter().filter(|c| big_r.contains(c)).count();
        assert_eq!(precision(&big_p, &big_r), scan as f64 / 100.0);
    }
}

#[cfg(test)]
mod long_trajectories {
    use super::*;

    /// Trajectories of 1,000 and 100,000 calls through every trajectory metric: values in
    /// range, memory linear.
    #[test]
    fn thousands_of_calls_stay_linear() {
        for calls in [1_000, 100_000] {
            let trajectory = |shift: usize| {
                let items: Vec<String> = (0..calls)
                    .map(|i| {
                        format!(
                            r#"{{"tool_name": "t{}", "tool_input": {{"q": {}, "k": "v{}"}}}}"#,
                            (i + shift) % 50,
                            (i + shift) % 97,
                            i % 13
                        )
                    })
                    .collect();
                format!("[{}]", items.join(","))
            };
            let pred = parse_trajectory(&trajectory(0)).unwrap();
            let reference = parse_trajectory(&trajectory(3)).unwrap();
            assert_eq!(pred.len(), calls);
            for value in [
                exact_match(&pred, &reference),
                in_order_match(&pred, &reference),
                any_order_match(&pred, &reference),
                precision(&pred, &reference),
                recall(&pred, &reference),
                single_tool_use(&pred, "t7"),
            ] {
                assert!((0.0..=1.0).contains(&value), "{value}");
            }
        }
        if let Some(peak) = crate::common::peak_rss() {
            assert!(peak < 300 << 20, "peak RSS {} MiB", peak >> 20);
        }
    }
}
