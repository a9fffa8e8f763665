//! Where judge settings come from: the environment, overridden per session by
//! `SET evalsql.judge.<key> = ...` (a DataFusion config extension, [`JudgeOptions`]).
//!
//! [`JudgeSettings::resolve`] merges the two into what one call needs. API keys come only from
//! the environment: a `SET` statement can end up in a history file, a log or a BI tool's
//! query list, an environment variable does not.

use std::any::Any;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use datafusion::common::config::{ConfigEntry, ConfigExtension, ExtensionOptions};
use datafusion::common::{DataFusionError, Result, plan_err};
use datafusion::config::ConfigOptions;

use super::request::{ApiKey, DEFAULT_AZURE_API_VERSION, Endpoint};
use super::retry::{BackoffConfig, RetryPolicy};

/// Default bound on judge calls in flight per endpoint + model.
pub const DEFAULT_MAX_CONCURRENCY: usize = 16;
/// Default sampling seed: judgements should repeat, and a fixed seed helps where supported.
pub const DEFAULT_SEED: i64 = 42;

/// The session keys (after `evalsql.judge.`), with what each one means.
const KEYS: &[(&str, &str)] = &[
    ("model", "Judge model (EVALSQL_JUDGE_MODEL)"),
    (
        "base_url",
        "OpenAI-compatible API root, e.g. http://localhost:8000/v1 (OPENAI_BASE_URL)",
    ),
    (
        "azure_endpoint",
        "Azure OpenAI resource endpoint (AZURE_OPENAI_ENDPOINT)",
    ),
    (
        "azure_deployment",
        "Azure OpenAI deployment (AZURE_OPENAI_DEPLOYMENT)",
    ),
    (
        "api_version",
        "Azure OpenAI API version (OPENAI_API_VERSION)",
    ),
    (
        "max_concurrency",
        "Judge calls in flight per endpoint + model, process-wide (default 16)",
    ),
    ("temperature", "Sampling temperature (default 0)"),
    ("seed", "Sampling seed, or 'none' (default 42)"),
    (
        "cache",
        "Judge cache file, or 'off' (EVALSQL_JUDGE_CACHE; default in the user cache dir)",
    ),
    (
        "threshold",
        "Pass threshold of the 1-5 quality judges; evalsql.judge.<metric>.threshold for one judge (safety judges: the highest passing severity, default 3)",
    ),
];

/// The call limits both namespaces take (read by [`CallLimits`]).
const LIMIT_KEYS: &[(&str, &str)] = &[
    (
        "requests_per_minute",
        "Requests-per-minute budget (0 = none)",
    ),
    ("tokens_per_minute", "Tokens-per-minute budget (0 = none)"),
    (
        "executors",
        "Processes sharing these limits: the Ballista scheduler sets it to its live executors, each of which then takes 1/N of max_concurrency and the per-minute budgets (default 1)",
    ),
    ("timeout", "Seconds one attempt may take (default 120)"),
    ("max_retries", "Retries after the first attempt (default 6)"),
];

/// Every key of the judge's namespace.
fn judge_keys() -> impl Iterator<Item = &'static (&'static str, &'static str)> {
    KEYS.iter().chain(LIMIT_KEYS)
}

/// Every key of the targets' namespace.
fn target_keys() -> impl Iterator<Item = &'static (&'static str, &'static str)> {
    TARGET_KEYS.iter().chain(LIMIT_KEYS)
}

/// The session keys of the targets (after `evalsql.target.`): the model under test
/// (`generate`) and the apps called by `invoke_app`.
const TARGET_KEYS: &[(&str, &str)] = &[
    (
        "model",
        "Model under test for generate() (EVALSQL_TARGET_MODEL)",
    ),
    (
        "base_url",
        "OpenAI-compatible API root of the model under test (EVALSQL_TARGET_BASE_URL)",
    ),
    (
        "max_concurrency",
        "Target calls in flight per endpoint, process-wide (default 16)",
    ),
    (
        "temperature",
        "Sampling temperature of generate() (default 0)",
    ),
    (
        "seed",
        "Sampling seed of generate(), or 'none' (default 42)",
    ),
    (
        "cache",
        "Cache file of target results, or 'off' (default: the judge cache)",
    ),
    (
        "allowed_urls",
        "URL prefixes invoke_app may call, separated by commas, or 'none' (default: any; evalsql serve sets it from --app-url)",
    ),
];

