//! Turning a judge model's reply into a score and a reason.
//!
//! We ask for structured output (a JSON object with an integer `score` and a `reason`), but
//! many OpenAI-compatible endpoints ignore `response_format`, so the reply may be JSON in a
//! code fence, JSON inside prose, or prose with a "Score: 4" line. [`parse_judgement`] accepts
//! all of these and refuses to guess: a missing, out-of-range, fractional or contradictory
//! score is an error, which the judge reports as `status = 'error'` rather than as a number.

use std::fmt;

use serde_json::Value;

use crate::common::excerpt::truncate;

/// The longest reason we keep, in characters.
pub const MAX_REASON_CHARS: usize = 2000;

/// How many `{` we try as the start of a JSON object before giving up on JSON.
const MAX_JSON_CANDIDATES: usize = 64;

/// A parsed judgement.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    /// The score, an integer in `[min, max]` (as Float64 for the SQL result).
    pub score: f64,
    /// The model's explanation (possibly empty), at most [`MAX_REASON_CHARS`] characters.
    pub reason: String,
}

/// Why a reply could not be turned into a score.
#[derive(Debug, Clone, PartialEq)]
pub enum ParseError {
    /// The caller's scale is empty (`min > max`).
    InvalidScale { min: i64, max: i64 },
    /// Neither a JSON `score` nor a labelled score ("Score: 4") was found.
    NoScore,
    /// A `score` field that is not a number (e.g. `null`, `"high"`).
    InvalidScore(String),
    /// A fractional score such as 3.5. The rubric asks for an integer; rounding it would be a
    /// guess about what the model meant.
    NotAnInteger(f64),
    /// A score outside `[min, max]`.
    OutOfRange { score: f64, min: i64, max: i64 },
    /// A score given on another scale ("4/10" when the scale ends at 5).
    ScaleMismatch { denominator: i64, max: i64 },
    /// Free text naming different scores, e.g. "Score: 3 ... Score: 4".
    Conflicting(Vec<f64>),
    /// A range instead of a score, e.g. "Score: 3-4".
    Ambiguous(String),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidScale { min, max } => write!(f, "invalid score scale [{min}, {max}]"),
            Self::NoScore => write!(f, "the judge reply contains no score"),
            Self::InvalidScore(v) => write!(f, "the judge reply's score is not a number: {v}"),
            Self::NotAnInteger(s) => write!(f, "the judge reply's score {s} is not an integer"),
            Self::OutOfRange { score, min, max } => {
                write!(
                    f,
                    "the judge reply's score {score} is outside [{min}, {max}]"
                )
            }
            Self::ScaleMismatch { denominator, max } => write!(
                f,
                "the judge reply scores out of {denominator}, but the scale ends at {max}"
            ),
            Self::Conflicting(scores) => {
                let list: Vec<String> = scores.iter().map(|s| s.to_string()).collect();
                write!(
                    f,
                    "the judge reply gives conflicting scores: {}",
                    list.join(", ")
                )
            }
            Self::Ambiguous(text) => {
                write!(f, "the judge reply gives a range, not a score: {text}")
            }
        }
    }
}

impl std::error::Error for ParseError {}

/// Parses a judge reply into an integer score in `[min, max]` and a reason.
///
/// Tried in order:
/// 1. the first balanced JSON object (anywhere: bare, in a ```json fence, amid prose) that has
///    a `score` key; its score may be an integer, an integral float (`4.0`) or a numeric string
///    (`"4"`); the reason is its `reason`, `explanation` or `rationale` field;
/// 2. labelled scores in free text: `Score: 4`, `score = 4/5`, `**Score:** 4`, `Rating: 4`,
///    `Score (1-5): 4`, `a score of 4 out of 5`; every one found must agree, and a denominator
///    must equal `max`; the reason is the text with the scores cut out;
/// 3. a reply that is nothing but a number (`4`, `4/5`).
pub fn parse_judgement(content: &str, min: i64, max: i64) -> Result<Judgement, ParseError> {
    if min > max {
        return Err(ParseError::InvalidScale { min, max });
    }
    if let Some(object) = first_scored_object(content) {
        return from_json(&object, min, max);
    }
    from_text(content, min, max)
}

