//! The key table: for every `evalsql.judge.*` / `evalsql.target.*` setting, its name, type
//! ([`Kind`]: how a value is parsed and what is allowed), default, who may set it
//! ([`Access`]) and what it does. `SET` and `SHOW` go through [`KEYS`]; a statement's
//! settings are read by key constant (e.g. [`MAX_CONCURRENCY`]) with the default from here.

use std::path::PathBuf;

use crate::llm::request::DEFAULT_AZURE_API_VERSION;
use crate::llm::tokens::Tokenizer;

/// Who may set a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Any session: what its own queries ask of the judge (model, temperature, thresholds,
    /// rubric pins).
    Anyone,
    /// Any session; a client of a shared server only at or below the operator's value, and
    /// then it limits that client's own queries (never the process-wide limiter).
    Lower,
    /// Any session; a client of a shared server only at or above the operator's value (a
    /// guarantee it may make stricter, never looser).
    Raise,
    /// The operator only: where calls and keys go, files written, limits every client
    /// shares.
    Operator,
    /// The operator, and the Ballista scheduler for the jobs it hands out (the live executor
    /// count).
    Cluster,
}

/// A key's type: how its value is parsed and what is allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Text,
    Url,
    /// A positive integer.
    Count,
    /// A non-negative integer (0 = none, where a budget).
    Budget,
    /// Seconds, a number above 0 (fractions allowed), at most a day.
    Seconds,
    /// A number from 0 to 2.
    Temperature,
    /// An integer or `none`.
    Seed,
    /// A file path or `off`.
    Cache,
    /// URL prefixes separated by commas, or `none`.
    Urls,
    /// Any finite number.
    Number,
    /// A rubric version, a positive integer.
    Version,
    /// A non-negative integer, 0 = no limit (a budget a client may only lower).
    Limit,
    /// Dollars: a non-negative number; as a budget, 0 = no limit.
    Dollars,
    /// A share from 0 to 1.
    Fraction,
    /// true or false.
    Flag,
    /// A token encoding: o200k_base, cl100k_base or approximate.
    Tokenizer,
    /// online or batch.
    Mode,
    /// mean, median or majority.
    Aggregate,
}

impl Kind {
    pub(crate) fn expected(self) -> &'static str {
        match self {
            Kind::Text => "text",
            Kind::Url => "a URL",
            Kind::Count => "expected a positive integer",
            Kind::Budget => "expected a non-negative integer",
            Kind::Seconds => "expected seconds, a number above 0 (at most 86400)",
            Kind::Temperature => "expected a number from 0 to 2",
            Kind::Seed => "expected an integer or 'none'",
            Kind::Cache => "a path or 'off'",
            Kind::Urls => "URL prefixes separated by commas, or 'none'",
            Kind::Number => "expected a number",
            Kind::Version => "expected a rubric version (a positive integer)",
            Kind::Limit => "expected a non-negative integer (0 = no limit)",
            Kind::Dollars => "expected a non-negative number of dollars",
            Kind::Fraction => "expected a number from 0 to 1",
            Kind::Flag => "expected true or false",
            Kind::Tokenizer => "expected o200k_base, cl100k_base or approximate",
            Kind::Mode => "expected 'online' or 'batch'",
            Kind::Aggregate => "expected 'mean', 'median' or 'majority'",
        }
    }

    pub(crate) fn parse(self, text: &str) -> Option<Value> {
        Some(match self {
            Kind::Text => Value::Text(text.to_string()),
            Kind::Url => {
                if !(text.starts_with("http://") || text.starts_with("https://")) {
                    return None;
                }
                Value::Text(text.to_string())
            }
            Kind::Count => Value::Int(text.parse::<u64>().ok().filter(|&n| n >= 1)?),
            Kind::Budget => Value::Int(text.parse::<u64>().ok()?),
            Kind::Seconds => Value::Float(
                text.parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0)?,
            ),
            Kind::Temperature => Value::Float(
                text.parse::<f64>()
                    .ok()
                    .filter(|t| t.is_finite() && (0.0..=2.0).contains(t))?,
            ),
            Kind::Seed if is_none_word(text) => Value::Seed(None),
            Kind::Seed => Value::Seed(Some(text.parse().ok()?)),
            Kind::Cache if is_none_word(text) => Value::Path(None),
            Kind::Cache => Value::Path(Some(PathBuf::from(text))),
            Kind::Urls => Value::Urls(
                text.split(',')
                    .map(str::trim)
                    .filter(|u| !u.is_empty() && !is_none_word(u))
                    .map(str::to_string)
                    .collect(),
            ),
            Kind::Number => Value::Float(text.parse::<f64>().ok().filter(|n| n.is_finite())?),
            Kind::Version => Value::Int(text.parse::<u32>().ok().filter(|&v| v >= 1)?.into()),
            Kind::Limit => Value::Int(text.parse::<u64>().ok()?),
            Kind::Dollars => Value::Float(
                text.parse::<f64>()
                    .ok()
                    .filter(|d| d.is_finite() && *d >= 0.0)?,
            ),
            Kind::Fraction => Value::Float(
                text.parse::<f64>()
                    .ok()
                    .filter(|f| f.is_finite() && (0.0..=1.0).contains(f))?,
            ),
            Kind::Flag => Value::Bool(match text.to_ascii_lowercase().as_str() {
                "true" | "on" | "yes" | "1" => true,
                "false" | "off" | "no" | "0" => false,
                _ => return None,
            }),
            Kind::Tokenizer => {
                Tokenizer::named(text)?;
                Value::Text(text.to_ascii_lowercase())
            }
            Kind::Aggregate => {
                PanelAggregate::named(text)?;
                Value::Text(text.to_ascii_lowercase())
            }
            Kind::Mode => Value::Bool(match text.to_ascii_lowercase().as_str() {
                "batch" => true,
                "online" => false,
                _ => return None,
            }),
        })
    }

    /// Whether 0 means "no limit" (a client's lowered value compares as infinity).
    pub(crate) fn zero_is_unlimited(self) -> bool {
        matches!(self, Kind::Limit | Kind::Dollars)
    }
}

