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

use super::{Target, return_type, run};
use crate::common::docs::TARGETS;
use crate::judge::engine::cache::CachedGeneration;
use crate::judge::engine::limiter::limiter_for;
use crate::judge::engine::request::cache_key;
use crate::judge::engine::transport::{CallPolicy, post_json};
use crate::judge::settings::{JudgeSettings, TargetSettings};

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
        (
            invoke_one(target, url, payload.unwrap_or_default()).await,
            url.to_string(),
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

/// Whether `url` is `prefix` or lies under it (the prefix ends at a path boundary, so
/// `http://app` does not admit `http://app.attacker.example`).
fn url_under(url: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    url.strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['/', '?', '#']))
}

/// One call of the app under test: `response` is the answer's `response` or `output` field
/// (or the whole body), `trajectory` its `trajectory` or `tool_calls` field as JSON text.
async fn invoke_one(
    target: &TargetSettings,
    url: &str,
    payload: &str,
) -> std::result::Result<CachedGeneration, String> {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(format!(
            "invoke_app: the URL must start with http:// or https://, got {}",
            crate::common::truncate_for_error(url)
        ));
    }
    if let Some(allowed) = &target.allowed_urls
        && !allowed.iter().any(|prefix| url_under(url, prefix))
    {
        return Err(format!(
            "invoke_app: {} is not among the URLs this session may call \
             (evalsql.target.allowed_urls: {})",
            crate::common::truncate_for_error(url),
            if allowed.is_empty() {
                "none".to_string()
            } else {
                allowed.join(", ")
            }
        ));
    }
    if serde_json::from_str::<Value>(payload).is_err() {
        return Err(format!(
            "invoke_app: the payload is not JSON: {}",
            crate::common::truncate_for_error(payload)
        ));
    }
    let origin = url.splitn(4, '/').take(3).collect::<Vec<_>>().join("/");
    let limiter = limiter_for(
        &format!("app:{origin}"),
        target.limits.max_concurrency,
        target.limits.requests_per_minute,
        target.limits.tokens_per_minute,
    );
    let policy = CallPolicy::of(&target.limits);
    let reply = post_json(url, &policy, &limiter, payload)
        .await
        .map_err(|e| e.to_string())?;
    let (response, trajectory) = read_app_reply(&reply.value.body);
    Ok(CachedGeneration {
        response,
        trajectory,
        prompt_tokens: None,
        completion_tokens: None,
        latency_ms: reply.latency.as_secs_f64() * 1000.0,
    })
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
        assert!(url_under("http://app:8/run", "http://app:8"));
        assert!(url_under("http://app:8/run?x=1", "http://app:8/"));
        assert!(url_under("http://app:8", "http://app:8"));
        assert!(!url_under("http://app:8.evil.example/run", "http://app:8"));
        assert!(!url_under("http://app:80/run", "http://app:8"));
        assert!(!url_under("http://other/run", "http://app:8"));
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
