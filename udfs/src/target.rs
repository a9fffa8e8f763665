//! Targets: `generate(prompt [, system_prompt])` calls the model under test and
//! `invoke_app(url, payload)` POSTs to the user's app, so one query can produce responses
//! and score them (generate in a CTE, score outside).
//!
//! They run on the judge engine: a process-wide limiter per endpoint (their own, configured
//! with `SET evalsql.target.*`), the same retries, one call per distinct request in the
//! process, failures as rows (`failure = true`, `error`), and results committed to the
//! cache file (table `generations`), so a rerun of an evaluation calls nothing again.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, OnceLock};

use async_trait::async_trait;
use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Float64Array, Int64Array, StringArray, StructArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Fields};
use datafusion::common::{Result, internal_err, plan_err};
use datafusion::logical_expr::async_udf::{AsyncScalarUDF, AsyncScalarUDFImpl};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    TypeSignature, Volatility,
};
use futures::future::join_all;
use serde_json::Value;

use crate::common::docs::TARGETS;
use crate::common::{argument_arrays, texts};
use crate::judge::engine::cache::{CachedGeneration, JudgeCache};
use crate::judge::engine::limiter::limiter_for;
use crate::judge::engine::progress::STATS;
use crate::judge::engine::request::{ChatRequest, cache_key};
use crate::judge::engine::transport::{CallPolicy, post_json, send};
use crate::judge::engine::{SharedOutcomes, blocking};
use crate::judge::settings::{JudgeSettings, TargetSettings};

/// What a target call produced.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TargetOutcome {
    pub response: Option<String>,
    pub trajectory: Option<String>,
    pub latency_ms: Option<f64>,
    /// `None` when the row was not run (a NULL input).
    pub failure: Option<bool>,
    pub error: Option<String>,
    pub prompt_tokens: Option<i64>,
    pub completion_tokens: Option<i64>,
}

impl TargetOutcome {
    fn failed(error: String) -> Self {
        Self {
            failure: Some(true),
            error: Some(error),
            ..Default::default()
        }
    }

    fn from_cache(g: &CachedGeneration) -> Self {
        Self {
            response: g.response.clone(),
            trajectory: g.trajectory.clone(),
            latency_ms: Some(g.latency_ms),
            failure: Some(false),
            error: None,
            prompt_tokens: g.prompt_tokens,
            completion_tokens: g.completion_tokens,
        }
    }
}

fn outcomes() -> &'static SharedOutcomes<TargetOutcome> {
    static CELLS: OnceLock<SharedOutcomes<TargetOutcome>> = OnceLock::new();
    CELLS.get_or_init(SharedOutcomes::new)
}

/// Which target a function calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Generate,
    InvokeApp,
}

/// `generate(...)` or `invoke_app(...)`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct TargetFunc {
    kind: Kind,
    signature: Signature,
}

impl TargetFunc {
    pub fn generate() -> Self {
        Self {
            kind: Kind::Generate,
            signature: Signature::one_of(
                vec![TypeSignature::Any(1), TypeSignature::Any(2)],
                Volatility::Stable,
            ),
        }
    }

    pub fn invoke_app() -> Self {
        Self {
            kind: Kind::InvokeApp,
            signature: Signature::any(2, Volatility::Stable),
        }
    }

    fn fields(&self) -> Fields {
        let mut f = vec![Field::new("response", DataType::Utf8, true)];
        if self.kind == Kind::InvokeApp {
            f.push(Field::new("trajectory", DataType::Utf8, true));
        }
        f.push(Field::new("latency_ms", DataType::Float64, true));
        f.push(Field::new("failure", DataType::Boolean, true));
        f.push(Field::new("error", DataType::Utf8, true));
        if self.kind == Kind::Generate {
            f.push(Field::new("prompt_tokens", DataType::Int64, true));
            f.push(Field::new("completion_tokens", DataType::Int64, true));
        }
        Fields::from(f)
    }

    /// Arguments as text, per row: (prompt, system) or (url, payload).
    fn rows(&self, args: &ScalarFunctionArgs) -> Result<Vec<Option<(String, Option<String>)>>> {
        let n = args.number_rows;
        let arrays = argument_arrays(args)?;
        let first = texts(&arrays[0])?;
        let second = match arrays.get(1) {
            Some(a) => texts(a)?,
            None => vec![None; n],
        };
        Ok(first
            .into_iter()
            .zip(second)
            .map(|(a, b)| match (self.kind, a, b) {
                (_, None, _) => None,
                (Kind::InvokeApp, Some(_), None) => None,
                (_, Some(a), b) => Some((a, b)),
            })
            .collect())
    }