/// A parsed setting.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Text(String),
    Int(u64),
    Float(f64),
    Seed(Option<i64>),
    Path(Option<PathBuf>),
    Urls(Vec<String>),
    Bool(bool),
}

impl Value {
    /// The value as a number, for comparing limits.
    pub(crate) fn number(&self) -> Option<f64> {
        match self {
            Value::Int(n) => Some(*n as f64),
            Value::Float(x) => Some(*x),
            _ => None,
        }
    }
}

/// One settable key.
#[derive(Debug)]
pub struct Key {
    /// The namespace: `judge`, `target`, or both (the call limits).
    pub namespaces: &'static [&'static str],
    pub name: &'static str,
    pub(crate) kind: Kind,
    /// The default, written as a `SET` value would be: what a statement reads when the
    /// session did not set the key (empty: none, or from the environment, as the
    /// description says). The only place a key's default is written.
    pub default: &'static str,
    pub description: &'static str,
    pub access: Access,
}

impl Key {
    /// The default as a value (`None`: the table gives none).
    pub(crate) fn default_value(&self) -> Option<Value> {
        if self.default.is_empty() {
            None
        } else {
            self.kind.parse(self.default)
        }
    }
}

const JUDGE: &[&str] = &["judge"];
const TARGET: &[&str] = &["target"];
const BOTH: &[&str] = &["judge", "target"];

/// Every key, with its type, default, description and who may set it: `SET` and `SHOW`
/// go through this list, and a statement's settings are read from it by key (a
/// [`Key`] constant below), its default included.
pub const KEYS: &[&Key] = &[
    &JUDGE_MODEL,
    &JUDGE_BASE_URL,
    &AZURE_ENDPOINT,
    &AZURE_DEPLOYMENT,
    &API_VERSION,
    &THRESHOLD,
    &TARGET_MODEL,
    &TARGET_BASE_URL,
    &ALLOWED_URLS,
    &TEMPERATURE,
    &SEED,
    &CACHE,
    &MAX_CONCURRENCY,
    &REQUESTS_PER_MINUTE,
    &TOKENS_PER_MINUTE,
    &EXECUTORS,
    &TIMEOUT,
    &MAX_RETRIES,
    &MAX_RESPONSE_BYTES,
    &MAX_INPUT_BYTES,
    &DEADLINE,
    &JUDGE_MAX_COMPLETION_TOKENS,
    &TARGET_MAX_COMPLETION_TOKENS,
    &PRICE_INPUT_PER_MTOK,
    &PRICE_CACHED_INPUT_PER_MTOK,
    &PRICE_OUTPUT_PER_MTOK,
    &BATCH_DISCOUNT,
    &TOKENIZER,
    &DRY_RUN,
    &SAMPLES,
    &PANEL,
    &PANEL_AGGREGATE,
    &PANEL_MIN_OK,
    &MODE,
    &FUSE,
    &CASCADE,
    &CASCADE_SAMPLES,
    &CASCADE_AGREEMENT,
    &CASCADE_DELTA,
    &CASCADE_TOLERANCE,
    &BATCH_WAIT,
    &BATCH_POLL_INTERVAL,
    &BATCH_MAX_LINES,
    &MAX_COST_USD,
    &MAX_CALLS,
    &MAX_TOKENS,
];