/// `SET evalsql.judge.*` values of one session. Only what was set is stored; the rest comes
/// from the environment or defaults when a call is made.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JudgeOptions {
    values: BTreeMap<String, String>,
}

impl ConfigExtension for JudgeOptions {
    const PREFIX: &'static str = "evalsql";
}

impl ExtensionOptions for JudgeOptions {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn cloned(&self) -> Box<dyn ExtensionOptions> {
        Box::new(self.clone())
    }

    fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let full = format!("evalsql.{key}");
        if let Some(name) = key.strip_prefix("target.") {
            let name = name.to_ascii_lowercase();
            let value = value.trim();
            if !target_keys().any(|(k, _)| *k == name) {
                let keys: Vec<&str> = target_keys().map(|(k, _)| *k).collect();
                return plan_err!(
                    "unknown setting {full}; evalsql.target. takes {}",
                    keys.join(", ")
                );
            }
            validate(&name, value).map_err(|why| {
                DataFusionError::Plan(format!("{full}: {why}, got {}", quote(value)))
            })?;
            let stored = format!("target.{name}");
            if value.is_empty() {
                self.values.remove(&stored);
            } else {
                self.values.insert(stored, value.to_string());
            }
            return Ok(());
        }
        let Some(name) = key.strip_prefix("judge.") else {
            return plan_err!(
                "unknown setting {full}: evalsql settings live under evalsql.judge. and \
                 evalsql.target."
            );
        };
        let name = name.to_ascii_lowercase();
        let value = value.trim();
        let per_metric = |suffix: &str| {
            name.strip_suffix(suffix)
                .is_some_and(|m| !m.is_empty() && !m.contains('.'))
        };
        let known = judge_keys().any(|(k, _)| *k == name)
            || per_metric(".threshold")
            || per_metric(".version");
        if !known {
            let keys: Vec<&str> = judge_keys().map(|(k, _)| *k).collect();
            return plan_err!(
                "unknown setting {full}; evalsql.judge. takes {}, <metric>.threshold or \
                 <metric>.version",
                keys.join(", ")
            );
        }
        validate(&name, value)
            .map_err(|why| DataFusionError::Plan(format!("{full}: {why}, got {}", quote(value))))?;
        if value.is_empty() {
            self.values.remove(&name);
        } else {
            self.values.insert(name, value.to_string());
        }
        Ok(())
    }

    fn entries(&self) -> Vec<ConfigEntry> {
        let mut out: Vec<ConfigEntry> = judge_keys()
            .map(|(k, doc)| ConfigEntry {
                key: format!("evalsql.judge.{k}"),
                value: self.values.get(*k).cloned(),
                description: doc,
            })
            .collect();
        out.extend(target_keys().map(|(k, doc)| ConfigEntry {
            key: format!("evalsql.target.{k}"),
            value: self.values.get(&format!("target.{k}")).cloned(),
            description: doc,
        }));
        for (k, v) in &self.values {
            let description = if k.ends_with(".threshold") {
                "Pass threshold of one judge"
            } else if k.ends_with(".version") {
                "Pinned rubric version of one judge"
            } else {
                continue;
            };
            out.push(ConfigEntry {
                key: format!("evalsql.judge.{k}"),
                value: Some(v.clone()),
                description,
            });
        }
        out
    }
}

impl JudgeOptions {
    /// The value set for `key` (after `evalsql.judge.`), if any.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }
}

fn quote(value: &str) -> String {
    crate::common::truncate_for_error(value)
}

