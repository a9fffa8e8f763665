//! Normal chat replies: a deterministic judgement, usage counted in o200k, and the cached
//! tokens a provider's prompt cache would report.

use super::*;

pub(super) fn completion_response(
    shared: &Shared,
    seq: u64,
    model: &str,
    body: &Value,
    last_user: &str,
) -> Resp {
    let judgement = judge(body, last_user, &shared.config);
    let cached = count_usage(shared, body);
    let mut reply = completion_json_cached(
        seq,
        model,
        body,
        Value::String(judgement.content.clone()),
        "stop",
        cached,
    );
    if shared.config.logprobs {
        judgement.add_logprobs(body, &mut reply);
    }
    json_response(StatusCode::OK, &reply)
}

/// A normal reply's judgement: its text, and the score and the confidence the logprobs of
/// the score token carry.
pub(super) struct Judgement {
    pub content: String,
    pub score: Option<i64>,
    pub confidence: f64,
    /// A fused answer's metrics: name, score, confidence and scale.
    pub parts: Vec<FusedScore>,
}

/// One metric of a fused answer: its name, score, confidence and scale.
pub(super) type FusedScore = (String, i64, f64, (i64, i64));

/// A log-probability token of a reply.
fn token(text: &str, logprob: f64, top: Vec<Value>) -> Value {
    json!({"token": text, "logprob": logprob, "bytes": null, "top_logprobs": top})
}

/// The alternatives of a score token: `score` with `confidence`, the scale's other values
/// sharing the rest.
fn top_scores(score: i64, confidence: f64, (lo, hi): (i64, i64)) -> Vec<Value> {
    let others = (hi - lo).max(1) as f64;
    (lo..=hi)
        .map(|s| {
            let p = if s == score {
                confidence
            } else {
                (1.0 - confidence) / others
            };
            json!({"token": s.to_string(), "logprob": p.ln(), "bytes": null})
        })
        .collect()
}

impl Judgement {
    /// OpenAI's `choices[0].logprobs` when the request asked for them: the score token with
    /// the judgement's confidence, and the scale's other values sharing the rest.
    pub(super) fn add_logprobs(&self, body: &Value, reply: &mut Value) {
        if body.get("logprobs").and_then(Value::as_bool) != Some(true) {
            return;
        }
        if !self.parts.is_empty() {
            // Each metric's score token after its key.
            let mut tokens = Vec::new();
            let mut rest = self.content.as_str();
            for (name, score, confidence, scale) in &self.parts {
                let text = score.to_string();
                let Some(at) = rest.find(&format!("\"{name}\":")).and_then(|k| {
                    let s = k + rest[k..].find("\"score\":")? + "\"score\":".len();
                    Some(s + rest[s..].find(&text)?)
                }) else {
                    continue;
                };
                tokens.push(token(&rest[..at], 0.0, Vec::new()));
                tokens.push(token(
                    &text,
                    confidence.ln(),
                    top_scores(*score, *confidence, *scale),
                ));
                rest = &rest[at + text.len()..];
            }
            tokens.push(token(rest, 0.0, Vec::new()));
            reply["choices"][0]["logprobs"] = json!({"content": tokens});
            return;
        }
        let Some(score) = self.score else {
            return;
        };
        let top = top_scores(score, self.confidence, score_range(body));
        // The score token: the score as stated after the word "score" (a reason may hold
        // the same digits earlier).
        let text = score.to_string();
        let at = self
            .content
            .to_ascii_lowercase()
            .rfind("score")
            .and_then(|s| self.content[s..].find(&text).map(|i| s + i))
            .unwrap_or(self.content.len());
        let (before, after) = (
            &self.content[..at],
            self.content.get(at + text.len()..).unwrap_or(""),
        );
        reply["choices"][0]["logprobs"] = json!({"content": [
            {"token": before, "logprob": 0.0, "bytes": null, "top_logprobs": []},
            {"token": score.to_string(), "logprob": self.confidence.ln(), "bytes": null,
             "top_logprobs": top},
            {"token": after, "logprob": 0.0, "bytes": null, "top_logprobs": []},
        ]});
    }
}

