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

pub use json::MAX_DEPTH;

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
    /// lone surrogate escape).
    key: Box<[u8]>,
}

impl Call {
    fn from_canonical(name: &[u8], canonical_input: &[u8]) -> Call {
        let mut key = Vec::with_capacity(name.len() + 1 + canonical_input.len());
        key.extend_from_slice(name);
        key.push(NAME_SEP);
        key.extend_from_slice(canonical_input);
        Call {
            hash: BuildHasher::hash_one(&HASH_STATE, key.as_slice()),
            name_len: name.len(),
            key: key.into_boxed_slice(),
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
    let mut key = Vec::new();
    let mut name = Vec::new();
    let mut input = Vec::new();
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
        while p.object_next_key(&mut first_member, &mut key)? {
            match key.as_slice() {
                b"tool_name" => {
                    let k = p.peek_kind()?;
                    if k == json::Kind::String {
                        name.clear();
                        p.string_raw(&mut name)?;
                    } else {
                        p.skip_value()?;
                    }
                    name_kind = Some(k);
                }
                b"tool_input" => {
                    input.clear();
                    p.canon_value(&mut input)?;
                    has_input = true;
                }
                _ => p.skip_value()?,
            }
        }
        match name_kind {
            Some(json::Kind::String) => {
                let input: &[u8] = if has_input { &input } else { b"{}" };
                calls.push(Call::from_canonical(&name, input));
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

/// A JSON reader with Python `json.loads` semantics that writes Python's canonical
/// `json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)` form directly,
/// without building a tree. Shared with the tool-call metrics.
pub(super) mod json {
    use std::fmt::Write as _;

    /// Deepest nesting of arrays/objects accepted (Python's own limit is its recursion limit,
    /// about 1000); keeps the recursive reader far from the end of a thread's stack.
    pub const MAX_DEPTH: u32 = 512;

    /// Python 3.11's default `sys.get_int_max_str_digits()`: `json.loads` refuses longer ints.
    const MAX_INT_DIGITS: usize = 4300;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct JsonError {
        pub position: usize,
        pub message: &'static str,
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Kind {
        Null,
        Bool,
        Number,
        String,
        Array,
        Object,
    }

    impl Kind {
        pub fn describe(self) -> &'static str {
            match self {
                Kind::Null => "null",
                Kind::Bool => "a boolean",
                Kind::Number => "a number",
                Kind::String => "a string",
                Kind::Array => "an array",
                Kind::Object => "an object",
            }
        }
    }

    #[derive(Clone, Copy, PartialEq, Eq)]
    enum StrMode {
        /// Validate only.
        Skip,
        /// Append the decoded string (WTF-8, no quotes).
        Raw,
        /// Append the quoted, Python-escaped string.
        Canon,
    }

    /// One member of an object being canonicalised: its decoded key (in `Parser::keys`) and its
    /// `"key":value` segment in the output.
    struct Member {
        key: (usize, usize),
        seg: (usize, usize),
    }

    pub struct Parser<'a> {
        b: &'a [u8],
        pos: usize,
        depth: u32,
        // Scratch shared by all nesting levels, used as stacks (truncated on the way out).
        members: Vec<Member>,
        keys: Vec<u8>,
        tmp: Vec<u8>,
    }

    fn is_ws(c: u8) -> bool {
        matches!(c, b' ' | b'\t' | b'\n' | b'\r')
    }

    impl<'a> Parser<'a> {
        pub fn new(text: &'a str) -> Parser<'a> {
            Parser {
                b: text.as_bytes(),
                pos: 0,
                depth: 0,
                members: Vec::new(),
                keys: Vec::new(),
                tmp: Vec::new(),
            }
        }

        fn err<T>(&self, message: &'static str) -> Result<T, JsonError> {
            Err(JsonError {
                position: self.pos,
                message,
            })
        }

        fn ws(&mut self) {
            while self.pos < self.b.len() && is_ws(self.b[self.pos]) {
                self.pos += 1;
            }
        }

        fn peek(&self) -> Option<u8> {
            self.b.get(self.pos).copied()
        }

        fn enter(&mut self) -> Result<(), JsonError> {
            self.depth += 1;
            if self.depth > MAX_DEPTH {
                return self.err("nesting too deep");
            }
            Ok(())
        }

        /// The kind of the next value (after whitespace), without consuming it.
        pub fn peek_kind(&mut self) -> Result<Kind, JsonError> {
            self.ws();
            match self.peek() {
                Some(b'{') => Ok(Kind::Object),
                Some(b'[') => Ok(Kind::Array),
                Some(b'"') => Ok(Kind::String),
                Some(b't' | b'f') => Ok(Kind::Bool),
                Some(b'n') => Ok(Kind::Null),
                Some(b'-' | b'0'..=b'9' | b'N' | b'I') => Ok(Kind::Number),
                None => self.err("expected a value, found the end of the text"),
                Some(_) => self.err("expected a value"),
            }
        }

        /// Only whitespace may follow the value.
        pub fn finish(&mut self) -> Result<(), JsonError> {
            self.ws();
            if self.pos != self.b.len() {
                return self.err("extra data after the JSON value");
            }
            Ok(())
        }

        pub fn begin_array(&mut self) -> Result<(), JsonError> {
            self.ws();
            if self.peek() != Some(b'[') {
                return self.err("expected '['");
            }
            self.pos += 1;
            self.enter()
        }

        /// Moves to the next element; `false` (and the `]` consumed) at the end.
        pub fn array_next(&mut self, first: &mut bool) -> Result<bool, JsonError> {
            self.ws();
            let close = match self.peek() {
                Some(b']') => true,
                _ if *first => false,
                Some(b',') => {
                    self.pos += 1;
                    false
                }
                None => return self.err("unterminated array"),
                _ => return self.err("expected ',' or ']'"),
            };
            // A `]` right after a comma is left to the value reader, which rejects it.
            if close {
                self.pos += 1;
                self.depth -= 1;
                return Ok(false);
            }
            *first = false;
            Ok(true)
        }

        pub fn begin_object(&mut self) -> Result<(), JsonError> {
            self.ws();
            if self.peek() != Some(b'{') {
                return self.err("expected '{'");
            }
            self.pos += 1;
            self.enter()
        }

        /// Reads the next key (decoded, into `key`) and the `:`; `false` (and the `}` consumed)
        /// at the end.
        pub fn object_next_key(
            &mut self,
            first: &mut bool,
            key: &mut Vec<u8>,
        ) -> Result<bool, JsonError> {
            self.ws();
            match self.peek() {
                Some(b'}') => {
                    self.pos += 1;
                    self.depth -= 1;
                    return Ok(false);
                }
                Some(b',') if !*first => {
                    self.pos += 1;
                    self.ws();
                }
                None => return self.err("unterminated object"),
                _ if !*first => return self.err("expected ',' or '}'"),
                _ => {}
            }
            if self.peek() != Some(b'"') {
                return self.err("expected a string key");
            }
            *first = false;
            key.clear();
            self.string(StrMode::Raw, key)?;
            self.colon()
        }

        fn colon(&mut self) -> Result<bool, JsonError> {
            self.ws();
            if self.peek() != Some(b':') {
                return self.err("expected ':'");
            }
            self.pos += 1;
            Ok(true)
        }

        /// Reads a string value, appending it decoded (WTF-8) to `out`.
        pub fn string_raw(&mut self, out: &mut Vec<u8>) -> Result<(), JsonError> {
            self.ws();
            if self.peek() != Some(b'"') {
                return self.err("expected a string");
            }
            self.string(StrMode::Raw, out)
        }

        /// Reads and validates one value.
        pub fn skip_value(&mut self) -> Result<(), JsonError> {
            self.ws();
            match self.peek() {
                Some(b'{') => {
                    self.pos += 1;
                    self.enter()?;
                    let mut first = true;
                    let mut dummy = Vec::new();
                    loop {
                        self.ws();
                        match self.peek() {
                            Some(b'}') if first => break,
                            _ if first => {}
                            Some(b',') => {
                                self.pos += 1;
                                self.ws();
                            }
                            Some(b'}') => break,
                            None => return self.err("unterminated object"),
                            _ => return self.err("expected ',' or '}'"),
                        }
                        first = false;
                        if self.peek() != Some(b'"') {
                            return self.err("expected a string key");
                        }
                        self.string(StrMode::Skip, &mut dummy)?;
                        self.colon()?;
                        self.skip_value()?;
                    }
                    self.pos += 1;
                    self.depth -= 1;
                    Ok(())
                }
                Some(b'[') => {
                    self.pos += 1;
                    self.enter()?;
                    let mut first = true;
                    loop {
                        self.ws();
                        match self.peek() {
                            Some(b']') if first => break,
                            _ if first => {}
                            Some(b',') => self.pos += 1,
                            Some(b']') => break,
                            None => return self.err("unterminated array"),
                            _ => return self.err("expected ',' or ']'"),
                        }
                        first = false;
                        self.skip_value()?;
                    }
                    self.pos += 1;
                    self.depth -= 1;
                    Ok(())
                }
                Some(b'"') => self.string(StrMode::Skip, &mut Vec::new()),
                _ => self.scalar(None),
            }
        }

        /// Reads one value and appends its canonical JSON to `out`.
        pub fn canon_value(&mut self, out: &mut Vec<u8>) -> Result<(), JsonError> {
            self.ws();
            match self.peek() {
                Some(b'{') => self.canon_object(out),
                Some(b'[') => {
                    self.pos += 1;
                    self.enter()?;
                    out.push(b'[');
                    let mut first = true;
                    loop {
                        self.ws();
                        match self.peek() {
                            Some(b']') if first => break,
                            _ if first => {}
                            Some(b',') => {
                                self.pos += 1;
                                out.push(b',');
                            }
                            Some(b']') => break,
                            None => return self.err("unterminated array"),
                            _ => return self.err("expected ',' or ']'"),
                        }
                        first = false;
                        self.canon_value(out)?;
                    }
                    self.pos += 1;
                    self.depth -= 1;
                    out.push(b']');
                    Ok(())
                }
                Some(b'"') => self.string(StrMode::Canon, out),
                _ => self.scalar(Some(out)),
            }
        }

        fn canon_object(&mut self, out: &mut Vec<u8>) -> Result<(), JsonError> {
            self.pos += 1;
            self.enter()?;
            let members_base = self.members.len();
            let keys_base = self.keys.len();
            let body = out.len() + 1;
            out.push(b'{');
            let mut first = true;
            loop {
                self.ws();
                match self.peek() {
                    Some(b'}') => break,
                    Some(b',') if !first => {
                        self.pos += 1;
                        self.ws();
                    }
                    None => return self.err("unterminated object"),
                    _ if !first => return self.err("expected ',' or '}'"),
                    _ => {}
                }
                if self.peek() != Some(b'"') {
                    return self.err("expected a string key");
                }
                if !first {
                    out.push(b',');
                }
                first = false;
                let mut keys = std::mem::take(&mut self.keys);
                let k0 = keys.len();
                let r = self.string(StrMode::Raw, &mut keys);
                let k1 = keys.len();
                let seg0 = out.len();
                write_canon_str(&keys[k0..k1], out);
                self.keys = keys;
                r?;
                self.colon()?;
                out.push(b':');
                self.canon_value(out)?;
                self.members.push(Member {
                    key: (k0, k1),
                    seg: (seg0, out.len()),
                });
            }
            self.pos += 1;
            self.depth -= 1;

            let Parser {
                members, keys, tmp, ..
            } = self;
            let ms = &mut members[members_base..];
            let key = |m: &Member| &keys[m.key.0..m.key.1];
            if !ms.windows(2).all(|w| key(&w[0]) < key(&w[1])) {
                // Sort by decoded key (code point order, as Python's sort_keys); the sort is
                // stable, so among repeated keys the last one written is the last of its run,
                // and that is the value a Python dict keeps.
                ms.sort_by(|a, b| key(a).cmp(key(b)));
                tmp.clear();
                tmp.extend_from_slice(&out[body..]);
                out.truncate(body);
                let mut first = true;
                for i in 0..ms.len() {
                    if i + 1 < ms.len() && key(&ms[i]) == key(&ms[i + 1]) {
                        continue;
                    }
                    if !first {
                        out.push(b',');
                    }
                    first = false;
                    out.extend_from_slice(&tmp[ms[i].seg.0 - body..ms[i].seg.1 - body]);
                }
            }
            members.truncate(members_base);
            keys.truncate(keys_base);
            out.push(b'}');
            Ok(())
        }

        /// `true`, `false`, `null`, `NaN`, `Infinity`, `-Infinity` or a number.
        fn scalar(&mut self, out: Option<&mut Vec<u8>>) -> Result<(), JsonError> {
            let rest = &self.b[self.pos..];
            for lit in ["true", "false", "null", "NaN", "Infinity", "-Infinity"] {
                if rest.starts_with(lit.as_bytes()) {
                    self.pos += lit.len();
                    if let Some(out) = out {
                        out.extend_from_slice(lit.as_bytes());
                    }
                    return Ok(());
                }
            }
            self.number(out)
        }

        fn digits(&mut self) -> usize {
            let start = self.pos;
            while self.pos < self.b.len() && self.b[self.pos].is_ascii_digit() {
                self.pos += 1;
            }
            self.pos - start
        }

        /// Python's number grammar `-?(0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?`; without fraction
        /// and exponent it is an `int`, else a `float`.
        fn number(&mut self, out: Option<&mut Vec<u8>>) -> Result<(), JsonError> {
            let start = self.pos;
            let negative = self.peek() == Some(b'-');
            if negative {
                self.pos += 1;
            }
            let int_start = self.pos;
            match self.peek() {
                Some(b'0') => self.pos += 1,
                Some(b'1'..=b'9') => {
                    self.digits();
                }
                _ => return self.err("expected a value"),
            }
            let int_end = self.pos;
            let mut is_float = false;
            if self.peek() == Some(b'.') {
                self.pos += 1;
                if self.digits() == 0 {
                    return self.err("expected a digit after '.'");
                }
                is_float = true;
            }
            if matches!(self.peek(), Some(b'e' | b'E')) {
                self.pos += 1;
                if matches!(self.peek(), Some(b'+' | b'-')) {
                    self.pos += 1;
                }
                if self.digits() == 0 {
                    return self.err("expected a digit in the exponent");
                }
                is_float = true;
            }
            if !is_float {
                if int_end - int_start > MAX_INT_DIGITS {
                    self.pos = start;
                    return self.err("integer longer than 4300 digits");
                }
                if let Some(out) = out {
                    // JSON allows no leading zeros, so the text is Python's str(int) except -0.
                    let digits = &self.b[int_start..int_end];
                    if negative && digits != b"0" {
                        out.push(b'-');
                    }
                    out.extend_from_slice(digits);
                }
                return Ok(());
            }
            if let Some(out) = out {
                // Both Python's float() and Rust's parse round correctly, so they agree.
                let text = std::str::from_utf8(&self.b[start..self.pos]).expect("ASCII");
                let x: f64 = text
                    .parse()
                    .expect("JSON number grammar is valid Rust float text");
                write_py_float(x, out);
            }
            Ok(())
        }

        /// Reads a string starting at its opening quote.
        fn string(&mut self, mode: StrMode, out: &mut Vec<u8>) -> Result<(), JsonError> {
            self.pos += 1;
            if mode == StrMode::Canon {
                out.push(b'"');
            }
            loop {
                let run = self.pos;
                self.pos = plain_run_end(self.b, self.pos);
                while self.pos < self.b.len() {
                    let c = self.b[self.pos];
                    if c == b'"' || c == b'\\' || c < 0x20 {
                        break;
                    }
                    self.pos += 1;
                }
                // These bytes need no escaping in Python's output either.
                if mode != StrMode::Skip {
                    out.extend_from_slice(&self.b[run..self.pos]);
                }
                match self.peek() {
                    Some(b'"') => {
                        self.pos += 1;
                        if mode == StrMode::Canon {
                            out.push(b'"');
                        }
                        return Ok(());
                    }
                    Some(b'\\') => {
                        let cp = self.escape()?;
                        match mode {
                            StrMode::Skip => {}
                            StrMode::Raw => push_wtf8(cp, out),
                            StrMode::Canon => push_canon_char(cp, out),
                        }
                    }
                    Some(_) => return self.err("invalid control character in string"),
                    None => return self.err("unterminated string"),
                }
            }
        }

        fn hex4(&mut self) -> Result<u32, JsonError> {
            let Some(h) = self.b.get(self.pos..self.pos + 4) else {
                return self.err("invalid \\uXXXX escape");
            };
            let mut v = 0;
            for &c in h {
                let d = match c {
                    b'0'..=b'9' => c - b'0',
                    b'a'..=b'f' => c - b'a' + 10,
                    b'A'..=b'F' => c - b'A' + 10,
                    _ => return self.err("invalid \\uXXXX escape"),
                };
                v = v * 16 + d as u32;
            }
            self.pos += 4;
            Ok(v)
        }

        /// Decodes one escape (at its backslash) to a code point, which may be a lone
        /// surrogate: Python joins `\uD8xx\uDCxx` pairs and keeps unpaired halves.
        fn escape(&mut self) -> Result<u32, JsonError> {
            self.pos += 1;
            let Some(c) = self.peek() else {
                return self.err("unterminated string");
            };
            self.pos += 1;
            Ok(match c {
                b'"' => 0x22,
                b'\\' => 0x5c,
                b'/' => 0x2f,
                b'b' => 0x08,
                b'f' => 0x0c,
                b'n' => 0x0a,
                b'r' => 0x0d,
                b't' => 0x09,
                b'u' => {
                    let hi = self.hex4()?;
                    if (0xd800..0xdc00).contains(&hi)
                        && self.b.get(self.pos..self.pos + 2) == Some(b"\\u")
                    {
                        let save = self.pos;
                        self.pos += 2;
                        let lo = self.hex4()?;
                        if (0xdc00..0xe000).contains(&lo) {
                            return Ok(0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00));
                        }
                        self.pos = save;
                    }
                    hi
                }
                _ => {
                    self.pos -= 1;
                    return self.err("invalid escape");
                }
            })
        }
    }

    /// Skips 8 bytes at a time while none is `"`, `\\` or a control character (SWAR); the
    /// byte loop after it finds the exact stop.
    fn plain_run_end(b: &[u8], mut pos: usize) -> usize {
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGH: u64 = 0x8080_8080_8080_8080;
        let has_zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
        while let Some(chunk) = b.get(pos..pos + 8) {
            let w = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
            let stop = has_zero(w ^ (ONES * b'"' as u64))
                | has_zero(w ^ (ONES * b'\\' as u64))
                | (w.wrapping_sub(ONES * 0x20) & !w & HIGH);
            if stop != 0 {
                break;
            }
            pos += 8;
        }
        pos
    }

    /// UTF-8 encoding extended to surrogate code points (WTF-8), so a lone surrogate stays
    /// distinct from everything else.
    fn push_wtf8(cp: u32, out: &mut Vec<u8>) {
        if cp < 0x80 {
            out.push(cp as u8);
        } else if cp < 0x800 {
            out.extend_from_slice(&[0xc0 | (cp >> 6) as u8, 0x80 | (cp & 0x3f) as u8]);
        } else if cp < 0x10000 {
            out.extend_from_slice(&[
                0xe0 | (cp >> 12) as u8,
                0x80 | ((cp >> 6) & 0x3f) as u8,
                0x80 | (cp & 0x3f) as u8,
            ]);
        } else {
            out.extend_from_slice(&[
                0xf0 | (cp >> 18) as u8,
                0x80 | ((cp >> 12) & 0x3f) as u8,
                0x80 | ((cp >> 6) & 0x3f) as u8,
                0x80 | (cp & 0x3f) as u8,
            ]);
        }
    }

    /// One character as Python's `json.dumps(ensure_ascii=False)` writes it inside a string.
    fn push_canon_char(cp: u32, out: &mut Vec<u8>) {
        match cp {
            0x22 => out.extend_from_slice(b"\\\""),
            0x5c => out.extend_from_slice(b"\\\\"),
            0x0a => out.extend_from_slice(b"\\n"),
            0x0d => out.extend_from_slice(b"\\r"),
            0x09 => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            0..0x20 => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[(cp >> 4) as usize]);
                out.push(HEX[(cp & 15) as usize]);
            }
            _ => push_wtf8(cp, out),
        }
    }

    /// A decoded (WTF-8) string as Python's canonical JSON string. Bytes ≥ 0x80 only occur in
    /// multi-byte sequences, which are copied unchanged.
    pub fn write_canon_str(raw: &[u8], out: &mut Vec<u8>) {
        out.push(b'"');
        let mut run = 0;
        for (i, &c) in raw.iter().enumerate() {
            if c < 0x20 || c == b'"' || c == b'\\' {
                out.extend_from_slice(&raw[run..i]);
                push_canon_char(c as u32, out);
                run = i + 1;
            }
        }
        out.extend_from_slice(&raw[run..]);
        out.push(b'"');
    }

    /// Python's `repr(float)` (what `json.dumps` writes): shortest round-trip digits,
    /// positional notation for decimal exponents -4 ≤ e < 16 (with `.0` if integral),
    /// otherwise `d.ddde±XX`; `NaN`, `Infinity`, `-Infinity`.
    pub fn write_py_float(x: f64, out: &mut Vec<u8>) {
        if x.is_nan() {
            out.extend_from_slice(b"NaN");
            return;
        }
        if x.is_infinite() {
            out.extend_from_slice(if x > 0.0 { b"Infinity" } else { b"-Infinity" });
            return;
        }
        if x.is_sign_negative() {
            out.push(b'-');
        }
        if x == 0.0 {
            out.extend_from_slice(b"0.0");
            return;
        }
        let (digits, exp) = shortest_digits(x.abs());
        let n = digits.len() as i32;
        // Value = 0.d1d2... × 10^decpt, Python's notation in float_repr_style 'short'.
        let decpt = exp + 1;
        if decpt <= -4 || decpt > 16 {
            out.push(digits[0]);
            if n > 1 {
                out.push(b'.');
                out.extend_from_slice(&digits[1..]);
            }
            let e = decpt - 1;
            out.push(b'e');
            out.push(if e < 0 { b'-' } else { b'+' });
            let e = e.unsigned_abs();
            if e < 10 {
                out.push(b'0');
            }
            out.extend_from_slice(e.to_string().as_bytes());
        } else if decpt <= 0 {
            out.extend_from_slice(b"0.");
            out.resize(out.len() + (-decpt) as usize, b'0');
            out.extend_from_slice(&digits);
        } else if decpt >= n {
            out.extend_from_slice(&digits);
            out.resize(out.len() + (decpt - n) as usize, b'0');
            out.extend_from_slice(b".0");
        } else {
            out.extend_from_slice(&digits[..decpt as usize]);
            out.push(b'.');
            out.extend_from_slice(&digits[decpt as usize..]);
        }
    }

    /// Digits and exponent of `{:e}` output (`d.ddd` × 10^exp), digits without the point.
    fn sci_parts(sci: &str) -> (Vec<u8>, i32) {
        let (mantissa, exp) = sci.split_once('e').expect("LowerExp has an 'e'");
        let digits = mantissa.bytes().filter(|&c| c != b'.').collect();
        (digits, exp.parse().expect("LowerExp exponent"))
    }

    /// The shortest digits that round-trip to `x` (> 0), closest to `x`, and on an exact tie
    /// between two such digit strings the one with an even last digit: Python's repr (David
    /// Gay's dtoa, mode 0). Rust's `{:e}` agrees except on those ties, where it rounds up.
    fn shortest_digits(x: f64) -> (Vec<u8>, i32) {
        let mut sci = String::with_capacity(32);
        write!(sci, "{x:e}").expect("write to String");
        let (digits, exp) = sci_parts(&sci);
        let n = digits.len();
        if digits[n - 1] % 2 == 0 {
            return (digits, exp);
        }
        // A tie needs x's exact decimal expansion to be n digits followed by a single 5.
        // `{:.Ne}` rounds exactly, so check the cheap n+1-digit form first, then the full
        // expansion (a double has at most 767 significant digits).
        sci.clear();
        write!(sci, "{x:.n$e}").expect("write to String");
        if !sci.split_once('e').is_some_and(|(m, _)| m.ends_with('5')) {
            return (digits, exp);
        }
        sci.clear();
        write!(sci, "{x:.800e}").expect("write to String");
        let (full, full_exp) = sci_parts(&sci);
        if full[n] != b'5' || full[n + 1..].iter().any(|&d| d != b'0') {
            return (digits, exp);
        }
        // Exact tie between full[..n] and full[..n] + 1: take the even one.
        let mut t = full[..n].to_vec();
        let mut e = full_exp;
        if t[n - 1] % 2 == 1 {
            let mut i = n;
            loop {
                if i == 0 {
                    t.insert(0, b'1');
                    t.pop();
                    e += 1;
                    break;
                }
                i -= 1;
                if t[i] == b'9' {
                    t[i] = b'0';
                } else {
                    t[i] += 1;
                    break;
                }
            }
        }
        while t.len() > 1 && t[t.len() - 1] == b'0' {
            t.pop();
        }
        // dtoa takes the even digit only if it round-trips too: next to a power of two the
        // rounding interval below x is half as wide, and then only the odd one does.
        sci.clear();
        sci.push(t[0] as char);
        sci.push('.');
        sci.extend(t[1..].iter().map(|&d| d as char));
        write!(sci, "0e{e}").expect("write to String");
        if sci.parse::<f64>() == Ok(x) {
            (t, e)
        } else {
            (digits, exp)
        }
    }

    /// Canonical JSON of a `serde_json::Value`, the same bytes [`Parser::canon_value`] writes
    /// for the equivalent text. Works whatever serde_json features the build enables
    /// (`preserve_order` maps are sorted here; numbers go through their text form).
    pub fn canon_serde(v: &serde_json::Value, out: &mut Vec<u8>) {
        use serde_json::Value;
        match v {
            Value::Null => out.extend_from_slice(b"null"),
            Value::Bool(true) => out.extend_from_slice(b"true"),
            Value::Bool(false) => out.extend_from_slice(b"false"),
            Value::Number(n) => {
                let text = n.to_string();
                let mut p = Parser {
                    b: text.as_bytes(),
                    ..Parser::new("")
                };
                if p.number(Some(out)).is_err() || p.pos != text.len() {
                    // Not reachable with serde_json's number forms; keep its text.
                    out.extend_from_slice(text.as_bytes());
                }
            }
            Value::String(s) => write_canon_str(s.as_bytes(), out),
            Value::Array(items) => {
                out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    canon_serde(item, out);
                }
                out.push(b']');
            }
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                // Keys of a serde_json map are unique; only the order may need fixing.
                if !entries.windows(2).all(|w| w[0].0 < w[1].0) {
                    entries.sort_by(|a, b| a.0.cmp(b.0));
                }
                out.push(b'{');
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write_canon_str(k.as_bytes(), out);
                    out.push(b':');
                    canon_serde(v, out);
                }
                out.push(b'}');
            }
        }
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