/// Checks a value's form at `SET` time, so a typo fails there and not mid-query.
fn validate(name: &str, value: &str) -> std::result::Result<(), &'static str> {
    if value.is_empty() {
        return Ok(());
    }
    let ok = match name {
        "max_concurrency" | "executors" => value.parse::<usize>().is_ok_and(|n| n >= 1),
        "requests_per_minute" => value.parse::<u32>().is_ok(),
        "tokens_per_minute" | "max_retries" => value.parse::<u64>().is_ok(),
        "timeout" => value
            .parse::<f64>()
            .is_ok_and(|s| s.is_finite() && s > 0.0 && s <= 86_400.0),
        "temperature" => value
            .parse::<f64>()
            .is_ok_and(|t| t.is_finite() && (0.0..=2.0).contains(&t)),
        "seed" => is_none_word(value) || value.parse::<i64>().is_ok(),
        n if n.ends_with(".version") => value.parse::<u32>().is_ok_and(|v| v >= 1),
        n if n == "threshold" || n.ends_with(".threshold") => {
            value.parse::<f64>().is_ok_and(f64::is_finite)
        }
        _ => true,
    };
    if ok {
        return Ok(());
    }
    Err(match name {
        "max_concurrency" | "executors" => "expected a positive integer",
        "requests_per_minute" | "tokens_per_minute" | "max_retries" => {
            "expected a non-negative integer"
        }
        "timeout" => "expected seconds, a number above 0",
        "temperature" => "expected a number from 0 to 2",
        "seed" => "expected an integer or 'none'",
        n if n.ends_with(".version") => "expected a rubric version (a positive integer)",
        _ => "expected a number",
    })
}

fn is_none_word(value: &str) -> bool {
    matches!(value.to_ascii_lowercase().as_str(), "none" | "off" | "null")
}

/// Everything one judge call needs, resolved from session settings and the environment.
#[derive(Debug, Clone)]
pub struct JudgeSettings {
    pub endpoint: Endpoint,
    pub model: String,
    pub max_concurrency: usize,
    pub requests_per_minute: Option<u32>,
    pub tokens_per_minute: Option<u64>,
    pub retry: RetryPolicy,
    pub temperature: f64,
    pub seed: Option<i64>,
    /// The cache file, `None` when the cache is off.
    pub cache: Option<PathBuf>,
    threshold: Option<f64>,
    thresholds: BTreeMap<String, f64>,
    versions: BTreeMap<String, u32>,
}

