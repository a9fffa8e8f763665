//! `invoke_app(url, payload)`: POSTs to the app under test (see [`crate::target`]).

use std::sync::LazyLock;

use async_trait::async_trait;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, internal_err};
use datafusion::logical_expr::async_udf::AsyncScalarUDFImpl;
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};
use serde_json::Value;
use url::Url;

use super::{Target, return_type, run};
use crate::common::docs::TARGETS;
use crate::llm::cache::CachedGeneration;
use crate::llm::limiter::limiter_for;
use crate::llm::policy::CallPolicy;
use crate::llm::request::cache_key;
use crate::llm::settings::{JudgeSettings, TargetSettings};
use crate::llm::transport::post_json;
use crate::llm::usage::Usage;

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct InvokeAppFunc {
    signature: Signature,
}

impl Default for InvokeAppFunc {
    fn default() -> Self {
        Self {
            signature: Signature::any(2, Volatility::Stable),
        }
    }
}

#[async_trait]
impl Target for InvokeAppFunc {
    fn usage(&self) -> &'static str {
        "invoke_app(url, payload)"
    }

    fn arities(&self) -> &'static [usize] {
        &[2]
    }

    fn has_trajectory(&self) -> bool {
        true
    }

    fn has_tokens(&self) -> bool {
        false
    }

    fn runs(&self, payload: Option<&str>) -> bool {
        payload.is_some()
    }

    fn model(&self, _target: &TargetSettings) -> Result<Option<JudgeSettings>> {
        Ok(None)
    }

    fn key(&self, _model: Option<&JudgeSettings>, url: &str, payload: Option<&str>) -> String {
        cache_key(
            "invoke_app@1",
            "",
            &[("url".into(), url.into())],
            &[("payload", payload)],
        )
    }

    async fn call(
        &self,
        target: &TargetSettings,
        _model: Option<&JudgeSettings>,
        url: &str,
        payload: Option<&str>,
    ) -> (std::result::Result<CachedGeneration, String>, String) {
        let shown = match Url::parse(url) {
            Ok(u) => displayed_url(&u),
            Err(_) => strip_query(url),
        };
        (
            invoke_one(target, url, payload.unwrap_or_default()).await,
            shown,
        )
    }
}

impl ScalarUDFImpl for InvokeAppFunc {
    fn name(&self) -> &str {
        "invoke_app"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        return_type(self, arg_types)
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        internal_err!("invoke_app is asynchronous and runs through AsyncFuncExec")
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&INVOKE_APP_DOC)
    }
}

#[async_trait]
impl AsyncScalarUDFImpl for InvokeAppFunc {
    async fn invoke_async_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        run(self, args).await
    }
}

static INVOKE_APP_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        TARGETS,
        "POSTs the JSON payload to the app (flow, agent) at url, with the judge engine's \
         limiter, retries and cache. Returns Struct{response, trajectory, latency_ms, failure, \
         error}: response is the reply's response/output field (or the whole body), \
         trajectory its trajectory/tool_calls field as JSON text, ready for the trajectory \
         metrics.",
        "invoke_app(url, payload)",
    )
    .with_argument("url", "The app's endpoint (http or https).")
    .with_argument("payload", "The request body, JSON text (or a struct).")
    .build()
});

/// Whether `url` lies under `prefix`, compared as URLs, not strings: both are parsed and
/// normalised (scheme and host case, default ports, `.` and `..` segments in any spelling,
/// `%2e%2e` included), then scheme, host and port must be equal and the prefix's path
/// segments must begin the URL's. So `http://app/agent/../admin` is not under
/// `http://app/agent`, and `http://app` does not admit `http://app.attacker.example`.
pub fn url_under(url: &Url, prefix: &str) -> bool {
    let Ok(prefix) = Url::parse(prefix.trim()) else {
        return false;
    };
    if url.scheme() != prefix.scheme()
        || url.host_str() != prefix.host_str()
        || url.port_or_known_default() != prefix.port_or_known_default()
    {
        return false;
    }
    let segments = |u: &Url| -> Vec<String> {
        u.path_segments()
            .map(|s| s.filter(|x| !x.is_empty()).map(str::to_string).collect())
            .unwrap_or_default()
    };
    let (want, got) = (segments(&prefix), segments(url));
    got.len() >= want.len()
        && got[..want.len()] == want[..]
        && got[want.len()..].iter().all(|s| plain_segment(s))
}

