//! A JSON reader with Python `json.loads` semantics that writes Python's canonical
//! `json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)` form directly,
//! without building a tree.
//!
//! Written here rather than taken from serde_json because the agent metrics must agree with
//! the Python reference byte for byte: Python accepts `NaN`/`Infinity`, keeps integers of any
//! length (up to 4300 digits), keeps lone surrogates in strings, lets a repeated key's last
//! value win, and prints floats with `repr`; serde_json differs on each. The trajectory and
//! tool-call metrics read their JSON arguments with it.

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
