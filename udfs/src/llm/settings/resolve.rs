//! What one call needs: a statement's settings resolved — session values over the
//! environment over the key table's defaults — into [`JudgeSettings`] (the judges) and
//! [`TargetSettings`] (`generate`, `invoke_app`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use datafusion::common::{DataFusionError, Result, plan_err};
use datafusion::config::ConfigOptions;
use tokio::sync::Semaphore;

use super::keys::*;
use super::session::{JudgeOptions, Read};
use crate::common::excerpt::redact_url;
use crate::common::{EnvLookup, process_env};
use crate::llm::budget::{Budget, Ledger};
use crate::llm::policy::{CallLimits, CallPolicy};
use crate::llm::pricing::{self, Price};
use crate::llm::request::{ApiKey, Endpoint};
use crate::llm::retry::{BackoffConfig, RetryPolicy};
use crate::llm::tokens::Tokenizer;

/// The most judgements of one row repeated judging asks for.
pub const MAX_SAMPLES: usize = 50;

/// Whether the session fuses judge calls (`evalsql.judge.fuse`, else `EVALSQL_JUDGE_FUSE`).
pub fn fuse_enabled(options: &ConfigOptions) -> bool {
    let session = options.extensions.get::<JudgeOptions>();
    let judge = Read::new(session, "judge");
    match judge.set(&FUSE) {
        Some(Value::Bool(b)) => *b,
        _ => match process_env("EVALSQL_JUDGE_FUSE") {
            Some(v) => matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "true" | "1" | "yes" | "on"
            ),
            None => judge.flag(&FUSE).unwrap_or_default(),
        },
    }
}

/// Everything one judge call needs, resolved from session settings and the environment.
#[derive(Debug, Clone)]
pub struct JudgeSettings {
    pub endpoint: Endpoint,
    pub model: String,
    /// How calls go out: limits, retries, sampling.
    pub limits: CallLimits,
    /// The cache file, `None` when the cache is off.
    pub cache: Option<PathBuf>,
    /// What the session's model costs (`None`: no price known for its name).
    pub price: Option<Price>,
    /// Whether `price` came from `SET` (then it holds whatever model answers).
    price_set: bool,
    /// What batch-mode calls cost as a share of online ones.
    pub batch_discount: f64,
    /// How prompt tokens are counted before a call.
    pub tokenizer: Tokenizer,
    /// Send nothing; estimate.
    pub dry_run: bool,
    /// Batch mode's settings; `None` online.
    pub batch: Option<BatchSettings>,
    /// Judgements per row (repeated judging).
    pub samples: usize,
    /// The panel's models (empty: the session's model alone), how their scores combine,
    /// and how many must succeed.
    pub panel: Vec<String>,
    pub panel_aggregate: PanelAggregate,
    pub panel_min_ok: Option<usize>,
    /// The cascade's small model and guarantee (`evalsql.judge.cascade*`), if any.
    pub cascade: Option<Cascade>,
    /// Ask for the score token's log-probabilities (the cascade's small model: its
    /// confidence); part of the cache key.
    pub logprobs: bool,
    /// The limits of one query, and what it has spent.
    pub budget: Budget,
    pub ledger: Arc<Ledger>,
    threshold: Option<f64>,
    thresholds: BTreeMap<String, f64>,
    versions: BTreeMap<String, u32>,
}

/// A judge cascade: `model` judges first; rows it is not confident about are escalated.
#[derive(Debug, Clone, PartialEq)]
pub struct Cascade {
    pub model: String,
    /// Samples whose agreement is the confidence, where there are no log-probabilities.
    pub samples: usize,
    /// The certified agreement of kept rows, and the chance the certificate is wrong.
    pub agreement: f64,
    pub delta: f64,
    /// Score points within which two scores agree.
    pub tolerance: i64,
}

/// How batch mode submits and waits.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchSettings {
    /// Wait for the batches (else return pending rows at once).
    pub wait: bool,
    pub poll_interval: Duration,
    /// The most lines in one batch file.
    pub max_lines: usize,
    /// The most bytes in one batch file.
    pub max_bytes: usize,
}

/// OpenAI's and Azure's batch files may be 200 MB; this stays clear of it.
pub const BATCH_MAX_BYTES: usize = 190_000_000;