/// Whether a path segment (as the URL holds it, percent-encoded) means itself to any app:
/// decoded once or again (an app or its proxy may decode twice), it holds no `/` or `\`
/// and is not `.` or `..`. The URL parser already resolves `..`, `%2e%2e` and `\`; an
/// encoded separator (`..%2fadmin`, `%5c`, `%252f`) it keeps in the segment, and an app
/// that decodes the path would step out of the prefix with it.
fn plain_segment(segment: &str) -> bool {
    let mut text = segment.to_string();
    for _ in 0..3 {
        let decoded = percent_decode(&text);
        if decoded.contains(['/', '\\']) || decoded == "." || decoded == ".." {
            return false;
        }
        if decoded == text {
            return true;
        }
        text = decoded;
    }
    // Still changing after three decodings: no app means that.
    false
}

/// `text` with every `%XX` escape decoded (bytes that are not UTF-8 replaced).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A URL as it may be stored or shown: scheme, host, port and path, without the user
/// name, password, query or fragment (which may carry tokens).
pub fn displayed_url(url: &Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.set_fragment(None);
    shown.to_string()
}

/// One call of the app under test: `response` is the answer's `response` or `output` field
/// (or the whole body), `trajectory` its `trajectory` or `tool_calls` field as JSON text.
async fn invoke_one(
    target: &TargetSettings,
    url: &str,
    payload: &str,
) -> std::result::Result<CachedGeneration, String> {
    let parsed = match Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => u,
        _ => {
            return Err(format!(
                "invoke_app: the URL must be an http:// or https:// URL, got {}",
                crate::common::truncate_for_error(&strip_query(url))
            ));
        }
    };
    let shown = displayed_url(&parsed);
    if let Some(allowed) = &target.allowed_urls
        && !allowed.iter().any(|prefix| url_under(&parsed, prefix))
    {
        return Err(format!(
            "invoke_app: {} is not among the URLs this session may call \
             (evalsql.target.allowed_urls: {})",
            crate::common::truncate_for_error(&shown),
            if allowed.is_empty() {
                "none".to_string()
            } else {
                allowed
                    .iter()
                    .map(|u| crate::common::excerpt::redact_url(u))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ));
    }
    if serde_json::from_str::<Value>(payload).is_err() {
        return Err(format!(
            "invoke_app: the payload is not JSON: {}",
            crate::common::truncate_for_error(payload)
        ));
    }
    let origin = parsed.origin().ascii_serialization();
    let limiter = limiter_for(&format!("app:{origin}"), &target.limits);
    let policy = CallPolicy::of(&target.limits);
    // The URL that was checked, normalised, is the one called (redirects are not followed).
    let reply = post_json(parsed.as_str(), &policy, &limiter, payload)
        .await
        .map_err(|e| e.to_string())?;
    let (response, trajectory) = read_app_reply(&reply.value.body);
    Ok(CachedGeneration {
        response,
        trajectory,
        usage: Usage {
            latency_ms: Some(reply.latency.as_secs_f64() * 1000.0),
            ..Usage::default()
        },
    })
}

/// A string that is not a URL, shown without anything after `?`, `#` or a `user@`.
fn strip_query(text: &str) -> String {
    let cut = text.find(['?', '#']).unwrap_or(text.len());
    let text = &text[..cut];
    match (text.find("://"), text.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}{}", &text[..scheme + 3], &text[at + 1..])
        }
        _ => text.to_string(),
    }
}