    async fn run(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = self.rows(&args)?;
        let target = TargetSettings::from_config(&args.config_options);
        let model = match self.kind {
            Kind::Generate => Some(target.model_settings(self.name())?),
            Kind::InvokeApp => None,
        };
        let cache = match target.cache.clone() {
            Some(path) => Some(blocking(move || JudgeCache::open(&path)).await?),
            None => None,
        };
        let keys: Vec<Option<String>> = rows
            .iter()
            .map(|r| {
                r.as_ref()
                    .map(|(a, b)| self.key(model.as_ref(), a, b.as_deref()))
            })
            .collect();
        STATS.rows_received(rows.len() as u64);

        // The cached results of keys this process has not settled yet, in one read.
        let cached: HashMap<String, CachedGeneration> = match &cache {
            Some(cache) => {
                let wanted: Vec<String> = keys
                    .iter()
                    .flatten()
                    .filter(|k| !outcomes().cell(k).initialized())
                    .cloned()
                    .collect();
                let cache = Arc::clone(cache);
                blocking(move || cache.get_generations(&wanted)).await?
            }
            None => HashMap::new(),
        };

        let ctx = CallContext {
            target: &target,
            model: model.as_ref(),
            cache: cache.as_ref(),
            cached: &cached,
        };
        let results = join_all(rows.iter().zip(&keys).map(|(row, key)| {
            let ctx = &ctx;
            async move {
                let outcome = match (row, key) {
                    (Some((a, b)), Some(key)) => {
                        let cell = outcomes().cell(key);
                        let out = cell
                            .get_or_init(|| self.call(ctx, key, a, b.as_deref()))
                            .await;
                        if out.failure == Some(true) {
                            STATS.error();
                        }
                        out.as_ref().clone()
                    }
                    _ => {
                        STATS.skipped();
                        TargetOutcome::default()
                    }
                };
                STATS.row_done();
                outcome
            }
        }))
        .await;
        Ok(ColumnarValue::Array(Arc::new(self.array(&results))))
    }

    fn key(&self, model: Option<&JudgeSettings>, a: &str, b: Option<&str>) -> String {
        match (self.kind, model) {
            (Kind::Generate, Some(m)) => cache_key(
                "generate@1",
                &m.model,
                &m.cache_params(),
                &[("prompt", Some(a)), ("system_prompt", b)],
            ),
            _ => cache_key(
                "invoke_app@1",
                "",
                &[("url".into(), a.into())],
                &[("payload", b)],
            ),
        }
    }

    async fn call(
        &self,
        ctx: &CallContext<'_>,
        key: &str,
        a: &str,
        b: Option<&str>,
    ) -> Arc<TargetOutcome> {
        if let Some(g) = ctx.cached.get(key) {
            STATS.cache_hit();
            return Arc::new(TargetOutcome::from_cache(g));
        }
        let (result, target_name) = match (self.kind, ctx.model) {
            (Kind::Generate, Some(m)) => (generate_one(ctx.target, m, a, b).await, m.model.clone()),
            _ => (
                invoke_one(ctx.target, a, b.unwrap_or_default()).await,
                a.to_string(),
            ),
        };
        let g = match result {
            Ok(g) => g,
            Err(e) => return Arc::new(TargetOutcome::failed(e)),
        };
        if let Some(cache) = ctx.cache {
            let (cache, key, function, g2) = (
                Arc::clone(cache),
                key.to_string(),
                self.name().to_string(),
                g.clone(),
            );
            let commit =
                blocking(move || cache.put_generation(&key, &function, &target_name, &g2)).await;
            if let Err(e) = commit {
                STATS.cache_write_failed(&e.to_string());
            }
        }
        let mut out = TargetOutcome::from_cache(&g);
        out.failure = Some(false);
        Arc::new(out)
    }