/// Reads an environment variable, treating empty as unset.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment as an [`EnvLookup`].
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl JudgeSettings {
    /// Resolves the settings of a session (`options` may lack the extension: then only the
    /// environment counts). `function` names the SQL function in errors.
    pub fn from_config(function: &str, options: &ConfigOptions) -> Result<Self> {
        let session = options.extensions.get::<JudgeOptions>();
        Self::resolve(function, session, &process_env)
    }

    /// Resolves settings from session values (which win) and `env`.
    pub fn resolve(function: &str, session: Option<&JudgeOptions>, env: EnvLookup) -> Result<Self> {
        let set = |key: &str| session.and_then(|s| s.get(key)).map(str::to_string);
        let model_setting = set("model").or_else(|| env("EVALSQL_JUDGE_MODEL"));

        // SET wins over the environment; within each, Azure is chosen by its endpoint.
        let azure_endpoint = match (set("azure_endpoint"), set("base_url")) {
            (Some(e), _) => Some(e),
            (None, Some(_)) => None,
            (None, None) => env("AZURE_OPENAI_ENDPOINT"),
        };
        let (endpoint, model) = if let Some(azure) = azure_endpoint {
            let deployment = set("azure_deployment").or_else(|| env("AZURE_OPENAI_DEPLOYMENT"));
            let Some(key) = env("AZURE_OPENAI_API_KEY") else {
                return plan_err!(
                    "{function}: the Azure OpenAI judge needs AZURE_OPENAI_API_KEY (endpoint {})",
                    redact_url(&azure)
                );
            };
            let Some(model) = model_setting.clone().or_else(|| deployment.clone()) else {
                return plan_err!(
                    "{function}: the Azure OpenAI judge needs a deployment: set \
                     AZURE_OPENAI_DEPLOYMENT (or EVALSQL_JUDGE_MODEL, or SET \
                     evalsql.judge.azure_deployment = '...')"
                );
            };
            let api_version = set("api_version")
                .or_else(|| env("OPENAI_API_VERSION"))
                .unwrap_or_else(|| DEFAULT_AZURE_API_VERSION.to_string());
            (
                Endpoint::Azure {
                    endpoint: azure,
                    deployment,
                    api_version,
                    api_key: ApiKey::new(key),
                },
                model,
            )
        } else {
            let base_url = set("base_url").or_else(|| env("OPENAI_BASE_URL"));
            let api_key = env("OPENAI_API_KEY").map(ApiKey::new);
            match (&base_url, &api_key, &model_setting) {
                (None, None, _) => {
                    return plan_err!(
                        "{function}: no LLM judge is configured. Set OPENAI_API_KEY and \
                         EVALSQL_JUDGE_MODEL (plus OPENAI_BASE_URL for another \
                         OpenAI-compatible server), or AZURE_OPENAI_ENDPOINT, \
                         AZURE_OPENAI_API_KEY and AZURE_OPENAI_DEPLOYMENT; per session, \
                         SET evalsql.judge.base_url / evalsql.judge.model"
                    );
                }
                (_, _, None) => {
                    return plan_err!(
                        "{function}: no judge model is configured: set EVALSQL_JUDGE_MODEL \
                         (or SET evalsql.judge.model = '...')"
                    );
                }
                _ => {}
            }
            (
                Endpoint::OpenAi { base_url, api_key },
                model_setting.clone().unwrap_or_default(),
            )
        };

        let limits = CallLimits::read(&set);
        let cache = cache_path(session, env);
        let mut thresholds = BTreeMap::new();
        let mut versions = BTreeMap::new();
        if let Some(s) = session {
            for (k, v) in &s.values {
                if let (Some(metric), Ok(t)) = (k.strip_suffix(".threshold"), v.parse()) {
                    thresholds.insert(metric.to_string(), t);
                }
                if let (Some(metric), Ok(n)) = (k.strip_suffix(".version"), v.parse()) {
                    versions.insert(metric.to_string(), n);
                }
            }
        }
        Ok(Self {
            endpoint,
            model,
            max_concurrency: limits.max_concurrency,
            requests_per_minute: limits.requests_per_minute,
            tokens_per_minute: limits.tokens_per_minute,
            retry: limits.retry,
            temperature: limits.temperature,
            seed: limits.seed,
            cache,
            threshold: set("threshold").and_then(|v| v.parse().ok()),
            thresholds,
            versions,
        })
    }

    /// The rubric version pinned for `metric` (`SET evalsql.judge.<metric>.version`).
    pub fn pinned_version(&self, metric: &str) -> Option<u32> {
        self.versions.get(metric).copied()
    }

    /// The pass threshold of a safety metric (the highest severity that passes): its own
    /// setting, else `default`. The global threshold is for the 1-5 quality scores only.
    pub fn own_threshold(&self, metric: &str, default: f64) -> f64 {
        self.thresholds.get(metric).copied().unwrap_or(default)
    }

    /// The pass threshold of `metric`: its own setting, else the global one, else `default`.
    pub fn threshold(&self, metric: &str, default: f64) -> f64 {
        self.thresholds
            .get(metric)
            .copied()
            .or(self.threshold)
            .unwrap_or(default)
    }

    /// The process-wide limiter key: calls to one endpoint for one model share a limit.
    pub fn limiter_key(&self) -> String {
        self.endpoint.limiter_key(&self.model)
    }

    /// The generation parameters that change a judgement, for the cache key.
    pub fn cache_params(&self) -> Vec<(String, String)> {
        let mut params = vec![
            ("endpoint".to_string(), self.endpoint.url(&self.model)),
            ("temperature".to_string(), format!("{:?}", self.temperature)),
        ];
        if let Some(seed) = self.seed {
            params.push(("seed".to_string(), seed.to_string()));
        }
        params
    }
}