pub const JUDGE_MODEL: Key = Key {
    namespaces: JUDGE,
    name: "model",
    kind: Kind::Text,
    default: "",
    access: Access::Anyone,
    description: "Judge model (EVALSQL_JUDGE_MODEL)",
};

pub const JUDGE_BASE_URL: Key = Key {
    namespaces: JUDGE,
    name: "base_url",
    kind: Kind::Url,
    default: "",
    access: Access::Operator,
    description: "OpenAI-compatible API root, e.g. http://localhost:8000/v1 (OPENAI_BASE_URL)",
};

pub const AZURE_ENDPOINT: Key = Key {
    namespaces: JUDGE,
    name: "azure_endpoint",
    kind: Kind::Url,
    default: "",
    access: Access::Operator,
    description: "Azure OpenAI resource endpoint (AZURE_OPENAI_ENDPOINT)",
};

pub const AZURE_DEPLOYMENT: Key = Key {
    namespaces: JUDGE,
    name: "azure_deployment",
    kind: Kind::Text,
    default: "",
    access: Access::Anyone,
    description: "Azure OpenAI deployment (AZURE_OPENAI_DEPLOYMENT)",
};

pub const API_VERSION: Key = Key {
    namespaces: JUDGE,
    name: "api_version",
    kind: Kind::Text,
    default: DEFAULT_AZURE_API_VERSION,
    access: Access::Anyone,
    description: "Azure OpenAI API version (OPENAI_API_VERSION)",
};

pub const THRESHOLD: Key = Key {
    namespaces: JUDGE,
    name: "threshold",
    kind: Kind::Number,
    default: "",
    access: Access::Anyone,
    description: "Pass threshold of the 1-5 quality judges (default: the rubric's own, 3 for the built-in ones); evalsql.judge.<metric>.threshold for one judge (safety judges: the highest passing severity, default 3)",
};

pub const TARGET_MODEL: Key = Key {
    namespaces: TARGET,
    name: "model",
    kind: Kind::Text,
    default: "",
    access: Access::Anyone,
    description: "Model under test for generate() (EVALSQL_TARGET_MODEL)",
};

pub const TARGET_BASE_URL: Key = Key {
    namespaces: TARGET,
    name: "base_url",
    kind: Kind::Url,
    default: "",
    access: Access::Operator,
    description: "OpenAI-compatible API root of the model under test (EVALSQL_TARGET_BASE_URL)",
};

pub const ALLOWED_URLS: Key = Key {
    namespaces: TARGET,
    name: "allowed_urls",
    kind: Kind::Urls,
    default: "",
    access: Access::Operator,
    description: "URL prefixes invoke_app may call, separated by commas, or 'none' (default: any; evalsql serve sets it from --app-url)",
};

pub const TEMPERATURE: Key = Key {
    namespaces: BOTH,
    name: "temperature",
    kind: Kind::Temperature,
    default: "0",
    access: Access::Anyone,
    description: "Sampling temperature (default 0)",
};

pub const SEED: Key = Key {
    namespaces: BOTH,
    name: "seed",
    kind: Kind::Seed,
    default: "42",
    access: Access::Anyone,
    description: "Sampling seed, or 'none' (default 42)",
};

pub const CACHE: Key = Key {
    namespaces: BOTH,
    name: "cache",
    kind: Kind::Cache,
    default: "",
    access: Access::Operator,
    description: "Cache file, or 'off' (EVALSQL_JUDGE_CACHE; default in the user cache dir; targets: the judge's)",
};

pub const MAX_CONCURRENCY: Key = Key {
    namespaces: BOTH,
    name: "max_concurrency",
    kind: Kind::Count,
    default: "16",
    access: Access::Lower,
    description: "Calls in flight per endpoint + model, process-wide (default 16); a client of a shared server may only lower it for its own queries",
};

pub const REQUESTS_PER_MINUTE: Key = Key {
    namespaces: BOTH,
    name: "requests_per_minute",
    kind: Kind::Budget,
    default: "0",
    access: Access::Operator,
    description: "Requests-per-minute budget (0 = none)",
};