/// A small model's confidence in its score from `u` in [0, 1): informative, [0.55, 1) where
/// it agrees with the main model and [0.3, 0.65) where not; otherwise [0.3, 1) either way.
fn small_confidence(agrees: bool, u: f64, informative: bool) -> f64 {
    match (informative, agrees) {
        (false, _) => 0.3 + 0.7 * u,
        (true, true) => 0.55 + 0.45 * u,
        (true, false) => 0.3 + 0.35 * u,
    }
}

/// The judgement of a normal reply (see [`StubConfig::small_agreement`] for `small-` models).
pub(super) fn judge(body: &Value, last_user: &str, config: &StubConfig) -> Judgement {
    let small_agreement = config.small_agreement;
    let informative = config.small_confidence_informative;
    let small = body
        .get("model")
        .and_then(Value::as_str)
        .is_some_and(|m| m.starts_with("small-"));
    let fused = fused_parts(body);
    if !fused.is_empty() && directive_arg(last_user, "reply").is_none() {
        let (content, parts) = fused_content(
            body,
            last_user,
            &fused,
            small.then_some((small_agreement, informative)),
        );
        return Judgement {
            content,
            score: None,
            confidence: 0.95,
            parts,
        };
    }
    let content = judgement_content(body, last_user);
    let score = stated_score(&content);
    if !small || directive_arg(last_user, "reply").is_some() {
        return Judgement {
            content,
            score,
            confidence: 0.95,
            parts: Vec::new(),
        };
    }
    let row = splitmix64(fnv1a(body["messages"].to_string().as_bytes()) ^ 0x5A11);
    let unit = |h: u64| (h >> 11) as f64 / (1u64 << 53) as f64;
    let agrees = unit(row) < small_agreement;
    let confidence = small_confidence(agrees, unit(splitmix64(row)), informative);
    let Some(main) = score.filter(|_| !agrees) else {
        return Judgement {
            content,
            score,
            confidence,
            parts: Vec::new(),
        };
    };
    let (lo, hi) = score_range(body);
    let other = if main < hi { main + 1 } else { main - 1 }.max(lo);
    Judgement {
        content: restate_score(&content, main, other),
        score: Some(other),
        confidence,
        parts: Vec::new(),
    }
}

/// `content` with its stated score (the one after the word "score") changed to `other`.
fn restate_score(content: &str, main: i64, other: i64) -> String {
    let text = main.to_string();
    match content
        .to_ascii_lowercase()
        .rfind("score")
        .and_then(|s| content[s..].find(&text).map(|i| s + i))
    {
        Some(at) => format!("{}{other}{}", &content[..at], &content[at + text.len()..]),
        None => content.to_string(),
    }
}

/// The score a judgement's text states (`{"score": N, ...}` or `Score: N`).
fn stated_score(content: &str) -> Option<i64> {
    if let Ok(v) = serde_json::from_str::<Value>(content) {
        return v.get("score").and_then(Value::as_i64);
    }
    content
        .rsplit_once("Score: ")
        .and_then(|(_, s)| s.trim().parse().ok())
}

/// Tokens of `text` in OpenAI's o200k encoding (special-token spellings count as text).
pub(super) fn o200k(text: &str) -> u64 {
    tiktoken_rs::o200k_base_singleton().count_ordinary(text) as u64
}

/// The prompt tokens of a chat request as OpenAI counts them: 3 per message plus its role
/// and content, and 3 for the reply's priming; and the tokens of its first message (the
/// static prefix when it is the system prompt).
pub(super) fn prompt_usage(body: &Value) -> (u64, u64) {
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let per_message = |m: &Value| {
        3 + o200k(m.get("role").and_then(Value::as_str).unwrap_or("")) + o200k(&message_text(m))
    };
    let total = messages.iter().map(per_message).sum::<u64>() + 3;
    let first = messages.first().map_or(0, per_message);
    (total, first)
}