/// `(response, trajectory)` of an app's reply body.
fn read_app_reply(body: &str) -> (Option<String>, Option<String>) {
    let as_text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match serde_json::from_str::<Value>(body) {
        Ok(Value::Object(o)) => {
            let response = o
                .get("response")
                .or_else(|| o.get("output"))
                .filter(|v| !v.is_null())
                .map(as_text)
                .unwrap_or_else(|| body.to_string());
            let trajectory = o
                .get("trajectory")
                .or_else(|| o.get("tool_calls"))
                .filter(|v| !v.is_null())
                .map(|v| v.to_string());
            (Some(response), trajectory)
        }
        _ => (Some(body.to_string()), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_urls_end_at_a_path_boundary() {
        let under = |url: &str, prefix: &str| Url::parse(url).is_ok_and(|u| url_under(&u, prefix));
        assert!(under("http://app:8/run", "http://app:8"));
        assert!(under("http://app:8/run?x=1", "http://app:8/"));
        assert!(under("http://app:8", "http://app:8"));
        assert!(!under("http://app:8.evil.example/run", "http://app:8"));
        assert!(!under("http://app:80/run", "http://app:8"));
        assert!(!under("http://other/run", "http://app:8"));
    }

    #[test]
    fn allowed_urls_are_compared_as_urls() {
        let under = |url: &str, prefix: &str| Url::parse(url).is_ok_and(|u| url_under(&u, prefix));
        let prefix = "http://h/agent";
        assert!(under("http://h/agent/run", prefix));
        assert!(under("HTTP://H:80/agent/run", prefix));
        assert!(under("http://h/agent/./run", prefix));
        for escape in [
            "http://h/agent/../admin",
            "http://h/agent/%2e%2e/admin",
            "http://h/agent/%2E%2E/admin",
            "http://h/agent/.%2e/admin",
            "http://h/agents",
            "http://h/agent-x/run",
            "http://h:81/agent/run",
            "https://h/agent/run",
            "http://h.evil.example/agent/run",
            "http://user@evil.example/agent",
            // Encoded separators and dots the parser keeps, which an app may decode.
            "http://h/agent/..%2fadmin",
            "http://h/agent/..%2Fadmin",
            "http://h/agent/..%5cadmin",
            "http://h/agent/..%5Cadmin",
            "http://h/agent/run/..%2f..%2fadmin",
            "http://h/agent/%2e%2e%2fadmin",
            "http://h/agent/%2E.%5Cadmin",
            "http://h/agent/%252e%252e/admin",
            "http://h/agent/..%252fadmin",
            "http://h/agent/x%2fy",
            "http://h/agent/%2e%252e",
        ] {
            assert!(!under(escape, prefix), "{escape}");
        }
        let shown = displayed_url(&Url::parse("http://u:secret@h/agent/run?token=abc#x").unwrap());
        assert_eq!(shown, "http://h/agent/run");
        assert_eq!(strip_query("not a url?token=1"), "not a url");
        assert_eq!(strip_query("ftp://u:p@h/x?t"), "ftp://h/x");
    }

    #[test]
    fn allowed_urls_admit_ordinary_escapes() {
        let under = |url: &str, prefix: &str| Url::parse(url).is_ok_and(|u| url_under(&u, prefix));
        let prefix = "http://h/agent";
        for ok in [
            "http://h/agent/run%20fast",
            "http://h/agent/caf%C3%A9",
            "http://h/agent/v1.2/run",
            "http://h/agent/...",
            "http://h/agent/run?next=..%2fadmin",
        ] {
            assert!(under(ok, prefix), "{ok}");
        }
        assert_eq!(percent_decode("%2e%2E%zz%4"), "..%zz%4");
    }

    #[test]
    fn app_replies() {
        assert_eq!(
            read_app_reply(r#"{"response": "hi", "trajectory": [{"tool_name": "t"}]}"#),
            (Some("hi".into()), Some(r#"[{"tool_name":"t"}]"#.into()))
        );
        assert_eq!(
            read_app_reply(r#"{"output": {"text": "x"}, "tool_calls": []}"#),
            (Some(r#"{"text":"x"}"#.into()), Some("[]".into()))
        );
        assert_eq!(read_app_reply("plain"), (Some("plain".into()), None));
        assert_eq!(
            read_app_reply(r#"{"answer": 1}"#),
            (Some(r#"{"answer": 1}"#.into()), None)
        );
    }
}