pub const TOKENS_PER_MINUTE: Key = Key {
    namespaces: BOTH,
    name: "tokens_per_minute",
    kind: Kind::Budget,
    default: "0",
    access: Access::Operator,
    description: "Tokens-per-minute budget (0 = none)",
};

pub const EXECUTORS: Key = Key {
    namespaces: BOTH,
    name: "executors",
    kind: Kind::Count,
    default: "1",
    access: Access::Cluster,
    description: "Processes sharing these limits: the Ballista scheduler sets it to its live executors, each of which then takes 1/N of max_concurrency and the per-minute budgets (default 1)",
};

pub const TIMEOUT: Key = Key {
    namespaces: BOTH,
    name: "timeout",
    kind: Kind::Seconds,
    default: "120",
    access: Access::Lower,
    description: "Seconds one attempt may take (default 120)",
};

pub const MAX_RETRIES: Key = Key {
    namespaces: BOTH,
    name: "max_retries",
    kind: Kind::Budget,
    default: "6",
    access: Access::Lower,
    description: "Retries after the first attempt (default 6)",
};

pub const MAX_RESPONSE_BYTES: Key = Key {
    namespaces: BOTH,
    name: "max_response_bytes",
    kind: Kind::Count,
    default: "16777216",
    access: Access::Operator,
    description: "The largest response body read; a larger one makes the row an error (default 16 MiB)",
};

pub const MAX_INPUT_BYTES: Key = Key {
    namespaces: BOTH,
    name: "max_input_bytes",
    kind: Kind::Count,
    default: "1048576",
    access: Access::Lower,
    description: "The largest request text sent (rubric and inputs, or prompt); a larger row is an error, not a request (default 1 MiB)",
};

pub const DEADLINE: Key = Key {
    namespaces: BOTH,
    name: "deadline",
    kind: Kind::Seconds,
    default: "600",
    access: Access::Lower,
    description: "Seconds one call may take in all, attempts and waits between them included; then the row is an error (default 600)",
};

pub const JUDGE_MAX_COMPLETION_TOKENS: Key = Key {
    namespaces: JUDGE,
    name: "max_completion_tokens",
    kind: Kind::Count,
    default: "512",
    access: Access::Lower,
    description: "The most tokens a judge reply may have, sent with every request (default 512); also the worst case a budget reserves",
};

pub const TARGET_MAX_COMPLETION_TOKENS: Key = Key {
    namespaces: TARGET,
    name: "max_completion_tokens",
    kind: Kind::Limit,
    default: "0",
    access: Access::Lower,
    description: "The most tokens a generate() reply may have (0 = the model's own limit)",
};

pub const PRICE_INPUT_PER_MTOK: Key = Key {
    namespaces: BOTH,
    name: "price_input_per_mtok",
    kind: Kind::Dollars,
    default: "",
    access: Access::Operator,
    description: "Dollars per million prompt tokens of the session's model (default: EVALSQL_PRICES, then the built-in table)",
};

pub const PRICE_CACHED_INPUT_PER_MTOK: Key = Key {
    namespaces: BOTH,
    name: "price_cached_input_per_mtok",
    kind: Kind::Dollars,
    default: "",
    access: Access::Operator,
    description: "Dollars per million prompt tokens served from the provider's prompt cache (default: the input price)",
};

pub const PRICE_OUTPUT_PER_MTOK: Key = Key {
    namespaces: BOTH,
    name: "price_output_per_mtok",
    kind: Kind::Dollars,
    default: "",
    access: Access::Operator,
    description: "Dollars per million completion tokens of the session's model",
};

pub const BATCH_DISCOUNT: Key = Key {
    namespaces: JUDGE,
    name: "batch_discount",
    kind: Kind::Fraction,
    default: "0.5",
    access: Access::Operator,
    description: "What batch-mode calls cost as a share of online ones (default 0.5)",
};

pub const TOKENIZER: Key = Key {
    namespaces: JUDGE,
    name: "tokenizer",
    kind: Kind::Tokenizer,
    default: "",
    access: Access::Anyone,
    description: "Encoding that counts prompt tokens for estimates and budgets: o200k_base, cl100k_base or approximate (default: by the model's name)",
};

pub const DRY_RUN: Key = Key {
    namespaces: JUDGE,
    name: "dry_run",
    kind: Kind::Flag,
    default: "false",
    access: Access::Anyone,
    description: "Send nothing: every judge row is status 'skipped', error 'dry run', with its estimated tokens and cost_usd",
};