/// What a provider's prompt cache would serve: OpenAI caches prompts of 1,024 tokens or
/// more, in 128-token steps, when the same prefix was seen before. The stub remembers first
/// messages (rubrics) it has answered.
pub(super) fn cached_tokens(seen: &Mutex<std::collections::HashSet<u64>>, body: &Value) -> u64 {
    let (total, first) = prompt_usage(body);
    let Some(first_message) = body.pointer("/messages/0") else {
        return 0;
    };
    let fresh = lock(seen).insert(fnv1a(first_message.to_string().as_bytes()));
    if fresh || total < 1024 || first < 1024 {
        return 0;
    }
    1024 + (first - 1024) / 128 * 128
}

/// Adds a normal reply's usage to the totals; the cached tokens it reports.
pub(super) fn count_usage(shared: &Shared, body: &Value) -> u64 {
    let cached = cached_tokens(&shared.prefixes, body);
    let (prompt, prefix) = prompt_usage(body);
    shared.prompt_tokens.fetch_add(prompt, Ordering::SeqCst);
    shared.prefix_tokens.fetch_add(prefix, Ordering::SeqCst);
    shared.cached_tokens.fetch_add(cached, Ordering::SeqCst);
    cached
}

pub(super) fn completion_json(
    seq: u64,
    model: &str,
    body: &Value,
    content: Value,
    finish: &str,
) -> Value {
    completion_json_cached(seq, model, body, content, finish, 0)
}

pub(super) fn completion_json_cached(
    seq: u64,
    model: &str,
    body: &Value,
    content: Value,
    finish: &str,
    cached: u64,
) -> Value {
    let prompt_tokens = prompt_usage(body).0;
    let completion_tokens = o200k(content.as_str().unwrap_or("")).max(1);
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    json!({
        "id": format!("chatcmpl-stub-{seq}"),
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content, "refusal": null},
            "logprobs": null,
            "finish_reason": finish,
        }],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached},
        },
        "system_fingerprint": "fp_stub_judge",
    })
}

/// The assistant message content for a normal reply.
pub(super) fn judgement_content(body: &Value, last_user: &str) -> String {
    if let Some(text) = directive_arg(last_user, "reply") {
        return text.to_string();
    }
    let parts = fused_parts(body);
    if !parts.is_empty() {
        return fused_content(body, last_user, &parts, None).0;
    }
    // The whole conversation counts (two metrics with the same inputs differ by their
    // system prompt). FNV-1a alone varies little in its low bits between texts with the same
    // ending; the finaliser spreads the scores.
    let mut hash = splitmix64(fnv1a(body["messages"].to_string().as_bytes()));
    // A seed other than evalsql's default (42) samples another judgement, as a judge
    // sampling at a temperature would: repeated judging sees different scores.
    if let Some(seed) = body
        .get("seed")
        .and_then(Value::as_i64)
        .filter(|s| *s != 42)
    {
        hash = splitmix64(hash ^ seed as u64);
    }
    // Models named `panel-...` judge differently from each other, as a panel's would.
    if let Some(model) = body
        .get("model")
        .and_then(Value::as_str)
        .filter(|m| m.starts_with("panel-"))
    {
        hash = splitmix64(hash ^ fnv1a(model.as_bytes()));
    }
    let score: Value = match directive_arg(last_user, "score").and_then(parse_number) {
        Some(n) => n,
        None => {
            let (lo, hi) = score_range(body);
            let span = (hi as i128 - lo as i128 + 1) as u128;
            Value::from((lo as i128 + (hash as u128 % span) as i128) as i64)
        }
    };
    let rf_type = body
        .pointer("/response_format/type")
        .and_then(Value::as_str);
    if matches!(rf_type, Some("json_schema") | Some("json_object")) {
        json!({"score": score, "reason": format!("stub judgement {:08x}", hash as u32)}).to_string()
    } else {
        format!("Reasoning: stub judgement.\nScore: {score}")
    }
}

