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
    let content = judgement_content(body, last_user);
    let cached = count_usage(shared, body);
    json_response(
        StatusCode::OK,
        &completion_json_cached(seq, model, body, Value::String(content), "stop", cached),
    )
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