/// The confidence of a reply's score from its log-probabilities: at the token that states
/// the score (the first after the last `"score"` key; in a fused answer, the first after the
/// key of metric `part`), the probability of that value among the scale's values in the
/// token's alternatives (the token's own probability when they name none). `None` when the
/// reply carries no such token.
pub fn score_confidence(
    tokens: &[crate::llm::request::TokenLogprob],
    score: f64,
    min: i64,
    max: i64,
    part: Option<&str>,
) -> Option<f64> {
    let text: String = tokens.iter().map(|t| t.token.as_str()).collect();
    let lower = text.to_ascii_lowercase();
    let key = match part {
        Some(p) => {
            let from = lower.find(&format!("\"{}\"", p.to_ascii_lowercase()))?;
            from + lower[from..].find("score")?
        }
        None => lower.rfind("\"score\"").or_else(|| lower.rfind("score"))?,
    };
    let stated = (score as i64).to_string();
    let at = key + text[key..].find(&stated)?;
    let mut offset = 0;
    for t in tokens {
        let end = offset + t.token.len();
        if at < end {
            if t.token.trim().parse::<i64>().ok() != Some(score as i64) {
                return None;
            }
            let chosen = t.logprob.exp();
            if t.top.is_empty() {
                return Some(chosen.min(1.0));
            }
            let mut values: Vec<(i64, f64)> = Vec::new();
            for (token, logprob) in &t.top {
                if let Ok(v) = token.trim().parse::<i64>()
                    && (min..=max).contains(&v)
                    && !values.iter().any(|(seen, _)| *seen == v)
                {
                    values.push((v, logprob.exp()));
                }
            }
            if !values.iter().any(|(v, _)| *v == score as i64) {
                values.push((score as i64, chosen));
            }
            let total: f64 = values.iter().map(|(_, p)| p).sum();
            return Some(if total > 0.0 {
                (chosen / total).min(1.0)
            } else {
                chosen
            });
        }
        offset = end;
    }
    None
}

/// One part of a fused answer: its judgement or why there is none, and the length of its
/// part of the reply (what its share of the completion tokens follows).
pub type FusedPart = (Result<Judgement, String>, usize);

/// Parses a fused reply: one JSON object keyed by metric (`parts`: name, min, max), each
/// value a judgement object read as [`parse_judgement`] reads one. An error when the reply
/// holds no such object; else each part's judgement, or why it is missing or unusable.
pub fn parse_fused(
    content: &str,
    parts: &[(&str, i64, i64)],
) -> Result<Vec<FusedPart>, ParseError> {
    let names: Vec<&str> = parts.iter().map(|(n, _, _)| *n).collect();
    let bytes = content.as_bytes();
    let starts = bytes.iter().enumerate().filter(|(_, b)| **b == b'{');
    for (start, _) in starts.take(MAX_JSON_CANDIDATES) {
        let Some(end) = balanced_object_end(bytes, start) else {
            continue;
        };
        let Ok(Value::Object(map)) = serde_json::from_str(&content[start..end]) else {
            continue;
        };
        if !names
            .iter()
            .any(|n| matches!(field(&map, &[n]), Some(Value::Object(_))))
        {
            continue;
        }
        return Ok(parts
            .iter()
            .map(|(name, min, max)| match field(&map, &[name]) {
                Some(Value::Object(part)) => {
                    let length = Value::Object(part.clone()).to_string().len();
                    let judgement = if field(part, &["score"]).is_some() {
                        from_json(part, *min, *max).map_err(|e| e.to_string())
                    } else {
                        Err(ParseError::NoScore.to_string())
                    };
                    (judgement, length)
                }
                Some(other) => (
                    Err(format!(
                        "the answer for {name} is not an object: {}",
                        truncate(&other.to_string(), 50)
                    )),
                    other.to_string().len(),
                ),
                None => (Err(format!("the answer has no {name}")), 0),
            })
            .collect());
    }
    Err(ParseError::NoScore)
}