/// The metrics of a fused request and their scales: the object-valued properties of its
/// `json_schema`, or (for a request sent without one) the `=== RUBRIC name: an integer score
/// from MIN to MAX ===` lines of its system prompt. Empty for any other request.
pub(super) fn fused_parts(body: &Value) -> Vec<(String, i64, i64)> {
    if let Some(props) = body
        .pointer("/response_format/json_schema/schema/properties")
        .and_then(Value::as_object)
        && props.values().all(|v| v.get("properties").is_some())
        && !props.is_empty()
    {
        return props
            .iter()
            .map(|(name, v)| {
                let bound = |k: &str| {
                    v.pointer(&format!("/properties/score/{k}"))
                        .and_then(Value::as_i64)
                };
                (
                    name.clone(),
                    bound("minimum").unwrap_or(1),
                    bound("maximum").unwrap_or(5),
                )
            })
            .collect();
    }
    let system = body
        .pointer("/messages/0/content")
        .and_then(Value::as_str)
        .unwrap_or("");
    system
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("=== RUBRIC ")?.strip_suffix(" ===")?;
            let (name, scale) = rest.split_once(": an integer score from ")?;
            let (lo, hi) = scale.split_once(" to ")?;
            Some((name.to_string(), lo.parse().ok()?, hi.parse().ok()?))
        })
        .collect()
}

/// A fused judgement: one object keyed by metric, each score drawn from the request and the
/// metric's name (`[[score:N]]` sets them all, `[[omit:METRIC]]` leaves one out), each
/// reason naming its metric and score so a test can check which field each score came from.
/// A small model (`small_agreement`) agrees with the main model on every metric of that
/// share of rows; on the others one metric (drawn by the row) gets a neighbouring score,
/// with the confidences of [`judge`] (that metric's from the lower range). Also each
/// metric's score and confidence.
fn fused_content(
    body: &Value,
    last_user: &str,
    parts: &[(String, i64, i64)],
    small_agreement: Option<(f64, bool)>,
) -> (String, Vec<FusedScore>) {
    let mut scored = Vec::new();
    let base = splitmix64(fnv1a(body["messages"].to_string().as_bytes()));
    let omitted: Vec<&str> = last_user
        .match_indices("[[omit:")
        .filter_map(|(at, _)| directive_arg(&last_user[at..], "omit"))
        .collect();
    let mut answer = serde_json::Map::new();
    let unit = |h: u64| (h >> 11) as f64 / (1u64 << 53) as f64;
    let row = splitmix64(base ^ 0x5A11);
    let row_agrees = small_agreement.is_some_and(|(a, _)| unit(row) < a);
    let disagreeing = (splitmix64(row) % parts.len().max(1) as u64) as usize;
    for (index, (name, lo, hi)) in parts.iter().enumerate() {
        if omitted.contains(&name.as_str()) {
            continue;
        }
        let hash = splitmix64(base ^ fnv1a(name.as_bytes()));
        let mut score = directive_arg(last_user, "score")
            .and_then(|s| s.trim().parse::<i64>().ok())
            .unwrap_or_else(|| lo + (hash % (hi - lo + 1).max(1) as u64) as i64);
        let mut confidence = 0.95;
        if let Some((_, informative)) = small_agreement {
            let agrees = row_agrees || index != disagreeing;
            confidence = small_confidence(agrees, unit(splitmix64(hash ^ 0x5A11)), informative);
            if !agrees {
                score = if score < *hi { score + 1 } else { score - 1 }.max(*lo);
            }
        }
        scored.push((name.clone(), score, confidence, (*lo, *hi)));
        answer.insert(
            name.clone(),
            json!({"score": score, "reason": format!("stub judgement of {name}: {score}")}),
        );
    }
    (Value::Object(answer).to_string(), scored)
}

/// Integer score range from `response_format.json_schema.schema.properties.score`, default 1..=5.
pub(super) fn score_range(body: &Value) -> (i64, i64) {
    let score = body.pointer("/response_format/json_schema/schema/properties/score");
    let bound = |key: &str| score.and_then(|s| s.get(key)).and_then(Value::as_f64);
    let lo = bound("minimum").map_or(1, |v| v.ceil() as i64);
    let hi = bound("maximum").map_or(5, |v| v.floor() as i64);
    if hi < lo { (lo, lo) } else { (lo, hi) }
}

pub(super) fn parse_number(s: &str) -> Option<Value> {
    let s = s.trim();
    if let Ok(i) = s.parse::<i64>() {
        return Some(Value::from(i));
    }
    s.parse::<f64>()
        .ok()
        .filter(|f| f.is_finite())
        .map(Value::from)
}