/// The judge cache file of a session (`None`: the cache is off): `SET evalsql.judge.cache`,
/// else `EVALSQL_JUDGE_CACHE`, else [`default_cache_path`].
pub fn cache_path(session: Option<&JudgeOptions>, env: EnvLookup) -> Option<PathBuf> {
    match session
        .and_then(|s| s.get("cache"))
        .map(str::to_string)
        .or_else(|| env("EVALSQL_JUDGE_CACHE"))
    {
        Some(v) if is_none_word(&v) => None,
        Some(v) => Some(PathBuf::from(v)),
        None => default_cache_path(),
    }
}

/// The call settings the judge and the targets share, read from one namespace's values
/// (`evalsql.judge.*` or `evalsql.target.*`), with their defaults.
struct CallLimits {
    max_concurrency: usize,
    requests_per_minute: Option<u32>,
    tokens_per_minute: Option<u64>,
    retry: RetryPolicy,
    temperature: f64,
    seed: Option<i64>,
}

impl CallLimits {
    fn read(set: &dyn Fn(&str) -> Option<String>) -> Self {
        let mut retry = RetryPolicy {
            backoff: BackoffConfig::default(),
            ..RetryPolicy::default()
        };
        if let Some(secs) = set("timeout").and_then(|v| v.parse::<f64>().ok()) {
            retry.timeout = Duration::from_secs_f64(secs);
        }
        if let Some(n) = set("max_retries").and_then(|v| v.parse().ok()) {
            retry.max_retries = n;
        }
        // The limits are totals over the processes that share them (a Ballista cluster's
        // executors): this process takes its share, rounded down so the sum stays within
        // the total, and at least 1.
        let sharing: u64 = set("executors")
            .and_then(|v| v.parse().ok())
            .filter(|&n| n >= 1)
            .unwrap_or(1);
        let share = |total: u64| (total / sharing).max(1);
        CallLimits {
            max_concurrency: share(
                set("max_concurrency")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(DEFAULT_MAX_CONCURRENCY as u64),
            ) as usize,
            requests_per_minute: set("requests_per_minute")
                .and_then(|v| v.parse::<u32>().ok())
                .filter(|&n| n > 0)
                .map(|n| share(n.into()) as u32),
            tokens_per_minute: set("tokens_per_minute")
                .and_then(|v| v.parse::<u64>().ok())
                .filter(|&n| n > 0)
                .map(share),
            retry,
            temperature: set("temperature")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0),
            seed: match set("seed") {
                Some(v) if is_none_word(&v) => None,
                Some(v) => v.parse().ok(),
                None => Some(DEFAULT_SEED),
            },
        }
    }
}

/// Settings of the targets: `generate` (the model under test) and `invoke_app`.
#[derive(Debug, Clone)]
pub struct TargetSettings {
    /// The model under test: its endpoint and name (`None` when not configured).
    pub model: Option<(Endpoint, String)>,
    pub max_concurrency: usize,
    pub requests_per_minute: Option<u32>,
    pub tokens_per_minute: Option<u64>,
    pub retry: RetryPolicy,
    pub temperature: f64,
    pub seed: Option<i64>,
    pub cache: Option<PathBuf>,
    /// URL prefixes `invoke_app` may call (`None`: any).
    pub allowed_urls: Option<Vec<String>>,
}

impl TargetSettings {
    /// Resolves the target settings of a session.
    pub fn from_config(options: &ConfigOptions) -> Self {
        let session = options.extensions.get::<JudgeOptions>();
        Self::resolve(session, &process_env)
    }

