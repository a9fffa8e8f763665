//! `generate(prompt [, system_prompt])`: calls the model under test (see [`crate::target`]).

use std::sync::LazyLock;

use super::{Target, return_type, run};
use crate::common::docs::TARGETS;
use crate::llm::cache::CachedGeneration;
use crate::llm::limiter::limiter_for;
use crate::llm::progress::STATS;
use crate::llm::request::{ChatRequest, cache_key};
use crate::llm::settings::{JudgeSettings, TargetSettings};
use crate::llm::transport::send;
use crate::llm::usage::Usage;
use crate::llm::within_input_cap;
use async_trait::async_trait;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, internal_err};
use datafusion::logical_expr::async_udf::AsyncScalarUDFImpl;
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct GenerateFunc {
    signature: Signature,
}

impl Default for GenerateFunc {
    fn default() -> Self {
        Self {
            signature: Signature::one_of(
                vec![TypeSignature::Any(1), TypeSignature::Any(2)],
                Volatility::Stable,
            ),
        }
    }
}

#[async_trait]
impl Target for GenerateFunc {
    fn usage(&self) -> &'static str {
        "generate(prompt [, system_prompt])"
    }

    fn arities(&self) -> &'static [usize] {
        &[1, 2]
    }

    fn has_trajectory(&self) -> bool {
        false
    }

    fn has_tokens(&self) -> bool {
        true
    }

    fn runs(&self, _system_prompt: Option<&str>) -> bool {
        true
    }

    fn model(&self, target: &TargetSettings) -> Result<Option<JudgeSettings>> {
        target.model_settings(self.name()).map(Some)
    }

    fn key(&self, model: Option<&JudgeSettings>, prompt: &str, system: Option<&str>) -> String {
        let (name, params) = match model {
            Some(m) => (m.model.as_str(), m.cache_params()),
            None => ("", vec![]),
        };
        cache_key(
            "generate@1",
            name,
            &params,
            &[("prompt", Some(prompt)), ("system_prompt", system)],
        )
    }

    async fn call(
        &self,
        target: &TargetSettings,
        model: Option<&JudgeSettings>,
        prompt: &str,
        system: Option<&str>,
    ) -> (std::result::Result<CachedGeneration, String>, String) {
        match model {
            Some(m) => (
                generate_one(target, m, prompt, system).await,
                m.model.clone(),
            ),
            None => (Err("generate: no model under test".into()), String::new()),
        }
    }
}

impl ScalarUDFImpl for GenerateFunc {
    fn name(&self) -> &str {
        "generate"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        return_type(self, arg_types)
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        internal_err!("generate is asynchronous and runs through AsyncFuncExec")
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&GENERATE_DOC)
    }
}

#[async_trait]
impl AsyncScalarUDFImpl for GenerateFunc {
    async fn invoke_async_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        run(self, args).await
    }
}

static GENERATE_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        TARGETS,
        "Calls the model under test (EVALSQL_TARGET_MODEL / EVALSQL_TARGET_BASE_URL / \
         EVALSQL_TARGET_API_KEY, falling back to the judge's OpenAI settings; SET \
         evalsql.target.*) with the prompt, through the judge engine's limiter, retries and \
         cache. Returns Struct{response, latency_ms, failure, error, prompt_tokens, \
         completion_tokens, cached_tokens, cost_usd}; a NULL prompt gives all-NULL fields. Generate in a CTE, score \
         outside.",
        "generate(prompt [, system_prompt])",
    )
    .with_argument("prompt", "The user message.")
    .with_argument("system_prompt", "An optional system message.")
    .build()
});

/// One generation by the model under test.
async fn generate_one(
    target: &TargetSettings,
    m: &JudgeSettings,
    prompt: &str,
    system: Option<&str>,
) -> std::result::Result<CachedGeneration, String> {
    let limiter = limiter_for(&format!("target:{}", m.limiter_key()), &target.limits);
    within_input_cap(
        prompt.len() + system.map_or(0, str::len),
        target.limits.max_input_bytes,
        "target",
    )
    .map_err(|e| format!("generate: {e}"))?;
    let request = ChatRequest::new(m.model.clone(), system.unwrap_or_default(), prompt)
        .temperature(m.limits.temperature)
        .seed(m.limits.seed)
        .max_completion_tokens(m.limits.max_completion_tokens);
    let reply = send(&m.endpoint, &m.model, &m.policy(), &limiter, &request)
        .await
        .map_err(|e| m.endpoint.redact(&e.to_string()))?;
    let usage = Usage::of_reply(
        &reply.value,
        m.price_of(reply.value.model.as_deref()),
        1.0,
        Some(reply.latency.as_secs_f64() * 1000.0),
    );
    STATS.usage(&usage);
    Ok(CachedGeneration {
        response: Some(reply.value.content),
        trajectory: None,
        usage,
    })
}