/// The rubric versions a session pins (`evalsql.judge.<metric>.version`), by metric.
pub fn pinned_versions(session: Option<&JudgeOptions>) -> BTreeMap<String, u32> {
    let mut versions = BTreeMap::new();
    for (k, setting) in session.map(|s| &s.values).into_iter().flatten() {
        let metric = k
            .strip_prefix("judge.")
            .and_then(|rest| rest.rsplit_once('.'))
            .filter(|(_, key)| *key == "version");
        if let (Value::Int(v), Some((metric, _))) = (&setting.value, metric) {
            versions.insert(metric.to_string(), *v as u32);
        }
    }
    versions
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
        let judge = Read::new(session, "judge");
        let (endpoint, model) = endpoint_and_model(function, judge, env)?;
        let limits = call_limits(session, "judge");
        let mut thresholds = BTreeMap::new();
        for (k, setting) in session.map(|s| &s.values).into_iter().flatten() {
            if let (Value::Float(t), Some((metric, "threshold"))) = (
                &setting.value,
                k.strip_prefix("judge.")
                    .and_then(|rest| rest.rsplit_once('.')),
            ) {
                thresholds.insert(metric.to_string(), *t);
            }
        }
        let versions = pinned_versions(session);
        let (price, price_set) = session_price(judge, &model)
            .map_err(|e| DataFusionError::Plan(format!("{function}: {e}")))?;
        let tokenizer = match judge.text(&TOKENIZER) {
            Some(name) => Tokenizer::named(&name).unwrap_or(Tokenizer::Approximate),
            None => Tokenizer::for_model(&model),
        };
        // A budget of 0 is no budget.
        let budget = Budget {
            max_cost_usd: judge.number(&MAX_COST_USD).filter(|&d| d > 0.0),
            max_calls: judge.int(&MAX_CALLS).filter(|&n| n > 0),
            max_tokens: judge.int(&MAX_TOKENS).filter(|&n| n > 0),
        };
        if budget.max_cost_usd.is_some() && price.is_none() {
            return plan_err!(
                "{function}: evalsql.judge.max_cost_usd needs the price of model {model}, which is not in the built-in table: SET evalsql.judge.price_input_per_mtok, evalsql.judge.price_cached_input_per_mtok and evalsql.judge.price_output_per_mtok, or name it in a prices file (EVALSQL_PRICES)"
            );
        }
        let samples = judge.int(&SAMPLES).unwrap_or_default() as usize;
        if samples > MAX_SAMPLES {
            return plan_err!(
                "{function}: evalsql.judge.samples must be at most {MAX_SAMPLES}, got {samples}"
            );
        }
        if samples > 1 && limits.seed.is_none() {
            return plan_err!(
                "{function}: evalsql.judge.samples = {samples} judges each row with seeds one \
                 apart; it needs a seed (SET evalsql.judge.seed = 42)"
            );
        }
        let panel: Vec<String> = judge
            .text(&PANEL)
            .map(|p| {
                p.split(',')
                    .map(str::trim)
                    .filter(|m| !m.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let panel_min_ok = judge.int(&PANEL_MIN_OK).map(|n| n as usize);
        if let Some(k) = panel_min_ok
            && k > panel.len().max(1)
        {
            return plan_err!(
                "{function}: evalsql.judge.panel_min_ok = {k} is more than the panel's {} \
                 models",
                panel.len().max(1)
            );
        }
        let cascade = judge.text(&CASCADE).filter(|m| !m.trim().is_empty());
        let cascade = match cascade {
            None => None,
            Some(small) if small.trim() == model => {
                return plan_err!(
                    "{function}: evalsql.judge.cascade names the main model {model}: a cascade's \
                     first judge is a smaller model"
                );
            }
            Some(small) => Some(Cascade {
                model: small.trim().to_string(),
                samples: (judge.int(&CASCADE_SAMPLES).unwrap_or(3) as usize).clamp(2, MAX_SAMPLES),
                agreement: judge.number(&CASCADE_AGREEMENT).unwrap_or(0.9),
                delta: judge.number(&CASCADE_DELTA).unwrap_or(0.05),
                tolerance: judge.int(&CASCADE_TOLERANCE).unwrap_or(0) as i64,
            }),
        };
        if let Some(c) = &cascade
            && (c.agreement <= 0.0 || c.delta <= 0.0 || c.delta >= 1.0)
        {
            return plan_err!(
                "{function}: a cascade needs evalsql.judge.cascade_agreement above 0 and \
                 cascade_delta between 0 and 1 (exclusive), got {} and {}",
                c.agreement,
                c.delta
            );
        }
        Ok(Self {
            cascade,
            logprobs: false,
            panel,
            panel_aggregate: judge
                .text(&PANEL_AGGREGATE)
                .and_then(|a| PanelAggregate::named(&a))
                .unwrap_or(PanelAggregate::Mean),
            panel_min_ok,
            endpoint,
            model,
            limits,
            cache: cache_path(session, env),
            price,
            price_set,
            batch_discount: judge.number(&BATCH_DISCOUNT).unwrap_or_default(),
            tokenizer,
            dry_run: judge.flag(&DRY_RUN).unwrap_or_default(),
            batch: batch_settings(judge, env)
                .map_err(|e| DataFusionError::Plan(format!("{function}: {e}")))?,
            samples,
            budget,
            ledger: session.map_or_else(Default::default, |s| Arc::clone(&s.ledger)),
            threshold: judge.number(&THRESHOLD),
            thresholds,
            versions,
        })
    }

    /// These settings for panel member `model`: the model (on Azure, the deployment of that
    /// name) and its price; everything else as the session's.
    pub fn for_model(&self, model: &str) -> JudgeSettings {
        let mut s = self.clone();
        s.model = model.to_string();
        if let Endpoint::Azure { deployment, .. } = &mut s.endpoint {
            *deployment = Some(model.to_string());
        }
        if !s.price_set {
            let file = pricing::prices_file().ok().flatten();
            s.price = pricing::lookup(file, model);
        }
        s.tokenizer = Tokenizer::for_model(model);
        s
    }

    /// The price of a call the endpoint says `reply_model` answered: the session's price,
    /// or, for a deployment whose own name has none, the reply model's.
    pub fn price_of(&self, reply_model: Option<&str>) -> Option<Price> {
        if self.price_set {
            return self.price;
        }
        self.price.or_else(|| {
            let file = pricing::prices_file().ok().flatten();
            reply_model.and_then(|m| pricing::lookup(file, m))
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

    /// The policy of this call's attempts (retries, deadline, body cap, session ceiling).
    pub fn policy(&self) -> CallPolicy {
        CallPolicy::of(&self.limits)
    }

    /// The process-wide limiter key: calls to one endpoint for one model share a limit.
    pub fn limiter_key(&self) -> String {
        self.endpoint.limiter_key(&self.model)
    }

    /// The generation parameters that change a judgement, for the cache key.
    pub fn cache_params(&self) -> Vec<(String, String)> {
        let mut params = vec![
            ("endpoint".to_string(), self.endpoint.url(&self.model)),
            (
                "temperature".to_string(),
                format!("{:?}", self.limits.temperature),
            ),
        ];
        if let Some(seed) = self.limits.seed {
            params.push(("seed".to_string(), seed.to_string()));
        }
        if self.logprobs {
            params.push(("logprobs".to_string(), "true".to_string()));
        }
        params
    }
}

/// The judge's endpoint and model: `SET` wins over the environment; within each, Azure is
/// chosen by its endpoint.
fn endpoint_and_model(function: &str, judge: Read, env: EnvLookup) -> Result<(Endpoint, String)> {
    let model_setting = judge.text_or(&JUDGE_MODEL, env("EVALSQL_JUDGE_MODEL"));
    // SET wins over the environment; within each, Azure is chosen by its endpoint.
    let azure_endpoint = match (judge.text(&AZURE_ENDPOINT), judge.text(&JUDGE_BASE_URL)) {
        (Some(e), _) => Some(e),
        (None, Some(_)) => None,
        (None, None) => env("AZURE_OPENAI_ENDPOINT"),
    };
    Ok(if let Some(azure) = azure_endpoint {
        let deployment = judge.text_or(&AZURE_DEPLOYMENT, env("AZURE_OPENAI_DEPLOYMENT"));
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
        let api_version = judge
            .text_or(&API_VERSION, env("OPENAI_API_VERSION"))
            .unwrap_or_default();
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
        let base_url = judge.text_or(&JUDGE_BASE_URL, env("OPENAI_BASE_URL"));
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
    })
}

/// The judge cache file of a session (`None`: the cache is off): `SET evalsql.judge.cache`,
/// else `EVALSQL_JUDGE_CACHE`, else [`default_cache_path`].
pub fn cache_path(session: Option<&JudgeOptions>, env: EnvLookup) -> Option<PathBuf> {
    if let Some(p) = Read::new(session, "judge").path(&CACHE) {
        return p;
    }
    match env("EVALSQL_JUDGE_CACHE") {
        Some(v) if is_none_word(&v) => None,
        Some(v) => Some(PathBuf::from(v)),
        None => default_cache_path(),
    }
}

/// Batch mode's settings, when the session (else `EVALSQL_JUDGE_MODE`) asks for it.
fn batch_settings(
    judge: Read,
    env: EnvLookup,
) -> std::result::Result<Option<BatchSettings>, String> {
    let batch = match (judge.set(&MODE), env("EVALSQL_JUDGE_MODE")) {
        (Some(Value::Bool(batch)), _) => *batch,
        (_, Some(v)) => match MODE.kind.parse(v.trim()) {
            Some(Value::Bool(batch)) => batch,
            _ => {
                return Err(format!(
                    "EVALSQL_JUDGE_MODE: {}, got {}",
                    MODE.kind.expected(),
                    crate::common::truncate_for_error(&v)
                ));
            }
        },
        _ => judge.flag(&MODE).unwrap_or_default(),
    };
    if !batch {
        return Ok(None);
    }
    Ok(Some(BatchSettings {
        wait: judge.flag(&BATCH_WAIT).unwrap_or_default(),
        poll_interval: judge.seconds(&BATCH_POLL_INTERVAL).unwrap_or_default(),
        max_lines: judge.int(&BATCH_MAX_LINES).unwrap_or_default() as usize,
        max_bytes: BATCH_MAX_BYTES,
    }))
}

/// The price of `model` in a session: the `SET` price keys of the namespace (for whatever
/// model is called; the cached price defaults to the input price), else the prices file,
/// else the built-in table. The flag says it came from `SET`.
fn session_price(read: Read, model: &str) -> std::result::Result<(Option<Price>, bool), String> {
    match (
        read.number(&PRICE_INPUT_PER_MTOK),
        read.number(&PRICE_CACHED_INPUT_PER_MTOK),
        read.number(&PRICE_OUTPUT_PER_MTOK),
    ) {
        (Some(input), cached, Some(output)) => {
            return Ok((
                Some(Price {
                    input,
                    cached_input: cached.unwrap_or(input),
                    output,
                }),
                true,
            ));
        }
        (None, None, None) => {}
        _ => {
            let namespace = read.namespace();
            return Err(format!(
                "a price needs both evalsql.{namespace}.price_input_per_mtok and evalsql.{namespace}.price_output_per_mtok"
            ));
        }
    }
    let file = pricing::prices_file()?;
    Ok((pricing::lookup(file, model), false))
}

/// The call limits of one namespace (`judge` or `target`) of a session.
pub fn call_limits(session: Option<&JudgeOptions>, namespace: &'static str) -> CallLimits {
    let read = Read::new(session, namespace);
    let int = |key: &Key| read.int(key).unwrap_or_default();
    let bytes = |key: &Key| int(key).min(usize::MAX as u64) as usize;
    let retry = RetryPolicy {
        backoff: BackoffConfig::default(),
        timeout: read.seconds(&TIMEOUT).unwrap_or_default(),
        max_retries: int(&MAX_RETRIES) as usize,
    };
    // The limits are totals over the processes that share them (a Ballista cluster's
    // executors): this process takes its share, rounded down so the sum stays within the
    // total, and at least 1.
    let sharing = int(&EXECUTORS).max(1);
    let share = |total: u64| (total / sharing).max(1);
    // A client's own ceiling is a total over the executors too; its semaphore is made on
    // first use (the executor count arrives with the job) and shared by the session.
    let session_slots = session.and_then(|s| s.cap(namespace)).map(|(n, slots)| {
        Arc::clone(slots.get_or_init(|| Arc::new(Semaphore::new(share(n as u64) as usize))))
    });
    let completion = if namespace == "judge" {
        &JUDGE_MAX_COMPLETION_TOKENS
    } else {
        &TARGET_MAX_COMPLETION_TOKENS
    };
    CallLimits {
        max_concurrency: share(int(&MAX_CONCURRENCY)) as usize,
        requests_per_minute: Some(int(&REQUESTS_PER_MINUTE))
            .filter(|&n| n > 0)
            .map(|n| share(n).min(u32::MAX as u64) as u32),
        tokens_per_minute: Some(int(&TOKENS_PER_MINUTE)).filter(|&n| n > 0).map(share),
        retry,
        deadline: read.seconds(&DEADLINE).unwrap_or_default(),
        max_input_bytes: bytes(&MAX_INPUT_BYTES),
        max_response_bytes: bytes(&MAX_RESPONSE_BYTES),
        temperature: read.number(&TEMPERATURE).unwrap_or_default(),
        seed: read.seed(&SEED).flatten(),
        // 0: the model's own limit.
        max_completion_tokens: Some(int(completion))
            .filter(|&n| n > 0)
            .map(|n| n.min(u32::MAX as u64) as u32),
        session_slots,
    }
}

/// Settings of the targets: `generate` (the model under test) and `invoke_app`.
#[derive(Debug, Clone)]
pub struct TargetSettings {
    /// The model under test: its endpoint and name (`None` when not configured).
    pub model: Option<(Endpoint, String)>,
    /// How calls go out: limits, retries, sampling.
    pub limits: CallLimits,
    pub cache: Option<PathBuf>,
    /// URL prefixes `invoke_app` may call (`None`: any).
    pub allowed_urls: Option<Vec<String>>,
    /// The model under test's price (see [`session_price`]), or what is wrong with it.
    price: std::result::Result<(Option<Price>, bool), String>,
    /// The session is a dry run (`evalsql.judge.dry_run`): targets call nothing either.
    pub dry_run: bool,
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
        let (target, judge) = (Read::new(session, "target"), Read::new(session, "judge"));
        // A key travels only to the endpoint configured beside it: the target's own URL gets
        // the target's key, the judge's URL the judge's key, and OpenAI's API either.
        let (base_url, api_key) =
            if let Some(url) = target.text_or(&TARGET_BASE_URL, env("EVALSQL_TARGET_BASE_URL")) {
                (Some(url), env("EVALSQL_TARGET_API_KEY"))
            } else if let Some(url) = judge.text_or(&JUDGE_BASE_URL, env("OPENAI_BASE_URL")) {
                (Some(url), env("OPENAI_API_KEY"))
            } else {
                (
                    None,
                    env("EVALSQL_TARGET_API_KEY").or_else(|| env("OPENAI_API_KEY")),
                )
            };
        let api_key = api_key.map(ApiKey::new);
        let model = target
            .text_or(&TARGET_MODEL, env("EVALSQL_TARGET_MODEL"))
            .or_else(|| judge.text_or(&JUDGE_MODEL, env("EVALSQL_JUDGE_MODEL")));
        let model = match (model, base_url.is_some() || api_key.is_some()) {
            (Some(m), true) => Some((Endpoint::OpenAi { base_url, api_key }, m)),
            _ => None,
        };
        let price = match &model {
            Some((_, name)) => session_price(target, name),
            None => Ok((None, false)),
        };
        TargetSettings {
            model,
            allowed_urls: target.urls(&ALLOWED_URLS),
            limits: call_limits(session, "target"),
            cache: target
                .path(&CACHE)
                .unwrap_or_else(|| cache_path(session, env)),
            price,
            dry_run: judge.flag(&DRY_RUN).unwrap_or_default(),
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
        let (price, price_set) = self
            .price
            .clone()
            .map_err(|e| DataFusionError::Plan(format!("{function}: {e}")))?;
        Ok(JudgeSettings {
            tokenizer: Tokenizer::for_model(&model),
            endpoint,
            model,
            limits: self.limits.clone(),
            cache: self.cache.clone(),
            price,
            price_set,
            batch_discount: Read::new(None, "judge")
                .number(&BATCH_DISCOUNT)
                .unwrap_or_default(),
            dry_run: false,
            batch: None,
            samples: 1,
            panel: Vec::new(),
            panel_aggregate: PanelAggregate::Mean,
            panel_min_ok: None,
            cascade: None,
            logprobs: false,
            budget: Budget::default(),
            ledger: Arc::default(),
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