    /// `SET evalsql.target.*` first, then `EVALSQL_TARGET_*`, then the judge's OpenAI
    /// settings (the session's judge base URL and model, `OPENAI_BASE_URL`,
    /// `OPENAI_API_KEY`, `EVALSQL_JUDGE_MODEL`).
    pub fn resolve(session: Option<&JudgeOptions>, env: EnvLookup) -> Self {
        let set = |key: &str| {
            session
                .and_then(|s| s.get(&format!("target.{key}")))
                .map(str::to_string)
        };
        let base_url = set("base_url")
            .or_else(|| env("EVALSQL_TARGET_BASE_URL"))
            .or_else(|| session.and_then(|s| s.get("base_url")).map(str::to_string))
            .or_else(|| env("OPENAI_BASE_URL"));
        let api_key = env("EVALSQL_TARGET_API_KEY")
            .or_else(|| env("OPENAI_API_KEY"))
            .map(ApiKey::new);
        let model = set("model")
            .or_else(|| env("EVALSQL_TARGET_MODEL"))
            .or_else(|| session.and_then(|s| s.get("model")).map(str::to_string))
            .or_else(|| env("EVALSQL_JUDGE_MODEL"));
        let model = match (model, base_url.is_some() || api_key.is_some()) {
            (Some(m), true) => Some((Endpoint::OpenAi { base_url, api_key }, m)),
            _ => None,
        };
        let limits = CallLimits::read(&set);
        let cache = match set("cache") {
            Some(v) if is_none_word(&v) => None,
            Some(v) => Some(PathBuf::from(v)),
            None => cache_path(session, env),
        };
        let allowed_urls = set("allowed_urls").map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|u| !u.is_empty() && !is_none_word(u))
                .map(str::to_string)
                .collect()
        });
        TargetSettings {
            model,
            allowed_urls,
            max_concurrency: limits.max_concurrency,
            requests_per_minute: limits.requests_per_minute,
            tokens_per_minute: limits.tokens_per_minute,
            retry: limits.retry,
            temperature: limits.temperature,
            seed: limits.seed,
            cache,
        }
    }

    /// Judge-style settings for calling the model under test, or the error saying what to set.
    pub fn model_settings(&self, function: &str) -> Result<JudgeSettings> {
        let Some((endpoint, model)) = self.model.clone() else {
            return plan_err!(
                "{function}: no model under test is configured: set EVALSQL_TARGET_MODEL and \
                 EVALSQL_TARGET_BASE_URL or EVALSQL_TARGET_API_KEY (or the judge's \
                 OPENAI_BASE_URL / OPENAI_API_KEY / EVALSQL_JUDGE_MODEL), or SET \
                 evalsql.target.model / evalsql.target.base_url"
            );
        };
        Ok(JudgeSettings {
            endpoint,
            model,
            max_concurrency: self.max_concurrency,
            requests_per_minute: self.requests_per_minute,
            tokens_per_minute: self.tokens_per_minute,
            retry: self.retry,
            temperature: self.temperature,
            seed: self.seed,
            cache: self.cache.clone(),
            threshold: None,
            thresholds: BTreeMap::new(),
            versions: BTreeMap::new(),
        })
    }
}