    fn array(&self, rows: &[TargetOutcome]) -> StructArray {
        let mut columns: Vec<ArrayRef> = vec![Arc::new(
            rows.iter()
                .map(|r| r.response.as_deref())
                .collect::<StringArray>(),
        )];
        if self.kind == Kind::InvokeApp {
            columns.push(Arc::new(
                rows.iter()
                    .map(|r| r.trajectory.as_deref())
                    .collect::<StringArray>(),
            ));
        }
        columns.push(Arc::new(
            rows.iter().map(|r| r.latency_ms).collect::<Float64Array>(),
        ));
        columns.push(Arc::new(
            rows.iter().map(|r| r.failure).collect::<BooleanArray>(),
        ));
        columns.push(Arc::new(
            rows.iter()
                .map(|r| r.error.as_deref())
                .collect::<StringArray>(),
        ));
        if self.kind == Kind::Generate {
            columns.push(Arc::new(
                rows.iter().map(|r| r.prompt_tokens).collect::<Int64Array>(),
            ));
            columns.push(Arc::new(
                rows.iter()
                    .map(|r| r.completion_tokens)
                    .collect::<Int64Array>(),
            ));
        }
        StructArray::new(self.fields(), columns, None)
    }
}

struct CallContext<'a> {
    target: &'a TargetSettings,
    model: Option<&'a JudgeSettings>,
    cache: Option<&'a Arc<JudgeCache>>,
    cached: &'a HashMap<String, CachedGeneration>,
}

/// One generation by the model under test.
async fn generate_one(
    target: &TargetSettings,
    m: &JudgeSettings,
    prompt: &str,
    system: Option<&str>,
) -> std::result::Result<CachedGeneration, String> {
    let limiter = limiter_for(
        &format!("target:{}", m.limiter_key()),
        target.limits.max_concurrency,
        target.limits.requests_per_minute,
        target.limits.tokens_per_minute,
    );
    let request = ChatRequest::new(m.model.clone(), system.unwrap_or_default(), prompt)
        .temperature(m.limits.temperature)
        .seed(m.limits.seed);
    let reply = send(m, &limiter, &request)
        .await
        .map_err(|e| m.endpoint.redact(&e.to_string()))?;
    STATS.tokens(reply.value.prompt_tokens, reply.value.completion_tokens);
    Ok(CachedGeneration {
        response: Some(reply.value.content),
        trajectory: None,
        prompt_tokens: reply.value.prompt_tokens,
        completion_tokens: reply.value.completion_tokens,
        latency_ms: reply.latency.as_secs_f64() * 1000.0,
    })
}

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

static GENERATE_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        TARGETS,
        "Calls the model under test (EVALSQL_TARGET_MODEL / EVALSQL_TARGET_BASE_URL / \
         EVALSQL_TARGET_API_KEY, falling back to the judge's OpenAI settings; SET \
         evalsql.target.*) with the prompt, through the judge engine's limiter, retries and \
         cache. Returns Struct{response, latency_ms, failure, error, prompt_tokens, \
         completion_tokens}; a NULL prompt gives all-NULL fields. Generate in a CTE, score \
         outside.",
        "generate(prompt [, system_prompt])",
    )
    .with_argument("prompt", "The user message.")
    .with_argument("system_prompt", "An optional system message.")
    .build()
});

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

impl ScalarUDFImpl for TargetFunc {
    fn name(&self) -> &str {
        match self.kind {
            Kind::Generate => "generate",
            Kind::InvokeApp => "invoke_app",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        let ok = match self.kind {
            Kind::Generate => matches!(arg_types.len(), 1 | 2),
            Kind::InvokeApp => arg_types.len() == 2,
        };
        if !ok {
            let types: Vec<String> = arg_types.iter().map(|t| t.to_string()).collect();
            let usage = match self.kind {
                Kind::Generate => "generate(prompt [, system_prompt])",
                Kind::InvokeApp => "invoke_app(url, payload)",
            };
            return plan_err!(
                "{}({}) does not match {usage}",
                self.name(),
                types.join(", ")
            );
        }
        Ok(DataType::Struct(self.fields()))
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        internal_err!(
            "{} is asynchronous and runs through AsyncFuncExec",
            self.name()
        )
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(match self.kind {
            Kind::Generate => &GENERATE_DOC,
            Kind::InvokeApp => &INVOKE_APP_DOC,
        })
    }
}

#[async_trait]
impl AsyncScalarUDFImpl for TargetFunc {
    async fn invoke_async_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        self.run(args).await
    }
}

/// The target functions as implementations (for the catalogue) ...
pub fn target_functions() -> Vec<Arc<TargetFunc>> {
    vec![
        Arc::new(TargetFunc::generate()),
        Arc::new(TargetFunc::invoke_app()),
    ]
}

/// ... and as DataFusion UDFs.
pub fn scalar_functions() -> Vec<Arc<ScalarUDF>> {
    target_functions()
        .into_iter()
        .map(|f| Arc::new(AsyncScalarUDF::new(f).into_scalar_udf()))
        .collect()
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