pub const FUSE: Key = Key {
    namespaces: JUDGE,
    name: "fuse",
    kind: Kind::Flag,
    default: "false",
    access: Access::Anyone,
    description: "Judge the rubric metrics a statement calls on the same row in one request per row (every rubric in one prompt, one JSON answer keyed by metric; its own cache entries): a different measurement from one call per metric, much cheaper (also EVALSQL_JUDGE_FUSE)",
};

pub const CASCADE: Key = Key {
    namespaces: JUDGE,
    name: "cascade",
    kind: Kind::Text,
    default: "",
    access: Access::Anyone,
    description: "A smaller model that judges every row first: rows it is confident about keep its score, the others are escalated to evalsql.judge.model; needs a stored calibration (judge_calibrate); a client of a shared server only among --allowed-model",
};

pub const CASCADE_SAMPLES: Key = Key {
    namespaces: JUDGE,
    name: "cascade_samples",
    kind: Kind::Count,
    default: "3",
    access: Access::Lower,
    description: "Samples of the cascade's small model whose agreement is its confidence, where the endpoint returns no log-probabilities (2 to 50); a calibration holds for the count it was made with",
};

pub const CASCADE_AGREEMENT: Key = Key {
    namespaces: JUDGE,
    name: "cascade_agreement",
    kind: Kind::Fraction,
    default: "0.9",
    access: Access::Raise,
    description: "The agreement with the main model a cascade's calibration certifies for the rows the small model keeps (a client of a shared server may only raise it)",
};

pub const CASCADE_DELTA: Key = Key {
    namespaces: JUDGE,
    name: "cascade_delta",
    kind: Kind::Fraction,
    default: "0.05",
    access: Access::Lower,
    description: "The chance a cascade's calibration may certify an agreement it does not have: the bound is one-sided Clopper-Pearson at level 1 - cascade_delta (a client of a shared server may only lower it)",
};

pub const CASCADE_TOLERANCE: Key = Key {
    namespaces: JUDGE,
    name: "cascade_tolerance",
    kind: Kind::Budget,
    default: "0",
    access: Access::Lower,
    description: "Score points within which the small and the main model agree in a cascade (0: the same score; a client of a shared server may only lower it)",
};

pub const SAMPLES: Key = Key {
    namespaces: JUDGE,
    name: "samples",
    kind: Kind::Count,
    default: "1",
    access: Access::Lower,
    description: "Judge each row this many times with consecutive seeds (each its own call and cache entry): the score is the mean (the lower median for severities and flags); _details.samples and spread show them (1 to 50; a client of a shared server may only lower it)",
};

pub const PANEL: Key = Key {
    namespaces: JUDGE,
    name: "panel",
    kind: Kind::Text,
    default: "",
    access: Access::Operator,
    description: "Judge each row with each of these models (names separated by commas), each through its own limiter and cache entries, and combine them by panel_aggregate; _details.panel lists them (operator-only: it chooses where calls go)",
};

pub const PANEL_AGGREGATE: Key = Key {
    namespaces: JUDGE,
    name: "panel_aggregate",
    kind: Kind::Aggregate,
    default: "mean",
    access: Access::Anyone,
    description: "How a panel's scores combine: 'mean' (default), 'median' or 'majority' (the most common score, ties to the lower)",
};

pub const PANEL_MIN_OK: Key = Key {
    namespaces: JUDGE,
    name: "panel_min_ok",
    kind: Kind::Count,
    default: "",
    access: Access::Anyone,
    description: "Panel members that must succeed for a row to have a score (default: all)",
};

pub const MODE: Key = Key {
    namespaces: JUDGE,
    name: "mode",
    kind: Kind::Mode,
    default: "online",
    access: Access::Anyone,
    description: "'online' (a request per call) or 'batch' (calls not cached go through the provider's Batch API at its batch price and are waited for) (EVALSQL_JUDGE_MODE)",
};

pub const BATCH_WAIT: Key = Key {
    namespaces: JUDGE,
    name: "batch_wait",
    kind: Kind::Flag,
    default: "true",
    access: Access::Anyone,
    description: "Batch mode: wait for the batches; false returns at once with pending rows skipped ('pending in batch <id>'), picked up by a later run",
};