/// The default cache file: `<user cache dir>/evalsql/judge-cache.sqlite`.
pub fn default_cache_path() -> Option<PathBuf> {
    let base = process_env("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| process_env("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .or_else(|| process_env("LOCALAPPDATA").map(PathBuf::from))?;
    Some(base.join("evalsql").join("judge-cache.sqlite"))
}

/// A URL without `user:password@`, for messages.
fn redact_url(url: &str) -> String {
    match (url.find("://"), url.find('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}***@{}", &url[..scheme + 3], &url[at + 1..])
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn nothing_configured_names_the_variables() {
        let err = JudgeSettings::resolve("groundedness", None, &env_of(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("groundedness"), "{err}");
        assert!(err.contains("OPENAI_API_KEY"), "{err}");
        assert!(err.contains("EVALSQL_JUDGE_MODEL"), "{err}");
        assert!(err.contains("AZURE_OPENAI_ENDPOINT"), "{err}");
    }

    #[test]
    fn openai_from_env_and_session_overrides() {
        let env = env_of(&[
            ("OPENAI_API_KEY", "sk-test-123456789"),
            ("EVALSQL_JUDGE_MODEL", "gpt-4o-mini"),
            ("EVALSQL_JUDGE_CACHE", "off"),
        ]);
        let s = JudgeSettings::resolve("f", None, &env).unwrap();
        assert_eq!(s.model, "gpt-4o-mini");
        assert_eq!(s.max_concurrency, DEFAULT_MAX_CONCURRENCY);
        assert_eq!(s.seed, Some(DEFAULT_SEED));
        assert_eq!(s.cache, None);
        assert_eq!(
            s.endpoint.url(&s.model),
            "https://api.openai.com/v1/chat/completions"
        );

        let mut opts = JudgeOptions::default();
        opts.set("judge.model", "judge-2").unwrap();
        opts.set("judge.base_url", "http://127.0.0.1:9/v1").unwrap();
        opts.set("judge.max_concurrency", "32").unwrap();
        opts.set("judge.seed", "none").unwrap();
        opts.set("judge.threshold", "4").unwrap();
        opts.set("judge.fluency.threshold", "2").unwrap();
        let s = JudgeSettings::resolve("f", Some(&opts), &env).unwrap();
        assert_eq!(s.model, "judge-2");
        assert_eq!(s.max_concurrency, 32);
        assert_eq!(s.seed, None);
        assert_eq!(
            s.endpoint.url("x"),
            "http://127.0.0.1:9/v1/chat/completions"
        );
        assert_eq!(s.threshold("fluency", 3.0), 2.0);
        assert_eq!(s.threshold("coherence", 3.0), 4.0);

        // Limits shared by N processes: each takes 1/N, rounded down, at least 1.
        opts.set("judge.requests_per_minute", "100").unwrap();
        opts.set("judge.tokens_per_minute", "9").unwrap();
        opts.set("judge.executors", "3").unwrap();
        let s = JudgeSettings::resolve("f", Some(&opts), &env).unwrap();
        assert_eq!(s.max_concurrency, 10);
        assert_eq!(s.requests_per_minute, Some(33));
        assert_eq!(s.tokens_per_minute, Some(3));
        opts.set("judge.executors", "64").unwrap();
        let s = JudgeSettings::resolve("f", Some(&opts), &env).unwrap();
        assert_eq!(s.max_concurrency, 1);
        assert!(opts.set("judge.executors", "0").is_err());
    }

    #[test]
    fn azure_from_env() {
        let env = env_of(&[
            ("AZURE_OPENAI_ENDPOINT", "https://res.openai.azure.com/"),
            ("AZURE_OPENAI_API_KEY", "0123456789abcdef0123456789abcdef"),
            ("AZURE_OPENAI_DEPLOYMENT", "gpt4o-judge"),
        ]);
        let s = JudgeSettings::resolve("f", None, &env).unwrap();
        assert_eq!(s.model, "gpt4o-judge");
        assert!(
            s.endpoint
                .url(&s.model)
                .starts_with("https://res.openai.azure.com/openai/deployments/gpt4o-judge/")
        );
        // A session base_url switches to an OpenAI-compatible server.
        let mut opts = JudgeOptions::default();
        opts.set("judge.base_url", "http://localhost:1/v1").unwrap();
        opts.set("judge.model", "m").unwrap();
        let s = JudgeSettings::resolve("f", Some(&opts), &env).unwrap();
        assert!(matches!(s.endpoint, Endpoint::OpenAi { .. }));
    }

    #[test]
    fn bad_settings_fail_at_set_time() {
        let mut opts = JudgeOptions::default();
        let err = opts
            .set("judge.max_concurrency", "0")
            .unwrap_err()
            .to_string();
        assert!(err.contains("evalsql.judge.max_concurrency"), "{err}");
        assert!(opts.set("judge.timeout", "-1").is_err());
        assert!(opts.set("judge.nonsense", "1").is_err());
        assert!(opts.set("other", "1").is_err());
        assert!(opts.set("judge.groundedness.threshold", "x").is_err());
        opts.set("judge.groundedness.threshold", "4").unwrap();
        assert!(
            opts.entries()
                .iter()
                .any(|e| e.key == "evalsql.judge.groundedness.threshold")
        );
    }
}