/// The first balanced `{...}` that parses as a JSON object with a `score` key.
fn first_scored_object(content: &str) -> Option<serde_json::Map<String, Value>> {
    let bytes = content.as_bytes();
    let starts = bytes.iter().enumerate().filter(|(_, b)| **b == b'{');
    for (start, _) in starts.take(MAX_JSON_CANDIDATES) {
        let Some(end) = balanced_object_end(bytes, start) else {
            continue;
        };
        if let Ok(Value::Object(map)) = serde_json::from_str(&content[start..end])
            && field(&map, &["score"]).is_some()
        {
            return Some(map);
        }
    }
    None
}

/// The end (exclusive) of the object opening at `start`, skipping braces inside strings.
fn balanced_object_end(bytes: &[u8], start: usize) -> Option<usize> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, &b) in bytes.iter().enumerate().skip(start) {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// A field by any of `names`, ignoring case (models write `Score` as often as `score`).
fn field<'a>(map: &'a serde_json::Map<String, Value>, names: &[&str]) -> Option<&'a Value> {
    names.iter().find_map(|name| {
        map.iter()
            .find(|(k, _)| k.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    })
}

fn from_json(
    map: &serde_json::Map<String, Value>,
    min: i64,
    max: i64,
) -> Result<Judgement, ParseError> {
    let value = field(map, &["score"]).expect("chosen for its score key");
    let score = match value {
        Value::Number(n) => match n.as_i64() {
            Some(i) => i as f64,
            None => n
                .as_f64()
                .ok_or_else(|| ParseError::InvalidScore(n.to_string()))?,
        },
        Value::String(s) => {
            let number = read_score_text(s.trim())
                .ok_or_else(|| ParseError::InvalidScore(format!("{s:?}")))?;
            check_denominator(number.denominator, max)?;
            number.value
        }
        other => return Err(ParseError::InvalidScore(truncate(&other.to_string(), 50))),
    };
    let score = check_score(score, min, max)?;
    let reason = match field(map, &["reason", "explanation", "rationale"]) {
        Some(Value::String(s)) => s.trim().to_string(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    Ok(Judgement {
        score,
        reason: truncate(&reason, MAX_REASON_CHARS),
    })
}

fn check_score(score: f64, min: i64, max: i64) -> Result<f64, ParseError> {
    if !score.is_finite() {
        return Err(ParseError::InvalidScore(score.to_string()));
    }
    if score.fract() != 0.0 {
        return Err(ParseError::NotAnInteger(score));
    }
    if score < min as f64 || score > max as f64 {
        return Err(ParseError::OutOfRange { score, min, max });
    }
    Ok(score)
}

fn check_denominator(denominator: Option<i64>, max: i64) -> Result<(), ParseError> {
    match denominator {
        Some(d) if d != max => Err(ParseError::ScaleMismatch {
            denominator: d,
            max,
        }),
        _ => Ok(()),
    }
}

/// A number as written in text, with an optional "/5" or "out of 5".
#[derive(Debug, Clone, Copy)]
struct ScoreText {
    value: f64,
    denominator: Option<i64>,
    /// Byte length consumed.
    len: usize,
}

/// Reads `4`, `-1`, `3.5`, `4/5`, `4 / 5`, `4 out of 5` at the start of `s`. A number glued
/// to letters (`4th`, `3x`) is not a score.
fn read_score_text(s: &str) -> Option<ScoreText> {
    let (value, mut pos) = read_number(s)?;
    let mut denominator = None;
    let rest = &s[pos..];
    let after_space = rest.trim_start_matches([' ', '\t']);
    let skipped = rest.len() - after_space.len();
    if let Some(tail) = after_space.strip_prefix('/') {
        let tail_trimmed = tail.trim_start_matches([' ', '\t']);
        if let Some((d, len)) = read_number(tail_trimmed) {
            denominator = Some(d as i64);
            pos += skipped + 1 + (tail.len() - tail_trimmed.len()) + len;
        }
    } else if after_space
        .get(..6)
        .is_some_and(|w| w.eq_ignore_ascii_case("out of"))
    {
        let tail = &after_space[6..];
        let tail_trimmed = tail.trim_start_matches([' ', '\t']);
        if tail.len() > tail_trimmed.len()
            && let Some((d, len)) = read_number(tail_trimmed)
        {
            denominator = Some(d as i64);
            pos += skipped + 6 + (tail.len() - tail_trimmed.len()) + len;
        }
    }
    Some(ScoreText {
        value,
        denominator,
        len: pos,
    })
}

/// A decimal number at the start of `s` and its byte length.
fn read_number(s: &str) -> Option<(f64, usize)> {
    let bytes = s.as_bytes();
    let mut pos = usize::from(bytes.first() == Some(&b'-'));
    let int_start = pos;
    while bytes.get(pos).is_some_and(u8::is_ascii_digit) {
        pos += 1;
    }
    if pos == int_start {
        return None;
    }
    if bytes.get(pos) == Some(&b'.') && bytes.get(pos + 1).is_some_and(u8::is_ascii_digit) {
        pos += 1;
        while bytes.get(pos).is_some_and(u8::is_ascii_digit) {
            pos += 1;
        }
    }
    if bytes
        .get(pos)
        .is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_')
    {
        return None;
    }
    Some((s[..pos].parse().ok()?, pos))
}

/// Markdown and quoting that may surround a label or a score.
fn is_filler(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'*' | b'_' | b'`' | b'"' | b'\'' | b'#')
}

/// A labelled score found in free text: its value and the byte span to cut from the reason.
#[derive(Debug)]
struct Labelled {
    number: ScoreText,
    span: (usize, usize),
}

fn from_text(content: &str, min: i64, max: i64) -> Result<Judgement, ParseError> {
    let found = labelled_scores(content)?;
    if found.is_empty() {
        return bare_number(content, min, max);
    }
    let mut distinct: Vec<f64> = Vec::new();
    for f in &found {
        if !distinct.contains(&f.number.value) {
            distinct.push(f.number.value);
        }
    }
    if distinct.len() > 1 {
        return Err(ParseError::Conflicting(distinct));
    }
    for f in &found {
        check_denominator(f.number.denominator, max)?;
    }
    let score = check_score(distinct[0], min, max)?;
    let spans: Vec<(usize, usize)> = found.iter().map(|f| f.span).collect();
    Ok(Judgement {
        score,
        reason: reason_without(content, &spans),
    })
}

/// Every "score"/"rating" label followed by a separator and a number.
fn labelled_scores(content: &str) -> Result<Vec<Labelled>, ParseError> {
    // ASCII lowercasing keeps byte offsets, so positions in `lower` index `content`.
    let lower = content.to_ascii_lowercase();
    let bytes = lower.as_bytes();
    let mut found = Vec::new();
    for label in ["score", "rating"] {
        for (start, _) in lower.match_indices(label) {
            let before_ok = start == 0 || !bytes[start - 1].is_ascii_alphanumeric();
            let end = start + label.len();
            let after_ok = bytes.get(end).is_none_or(|b| !b.is_ascii_alphanumeric());
            if !(before_ok && after_ok) {
                continue;
            }
            if let Some(labelled) = score_after_label(content, &lower, start, end)? {
                found.push(labelled);
            }
        }
    }
    found.sort_by_key(|f| f.span.0);
    Ok(found)
}

/// Reads `[filler] [(...)] [filler] (':' | '=' | 'is' | 'of') [filler] number` after a label.
fn score_after_label(
    content: &str,
    lower: &str,
    label_start: usize,
    label_end: usize,
) -> Result<Option<Labelled>, ParseError> {
    let bytes = lower.as_bytes();
    let skip = |mut p: usize, newlines: bool| {
        while bytes
            .get(p)
            .is_some_and(|&b| is_filler(b) || (newlines && (b == b'\n' || b == b'\r')))
        {
            p += 1;
        }
        p
    };
    let mut p = skip(label_end, false);
    // "Score (1-5): 4" / "Score [1-5]: 4": skip the scale note.
    if let Some(&open) = bytes.get(p).filter(|b| **b == b'(' || **b == b'[') {
        let close = if open == b'(' { b')' } else { b']' };
        let Some(len) = bytes[p..]
            .iter()
            .take_while(|b| **b != b'\n')
            .position(|b| *b == close)
        else {
            return Ok(None);
        };
        p = skip(p + len + 1, false);
    }
    let word_at = |p: usize, w: &str| {
        lower[p..].starts_with(w)
            && bytes
                .get(p + w.len())
                .is_some_and(|b| !b.is_ascii_alphanumeric())
    };
    match bytes.get(p) {
        Some(b':' | b'=') => p += 1,
        _ if word_at(p, "is") || word_at(p, "of") => p += 2,
        _ => return Ok(None),
    }
    p = skip(p, true);
    let Some(number) = read_score_text(&content[p..]) else {
        return Ok(None);
    };
    let mut end = p + number.len;
    // "3-4", "3 – 4", "3 to 4" name a range, not a score.
    let rest = lower[end..].trim_start_matches([' ', '\t']);
    let range_tail = ["-", "–", "to "]
        .iter()
        .find_map(|sep| rest.strip_prefix(sep))
        .map(|tail| tail.trim_start_matches([' ', '\t']));
    if range_tail.is_some_and(|tail| tail.as_bytes().first().is_some_and(u8::is_ascii_digit)) {
        let line_end = lower[p..].find('\n').map_or(lower.len(), |i| p + i);
        return Err(ParseError::Ambiguous(
            content[label_start..line_end].trim().to_string(),
        ));
    }
    // Cut closing markdown too ("**Score: 4**").
    while bytes
        .get(end)
        .is_some_and(|&b| matches!(b, b'*' | b'_' | b'`'))
    {
        end += 1;
    }
    // And opening markdown plus an "overall"/"final" qualifier before the label.
    let mut start = label_start;
    while start > 0 && matches!(bytes[start - 1], b'*' | b'_' | b'`' | b'#') {
        start -= 1;
    }
    for qualifier in ["overall ", "final "] {
        if lower[..start].ends_with(qualifier) {
            start -= qualifier.len();
            while start > 0 && matches!(bytes[start - 1], b'*' | b'_' | b'`' | b'#') {
                start -= 1;
            }
        }
    }
    Ok(Some(Labelled {
        number,
        span: (start, end),
    }))
}

/// A reply that is only a number, e.g. `4` or `**4/5**`.
fn bare_number(content: &str, min: i64, max: i64) -> Result<Judgement, ParseError> {
    let trimmed = content
        .trim()
        .trim_matches(|c: char| matches!(c, '*' | '_' | '`' | '"' | '\''))
        .trim()
        .trim_end_matches('.');
    match read_score_text(trimmed) {
        Some(number) if number.len == trimmed.len() => {
            check_denominator(number.denominator, max)?;
            Ok(Judgement {
                score: check_score(number.value, min, max)?,
                reason: String::new(),
            })
        }
        _ => Err(ParseError::NoScore),
    }
}

/// The reply with the score spans cut out, tidied line by line.
fn reason_without(content: &str, spans: &[(usize, usize)]) -> String {
    let mut text = String::with_capacity(content.len());
    let mut at = 0;
    for &(start, end) in spans {
        if start >= at {
            text.push_str(&content[at..start]);
            at = end;
        }
    }
    text.push_str(&content[at..]);
    let lines: Vec<&str> = text
        .lines()
        .map(|line| {
            let line = line.trim().trim_start_matches(|c: char| {
                c.is_whitespace() || matches!(c, '.' | ',' | ';' | ':' | '-' | '*' | '_' | '#')
            });
            strip_reason_label(line).trim_end()
        })
        .filter(|line| line.chars().any(char::is_alphanumeric))
        .collect();
    truncate(&lines.join("\n"), MAX_REASON_CHARS)
}

/// Drops a leading "Reason:" / "**Explanation:**" / "Rationale -" label.
fn strip_reason_label(line: &str) -> &str {
    for label in ["reason", "explanation", "rationale", "justification"] {
        if line.len() >= label.len()
            && line.is_char_boundary(label.len())
            && line[..label.len()].eq_ignore_ascii_case(label)
        {
            let rest = line[label.len()..].trim_start_matches(['*', '_', ' ']);
            if let Some(rest) = rest.strip_prefix([':', '-']) {
                return rest.trim_start_matches(['*', '_', ' ']);
            }
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use crate::llm::request::TokenLogprob;

    fn token(text: &str, p: f64, top: &[(&str, f64)]) -> TokenLogprob {
        TokenLogprob {
            token: text.to_string(),
            logprob: p.ln(),
            top: top.iter().map(|(t, p)| (t.to_string(), p.ln())).collect(),
        }
    }

    #[test]
    fn the_score_tokens_probability_among_the_scale() {
        // A reason holding the same digit first; the score token's alternatives include a
        // value off the scale (ignored).
        let tokens = [
            token(r#"{"reason":"4 points","score":"#, 1.0, &[]),
            token("4", 0.6, &[("4", 0.6), ("3", 0.2), ("9", 0.1)]),
            token("}", 1.0, &[]),
        ];
        let c = super::score_confidence(&tokens, 4.0, 1, 5, None).unwrap();
        assert!((c - 0.75).abs() < 1e-12, "{c}");
        // A fused answer: each metric's own score token.
        let tokens = [
            token(r#"{"fluency":{"score":"#, 1.0, &[]),
            token("5", 0.9, &[]),
            token(r#","reason":"r"},"relevance":{"score":"#, 1.0, &[]),
            token("5", 0.5, &[("5", 0.5), ("4", 0.5)]),
            token("}}", 1.0, &[]),
        ];
        let f = super::score_confidence(&tokens, 5.0, 1, 5, Some("fluency")).unwrap();
        let r = super::score_confidence(&tokens, 5.0, 1, 5, Some("relevance")).unwrap();
        assert!(
            (f - 0.9).abs() < 1e-12 && (r - 0.5).abs() < 1e-12,
            "{f} {r}"
        );
        assert_eq!(
            super::score_confidence(&tokens, 5.0, 1, 5, Some("coherence")),
            None
        );
    }
    use super::*;

    fn ok(content: &str) -> Judgement {
        parse_judgement(content, 1, 5).unwrap_or_else(|e| panic!("{content:?}: {e}"))
    }

    fn err(content: &str) -> ParseError {
        match parse_judgement(content, 1, 5) {
            Ok(j) => panic!("{content:?} parsed as {j:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn json_objects() {
        let cases = [
            (
                r#"{"score": 4, "reason": "well grounded"}"#,
                4.0,
                "well grounded",
            ),
            (r#"{"score": 4.0, "reason": "x"}"#, 4.0, "x"),
            (r#"{"score": "4", "reason": "x"}"#, 4.0, "x"),
            (r#"{"score": " 5 ", "explanation": "fine"}"#, 5.0, "fine"),
            (r#"{"Score": 2, "Reason": "caps"}"#, 2.0, "caps"),
            (r#"{"reason": "order", "score": 1}"#, 1.0, "order"),
            (r#"{"score": 3, "rationale": "why"}"#, 3.0, "why"),
            (r#"{"score": 3}"#, 3.0, ""),
            (r#"{"score": 3, "reason": null}"#, 3.0, ""),
            (r#"{"score": "3/5", "reason": "r"}"#, 3.0, "r"),
            (r#"{"score": 1e0, "reason": "exp"}"#, 1.0, "exp"),
        ];
        for (content, score, reason) in cases {
            let j = ok(content);
            assert_eq!((j.score, j.reason.as_str()), (score, reason), "{content}");
        }
    }

    #[test]
    fn json_in_fences_and_prose() {
        let fenced = "```json\n{\n  \"score\": 5,\n  \"reason\": \"All claims {cited}.\"\n}\n```";
        assert_eq!(ok(fenced).score, 5.0);
        assert_eq!(ok(fenced).reason, "All claims {cited}.");
        let prose = r#"Here is my evaluation: {"score": 2, "reason": "Two claims are unsupported."} Hope it helps!"#;
        let j = ok(prose);
        assert_eq!(
            (j.score, j.reason.as_str()),
            (2.0, "Two claims are unsupported.")
        );
        // An earlier object without a score is skipped; so is a broken one.
        let mixed = r#"{"note": "draft"} {"score": oops} {"score": 3, "reason": "r"}"#;
        assert_eq!(ok(mixed).score, 3.0);
        // A wrapper without a score key leads to the nested object that has one.
        let nested = r#"{"result": {"score": 4, "reason": "inner"}}"#;
        assert_eq!(ok(nested).reason, "inner");
        // Escaped quotes and braces inside strings do not confuse the scanner.
        let escaped = r#"{"score": 4, "reason": "He said \"}\" twice"}"#;
        assert_eq!(ok(escaped).reason, "He said \"}\" twice");
        // JSON wins over a contradicting prose line.
        let both = "Score: 2\n{\"score\": 4, \"reason\": \"json\"}";
        assert_eq!(ok(both).score, 4.0);
    }

    #[test]
    fn json_rejections() {
        assert_eq!(
            err(r#"{"score": 3.5, "reason": "half"}"#),
            ParseError::NotAnInteger(3.5)
        );
        assert_eq!(
            err(r#"{"score": 6, "reason": "x"}"#),
            ParseError::OutOfRange {
                score: 6.0,
                min: 1,
                max: 5
            }
        );
        assert!(matches!(
            err(r#"{"score": 0}"#),
            ParseError::OutOfRange { .. }
        ));
        assert!(matches!(
            err(r#"{"score": null}"#),
            ParseError::InvalidScore(_)
        ));
        assert!(matches!(
            err(r#"{"score": "high"}"#),
            ParseError::InvalidScore(_)
        ));
        assert!(matches!(
            err(r#"{"score": [4]}"#),
            ParseError::InvalidScore(_)
        ));
        assert!(matches!(
            err(r#"{"score": true}"#),
            ParseError::InvalidScore(_)
        ));
        assert_eq!(
            err(r#"{"score": "4/10"}"#),
            ParseError::ScaleMismatch {
                denominator: 10,
                max: 5
            }
        );
    }

    #[test]
    fn free_text_scores() {
        let cases = [
            ("Score: 4", 4.0),
            ("score = 4/5", 4.0),
            ("**Score:** 4", 4.0),
            ("**Score**: 4", 4.0),
            ("Rating: 4", 4.0),
            ("RATING=2", 2.0),
            ("Score (1-5): 3", 3.0),
            ("Score [1-5]: 3", 3.0),
            ("The score is 5.", 5.0),
            ("I would give it a score of 4 out of 5.", 4.0),
            ("Final score: 1/5", 1.0),
            ("{\"rating\": 2}", 2.0),
            ("Score:\n4", 4.0),
            ("Score: `4`", 4.0),
            ("score: 4.0", 4.0),
            ("Reasoning first.\n\nScore: 3\nScore: 3", 3.0),
        ];
        for (content, score) in cases {
            assert_eq!(ok(content).score, score, "{content}");
        }
    }

    #[test]
    fn bare_numbers() {
        for (content, score) in [("4", 4.0), (" 5\n", 5.0), ("**3**", 3.0), ("2/5", 2.0)] {
            let j = ok(content);
            assert_eq!((j.score, j.reason.as_str()), (score, ""), "{content}");
        }
        assert!(matches!(err("7"), ParseError::OutOfRange { .. }));
        assert!(matches!(err("4/10"), ParseError::ScaleMismatch { .. }));
    }

    #[test]
    fn free_text_rejections() {
        let none = [
            "",
            "   ",
            "The response is great.",
            "Score: N/A",
            "Scores vary between 1 and 5.",
            "The scorecard: 4 items",
            "score 4",
            "I rate it 4 stars",
            "Score: 4th place",
        ];
        for content in none {
            assert_eq!(err(content), ParseError::NoScore, "{content:?}");
        }
        assert_eq!(err("Score: 3.5"), ParseError::NotAnInteger(3.5));
        assert!(matches!(err("Score: 9"), ParseError::OutOfRange { .. }));
        assert!(matches!(err("Score: -1"), ParseError::OutOfRange { .. }));
        assert_eq!(
            err("Score: 3\nOn reflection, Score: 4"),
            ParseError::Conflicting(vec![3.0, 4.0])
        );
        assert_eq!(
            err("Rating: 2. A score of 5 means perfect."),
            ParseError::Conflicting(vec![2.0, 5.0])
        );
        assert!(matches!(err("Score: 3-4"), ParseError::Ambiguous(_)));
        assert!(matches!(err("Score: 3 to 4"), ParseError::Ambiguous(_)));
        // The scale is checked before the range: "8/10" is a different scale, not a bad 8.
        assert_eq!(
            err("Score: 8/10"),
            ParseError::ScaleMismatch {
                denominator: 10,
                max: 5
            }
        );
        assert_eq!(
            err("Score: 4/10"),
            ParseError::ScaleMismatch {
                denominator: 10,
                max: 5
            }
        );
    }

    #[test]
    fn free_text_reasons() {
        let cases = [
            ("Score: 4\nReason: mostly grounded.", "mostly grounded."),
            (
                "The answer cites every claim.\n\n**Score:** 5",
                "The answer cites every claim.",
            ),
            (
                "Score: 4. The response is relevant.",
                "The response is relevant.",
            ),
            (
                "**Final score: 2/5**\n**Explanation:** off topic",
                "off topic",
            ),
            ("Rating: 3", ""),
            ("Overall score = 1 - no support at all", "no support at all"),
        ];
        for (content, reason) in cases {
            assert_eq!(ok(content).reason, reason, "{content:?}");
        }
        let long = format!("Score: 4\n{}", "word ".repeat(1000));
        assert!(ok(&long).reason.chars().count() <= MAX_REASON_CHARS + 1);
        let long_json = format!(r#"{{"score": 4, "reason": "{}"}}"#, "é".repeat(5000));
        assert_eq!(ok(&long_json).reason.chars().count(), MAX_REASON_CHARS + 1);
    }

    #[test]
    fn other_scales_and_bad_scales() {
        assert_eq!(parse_judgement("Score: 0", 0, 10).unwrap().score, 0.0);
        assert_eq!(parse_judgement("Score: 7/10", 0, 10).unwrap().score, 7.0);
        assert_eq!(parse_judgement("Score: -2", -3, 3).unwrap().score, -2.0);
        assert_eq!(
            parse_judgement("Score: 1", 5, 1),
            Err(ParseError::InvalidScale { min: 5, max: 1 })
        );
    }

    #[test]
    fn errors_read_well() {
        assert_eq!(
            err("Score: 3.5").to_string(),
            "the judge reply's score 3.5 is not an integer"
        );
        assert_eq!(
            err("Score: 3\nScore: 4").to_string(),
            "the judge reply gives conflicting scores: 3, 4"
        );
        assert_eq!(
            err("nothing").to_string(),
            "the judge reply contains no score"
        );
    }

    #[test]
    fn hostile_inputs_do_not_panic() {
        for content in [
            "{".repeat(10_000),
            "}".repeat(100),
            "score:".repeat(1000),
            "Score: 99999999999999999999999999".to_string(),
            "Score: é4 ✓ score".to_string(),
            "{\"score\": 1e999}".to_string(),
            "score (unterminated: 4".to_string(),
            "rating is".to_string(),
            "Score: 4 éééé out of".to_string(),
            "Score: 4 out of ééé".to_string(),
            "Reasoné: x\nScore: 2".to_string(),
        ] {
            let _ = parse_judgement(&content, 1, 5);
        }
    }
}