pub const BATCH_POLL_INTERVAL: Key = Key {
    namespaces: JUDGE,
    name: "batch_poll_interval",
    kind: Kind::Seconds,
    default: "30",
    access: Access::Operator,
    description: "Batch mode: seconds between looks at a batch's status (default 30)",
};

pub const BATCH_MAX_LINES: Key = Key {
    namespaces: JUDGE,
    name: "batch_max_lines",
    kind: Kind::Count,
    default: "50000",
    access: Access::Operator,
    description: "Batch mode: the most requests in one batch file (default 50000, OpenAI's limit; files are also kept under 190 MB)",
};

pub const MAX_COST_USD: Key = Key {
    namespaces: JUDGE,
    name: "max_cost_usd",
    kind: Kind::Dollars,
    default: "0",
    access: Access::Lower,
    description: "Dollars the judge calls of one query may spend (0 = no limit); rows beyond it are skipped",
};

pub const MAX_CALLS: Key = Key {
    namespaces: JUDGE,
    name: "max_calls",
    kind: Kind::Limit,
    default: "0",
    access: Access::Lower,
    description: "Judge calls one query may send (0 = no limit); rows beyond it are skipped",
};

pub const MAX_TOKENS: Key = Key {
    namespaces: JUDGE,
    name: "max_tokens",
    kind: Kind::Limit,
    default: "0",
    access: Access::Lower,
    description: "Prompt plus completion tokens the judge calls of one query may use (0 = no limit)",
};

/// The keys every judge metric has: `evalsql.judge.<metric>.threshold` and `.version`.
pub(crate) const PER_METRIC: &[(&str, Kind, &str)] = &[
    ("threshold", Kind::Number, "Pass threshold of one judge"),
    (
        "version",
        Kind::Version,
        "Pinned rubric version of one judge",
    ),
];

/// A setting name as DataFusion's `SET` and `SHOW` read it: lower-cased with Unicode rules
/// (`str::to_lowercase`), so the Kelvin sign `K` (U+212A) is an ASCII `k`. Every
/// comparison of setting names goes through this one rule: checking a name under another
/// (ASCII) rule than the one that stores it would let `tO\u{212A}ENS_PER_MINUTE` pass a
/// check as an unknown key and then be set as `tokens_per_minute`.
pub fn setting_case(name: &str) -> String {
    name.to_lowercase()
}

/// What a full key (after `evalsql.`, e.g. `judge.model`, `judge.fluency.threshold`, any
/// case) is.
pub(crate) fn lookup(key: &str) -> Option<(Kind, Access)> {
    let key = setting_case(key);
    let (namespace, name) = key.split_once('.')?;
    if let Some(k) = KEYS
        .iter()
        .find(|k| k.name == name && k.namespaces.contains(&namespace))
    {
        return Some((k.kind, k.access));
    }
    if namespace != "judge" {
        return None;
    }
    let (metric, suffix) = name.rsplit_once('.')?;
    if metric.is_empty() || metric.contains('.') {
        return None;
    }
    PER_METRIC
        .iter()
        .find(|(s, _, _)| *s == suffix)
        .map(|(_, kind, _)| (*kind, Access::Anyone))
}

/// Whether only the operator may set `name` (a full setting name, e.g.
/// `evalsql.judge.base_url`, any case): `serve` refuses it from clients and a Ballista
/// scheduler refuses a job that sets it.
pub fn operator_only(name: &str) -> bool {
    let lower = setting_case(name);
    lower
        .strip_prefix("evalsql.")
        .and_then(lookup)
        .is_some_and(|(_, access)| matches!(access, Access::Operator | Access::Cluster))
}

/// Settings that choose the model the operator's key pays for: a client of `evalsql serve`
/// or a Ballista job may set them only to a model the operator allowed (`--allowed-model`).
pub const MODEL_SETTINGS: [&str; 4] = [
    "evalsql.judge.model",
    "evalsql.judge.azure_deployment",
    "evalsql.judge.cascade",
    "evalsql.target.model",
];

pub(crate) fn is_none_word(value: &str) -> bool {
    matches!(value.to_ascii_lowercase().as_str(), "none" | "off" | "null")
}

/// How a panel's scores combine into a row's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PanelAggregate {
    Mean,
    /// The median (the lower one for severities and flags, which are whole numbers).
    Median,
    /// The most common score; ties go to the lower score.
    Majority,
}

impl PanelAggregate {
    pub fn named(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "mean" => Some(Self::Mean),
            "median" => Some(Self::Median),
            "majority" => Some(Self::Majority),
            _ => None,
        }
    }
}
